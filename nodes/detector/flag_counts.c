/* Flag counts from a ones bitmap or from the values (flag_counts.h). */
#include "nodes/detector/flag_counts.h"

#include <string.h>

/* Set bits of `ones` in [b, e). */
static uint32_t popcount_range(const uint8_t *ones, uint64_t b, uint64_t e) {
  uint32_t n = 0;
  /* head: bits up to a byte boundary */
  while (b < e && (b & 7)) {
    n += (ones[b >> 3] >> (b & 7)) & 1u;
    b++;
  }
  /* whole bytes, eight at a time when possible */
  const uint8_t *p = ones + (b >> 3);
  uint64_t bytes = (e - b) >> 3;
  /* flags are rare: most words are zero, and only the others are counted
   * (the baseline x86-64 build has no popcnt instruction) */
  for (; bytes >= 8; bytes -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    if (w) n += (uint32_t)__builtin_popcountll(w);
  }
  for (; bytes; bytes--, p++)
    if (*p) n += (uint32_t)__builtin_popcount(*p);
  b += ((e - b) >> 3) << 3;
  for (; b < e; b++) n += (ones[b >> 3] >> (b & 7)) & 1u;
  return n;
}

void sl_flag_counts_from_bitmap(const uint8_t *ones, uint64_t first, int64_t pixels,
                                uint32_t *counts) {
  for (int64_t g0 = 0, k = 0; g0 < pixels; g0 += SL_FLAG_GROUP_PIXELS, k++) {
    int64_t g1 = g0 + SL_FLAG_GROUP_PIXELS < pixels ? g0 + SL_FLAG_GROUP_PIXELS : pixels;
    counts[k] = popcount_range(ones, first + (uint64_t)g0, first + (uint64_t)g1);
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
