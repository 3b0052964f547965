/* See launch.cuh. */
#include "shaders/cuda/common/launch.cuh"

sl_code sl_cuda_runtime_fail(sl_kernel_args *a, cudaError_t e, const char *node, const char *what) {
  if (e == cudaSuccess) return SL_OK;
  return sl_fail(a->err, SL_ERR_BACKEND, "%s: %s (%s)", node, what, cudaGetErrorString(e));
}
