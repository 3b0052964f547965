/* Whether this build and machine can run the CUDA device tests; the first
 * call prints the visible "SKIP: no CUDA device (why)" line when not. Include
 * after cmocka.h (print_message). */
#ifndef SL_TEST_CUDA_PROBE_H
#define SL_TEST_CUDA_PROBE_H

#include <stdbool.h>

#include "engine/backend/backend.h"

static inline bool sl_test_cuda_available(void) {
  static int state = -1; /* -1 unknown, 0 none, 1 present */
  if (state >= 0) return state == 1;
  state = 0;
#ifdef SLUICE_HAVE_CUDA
  const sl_backend_ops *ops = sl_backend_ops_for(SL_BACKEND_CUDA);
  sl_error err;
  sl_error_clear(&err);
  sl_backend_caps caps;
  if (!ops)
    print_message("SKIP: no CUDA device (the CUDA backend is not in this build)\n");
  else if (ops->probe(&caps, &err) != SL_OK)
    print_message("SKIP: no CUDA device (%s)\n", err.msg);
  else
    state = 1;
#else
  print_message("SKIP: no CUDA device (built without CUDA)\n");
#endif
  return state == 1;
}

#endif
