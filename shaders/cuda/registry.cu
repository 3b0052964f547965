/* The kernel registry: every CUDA kernel compiled into the binary, gathered
 * from the tables the kernel files register themselves
 * (shaders/cuda/common/kernel_registry.h). The CUDA backend checks at start
 * that each one has code for the device and the ABI it expects
 * (engine/backend/cuda). */
#include <vector>

#include "shaders/cuda/common/kernel_registry.h"

namespace {

/* Zero-initialised before any registrar runs (constant initialisation), so
 * the order in which files register does not matter. */
sl_cuda_kernel_table *g_tables = nullptr;

struct registry {
  std::vector<sl_device_kernel> entries;
  registry() {
    for (const sl_cuda_kernel_table *t = g_tables; t; t = t->next)
      for (int i = 0; i < t->count; i++) {
        entries.push_back(t->kernels[i]);
        entries.back().nodes = t->nodes;
      }
  }
};

}  // namespace

sl_cuda_kernel_registrar::sl_cuda_kernel_registrar(const sl_device_kernel *kernels, int count,
                                                   const char *nodes)
    : table{kernels, count, nodes, g_tables} {
  g_tables = &table;
}

/* Built once, at the first call (after static initialisation: every linked
 * file has registered by then). */
extern "C" const sl_device_kernel *sl_cuda_kernels(int *count) {
  static const registry r; /* thread-safe (C++11 static init) */
  if (count) *count = (int)r.entries.size();
  return r.entries.data();
}
