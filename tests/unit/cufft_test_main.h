/* The device half of a cuFFT node's CUDA test (test_cuda_idpc, test_cuda_dpc):
 * with a device, makes the CUDA backend and a 2-worker CPU backend (into
 * *cuda, *cpu, which the groups' tests use), runs `fallback` (the node
 * without cuFFT), then `device` when cuFFT loads (else says why it skips),
 * and destroys both backends. Returns cmocka's failure count; 0 and a SKIP
 * line without a device. Include after cmocka.h and cuda_probe.h. */
#ifndef SL_TEST_CUFFT_TEST_MAIN_H
#define SL_TEST_CUFFT_TEST_MAIN_H

#include <stdio.h>

#include "shaders/cuda/common/cufft_loader.h"

static inline int sl_test_cufft_device_groups(const char *node, sl_backend **cuda, sl_backend **cpu,
                                              const struct CMUnitTest *fallback, size_t n_fallback,
                                              const struct CMUnitTest *device, size_t n_device) {
  if (!sl_test_cuda_available()) return 0;
  sl_error e;
  sl_error_clear(&e);
  if (sl_backend_ops_for(SL_BACKEND_CUDA)->create(0, cuda, &e) != SL_OK) {
    printf("SKIP: no CUDA device (create failed: %s)\n", e.msg);
    return 0;
  }
  if (sl_cpu_backend_ops.create(2, cpu, &e) != SL_OK) return 1;
  char name[64];
  snprintf(name, sizeof name, "%s_cuda_fallback", node);
  int rc = _cmocka_run_group_tests(name, fallback, n_fallback, NULL, NULL);
  sl_cufft_api api;
  char why[512] = "";
  if (!sl_cufft_load(&api, why, sizeof why)) {
    printf("SKIP: %s on the device (%s)\n", node, why);
  } else {
    snprintf(name, sizeof name, "%s_cuda", node);
    rc |= _cmocka_run_group_tests(name, device, n_device, NULL, NULL);
  }
  (*cpu)->ops->destroy(*cpu);
  (*cuda)->ops->destroy(*cuda);
  return rc;
}

#endif
