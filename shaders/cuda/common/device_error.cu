/* See device_error.cuh. */
#include <string.h>

#include "shaders/cuda/common/device_error.cuh"
#include "shaders/cuda/common/launch.cuh"

sl_code sl_cuda_error_mirror_create(sl_cuda_error_mirror *m, sl_cuda_error_word *word, sl_kernel_args *a,
                                    const char *node) {
  m->device = word;
  m->host = NULL;
  if (!word) return sl_fail(a->err, SL_ERR_INTERNAL, "%s: no error word in the device table", node);
  cudaError_t e = cudaHostAlloc((void **)&m->host, sizeof(sl_cuda_error_word), cudaHostAllocDefault);
  if (e == cudaSuccess) {
    memset(m->host, 0xFF, sizeof(sl_cuda_error_word));
    m->host->kind = SL_CUDA_ERROR_NONE;
    e = cudaMemcpyAsync(m->device, m->host, sizeof(sl_cuda_error_word), cudaMemcpyHostToDevice, sl_cuda_queue(a));
  }
  if (e != cudaSuccess) {
    sl_cuda_error_mirror_free(m);
    return sl_cuda_runtime_fail(a, e, node, "device state");
  }
  return SL_OK;
}

void sl_cuda_error_mirror_free(sl_cuda_error_mirror *m) {
  if (m->host) cudaFreeHost(m->host);
  m->device = NULL;
  m->host = NULL;
}

sl_code sl_cuda_error_mirror_pull(sl_cuda_error_mirror *m, sl_kernel_args *a, const char *node) {
  return sl_cuda_runtime_fail(a,
                              cudaMemcpyAsync(m->host, m->device, sizeof(sl_cuda_error_word),
                                              cudaMemcpyDeviceToHost, sl_cuda_queue(a)),
                              node, "error word copy");
}
