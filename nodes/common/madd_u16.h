/* Exact weighted sums of u16 pixels with AVX2 vpmaddwd, shared by the u16
 * sweeps of frame_moments.c (S, Sr, Sc) and virtual_detectors.c (S, BF, ADF).
 *
 * vpmaddwd multiplies 16 signed int16 lanes by 16 signed int16 weights and
 * adds adjacent products into 8 int32 lanes: no widening of the pixels and
 * one instruction per 16 pixels and weight vector, against the 5-6 pixels per
 * cycle of the widening adds of the portable loops.
 *
 * It reads the pixels as SIGNED, so a u16 x is biased first: x ^ 0x8000 is
 * exactly x - 32768 as an int16 (in [-32768, 32767]). Then
 *   sum w*x = madd-sum of w*(x ^ 0x8000) + 32768 * sum w,
 * where sum w is known in advance (a pixel count, a sum of column indices).
 * Costs one xor per vector, no branch and no second pass, and 65535
 * (saturated pixels) is as exact as any other value. The biased sums are
 * signed; they are gathered into u64 with wrapping arithmetic and the bias
 * term added last, so the result is exact whenever the true sum fits in u64.
 *
 * Overflow bound: a lane of one madd is at most 2 * 32768 * wmax in magnitude
 * (wmax the largest weight), so an int32 accumulator takes K madds exactly
 * while K * 65536 * wmax <= INT32_MAX; each sweep spills its accumulators
 * into int64 at that cadence (sl_madd_spill_every).
 *
 * AVX-512 (BW + VNNI): where the CPU has it, the AVX2 path of a sweep may run
 * 32 pixels a vector with vpdpwssd (the madd and its add in one
 * instruction; the same bias, the same int32 bound per vpdpwssd, the same
 * bytes) and masked loads for a row's last partial vector (a masked-off lane
 * reads nothing and adds 0). Process-wide like bslz4's GFNI: tests and
 * benches turn it off to run the AVX2 code (sl_madd_allow_avx512). */
#ifndef SL_MADD_U16_H
#define SL_MADD_U16_H

#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SL_MADD_X86 1
#include <immintrin.h>
/* For every function that uses the AVX2 intrinsics: the library builds for
 * baseline x86-64, and these run only when sl_simd_resolve says AVX2. */
#define SL_MADD_AVX2 __attribute__((target("avx2")))
/* For the AVX-512 variants (sl_madd_avx512_used says whether they run). */
#define SL_MADD_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
#else
#define SL_MADD_X86 0
#endif

/* Whether the AVX2 paths of the u16 sweeps run their AVX-512 variants: the
 * CPU has AVX-512 F, BW, VL and VNNI and they are allowed (the default). */
bool sl_madd_avx512_used(void);
/* Allows (true: used when the CPU has it) or forbids the AVX-512 variants;
 * process-wide, for tests and benches, not while sweeps run. A node that
 * laid out its tables for one width keeps it for the run (virtual_detectors'
 * band). */
void sl_madd_allow_avx512(bool allow);

/* Number of madds an int32 lane takes without overflow with weights <= wmax
 * (wmax <= 32767; at least 1). */
static inline int64_t sl_madd_spill_every(int64_t wmax) {
  return INT32_MAX / (65536 * (wmax > 0 ? wmax : 1));
}

#if SL_MADD_X86
/* x - 32768 as int16 lanes (see above). */
SL_MADD_AVX2 static inline __m256i sl_madd_bias(const uint16_t *p) {
  return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi16(-32768));
}

/* acc + the madds of x against the 16 int16 weights at w. */
SL_MADD_AVX2 static inline __m256i sl_madd_acc(__m256i acc, __m256i x, const int16_t *w) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i *)w)));
}

/* acc64 (4 x int64) += the 8 int32 lanes of v, sign-extended. */
SL_MADD_AVX2 static inline __m256i sl_madd_spill(__m256i acc64, __m256i v) {
  acc64 = _mm256_add_epi64(acc64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)));
  return _mm256_add_epi64(acc64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
}

