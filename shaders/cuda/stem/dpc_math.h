/* The arithmetic of dpc that the host (nodes/stem/dpc.c, nodes/stem/dpc_fit.c)
 * and the device (shaders/cuda/stem/dpc.cu) share, written once: which ring
 * of |k| a frequency falls in, the per-frequency terms of the fit's ring sums,
 * the rotation of the field into scan coordinates, its curl and divergence.
 * Plain C, usable from CUDA (__host__ __device__ under nvcc).
 *
 * Products and sums go through sl_dpc_mul / sl_dpc_add: on the device they
 * are the rounded operations themselves (__dmul_rn, __dadd_rn), which nvcc
 * never fuses into an FMA, so the device rounds every step as the host does
 * (the host build has no FMA: no -march). So the ring a frequency falls in,
 * and the rotated field, curl and divergence for a given angle, have the
 * host's bits on the device. Division and sqrt are IEEE-rounded on both (nvcc
 * without --use_fast_math). See dpc_fit.h for the method. */
#ifndef SL_CUDA_DPC_MATH_H
#define SL_CUDA_DPC_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SL_DPC_FN static inline __host__ __device__
#else
#define SL_DPC_FN static inline
#endif

SL_DPC_FN double sl_dpc_mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

SL_DPC_FN double sl_dpc_add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

SL_DPC_FN double sl_dpc_sub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

/* The sums per ring of |k|, per transpose t at SL_DPC_RING_SUMS / 2 * t:
 * the quadratic form's coefficients uu, uv, vv and the power. */
enum { SL_DPC_SUM_UU, SL_DPC_SUM_UV, SL_DPC_SUM_VV, SL_DPC_SUM_POWER, SL_DPC_RING_SUMS = 8 };

/* Rings of |k|: 2 max(rows, cols) + 1, each 1 / (2 max(rows, cols)) wide. */
SL_DPC_FN int64_t sl_dpc_rings(int64_t rows, int64_t cols) { return 2 * (rows > cols ? rows : cols) + 1; }

/* numpy.fft.fftfreq's |frequency| of index k >= 0 of 2n (cycles per sample). */
SL_DPC_FN double sl_dpc_half_freq(int64_t k, int64_t n) { return (double)k / (double)(2 * n); }

/* |k| of frequency (fr, fc). */
SL_DPC_FN double sl_dpc_kk(double fr, double fc) { return sqrt(sl_dpc_add(sl_dpc_mul(fr, fr), sl_dpc_mul(fc, fc))); }

/* The ring that |k| = kk falls in. */
SL_DPC_FN int64_t sl_dpc_ring_of(int64_t rows, int64_t cols, double kk) {
  return (int64_t)sl_dpc_mul(kk, (double)(2 * (rows > cols ? rows : cols)));
}

/* How many of the 2R x 2C frequencies frequency (kr, kc) of the mirror
 * spectra stands for: 2 per axis, 1 on the axis's zero and Nyquist
 * frequencies (nodes/common/mirror_spectrum.h). */
SL_DPC_FN double sl_dpc_multiplicity(int64_t rows, int64_t cols, int64_t kr, int64_t kc) {
  return (kr == 0 || kr == rows ? 1.0 : 2.0) * (kc == 0 || kc == cols ? 1.0 : 2.0);
}

/* Frequency (fr, fc), |k| = kk > 0, with the four mirror spectra x there
 * (c_r odd in rows, c_r odd in cols, c_c odd in rows, c_c odd in cols),
 * counted m times: for each transpose t, the field rotated by theta is
 * cos A + sin B with A = T^t c and B = T^t (c_c, -c_r); their transverse
 * parts k^ x A, k^ x B give the form's terms, (|A|^2 + |B|^2) / 2 the power; all added to
 * `ring` (SL_DPC_RING_SUMS sums). */
