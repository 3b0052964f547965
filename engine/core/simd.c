/* The process-wide choice of SIMD kernels (see simd.h). */
#include "engine/core/simd.h"

#include <pthread.h>
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

/* SLUICE_SIMD is read once per process. */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static sl_simd g_env_choice;   /* resolved default */
static char g_env_bad[64];     /* unknown or unsupported SLUICE_SIMD value, "" if fine */

static void read_env(void) {
  const char *v = getenv("SLUICE_SIMD");
  sl_simd best = SL_SIMD_SCALAR;
  if (sl_simd_supported(SL_SIMD_SSE2)) best = SL_SIMD_SSE2;
  if (sl_simd_supported(SL_SIMD_AVX2)) best = SL_SIMD_AVX2;
  g_env_choice = best;
  if (!v || !*v || strcmp(v, "auto") == 0) return;
  sl_simd want = SL_SIMD_AUTO;
  if (!sl_simd_parse(v, &want) || want == SL_SIMD_AUTO || !sl_simd_supported(want)) {
    size_t n = strlen(v);
    if (n >= sizeof g_env_bad) n = sizeof g_env_bad - 1;
    memcpy(g_env_bad, v, n);
    g_env_bad[n] = 0;
    return;
  }
  g_env_choice = want;
}

sl_code sl_simd_resolve(sl_simd want, sl_simd *out, sl_error *err) {
  if (want == SL_SIMD_AUTO) {
    pthread_once(&g_env_once, read_env);
    if (g_env_bad[0])
      return sl_fail(err, SL_ERR_BACKEND,
                     "SLUICE_SIMD=%s: expected scalar, sse2 or avx2 supported by this CPU "
                     "(supported here: scalar%s%s)",
                     g_env_bad, sl_simd_supported(SL_SIMD_SSE2) ? ", sse2" : "",
                     sl_simd_supported(SL_SIMD_AVX2) ? ", avx2" : "");
    *out = g_env_choice;
    return SL_OK;
  }
  if (!sl_simd_supported(want))
    return sl_fail(err, SL_ERR_BACKEND, "SIMD path %s is not supported by this CPU or build",
                   sl_simd_name(want));
  *out = want;
  return SL_OK;
}
