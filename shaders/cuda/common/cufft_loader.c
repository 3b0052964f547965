/* See cufft_loader.h. Plain C (dlfcn only), so it builds without nvcc too
 * and its failure paths are tested on machines without a GPU. */
#include "shaders/cuda/common/cufft_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/settings.h"
#include "shaders/cuda/common/cufft_warm_up.h"

/* The sonames tried in order when the setting cufft (SLUICE_CUFFT) is empty: the CUDA 12 and
 * 13 toolkits ship libcufft.so.12; Debian's nvidia-cuda-toolkit an older
 * one; the toolkit's own folder when it is not in the loader's path. */
static const char *const k_default_names[] = {
    "libcufft.so.12", "libcufft.so.11", "libcufft.so.10",
    "/usr/local/cuda/lib64/libcufft.so.12", "/usr/local/cuda/lib/libcufft.so.12", "libcufft.so",
};

const char *sl_cufft_result_name(int r) {
  static const char *const names[] = {
      "CUFFT_SUCCESS",         "CUFFT_INVALID_PLAN",  "CUFFT_ALLOC_FAILED",  "CUFFT_INVALID_TYPE",
      "CUFFT_INVALID_VALUE",   "CUFFT_INTERNAL_ERROR", "CUFFT_EXEC_FAILED",  "CUFFT_SETUP_FAILED",
      "CUFFT_INVALID_SIZE",    "CUFFT_UNALIGNED_DATA", "CUFFT_INCOMPLETE_PARAMETER_LIST",
      "CUFFT_INVALID_DEVICE",  "CUFFT_PARSE_ERROR",   "CUFFT_NO_WORKSPACE",  "CUFFT_NOT_IMPLEMENTED",
      "CUFFT_LICENSE_ERROR",   "CUFFT_NOT_SUPPORTED", "CUFFT_MISSING_DEPENDENCY", "CUFFT_NVRTC_FAILURE",
      "CUFFT_NVJITLINK_FAILURE", "CUFFT_NVSHMEM_FAILURE"};
  int n = (int)(sizeof names / sizeof names[0]);
  return r >= 0 && r < n ? names[r] : "unknown cuFFT result";
}

/* Resolves every function of api from handle; false naming the first
 * missing symbol. Function pointers come from dlsym as void *: POSIX
 * guarantees the conversion, ISO C does not, hence the memcpy. */
static bool resolve(void *handle, sl_cufft_api *api, char *why, size_t why_size, const char *lib) {
  struct {
    const char *symbol;
    void *slot;
  } table[] = {
      {"cufftCreate", &api->create},
      {"cufftSetAutoAllocation", &api->set_auto_allocation},
      {"cufftMakePlanMany", &api->make_plan_many},
      {"cufftSetWorkArea", &api->set_work_area},
      {"cufftSetStream", &api->set_stream},
      {"cufftExecZ2Z", &api->exec_z2z},
      {"cufftDestroy", &api->destroy},
      {"cufftGetVersion", &api->get_version},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    void *f = dlsym(handle, table[i].symbol);
    if (!f) {
      snprintf(why, why_size, "%s has no %s", lib, table[i].symbol);
      return false;
    }
    memcpy(table[i].slot, &f, sizeof f);
  }
  return true;
}

bool sl_cufft_names(const char *const **names, size_t *n_names, char *why, size_t why_size) {
  const char *env = sl_setting_text(SL_SET_CUFFT);
  if (!strcmp(env, "none")) {
    snprintf(why, why_size, "cuFFT not loaded: setting cufft=none (SLUICE_CUFFT=none, from %s)",
             sl_setting_origin(SL_SET_CUFFT));
    return false;
  }
  static const char *chosen;
  chosen = env;
  *names = k_default_names;
  *n_names = sizeof k_default_names / sizeof k_default_names[0];
  if (env && env[0]) *names = &chosen, *n_names = 1;
  return true;
}

bool sl_cufft_load(sl_cufft_api *api, char *why, size_t why_size) {
  memset(api, 0, sizeof *api);
  const char *const *names;
  size_t n_names;
  if (!sl_cufft_names(&names, &n_names, why, why_size)) return false;
  /* a load started in the background (cufft_warm_up.h) ends first: then
   * dlopen finds the library loaded and cuFFT initialised */
  sl_cufft_warm_up_wait();
  return sl_cufft_load_names(names, n_names, api, why, why_size);
}

bool sl_cufft_load_names(const char *const *names, size_t n_names, sl_cufft_api *api, char *why,
                         size_t why_size) {
  memset(api, 0, sizeof *api);
  char first_error[200] = "";
  for (size_t i = 0; i < n_names; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", dlerror());
      continue;
    }
    if (!resolve(h, api, why, why_size, names[i])) {
      dlclose(h);
      memset(api, 0, sizeof *api);
      return false;
    }
    snprintf(api->library, sizeof api->library, "%s", names[i]);
    return true;
  }
  snprintf(why, why_size, "cuFFT not found (tried %s%s; %s)", names[0], n_names > 1 ? " and others" : "",
           first_error);
  return false;
}
