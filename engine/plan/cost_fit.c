/* Fitting a node type's rate to calibrate's samples (cost_fit.h). */
#include "engine/plan/cost_fit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/alloc.h"

/* Weighted least squares of seconds over the terms in `use` (bit 0: once per
 * run, bit 1: per call, bit 2: per unit of work), weights 1 / max(seconds,
 * 1 ms)^2: relative error where a node takes a millisecond or more (where the
 * estimate must hold), absolute below (many sub-millisecond samples of a
 * type's tiny runs otherwise outweighed its few large ones, and fitted
 * write_png's rate at half of what the products' PNGs take); false when the
 * terms cannot be told apart (singular) or a coefficient comes out
 * negative. *resid: the weighted squared residual. */
static double fit_scale(double seconds) { return seconds > 1e-3 ? seconds : 1e-3; }

static bool fit_terms(const sl_cost_sample *s, int n, bool per_op, unsigned use, double coef[3], double *resid) {
  double A[3][3] = {{0}}, y[3] = {0};
  int idx[3], m = 0;
  for (int t = 0; t < 3; t++)
    if (use >> t & 1u) idx[m++] = t;
  for (int k = 0; k < n; k++) {
    double t = fit_scale(s[k].seconds), wgt = 1.0 / (t * t);
    double x[3] = {s[k].calls > 0 ? 1.0 : 0.0, (double)s[k].calls, sl_cost_work(&s[k].cost, per_op)};
    for (int r = 0; r < m; r++) {
      y[r] += wgt * x[idx[r]] * s[k].seconds;
      for (int c = 0; c < m; c++) A[r][c] += wgt * x[idx[r]] * x[idx[c]];
    }
  }
  /* Gauss-Jordan on the m x m normal equations */
  double sol[3] = {0};
  for (int c = 0; c < m; c++) {
    int piv = c;
    for (int r = c + 1; r < m; r++)
      if (fabs(A[r][c]) > fabs(A[piv][c])) piv = r;
    if (!(fabs(A[piv][c]) > 1e-9 * (fabs(A[c][c]) + 1e-300))) return false;
    for (int q = 0; q < m; q++) {
      double tmp = A[c][q];
      A[c][q] = A[piv][q], A[piv][q] = tmp;
    }
    double tmp = y[c];
    y[c] = y[piv], y[piv] = tmp;
    for (int r = 0; r < m; r++) {
      if (r == c) continue;
      double f = A[r][c] / A[c][c];
      for (int q = 0; q < m; q++) A[r][q] -= f * A[c][q];
      y[r] -= f * y[c];
    }
  }
  for (int r = 0; r < m; r++) {
    sol[r] = y[r] / A[r][r];
    if (!(sol[r] >= 0) || !isfinite(sol[r])) return false;
  }
  coef[0] = coef[1] = coef[2] = 0;
  for (int r = 0; r < m; r++) coef[idx[r]] = sol[r];
  *resid = 0;
  for (int k = 0; k < n; k++) {
    double t = fit_scale(s[k].seconds);
    double e = coef[0] * (s[k].calls > 0) + coef[1] * (double)s[k].calls +
               coef[2] * sl_cost_work(&s[k].cost, per_op) - s[k].seconds;
    *resid += e * e / (t * t);
  }
  return true;
}

/* The best fit so far: its coefficients, weighted residual and terms. */
typedef struct fit_best {
  double coef[3];
  double resid;
  int terms;
} fit_best;

/* One combination of terms (fit_terms' `use`) against the best so far; it
 * wins with a residual 1% smaller, or within 1% with fewer terms. With
 * `bandwidth` the work's rate is the copy's (its samples' seconds are what
 * is left after the copy); with `need_work` a fit whose rate is not positive
 * does not compete. False when the terms did not fit at all. */
