/* Bit un-transposition kernels for bitshuffle blocks, with runtime dispatch
 * (the path is chosen by sl_simd_resolve, engine/core/simd.h): a portable
 * scalar path (the reference), SSE2 and AVX2 on x86-64. The AVX2
 * functions carry __attribute__((target("avx2"))) so that the library still
 * builds for baseline x86-64; they run only when the CPU reports AVX2.
 *
 * A block of m elements (m a multiple of 8) of s bytes is stored as 8*s
 * bit-rows of m/8 bytes; row 8j+k holds bit k of byte j of every element,
 * element i at bit (i % 8) of byte (i / 8). To decode, for each group g of 8
 * elements and each byte j, the 8 bytes row[8j+k][g] (k = 0..7) form an 8x8
 * bit matrix whose transpose is byte j of the 8 elements.
 *
 * The vector paths work on tiles of 16 (SSE2) or 32 (AVX2) groups: for each
 * byte plane j, load 16/32 bytes of each of the 8 rows, transpose bytes with
 * unpacks so that each 64-bit lane holds one group's 8 row bytes, transpose
 * bits inside every 64-bit lane (three mask/shift/xor rounds), then interleave
 * the s planes into elements. Groups left over after the last full tile go
 * through the scalar path. */
#include "engine/core/bit_transpose.h"
#include "nodes/codec/bslz4.h"

#if defined(__x86_64__) || defined(__i386__)
#define SL_X86 1
#include <immintrin.h>
#else
#define SL_X86 0
#endif


/* Scalar path over groups [g0, nb) of a block with nb = m/8 groups. */
static void unshuffle_scalar_range(const uint8_t *in, uint8_t *out, size_t nb, size_t s,
                                   size_t g0) {
  for (size_t j = 0; j < s; j++) {
    const uint8_t *rows = in + 8 * j * nb;
    for (size_t g = g0; g < nb; g++) {
      uint64_t x = 0;
      for (unsigned k = 0; k < 8; k++) x |= (uint64_t)rows[k * nb + g] << (8 * k);
      x = sl_tr8(x);
      uint8_t *o = out + 8 * g * s + j;
      for (unsigned t = 0; t < 8; t++) o[t * s] = (uint8_t)(x >> (8 * t));
    }
  }
}

#if SL_X86
/* ---------------------------------------------------------------- SSE2 --- */

static inline __m128i tr8_sse2(__m128i x) {
  const __m128i m1 = _mm_set1_epi64x(0x00AA00AA00AA00AALL);
  const __m128i m2 = _mm_set1_epi64x(0x0000CCCC0000CCCCLL);
  const __m128i m3 = _mm_set1_epi64x(0x00000000F0F0F0F0LL);
  __m128i t;
  t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 7)), m1);
  x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 7)));
  t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 14)), m2);
  x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 14)));
  t = _mm_and_si128(_mm_xor_si128(x, _mm_srli_epi64(x, 28)), m3);
  x = _mm_xor_si128(x, _mm_xor_si128(t, _mm_slli_epi64(t, 28)));
  return x;
}

/* One byte plane, 16 groups starting at g: 128 output bytes (byte j of 128
 * consecutive elements) to dst. rows points at the plane's first row. */
