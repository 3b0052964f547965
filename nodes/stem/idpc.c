/* idpc: integrated differential phase contrast (whole -> whole).
 *
 * Input: a centre-of-mass field in scan coordinates (dpc's com_row_rot,
 * com_col_rot), taken as the gradient of a potential per scan step:
 * C = grad(phi), C_r = d phi / d row, C_c = d phi / d col. Fourier
 * integration (nodes/common/fourier_integral.h: k in cycles per scan step,
 * `highpass` h turns it into a high-pass |k|^2 / (|k|^2 + h^2) that
 * suppresses the slow drifts residual descan leaves, `mirror` extends the
 * field by even reflection so the integral is not wrapped around a
 * non-periodic scan).
 *
 * FFTW plans are made in prepare (single-threaded) with FFTW_ESTIMATE.
 *
 * On CUDA the integration runs on the device (shaders/cuda/stem/idpc.cu and
 * fourier_integral.cu,
 * cuFFT loaded at run time); where cuFFT cannot be loaded the CUDA kernel
 * runs the host path on copies of the field and notes why ("backend"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/cuda_glue.h"
#include "nodes/common/fourier_integral.h"
#include "nodes/common/frame_ports.h"
#include "shaders/cuda/common/cufft_warm_up.h"
#include "shaders/cuda/stem/idpc.h"

#define IDPC_PARAMS(P)                                                                        \
  P(FLOAT, scale, "1",                                                                        \
    "multiplies the integral; 2 pi step / H turns synthetic_4dstem's CoM (detector pixels) "  \
    "into radians",                                                                           \
    NULL)                                                                                     \
  P(FLOAT, highpass, "0",                                                                     \
    "h in cycles per scan step, [0, 0.5]: divides by |k|^2 + h^2 (high-pass "                 \
    "|k|^2/(|k|^2+h^2))",                                                                     \
    NULL)                                                                                     \
  P(BOOL, mirror, "true",                                                                     \
    "extend the field by even reflection of phi to 2R x 2C (no wrap-around at the edges)",    \
    NULL)
SL_NODE_PARAMS(idpc_params, IDPC_PARAMS)

/* The node's state: the planned transforms. */
typedef sl_fourier_integral idpc_state;

static sl_code idpc_check(const sl_node *n, sl_error *err) {
  const idpc_params *p = idpc_params_of(n);
  double hp = p->highpass, sc = p->scale;
  if (!isfinite(hp) || hp < 0 || hp > 0.5)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'highpass' must be in [0, 0.5] cycles per scan step, got %g", hp);
  if (!isfinite(sc))
    return sl_fail(err, SL_ERR_PIPELINE, "param 'scale' must be a finite number, got %g", sc);
  return SL_OK;
}

static sl_code idpc_infer(sl_node *n, sl_error *err) {
  sl_code rc = idpc_check(n, err);
  if (rc) return rc;
  if ((rc = sl_com_field_check(n, err))) return rc;
  if (n->in[0].dims[0] > (1 << 20) || n->in[0].dims[1] > (1 << 20))
    return sl_fail(err, SL_ERR_PIPELINE, "scan of %lldx%lld is too large for idpc",
                   (long long)n->in[0].dims[0], (long long)n->in[0].dims[1]);
  n->out[0] = sl_desc_make(SL_F64, 2, n->in[0].dims, 0);
  return SL_OK;
}

static void idpc_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)positions;
  memset(c, 0, sizeof *c);
  int64_t rc = sl_desc_elems(&n->in[0]), rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  bool mirror = idpc_params_of(n)->mirror;
  c->bytes_read = 2 * rc * 8;
  c->bytes_written = rc * 8;
  c->ops = sl_fourier_integral_ops(rows, cols, mirror);
  c->state_bytes = sl_fourier_integral_bytes(rows, cols, mirror);
  c->library_bytes = SL_FFTW_PLANNER_BYTES;
  c->device_library_bytes = SL_CUFFT_HOST_BYTES;
#ifdef SLUICE_HAVE_CUDA
  c->device_state_bytes = sl_cuda_idpc_state_bytes(rows, cols, mirror);
#endif
}

static void idpc_release(sl_node *n) {
  idpc_state *s = n->state;
  if (!s) return;
  sl_fourier_integral_free(s);
  free(s);
  n->state = NULL;
}

