/* The self-test launchers (selftest.h): a real launch, a launch-configuration
 * error and an asynchronous device fault, for the backend's tests. */
#include <stdint.h>

#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/selftest.h"

/* dst[i] = value for i in [0, n); grid-stride, any launch size. */
__global__ void sl_k_fill_u32(uint32_t *dst, uint32_t value, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = value;
}

/* A device fault on purpose: the error is asynchronous and sticky, as a real
 * out-of-bounds access in a kernel would be. */
__global__ void sl_k_selftest_trap(void) { __trap(); }

static const sl_device_kernel selftest_kernels[] = {
    SL_CUDA_KERNEL_ENTRY("sl_k_fill_u32", sl_k_fill_u32),
    SL_CUDA_KERNEL_ENTRY("sl_k_selftest_trap", sl_k_selftest_trap),
};
SL_CUDA_REGISTER_KERNELS(selftest_kernels, "")

static unsigned fill_blocks(size_t n) {
  size_t blocks = (n + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535) blocks = 65535; /* grid-stride covers the rest */
  return (unsigned)blocks;
}

extern "C" sl_code sl_cuda_selftest_fill(sl_kernel_args *a) {
  size_t n = a->pos_count > 0 ? (size_t)a->pos_count : 0;
  if (n)
    sl_k_fill_u32<<<fill_blocks(n), 256, 0, sl_cuda_queue(a)>>>((uint32_t *)a->out[0], (uint32_t)a->pos_start, n);
  return sl_cuda_check_launch(a, "sl_k_fill_u32");
}

extern "C" sl_code sl_cuda_selftest_bad_launch(sl_kernel_args *a) {
  /* 4096 threads per block exceeds every device's limit (1024): the launch
   * itself fails, synchronously and without harming the context. */
  sl_k_fill_u32<<<1, 4096, 0, sl_cuda_queue(a)>>>((uint32_t *)a->out[0], 0u, (size_t)1);
  return sl_cuda_check_launch(a, "sl_k_fill_u32");
}

extern "C" sl_code sl_cuda_selftest_trap(sl_kernel_args *a) {
  sl_k_selftest_trap<<<1, 1, 0, sl_cuda_queue(a)>>>();
  return sl_cuda_check_launch(a, "sl_k_selftest_trap");
}
