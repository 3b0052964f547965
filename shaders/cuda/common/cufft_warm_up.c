/* See cufft_warm_up.h. */
#include "shaders/cuda/common/cufft_warm_up.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/core/settings.h"
#include "shaders/cuda/common/cufft_loader.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct warm_up_args {
  const char *const *names;
  size_t n_names;
  int device;
} warm_up_args;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_thread;
static bool g_running; /* started and not joined */
static bool g_started; /* once per process */
static warm_up_args g_args;

static void *warm_up_main(void *arg) {
  const warm_up_args *w = arg;
  sl_cufft_api api;
  char why[256];
  if (!sl_cufft_load_names(w->names, w->n_names, &api, why, sizeof why)) return NULL;
#ifdef SLUICE_HAVE_CUDA
  if (cudaSetDevice(w->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
#endif
  int plan = 0, n[2] = {64, 64};
  size_t work = 0;
  if (api.create(&plan) != SL_CUFFT_SUCCESS) return NULL;
  if (api.set_auto_allocation(plan, 0) == SL_CUFFT_SUCCESS)
    (void)api.make_plan_many(plan, 2, n, NULL, 1, 0, NULL, 1, 0, SL_CUFFT_Z2Z, 1, &work);
  (void)api.destroy(plan);
  return NULL;
}

void sl_cufft_warm_up_begin(void) {
  /* Settings are read here, on the caller's thread. */
  const char *const *names;
  size_t n_names;
  char why[256];
  if (!sl_cufft_names(&names, &n_names, why, sizeof why)) return;
  int64_t device = sl_setting_int(SL_SET_CUDA_DEVICE);
  pthread_mutex_lock(&g_mu);
  if (!g_started && device >= 0 && device < 1 << 20) {
    g_started = true;
    g_args = (warm_up_args){names, n_names, (int)device};
    g_running = pthread_create(&g_thread, NULL, warm_up_main, &g_args) == 0;
  }
  pthread_mutex_unlock(&g_mu);
}

void sl_cufft_warm_up_wait(void) {
  pthread_mutex_lock(&g_mu);
  if (g_running) {
    pthread_join(g_thread, NULL);
    g_running = false;
  }
  pthread_mutex_unlock(&g_mu);
}
