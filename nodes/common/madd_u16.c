/* The process-wide switch of the u16 sweeps' AVX-512 variants (madd_u16.h). */
#include "nodes/common/madd_u16.h"

static int g_avx512 = -1; /* -1: not decided yet */

#if SL_MADD_X86
void sl_madd_allow_avx512(bool allow) {
  int v = allow && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  __atomic_store_n(&g_avx512, v, __ATOMIC_RELAXED);
}

bool sl_madd_avx512_used(void) {
  if (__atomic_load_n(&g_avx512, __ATOMIC_RELAXED) < 0) sl_madd_allow_avx512(true);
  return __atomic_load_n(&g_avx512, __ATOMIC_RELAXED) == 1;
}
#else
void sl_madd_allow_avx512(bool allow) {
  (void)allow;
  __atomic_store_n(&g_avx512, 0, __ATOMIC_RELAXED);
}
bool sl_madd_avx512_used(void) { return false; }
#endif
