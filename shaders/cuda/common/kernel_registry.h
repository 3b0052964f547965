/* How a kernel file adds its kernels to the registry (shaders/cuda/registry.cu,
 * sl_cuda_kernels in engine/core/kernel_abi.h), with no central list:
 *
 *   static const sl_device_kernel my_kernels[] = {
 *       SL_CUDA_KERNEL_ENTRY("my_kernel", my_kernel), ...};
 *   SL_CUDA_REGISTER_KERNELS(my_kernels, "my_node other_node")
 *
 * The second argument names the node types whose launchers run the file's
 * kernels (space-separated; "" for none): a run on CUDA loads the kernels of
 * its nodes' types on the warm-up helper, while the host plans, instead of
 * at each kernel's first launch inside the run (the H200 took 0.8-2.0 ms a
 * node for that: CUDA loads a module lazily, at its first use). A type
 * left out only keeps that lazy load.
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
  const char *nodes; /* the node types that launch them */
  sl_cuda_kernel_table *next;
};

struct sl_cuda_kernel_registrar {
  sl_cuda_kernel_table table;
  sl_cuda_kernel_registrar(const sl_device_kernel *kernels, int count, const char *nodes);
};

#define SL_CUDA_KERNEL_ENTRY(name, fn) \
  { name, (const void *)(fn), SL_KERNEL_ABI_VERSION, nullptr }
#define SL_CUDA_REGISTER_KERNELS(table, nodes) \
  static sl_cuda_kernel_registrar table##_registrar(table, (int)(sizeof table / sizeof table[0]), nodes);

#endif
