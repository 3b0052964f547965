/* Names of the backend kinds of the kernel ABI. */
#include "engine/core/kernel_abi.h"

const char *sl_backend_kind_name(sl_backend_kind k) {
  switch (k) {
    case SL_BACKEND_CPU: return "cpu";
    case SL_BACKEND_CUDA: return "cuda";
    default: return "unknown";
  }
}
