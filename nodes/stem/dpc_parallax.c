/* The parallax of the BF disk's segments and the branch it gives. See
 * dpc_parallax.h. */
#include "nodes/stem/dpc_parallax.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "nodes/common/fourier_integral.h"
#include "nodes/common/select_kth.h"
#include "nodes/stem/dpc_fit.h"
#include "nodes/stem/dpc_pair_power.h"
#include "nodes/common/fftw_planner.h"

struct sl_dpc_parallax {
  int n;               /* segments (the port's count; empty ones are skipped at run time) */
  int64_t rows, cols;  /* scan */
  int64_t wr, wc;      /* the fit's window */
  int64_t lr, lc;      /* the largest lags kept: half the window */
  int64_t pr, pc;      /* the padded transform: window + lag, so that no lag wraps around */
  int64_t tr, tc;      /* the tilt-corrected image's window (central, at most SL_DPC_PARALLAX_TCBF) */
  int64_t seg_row0, seg_rows; /* this run's segment buffers: scan rows [seg_row0, + seg_rows) */
  fftw_complex *wspec; /* [n][pc][pr]: the window's spectra, transposed (window_forward) */
  fftw_complex *work;  /* [pr * pc]: the calling thread's window transforms */
  fftw_complex *twork; /* [pr * pc]: ... and their transposes */
  double *lag_scale;   /* [(2 lr + 1) (2 lc + 1)]: 1 / (pr pc overlap) of each lag (lags_out) */
  fftw_complex *acc;   /* [tr * tc]: the tcBF's spectrum */
  double *xcorr;       /* [n (n - 1) / 2][(2 lr + 1) (2 lc + 1)]: the pairs' correlations */
  double *weight;      /* [pr * pc]: each frequency's weight in the correlations (noise_weights) */
  double *ramp;        /* [TCBF_GROUPS][2 (tr + tc)]: a segment's phase ramp along rows and columns */
  fftw_complex *gbuf;  /* [TCBF_GROUPS][2][tr * tc]: each group's transform and partial sum */
  /* The window's transforms as passes of 1-D transforms along contiguous
   * rows (window_forward, window_backward_lags): forward, the window's wr rows of pc, then the pc
   * rows of pr of its transpose; backward, the pc rows of pr, then the
   * 2 lr + 1 rows of pc that hold the kept lags. */
  fftw_plan wrows_fwd, wcols_fwd, wcols_inv, wlags_inv;
  fftw_plan fwd, inv;
};

/* The tcBF's segments are shifted and summed in this many fixed groups
 * (grid 5's 21 segments: 3 each), each on one worker, their partial sums
 * added in order: the same bits on any number of workers. */
#define TCBF_GROUPS 7

/* A group buffer's elements: whole 64-byte lines, so that every group's
 * transform buffer has the alignment FFTW planned for. */
static int64_t group_elems(int64_t np) { return (np + 3) / 4 * 4; }

static int64_t window_side(int64_t n) { return n < SL_DPC_PARALLAX_WINDOW ? n : SL_DPC_PARALLAX_WINDOW; }
static int64_t tcbf_side(int64_t n) { return n < SL_DPC_PARALLAX_TCBF ? n : SL_DPC_PARALLAX_TCBF; }

/* Lags kept per pair, and the padded transform's size. */
static int64_t lag_elems(int64_t wr, int64_t wc) { return (2 * (wr / 2) + 1) * (2 * (wc / 2) + 1); }
static int64_t padded_elems(int64_t wr, int64_t wc) { return (wr + wr / 2) * (wc + wc / 2); }

void sl_dpc_parallax_geometry_of(int64_t rows, int64_t cols, sl_dpc_parallax_geometry *g) {
  g->wr = window_side(rows), g->wc = window_side(cols);
  g->lr = g->wr / 2, g->lc = g->wc / 2;
  g->pr = g->wr + g->lr, g->pc = g->wc + g->lc;
  g->tr = tcbf_side(rows), g->tc = tcbf_side(cols);
}

void sl_dpc_parallax_band(int64_t rows, int64_t *row0, int64_t *nrows) {
  *nrows = tcbf_side(rows);
  *row0 = (rows - *nrows) / 2;
}

int64_t sl_dpc_parallax_worker_bytes(int64_t rows, int64_t cols) {
  const int64_t pw = padded_elems(window_side(rows), window_side(cols));
  return 16 * (group_elems(pw) + pw); /* a transform and its transpose (job_buffer) */
}

int64_t sl_dpc_parallax_bytes(int n, int64_t rows, int64_t cols) {
  const int64_t wr = window_side(rows), wc = window_side(cols), pw = padded_elems(wr, wc);
  const int64_t np = tcbf_side(rows) * tcbf_side(cols);
  const int64_t pairs = (int64_t)n * (n - 1) / 2;
  const int64_t ramp = 2 * (tcbf_side(rows) + tcbf_side(cols));
  return 16 * ((int64_t)n * pw + 2 * pw + np + TCBF_GROUPS * 2 * group_elems(np)) +
         8 * (pairs * lag_elems(wr, wc) + lag_elems(wr, wc) + TCBF_GROUPS * ramp + pw);
}

int64_t sl_dpc_parallax_ops(int n, int64_t rows, int64_t cols) {
  return sl_dpc_parallax_ops_of(n, rows, cols, SL_DPC_PARALLAX_OPS_PROBE);
}

int64_t sl_dpc_parallax_ops_of(int n, int64_t rows, int64_t cols, sl_dpc_parallax_ops_kind kind) {
  const int64_t wr = window_side(rows), wc = window_side(cols);
  double pw = (double)padded_elems(wr, wc), np = (double)(tcbf_side(rows) * tcbf_side(cols));
  double pairs = n * (n - 1) / 2.0, fft_w = 5 * pw * log2(pw > 2 ? pw : 2), fft = 5 * np * log2(np > 2 ? np : 2);
  /* The window's transforms and pair correlations (two pairs a transform),
   * the search (about 25 (window / 4)^2 trial maps of 40 operations per
   * pair: 16 look-ups and their cubic weights; four maps at once, counted
   * at a quarter), the tcBF. The refinement's weighted correlations and
   * pattern search run only when a parallax is found, which the plan
   * cannot know: counted at half (the dev VM's 256 x 256 run took 0.39 s
   * without them and about 0.55 s with them, before the pairs shared
   * transforms and the search took four maps at once). */
  double trials = 25.0 * (double)(wr / 4) * (double)(wc / 4) + 400 + 200;
  const double fit = (n + 0.75 * pairs) * (fft_w + 6 * pw) + 0.5 * pw * (2.0 * n + 20 * log2(pw > 2 ? pw : 2)) +
                     10 * pairs * trials;
  const double tcbf = n * (fft + 8 * np) + fft + 4 * np;
  /* Without the probe f_max is estimated: about 490 candidates, each with
   * every segment's shift ramps (a sincos, ~40 operations, per padded row
   * and column); its sums over the frequencies above the noise depend on
   * the data and are not counted. */
  const double ramps = 490.0 * n * 2 * (double)(wr + wr / 2 + wc + wc / 2) * 40;
  switch (kind) {
  case SL_DPC_PARALLAX_OPS_AXIS: return (int64_t)fit;
  case SL_DPC_PARALLAX_OPS_NO_PROBE: return (int64_t)(fit + tcbf + ramps);
  default: return (int64_t)(fit + tcbf);
  }
}

void sl_dpc_parallax_free(sl_dpc_parallax *p) {
  if (!p) return;
  if (p->wrows_fwd) fftw_destroy_plan(p->wrows_fwd);
  if (p->wcols_fwd) fftw_destroy_plan(p->wcols_fwd);
  if (p->wcols_inv) fftw_destroy_plan(p->wcols_inv);
  if (p->wlags_inv) fftw_destroy_plan(p->wlags_inv);
  if (p->fwd) fftw_destroy_plan(p->fwd);
  if (p->inv) fftw_destroy_plan(p->inv);
  fftw_free(p->wspec);
  fftw_free(p->work);
  fftw_free(p->twork);
  free(p->lag_scale);
  fftw_free(p->acc);
  fftw_free(p->gbuf);
  free(p->xcorr);
  free(p->weight);
  free(p->ramp);
  free(p);
}

/* What every state holds: the geometry and the driver's buffers (the
 * powers, reordered for their median, and the noise weights); NULL when out
 * of memory. */
