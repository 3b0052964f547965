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

void sl_cuda_warm_up_wait(void) { sl_once_thread_join(&g_warm_up); }
