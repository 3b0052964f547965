/* Bit un-transposition kernels for bitshuffle blocks, with runtime dispatch
 * (the path is chosen by sl_simd_resolve, engine/core/simd.h): a portable
 * scalar path (the reference), SSE2 and AVX2 on x86-64, the AVX2 path with
 * the bit transposes done by GFNI when the CPU has it. The AVX2 and GFNI
 * functions carry __attribute__((target(...))) so that the library still
 * builds for baseline x86-64; they run only when the CPU reports them.
 *
 * A block of m elements (m a multiple of 8) of s bytes is stored as 8*s
 * bit-rows of m/8 bytes; row 8j+k holds bit k of byte j of every element,
 * element i at bit (i % 8) of byte (i / 8). To decode, for each group g of 8
 * elements and each byte j, the 8 bytes row[8j+k][g] (k = 0..7) form an 8x8
 * bit matrix whose transpose is byte j of the 8 elements.
 *
 * The vector paths work on tiles of 16 (SSE2) or 32 (AVX2) groups, written
 * once for both widths in bitshuffle_vector.h. Groups left over after the
 * last full tile go through the scalar path. */
#include <string.h>

#include "engine/core/bit_transpose.h"
#include "nodes/codec/bslz4.h"

#if defined(__x86_64__) || defined(__i386__)
#define SL_X86 1
#include <immintrin.h>
#else
#define SL_X86 0
#endif

/* Scalar path over groups [g0, nb) of a block with nb = m/8 groups; with
 * ones, bytes [g0, nb) of the block's ones bitmap (the AND of its rows). */