static sl_dpc_parallax *parallax_base(int n, int64_t rows, int64_t cols) {
  sl_dpc_parallax *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n, p->rows = rows, p->cols = cols;
  sl_dpc_parallax_geometry g;
  sl_dpc_parallax_geometry_of(rows, cols, &g);
  p->wr = g.wr, p->wc = g.wc, p->lr = g.lr, p->lc = g.lc, p->pr = g.pr, p->pc = g.pc, p->tr = g.tr, p->tc = g.tc;
  const size_t pw = (size_t)(p->pr * p->pc);
  p->work = fftw_malloc(pw * sizeof(fftw_complex));
  p->weight = malloc(pw * sizeof(double));
  if (!p->work || !p->weight) {
    sl_dpc_parallax_free(p);
    return NULL;
  }
  return p;
}

sl_code sl_dpc_parallax_new(int n, int64_t rows, int64_t cols, sl_dpc_parallax **out, sl_error *err) {
  *out = NULL;
  sl_dpc_parallax *p = parallax_base(n, rows, cols);
  if (p) {
    const size_t pw = (size_t)(p->pr * p->pc), np = (size_t)(p->tr * p->tc);
    const size_t pairs = (size_t)n * (size_t)(n - 1) / 2, lags = (size_t)lag_elems(p->wr, p->wc);
    p->wspec = fftw_malloc((size_t)n * pw * sizeof(fftw_complex));
    p->twork = fftw_malloc(pw * sizeof(fftw_complex));
    p->lag_scale = malloc(lags * sizeof(double));
    p->acc = fftw_malloc(np * sizeof(fftw_complex));
    p->xcorr = malloc((pairs ? pairs : 1) * lags * sizeof(double));
    p->ramp = malloc((size_t)(TCBF_GROUPS * 2 * (p->tr + p->tc)) * sizeof(double));
    p->gbuf = fftw_malloc((size_t)(TCBF_GROUPS * 2 * group_elems((int64_t)np)) * sizeof(fftw_complex));
  }
  if (!p || !p->wspec || !p->twork || !p->lag_scale || !p->acc || !p->xcorr || !p->ramp || !p->gbuf) {
    sl_dpc_parallax_free(p);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for the parallax fit of %d segments on a %lldx%lld scan",
                   n, (long long)rows, (long long)cols);
  }
  sl_fftw_planner_thread_safe();
  const int pr = (int)p->pr, pc = (int)p->pc, kept = (int)(2 * p->lr + 1);
  p->wrows_fwd = fftw_plan_many_dft(1, &pc, (int)p->wr, p->work, NULL, 1, pc, p->work, NULL, 1, pc, FFTW_FORWARD,
                                    FFTW_ESTIMATE);
  p->wcols_fwd = fftw_plan_many_dft(1, &pr, pc, p->twork, NULL, 1, pr, p->twork, NULL, 1, pr, FFTW_FORWARD,
                                    FFTW_ESTIMATE);
  p->wcols_inv = fftw_plan_many_dft(1, &pr, pc, p->work, NULL, 1, pr, p->work, NULL, 1, pr, FFTW_BACKWARD,
                                    FFTW_ESTIMATE);
  p->wlags_inv = fftw_plan_many_dft(1, &pc, kept, p->twork, NULL, 1, pc, p->twork, NULL, 1, pc, FFTW_BACKWARD,
                                    FFTW_ESTIMATE);
  p->fwd = fftw_plan_dft_2d((int)p->tr, (int)p->tc, p->gbuf, p->gbuf, FFTW_FORWARD, FFTW_ESTIMATE);
  p->inv = fftw_plan_dft_2d((int)p->tr, (int)p->tc, p->acc, p->acc, FFTW_BACKWARD, FFTW_ESTIMATE);
  if (!p->wrows_fwd || !p->wcols_fwd || !p->wcols_inv || !p->wlags_inv || !p->fwd || !p->inv) {
    sl_dpc_parallax_free(p);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan the parallax fit's transforms");
  }
  for (int64_t dr = -p->lr; dr <= p->lr; dr++)
    for (int64_t dc = -p->lc; dc <= p->lc; dc++) {
      const double overlap = (double)((p->wr - (dr < 0 ? -dr : dr)) * (p->wc - (dc < 0 ? -dc : dc)));
      p->lag_scale[(dr + p->lr) * (2 * p->lc + 1) + dc + p->lc] = 1 / ((double)(p->pr * p->pc) * overlap);
    }
  *out = p;
  return SL_OK;
}

int64_t sl_dpc_parallax_driver_bytes(int64_t rows, int64_t cols) {
  return 24 * padded_elems(window_side(rows), window_side(cols));
}

sl_code sl_dpc_parallax_new_driver(int n, int64_t rows, int64_t cols, sl_dpc_parallax **out, sl_error *err) {
  *out = parallax_base(n, rows, cols);
  return *out ? SL_OK : sl_fail(err, SL_ERR_NOMEM, "out of memory for the parallax fit's weights");
}

bool sl_dpc_parallax_has_host_steps(const sl_dpc_parallax *p) { return p && p->wrows_fwd; }

double sl_electron_wavelength(double kilovolts) {
  /* h / sqrt(2 m e V (1 + e V / (2 m c^2))): 12.2643 / sqrt(V (1 + 0.978476e-6 V)) A, V in volts. */
  double v = kilovolts * 1e3;
  return 12.264259 / sqrt(v * (1 + 0.978476e-6 * v));
}

/* M = s R(p) T^t as m[4] = row-major 2x2, p in radians. */
static void parallax_matrix(double s, double p, int t, double m[4]) {
  double c = cos(p), sn = sin(p);
  if (!t) m[0] = s * c, m[1] = -s * sn, m[2] = s * sn, m[3] = s * c;
  else m[0] = -s * sn, m[1] = s * c, m[2] = s * c, m[3] = s * sn; /* R T: columns swapped */
}

typedef sl_dpc_parallax_set fit_set;

/* The objective's tables (dpc_pair_power.h) of a fit set. */
static sl_pair_lags pair_lags(const sl_dpc_parallax *p, const fit_set *fs) {
  return (sl_pair_lags){p->xcorr, p->lr, p->lc, fs->pair, fs->used * (fs->used - 1) / 2};
}

/* The power of the shifted sum less its constant part at M. The search
 * keeps every lag two inside the kept ones. */
static double pair_power(const sl_dpc_parallax *p, const fit_set *fs, const double m[4]) {
  const sl_pair_lags l = pair_lags(p, fs);
  return sl_pair_power(&l, m);
}

/* The work of correlate() shared among the workers: each range takes
 * whole segments (their spectra) or whole pairs (their correlations), in
 * the worker's own buffer (the caller's when there are no workers), so the
 * result does not depend on their number. */
typedef struct corr_job {
  sl_dpc_parallax *p;
  const fit_set *fs;
  const uint64_t *segments;
  char *scratch;     /* workers' buffers (NULL: p->work) */
  int64_t stride;
  int (*pairs)[2];   /* [pairs]: the pair's two segments (used indices) */
  double *diag;      /* [used]: each segment's sum of squares over the window, per position */
  const double *weight; /* [pr * pc]: the frequencies' weights (noise_weights), or NULL: none */
} corr_job;

static fftw_complex *job_buffer(const corr_job *j, int worker) {
  return j->scratch ? (fftw_complex *)(j->scratch + (int64_t)worker * j->stride) : j->p->work;
}

/* ... and the buffer its transposes go to, after it in the worker's
 * scratch on a 64-byte line (sl_dpc_parallax_worker_bytes). */
static fftw_complex *job_transposed(const corr_job *j, int worker) {
  return j->scratch ? job_buffer(j, worker) + group_elems(j->p->pr * j->p->pc) : j->p->twork;
}

/* dst[c * dst_stride + i] = src[i * src_stride + c] for i < rows, c < cols,
 * in blocks whose lines stay in L1. */
static void transpose_into(const fftw_complex *src, int64_t rows, int64_t src_stride, int64_t cols,
                           fftw_complex *dst, int64_t dst_stride) {
  enum { B = 16 };
  for (int64_t i0 = 0; i0 < rows; i0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B) {
      const int64_t i1 = i0 + B < rows ? i0 + B : rows, c1 = c0 + B < cols ? c0 + B : cols;
      for (int64_t c = c0; c < c1; c++)
        for (int64_t i = i0; i < i1; i++) {
          dst[c * dst_stride + i][0] = src[i * src_stride + c][0];
          dst[c * dst_stride + i][1] = src[i * src_stride + c][1];
        }
    }
}

/* The window's 2-D transforms as passes of 1-D transforms along contiguous
 * rows, with a transpose between (FFTW_ESTIMATE's 2-D plan of the 192 x
 * 192 padded window strode down its columns: 0.34 ms a transform on the
 * dev VM against 0.09 for its rows alone), and only the rows that are not
 * zero or that hold a kept lag: forward, the window's wr rows of its
 * padded row, then the transpose's pc rows; the spectrum stays transposed
 * ([pc][pr], as wspec holds it: the pairs' products, the powers and the
 * weights are pointwise). Backward from a transposed spectrum in `x`: its
 * pc rows, then the 2 lr + 1 rows of lags dr = -lr .. lr (row k: dr = k -
 * lr) moved into `t`, transformed along their pc columns there. */
