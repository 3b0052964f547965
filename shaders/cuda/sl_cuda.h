/* Shared by the CUDA kernels (shaders/cuda/*.cu), the CUDA backend
 * (engine/backend/cuda) and the node descriptors that name CUDA kernels.
 * Plain C declarations: node files include it without CUDA headers. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include "engine/graph/node.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI of the kernels compiled into this binary. The backend refuses to
 * start when it differs from SL_ENGINE_KERNEL_ABI (engine/backend/cuda). */
#define SL_CUDA_KERNEL_ABI 1

/* One kernel compiled into the binary: name, the __global__ function's
 * address (for cudaFuncGetAttributes) and the ABI it was built for. */
typedef struct sl_cuda_kernel_info {
  const char *name;
  const void *func;
  int abi;
} sl_cuda_kernel_info;

/* Every kernel of the binary (shaders/cuda/registry.cu gathers each file's
 * table). The backend checks each exists for the device at start. */
const sl_cuda_kernel_info *sl_cuda_kernels(int *count);

/* The CUDA backend's stream (a cudaStream_t) for launchers. */
void *sl_cuda_stream(struct sl_backend *b);

/* After a launch: SL_OK, or SL_ERR_BACKEND naming the kernel, the node and
 * the chunk (the launch error is read with cudaGetLastError). */
sl_code sl_cuda_check_launch(sl_kernel_args *a, const char *kernel);

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

#endif
