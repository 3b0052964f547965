/* The rotation fit of dpc. See dpc_fit.h for the method and why. */
#include "nodes/stem/dpc_fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "shaders/cuda/stem/dpc_math.h"

enum { REWEIGHTS = 3 };

/* The sums per ring and transpose t (shaders/cuda/stem/dpc_math.h). */
enum {
  SUM_UU = SL_DPC_SUM_UU,
  SUM_UV = SL_DPC_SUM_UV,
  SUM_VV = SL_DPC_SUM_VV,
  SUM_POWER = SL_DPC_SUM_POWER,
  RING_SUMS = SL_DPC_RING_SUMS
};

/* Blocks of column frequencies in the pass: a number fixed by the size
 * alone (never by the thread count), few enough that their ring sums stay
 * small. */
enum { MAX_BLOCKS = 16 };

int64_t sl_dpc_fit_bytes(int64_t rows, int64_t cols) {
  int64_t rings = sl_dpc_rings(rows, cols);
  return 4 * rows * cols * 8 + sl_mirror_bytes(rows, cols) +
         (MAX_BLOCKS * RING_SUMS + 1) * rings * 8;
}

int64_t sl_dpc_fit_ops(int64_t rows, int64_t cols) {
  double n = (double)(rows + 1) * (double)(cols + 1);
  return 4 * sl_mirror_ops(rows, cols) + (int64_t)(60 * n);
}

void sl_dpc_fit_free(sl_dpc_fit *f) {
  sl_mirror_free(&f->ms);
  for (int i = 0; i < 4; i++) free(f->spec[i]);
  free(f->ring_sums);
  free(f->ring_count);
  memset(f, 0, sizeof *f);
}

static inline double half_freq(int64_t k, int64_t n) { return sl_dpc_half_freq(k, n); }

/* The ring of |k| (cycles per sample) that frequency (kr, kc) falls in. */
static inline int64_t ring_of(const sl_dpc_fit *f, double kk) { return sl_dpc_ring_of(f->rows, f->cols, kk); }

sl_code sl_dpc_fit_init(sl_dpc_fit *f, int64_t rows, int64_t cols, sl_error *err) {
  memset(f, 0, sizeof *f);
  f->rows = rows, f->cols = cols, f->rings = sl_dpc_rings(rows, cols);
  f->block = (cols + 1 + MAX_BLOCKS - 1) / MAX_BLOCKS;
  f->blocks = (cols + 1 + f->block - 1) / f->block;
  sl_code rc = sl_mirror_init(&f->ms, rows, cols, err);
  if (rc != SL_OK) return rc;
  bool ok = true;
  for (int i = 0; i < 4; i++) ok &= (f->spec[i] = malloc((size_t)(rows * cols) * sizeof(double))) != NULL;
  f->ring_sums = malloc((size_t)(f->blocks * f->rings * RING_SUMS) * sizeof(double));
  f->ring_count = calloc((size_t)f->rings, sizeof(double));
  if (!ok || !f->ring_sums || !f->ring_count) {
    sl_dpc_fit_free(f);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for four %lldx%lld spectra",
                   (long long)rows, (long long)cols);
  }
  for (int64_t kc = 0; kc <= cols; kc++)
    for (int64_t kr = 0; kr <= rows; kr++) {
      double fr = half_freq(kr, rows), fc = half_freq(kc, cols);
      f->ring_count[ring_of(f, sl_dpc_kk(fr, fc))] += sl_dpc_multiplicity(rows, cols, kr, kc);
    }
  return SL_OK;
}

/* The minimum of c^2 uu + 2 c s uv + s^2 vv = mean + amp cos(2 theta - phi)
 * (mean (uu + vv) / 2, amp and phi from ((uu - vv) / 2, uv)): at
 * 2 theta = phi + 180 degrees. */
double sl_dpc_quad_argmin(const sl_dpc_quad *q) {
  double b = 0.5 * (q->uu - q->vv), d = q->uv, mean = 0.5 * (q->uu + q->vv);
  double amp = hypot(b, d), best = mean - amp, worst = mean + amp;
  if (!(worst > best * (1 + 1e-12)) || worst == 0) return 0; /* no information */
  double x = 0.5 * (atan2(d, b) * 180.0 / M_PI + 180.0);
  return x < 0 ? x + 180 : x >= 180 ? x - 180 : x;
}

