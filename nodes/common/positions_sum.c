/* Sums over scan positions of items (positions_sum.h). */
#include "nodes/common/positions_sum.h"

#include <string.h>

#include "engine/core/util.h"
#include "nodes/common/madd_u16.h"

/* The range is cut into blocks whose accumulators stay in L1; each block
 * streams its slice of every position, four positions per sweep of y so y
 * is loaded and stored a quarter as often, and x is read in runs of up to
 * SUM_BLOCK elements. u8 and u16
 * positions go into u32 sums of the block first (exact for up to
 * UINT32_MAX / max positions), added into y after each group of
 * positions: a widening add to 32 bits holds twice the elements of one to
 * 64 (mean_pattern's sum of 16,384 frames of 192 x 192 u16 took 0.12 s at
 * 1 thread, 57% on top of reading and decoding them). Built for AVX2 and
 * AVX-512 too (SL_HOT_CLONES_512): the baseline's SSE2 has no widening
 * load, and 32-lane widening adds took 26 ms where 16-lane ones took 38. */
#define SUM_BLOCK 1024
SL_HOT_CLONES_512 void sl_positions_fold(sl_dtype t, const void *x_, int64_t item, void *y_, int64_t p0, int64_t p1,
                                         int64_t e0, int64_t e1) {
  switch (t) {
#define SUM_NARROW_CASE(T, TMAX)                                                       \
  {                                                                                    \
    const T *restrict x = x_;                                                          \
    uint64_t *restrict y = y_;                                                         \
    const int64_t group_max = (int64_t)(UINT32_MAX / (TMAX));                          \
    uint32_t acc[SUM_BLOCK];                                                           \
    for (int64_t b = e0; b < e1; b += SUM_BLOCK) {                                     \
      int64_t n = e1 - b < SUM_BLOCK ? e1 - b : SUM_BLOCK;                             \
      for (int64_t g0 = p0; g0 < p1; g0 += group_max) {                                \
        int64_t g1 = p1 - g0 < group_max ? p1 : g0 + group_max, p = g0;                \
        memset(acc, 0, (size_t)n * sizeof acc[0]);                                     \
        for (; p + 4 <= g1; p += 4) {                                                  \
          const T *restrict q0 = x + p * item + b, *restrict q1 = q0 + item;           \
          const T *restrict q2 = q1 + item, *restrict q3 = q2 + item;                  \
          for (int64_t e = 0; e < n; e++)                                              \
            acc[e] += ((uint32_t)q0[e] + q1[e]) + ((uint32_t)q2[e] + q3[e]);           \
        }                                                                              \
        for (; p < g1; p++) {                                                          \
          const T *restrict q = x + p * item + b;                                      \
          for (int64_t e = 0; e < n; e++) acc[e] += q[e];                              \
        }                                                                              \
        for (int64_t e = 0; e < n; e++) y[b + e] += acc[e];                            \
      }                                                                                \
    }                                                                                  \
    break;                                                                             \
  }
#define SUM_CASE(T, ACC)                                                         \
  {                                                                              \
    const T *restrict x = x_;                                                    \
    ACC *restrict y = y_;                                                        \
    for (int64_t b = e0; b < e1; b += SUM_BLOCK) {                               \
      int64_t n = e1 - b < SUM_BLOCK ? e1 - b : SUM_BLOCK;                       \
      ACC *restrict yb = y + b;                                                  \
      int64_t p = p0;                                                            \
      for (; p + 4 <= p1; p += 4) {                                              \
        const T *restrict q0 = x + p * item + b, *restrict q1 = q0 + item;       \
        const T *restrict q2 = q1 + item, *restrict q3 = q2 + item;              \
        for (int64_t e = 0; e < n; e++)                                          \
          yb[e] = (((yb[e] + (ACC)q0[e]) + (ACC)q1[e]) + (ACC)q2[e]) + (ACC)q3[e]; \
      }                                                                          \
      for (; p < p1; p++) {                                                      \
        const T *restrict q = x + p * item + b;                                  \
        for (int64_t e = 0; e < n; e++) yb[e] += (ACC)q[e];                      \
      }                                                                          \
    }                                                                            \
    break;                                                                       \
  }
    case SL_U8: SUM_NARROW_CASE(uint8_t, 0xFFu)
    case SL_U16: SUM_NARROW_CASE(uint16_t, 0xFFFFu)
    case SL_U32: SUM_CASE(uint32_t, uint64_t)
    case SL_U64: SUM_CASE(uint64_t, uint64_t)
    case SL_F32: SUM_CASE(float, double)
    case SL_F64: SUM_CASE(double, double)
#undef SUM_CASE
#undef SUM_NARROW_CASE
    default: break;
  }
}

#if SL_MADD_X86
/* u16 positions into y[e0, e1) (a multiple of 256 elements) on AVX-512
 * (where sl_madd_avx512_used): 256 elements a tile, their sixteen u32 sums
 * held in registers over every position of a group (at most 65,537
 * positions: exact in u32), then added into y. Over 14 frames of 192 x 192
 * in L2 it took 1.1-1.4 us a frame where sl_positions_fold, four positions
 * a sweep of its accumulator in L1, took 1.8 (a harness of both). The sum
 * node runs it over a worker's own frames (sum.c's sum_positions): over
 * every frame of a chunk (its sum_tiles, half of them in the other core's
 * cache at 2 threads) it was slower than sl_positions_fold, 24.5 ms against
 * 21.8 for mean_pattern's sum. */
#define SUM_REG_TILE 256
SL_MADD_AVX512 static void sum_u16_tiles512(const uint16_t *x, int64_t item, uint64_t *y, int64_t p0,
                                            int64_t p1, int64_t e0, int64_t e1) {
  const int64_t group_max = (int64_t)(UINT32_MAX / 0xFFFFu);
  for (int64_t b = e0; b + SUM_REG_TILE <= e1; b += SUM_REG_TILE)
    for (int64_t g0 = p0; g0 < p1; g0 += group_max) {
      const int64_t g1 = p1 - g0 < group_max ? p1 : g0 + group_max;
      __m512i acc[16];
      for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
      for (int64_t p = g0; p < g1; p++) {
        const uint16_t *q = x + p * item + b;
        for (int i = 0; i < 16; i++)
          acc[i] = _mm512_add_epi32(acc[i], _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(q + 16 * i))));
      }
      for (int i = 0; i < 16; i++) {
        uint64_t *d = y + b + 16 * i;
        const __m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(acc[i]));
        const __m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(acc[i], 1));
        _mm512_storeu_si512(d, _mm512_add_epi64(_mm512_loadu_si512(d), lo));
        _mm512_storeu_si512(d + 8, _mm512_add_epi64(_mm512_loadu_si512(d + 8), hi));
      }
    }
}
#endif

void sl_positions_sum(sl_dtype t, const void *x, int64_t item, void *y, int64_t p0, int64_t p1) {
  int64_t e0 = 0;
#if SL_MADD_X86
  if (t == SL_U16 && sl_madd_avx512_used()) {
    e0 = item / SUM_REG_TILE * SUM_REG_TILE;
    sum_u16_tiles512(x, item, y, p0, p1, 0, e0);
  }
#endif
  if (e0 < item) sl_positions_fold(t, x, item, y, p0, p1, e0, item);
}

