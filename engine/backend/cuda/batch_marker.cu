/* The CUDA backend's own kernel: the batch marker. After each batch the
 * stream writes the batch's number into host-mapped memory (a one-element
 * fill), so that after a device fault the last number written names the last
 * batch that completed. Its code is also what the backend checks at start
 * to know that kernels of this binary run on the device. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "engine/core/kernel_abi.h"
}

__global__ void sl_k_batch_marker(uint32_t *dst, uint32_t value) { *dst = value; }

extern "C" int sl_cuda_batch_marker_write(void *stream, void *dst, uint32_t value) {
  sl_k_batch_marker<<<1, 1, 0, (cudaStream_t)stream>>>((uint32_t *)dst, value);
  return (int)cudaGetLastError(); /* read and cleared: the caller reports it */
}

extern "C" const sl_device_kernel *sl_cuda_batch_marker_kernel(void) {
  static const sl_device_kernel k = {"sl_k_batch_marker", (const void *)sl_k_batch_marker, SL_KERNEL_ABI_VERSION,
                                     nullptr};
  return &k;
}
