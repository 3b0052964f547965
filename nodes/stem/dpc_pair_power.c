/* The parallax fit's objective, scalar and four maps at once (see
 * dpc_pair_power.h). The grid search spends most of the fit's time here
 * (thousands of maps of 210 pairs on grid 5): four lanes a call took it
 * from about 0.22 s to 0.06 s of a 1-thread stem_products run with the
 * probe given (dev VM, 128 x 128 window; perf's share of the samples). */
#include "nodes/stem/dpc_pair_power.h"

#include <math.h>

#include "engine/core/simd.h"

/* Keys' cubic convolution weights (a = -1/2) at fraction t of a step. */
static void cubic_weights(double t, double w[4]) {
  w[0] = ((-0.5 * t + 1) * t - 0.5) * t;
  w[1] = (1.5 * t - 2.5) * t * t + 1;
  w[2] = ((-1.5 * t + 2) * t + 0.5) * t;
  w[3] = (0.5 * t - 0.5) * t * t;
}

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

/* cubic_weights of four fractions: the same operations, lane by lane. */
PAIR_AVX2 static void cubic_weights4(__m256d t, __m256d w[4]) {
  const __m256d one = _mm256_set1_pd(1), half = _mm256_set1_pd(0.5);
  w[0] = _mm256_mul_pd(_mm256_sub_pd(_mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(-0.5), t), one), t),
                                     half), t);
  w[1] = _mm256_add_pd(_mm256_mul_pd(_mm256_mul_pd(_mm256_sub_pd(_mm256_mul_pd(_mm256_set1_pd(1.5), t),
                                                                  _mm256_set1_pd(2.5)), t), t), one);
  w[2] = _mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(-1.5), t),
                                                                   _mm256_set1_pd(2)), t), half), t);
  w[3] = _mm256_mul_pd(_mm256_mul_pd(_mm256_sub_pd(_mm256_mul_pd(half, t), half), t), t);
}

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
    cubic_weights4(_mm256_sub_pd(y, fy), wy);
    cubic_weights4(_mm256_sub_pd(x, fx), wx);
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
#else
void sl_pair_power4(const sl_pair_lags *l, const double m[4][4], double out[4]) {
  for (int k = 0; k < 4; k++) out[k] = sl_pair_power(l, m[k]);
}
#endif