static void window_forward(const sl_dpc_parallax *p, fftw_complex *x, fftw_complex *t) {
  const int64_t pr = p->pr, pc = p->pc, wr = p->wr;
  fftw_execute_dft(p->wrows_fwd, x, x);
  transpose_into(x, wr, pc, pc, t, pr);
  for (int64_t c = 0; c < pc; c++) memset(t + c * pr + wr, 0, (size_t)(pr - wr) * sizeof(fftw_complex));
  fftw_execute_dft(p->wcols_fwd, t, t);
}

static void window_backward_lags(const sl_dpc_parallax *p, fftw_complex *x, fftw_complex *t) {
  const int64_t pr = p->pr, pc = p->pc, lr = p->lr;
  fftw_execute_dft(p->wcols_inv, x, x);
  transpose_into(x, pc, pr, lr + 1, t + lr * pc, pc); /* dr = 0 .. lr */
  transpose_into(x + (pr - lr), pc, pr, lr, t, pc);   /* dr = -lr .. -1, wrapped */
  fftw_execute_dft(p->wlags_inv, t, t);
}

/* The window's spectra of segments [begin, end). */
static void spectra_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const corr_job *j = ctx;
  sl_dpc_parallax *p = j->p;
  const int64_t wr = p->wr, wc = p->wc, pc = p->pc, pw = p->pr * pc;
  const int64_t r0 = (p->rows - wr) / 2 - p->seg_row0, c0 = (p->cols - wc) / 2; /* in the buffers */
  const size_t np = (size_t)(p->seg_rows * p->cols);
  fftw_complex *work = job_buffer(j, worker), *t = job_transposed(j, worker);
  for (int64_t u = begin; u < end; u++) {
    const uint64_t *s = j->segments + (size_t)j->fs->index[u] * np;
    double mean = 0, d = 0;
    for (int64_t i = 0; i < wr; i++)
      for (int64_t c = 0; c < wc; c++) mean += (double)s[(r0 + i) * p->cols + c0 + c];
    j->fs->sum[u] = mean;
    mean /= (double)(wr * wc);
    memset(work, 0, (size_t)(wr * pc) * sizeof(fftw_complex)); /* the rows the forward pass reads */
    for (int64_t i = 0; i < wr; i++)
      for (int64_t c = 0; c < wc; c++) {
        double v = (double)s[(r0 + i) * p->cols + c0 + c] - mean;
        work[i * pc + c][0] = v;
        d += v * v / (double)(wr * wc);
      }
    j->diag[u] = d;
    window_forward(p, work, t);
    memcpy(p->wspec + (size_t)u * (size_t)pw, t, (size_t)pw * sizeof(fftw_complex));
  }
}

/* Pair k's lags from the real (part 0) or imaginary (part 1) part of an
 * inverse transform's kept rows (window_backward_lags: row k holds lag dr
 * = k - lr), each divided by the transform's size and the lag's overlap (a
 * mean over the positions where both segments lie: p->lag_scale). */
static void lags_out(const sl_dpc_parallax *p, const fftw_complex *lag_rows, int part, double *xc) {
  const int64_t pc = p->pc, lr = p->lr, lc = p->lc, sc = 2 * lc + 1;
  for (int64_t k = 0; k <= 2 * lr; k++) {
    const fftw_complex *row = lag_rows + k * pc; /* column lags wrap around (lc < pc) */
    const double *scale = p->lag_scale + k * sc + lc;
    double *out = xc + k * sc + lc;
    for (int64_t dc = -lc; dc <= lc; dc++) out[dc] = row[dc < 0 ? dc + pc : dc][part] * scale[dc];
  }
}

/* Tasks [begin, end): task t correlates pairs 2t and 2t + 1 in one
 * transform. Both products a conj(b) (weighted) are Hermitian, the
 * segments being real, so their correlations are real: the first goes in
 * as the real part, the second as the imaginary part, and the inverse
 * transform's real and imaginary parts are the two correlations: half as
 * many transforms as one a pair (they were most of the fit's time), the
 * same correlations within rounding. Tasks, not ranges, fix which pairs share a
 * transform: the same bits on any number of workers. */
static void pairs_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const corr_job *j = ctx;
  sl_dpc_parallax *p = j->p;
  const int64_t pw = p->pr * p->pc;
  const size_t lags = (size_t)((2 * p->lr + 1) * (2 * p->lc + 1));
  const int pairs = j->fs->used * (j->fs->used - 1) / 2;
  fftw_complex *work = job_buffer(j, worker), *lag_rows = job_transposed(j, worker);
  const double *w = j->weight;
  for (int64_t t = begin; t < end; t++) {
    const int64_t k = 2 * t;
    const bool two = k + 1 < pairs;
    const fftw_complex *a = p->wspec + (size_t)j->pairs[k][0] * (size_t)pw;
    const fftw_complex *b = p->wspec + (size_t)j->pairs[k][1] * (size_t)pw;
    const fftw_complex *c = two ? p->wspec + (size_t)j->pairs[k + 1][0] * (size_t)pw : a;
    const fftw_complex *d = two ? p->wspec + (size_t)j->pairs[k + 1][1] * (size_t)pw : a;
    for (int64_t q = 0; q < pw; q++) { /* a conj(b) + i c conj(d), weighted */
      const double g = w ? w[q] : 1;
      const double re1 = a[q][0] * b[q][0] + a[q][1] * b[q][1], im1 = a[q][1] * b[q][0] - a[q][0] * b[q][1];
      const double re2 = two ? c[q][0] * d[q][0] + c[q][1] * d[q][1] : 0;
      const double im2 = two ? c[q][1] * d[q][0] - c[q][0] * d[q][1] : 0;
      work[q][0] = g * (re1 - im2);
      work[q][1] = g * (im1 + re2);
    }
    window_backward_lags(p, work, lag_rows);
    lags_out(p, lag_rows, 0, p->xcorr + (size_t)k * lags);
    if (two) lags_out(p, lag_rows, 1, p->xcorr + (size_t)(k + 1) * lags);
  }
}

/* Each frequency's weight in the refinement's correlations (the Wiener
 * factor), W = 1 - N / P where P is the segments' mean power there (`power`,
 * reordered here for its median) and N the noise's (0 where P <= N). At a few
 * thousand electrons a frame most frequencies of a segment image are shot
 * noise; correlating them adds only noise to the fit. Counts are Poisson,
 * so N is a segment's mean count over the window times its positions (the
 * variance of a sum of counts is its mean). Data that are not plain counts
 * (scaled, or noiseless models) are caught by the median power, the
 * noise's where the signal is sparse. */
/* The segments' mean Poisson power per frequency: a segment's is its count
 * over the window (set->sum). */
static double poisson_noise(const fit_set *fs) {
  double noise = 0;
  for (int u = 0; u < fs->used; u++) noise += fs->sum[u] / fs->used;
  return noise;
}

static void noise_weights(double *power, double *weight, int64_t pw, const fit_set *fs) {
  double noise = poisson_noise(fs);
  memcpy(weight, power, (size_t)pw * sizeof *weight);
  const double median = sl_select_kth(power, pw, pw / 2); /* a sort's power[pw / 2] */
  if (median < noise) noise = median;
  for (int64_t q = 0; q < pw; q++) weight[q] = weight[q] > noise ? 1 - noise / weight[q] : 0;
}

/* ---- the host's steps (FFTW, the backend's workers) ------------------------------ */

typedef struct host_steps {
  sl_dpc_parallax *p;
  struct sl_backend *b;
  void *scratch; /* the workers' buffers (NULL: this thread does all) */
  int64_t stride;
  const uint64_t *segments;
} host_steps;

/* The pairs' correlations from the window's spectra in p->wspec (weight
 * set: weighted). False when out of memory. */
static bool correlate_pairs(corr_job *j, struct sl_backend *b) {
  const int used = j->fs->used, pairs = used * (used - 1) / 2;
  j->pairs = malloc((size_t)(pairs ? pairs : 1) * sizeof(int[2]));
  if (!j->pairs) return false;
  for (int i = 0, k = 0; i < used; i++)
    for (int q = i + 1; q < used; q++, k++) j->pairs[k][0] = i, j->pairs[k][1] = q;
  const int64_t tasks = (pairs + 1) / 2; /* two pairs a transform (pairs_range) */
  if (b && j->scratch) b->ops->parallel_for(b, tasks, 1, pairs_range, j);
  else pairs_range(j, 0, tasks, 0);
  free(j->pairs);
  j->pairs = NULL;
  return true;
}

