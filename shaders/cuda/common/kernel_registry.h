/* How a kernel file adds its kernels to the registry (shaders/cuda/registry.cu,
 * sl_cuda_kernels in engine/core/kernel_abi.h), with no central list:
 *
 *   static const sl_device_kernel my_kernels[] = {
 *       SL_CUDA_KERNEL_ENTRY("my_kernel", my_kernel), ...};
 *   SL_CUDA_REGISTER_KERNELS(my_kernels)
 *
 * The registration runs when the file's object is linked into the binary
 * (static initialisation, before main), which it is as soon as something
 * calls one of its launchers. The backend checks at start that each
 * registered kernel has code for the device and the expected ABI. */
#ifndef SL_CUDA_KERNEL_REGISTRY_H
#define SL_CUDA_KERNEL_REGISTRY_H

#include "shaders/cuda/common/launcher.h"

/* One file's table, linked into the registry's list. */
struct sl_cuda_kernel_table {
  const sl_device_kernel *kernels;
  int count;
  sl_cuda_kernel_table *next;
};

struct sl_cuda_kernel_registrar {
  sl_cuda_kernel_table table;
  sl_cuda_kernel_registrar(const sl_device_kernel *kernels, int count);
};

#define SL_CUDA_KERNEL_ENTRY(name, fn) \
  { name, (const void *)(fn), SL_KERNEL_ABI_VERSION }
#define SL_CUDA_REGISTER_KERNELS(table) \
  static sl_cuda_kernel_registrar table##_registrar(table, (int)(sizeof table / sizeof table[0]));

#endif
