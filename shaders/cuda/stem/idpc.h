/* idpc on CUDA (idpc.cu over fourier_integral.cu): the Fourier integration of nodes/common/
 * fourier_integral.c on the device, in double precision, with cuFFT loaded at
 * run time (shaders/cuda/common/cufft_loader.h): the even-reflection fill,
 * one batched forward Z2Z of both fields, the spectral multiplier
 * (k_r F(g_r) + k_c F(g_c)) / (2 pi i (|k|^2 + h^2)) / N, one inverse Z2Z,
 * then scale * Re and the mean removed, all on the node's queue. The same
 * formulas as the host path; the sums of the FFTs and of the mean run in
 * another order, so the result equals the host's to rounding (1e-12
 * relative), not bit for bit. */
#ifndef SL_CUDA_IDPC_H
#define SL_CUDA_IDPC_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_idpc_params {
  int64_t rows, cols; /* of the field and the phase */
  bool mirror;        /* extend to 2 rows x 2 cols by even reflection of phi */
  double highpass;    /* h, cycles per scan step */
  double scale;
  sl_cuda_state_holder device_state;
} sl_cuda_idpc_params;

/* Bytes of the node's device table (cost().device_state_bytes) for a rows x
 * cols field: the two complex fields, the mean's partial sums and the work
 * area reserved for cuFFT (two more fields; cuFFT says the exact size only
 * when it plans, and a transform that needs more runs on the host path with
 * the reason in *why). */
int64_t sl_cuda_idpc_state_bytes(int64_t rows, int64_t cols, bool mirror);

/* out[0] = phase (device f64 [rows, cols]) from in[0] = g_r, in[1] = g_c.
 * When cuFFT cannot be loaded, returns SL_OK with *on_device false and the
 * reason in why[why_size], having enqueued nothing: the caller runs its host
 * path (also when cuFFT needs a larger work area than the table holds). The
 * node's state (the plans, made on the first call, bound to the work area in
 * a->device_table) lives in p->device_state until its owner releases it. */
sl_code sl_cuda_idpc(const sl_cuda_idpc_params *p, sl_kernel_args *a, bool *on_device, char *why,
                     size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