/* Plain: the window's spectra first (zero padded, so that no lag wraps
 * around) and each segment's counts (fs->sum). Means, not sums: a sum's
 * overlap falls with the lag and pulls the largest power towards small
 * shifts (a Hann window did the same: 3-7% too small a defocus). */
static bool host_correlate(void *ctx, fit_set *fs, const double *weight, double *diag) {
  host_steps *h = ctx;
  corr_job j = {h->p, fs, h->segments, h->scratch, h->stride, NULL, NULL, weight};
  if (!weight) {
    if (!(j.diag = malloc((size_t)fs->used * sizeof(double)))) return false;
    if (h->b && h->scratch) h->b->ops->parallel_for(h->b, fs->used, 1, spectra_range, &j);
    else spectra_range(&j, 0, fs->used, 0);
    double d = 0;
    for (int u = 0; u < fs->used; u++) d += j.diag[u];
    free(j.diag);
    j.diag = NULL;
    *diag = d;
  }
  return correlate_pairs(&j, h->b);
}

static bool host_power(void *ctx, const fit_set *fs, double *power) {
  const sl_dpc_parallax *p = ((host_steps *)ctx)->p;
  const int used = fs->used;
  const int64_t pw = p->pr * p->pc;
  for (int64_t q = 0; q < pw; q++) {
    double e = 0;
    for (int u = 0; u < used; u++) {
      const fftw_complex *x = p->wspec + (size_t)u * (size_t)pw + q;
      e += (*x)[0] * (*x)[0] + (*x)[1] * (*x)[1];
    }
    power[q] = e / used;
  }
  return true;
}

/* The grid search: for each s = half (k + 1), both transposes t, n_p =
 * ceil(2 pi s / half) angles each, the first largest value in that order.
 * Its tasks are blocks of SEARCH_BLOCK angles of one (s, t), so that they
 * cost alike: one task per s put the largest s, whose angles are the most,
 * last, and on 16 workers the search took about twice its share (the
 * H200's axis fit ran 2x its estimate). Each task keeps its own first
 * largest and they are merged in task order, which is the angles' order:
 * the same optimum, to the bit, whatever the workers (sl_pair_power4's and
 * sl_pair_power8's lanes are sl_pair_power's bits). */
#define SEARCH_BLOCK 32

typedef struct search_task {
  int64_t k;  /* s = half (k + 1) */
  int t;      /* transpose */
  int q0, q1; /* angles [q0, q1) of n_p */
  int n_p;
} search_task;

typedef struct search_job {
  const sl_dpc_parallax *p;
  const fit_set *fs;
  double half;
  const search_task *task;
  double *best; /* [tasks][4]: value, s, p, t */
  int lanes;    /* maps a call: 8 (sl_pair_power8 runs here), 4 (sl_pair_power4) or 1 */
} search_job;

static int search_angles(double s, double half) { return (int)ceil(2 * M_PI * s / half); }

static void search_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const search_job *j = ctx;
  const sl_pair_lags lags = pair_lags(j->p, j->fs);
  double m[4];
  for (int64_t k = begin; k < end; k++) {
    const search_task *tk = j->task + k;
    const double s = j->half * (double)(tk->k + 1);
    double *b = j->best + 4 * k;
    b[0] = -INFINITY;
    for (int q = tk->q0; q < tk->q1;) {
      double v[8], ang[8];
      int n = j->lanes == 8 && tk->q1 - q >= 8 ? 8 : j->lanes >= 4 && tk->q1 - q >= 4 ? 4 : 1;
      for (int e = 0; e < n; e++) ang[e] = 2 * M_PI * (q + e) / tk->n_p;
      if (n > 1) {
        double mn[8][4];
        for (int e = 0; e < n; e++) parallax_matrix(s, ang[e], tk->t, mn[e]);
        if (n == 8) sl_pair_power8(&lags, mn, v);
        else sl_pair_power4(&lags, mn, v);
      } else {
        parallax_matrix(s, ang[0], tk->t, m);
        v[0] = sl_pair_power(&lags, m);
      }
      for (int e = 0; e < n; e++) /* in order of the angle: the first of equal values */
        if (v[e] > b[0]) b[0] = v[e], b[1] = s, b[2] = ang[e], b[3] = tk->t;
      q += n;
    }
  }
}

static bool host_grid(void *ctx, const fit_set *fs, double half, int64_t n_s, double *best) {
  host_steps *h = ctx;
  int64_t tasks = 0;
  for (int64_t k = 0; k < n_s; k++)
    tasks += 2 * ((search_angles(half * (double)(k + 1), half) + SEARCH_BLOCK - 1) / SEARCH_BLOCK);
  search_task *task = malloc((size_t)(tasks ? tasks : 1) * sizeof *task);
  double *part = malloc((size_t)(tasks ? tasks : 1) * 4 * sizeof *part);
  if (!task || !part) {
    free(task);
    free(part);
    return false;
  }
  int64_t i = 0;
  for (int64_t k = 0; k < n_s; k++) {
    const int n_p = search_angles(half * (double)(k + 1), half);
    for (int t = 0; t < 2; t++)
      for (int q = 0; q < n_p; q += SEARCH_BLOCK)
        task[i++] = (search_task){k, t, q, q + SEARCH_BLOCK < n_p ? q + SEARCH_BLOCK : n_p, n_p};
  }
  search_job j = {h->p, fs, half, task, part,
                  sl_pair_power8_available() ? 8 : sl_pair_power4_available() ? 4 : 1};
  if (h->b) h->b->ops->parallel_for(h->b, tasks, 1, search_range, &j);
  else search_range(&j, 0, tasks, 0);
  for (int64_t k = 0; k < n_s; k++) best[4 * k] = -INFINITY;
  for (i = 0; i < tasks; i++) { /* in task order: the first of equal values */
    double *b = best + 4 * task[i].k;
    if (part[4 * i] > b[0]) memcpy(b, part + 4 * i, 4 * sizeof *b);
  }
  free(task);
  free(part);
  return true;
}

static bool host_value(void *ctx, const fit_set *fs, const double m[4], double *v) {
  *v = pair_power(((host_steps *)ctx)->p, fs, m);
  return true;
}

static bool host_pattern(void *ctx, const fit_set *fs, double half, double *best_s, double *best_p, int best_t,
                         double *best_v) {
  const sl_dpc_parallax *p = ((host_steps *)ctx)->p;
  double m[4];
  double ds = half / 2, dp = half / 2 / *best_s;
  for (int it = 0; it < 400 && ds > 1e-4 * half; it++) {
    const double cand[4][2] = {{ds, 0}, {-ds, 0}, {0, dp}, {0, -dp}};
    bool better = false;
    for (int c = 0; c < 4; c++) {
      double s = *best_s + cand[c][0], ang = *best_p + cand[c][1];
      if (s <= 0) continue;
      parallax_matrix(s, ang, best_t, m);
      double v = pair_power(p, fs, m);
      if (v > *best_v) *best_v = v, *best_s = s, *best_p = ang, better = true;
    }
    if (!better) ds /= 2, dp /= 2;
  }
  return true;
}

/* The tcBF, each frequency's sign turned by sign(sin(chi)) (chi = pi lambda
 * |df| |k|^2), into p->acc (real part). */
static double sinc(double x) { return fabs(x) < 1e-12 ? 1 : sin(M_PI * x) / (M_PI * x); }

/* The shifted spectra of segments [begin, end) of a group: its transform
 * buffer and partial sum in p->gbuf, its ramps in p->ramp. */
typedef struct tcbf_job {
  sl_dpc_parallax *p;
  const fit_set *fs;
  const uint64_t *segments;
  const double *offsets;
  const double *m;
} tcbf_job;

