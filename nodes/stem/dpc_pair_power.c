/* The parallax fit's objective, scalar and four maps at once (see
 * dpc_pair_power.h). The grid search spends most of the fit's time here
 * (thousands of maps of 210 pairs on grid 5): four lanes a call took it
 * from about 0.22 s to 0.06 s of a 1-thread stem_products run with the
 * probe given (dev VM, 128 x 128 window; perf's share of the samples). */
#include "nodes/stem/dpc_pair_power.h"

#include <math.h>

#include "engine/core/simd.h"
#include "nodes/common/madd_u16.h"

/* Keys' cubic convolution weights (a = -1/2) at fraction t of a step, for
 * a double or for each lane of a vector of doubles (GCC's vector operators,
 * broadcasting the constants): the same multiplies and adds in the same
 * order, so every lane has the scalar's bits. */
#define CUBIC_WEIGHTS(t, w)                          \
  ((w)[0] = ((-0.5 * (t) + 1) * (t) - 0.5) * (t),    \
   (w)[1] = (1.5 * (t) - 2.5) * (t) * (t) + 1,       \
   (w)[2] = ((-1.5 * (t) + 2) * (t) + 0.5) * (t),    \
   (w)[3] = (0.5 * (t) - 0.5) * (t) * (t))

static void cubic_weights(double t, double w[4]) { CUBIC_WEIGHTS(t, w); }

/* Cubic between lags: a bilinear one has its maxima at whole lags (the fit
 * snapped to them, 2-3 degrees off). */
double sl_pair_power(const sl_pair_lags *l, const double m[4]) {
  const int64_t lr = l->lr, lc = l->lc, sc = 2 * lc + 1, lags = (2 * lr + 1) * sc;
  double sum = 0;
  for (int k = 0; k < l->pairs; k++) {
    const double a = l->pair[2 * k], b = l->pair[2 * k + 1];
    const double y = m[0] * a + m[1] * b, x = m[2] * a + m[3] * b;
    const double fy = floor(y), fx = floor(x);
    int64_t r0 = (int64_t)fy + lr - 1, c0 = (int64_t)fx + lc - 1; /* the 4 x 4 block's corner */
    if (r0 < 0 || c0 < 0 || r0 + 3 > 2 * lr || c0 + 3 > 2 * lc) continue; /* outside: never searched */
    double wy[4], wx[4];
    cubic_weights(y - fy, wy);
    cubic_weights(x - fx, wx);
    const double *xc = l->xcorr + (size_t)k * (size_t)lags + r0 * sc + c0;
    for (int i = 0; i < 4; i++)
      sum += wy[i] * (wx[0] * xc[i * sc] + wx[1] * xc[i * sc + 1] + wx[2] * xc[i * sc + 2] + wx[3] * xc[i * sc + 3]);
  }
  return sum;
}