double sl_dpc_quad_at(const sl_dpc_quad *q, double deg) {
  double th = deg * M_PI / 180.0, c = cos(th), s = sin(th);
  return c * c * q->uu + 2 * c * s * q->uv + s * s * q->vv;
}

/* Frequency (fr, fc) (cycles per sample, not both 0) with the four
 * spectra x there, counted m times, added to its ring's sums. */
static inline void add_frequency(const sl_dpc_fit *f, double *sums, double fr, double fc,
                                 const double x[4], double m) {
  double kk = sl_dpc_kk(fr, fc);
  sl_dpc_add_frequency(sums + ring_of(f, kk) * RING_SUMS, fr, fc, kk, x, m);
}

/* Frequency (kr, kc) of the edges (kr or kc 0 or Nyquist), where some of
 * the spectra vanish. */
static void add_edge(const sl_dpc_fit *f, double *sums, int64_t kr, int64_t kc) {
  const int64_t R = f->rows, C = f->cols;
  if (kr == 0 && kc == 0) return;
  double x[4];
  for (int s = 0; s < 4; s++) x[s] = sl_mirror_at(f->spec[s], R, C, s % 2 == 0, s % 2 == 1, kr, kc);
  add_frequency(f, sums, half_freq(kr, R), half_freq(kc, C), x, sl_dpc_multiplicity(R, C, kr, kc));
}

/* One block of column frequencies of the pass into its own ring sums. */
static void ring_pass(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  sl_dpc_fit *f = ctx;
  const int64_t R = f->rows, C = f->cols;
  for (int64_t blk = begin; blk < end; blk++) {
    double *sums = f->ring_sums + blk * f->rings * RING_SUMS;
    memset(sums, 0, (size_t)(f->rings * RING_SUMS) * sizeof *sums);
    int64_t kc1 = (blk + 1) * f->block < C + 1 ? (blk + 1) * f->block : C + 1;
    for (int64_t kc = blk * f->block; kc < kc1; kc++) {
      if (kc == 0 || kc == C) {
        for (int64_t kr = 0; kr <= R; kr++) add_edge(f, sums, kr, kc);
        continue;
      }
      /* Inside: every spectrum is there, each frequency stands for 4. The
       * odd-in-rows spectra hold kr at kr - 1, the odd-in-cols ones kc at
       * kc - 1 (sl_mirror_at). */
      const double *s0 = f->spec[0] + kc * R - 1, *s2 = f->spec[2] + kc * R - 1;
      const double *s1 = f->spec[1] + (kc - 1) * R, *s3 = f->spec[3] + (kc - 1) * R;
      double fc = half_freq(kc, C);
      add_edge(f, sums, 0, kc);
      for (int64_t kr = 1; kr < R; kr++) {
        const double x[4] = {s0[kr], s1[kr], s2[kr], s3[kr]};
        add_frequency(f, sums, half_freq(kr, R), fc, x, 4);
      }
      add_edge(f, sums, R, kc);
    }
  }
}

/* Wiener weight of ring r for the power of transpose t: w = S / (S +
 * sigma2), S the ring's mean power less 2 sigma2 (a mean over a ring is a
 * steady estimate where a single frequency's power is as noisy as the noise
 * itself). NULL sigma2: weight 1. */
static double ring_weight(const sl_dpc_fit *f, int64_t r, int t, const double *sigma2) {
  if (!sigma2) return 1;
  if (f->ring_count[r] == 0) return 0;
  double s = f->ring_sums[r * RING_SUMS + 4 * t + SUM_POWER] / f->ring_count[r] - 2 * *sigma2;
  return s > 0 ? s / (s + *sigma2) : 0;
}

/* The weighted forms of the transverse power of both transposes, and the
 * total weighted powers; weights from transpose t_w's power and sigma2. */
