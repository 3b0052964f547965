/* idpc: integrated differential phase contrast (whole -> whole).
 *
 * Input: a centre-of-mass field in scan coordinates (dpc's com_row_rot,
 * com_col_rot), taken as the gradient of a potential per scan step:
 * C = grad(phi), C_r = d phi / d row, C_c = d phi / d col. Fourier
 * integration (REFERENCE.md 4), with FFTW's forward sign exp(-2 pi i k x):
 *
 *   phi = scale * Re IFFT[ (k_r F(C_r) + k_c F(C_c)) / (2 pi i (|k|^2 + h^2)) ]
 *
 * k in cycles per scan step (numpy.fft.fftfreq order), the DC term 0, the
 * mean of the result removed. Since F(d phi/d row) = 2 pi i k_r F(phi), an
 * exact gradient field gives phi back with the same sign and scale (scale 1,
 * h 0). h = `highpass` (cycles per scan step) turns the integration into a
 * high-pass filter |k|^2 / (|k|^2 + h^2) of phi (suppresses the slow drifts
 * that residual descan leaves). With `mirror` (default) the fields are
 * extended to 2R x 2C by even reflection of phi (C_r odd in rows, C_c odd in
 * columns) so the integral is not wrapped around a non-periodic scan.
 *
 * FFTW plans are made in prepare (single-threaded) with FFTW_ESTIMATE. */
#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/frame_ports.h"

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

typedef struct idpc_state {
  int64_t rows, cols, pr, pc; /* scan and padded sizes */
  fftw_complex *a, *b;
  fftw_plan fwd, inv; /* in place on a; fwd also run on b through fftw_execute_dft */
} idpc_state;

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

static void padded(const sl_node *n, int64_t *pr, int64_t *pc) {
  int m = idpc_params_of(n)->mirror ? 2 : 1;
  *pr = m * n->in[0].dims[0];
  *pc = m * n->in[0].dims[1];
}

static void idpc_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)positions;
  memset(c, 0, sizeof *c);
  int64_t rc = sl_desc_elems(&n->in[0]), pr, pc;
  padded(n, &pr, &pc);
  double np = (double)(pr * pc);
  c->bytes_read = 2 * rc * 8;
  c->bytes_written = rc * 8;
  c->ops = (int64_t)(3 * 5.0 * np * log2(np > 2 ? np : 2) + 20 * np);
  c->state_bytes = 2 * pr * pc * 16;
}

static void idpc_release(sl_node *n) {
  idpc_state *s = n->state;
  if (!s) return;
  if (s->fwd) fftw_destroy_plan(s->fwd);
  if (s->inv) fftw_destroy_plan(s->inv);
  fftw_free(s->a);
  fftw_free(s->b);
  free(s);
  n->state = NULL;
}

static sl_code idpc_prepare(sl_node *n, sl_error *err) {
  sl_code rc = idpc_check(n, err);
  if (rc) return rc;
  idpc_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  n->state = s;
  s->rows = n->in[0].dims[0];
  s->cols = n->in[0].dims[1];
  padded(n, &s->pr, &s->pc);
  size_t np = (size_t)(s->pr * s->pc);
  s->a = fftw_malloc(np * sizeof(fftw_complex));
  s->b = fftw_malloc(np * sizeof(fftw_complex));
  if (!s->a || !s->b) {
    idpc_release(n);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for two %lldx%lld complex fields",
                   (long long)s->pr, (long long)s->pc);
  }
  s->fwd = fftw_plan_dft_2d((int)s->pr, (int)s->pc, s->a, s->a, FFTW_FORWARD, FFTW_ESTIMATE);
  s->inv = fftw_plan_dft_2d((int)s->pr, (int)s->pc, s->a, s->a, FFTW_BACKWARD, FFTW_ESTIMATE);
  if (!s->fwd || !s->inv) {
    idpc_release(n);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan a %lldx%lld transform",
                   (long long)s->pr, (long long)s->pc);
  }
  return SL_OK;
}

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n. */
static inline double freq(int64_t i, int64_t n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

static sl_code idpc_cpu(sl_kernel_args *a) {
  idpc_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "idpc: kernel called before prepare");
  const double *cr = a->in[0], *cc = a->in[1];
  double *phi = a->out[0];
  const idpc_params *p = idpc_params_of(a->node);
  const double hp = p->highpass, scale = p->scale;
  int64_t R = s->rows, C = s->cols, PR = s->pr, PC = s->pc;
  /* Even reflection of phi: the row derivative flips sign in the rows'
   * mirror image, the column derivative in the columns'. */
  for (int64_t i = 0; i < PR; i++) {
    int64_t si = i < R ? i : 2 * R - 1 - i;
    double sgr = i < R ? 1 : -1;
    for (int64_t j = 0; j < PC; j++) {
      int64_t sj = j < C ? j : 2 * C - 1 - j;
      double sgc = j < C ? 1 : -1;
      s->a[i * PC + j][0] = sgr * cr[si * C + sj];
      s->a[i * PC + j][1] = 0;
      s->b[i * PC + j][0] = sgc * cc[si * C + sj];
      s->b[i * PC + j][1] = 0;
    }
  }
  fftw_execute_dft(s->fwd, s->a, s->a);
  fftw_execute_dft(s->fwd, s->b, s->b);
  double h2 = hp * hp, norm = 1.0 / ((double)PR * (double)PC);
  for (int64_t i = 0; i < PR; i++) {
    double kr = freq(i, PR);
    for (int64_t j = 0; j < PC; j++) {
      double kc = freq(j, PC), k2 = kr * kr + kc * kc;
      double *z = s->a[i * PC + j];
      const double *w = s->b[i * PC + j];
      if (k2 == 0) {
        z[0] = z[1] = 0;
        continue;
      }
      /* num / (2 pi i d) = -i num / (2 pi d) */
      double nr = kr * z[0] + kc * w[0], ni = kr * z[1] + kc * w[1];
      double f = norm / (2 * M_PI * (k2 + h2));
      z[0] = ni * f;
      z[1] = -nr * f;
    }
  }
  fftw_execute_dft(s->inv, s->a, s->a);
  double mean = 0;
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) mean += (phi[i * C + j] = scale * s->a[i * PC + j][0]);
  mean /= (double)(R * C);
  for (int64_t k = 0; k < R * C; k++) phi[k] -= mean;
  return SL_OK;
}

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
    .kernel = {[SL_BACKEND_CPU] = idpc_cpu},
    .host = true,
    .scan_image_outputs = 0x1u /* phase */,
};
