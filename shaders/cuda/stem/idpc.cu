/* idpc on CUDA. See idpc.h; the integration itself is fourier_integral.cu
 * (shared with dpc), which follows nodes/common/fourier_integral.c step by
 * step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/stem/fourier_integral.cuh"
#include "shaders/cuda/stem/idpc.h"

static const char k_node[] = "idpc";

/* The node's state is the integration's (sl_cuda_integral_state): its
 * plans (cuFFT objects: they hold a little device memory of their own,
 * outside the table, see docs/backends.md) over the pieces of the device
 * table. */
static void idpc_layout(sl_table *t, int64_t rows, int64_t cols, bool mirror, sl_cuda_integral_pieces *integral,
                        void *state) {
  (void)state;
  sl_cuda_integral_layout(t, sl_cuda_integral_padded(rows, mirror), sl_cuda_integral_padded(cols, mirror), integral);
}

extern "C" int64_t sl_cuda_idpc_state_bytes(int64_t rows, int64_t cols, bool mirror) {
  sl_table t = sl_table_counter();
  sl_cuda_integral_pieces o;
  idpc_layout(&t, rows, cols, mirror, &o, NULL);
  return t.used;
}

extern "C" sl_code sl_cuda_idpc(const sl_cuda_idpc_params *p, sl_kernel_args *a, bool *on_device, char *why,
                                size_t why_size) {
  *on_device = false;
  void *state = NULL;
  sl_code rc = sl_cuda_integral_state(a, p->device_state, sizeof(sl_cuda_integral), p->rows, p->cols, p->mirror,
                                      idpc_layout, k_node, &state, why, why_size);
  if (rc != SL_OK || !state) return rc;
  sl_cuda_integral *s = (sl_cuda_integral *)state;
  *on_device = true;
  rc = sl_cuda_integral_bind(s, a, k_node);
  if (rc != SL_OK) return rc;
  return sl_cuda_integral_run(s, a, (const double *)a->in[0], (const double *)a->in[1], p->highpass, p->scale,
                              (double *)a->out[0], k_node);
}