static void tcbf_groups(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const tcbf_job *j = ctx;
  sl_dpc_parallax *p = j->p;
  const int64_t rows = p->tr, cols = p->tc, np = rows * cols; /* the central window */
  const int64_t r0 = (p->rows - rows) / 2 - p->seg_row0, c0 = (p->cols - cols) / 2; /* in the buffers */
  const int64_t ge = group_elems(np);
  for (int64_t grp = begin; grp < end; grp++) {
    fftw_complex *work = p->gbuf + (size_t)(grp * 2 * ge), *part = work + ge;
    double *er = p->ramp + grp * 2 * (rows + cols), *ec = er + 2 * rows;
    memset(part, 0, (size_t)np * sizeof(fftw_complex));
    const int u0 = (int)(j->fs->used * grp / TCBF_GROUPS), u1 = (int)(j->fs->used * (grp + 1) / TCBF_GROUPS);
    for (int u = u0; u < u1; u++) {
      const int g = j->fs->index[u];
      const uint64_t *s = j->segments + (size_t)g * (size_t)(p->seg_rows * p->cols) + r0 * p->cols + c0;
      double mean = 0;
      for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) mean += (double)s[i * p->cols + c];
      mean /= (double)np;
      for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++)
          work[i * cols + c][0] = (double)s[i * p->cols + c] - mean, work[i * cols + c][1] = 0;
      fftw_execute_dft(p->fwd, work, work);
      /* S_i(r + sh): the spectrum times exp(2 pi i f . sh), sh = M o_i,
       * a row factor times a column factor. */
      const double *m = j->m, o0 = j->offsets[3 * g], o1 = j->offsets[3 * g + 1];
      const double sh0 = m[0] * o0 + m[1] * o1, sh1 = m[2] * o0 + m[3] * o1;
      for (int64_t i = 0; i < rows; i++) {
        double ph = 2 * M_PI * sl_fft_freq(i, rows) * sh0;
        er[2 * i] = cos(ph), er[2 * i + 1] = sin(ph);
      }
      for (int64_t c = 0; c < cols; c++) {
        double ph = 2 * M_PI * sl_fft_freq(c, cols) * sh1;
        ec[2 * c] = cos(ph), ec[2 * c + 1] = sin(ph);
      }
      for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
          const double cs = er[2 * i] * ec[2 * c] - er[2 * i + 1] * ec[2 * c + 1];
          const double sn = er[2 * i] * ec[2 * c + 1] + er[2 * i + 1] * ec[2 * c];
          const double *x = work[i * cols + c];
          part[i * cols + c][0] += x[0] * cs - x[1] * sn;
          part[i * cols + c][1] += x[0] * sn + x[1] * cs;
        }
    }
  }
}

static void corrected_tcbf(sl_dpc_parallax *p, const fit_set *fs, const uint64_t *segments, const double *offsets,
                           const double m[4], double chi_per_f2, struct sl_backend *b) {
  const int64_t rows = p->tr, cols = p->tc, ge = group_elems(rows * cols); /* the central window */
  tcbf_job j = {p, fs, segments, offsets, m};
  if (b) b->ops->parallel_for(b, TCBF_GROUPS, 1, tcbf_groups, &j);
  else tcbf_groups(&j, 0, TCBF_GROUPS, 0);
  for (int64_t i = 0; i < rows; i++) {
    const double fi = sl_fft_freq(i, rows);
    for (int64_t c = 0; c < cols; c++) {
      const int64_t q = i * cols + c;
      double re = 0, im = 0;
      for (int grp = 0; grp < TCBF_GROUPS; grp++) /* in order: the same bits on any workers */
        re += p->gbuf[(grp * 2 + 1) * ge + q][0], im += p->gbuf[(grp * 2 + 1) * ge + q][1];
      const double fj = sl_fft_freq(c, cols);
      /* The segment's own blur: its pixels' shifts spread over M times the
       * cell, a box whose transfer is a product of sincs along M's images
       * of the detector axes (M^T f); where it is negative the segment
       * images' contrast is inverted too. */
      const double g0 = m[0] * fi + m[2] * fj, g1 = m[1] * fi + m[3] * fj;
      double sg = sin(chi_per_f2 * (fi * fi + fj * fj)) * sinc(fs->cell * g0) * sinc(fs->cell * g1);
      double f = sg > 0 ? 1 : sg < 0 ? -1 : 0;
      p->acc[q][0] = re * f, p->acc[q][1] = im * f;
    }
  }
  fftw_execute_dft(p->inv, p->acc, p->acc);
}

/* The skewness of the real part of p->acc over the interior `margin` away
 * from the edges (the shifts wrap around there); the whole scan when that
 * leaves fewer than 9 positions. */
static double interior_skewness(const sl_dpc_parallax *p, int64_t margin) {
  const int64_t rows = p->tr, cols = p->tc;
  if (rows - 2 * margin < 3 || cols - 2 * margin < 3) margin = 0;
  double s1 = 0, s2 = 0, s3 = 0, n = 0;
  for (int64_t i = margin; i < rows - margin; i++)
    for (int64_t j = margin; j < cols - margin; j++) s1 += p->acc[i * cols + j][0], n++;
  const double mean = s1 / n;
  for (int64_t i = margin; i < rows - margin; i++)
    for (int64_t j = margin; j < cols - margin; j++) {
      double d = p->acc[i * cols + j][0] - mean;
      s2 += d * d, s3 += d * d * d;
    }
  s2 /= n, s3 /= n;
  return s2 > 0 ? s3 / (s2 * sqrt(s2)) : 0;
}

static bool host_tcbf(void *ctx, const fit_set *fs, const double *offsets, const double m[4], double chi_per_f2,
                      int64_t margin, double *skewness) {
  host_steps *h = ctx;
  corrected_tcbf(h->p, fs, h->segments, offsets, m, chi_per_f2, h->b);
  *skewness = interior_skewness(h->p, margin);
  return true;
}

/* f_max's matched sums (dpc_parallax.h, item 3), on the padded window
 * spectra S_o in p->wspec. A segment's transfer under a candidate
 * (f_max, M scaled by k) is
 *   T_o(f) = e^{-i 2 pi (k M o).f} [in1 e^{+i chi} - in2 e^{-i chi}],
 * in1 where the disk shifted by g = M^T f / (s f_max) covers o, in2 where
 * the one shifted by -g does, chi = pi k s |f|^2 / f_max. This pairing of
 * chi's sign with the shifts' is the physical one whichever of (A, df) and
 * (-A, -df) made M (the other pairing, chi's sign flipped, is no scan's:
 * on issue 11's grid its sums peaked at wrong f_max, 0.72 for 0.51 at 25
 * mrad, and as high as the right pairing's). With each segment shifted
 * back and weighted by the inverse of its Poisson variance (its window
 * mean count), Q_o = w_o e^{+i 2 pi (k M o).f} S_o (the phase a row factor
 * times a column factor), and A1, A2 the sums of Q_o over the segments
 * in1 and in2:
 *   |sum_o w_o T_o^* S_o|^2 = |A1|^2 + |A2|^2 - 2 Re(e^{-2 i chi} A1 A2^*),
 *   sum_o w_o |T_o|^2 = sum_{o in 1} w_o + sum_{o in 2} w_o - 2 cos(2 chi) sum_{o in both} w_o,
 * and the excess of their ratio over its noise expectation (the padded
 * transform of N positions: N per frequency) is summed. The segment's own
 * blur (dpc's tcBF) is the same factor on both, so it cancels. */
/* The frequencies the matched sums are taken over: those where the
 * segments' mean power is at least this many times their Poisson noise.
 * A frequency of noise alone adds 0 to every candidate's sum on average
 * but its spread to each; at 1e3 e/frame most are. Over issue 11's 64 x
 * 64 grid without the probe's params (docs/nodes/dpc.md), branch right:
 * every frequency 95.2%, above 1x the noise 96.2%, 2x 96.5%, 4x 95.6%, 8x
 * 94.8%. */
#define FMAX_POWER_OVER_NOISE 2.0

typedef struct fmax_job {
  const sl_dpc_parallax *p;
  const fit_set *fs;
  const double *offsets, *m, *cand, *scale, *w;
  double s;
  double *energy;
  double *ramps; /* per worker: [used][2 (pr + pc)] */
  int64_t ramp_stride;
  const int32_t *freqs; /* the frequencies summed (row * pc + col) */
  int64_t n_freqs;
} fmax_job;