static inline void plane_tile_sse2(const uint8_t *rows, size_t nb, size_t g, uint8_t *dst) {
#define LD(k) _mm_loadu_si128((const __m128i *)(rows + (k) * nb + g))
  __m128i a0 = LD(0), a1 = LD(1), a2 = LD(2), a3 = LD(3);
  __m128i a4 = LD(4), a5 = LD(5), a6 = LD(6), a7 = LD(7);
#undef LD
  __m128i b0 = _mm_unpacklo_epi8(a0, a1), b1 = _mm_unpackhi_epi8(a0, a1);
  __m128i b2 = _mm_unpacklo_epi8(a2, a3), b3 = _mm_unpackhi_epi8(a2, a3);
  __m128i b4 = _mm_unpacklo_epi8(a4, a5), b5 = _mm_unpackhi_epi8(a4, a5);
  __m128i b6 = _mm_unpacklo_epi8(a6, a7), b7 = _mm_unpackhi_epi8(a6, a7);
  __m128i c0 = _mm_unpacklo_epi16(b0, b2), c1 = _mm_unpackhi_epi16(b0, b2);
  __m128i c2 = _mm_unpacklo_epi16(b1, b3), c3 = _mm_unpackhi_epi16(b1, b3);
  __m128i c4 = _mm_unpacklo_epi16(b4, b6), c5 = _mm_unpackhi_epi16(b4, b6);
  __m128i c6 = _mm_unpacklo_epi16(b5, b7), c7 = _mm_unpackhi_epi16(b5, b7);
  __m128i *o = (__m128i *)dst;
  _mm_storeu_si128(o + 0, tr8_sse2(_mm_unpacklo_epi32(c0, c4)));
  _mm_storeu_si128(o + 1, tr8_sse2(_mm_unpackhi_epi32(c0, c4)));
  _mm_storeu_si128(o + 2, tr8_sse2(_mm_unpacklo_epi32(c1, c5)));
  _mm_storeu_si128(o + 3, tr8_sse2(_mm_unpackhi_epi32(c1, c5)));
  _mm_storeu_si128(o + 4, tr8_sse2(_mm_unpacklo_epi32(c2, c6)));
  _mm_storeu_si128(o + 5, tr8_sse2(_mm_unpackhi_epi32(c2, c6)));
  _mm_storeu_si128(o + 6, tr8_sse2(_mm_unpacklo_epi32(c3, c7)));
  _mm_storeu_si128(o + 7, tr8_sse2(_mm_unpackhi_epi32(c3, c7)));
}

/* Interleaves s planes (plane p at tile + p * stride) of nelem bytes (a
 * multiple of 16) into nelem elements of s bytes at out. s is 2, 4 or 8. */
static inline void interleave_sse2(const uint8_t *tile, size_t stride, size_t nelem, size_t s,
                                   uint8_t *out) {
  for (size_t e = 0; e < nelem; e += 16) {
#define PL(p) _mm_loadu_si128((const __m128i *)(tile + (p) * stride + e))
    __m128i *o = (__m128i *)(out + e * s);
    if (s == 2) {
      __m128i a = PL(0), b = PL(1);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi8(a, b));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi8(a, b));
    } else if (s == 4) {
      __m128i a = PL(0), b = PL(1), c = PL(2), d = PL(3);
      __m128i ablo = _mm_unpacklo_epi8(a, b), abhi = _mm_unpackhi_epi8(a, b);
      __m128i cdlo = _mm_unpacklo_epi8(c, d), cdhi = _mm_unpackhi_epi8(c, d);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(ablo, cdlo));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ablo, cdlo));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(abhi, cdhi));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(abhi, cdhi));
    } else { /* s == 8 */
      __m128i p0 = PL(0), p1 = PL(1), p2 = PL(2), p3 = PL(3);
      __m128i p4 = PL(4), p5 = PL(5), p6 = PL(6), p7 = PL(7);
      __m128i q01l = _mm_unpacklo_epi8(p0, p1), q01h = _mm_unpackhi_epi8(p0, p1);
      __m128i q23l = _mm_unpacklo_epi8(p2, p3), q23h = _mm_unpackhi_epi8(p2, p3);
      __m128i q45l = _mm_unpacklo_epi8(p4, p5), q45h = _mm_unpackhi_epi8(p4, p5);
      __m128i q67l = _mm_unpacklo_epi8(p6, p7), q67h = _mm_unpackhi_epi8(p6, p7);
      /* 32-bit units: bytes 0..3 of elements */
      __m128i r0 = _mm_unpacklo_epi16(q01l, q23l), r1 = _mm_unpackhi_epi16(q01l, q23l);
      __m128i r2 = _mm_unpacklo_epi16(q01h, q23h), r3 = _mm_unpackhi_epi16(q01h, q23h);
      __m128i t0 = _mm_unpacklo_epi16(q45l, q67l), t1 = _mm_unpackhi_epi16(q45l, q67l);
      __m128i t2 = _mm_unpacklo_epi16(q45h, q67h), t3 = _mm_unpackhi_epi16(q45h, q67h);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi32(r0, t0));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi32(r0, t0));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi32(r1, t1));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi32(r1, t1));
      _mm_storeu_si128(o + 4, _mm_unpacklo_epi32(r2, t2));
      _mm_storeu_si128(o + 5, _mm_unpackhi_epi32(r2, t2));
      _mm_storeu_si128(o + 6, _mm_unpacklo_epi32(r3, t3));
      _mm_storeu_si128(o + 7, _mm_unpackhi_epi32(r3, t3));
    }
