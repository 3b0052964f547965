/* The rotation fit of dpc. See dpc_fit.h for the method and why. */
#include "nodes/stem/dpc_fit.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { REWEIGHTS = 3 };

int64_t sl_dpc_fit_bytes(int64_t rows, int64_t cols) { return 4 * rows * cols * (4 * 16 + 8); }

int64_t sl_dpc_fit_ops(int64_t rows, int64_t cols) {
  double np = 4.0 * (double)rows * (double)cols;
  return (int64_t)(4 * 5.0 * np * log2(np > 2 ? np : 2) + (REWEIGHTS + 2) * 2 * 40 * np);
}

void sl_dpc_fit_free(sl_dpc_fit *f) {
  if (f->fwd) fftw_destroy_plan(f->fwd);
  for (int i = 0; i < 4; i++) fftw_free(f->spec[i]);
  free(f->weight);
  free(f->ring);
  memset(f, 0, sizeof *f);
}

sl_code sl_dpc_fit_init(sl_dpc_fit *f, int64_t rows, int64_t cols, sl_error *err) {
  memset(f, 0, sizeof *f);
  f->rows = rows, f->cols = cols, f->pr = 2 * rows, f->pc = 2 * cols;
  size_t np = (size_t)(f->pr * f->pc);
  for (int i = 0; i < 4; i++) f->spec[i] = fftw_malloc(np * sizeof(fftw_complex));
  f->weight = malloc(np * sizeof(double));
  f->ring = malloc((size_t)(2 * ((f->pr > f->pc ? f->pr : f->pc) + 1)) * sizeof(double));
  if (!f->spec[0] || !f->spec[1] || !f->spec[2] || !f->spec[3] || !f->weight || !f->ring) {
    sl_dpc_fit_free(f);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for four %lldx%lld complex fields",
                   (long long)f->pr, (long long)f->pc);
  }
  f->fwd = fftw_plan_dft_2d((int)f->pr, (int)f->pc, f->spec[0], f->spec[0], FFTW_FORWARD,
                            FFTW_ESTIMATE);
  if (!f->fwd) {
    sl_dpc_fit_free(f);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan a %lldx%lld transform",
                   (long long)f->pr, (long long)f->pc);
  }
  return SL_OK;
}

double sl_dpc_quad_at(const sl_dpc_quad *q, double deg) {
  double th = deg * M_PI / 180.0, c = cos(th), s = sin(th);
  return c * c * q->uu + 2 * c * s * q->uv + s * s * q->vv;
}

double sl_dpc_quad_argmin(const sl_dpc_quad *q) {
  double best = sl_dpc_quad_at(q, 0), worst = best;
  int kb = 0;
  for (int k = 1; k < 180; k++) {
    double v = sl_dpc_quad_at(q, k);
    if (v < best) best = v, kb = k;
    if (v > worst) worst = v;
  }
  if (!(worst > best * (1 + 1e-12)) || worst == 0) return 0; /* no information */
  const double g = 0.5 * (sqrt(5.0) - 1);
  double a = kb - 1.0, b = kb + 1.0;
  double x1 = b - g * (b - a), x2 = a + g * (b - a);
  double f1 = sl_dpc_quad_at(q, x1), f2 = sl_dpc_quad_at(q, x2);
  while (b - a > 1e-4) {
    if (f1 < f2) {
      b = x2, x2 = x1, f2 = f1;
      x1 = b - g * (b - a), f1 = sl_dpc_quad_at(q, x1);
    } else {
      a = x1, x1 = x2, f1 = f2;
      x2 = a + g * (b - a), f2 = sl_dpc_quad_at(q, x2);
    }
  }
  double x = 0.5 * (a + b);
  x = sl_dpc_quad_at(q, x) <= best ? x : (double)kb;
  return x < 0 ? x + 180 : x >= 180 ? x - 180 : x;
}

/* The mirrored image of f [rows, cols] in part `part` (0 real, 1
 * imaginary) of the 2R x 2C buffer z, negated in the rows' mirror image
 * (odd_rows) or in the columns'. */
