/* The kernel registry: every kernel compiled into the binary, gathered from
 * each kernel file's table. The CUDA backend checks at start that each one
 * has code for the device and the ABI it expects (engine/backend/cuda).
 *
 * Each kernel file NAME.cu exports
 *   extern "C" const sl_device_kernel sl_cuda_kernels_NAME[];
 *   extern "C" const int sl_cuda_kernels_NAME_count;
 * The tables of other files are weak references, so that this file links
 * while a kernel file does not exist yet (its table is then NULL and is
 * skipped). A weak reference does not pull an object out of the static
 * library by itself: a file's table is found when its object is linked in,
 * which it is as soon as a node descriptor names one of its launchers. */
#include <stddef.h>

#include "shaders/cuda/sl_cuda.h"

extern "C" {
extern const sl_device_kernel sl_cuda_kernels_runtime[];
extern const int sl_cuda_kernels_runtime_count;
extern const sl_device_kernel sl_cuda_kernels_bslz4[] __attribute__((weak));
extern const int sl_cuda_kernels_bslz4_count __attribute__((weak));
extern const sl_device_kernel sl_cuda_kernels_detector[] __attribute__((weak));
extern const int sl_cuda_kernels_detector_count __attribute__((weak));
}

namespace {

enum { REGISTRY_CAPACITY = 512 };

struct registry {
  sl_device_kernel entries[REGISTRY_CAPACITY];
  int count;

  void add(const sl_device_kernel *table, const int *count_ptr) {
    if (!table || !count_ptr) return; /* that kernel file is not linked in */
    int n = *count_ptr;
    for (int i = 0; i < n; i++) {
      if (count == REGISTRY_CAPACITY) return; /* the overflow entry is in place */
      if (count == REGISTRY_CAPACITY - 1) {
        /* Never silently drop a kernel: an entry without code makes the
         * backend's start-up check fail with this name. */
        entries[count++] = sl_device_kernel{"(kernel registry full: raise REGISTRY_CAPACITY)", NULL, -1};
        return;
      }
      entries[count++] = table[i];
    }
  }

  registry() : entries(), count(0) {
    add(sl_cuda_kernels_runtime, &sl_cuda_kernels_runtime_count);
    add(sl_cuda_kernels_bslz4, &sl_cuda_kernels_bslz4_count);
    add(sl_cuda_kernels_detector, &sl_cuda_kernels_detector_count);
  }
};

}  // namespace

extern "C" const sl_device_kernel *sl_cuda_kernels(int *count) {
  static const registry r; /* built once, thread-safe (C++11 static init) */
  if (count) *count = r.count;
  return r.entries;
}
