/* Shared by the CUDA kernels (the .cu files in shaders/cuda), the CUDA backend
 * (engine/backend/cuda) and the node descriptors that name CUDA kernels.
 * Plain C declarations: node files include it without CUDA headers. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include "engine/graph/node.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend's stream (a cudaStream_t) for launchers. */
void *sl_cuda_stream(struct sl_backend *b);

/* After a launch: SL_OK, or SL_ERR_BACKEND naming the kernel, the node and
 * the chunk (the launch error is read with cudaGetLastError). */
sl_code sl_cuda_check_launch(sl_kernel_args *a, const char *kernel);
/* Waits for everything enqueued on the backend's stream; a device error is
 * reported (in a->err) with the batch it happened in, which need not be the
 * caller's: launchers call this, not cudaStreamSynchronize, when they must
 * read results on the host. */
sl_code sl_cuda_sync(sl_kernel_args *a);

/* Launchers: one per node type with a CUDA kernel. Each has the node's CPU
 * semantics exactly (integer results equal the CPU backend's bit for bit). */
sl_code sl_cuda_bslz4_decode(sl_kernel_args *a);
sl_code sl_cuda_mask_correct(sl_kernel_args *a);
sl_code sl_cuda_bin_detector(sl_kernel_args *a);
sl_code sl_cuda_virtual_image(sl_kernel_args *a);
sl_code sl_cuda_virtual_detectors(sl_kernel_args *a);
sl_code sl_cuda_moments(sl_kernel_args *a);
sl_code sl_cuda_com(sl_kernel_args *a);
sl_code sl_cuda_com_finalize(sl_kernel_args *a);
sl_code sl_cuda_sum(sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

/* For node descriptors: the CUDA launcher when the backend is built in. */
#ifdef SLUICE_HAVE_CUDA
#define SL_CUDA_KERNEL(fn) fn
#else
#define SL_CUDA_KERNEL(fn) NULL
#endif

/* Added with the CUDA backend (engine/backend/cuda/cuda_backend.c,
 * shaders/cuda/runtime.cu). */
#ifdef __cplusplus
extern "C" {
#endif

/* Device memory as the driver sees it (cudaMemGetInfo on the backend's
 * device; b may be NULL for the calling thread's current device):
 * driver_used = total - free, all processes and contexts included. Any
 * pointer may be NULL. The device script reports it around repeated runs. */
sl_code sl_cuda_memory_report(struct sl_backend *b, size_t *free_bytes, size_t *total_bytes,
                              size_t *driver_used);
/* What this backend holds now: device allocations (count, bytes) and pinned
 * host allocations (count, bytes). Zero after every buffer went back. */
void sl_cuda_backend_held(const struct sl_backend *b, int64_t *device_allocs, uint64_t *device_bytes,
                          int64_t *pinned_allocs, uint64_t *pinned_bytes);
/* Capabilities a launcher may size its work by: shared memory per block with
 * opt-in (bytes) and the compute capability as major * 10 + minor. */
size_t sl_cuda_shared_memory_per_block(const struct sl_backend *b);
int sl_cuda_compute_capability(const struct sl_backend *b);

/* shaders/cuda/runtime.cu: dst[0..n) = value (u32) on `stream` (a
 * cudaStream_t); returns the cudaError_t of the launch as an int. */
int sl_cuda_launch_fill_u32(void *stream, void *dst, uint32_t value, size_t n);
/* Self-test launchers (tests only; never named by a node descriptor):
 * fill writes pos_count u32 copies of (uint32_t)pos_start into out[0];
 * bad_launch fails at launch (invalid configuration); trap faults on the
 * device, an asynchronous, sticky error that poisons the context. */
sl_code sl_cuda_selftest_fill(sl_kernel_args *a);
sl_code sl_cuda_selftest_bad_launch(sl_kernel_args *a);
sl_code sl_cuda_selftest_trap(sl_kernel_args *a);

/* The CUDA backend's second non-blocking stream (a cudaStream_t), for
 * host-to-device copies that overlap the kernels of sl_cuda_stream(b); work on
 * it is ordered with the main stream only by the caller's events. NULL when b
 * is not a CUDA backend. */
void *sl_cuda_copy_stream(struct sl_backend *b);

#ifdef __cplusplus
}
#endif

#endif