static void unshuffle_scalar_range(const uint8_t *in, uint8_t *out, size_t nb, size_t s,
                                   size_t g0, uint8_t *ones) {
  if (ones)
    for (size_t g = g0; g < nb; g++) {
      uint8_t a = 0xFF;
      for (size_t r = 0; r < 8 * s; r++) a &= in[r * nb + g];
      ones[g] = a;
    }
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

static inline void store2_sse2(__m128i *o, __m128i v0, __m128i v1) {
  _mm_storeu_si128(o, v0);
  _mm_storeu_si128(o + 1, v1);
}
static inline void store4_sse2(__m128i *o, __m128i v0, __m128i v1, __m128i v2, __m128i v3) {
  store2_sse2(o, v0, v1);
  store2_sse2(o + 2, v2, v3);
}
static inline void store8_sse2(__m128i *o, __m128i v0, __m128i v1, __m128i v2, __m128i v3, __m128i v4,
                               __m128i v5, __m128i v6, __m128i v7) {
  store4_sse2(o, v0, v1, v2, v3);
  store4_sse2(o + 4, v4, v5, v6, v7);
}

#define VEC __m128i
#define VEC_BYTES 16
#define VEC_ATTR
#define PATH(name) name##_sse2
#define LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define STOREU(p, v) _mm_storeu_si128((__m128i *)(p), v)
#define LO8 _mm_unpacklo_epi8
#define HI8 _mm_unpackhi_epi8
#define LO16 _mm_unpacklo_epi16
#define HI16 _mm_unpackhi_epi16
#define LO32 _mm_unpacklo_epi32
#define HI32 _mm_unpackhi_epi32
#define AND _mm_and_si128
#define OR _mm_or_si128
#define ALL_ZERO(v) (_mm_movemask_epi8(_mm_cmpeq_epi8((v), _mm_setzero_si128())) == 0xFFFF)
#define ZERO _mm_setzero_si128
#define XOR _mm_xor_si128
#define SRLI64 _mm_srli_epi64
#define SLLI64 _mm_slli_epi64
#define SET1_64 _mm_set1_epi64x
#define STORE2 store2_sse2
#define STORE4 store4_sse2
#define STORE8 store8_sse2
#include "nodes/codec/bitshuffle_vector.h"

static void unshuffle_sse2(const uint8_t *in, uint8_t *out, size_t m, size_t s, uint8_t *ones) {
  const size_t nb = m / 8;
  unshuffle_scalar_range(in, out, nb, s, tiles_sse2(in, out, nb, s, ones), ones);
}

/* ---------------------------------------------------------------- AVX2 --- */

#define SL_AVX2 __attribute__((target("avx2")))

/* The unpacks work inside each 16-byte lane: lane 0 of a result holds the
 * first half of the tile's elements, lane 1 the second. Of n results, the
 * low lanes are stored first, in order, then the high lanes; this stores the
 * pair v0, v1 at its places k (low) and k + n/2 (high). */
SL_AVX2 static inline void store_pair_avx2(__m256i *o, size_t k, size_t n, __m256i v0, __m256i v1) {
  _mm256_storeu_si256(o + k, _mm256_permute2x128_si256(v0, v1, 0x20));
  _mm256_storeu_si256(o + k + n / 2, _mm256_permute2x128_si256(v0, v1, 0x31));
}
SL_AVX2 static inline void store2_avx2(__m256i *o, __m256i v0, __m256i v1) {
  store_pair_avx2(o, 0, 2, v0, v1);
}
SL_AVX2 static inline void store4_avx2(__m256i *o, __m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  store_pair_avx2(o, 0, 4, v0, v1);
  store_pair_avx2(o, 1, 4, v2, v3);
}
SL_AVX2 static inline void store8_avx2(__m256i *o, __m256i v0, __m256i v1, __m256i v2, __m256i v3,
                                       __m256i v4, __m256i v5, __m256i v6, __m256i v7) {
  store_pair_avx2(o, 0, 8, v0, v1);
  store_pair_avx2(o, 1, 8, v2, v3);
  store_pair_avx2(o, 2, 8, v4, v5);
  store_pair_avx2(o, 3, 8, v6, v7);
}

#define VEC_ATTR SL_AVX2
#define PATH(name) name##_avx2
#include "nodes/codec/bitshuffle_avx2_ops.h"
#include "nodes/codec/bitshuffle_vector.h"

/* ------------------------------------------------------- AVX2 + GFNI --- */

/* GF2P8AFFINEQB transposes the bits of each 64-bit lane in one instruction:
 * with the data as the matrix A and x = bytes 1 << i, byte i of the result
 * has bit b = bit i of A's byte 7 - b. The rows are loaded in reverse order
 * (byte k holds row 7 - k), so byte i of the result holds bit i of rows
 * 0..7: sl_tr8's transpose, the same bytes. */
#define SL_GFNI __attribute__((target("avx2,gfni")))
#define VEC_ATTR SL_GFNI
#define PATH(name) name##_gfni
#include "nodes/codec/bitshuffle_avx2_ops.h"
#define TR8(x) _mm256_gf2p8affine_epi64_epi8(_mm256_set1_epi64x(0x8040201008040201LL), (x), 0)
#define ROW(k) (7 - (k))
#include "nodes/codec/bitshuffle_vector.h"

/* After the 32-group tiles of a wide path: one SSE2 tile if 16 groups
 * remain, then scalar. */
static void unshuffle_rest(const uint8_t *in, uint8_t *out, size_t nb, size_t s, size_t g, uint8_t *ones) {
  if (nb - g >= 16) {
    tile_sse2(in, out, nb, s, g, ones);
    g += 16;
  }
  unshuffle_scalar_range(in, out, nb, s, g, ones);
}

SL_GFNI static void unshuffle_gfni(const uint8_t *in, uint8_t *out, size_t m, size_t s, uint8_t *ones) {
  unshuffle_rest(in, out, m / 8, s, tiles_gfni(in, out, m / 8, s, ones), ones);
}

/* GFNI is used on the AVX2 path when the CPU has it, unless turned off. */
static int g_gfni = -1; /* -1: not decided yet */

void sl_bitshuffle_allow_gfni(bool allow) {
  int v = allow && __builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx2");
  __atomic_store_n(&g_gfni, v, __ATOMIC_RELAXED);
}

bool sl_bitshuffle_gfni_used(void) {
  if (__atomic_load_n(&g_gfni, __ATOMIC_RELAXED) < 0) sl_bitshuffle_allow_gfni(true);
  return __atomic_load_n(&g_gfni, __ATOMIC_RELAXED) == 1;
}

SL_AVX2 static void unshuffle_avx2(const uint8_t *in, uint8_t *out, size_t m, size_t s,
                                   uint8_t *ones) {
  unshuffle_rest(in, out, m / 8, s, tiles_avx2(in, out, m / 8, s, ones), ones);
}
#else
void sl_bitshuffle_allow_gfni(bool allow) { (void)allow; }
bool sl_bitshuffle_gfni_used(void) { return false; }
#endif /* SL_X86 */

/* ------------------------------------------------------------ dispatch --- */

void sl_bitunshuffle_block(const uint8_t *in, uint8_t *out, size_t m, size_t elem_size,
                           sl_simd path, uint8_t *ones) {
  const size_t s = elem_size;
  const int vec_ok = (s == 1 || s == 2 || s == 4 || s == 8);
#if SL_X86
  if (vec_ok && path == SL_SIMD_AVX2) {
    if (sl_bitshuffle_gfni_used())
      unshuffle_gfni(in, out, m, s, ones);
    else
      unshuffle_avx2(in, out, m, s, ones);
    return;
  }
  if (vec_ok && path == SL_SIMD_SSE2) {
    unshuffle_sse2(in, out, m, s, ones);
    return;
  }
#else
  (void)vec_ok;
  (void)path;
#endif
  unshuffle_scalar_range(in, out, m / 8, s, 0, ones);
}

void sl_ones_bitmap_of_elements(const uint8_t *src, size_t n, size_t s, uint8_t *ones,
                                size_t first) {
  uint8_t *o = ones + first / 8;
  memset(o, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; i++) {
    const uint8_t *e = src + i * s;
    uint8_t a = 0xFF;
    for (size_t b = 0; b < s; b++) a &= e[b];
    o[i / 8] |= (uint8_t)((a == 0xFF) << (i % 8));
  }
}