static void fmax_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const fmax_job *j = ctx;
  const sl_dpc_parallax *p = j->p;
  const int64_t pr = p->pr, pc = p->pc, pw = pr * pc;
  const double n_pos = (double)(p->wr * p->wc), *m = j->m;
  const int used = j->fs->used;
  double *ramps = j->ramps + (int64_t)worker * j->ramp_stride;
  for (int64_t k = begin; k < end; k++) {
    const double sk = j->s * j->scale[k];
    const double gs = 1.0 / (j->s * j->cand[k]), chi_per_f2 = M_PI * sk / j->cand[k];
    for (int u = 0; u < used; u++) { /* the shift back by k M o: a row and a column factor */
      const double o0 = j->offsets[3 * j->fs->index[u]], o1 = j->offsets[3 * j->fs->index[u] + 1];
      const double sh0 = j->scale[k] * (m[0] * o0 + m[1] * o1), sh1 = j->scale[k] * (m[2] * o0 + m[3] * o1);
      double *er = ramps + (int64_t)u * 2 * (pr + pc), *ec = er + 2 * pr;
      for (int64_t i = 0; i < pr; i++) {
        const double ph = 2 * M_PI * sl_fft_freq(i, pr) * sh0;
        er[2 * i] = cos(ph), er[2 * i + 1] = sin(ph);
      }
      for (int64_t c = 0; c < pc; c++) {
        const double ph = 2 * M_PI * sl_fft_freq(c, pc) * sh1;
        ec[2 * c] = j->w[u] * cos(ph), ec[2 * c + 1] = j->w[u] * sin(ph);
      }
    }
    double e = 0;
    for (int64_t fq = 0; fq < j->n_freqs; fq++) {
      const int64_t i = j->freqs[fq] / pc, c = j->freqs[fq] % pc;
      const double fi = sl_fft_freq(i, pr), fj = sl_fft_freq(c, pc);
      const double g0 = (m[0] * fi + m[2] * fj) * gs, g1 = (m[1] * fi + m[3] * fj) * gs;
      if (g0 * g0 + g1 * g1 > 4.0) continue; /* no segment (|o| <= 1) is covered */
      double a1r = 0, a1i = 0, a2r = 0, a2i = 0, w1 = 0, w2 = 0, w12 = 0;
      for (int u = 0; u < used; u++) {
        const double o0 = j->offsets[3 * j->fs->index[u]], o1 = j->offsets[3 * j->fs->index[u] + 1];
        const bool in1 = (o0 - g0) * (o0 - g0) + (o1 - g1) * (o1 - g1) <= 1.0;
        const bool in2 = (o0 + g0) * (o0 + g0) + (o1 + g1) * (o1 + g1) <= 1.0;
        if (!in1 && !in2) continue;
        const double *er = ramps + (int64_t)u * 2 * (pr + pc) + 2 * i, *ec = er - 2 * i + 2 * pr + 2 * c;
        const double ph_r = er[0] * ec[0] - er[1] * ec[1], ph_i = er[0] * ec[1] + er[1] * ec[0];
        const fftw_complex *x = p->wspec + (size_t)u * (size_t)pw + c * pr + i; /* transposed */
        const double qr = (*x)[0] * ph_r - (*x)[1] * ph_i, qi = (*x)[0] * ph_i + (*x)[1] * ph_r;
        if (in1) a1r += qr, a1i += qi, w1 += j->w[u];
        if (in2) a2r += qr, a2i += qi, w2 += j->w[u];
        if (in1 && in2) w12 += j->w[u];
      }
      const double chi2 = 2 * chi_per_f2 * (fi * fi + fj * fj), cs = cos(chi2), sn = sin(chi2);
      const double den = w1 + w2 - 2 * cs * w12;
      if (!(den > 1e-12 * (w1 + w2))) continue;
      const double xr = a1r * a2r + a1i * a2i, xi = a1i * a2r - a1r * a2i; /* A1 A2^* */
      const double num = a1r * a1r + a1i * a1i + a2r * a2r + a2i * a2i - 2 * (cs * xr + sn * xi);
      e += num / (n_pos * den) - 1;
    }
    j->energy[k] = e;
  }
}

static bool host_fmax(void *ctx, const fit_set *fs, const double *offsets, const double m[4], double s,
                      const double *cand, const double *scale, int n, double *energy) {
  host_steps *h = ctx;
  sl_dpc_parallax *p = h->p;
  const int workers = h->b && h->scratch ? h->b->ops->workers(h->b) : 1;
  const int64_t stride = (int64_t)(fs->used ? fs->used : 1) * 2 * (p->pr + p->pc);
  const int64_t pw = p->pr * p->pc;
  double *w = malloc((size_t)(fs->used ? fs->used : 1) * sizeof *w);
  double *ramps = malloc((size_t)(workers * stride) * sizeof *ramps);
  double *power = malloc((size_t)pw * sizeof *power);
  int32_t *freqs = malloc((size_t)pw * sizeof *freqs);
  if (!w || !ramps || !power || !freqs || !host_power(ctx, fs, power)) {
    free(w), free(ramps), free(power), free(freqs);
    return false;
  }
  for (int u = 0; u < fs->used; u++) { /* sum: the window's counts; a mean count per position */
    const double mean = fs->sum[u] / (double)(p->wr * p->wc);
    w[u] = mean > 0 ? 1 / mean : 0;
  }
  const double noise = poisson_noise(fs);
  int64_t nf = 0;
  for (int64_t q = 1; q < pw; q++) /* 0: the means, removed; in row-major order (the powers are transposed) */
    if (power[(q % p->pc) * p->pr + q / p->pc] > FMAX_POWER_OVER_NOISE * noise) freqs[nf++] = (int32_t)q;
  free(power);
  fmax_job j = {p, fs, offsets, m, cand, scale, w, s, energy, ramps, stride, freqs, nf};
  if (workers > 1) h->b->ops->parallel_for(h->b, n, 1, fmax_range, &j);
  else fmax_range(&j, 0, n, 0);
  free(w);
  free(ramps);
  free(freqs);
  return true;
}

/* Above the true cut-off the matched sum can stay nearly flat: a larger
 * cut-off's supports take in the segments' power beyond the linear model's
 * at no charge. On issue 11's 128 x 128 grid at 25 mrad, +-200 A and 1e4 -
 * 1e5 e/frame it stayed within 1-3% of its largest from f_max 0.8 to 2,
 * and where that plateau outweighed the true 0.51's peak (estimates of
 * 0.74-0.99) the sign correction was wrong. So the coarse grid's answer is
 * the smallest f_max at a local peak (each f_max at its best scale, no
 * lower than its neighbours') whose sum is within this share of the
 * largest: the smallest cut-off that explains the segments as well as
 * any. Branch right without the probe's params (docs/nodes/dpc.md): 128 x
 * 128 grid 94.4% -> 97.9% at 0.03 (97.7% at 0.02 and 0.05), 64 x 64 96.5%
 * -> 97.3% (97.5% at 0.02, 96.9% at 0.01). */
#define FMAX_PEAK_SHARE 0.03

/* The index (into en, per scales for each f_max) of the smallest f_max's
 * local peak within FMAX_PEAK_SHARE of en[largest], the largest of en
 * (> 0): at worst `largest`, a peak within the share itself. */
static int fmax_smallest_peak(const double *en, int n, int per, int largest) {
  const int nf = n / per;
  for (int i = 0; i < nf; i++) {
    double here = -INFINITY, below = -INFINITY, above = -INFINITY;
    int at = i * per;
    for (int q = 0; q < per; q++) {
      if (en[i * per + q] > here) here = en[i * per + q], at = i * per + q;
      if (i > 0 && en[(i - 1) * per + q] > below) below = en[(i - 1) * per + q];
      if (i + 1 < nf && en[(i + 1) * per + q] > above) above = en[(i + 1) * per + q];
    }
    if (here >= below && here >= above && here >= (1 - FMAX_PEAK_SHARE) * en[largest]) return at;
  }
  return largest;
}

/* The best of n candidates (f_max[k], scale[k]): its index, *e its
 * excess. False when the step failed. With `per` (the coarse grid: `per`
 * scales for each f_max, in order), the smallest peak (fmax_smallest_peak)
 * instead of the largest sum. */
static bool fmax_best(const sl_dpc_parallax_steps *st, const fit_set *fs, const double *offsets,
                      const double m[4], double s, const double *cand, const double *scale, int n, int per,
                      int *best, double *e) {
  double *en = malloc((size_t)n * sizeof *en);
  if (!en || !st->fmax(st->ctx, fs, offsets, m, s, cand, scale, n, en)) {
    free(en);
    return false;
  }
  *best = 0, *e = -INFINITY;
  for (int k = 0; k < n; k++) /* the first of equal values */
    if (en[k] > *e) *e = en[k], *best = k;
  if (per > 0 && *e > 0) *best = fmax_smallest_peak(en, n, per, *best), *e = en[*best];
  free(en);
  return true;
}

/* f_max and M's scale by the matched sum: a grid of f_max over
 * [SL_DPC_FMAX_MIN, SL_DPC_FMAX_MAX] in ratios of 1.1 times the scale over
 * 0.9-1.1 in steps of 0.02 (its smallest peak near the largest sum,
 * FMAX_PEAK_SHARE), then both in turns in finer steps about it, each turn
 * to its largest sum. The scale is searched because the shifts' phases
 * must match to the highest frequencies: the pair correlations' fit was 5%
 * short at 25 mrad and -200 A on issue 11's grid, and with that 5% a wrong
 * f_max (0.95, true 0.51) had the largest sum; jointly, the true one does
 * (docs/nodes/dpc.md).
 * False when a step failed; *fmax 0 where no candidate stands above the
 * noise. */
