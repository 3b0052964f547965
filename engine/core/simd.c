/* The process-wide choice of SIMD kernels (see simd.h). */
#include "engine/core/simd.h"

#include "engine/core/settings.h"
#include <stdlib.h>
#include <string.h>

static const char *const k_names[] = {"auto", "scalar", "sse2", "avx2"};

const char *sl_simd_name(sl_simd s) {
  return (unsigned)s < sizeof k_names / sizeof k_names[0] ? k_names[s] : "?";
}

bool sl_simd_parse(const char *name, sl_simd *out) {
  for (unsigned i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
    if (name && strcmp(name, k_names[i]) == 0) {
      *out = (sl_simd)i;
      return true;
    }
  return false;
}

int sl_simd_supported(sl_simd s) {
  switch (s) {
  case SL_SIMD_SCALAR: return 1;
#if defined(__x86_64__) || defined(__i386__)
  case SL_SIMD_SSE2: return 1; /* baseline on x86-64 */
  case SL_SIMD_AVX2: return __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
  default: return 0;
  }
}

/* The `simd` setting (engine/core/settings.h: SLUICE_SIMD or --setting
 * simd=...): auto, or a forced path this CPU must have. */
static void setting_choice(sl_simd *choice, const char **bad) {
  sl_simd best = SL_SIMD_SCALAR;
  if (sl_simd_supported(SL_SIMD_SSE2)) best = SL_SIMD_SSE2;
  if (sl_simd_supported(SL_SIMD_AVX2)) best = SL_SIMD_AVX2;
  sl_simd want = (sl_simd)sl_setting_choice(SL_SET_SIMD); /* choices in sl_simd order */
  *bad = NULL;
  *choice = best;
  if (want == SL_SIMD_AUTO) return;
  if (!sl_simd_supported(want)) *bad = sl_setting_text(SL_SET_SIMD);
  else *choice = want;
}

sl_code sl_simd_resolve(sl_simd want, sl_simd *out, sl_error *err) {
  if (want == SL_SIMD_AUTO) {
    const char *bad;
    setting_choice(out, &bad);
    if (bad)
      return sl_fail(err, SL_ERR_BACKEND,
                     "setting simd=%s (from %s): this CPU or build lacks it (supported here: "
                     "scalar%s%s)",
                     bad, sl_setting_origin(SL_SET_SIMD), sl_simd_supported(SL_SIMD_SSE2) ? ", sse2" : "",
                     sl_simd_supported(SL_SIMD_AVX2) ? ", avx2" : "");
    return SL_OK;
  }
  if (!sl_simd_supported(want))
    return sl_fail(err, SL_ERR_BACKEND, "SIMD path %s is not supported by this CPU or build",
                   sl_simd_name(want));
  *out = want;
  return SL_OK;
}