static sl_code idpc_prepare(sl_node *n, sl_error *err) {
  sl_code rc = idpc_check(n, err);
  if (rc) return rc;
  idpc_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  rc = sl_fourier_integral_init(s, n->in[0].dims[0], n->in[0].dims[1], idpc_params_of(n)->mirror, err);
  if (rc != SL_OK) {
    free(s);
    return rc;
  }
  n->state = s;
  return SL_OK;
}

static idpc_state *idpc_state_of(const sl_kernel_args *a) {
  return a->state ? a->state : a->node->state;
}

static sl_code idpc_cpu(sl_kernel_args *a) {
  idpc_state *s = idpc_state_of(a);
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "idpc: kernel called before prepare");
  const idpc_params *p = idpc_params_of(a->node);
  sl_fourier_integral_run(s, a->in[0], a->in[1], p->highpass, p->scale, a->out[0]);
  return SL_OK;
}

#ifdef SLUICE_HAVE_CUDA
/* CUDA without cuFFT: the host path on host copies of the device field (the
 * download waits for the field's producers; the upload of a pageable buffer
 * is staged before it returns, so the copies can go at once). */
static sl_code idpc_cuda_on_host(sl_kernel_args *a, const char *why) {
  idpc_state *s = idpc_state_of(a);
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "idpc: kernel called before prepare");
  const sl_backend_ops *o = a->backend->ops;
  size_t n = (size_t)(s->rows * s->cols), bytes = n * sizeof(double);
  double *h = malloc(3 * bytes);
  if (!h) return sl_fail(a->err, SL_ERR_NOMEM, "idpc: out of memory for host copies of the field");
  sl_code rc = o->download(a->backend, h, a->in[0], bytes, a->err);
  if (rc == SL_OK) rc = o->download(a->backend, h + n, a->in[1], bytes, a->err);
  if (rc == SL_OK) {
    const idpc_params *p = idpc_params_of(a->node);
    sl_fourier_integral_run(s, h, h + n, p->highpass, p->scale, h + 2 * n);
    rc = o->upload(a->backend, a->out[0], h + 2 * n, bytes, a->err);
  }
  free(h);
  if (rc == SL_OK) sl_node_note((sl_node *)a->node, "backend", "ran on the host (FFTW): %s", why);
  return rc;
}

static sl_code idpc_cuda(sl_kernel_args *a) {
  const sl_node *n = a->node;
  const idpc_params *p = idpc_params_of(n);
  const sl_cuda_idpc_params cp = {.rows = n->in[0].dims[0], .cols = n->in[0].dims[1],
                                  .mirror = p->mirror, .highpass = p->highpass, .scale = p->scale,
                                  .device_state = sl_glue_device_state(a)};
  bool on_device = false;
  char why[512] = "";
  sl_code rc = sl_cuda_idpc(&cp, a, &on_device, why, sizeof why);
  if (rc != SL_OK || on_device) return rc;
  return idpc_cuda_on_host(a, why);
}
#endif

static const sl_port_def idpc_inputs[] = {
    {"com_row", "whole f64 [R, C]: field along scan rows (dpc.com_row_rot)", "pixels", false},
    {"com_col", "whole f64 [R, C]: field along scan columns (dpc.com_col_rot)", "pixels", false},
};
static const sl_port_def idpc_outputs[] = {
    {"phase", "whole f64 [R, C]: scale * integral of the field (grad phase = field), mean 0",
     "pixels*scan steps (times param scale)", false},
};

const sl_node_desc sl_node_idpc = {
    .type = "idpc",
    .doc = "Integrated DPC: Fourier integration of a centre-of-mass field in scan coordinates "
           "into a phase image.",
    SL_PARAMS_DESC(idpc_params),
    .inputs = idpc_inputs, .n_inputs = SL_COUNT_OF(idpc_inputs),
    .outputs = idpc_outputs, .n_outputs = SL_COUNT_OF(idpc_outputs),
    .infer = idpc_infer, .cost = idpc_cost,
    .prepare = idpc_prepare, .release = idpc_release,
    .kernel = {[SL_BACKEND_CPU] = idpc_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(idpc_cuda)},
    .device_warm_up_begin = sl_cufft_warm_up_begin, .device_warm_up_wait = sl_cufft_warm_up_wait,
    .device_warm_up_done = sl_cufft_warm_up_done,
    .scan_image_outputs = 0x1u /* phase */,
};
