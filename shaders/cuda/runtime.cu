/* The CUDA backend's own kernels: a 32-bit fill (so the registry is never
 * empty and the backend can check at start that kernel code runs on the
 * device), and the self-test launchers the backend's tests use to exercise a
 * real launch, a launch-configuration error and an asynchronous device fault.
 * The backend itself (engine/backend/cuda) is plain C on the runtime API. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "shaders/cuda/sl_cuda.h"

/* dst[i] = value for i in [0, n); grid-stride, any launch size. */
__global__ void sl_k_fill_u32(uint32_t *dst, uint32_t value, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = value;
}

/* A device fault on purpose (self-test only): the error is asynchronous and
 * sticky, as a real out-of-bounds access in a kernel would be. */
__global__ void sl_k_selftest_trap(void) { __trap(); }

extern "C" {
extern const sl_device_kernel sl_cuda_kernels_runtime[] = {
    {"sl_k_fill_u32", (const void *)sl_k_fill_u32, SL_KERNEL_ABI_VERSION},
    {"sl_k_selftest_trap", (const void *)sl_k_selftest_trap, SL_KERNEL_ABI_VERSION},
};
extern const int sl_cuda_kernels_runtime_count =
    (int)(sizeof sl_cuda_kernels_runtime / sizeof sl_cuda_kernels_runtime[0]);
}

static unsigned fill_blocks(size_t n) {
  size_t blocks = (n + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535) blocks = 65535; /* grid-stride covers the rest */
  return (unsigned)blocks;
}

extern "C" int sl_cuda_launch_fill_u32(void *stream, void *dst, uint32_t value, size_t n) {
  if (n == 0) return (int)cudaSuccess;
  sl_k_fill_u32<<<fill_blocks(n), 256, 0, (cudaStream_t)stream>>>((uint32_t *)dst, value, n);
  return (int)cudaGetLastError(); /* read and cleared: the caller reports it */
}

extern "C" sl_code sl_cuda_selftest_fill(sl_kernel_args *a) {
  size_t n = a->pos_count > 0 ? (size_t)a->pos_count : 0;
  if (n)
    sl_k_fill_u32<<<fill_blocks(n), 256, 0, (cudaStream_t)sl_cuda_stream(a->backend)>>>(
        (uint32_t *)a->out[0], (uint32_t)a->pos_start, n);
  return sl_cuda_check_launch(a, "sl_k_fill_u32");
}

extern "C" sl_code sl_cuda_selftest_bad_launch(sl_kernel_args *a) {
  /* 4096 threads per block exceeds every device's limit (1024): the launch
   * itself fails, synchronously and without harming the context. */
  sl_k_fill_u32<<<1, 4096, 0, (cudaStream_t)sl_cuda_stream(a->backend)>>>((uint32_t *)a->out[0], 0u,
                                                                           (size_t)1);
  return sl_cuda_check_launch(a, "sl_k_fill_u32");
}

extern "C" sl_code sl_cuda_selftest_trap(sl_kernel_args *a) {
  sl_k_selftest_trap<<<1, 1, 0, (cudaStream_t)sl_cuda_stream(a->backend)>>>();
  return sl_cuda_check_launch(a, "sl_k_selftest_trap");
}