SL_DPC_FN void sl_dpc_add_frequency(double *ring, double fr, double fc, double kk, const double x[4], double m) {
  const double inv = 1 / kk, ur = fr * inv, uc = fc * inv;
  /* The power of the weights: the mean of |cos A + sin B|^2 over the angle,
   * (|A|^2 + |B|^2) / 2, the same for both transposes. |A|^2 alone (the
   * field at angle 0) is not rotation invariant: on noise-only rings, where
   * the Wiener weight follows the ring's chance excess of power, it weighted
   * up the rings whose uu happened to be large and pulled every fit without
   * signal towards 90 degrees (24 of 24 white-noise fields within 45 degrees
   * of it). */
  const double power = sl_dpc_mul(0.5, sl_dpc_add(sl_dpc_add(sl_dpc_mul(x[0], x[0]), sl_dpc_mul(x[1], x[1])),
                                                  sl_dpc_add(sl_dpc_mul(x[2], x[2]), sl_dpc_mul(x[3], x[3]))));
  for (int t = 0; t < 2; t++) {
    double a0, a1, b0, b1;
    if (!t) a0 = x[0], a1 = x[3], b0 = x[2], b1 = -x[1];
    else a0 = x[2], a1 = x[1], b0 = -x[0], b1 = x[3];
    const double ta = sl_dpc_sub(sl_dpc_mul(ur, a1), sl_dpc_mul(uc, a0));
    const double tb = sl_dpc_sub(sl_dpc_mul(ur, b1), sl_dpc_mul(uc, b0));
    double *r = ring + SL_DPC_RING_SUMS / 2 * t;
    r[SL_DPC_SUM_UU] = sl_dpc_add(r[SL_DPC_SUM_UU], sl_dpc_mul(sl_dpc_mul(m, ta), ta));
    r[SL_DPC_SUM_UV] = sl_dpc_add(r[SL_DPC_SUM_UV], sl_dpc_mul(sl_dpc_mul(m, ta), tb));
    r[SL_DPC_SUM_VV] = sl_dpc_add(r[SL_DPC_SUM_VV], sl_dpc_mul(sl_dpc_mul(m, tb), tb));
    r[SL_DPC_SUM_POWER] = sl_dpc_add(r[SL_DPC_SUM_POWER], sl_dpc_mul(m, power));
  }
}

/* The field in scan coordinates, (row, col) = T^t R(-theta) (cr, cc), with
 * c = sign cos theta, s = sign sin theta. */
SL_DPC_FN void sl_dpc_rotate(double c, double s, int t, double cr, double cc, double *orow, double *ocol) {
  const double r0 = sl_dpc_add(sl_dpc_mul(c, cr), sl_dpc_mul(s, cc));
  const double c0 = sl_dpc_add(sl_dpc_mul(-s, cr), sl_dpc_mul(c, cc));
  *orow = t ? c0 : r0;
  *ocol = t ? r0 : c0;
}

/* Derivatives of f (rows x cols) at (i, j): central inside, one-sided at the
 * edges, 0 along an axis of length 1 (as numpy.gradient). */
SL_DPC_FN double sl_dpc_d_row(const double *f, int64_t rows, int64_t cols, int64_t i, int64_t j) {
  if (rows < 2) return 0;
  if (i == 0) return sl_dpc_sub(f[cols + j], f[j]);
  if (i == rows - 1) return sl_dpc_sub(f[i * cols + j], f[(i - 1) * cols + j]);
  return sl_dpc_mul(0.5, sl_dpc_sub(f[(i + 1) * cols + j], f[(i - 1) * cols + j]));
}

SL_DPC_FN double sl_dpc_d_col(const double *f, int64_t cols, int64_t i, int64_t j) {
  const double *p = f + i * cols;
  if (cols < 2) return 0;
  if (j == 0) return sl_dpc_sub(p[1], p[0]);
  if (j == cols - 1) return sl_dpc_sub(p[j], p[j - 1]);
  return sl_dpc_mul(0.5, sl_dpc_sub(p[j + 1], p[j - 1]));
}

/* Curl d(col)/d(row) - d(row)/d(col) and divergence of the rotated field
 * (orow, ocol) at (i, j). */