static bool try_terms(const sl_cost_sample *s, int n, bool per_op, unsigned use, double bandwidth, bool need_work,
                      fit_best *b) {
  int terms = __builtin_popcount(use);
  double coef[3], resid;
  if (terms > n) return false;
  /* As many terms as samples pass through every sample whatever their
   * noise (a residual of 0 says nothing), so their noise goes into the
   * terms. Into a setup it costs once a run; into a cost per call it is
   * multiplied by the calls: two samples of affine/f64 (1 call of 32768
   * ops in 12-15 us, 4 calls of 2 M ops) gave it 10.8 us a call, and
   * iterate_until's 31 tiny calls of it (about 1 us each) an estimate 11
   * times their time. Such a fit with a cost per call does not compete. */
  if (terms > 1 && terms >= n && (use & 2u)) return true;
  if (!fit_terms(s, n, per_op, use, coef, &resid)) return false;
  if (need_work && !(coef[2] > 0)) return true;
  /* Nothing costs anything: samples of 0 s (a loop's time all in its
   * body's estimates); the generic call cost stands (the caller's
   * fallback). */
  if (!(coef[0] > 0 || coef[1] > 0 || coef[2] > 0)) return true;
  if (bandwidth > 0) coef[2] = 1.0 / bandwidth;
  if (resid < b->resid * 0.99 || (resid <= b->resid * 1.01 && terms < b->terms))
    memcpy(b->coef, coef, sizeof coef), b->resid = resid, b->terms = terms;
  return true;
}

/* A node type's rate: of every combination of a cost once per run (setup:
 * pinned windows, FFT plans) and per call with the cost per unit of work,
 * the non-negative fit with the least relative error; fewer terms win a tie
 * within 1%. The work term is in unless the times do not grow with the
 * work (a setup with a rate did not fit): otherwise a fit without it would
 * predict the same time for any size (the calibration's sizes are small).
 * With nothing that fits, the generic call cost and the rate through it. */
bool sl_cost_fit_rate(const sl_cost_sample *s, int n, bool per_op, double call_default, double bytes_per_second,
                      sl_cost_rate *r) {
  /* Bytes that move in under a millisecond at copy bandwidth in every
   * sample (gather of a scan image): their times are overheads, not a
   * throughput. The work then costs the copy's rate, and setup and per
   * call are fitted to what is left. */
  double most = 0;
  for (int k = 0; k < n; k++) most = fmax(most, sl_cost_work(&s[k].cost, per_op));
  bool tiny = !per_op && bytes_per_second > 0 && most / bytes_per_second < 1e-3;
  sl_cost_sample *rest = tiny ? sl_calloc((size_t)n, sizeof *rest) : NULL;
  if (tiny && !rest) return false;
  for (int k = 0; tiny && k < n; k++) {
    rest[k] = s[k];
    rest[k].seconds = fmax(s[k].seconds - sl_cost_work(&s[k].cost, per_op) / bytes_per_second, 1e-7);
  }
  /* A setup and a rate that did not fit (the rate came out negative, or
   * the samples' work did not differ): the times do not grow with the work,
   * so a setup alone (and a setup with a cost per call) competes too.
   * Through the origin instead, a preview of 32 and of 256 frames that both
   * took 2.3-3.4 ms on the H200 was priced at 0.28 ns an op, and a small
   * run's preview at a tenth of its time. */
  fit_best b = {.resid = INFINITY, .terms = 4};
  bool flat = false;
  for (unsigned use = tiny ? 1 : 4; use < (tiny ? 4u : 8u); use++)
    if (!try_terms(tiny ? rest : s, n, per_op, use, tiny ? bytes_per_second : 0, !tiny, &b))
      flat |= !tiny && use == 5u && n >= 2;
  for (unsigned use = 1; flat && use < 4; use += 2) try_terms(s, n, per_op, use, 0, false, &b);
  free(rest);
  double *best = b.coef;
  if (!isfinite(b.resid)) {
    double sw = 0, swt = 0;
    for (int k = 0; k < n; k++) {
      double w = sl_cost_work(&s[k].cost, per_op), t = s[k].seconds - call_default * (double)s[k].calls;
      sw += w * w, swt += w * (t > 0 ? t : 0);
    }
    best[0] = 0, best[1] = call_default, best[2] = sw > 0 ? swt / sw : 0;
  }
  r->run_seconds = best[0];
  r->call_seconds = best[1];
  r->seconds_per_unit = best[2];
  /* The setup was seen on runs of this much work at least: below it the
   * estimate scales it down (sl_cost_rate.run_work_least). */
  r->run_work_least = 0;
  for (int k = 0; best[0] > 0 && k < n; k++) {
    const double w = sl_cost_work(&s[k].cost, per_op);
    if (s[k].calls > 0 && w > 0 && (r->run_work_least == 0 || w < r->run_work_least)) r->run_work_least = w;
  }
  return true;
}

