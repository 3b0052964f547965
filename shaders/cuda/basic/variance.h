/* variance on CUDA (variance.cu): one thread per element of the item, the
 * arithmetic of the CPU kernel in the same order (nodes/basic/variance.c). */
#ifndef SL_CUDA_VARIANCE_H
#define SL_CUDA_VARIANCE_H

#include <stdint.h>

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define SL_VARIANCE_HD __host__ __device__
#else
#define SL_VARIANCE_HD
#endif

/* u8 and u16 data: a chunk's mean and squared deviations from the exact sums
 * of its n values (s) and of their squares (q, below 2^64 for fewer than
 * 2^32 positions of u16): M2 = (n q - s^2) / n, whose numerator is exact in
 * 128 bits and rounded once (its two 64-bit halves: the high one times
 * 2^64 is exact, so one rounding whether or not the addition is fused),
 * then divided; the mean s / n (s exact in a double). The CPU and CUDA
 * kernels both call this, so they give the same bits. */
static inline SL_VARIANCE_HD void sl_variance_from_sums(uint64_t n, uint64_t s, uint64_t q, double *mean,
                                                        double *m2) {
  const unsigned __int128 d = (unsigned __int128)n * q - (unsigned __int128)s * s;
  const double num = (double)(uint64_t)(d >> 64) * 18446744073709551616.0 + (double)(uint64_t)d;
  *mean = (double)s / (double)n;
  *m2 = num / (double)n;
}

typedef struct sl_cuda_variance_params {
  sl_dtype dtype;     /* of input 0: u8, u16, u32, u64, i32, i64, f32 or f64 */
  int64_t item_elems; /* elements per scan position */
  int ddof;           /* 0 or 1 */
} sl_cuda_variance_params;

/* out[0] (f64 [3, item], the chunk's partial at zero) = the chunk's count,
 * mean and squared deviations of in[0]'s positions. */
sl_code sl_cuda_variance_chunk(const sl_cuda_variance_params *p, sl_kernel_args *a);
/* out[0] (the run's moments) merged with in[0] (a chunk's), Chan's formula. */
sl_code sl_cuda_variance_merge(const sl_cuda_variance_params *p, sl_kernel_args *a);
/* out[1..3] (mean, variance, normalized; NULL when unread) from out[0]. */
sl_code sl_cuda_variance_finalize(const sl_cuda_variance_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