/* Sum of the 4 int64 lanes, wrapping (u64). */
SL_MADD_AVX2 static inline uint64_t sl_madd_hsum64(__m256i v) {
  __m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return (uint64_t)_mm_cvtsi128_si64(s) + (uint64_t)_mm_extract_epi64(s, 1);
}

/* Exact sum of the 8 int32 lanes, wrapping (u64). */
SL_MADD_AVX2 static inline uint64_t sl_madd_hsum32(__m256i v) {
  return sl_madd_hsum64(sl_madd_spill(_mm256_setzero_si256(), v));
}

/* *t += madds of n vectors of 16 pixels from x against ones (S), *c +=
 * against the weights from wt (Sc's column indices, frame_moments.h). Two
 * accumulators of each, so that the adds do not chain from one vector to the
 * next. */
SL_MADD_AVX2 static inline void sl_madd_run_sc(const uint16_t *x, const int16_t *wt, int64_t n,
                                              __m256i *t, __m256i *c) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i t0 = *t, c0 = *c, t1 = _mm256_setzero_si256(), c1 = t1;
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    __m256i a = sl_madd_bias(x + 16 * k), b = sl_madd_bias(x + 16 * k + 16);
    t0 = _mm256_add_epi32(t0, _mm256_madd_epi16(a, ones));
    t1 = _mm256_add_epi32(t1, _mm256_madd_epi16(b, ones));
    c0 = sl_madd_acc(c0, a, wt + 16 * k);
    c1 = sl_madd_acc(c1, b, wt + 16 * k + 16);
  }
  if (k < n) {
    __m256i a = sl_madd_bias(x + 16 * k);
    t0 = _mm256_add_epi32(t0, _mm256_madd_epi16(a, ones));
    c0 = sl_madd_acc(c0, a, wt + 16 * k);
  }
  *t = _mm256_add_epi32(t0, t1);
  *c = _mm256_add_epi32(c0, c1);
}

/* --- AVX-512: 32 pixels a vector --- */

/* x - 32768 as int16 lanes, 32 pixels. */
SL_MADD_AVX512 static inline __m512i sl_madd512_bias(const uint16_t *p) {
  return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi16(-32768));
}

/* The same for the lanes of mask k only (a row's last partial vector); the
 * other lanes are 0 and read nothing. */
SL_MADD_AVX512 static inline __m512i sl_madd512_bias_masked(const uint16_t *p, __mmask32 k) {
  return _mm512_xor_si512(_mm512_maskz_loadu_epi16(k, p),
                          _mm512_maskz_mov_epi16(k, _mm512_set1_epi16(-32768)));
}

/* acc + the madds of x against w (vpdpwssd: no saturation, wraps like the
 * AVX2 madd + add; exact within sl_madd_spill_every). */
SL_MADD_AVX512 static inline __m512i sl_madd512_acc(__m512i acc, __m512i x, __m512i w) {
  return _mm512_dpwssd_epi32(acc, x, w);
}

/* acc64 (8 x int64) += the 16 int32 lanes of v, sign-extended. */
SL_MADD_AVX512 static inline __m512i sl_madd512_spill(__m512i acc64, __m512i v) {
  acc64 = _mm512_add_epi64(acc64, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)));
  return _mm512_add_epi64(acc64, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
}

/* Sum of the 8 int64 lanes, wrapping (u64). */
SL_MADD_AVX512 static inline uint64_t sl_madd512_hsum64(__m512i v) {
  return (uint64_t)_mm512_reduce_add_epi64(v);
}

/* Exact sum of the 16 int32 lanes, wrapping (u64). */
SL_MADD_AVX512 static inline uint64_t sl_madd512_hsum32(__m512i v) {
  return sl_madd512_hsum64(sl_madd512_spill(_mm512_setzero_si512(), v));
}
#endif

#endif
