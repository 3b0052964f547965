/* Names of the backend kinds of the kernel ABI; which node types a device
 * kernel serves. */
#include "engine/core/kernel_abi.h"

#include <string.h>

const char *sl_backend_kind_name(sl_backend_kind k) {
  switch (k) {
    case SL_BACKEND_CPU: return "cpu";
    case SL_BACKEND_CUDA: return "cuda";
    default: return "unknown";
  }
}

bool sl_device_kernel_serves(const sl_device_kernel *k, const char *type) {
  size_t n = strlen(type);
  for (const char *p = k->nodes; p && *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " ");
    if (w == n && !strncmp(p, type, n)) return true;
    p += w;
  }
  return false;
}