static void forms(const sl_dpc_fit *f, int t_w, const double *sigma2, sl_dpc_quad q[2],
                  double total[2]) {
  memset(q, 0, 2 * sizeof *q);
  total[0] = total[1] = 0;
  for (int64_t r = 0; r < f->rings; r++) {
    double w = ring_weight(f, r, t_w, sigma2);
    if (w == 0) continue;
    const double *s = f->ring_sums + r * RING_SUMS;
    for (int t = 0; t < 2; t++, s += 4) {
      q[t].uu += w * s[SUM_UU], q[t].uv += w * s[SUM_UV], q[t].vv += w * s[SUM_VV];
      total[t] += w * s[SUM_POWER];
    }
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

void sl_dpc_fit_run(sl_dpc_fit *f, struct sl_backend *b, const double *cr, const double *cc,
                    const double *given, sl_dpc_fit_result *r) {
  for (int s = 0; s < 4; s++)
    sl_mirror_forward(&f->ms, b, s < 2 ? cr : cc, s % 2 == 0, s % 2 == 1, f->spec[s]);
  if (b) b->ops->parallel_for(b, f->blocks, 1, ring_pass, f);
  else ring_pass(f, 0, f->blocks, 0);
  /* The blocks' sums, in block order, into block 0. */
  for (int64_t blk = 1; blk < f->blocks; blk++) {
    const double *src = f->ring_sums + blk * f->rings * RING_SUMS;
    for (int64_t k = 0; k < f->rings * RING_SUMS; k++) f->ring_sums[k] += src[k];
  }
  sl_dpc_fit_solve(f, given, r);
}

void sl_dpc_fit_solve(sl_dpc_fit *f, const double *given, sl_dpc_fit_result *r) {
  memset(r, 0, sizeof *r);
  /* The unweighted forms give the noise at their optimum, every pass. */
  sl_dpc_quad q0[2], q[2];
  double tot0[2], tot[2], ang[2], res[2];
  forms(f, 0, NULL, q0, tot0);
  memcpy(q, q0, sizeof q), memcpy(tot, tot0, sizeof tot);
  int t = best_t(q, tot, given, ang, res);
  int64_t nk = 4 * f->rows * f->cols - 1;
  double mean_power = nk > 0 ? tot[t] / (double)nk : 0, sigma2 = 0;
  for (int pass = 0; pass < REWEIGHTS; pass++) {
    /* The transverse power at the optimum of the unweighted form: noise. */
    sigma2 = nk > 0 ? sl_dpc_quad_at(&q0[t], ang[t]) / (double)nk : 0;
    forms(f, t, &sigma2, q, tot);
    t = best_t(q, tot, given, ang, res);
  }
  for (int u = 0; u < 2; u++) r->angle[u] = ang[u], r->residual[u] = res[u];
  double tr = q[t].uu + q[t].vv, det = q[t].uu * q[t].vv - q[t].uv * q[t].uv;
  double disc = sqrt(fmax(0, 0.25 * tr * tr - det)), lmax = 0.5 * tr + disc, lmin = 0.5 * tr - disc;
  r->sharpness = lmax > 0 ? 1 - lmin / lmax : 0;
  r->noise = mean_power > 0 ? sigma2 / mean_power : 0;
}

void sl_dpc_fit_rotated_spectra(const sl_dpc_fit *f, double theta_deg, int t, double *x_r,
                                double *x_c) {
  /* c_scan = T^t R(-theta) c_det, linear in (c_r, c_c), and so are the
   * spectra: row component (odd in rows) from spectra 0 and 2, column
   * component (odd in columns) from 1 and 3. */
  double th = theta_deg * M_PI / 180.0, c = cos(th), s = sin(th);
  double rr = t ? -s : c, rc = t ? c : s, cr = t ? c : -s, cc = t ? s : c;
  const double *s0 = f->spec[0], *s1 = f->spec[1], *s2 = f->spec[2], *s3 = f->spec[3];
  for (int64_t k = 0; k < f->rows * f->cols; k++) {
    x_r[k] = rr * s0[k] + rc * s2[k];
    x_c[k] = cr * s1[k] + cc * s3[k];
  }
}
