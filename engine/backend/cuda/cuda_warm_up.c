/* Device initialisation in the background (see cuda_internal.h).
 *
 * Creating the CUDA context takes a large
 * part of a short run's wall time on a big GPU (hundreds of milliseconds),
 * and none of it depends on the pipeline. `sluice run` starts it on a helper
 * thread before it loads and plans the pipeline (sl_run_pipeline calls the
 * backend's warm_up_begin), so it overlaps the host's planning and chunk
 * listing; create waits for it (sl_cuda_warm_up_context_wait) and then
 * finds the context made. The helper only makes the runtime's
 * process-wide state: failures are ignored here and reported by create,
 * which repeats every call with full error handling.
 *
 * CUDA loads a module lazily, at its first use: on the H200 that took
 * 0.8-2.0 ms of a node's first call (bslz4_decode 0.8, mask_correct 1.7-2.0,
 * virtual_detectors 0.9-1.2 in runs of stem_products with lazy against
 * eager loading), inside the run and in no estimate's reach. So once the
 * graph is known, a second helper loads the kernels its node types launch
 * (sl_cuda_warm_up_nodes), after the context, type by type in the graph's
 * order. create does not wait for it (waited for there, stem_products'
 * 6-8 ms of loads sat on the critical path); the run's end joins it
 * (sl_cuda_warm_up_wait). Loading every kernel of the binary instead would
 * take about a tenth of a second. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/core/kernel_abi.h"
#include "engine/core/once_thread.h"
#include "engine/core/settings.h"

static sl_once_thread g_warm_up = SL_ONCE_THREAD_INIT;

/* The context, and the module of the backend's own kernel (create asks it
 * for its attributes); the nodes' modules load at their first launch. */
static void *warm_up_main(void *arg) {
  int device = *(const int *)arg;
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  struct cudaFuncAttributes attr;
  const sl_device_kernel *marker = sl_cuda_batch_marker_kernel();
  if (cudaFuncGetAttributes(&attr, marker->func) != cudaSuccess) (void)cudaGetLastError();
  return NULL;
}

void sl_cuda_warm_up_begin(void) {
  /* The device setting is read here, on the caller's thread: the settings
   * module is not read from helper threads. An index past the devices makes
   * the helper fail quietly; create says why. */
  int64_t setting = sl_setting_int(SL_SET_CUDA_DEVICE);
  int device = (int)setting;
  if (setting >= 0 && setting < 1 << 20) sl_once_thread_start(&g_warm_up, warm_up_main, &device, sizeof device);
}

/* The second helper: the node types whose kernels it loads (pointers into
 * the node descriptors; a run with more types than SL_WARM_UP_TYPES_MAX
 * loads the rest lazily, as before). */
typedef struct kernel_loader {
  pthread_mutex_t mu;
  pthread_t thread;
  bool running;
  int device;
  int n_types;
  const char *types[SL_WARM_UP_TYPES_MAX];
} kernel_loader;

static kernel_loader g_loader = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *load_main(void *arg) {
  const kernel_loader *l = arg;
  sl_once_thread_join(&g_warm_up); /* the context first */
  if (cudaSetDevice(l->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  /* type by type, in the graph's order: the run may have started, and its
   * first nodes' kernels are wanted first (a kernel launched before its
   * turn loads itself, as without this helper). Asking for a kernel's
   * attributes loads it and its module; asked again (a kernel that serves
   * two of the types), it is already loaded. */
  for (int t = 0; t < l->n_types; t++)
    for (int i = 0; i < n; i++) {
      struct cudaFuncAttributes attr;
      if (k[i].func && sl_device_kernel_serves(&k[i], l->types[t]) &&
          cudaFuncGetAttributes(&attr, k[i].func) != cudaSuccess)
        (void)cudaGetLastError();
    }
  return NULL;
}

static void loader_join(void) {
  pthread_mutex_lock(&g_loader.mu);
  if (g_loader.running) {
    pthread_join(g_loader.thread, NULL);
    g_loader.running = false;
  }
  pthread_mutex_unlock(&g_loader.mu);
}

void sl_cuda_warm_up_nodes(const char *const *types, int n) {
  int64_t setting = sl_setting_int(SL_SET_CUDA_DEVICE); /* read here, as begin does */
  if (setting < 0 || setting >= 1 << 20 || n <= 0) return;
  loader_join(); /* a previous run's, if any */
  pthread_mutex_lock(&g_loader.mu);
  g_loader.device = (int)setting;
  g_loader.n_types = n < SL_WARM_UP_TYPES_MAX ? n : SL_WARM_UP_TYPES_MAX;
  for (int t = 0; t < g_loader.n_types; t++) g_loader.types[t] = types[t];
  /* a thread that cannot be made leaves the kernels to load lazily */
  g_loader.running = pthread_create(&g_loader.thread, NULL, load_main, &g_loader) == 0;
  pthread_mutex_unlock(&g_loader.mu);
}

void sl_cuda_warm_up_context_wait(void) { sl_once_thread_join(&g_warm_up); }

void sl_cuda_warm_up_wait(void) {
  sl_once_thread_join(&g_warm_up);
  loader_join();
}