static void mirror(const sl_dpc_fit *f, const double *src, int odd_rows, fftw_complex *z, int part) {
  int64_t R = f->rows, C = f->cols, PC = f->pc;
  for (int64_t i = 0; i < f->pr; i++) {
    int64_t si = i < R ? i : 2 * R - 1 - i;
    for (int64_t j = 0; j < PC; j++) {
      int64_t sj = j < C ? j : 2 * C - 1 - j;
      double sg = odd_rows ? (i < R ? 1 : -1) : (j < C ? 1 : -1);
      z[i * PC + j][part] = sg * src[si * C + sj];
    }
  }
}

/* z held x + i y for real x and y; its transform Z = X + i Y. Leaves X in
 * z and Y in y_out: Y(k) = (Z(k) - conj Z(-k)) / 2i, then X = Z - i Y. */
static void split_pair(const sl_dpc_fit *f, fftw_complex *z, fftw_complex *y_out) {
  const int64_t PR = f->pr, PC = f->pc;
  for (int64_t i = 0; i < PR; i++) {
    const int64_t ni = i ? PR - i : 0;
    for (int64_t j = 0; j < PC; j++) {
      const int64_t nj = j ? PC - j : 0, k = i * PC + j, nk = ni * PC + nj;
      const double dr = z[k][0] - z[nk][0], di = z[k][1] + z[nk][1];
      y_out[k][0] = 0.5 * di;
      y_out[k][1] = -0.5 * dr;
    }
  }
  for (int64_t k = 0; k < PR * PC; k++) {
    z[k][0] += y_out[k][1];
    z[k][1] -= y_out[k][0];
  }
}

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n. */
static inline double freq(int64_t i, int64_t n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

/* The spectra of A = T^t c and B = T^t (c_c, -c_r) (the field rotated by
 * theta is cos A + sin B), components 0 (odd in rows) and 1 (odd in
 * columns), at index k: spec 0 c_r odd in rows, 1 c_r odd in columns,
 * 2 c_c odd in rows, 3 c_c odd in columns. */
static inline void ab_at(const sl_dpc_fit *f, int t, int64_t k, double a[2][2], double b[2][2]) {
  const fftw_complex *s0 = f->spec[0], *s1 = f->spec[1], *s2 = f->spec[2], *s3 = f->spec[3];
  for (int p = 0; p < 2; p++) {
    if (!t) {
      a[0][p] = s0[k][p], a[1][p] = s3[k][p];
      b[0][p] = s2[k][p], b[1][p] = -s1[k][p];
    } else {
      a[0][p] = s2[k][p], a[1][p] = s1[k][p];
      b[0][p] = -s0[k][p], b[1][p] = s3[k][p];
    }
  }
}

/* The weighted quadratic form of the transverse power for transpose t, and
 * the total weighted power. */
static sl_dpc_quad transverse_form(const sl_dpc_fit *f, int t, const double *w, double *total) {
  sl_dpc_quad q = {0, 0, 0};
  double tot = 0;
  for (int64_t i = 0; i < f->pr; i++) {
    double kr = freq(i, f->pr);
    for (int64_t j = 0; j < f->pc; j++) {
      double kc = freq(j, f->pc), kk = sqrt(kr * kr + kc * kc);
      int64_t k = i * f->pc + j;
      if (kk == 0 || (w && w[k] == 0)) continue;
      double a[2][2], b[2][2], ur = kr / kk, uc = kc / kk, wk = w ? w[k] : 1;
      ab_at(f, t, k, a, b);
      double ta[2], tb[2];
      for (int p = 0; p < 2; p++) ta[p] = ur * a[1][p] - uc * a[0][p], tb[p] = ur * b[1][p] - uc * b[0][p];
      q.uu += wk * (ta[0] * ta[0] + ta[1] * ta[1]);
      q.uv += wk * (ta[0] * tb[0] + ta[1] * tb[1]);
      q.vv += wk * (tb[0] * tb[0] + tb[1] * tb[1]);
      tot += wk * (a[0][0] * a[0][0] + a[0][1] * a[0][1] + a[1][0] * a[1][0] + a[1][1] * a[1][1]);
    }
  }
  *total = tot;
  return q;
}

/* The power |A|^2 of both components at index k (rotation invariant). */
static inline double power_at(const sl_dpc_fit *f, int t, int64_t k) {
  double a[2][2], b[2][2];
  ab_at(f, t, k, a, b);
  return a[0][0] * a[0][0] + a[0][1] * a[0][1] + a[1][0] * a[1][0] + a[1][1] * a[1][1];
}

/* The ring of |k| (cycles per sample) that frequency (i, j) falls in. */
static inline int64_t ring_of(const sl_dpc_fit *f, int64_t i, int64_t j) {
  double kr = freq(i, f->pr), kc = freq(j, f->pc);
  int64_t m = f->pr > f->pc ? f->pr : f->pc;
  return (int64_t)(sqrt(kr * kr + kc * kc) * (double)m);
}

/* Wiener weights w = S / (S + sigma2) from the noise sigma2 (transverse
 * power per frequency) and the signal power S = mean P - 2 sigma2 of the
 * frequency's ring of |k|: a mean over a ring is a steady estimate where a
 * single frequency's power is as noisy as the noise itself. */
static void wiener(sl_dpc_fit *f, int t, double sigma2) {
  int64_t m = f->pr > f->pc ? f->pr : f->pc, nr = m + 1;
  double *sum = f->ring, *cnt = f->ring + nr;
  memset(sum, 0, (size_t)(2 * nr) * sizeof *sum);
  for (int64_t i = 0; i < f->pr; i++)
    for (int64_t j = 0; j < f->pc; j++) {
      int64_t r = ring_of(f, i, j);
      sum[r] += power_at(f, t, i * f->pc + j), cnt[r] += 1;
    }
  for (int64_t i = 0; i < f->pr; i++)
    for (int64_t j = 0; j < f->pc; j++) {
      int64_t r = ring_of(f, i, j);
      double s = sum[r] / cnt[r] - 2 * sigma2;
      f->weight[i * f->pc + j] = s > 0 ? s / (s + sigma2) : 0;
    }
}

/* The smaller residual's transpose; its angle per t from forms q. */
static int best_t(const sl_dpc_quad q[2], const double tot[2], const double *given, double ang[2],
                  double res[2]) {
  for (int t = 0; t < 2; t++) {
    ang[t] = given ? *given : sl_dpc_quad_argmin(&q[t]);
    res[t] = tot[t] > 0 ? sl_dpc_quad_at(&q[t], ang[t]) / tot[t] : 0.5;
  }
  return res[1] < res[0];
}

void sl_dpc_fit_run(sl_dpc_fit *f, const double *cr, const double *cc, const double *given,
                    sl_dpc_fit_result *r) {
  memset(r, 0, sizeof *r);
  /* Two real fields per complex transform: spectra 0 and 2 (odd in rows)
   * from one, 1 and 3 (odd in columns) from the other. */
  for (int a = 0; a < 2; a++) {
    mirror(f, cr, !a, f->spec[a], 0);
    mirror(f, cc, !a, f->spec[a], 1);
    fftw_execute_dft(f->fwd, f->spec[a], f->spec[a]);
    split_pair(f, f->spec[a], f->spec[a + 2]);
  }
  /* The unweighted forms depend on the spectra only: made once. */
  sl_dpc_quad q0[2], q[2];
  double tot0[2], tot[2], ang[2], res[2];
  for (int t = 0; t < 2; t++) q[t] = q0[t] = transverse_form(f, t, NULL, &tot0[t]), tot[t] = tot0[t];
  int t = best_t(q, tot, given, ang, res);
  int64_t nk = f->pr * f->pc - 1;
  double mean_power = nk > 0 ? tot[t] / (double)nk : 0, sigma2 = 0;
  for (int pass = 0; pass < REWEIGHTS; pass++) {
    /* The transverse power at the optimum of the unweighted form: noise. */
    sigma2 = nk > 0 ? sl_dpc_quad_at(&q0[t], ang[t]) / (double)nk : 0;
    wiener(f, t, sigma2);
    for (int u = 0; u < 2; u++) q[u] = transverse_form(f, u, f->weight, &tot[u]);
    t = best_t(q, tot, given, ang, res);
  }
  for (int u = 0; u < 2; u++) r->angle[u] = ang[u], r->residual[u] = res[u];
  double tr = q[t].uu + q[t].vv, det = q[t].uu * q[t].vv - q[t].uv * q[t].uv;
  double disc = sqrt(fmax(0, 0.25 * tr * tr - det)), lmax = 0.5 * tr + disc, lmin = 0.5 * tr - disc;
  r->sharpness = lmax > 0 ? 1 - lmin / lmax : 0;
  r->noise = mean_power > 0 ? sigma2 / mean_power : 0;
}
