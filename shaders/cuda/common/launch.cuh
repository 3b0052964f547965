/* Helpers of the CUDA launchers (.cu files only): the queue and the services
 * the backend lends in a->dev (engine/core/kernel_abi.h, sl_device_env), and
 * the error of a runtime call a launcher makes itself. */
#ifndef SL_CUDA_LAUNCH_CUH
#define SL_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include "shaders/cuda/common/launcher.h"

/* The queue (stream) the call's kernels go on. */
static inline cudaStream_t sl_cuda_queue(const sl_kernel_args *a) { return (cudaStream_t)a->dev->queue; }

/* After a launch: SL_OK, or SL_ERR_BACKEND naming the kernel, node and chunk. */
static inline sl_code sl_cuda_check_launch(sl_kernel_args *a, const char *kernel) {
  return a->dev->check_launch(a, kernel);
}

/* Waits for everything enqueued so far (a device error is reported with the
 * batch it happened in). Launchers call it only to read results on the host. */
static inline sl_code sl_cuda_wait(sl_kernel_args *a) { return a->dev->sync(a); }

/* Multiprocessors of the device: launchers size grids by it. */
static inline int sl_cuda_multiprocessors(const sl_kernel_args *a) {
  return a->dev->multiprocessors > 0 ? a->dev->multiprocessors : 132;
}

/* A grid of 256-thread blocks for `threads` items of a grid-stride loop: one
 * block per 256 items, at most `per_sm` blocks per multiprocessor, at least
 * one (the loops do the rest). */
static inline unsigned sl_cuda_stride_grid(const sl_kernel_args *a, long long threads, int per_sm) {
  long long g = (threads + 255) / 256, cap = (long long)per_sm * sl_cuda_multiprocessors(a);
  return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

/* The failure of a runtime call the launcher made itself (a table allocation
 * or copy): "NODE: WHAT (the runtime's message)"; SL_OK for cudaSuccess. */
sl_code sl_cuda_runtime_fail(sl_kernel_args *a, cudaError_t e, const char *node, const char *what);

#endif
