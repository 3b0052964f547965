/* Device initialisation in the background (see cuda_internal.h).
 *
 * Creating the CUDA context takes a large
 * part of a short run's wall time on a big GPU (hundreds of milliseconds),
 * and none of it depends on the pipeline. `sluice run` starts it on a helper
 * thread before it loads and plans the pipeline (sl_run_pipeline calls the
 * backend's warm_up_begin), so it overlaps the host's planning and chunk
 * listing; create waits for it (warm_up_wait) and then finds the context
 * made and the modules loaded. The helper only makes the runtime's
 * process-wide state: failures are ignored here and reported by create,
 * which repeats every call with full error handling. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/core/kernel_abi.h"
#include "engine/core/settings.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_thread;
static bool g_running; /* started and not joined */
static bool g_started; /* once per process */

/* The context, and the module of the backend's own kernel (create asks it
 * for its attributes); the nodes' modules load at their first launch. */
static void *warm_up_main(void *arg) {
  int device = (int)(intptr_t)arg;
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
  int64_t device = sl_setting_int(SL_SET_CUDA_DEVICE);
  pthread_mutex_lock(&g_mu);
  if (!g_started && device >= 0 && device < 1 << 20) {
    g_started = true;
    g_running = pthread_create(&g_thread, NULL, warm_up_main, (void *)(intptr_t)device) == 0;
  }
  pthread_mutex_unlock(&g_mu);
}

void sl_cuda_warm_up_wait(void) {
  pthread_mutex_lock(&g_mu);
  if (g_running) {
    pthread_join(g_thread, NULL);
    g_running = false;
  }
  pthread_mutex_unlock(&g_mu);
}
