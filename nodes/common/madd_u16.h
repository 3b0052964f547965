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
 * into int64 at that cadence (sl_madd_spill_every). */
#ifndef SL_MADD_U16_H
#define SL_MADD_U16_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SL_MADD_X86 1
#include <immintrin.h>
/* For every function that uses the AVX2 intrinsics: the library builds for
 * baseline x86-64, and these run only when sl_simd_resolve says AVX2. */
#define SL_MADD_AVX2 __attribute__((target("avx2")))
#else
#define SL_MADD_X86 0
#endif

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
#endif

#endif