#undef PL
  }
}

static void unshuffle_sse2(const uint8_t *in, uint8_t *out, size_t m, size_t s) {
  const size_t nb = m / 8, tiles = nb / 16;
  if (s == 1) {
    for (size_t t = 0; t < tiles; t++) plane_tile_sse2(in, nb, 16 * t, out + 128 * t);
  } else {
    uint8_t tile[8 * 128] __attribute__((aligned(16)));
    for (size_t t = 0; t < tiles; t++) {
      for (size_t j = 0; j < s; j++) plane_tile_sse2(in + 8 * j * nb, nb, 16 * t, tile + 128 * j);
      interleave_sse2(tile, 128, 128, s, out + 128 * t * s);
    }
  }
  unshuffle_scalar_range(in, out, nb, s, 16 * tiles);
}

/* ---------------------------------------------------------------- AVX2 --- */

#define SL_AVX2 __attribute__((target("avx2")))

SL_AVX2 static inline __m256i tr8_avx2(__m256i x) {
  const __m256i m1 = _mm256_set1_epi64x(0x00AA00AA00AA00AALL);
  const __m256i m2 = _mm256_set1_epi64x(0x0000CCCC0000CCCCLL);
  const __m256i m3 = _mm256_set1_epi64x(0x00000000F0F0F0F0LL);
  __m256i t;
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 7)), m1);
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 7)));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 14)), m2);
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 14)));
  t = _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 28)), m3);
  x = _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_slli_epi64(t, 28)));
  return x;
}

/* One byte plane, 32 groups starting at g: 256 output bytes to dst. Lane 0
 * handles groups g..g+15, lane 1 groups g+16..g+31. */
SL_AVX2 static inline void plane_tile_avx2(const uint8_t *rows, size_t nb, size_t g,
                                           uint8_t *dst) {
#define LD(k) _mm256_loadu_si256((const __m256i *)(rows + (k) * nb + g))
  __m256i a0 = LD(0), a1 = LD(1), a2 = LD(2), a3 = LD(3);
  __m256i a4 = LD(4), a5 = LD(5), a6 = LD(6), a7 = LD(7);
#undef LD
  __m256i b0 = _mm256_unpacklo_epi8(a0, a1), b1 = _mm256_unpackhi_epi8(a0, a1);
  __m256i b2 = _mm256_unpacklo_epi8(a2, a3), b3 = _mm256_unpackhi_epi8(a2, a3);
  __m256i b4 = _mm256_unpacklo_epi8(a4, a5), b5 = _mm256_unpackhi_epi8(a4, a5);
  __m256i b6 = _mm256_unpacklo_epi8(a6, a7), b7 = _mm256_unpackhi_epi8(a6, a7);
  __m256i c0 = _mm256_unpacklo_epi16(b0, b2), c1 = _mm256_unpackhi_epi16(b0, b2);
  __m256i c2 = _mm256_unpacklo_epi16(b1, b3), c3 = _mm256_unpackhi_epi16(b1, b3);
  __m256i c4 = _mm256_unpacklo_epi16(b4, b6), c5 = _mm256_unpackhi_epi16(b4, b6);
  __m256i c6 = _mm256_unpacklo_epi16(b5, b7), c7 = _mm256_unpackhi_epi16(b5, b7);
  /* d_i: lane 0 groups 2i, 2i+1; lane 1 groups 16+2i, 16+2i+1 */
  __m256i d0 = tr8_avx2(_mm256_unpacklo_epi32(c0, c4));
  __m256i d1 = tr8_avx2(_mm256_unpackhi_epi32(c0, c4));
  __m256i d2 = tr8_avx2(_mm256_unpacklo_epi32(c1, c5));
  __m256i d3 = tr8_avx2(_mm256_unpackhi_epi32(c1, c5));
  __m256i d4 = tr8_avx2(_mm256_unpacklo_epi32(c2, c6));
  __m256i d5 = tr8_avx2(_mm256_unpackhi_epi32(c2, c6));
  __m256i d6 = tr8_avx2(_mm256_unpacklo_epi32(c3, c7));
  __m256i d7 = tr8_avx2(_mm256_unpackhi_epi32(c3, c7));
  __m256i *o = (__m256i *)dst;
  _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(d0, d1, 0x20));
  _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(d2, d3, 0x20));
  _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(d4, d5, 0x20));
  _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(d6, d7, 0x20));
  _mm256_storeu_si256(o + 4, _mm256_permute2x128_si256(d0, d1, 0x31));
  _mm256_storeu_si256(o + 5, _mm256_permute2x128_si256(d2, d3, 0x31));
  _mm256_storeu_si256(o + 6, _mm256_permute2x128_si256(d4, d5, 0x31));
  _mm256_storeu_si256(o + 7, _mm256_permute2x128_si256(d6, d7, 0x31));
}

