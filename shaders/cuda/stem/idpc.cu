/* idpc on CUDA. See idpc.h; the integration itself is fourier_integral.cu
 * (shared with dpc), which follows nodes/common/fourier_integral.c step by
 * step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/stem/fourier_integral.cuh"
#include "shaders/cuda/stem/idpc.h"

static const char k_node[] = "idpc";

/* The node's state: the integration's plans (cuFFT objects: they hold a
 * little device memory of their own, outside the table, see
 * docs/backends.md) over the pieces of the device table. */
typedef struct idpc_device_state {
  sl_cuda_integral in;
  bool mirror;
} idpc_device_state;

extern "C" int64_t sl_cuda_idpc_state_bytes(int64_t rows, int64_t cols, bool mirror) {
  sl_table t = sl_table_counter();
  sl_cuda_integral_pieces o;
  sl_cuda_integral_layout(&t, sl_cuda_integral_padded(rows, mirror), sl_cuda_integral_padded(cols, mirror), &o);
  return t.used;
}

static void idpc_state_release(void *p) {
  idpc_device_state *s = (idpc_device_state *)p;
  if (!s) return;
  sl_cuda_integral_free(&s->in);
  free(s);
}

/* The node's state: NULL with *why when cuFFT cannot be loaded or cannot
 * work in the table (nothing is kept then, so a later run tries again). */
static sl_code state_get(const sl_cuda_idpc_params *p, sl_kernel_args *a, idpc_device_state **out, char *why,
                         size_t why_size) {
  *out = (idpc_device_state *)*p->device_state.state;
  if (*out) {
    if ((*out)->in.rows != p->rows || (*out)->in.cols != p->cols || (*out)->mirror != p->mirror)
      return sl_fail(a->err, SL_ERR_INTERNAL, "%s: the device state was made for another field", k_node);
    if (!(*out)->in.ready)
      return sl_fail(a->err, SL_ERR_BACKEND, "%s: the transforms could not be set up on an earlier call", k_node);
    return SL_OK;
  }
  idpc_device_state *s = (idpc_device_state *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  s->mirror = p->mirror;
  sl_table t = sl_table_lent(a);
  sl_cuda_integral_pieces mem;
  sl_cuda_integral_layout(&t, sl_cuda_integral_padded(p->rows, p->mirror),
                          sl_cuda_integral_padded(p->cols, p->mirror), &mem);
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc == SL_OK) rc = sl_cuda_integral_init(&s->in, p->rows, p->cols, p->mirror, &mem, a, k_node, why, why_size);
  if (rc == SL_OK && !s->in.ready) { /* the host path, with why */
    idpc_state_release(s);
    return SL_OK;
  }
  *p->device_state.state = s;
  *p->device_state.release = idpc_state_release;
  if (rc == SL_OK) *out = s;
  return rc;
}

extern "C" sl_code sl_cuda_idpc(const sl_cuda_idpc_params *p, sl_kernel_args *a, bool *on_device, char *why,
                                size_t why_size) {
  *on_device = false;
  idpc_device_state *s = NULL;
  sl_code rc = state_get(p, a, &s, why, why_size);
  if (rc != SL_OK || !s) return rc;
  *on_device = true;
  rc = sl_cuda_integral_bind(&s->in, a, k_node);
  if (rc != SL_OK) return rc;
  return sl_cuda_integral_run(&s->in, a, (const double *)a->in[0], (const double *)a->in[1], p->highpass, p->scale,
                              (double *)a->out[0], k_node);
}
