/* moments on CUDA (moments.cu): S, Sr, Sc of each frame (u64, equal to the
 * CPU bit for bit). */
#ifndef SL_CUDA_MOMENTS_H
#define SL_CUDA_MOMENTS_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_moments_params {
  sl_cuda_frame_shape frames; /* input 0 */
} sl_cuda_moments_params;

/* out[0] S, out[1] Sr, out[2] Sc of each frame of the chunk. */
sl_code sl_cuda_moments(const sl_cuda_moments_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
