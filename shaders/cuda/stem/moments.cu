/* moments on CUDA: the shared per-frame moments kernel
 * (common/frame_moments.cuh) into outputs 0..2. */
#include "shaders/cuda/common/frame_moments.cuh"
#include "shaders/cuda/stem/moments.h"

extern "C" sl_code sl_cuda_moments(const sl_cuda_moments_params *p, sl_kernel_args *a) {
  return sl_cuda_frame_moments(a, &p->frames, 0);
}