static bool estimate_fmax(const sl_dpc_parallax_steps *st, const fit_set *fs, const double *offsets,
                          const double m[4], double s, double *fmax, double *scale_out, double *energy_out) {
  enum { MAX = 1024 };
  double *cand = malloc(2 * MAX * sizeof *cand), *scale = cand + MAX, f = 0, k = 1, e = -INFINITY;
  if (!cand) return false;
  int n = 0, best = 0;
  enum { SCALES = 11 }; /* 0.9-1.1 in steps of 0.02 */
  for (double c = SL_DPC_FMAX_MIN; c <= SL_DPC_FMAX_MAX * 1.0001 && n + SCALES <= MAX; c *= 1.1)
    for (int q = 0; q < SCALES; q++) cand[n] = c, scale[n++] = 1 + 0.02 * (q - SCALES / 2);
  bool ok = fmax_best(st, fs, offsets, m, s, cand, scale, n, SCALES, &best, &e);
  /* the turns about the best: f_max's steps, then the scale's */
  static const struct { bool fmax; double lo, hi, step; } turn[] = {
      {true, 0.9, 1.1, 1.01}, {false, 0.985, 1.015, 0.0025}, {true, 0.97, 1.03, 1.0025}};
  for (size_t t = 0; ok && t < sizeof turn / sizeof turn[0]; t++) {
    f = cand[best], k = scale[best], n = 0;
    if (turn[t].fmax)
      for (double c = f * turn[t].lo; c <= f * turn[t].hi * 1.0001 && n < MAX; c *= turn[t].step)
        cand[n] = c, scale[n++] = k;
    else
      for (double c = k * turn[t].lo; c <= k * turn[t].hi + 1e-9 && n < MAX; c += k * turn[t].step)
        cand[n] = f, scale[n++] = c;
    ok = fmax_best(st, fs, offsets, m, s, cand, scale, n, 0, &best, &e);
  }
  if (ok) f = cand[best], k = scale[best];
  free(cand);
  *fmax = e > 0 ? f : 0;
  *scale_out = k;
  *energy_out = e;
  return ok;
}

/* ---- the fit ------------------------------------------------------------------------ */

/* The segments' side in radii: the median distance from a segment to its
 * nearest neighbour (cells of one grid: interior neighbours are one side
 * apart). */
static double cell_side(const fit_set *fs, const double *offsets) {
  double *nn = malloc((size_t)fs->used * sizeof *nn);
  if (!nn) return 0;
  for (int i = 0; i < fs->used; i++) {
    nn[i] = INFINITY;
    for (int j = 0; j < fs->used; j++)
      if (j != i)
        nn[i] = fmin(nn[i], hypot(offsets[3 * fs->index[i]] - offsets[3 * fs->index[j]],
                                  offsets[3 * fs->index[i] + 1] - offsets[3 * fs->index[j] + 1]));
  }
  double c = sl_select_kth(nn, fs->used, fs->used / 2);
  free(nn);
  return isfinite(c) ? c : 0;
}

/* The largest objective over M = s R(p) T^t: the grid in steps of half a
 * scan step at the outermost segment, the first of equal values in the
 * order of s, then the pattern search. False when a step failed. */
static bool search(const sl_dpc_parallax_steps *st, const fit_set *fs, int64_t lr, int64_t lc, double *best_s,
                   double *best_p, int *best_t, double *best_v, double *s_max) {
  const double half = 0.5 / fs->omax; /* s step: half a scan step at the outermost segment */
  *s_max = (double)((lr < lc ? lr : lc) - 2) / fs->dmax; /* every pair's lag kept */
  const int64_t n_s = *s_max >= half ? (int64_t)floor(*s_max / half) : 0;
  *best_v = -INFINITY, *best_s = half, *best_p = 0, *best_t = 0;
  if (n_s > 0) {
    double *best = malloc((size_t)n_s * 4 * sizeof(double));
    if (!best) return false;
    bool ok = st->grid(st->ctx, fs, half, n_s, best);
    for (int64_t k = 0; ok && k < n_s; k++) /* in order of s: the first of equal values */
      if (best[4 * k] > *best_v)
        *best_v = best[4 * k], *best_s = best[4 * k + 1], *best_p = best[4 * k + 2], *best_t = (int)best[4 * k + 3];
    free(best);
    if (!ok) return false;
  }
  return st->pattern(st->ctx, fs, half, best_s, best_p, *best_t, best_v);
}

bool sl_dpc_parallax_fit(sl_dpc_parallax *p, const sl_dpc_parallax_steps *st, const double *offsets,
                         const sl_dpc_probe *probe, bool axis_only, sl_dpc_parallax_result *r) {
  memset(r, 0, sizeof *r);
  bool ok = false;
  fit_set fs = {0, NULL, NULL, 0, 0, 0, 0, NULL};
  fs.index = malloc((size_t)(p->n ? p->n : 1) * sizeof *fs.index);
  fs.sum = malloc((size_t)(p->n ? p->n : 1) * sizeof *fs.sum);
  fs.pair = malloc((size_t)(p->n * (p->n > 1 ? p->n - 1 : 1) / 2 + 1) * 2 * sizeof *fs.pair);
  if (!fs.index || !fs.pair || !fs.sum) goto done; /* not found: the caller keeps the CoM's branch */
  for (int g = 0; g < p->n; g++)
    if (offsets[3 * g + 2] > 0) {
      fs.index[fs.used++] = g;
      fs.omax = fmax(fs.omax, hypot(offsets[3 * g], offsets[3 * g + 1]));
    }
  if (fs.used < 3 || !(fs.omax > 0)) {
    ok = true;
    goto done;
  }
  for (int i = 0, k = 0; i < fs.used; i++)
    for (int j = i + 1; j < fs.used; j++, k++) {
      const double *oi = offsets + 3 * fs.index[i], *oj = offsets + 3 * fs.index[j];
      fs.pair[2 * k] = oi[0] - oj[0], fs.pair[2 * k + 1] = oi[1] - oj[1];
      fs.dmax = fmax(fs.dmax, hypot(fs.pair[2 * k], fs.pair[2 * k + 1]));
    }
  fs.pairs = fs.used * (fs.used - 1) / 2;
  fs.cell = cell_side(&fs, offsets);
  double diag = 0, s = 0, ang = 0, v = 0, v0 = 0, s_max = 0, m[4], zero[4] = {0, 0, 0, 0};
  int t = 0;
  double *secs = r->step_seconds, t0 = sl_now();
  if (!st->correlate(st->ctx, &fs, NULL, &diag) || !st->value(st->ctx, &fs, zero, &v0)) goto done;
  secs[SL_DPC_PARALLAX_STEP_CORRELATE] = sl_now() - t0, t0 = sl_now();
  if (!search(st, &fs, p->lr, p->lc, &s, &ang, &t, &v, &s_max))
    goto done; /* out of memory (or a device's error): not found */
  secs[SL_DPC_PARALLAX_STEP_SEARCH] = sl_now() - t0, t0 = sl_now();
  r->gain = diag + 2 * v0 > 0 ? (diag + 2 * v) / (diag + 2 * v0) : 0;
  r->found = r->gain > SL_DPC_PARALLAX_GAIN && s < s_max;
  /* Refined on the weighted correlations from the plain fit's optimum:
   * the plain ones find the basin (weighted towards the lattice's peaks
   * alone, a shift by a lattice vector fits as well), the weighted ones
   * place its bottom (at 1e3 e/frame on issue 11's grid: angles within 2
   * degrees 92.3% -> 95.0%; docs/nodes/dpc.md). The powers are reordered for
   * their median in p->work (free here). */
  if (r->found) {
    double *power = (double *)p->work, wv = 0;
    parallax_matrix(s, ang, t, m);
    if (!st->power(st->ctx, &fs, power)) goto refined_not;
    noise_weights(power, p->weight, p->pr * p->pc, &fs);
    if (!st->correlate(st->ctx, &fs, p->weight, NULL) || !st->value(st->ctx, &fs, m, &wv) ||
        !st->pattern(st->ctx, &fs, 0.5 / fs.omax, &s, &ang, t, &wv))
      goto refined_not;
    secs[SL_DPC_PARALLAX_STEP_REFINE] = sl_now() - t0;
  }
  r->scale = s, r->transpose = t;
  r->angle = fmod(ang * 180 / M_PI, 360.0);
  if (r->angle < 0) r->angle += 360;
  parallax_matrix(s, ang, t, m);
  if (axis_only) { /* M's rotation alone: no sign correction, theta on the df < 0 branch */
    r->axis_only = true;
    r->theta = sl_dpc_wrap_deg(t ? r->angle : -r->angle);
    goto done_ok;
  }
  if (probe) {
    r->defocus = s * probe->step / probe->semiangle;
    r->fmax = probe->semiangle * probe->step / probe->wavelength;
  } else { /* unknown: f_max from the segments' spectra, |defocus| unknown (0) */
    r->fmax_estimated = true;
    double k = 1;
    if (!r->found) goto done_ok; /* no parallax: nothing to correct (ok, not found) */
    t0 = sl_now();
    if (!st->fmax || !estimate_fmax(st, &fs, offsets, m, s, &r->fmax, &k, &r->fmax_energy)) goto refined_not;
    secs[SL_DPC_PARALLAX_STEP_FMAX] = sl_now() - t0;
    if (!(r->fmax > 0)) r->found = false; /* nothing above the noise: no sign correction to trust */
    s *= k, r->scale = s; /* the matched sums' scale */
    parallax_matrix(s, ang, t, m);
  }
  /* chi = pi lambda |df| |k|^2 = pi s |f|^2 / f_max (f in cycles per scan step) */
  const double chi_per_f2 = r->fmax > 0 ? M_PI * s / r->fmax : 0;
  /* the shifts wrap around at the window's edges: the skewness is taken
   * inside the largest */
  double shift_max = 0;
  for (int u = 0; u < fs.used; u++) {
    const double o0 = offsets[3 * fs.index[u]], o1 = offsets[3 * fs.index[u] + 1];
    shift_max = fmax(shift_max, fmax(fabs(m[0] * o0 + m[1] * o1), fabs(m[2] * o0 + m[3] * o1)));
  }
  t0 = sl_now();
  if (!st->tcbf(st->ctx, &fs, offsets, m, chi_per_f2, (int64_t)ceil(shift_max) + 1, &r->skewness)) goto refined_not;
  secs[SL_DPC_PARALLAX_STEP_TCBF] = sl_now() - t0;
  /* df < 0 (skewness < 0): theta = -p (t 0) or p (t 1); df > 0: plus 180. */
  double theta = t ? r->angle : -r->angle;
  r->theta = sl_dpc_wrap_deg(r->skewness >= 0 ? theta + 180 : theta);
done_ok:
  ok = true;
  goto done;
refined_not:
  r->found = false; /* out of memory (or a device's error): the caller keeps the CoM's branch */
done:
  free(fs.sum);
  free(fs.index);
  free(fs.pair);
  return ok;
}