bool sl_pair_power4_available(void) {
  sl_simd path;
  sl_error ignored;
  return sl_simd_resolve(SL_SIMD_AUTO, &path, &ignored) == SL_OK && path == SL_SIMD_AVX2;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAIR_AVX2 __attribute__((target("avx2")))

/* Lane k of the four: sl_pair_power at m[k]. Each lane's 4 x 4 block is
 * loaded row by row (four contiguous lags) and transposed, so that lane k
 * of column j holds its own block's element; a lane whose lag is outside
 * reads the table's start instead and adds nothing (its sum is kept, as
 * the scalar `continue` keeps it). */
PAIR_AVX2 void sl_pair_power4(const sl_pair_lags *l, const double m[4][4], double out[4]) {
  const int64_t lr = l->lr, lc = l->lc, sc = 2 * lc + 1, lags = (2 * lr + 1) * sc;
  const __m256d m0 = _mm256_setr_pd(m[0][0], m[1][0], m[2][0], m[3][0]);
  const __m256d m1 = _mm256_setr_pd(m[0][1], m[1][1], m[2][1], m[3][1]);
  const __m256d m2 = _mm256_setr_pd(m[0][2], m[1][2], m[2][2], m[3][2]);
  const __m256d m3 = _mm256_setr_pd(m[0][3], m[1][3], m[2][3], m[3][3]);
  /* r0 = fy + lr - 1 in [0, 2 lr - 3] and c0 likewise, on whole doubles */
  const __m256d ylo = _mm256_set1_pd((double)(1 - lr)), yhi = _mm256_set1_pd((double)(lr - 2));
  const __m256d xlo = _mm256_set1_pd((double)(1 - lc)), xhi = _mm256_set1_pd((double)(lc - 2));
  __m256d sum = _mm256_setzero_pd();
  for (int k = 0; k < l->pairs; k++) {
    const __m256d a = _mm256_set1_pd(l->pair[2 * k]), b = _mm256_set1_pd(l->pair[2 * k + 1]);
    const __m256d y = _mm256_add_pd(_mm256_mul_pd(m0, a), _mm256_mul_pd(m1, b));
    const __m256d x = _mm256_add_pd(_mm256_mul_pd(m2, a), _mm256_mul_pd(m3, b));
    const __m256d fy = _mm256_floor_pd(y), fx = _mm256_floor_pd(x);
    const __m256d in = _mm256_and_pd(
        _mm256_and_pd(_mm256_cmp_pd(fy, ylo, _CMP_GE_OQ), _mm256_cmp_pd(fy, yhi, _CMP_LE_OQ)),
        _mm256_and_pd(_mm256_cmp_pd(fx, xlo, _CMP_GE_OQ), _mm256_cmp_pd(fx, xhi, _CMP_LE_OQ)));
    const int lanes = _mm256_movemask_pd(in);
    if (!lanes) continue;
    __m256d wy[4], wx[4];
    const __m256d ty = _mm256_sub_pd(y, fy), tx = _mm256_sub_pd(x, fx);
    CUBIC_WEIGHTS(ty, wy);
    CUBIC_WEIGHTS(tx, wx);
    double fyv[4], fxv[4];
    _mm256_storeu_pd(fyv, fy);
    _mm256_storeu_pd(fxv, fx);
    const double *table = l->xcorr + (size_t)k * (size_t)lags, *xc[4];
    for (int q = 0; q < 4; q++)
      xc[q] = lanes >> q & 1 ? table + ((int64_t)fyv[q] + lr - 1) * sc + ((int64_t)fxv[q] + lc - 1) : table;
    for (int i = 0; i < 4; i++) {
      const __m256d r0 = _mm256_loadu_pd(xc[0] + i * sc), r1 = _mm256_loadu_pd(xc[1] + i * sc);
      const __m256d r2 = _mm256_loadu_pd(xc[2] + i * sc), r3 = _mm256_loadu_pd(xc[3] + i * sc);
      const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
      const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
      const __m256d c0 = _mm256_permute2f128_pd(t0, t2, 0x20), c1 = _mm256_permute2f128_pd(t1, t3, 0x20);
      const __m256d c2 = _mm256_permute2f128_pd(t0, t2, 0x31), c3 = _mm256_permute2f128_pd(t1, t3, 0x31);
      const __m256d row = _mm256_add_pd(
          _mm256_add_pd(_mm256_add_pd(_mm256_mul_pd(wx[0], c0), _mm256_mul_pd(wx[1], c1)), _mm256_mul_pd(wx[2], c2)),
          _mm256_mul_pd(wx[3], c3));
      sum = _mm256_blendv_pd(sum, _mm256_add_pd(sum, _mm256_mul_pd(wy[i], row)), in);
    }
  }
  _mm256_storeu_pd(out, sum);
}

bool sl_pair_power8_available(void) { return sl_pair_power4_available() && sl_madd_avx512_used(); }

#define PAIR_AVX512 __attribute__((target("avx2,avx512f")))

/* sl_pair_power4 on eight lanes: each lane's 4 x 4 block row by row, the
 * rows of lanes q and q + 4 in one register, unpacked and permuted so that
 * lane k of column j holds its own block's element (12 shuffles for eight
 * lanes where two sl_pair_power4 take 16). */
PAIR_AVX512 void sl_pair_power8(const sl_pair_lags *l, const double m[8][4], double out[8]) {
  const int64_t lr = l->lr, lc = l->lc, sc = 2 * lc + 1, lags = (2 * lr + 1) * sc;
  __m512d mv[4];
  for (int e = 0; e < 4; e++)
    mv[e] = _mm512_setr_pd(m[0][e], m[1][e], m[2][e], m[3][e], m[4][e], m[5][e], m[6][e], m[7][e]);
  const __m512d ylo = _mm512_set1_pd((double)(1 - lr)), yhi = _mm512_set1_pd((double)(lr - 2));
  const __m512d xlo = _mm512_set1_pd((double)(1 - lc)), xhi = _mm512_set1_pd((double)(lc - 2));
  /* the block's corner (fy + lr - 1) sc + fx + lc - 1, exact in doubles (below 2^31) */
  const __m512d vsc = _mm512_set1_pd((double)sc), vr = _mm512_set1_pd((double)(lr - 1)),
                vc = _mm512_set1_pd((double)(lc - 1));
  const __m512i even = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), odd = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  __m512d sum = _mm512_setzero_pd();
  for (int k = 0; k < l->pairs; k++) {
    const __m512d a = _mm512_set1_pd(l->pair[2 * k]), b = _mm512_set1_pd(l->pair[2 * k + 1]);
    const __m512d y = _mm512_add_pd(_mm512_mul_pd(mv[0], a), _mm512_mul_pd(mv[1], b));
    const __m512d x = _mm512_add_pd(_mm512_mul_pd(mv[2], a), _mm512_mul_pd(mv[3], b));
    const __m512d fy = _mm512_roundscale_pd(y, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512d fx = _mm512_roundscale_pd(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __mmask8 in = _mm512_cmp_pd_mask(fy, ylo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(fy, yhi, _CMP_LE_OQ) &
                        _mm512_cmp_pd_mask(fx, xlo, _CMP_GE_OQ) & _mm512_cmp_pd_mask(fx, xhi, _CMP_LE_OQ);
    if (!in) continue;
    __m512d wy[4], wx[4];
    const __m512d ty = _mm512_sub_pd(y, fy), tx = _mm512_sub_pd(x, fx);
    CUBIC_WEIGHTS(ty, wy);
    CUBIC_WEIGHTS(tx, wx);
    /* lanes outside read the table's start and add nothing */
    const __m512d corner = _mm512_maskz_mov_pd(in, _mm512_add_pd(_mm512_mul_pd(_mm512_add_pd(fy, vr), vsc),
                                                                 _mm512_add_pd(fx, vc)));
    int32_t at[8];
    _mm256_storeu_si256((__m256i *)at, _mm512_cvttpd_epi32(corner));
    const double *table = l->xcorr + (size_t)k * (size_t)lags;
    for (int i = 0; i < 4; i++) {
      const double *t = table + i * sc;
      const __m512d r04 = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(t + at[0])), _mm256_loadu_pd(t + at[4]), 1);
      const __m512d r15 = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(t + at[1])), _mm256_loadu_pd(t + at[5]), 1);
      const __m512d r26 = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(t + at[2])), _mm256_loadu_pd(t + at[6]), 1);
      const __m512d r37 = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(t + at[3])), _mm256_loadu_pd(t + at[7]), 1);
      const __m512d t0 = _mm512_unpacklo_pd(r04, r15), t1 = _mm512_unpackhi_pd(r04, r15);
      const __m512d t2 = _mm512_unpacklo_pd(r26, r37), t3 = _mm512_unpackhi_pd(r26, r37);
      const __m512d c0 = _mm512_permutex2var_pd(t0, even, t2), c1 = _mm512_permutex2var_pd(t1, even, t3);
      const __m512d c2 = _mm512_permutex2var_pd(t0, odd, t2), c3 = _mm512_permutex2var_pd(t1, odd, t3);
      const __m512d row = _mm512_add_pd(
          _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(wx[0], c0), _mm512_mul_pd(wx[1], c1)), _mm512_mul_pd(wx[2], c2)),
          _mm512_mul_pd(wx[3], c3));
      sum = _mm512_mask_add_pd(sum, in, sum, _mm512_mul_pd(wy[i], row));
    }
  }
  _mm512_storeu_pd(out, sum);
}
#else
void sl_pair_power4(const sl_pair_lags *l, const double m[4][4], double out[4]) {
  for (int k = 0; k < 4; k++) out[k] = sl_pair_power(l, m[k]);
}
bool sl_pair_power8_available(void) { return false; }
void sl_pair_power8(const sl_pair_lags *l, const double m[8][4], double out[8]) {
  for (int k = 0; k < 8; k++) out[k] = sl_pair_power(l, m[k]);
}
#endif
