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

sl_code sl_cuda_error_disk_fail(const sl_cuda_error_word *e, sl_kernel_args *a, long long h, long long w) {
  if (e->kind == SL_CUDA_ERROR_DISK_VALUES)
    return sl_fail(a->err, SL_ERR_FORMAT,
                   "input 'disk' holds centre (%g, %g) radius %g: needs a finite centre and a "
                   "radius > 0",
                   e->disk[0], e->disk[1], e->disk[2]);
  if (e->kind == SL_CUDA_ERROR_DISK_FAR)
    return sl_fail(a->err, SL_ERR_FORMAT, "input 'disk': centre (%g, %g) is far outside the %lldx%lld detector",
                   e->disk[0], e->disk[1], h, w);
  return SL_OK;
}
