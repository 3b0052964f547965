/* variance on CUDA (variance.cu): one thread per element of the item, the
 * arithmetic of the CPU kernel in the same order (nodes/basic/variance.c). */
#ifndef SL_CUDA_VARIANCE_H
#define SL_CUDA_VARIANCE_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

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