/* Interleaves s planes of 256 bytes each (s = 2 or 4) into 256 elements. */
SL_AVX2 static inline void interleave_avx2(const uint8_t *tile, size_t stride, size_t s,
                                           uint8_t *out) {
  for (size_t e = 0; e < 256; e += 32) {
#define PL(p) _mm256_loadu_si256((const __m256i *)(tile + (p) * stride + e))
    __m256i *o = (__m256i *)(out + e * s);
    if (s == 2) {
      __m256i a = PL(0), b = PL(1);
      __m256i lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);
      _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
    } else { /* s == 4 */
      __m256i a = PL(0), b = PL(1), c = PL(2), d = PL(3);
      __m256i ablo = _mm256_unpacklo_epi8(a, b), abhi = _mm256_unpackhi_epi8(a, b);
      __m256i cdlo = _mm256_unpacklo_epi8(c, d), cdhi = _mm256_unpackhi_epi8(c, d);
      __m256i x0 = _mm256_unpacklo_epi16(ablo, cdlo), x1 = _mm256_unpackhi_epi16(ablo, cdlo);
      __m256i x2 = _mm256_unpacklo_epi16(abhi, cdhi), x3 = _mm256_unpackhi_epi16(abhi, cdhi);
      _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(x0, x1, 0x20));
      _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(x2, x3, 0x20));
      _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(x0, x1, 0x31));
      _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(x2, x3, 0x31));
    }
#undef PL
  }
}

SL_AVX2 static void unshuffle_avx2(const uint8_t *in, uint8_t *out, size_t m, size_t s) {
  const size_t nb = m / 8, tiles = nb / 32;
  if (s == 1) {
    for (size_t t = 0; t < tiles; t++) plane_tile_avx2(in, nb, 32 * t, out + 256 * t);
  } else {
    uint8_t tile[8 * 256] __attribute__((aligned(32)));
    for (size_t t = 0; t < tiles; t++) {
      for (size_t j = 0; j < s; j++) plane_tile_avx2(in + 8 * j * nb, nb, 32 * t, tile + 256 * j);
      if (s == 8)
        interleave_sse2(tile, 256, 256, s, out + 256 * t * s);
      else
        interleave_avx2(tile, 256, s, out + 256 * t * s);
    }
  }
  /* the rest: one SSE2 tile if 16 groups remain, then scalar */
  size_t g = 32 * tiles;
  if (nb - g >= 16) {
    if (s == 1) {
      plane_tile_sse2(in, nb, g, out + 8 * g);
    } else {
      uint8_t tile[8 * 128] __attribute__((aligned(16)));
      for (size_t j = 0; j < s; j++) plane_tile_sse2(in + 8 * j * nb, nb, g, tile + 128 * j);
      interleave_sse2(tile, 128, 128, s, out + 8 * g * s);
    }
    g += 16;
  }
  unshuffle_scalar_range(in, out, nb, s, g);
}
#endif /* SL_X86 */

/* ------------------------------------------------------------ dispatch --- */

void sl_bitunshuffle_block(const uint8_t *in, uint8_t *out, size_t m, size_t elem_size,
                           sl_simd path) {
  const size_t s = elem_size;
  const int vec_ok = (s == 1 || s == 2 || s == 4 || s == 8);
#if SL_X86
  if (vec_ok && path == SL_SIMD_AVX2) {
    unshuffle_avx2(in, out, m, s);
    return;
  }
  if (vec_ok && path == SL_SIMD_SSE2) {
    unshuffle_sse2(in, out, m, s);
    return;
  }
#else
  (void)vec_ok;
  (void)path;
#endif
  unshuffle_scalar_range(in, out, m / 8, s, 0);
}
