/* Backend lookup and selection. No silent fallback: asking for a backend that
 * is not available is an error; `auto` picks the best available. */
#include "engine/backend/backend.h"

#include <string.h>

const sl_backend_ops *sl_backend_ops_for(sl_backend_kind k) {
  switch (k) {
    case SL_BACKEND_CPU: return &sl_cpu_backend_ops;
#ifdef SLUICE_HAVE_CUDA
    case SL_BACKEND_CUDA: return &sl_cuda_backend_ops;
#endif
    default: return NULL; /* not compiled into this build */
  }
}

sl_code sl_backend_parse(const char *name, int *kind_or_auto, sl_error *err) {
  if (!strcmp(name, "auto")) *kind_or_auto = SL_BACKEND_AUTO;
  else if (!strcmp(name, "cpu")) *kind_or_auto = SL_BACKEND_CPU;
  else if (!strcmp(name, "cuda")) *kind_or_auto = SL_BACKEND_CUDA;
  else return sl_fail(err, SL_ERR_USAGE, "unknown backend '%s' (expected auto, cpu or cuda)", name);
  return SL_OK;
}

sl_code sl_backend_select(int kind_or_auto, sl_backend_kind *out, sl_error *err) {
  if (kind_or_auto == SL_BACKEND_AUTO) {
    /* Prefer a device backend that is compiled in and finds a device. */
    for (int k = SL_BACKEND_COUNT - 1; k >= 0; k--) {
      const sl_backend_ops *ops = sl_backend_ops_for((sl_backend_kind)k);
      sl_backend_caps caps;
      sl_error probe_err;
      sl_error_clear(&probe_err);
      if (ops && ops->probe(&caps, &probe_err) == SL_OK) {
        *out = (sl_backend_kind)k;
        return SL_OK;
      }
    }
    return sl_fail(err, SL_ERR_BACKEND, "no compute backend is available");
  }
  const sl_backend_ops *ops = sl_backend_ops_for((sl_backend_kind)kind_or_auto);
  if (!ops)
    return sl_fail(err, SL_ERR_BACKEND,
                   "backend '%s' is not available in this build (it was built without it); "
                   "use --backend cpu or auto",
                   sl_backend_kind_name((sl_backend_kind)kind_or_auto));
  sl_backend_caps caps;
  sl_code rc = ops->probe(&caps, err);
  if (rc != SL_OK) return rc;
  *out = (sl_backend_kind)kind_or_auto;
  return SL_OK;
}