SL_DPC_FN void sl_dpc_curl_div(const double *orow, const double *ocol, int64_t rows, int64_t cols, int64_t i,
                               int64_t j, double *curl, double *div) {
  const double drr = sl_dpc_d_row(orow, rows, cols, i, j), dcc = sl_dpc_d_col(ocol, cols, i, j);
  const double drc = sl_dpc_d_row(ocol, rows, cols, i, j), dcr = sl_dpc_d_col(orow, cols, i, j);
  *curl = sl_dpc_sub(drc, dcr);
  *div = sl_dpc_add(drr, dcc);
}

/* The ADF matched filter (nodes/stem/dpc_adf.h): per scan row, for each
 * transpose t, a_t = sum A . grad q and b_t = sum B . grad q, where the field
 * rotated by theta is cos A + sin B (A = T^t c, B = T^t (c_c, -c_r), as in
 * sl_dpc_add_frequency) and grad q the central-difference gradient of the
 * ADF image q; then sum |grad q|^2 and sum |c|^2. The correlation of the
 * rotated field with grad q is a_t cos theta + b_t sin theta. */
enum { SL_DPC_ADF_A0, SL_DPC_ADF_B0, SL_DPC_ADF_A1, SL_DPC_ADF_B1, SL_DPC_ADF_G2, SL_DPC_ADF_F2,
       SL_DPC_ADF_SUMS };

/* Row i's sums (out[SL_DPC_ADF_SUMS]), added in column order. */
SL_DPC_FN void sl_dpc_adf_row(const double *cr, const double *cc, const double *q, int64_t rows, int64_t cols,
                              int64_t i, double *out) {
  double s[SL_DPC_ADF_SUMS] = {0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < cols; j++) {
    const double r = cr[i * cols + j], c = cc[i * cols + j];
    const double gr = sl_dpc_d_row(q, rows, cols, i, j), gc = sl_dpc_d_col(q, cols, i, j);
    const double rr = sl_dpc_mul(r, gr), rc = sl_dpc_mul(r, gc), cr_ = sl_dpc_mul(c, gr), cc_ = sl_dpc_mul(c, gc);
    s[SL_DPC_ADF_A0] = sl_dpc_add(s[SL_DPC_ADF_A0], sl_dpc_add(rr, cc_));
    s[SL_DPC_ADF_B0] = sl_dpc_add(s[SL_DPC_ADF_B0], sl_dpc_sub(cr_, rc));
    s[SL_DPC_ADF_A1] = sl_dpc_add(s[SL_DPC_ADF_A1], sl_dpc_add(cr_, rc));
    s[SL_DPC_ADF_B1] = sl_dpc_add(s[SL_DPC_ADF_B1], sl_dpc_sub(cc_, rr));
    s[SL_DPC_ADF_G2] = sl_dpc_add(s[SL_DPC_ADF_G2], sl_dpc_add(sl_dpc_mul(gr, gr), sl_dpc_mul(gc, gc)));
    s[SL_DPC_ADF_F2] = sl_dpc_add(s[SL_DPC_ADF_F2], sl_dpc_add(sl_dpc_mul(r, r), sl_dpc_mul(c, c)));
  }
  for (int k = 0; k < SL_DPC_ADF_SUMS; k++) out[k] = s[k];
}

/* The sums of the 180-degree branch rule without an ADF image over the
 * iDPC phase p (mean 0) of the rotated field. */
typedef struct sl_dpc_branch_sums {
  double m2, m3; /* sum p^2, sum p^3 */
} sl_dpc_branch_sums;

/* The evidence for the branch of the field, positive for it, negative for
 * the other (its negative): the phase's skewness E[p^3] / E[p^2]^1.5. 0 for
 * a flat phase. n: the scan positions. */
SL_DPC_FN double sl_dpc_branch_score(const sl_dpc_branch_sums *s, int64_t n) {
  return s->m2 > 0 ? (s->m3 / (double)n) / pow(s->m2 / (double)n, 1.5) : 0;
}

#endif
