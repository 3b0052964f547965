/* See cufft_warm_up.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include "shaders/cuda/common/cufft_warm_up.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/once_thread.h"
#include "engine/core/settings.h"
#include "shaders/cuda/common/cufft_loader.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct warm_up_args {
  const char *const *names;
  size_t n_names;
  int device;
  bool read_ahead; /* the setting cufft_read_ahead */
} warm_up_args;

static sl_once_thread g_warm_up = SL_ONCE_THREAD_INIT;

/* Asks the kernel to read the whole library file into the page cache in
 * the background (readahead; returns at once). cuFFT loads each transform
 * size's kernels from its 280 MB file on that size's first plan: on a
 * machine whose page cache has not seen the file, a first dpc of an odd
 * size (48 x 40, factors 3 and 5) took 53-57 ms on the H200 against 1.1-1.5
 * ms once cached, and the parallax's first 192 x 192 and 256 x 256 plans
 * 0.17-0.43 s. Where the file is cached this costs a lookup. */
static void read_ahead_library(const sl_cufft_api *api) {
  Dl_info info;
  void *symbol;
  memcpy(&symbol, &api->create, sizeof symbol);
  if (!dladdr(symbol, &info) || !info.dli_fname || !info.dli_fname[0]) return;
  int fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size > 0) (void)posix_fadvise(fd, 0, st.st_size, POSIX_FADV_WILLNEED);
  close(fd);
}

static void *warm_up_main(void *arg) {
  const warm_up_args *w = arg;
  sl_cufft_api api;
  char why[256];
  if (!sl_cufft_load_names(w->names, w->n_names, &api, why, sizeof why)) return NULL;
  if (w->read_ahead) read_ahead_library(&api);
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
  const warm_up_args args = {names, n_names, (int)device, sl_setting_bool(SL_SET_CUFFT_READ_AHEAD)};
  if (device >= 0 && device < 1 << 20) sl_once_thread_start(&g_warm_up, warm_up_main, &args, sizeof args);
}

void sl_cufft_warm_up_wait(void) { sl_once_thread_join(&g_warm_up); }

bool sl_cufft_warm_up_done(void) { return sl_once_thread_finished(&g_warm_up); }