void sl_dpc_parallax_run(sl_dpc_parallax *p, struct sl_backend *b, void *scratch, int64_t stride,
                         const uint64_t *segments, int64_t seg_row0, int64_t seg_rows, const double *offsets,
                         const sl_dpc_probe *probe, bool axis_only, sl_dpc_parallax_result *r) {
  if (!sl_dpc_parallax_has_host_steps(p)) { /* a driver's state only: nothing to run the steps with */
    memset(r, 0, sizeof *r);
    return;
  }
  p->seg_row0 = seg_row0, p->seg_rows = seg_rows;
  host_steps h = {p, b, scratch, stride, segments};
  const sl_dpc_parallax_steps st = {&h,        host_correlate, host_power, host_grid,
                                     host_value, host_pattern,   host_tcbf,  host_fmax};
  (void)sl_dpc_parallax_fit(p, &st, offsets, probe, axis_only, r);
}

/* The bound of sl_dpc_parallax_gain_bound. The shifted sum's power at M
 * is sum_o P_o (each segment's power over the window, means removed, per
 * position: measured) plus the pairs' cross terms, which hold signal
 * alone (noise is independent between segments): at most sqrt(p_o p_o')
 * each, and so in all at most (n - 1) sum_o p_o (Cauchy-Schwarz), p the
 * signal's powers. Their sum is estimated together (a segment's alone is
 * as noisy as its signal at low dose): sum_o (P_o - N_o), N_o the noise's.
 * Counts are Poisson, a position's variance its mean, so where the powers
 * together reach the means (within five of their sds: no object leaves
 * power and mean equal) the mean is the noise. Data whose powers stay
 * below their means are not plain counts (a model, scaled counts): their
 * noise is unknown and taken as 0, which can only raise the bound. */
double sl_dpc_parallax_gain_bound(int n, int64_t rows, int64_t cols, const uint64_t *segments, int64_t seg_row0,
                                  int64_t seg_rows, const double *offsets) {
  sl_dpc_parallax_geometry g;
  sl_dpc_parallax_geometry_of(rows, cols, &g);
  const int64_t r0 = (rows - g.wr) / 2 - seg_row0, c0 = (cols - g.wc) / 2;
  return sl_dpc_parallax_gain_bound_window(n, g.wr, g.wc, segments + r0 * cols + c0, cols, seg_rows * cols, offsets);
}

double sl_dpc_parallax_gain_bound_window(int n, int64_t wr, int64_t wc, const uint64_t *window, int64_t row_stride,
                                         int64_t segment_stride, const double *offsets) {
  uint64_t *seg = malloc((size_t)n * SL_DPC_GAIN_SEGMENT_SUMS * sizeof *seg);
  uint64_t *pos = malloc((size_t)(wr * wc) * sizeof *pos);
  double bound = INFINITY; /* out of memory: no bound (the fit decides, and fails as it does) */
  if (seg && pos) {
    sl_dpc_parallax_gain_sums(n, wr, wc, window, row_stride, segment_stride, offsets, seg, pos);
    bound = sl_dpc_parallax_gain_bound_of_sums(n, wr * wc, seg, pos, offsets);
  }
  free(pos);
  free(seg);
  return bound;
}

void sl_dpc_parallax_gain_sums(int n, int64_t wr, int64_t wc, const uint64_t *window, int64_t row_stride,
                               int64_t segment_stride, const double *offsets, uint64_t *segment_sums,
                               uint64_t *position_sums) {
  memset(position_sums, 0, (size_t)(wr * wc) * sizeof *position_sums);
  for (int u = 0; u < n; u++) {
    uint64_t *out = segment_sums + (size_t)u * SL_DPC_GAIN_SEGMENT_SUMS;
    unsigned __int128 sq = 0;
    uint64_t sum = 0;
    if (offsets[3 * u + 2] > 0) /* no pixels: not in the fit */
      for (int64_t i = 0; i < wr; i++) {
        const uint64_t *s = window + (size_t)u * (size_t)segment_stride + i * row_stride;
        for (int64_t c = 0; c < wc; c++)
          sum += s[c], sq += (unsigned __int128)s[c] * s[c], position_sums[i * wc + c] += s[c];
      }
    out[0] = sum, out[1] = (uint64_t)sq, out[2] = (uint64_t)(sq >> 64);
  }
}

double sl_dpc_parallax_gain_bound_of_sums(int n, int64_t npos, const uint64_t *segment_sums,
                                          const uint64_t *position_sums, const double *offsets) {
  double means = 0, means2 = 0, powers = 0;
  int used = 0;
  for (int u = 0; u < n; u++) {
    if (!(offsets[3 * u + 2] > 0)) continue;
    const uint64_t *g = segment_sums + (size_t)u * SL_DPC_GAIN_SEGMENT_SUMS;
    const double mean = (double)g[0] / (double)npos;
    const double sq = (double)((unsigned __int128)g[2] << 64 | g[1]);
    powers += fmax(0, sq / (double)npos - mean * mean), means += mean, means2 += mean * mean, used++;
  }
  double m = 0, sq = 0;
  for (int64_t q = 0; q < npos; q++) {
    const double v = (double)position_sums[q];
    m += v, sq += v * v;
  }
  m /= (double)npos;
  const double plain = sq / (double)npos - m * m;
  const bool counts = powers >= (1 - 5 * sqrt(2.0 / (double)npos)) * means;
  const double noise = counts ? means : 0, noise2 = counts ? means2 : 0;
  /* The signal's powers, high by two sds of the noise's (a power's
   * estimate over npos positions has an sd of N sqrt(2 / npos)). */
  const double signal = fmax(0, powers - noise) + 2 * sqrt(2 * noise2 / (double)npos);
  /* The fit's correlations are means over the overlap of the two shifted
   * windows, whose power can be a little above the whole window's (5% on
   * the noiseless model of test_gain_bound): allowed for at 25%. Its
   * largest objective also holds the noise of the pairs' correlations at
   * its M, picked as the largest of many: each pair's has an sd of
   * sqrt(N_o N_o' / overlap), the overlap at least a quarter of the window
   * at the kept lags; allowed for at three sds of their sum. */
  const double pairs_noise = 2 * sqrt(4 * (noise * noise - noise2) / 2 / (double)npos);
  const double best = powers + 1.25 * (used - 1) * signal + 3 * pairs_noise;
  return plain > 0 ? best / plain : INFINITY;
}
