/* Flag counts from a ones bitmap or from the values (flag_counts.h). */
#include "nodes/detector/flag_counts.h"

#include <stdbool.h>
#include <string.h>

/* Set bits of `ones` in [b, e); POPCOUNT counts the bits of a 64-bit word.
 * Written once for the two versions below. */
#define POPCOUNT_RANGE(NAME, ATTR, POPCOUNT)                                          \
  ATTR static uint32_t NAME(const uint8_t *ones, uint64_t b, uint64_t e) {           \
    uint32_t n = 0;                                                                   \
    while (b < e && (b & 7)) { /* head: bits up to a byte boundary */                \
      n += (ones[b >> 3] >> (b & 7)) & 1u;                                            \
      b++;                                                                            \
    }                                                                                 \
    const uint8_t *p = ones + (b >> 3);                                               \
    uint64_t bytes = (e - b) >> 3;                                                    \
    for (; bytes >= 8; bytes -= 8, p += 8) {                                          \
      uint64_t w;                                                                     \
      memcpy(&w, p, 8);                                                               \
      n += POPCOUNT(w);                                                               \
    }                                                                                 \
    for (; bytes; bytes--, p++) n += POPCOUNT((uint64_t)*p);                          \
    b += ((e - b) >> 3) << 3;                                                         \
    for (; b < e; b++) n += (ones[b >> 3] >> (b & 7)) & 1u;                           \
    return n;                                                                         \
  }

/* Without a popcnt instruction (baseline x86-64: a libgcc call per word):
 * flags are rare, so only the nonzero words are counted. */
#define POPCOUNT_SPARSE(w) ((w) ? (uint32_t)__builtin_popcountll(w) : 0u)
POPCOUNT_RANGE(popcount_range_plain, , POPCOUNT_SPARSE)

#if defined(__x86_64__) && defined(__GNUC__)
/* With it: every word, no branch. */
#define POPCOUNT_HW(w) ((uint32_t)__builtin_popcountll(w))
POPCOUNT_RANGE(popcount_range_hw, __attribute__((target("popcnt"))), POPCOUNT_HW)
static int have_popcnt(void) {
  static int have = -1;
  int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
  if (h < 0) {
    h = __builtin_cpu_supports("popcnt") ? 1 : 0;
    __atomic_store_n(&have, h, __ATOMIC_RELAXED);
  }
  return h;
}
#else
#define popcount_range_hw popcount_range_plain
static int have_popcnt(void) { return 0; }
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
_Static_assert(SL_FLAG_GROUP_PIXELS == 1024, "a group is two 64-byte vectors of bits");
/* With AVX-512 VPOPCNTDQ, a frame whose bits start on a byte: each whole
 * group is two 64-byte loads counted 64 bits a lane, summed once (the
 * scalar loop's 16 loads and popcnts a group cost about 8 ns, 2% of the
 * decode, for counts that only mask_correct reads); the last, short group
 * as before. */
__attribute__((target("popcnt,avx512f,avx512vpopcntdq"))) static void counts_avx512(
    const uint8_t *ones, uint64_t first, int64_t pixels, uint32_t *counts) {
  const uint8_t *p = ones + (first >> 3);
  int64_t g0 = 0, k = 0;
  for (; g0 + SL_FLAG_GROUP_PIXELS <= pixels; g0 += SL_FLAG_GROUP_PIXELS, k++, p += 128) {
    const __m512i a = _mm512_popcnt_epi64(_mm512_loadu_si512((const void *)p));
    const __m512i b = _mm512_popcnt_epi64(_mm512_loadu_si512((const void *)(p + 64)));
    counts[k] = (uint32_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
  }
  if (g0 < pixels) counts[k] = popcount_range_hw(ones, first + (uint64_t)g0, first + (uint64_t)pixels);
}
/* (libgcc reads the CPU's features once at start-up: a load, no cache needed) */
static bool have_vpopcntdq(void) {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
}
#endif

void sl_flag_counts_from_bitmap(const uint8_t *ones, uint64_t first, int64_t pixels,
                                uint32_t *counts) {
#if defined(__x86_64__) && defined(__GNUC__)
  if ((first & 7) == 0 && have_vpopcntdq()) {
    counts_avx512(ones, first, pixels, counts);
    return;
  }
#endif
  uint32_t (*count)(const uint8_t *, uint64_t, uint64_t) =
      have_popcnt() ? popcount_range_hw : popcount_range_plain;
  for (int64_t g0 = 0, k = 0; g0 < pixels; g0 += SL_FLAG_GROUP_PIXELS, k++) {
    int64_t g1 = g0 + SL_FLAG_GROUP_PIXELS < pixels ? g0 + SL_FLAG_GROUP_PIXELS : pixels;
    counts[k] = count(ones, first + (uint64_t)g0, first + (uint64_t)g1);
  }
}

#define COUNT_BY_VALUE(T, TMAX)                                                       \
  for (int64_t g0 = 0, k = 0; g0 < pixels; g0 += SL_FLAG_GROUP_PIXELS, k++) {         \
    int64_t g1 = g0 + SL_FLAG_GROUP_PIXELS < pixels ? g0 + SL_FLAG_GROUP_PIXELS : pixels; \
    const T *x = (const T *)frame;                                                    \
    uint32_t n = 0;                                                                   \
    for (int64_t i = g0; i < g1; i++) n += x[i] == (T)(TMAX);                         \
    counts[k] = n;                                                                    \
  }

void sl_flag_counts_of_frame(const void *frame, sl_dtype t, int64_t pixels, uint32_t *counts) {
  if (t == SL_U8) {
    COUNT_BY_VALUE(uint8_t, 0xFFu)
  } else if (t == SL_U16) {
    COUNT_BY_VALUE(uint16_t, 0xFFFFu)
  } else {
    COUNT_BY_VALUE(uint32_t, 0xFFFFFFFFu)
  }
}
#undef COUNT_BY_VALUE
