/* The AVX2 vector operations bitshuffle_vector.h is written in, shared by
 * bitshuffle_simd.c's AVX2 and AVX2 + GFNI paths (which differ in VEC_ATTR,
 * PATH and TR8/ROW). Not a header of its own: no include guard, included
 * right before bitshuffle_vector.h, which undefines all of these. */
#define VEC __m256i
#define VEC_BYTES 32
#define LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define STOREU(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define LO8 _mm256_unpacklo_epi8
#define HI8 _mm256_unpackhi_epi8
#define LO16 _mm256_unpacklo_epi16
#define HI16 _mm256_unpackhi_epi16
#define LO32 _mm256_unpacklo_epi32
#define HI32 _mm256_unpackhi_epi32
#define AND _mm256_and_si256
#define OR _mm256_or_si256
#define ALL_ZERO(v) _mm256_testz_si256((v), (v))
#define ZERO _mm256_setzero_si256
#define XOR _mm256_xor_si256
#define SRLI64 _mm256_srli_epi64
#define SLLI64 _mm256_slli_epi64
#define SET1_64 _mm256_set1_epi64x
#define STORE2 store2_avx2
#define STORE4 store4_avx2
#define STORE8 store8_avx2
