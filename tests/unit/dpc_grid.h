/* The grid of issue 11: dpc's rotation fit and 180-degree branch on
 * synthetic_4dstem acquisitions of atomic-column objects, over scan
 * rotations, defoci, probe semi-angles and doses. Each case is made in
 * physical units (Gaussian columns 0.35 A FWHM, 2.5 A apart, jittered by up
 * to 0.1 A, on a weak amorphous background; 300 kV; 0.4 A scan steps),
 * converted to the generator's pixels: with H detector pixels and an
 * aperture of R pixels, an object pixel is dx = R lambda / (alpha H) and the
 * window H dx = R lambda / alpha; the aperture-edge defocus phase is
 * chi = pi df alpha^2 / lambda. The window is made wide enough for the
 * defocused probe (geometric diameter 2 |df| alpha, plus 6 A for its
 * fringes and the focused tails) so that the probe does not wrap around it.
 * The CoM and the ADF image are computed plainly from the Poisson frames
 * (independent of the com and virtual_detectors nodes). SLUICE_DPC_GRID_STEP
 * sets another scan step (A; 0.2 samples the CoM of a 20 mrad probe above
 * its band, docs/nodes/dpc.md). Used by test_dpc.c; the caller supplies
 * run_dpc_case(). */
#ifndef SL_DPC_GRID_H
#define SL_DPC_GRID_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodes/common/disk_geometry.h"
#include "nodes/stem/bf_segments_layout.h"
#include "tests/unit/stem_test_data.h"

#define DPC_GRID_LAMBDA 0.019687 /* A, 300 kV */

typedef struct dpc_grid {
  const double *alphas; /* rad */
  int n_alphas;
  const double *defoci; /* A */
  int n_defoci;
  const char *const *doses;
  int n_doses;
  const int *rotations; /* degrees */
  int n_rotations;
  int scan;          /* positions per side */
  const char *cache; /* a directory for each case's fields (NULL: none), see dpc_grid_case */
} dpc_grid;

/* What dpc returned for one case, and the case's Cramer-Rao bound. */
typedef struct dpc_grid_answer {
  double angle;
  int transpose;
  double bound;      /* degrees: the least rms angle error any fit can have (see dpc_grid_bound) */
  double confidence; /* the branch rule's |score| (0 when the runner does not say) */
  bool warned;       /* the node warned that the branch is a guess (true when the runner does not say) */
} dpc_grid_answer;

/* The BF disk's segments of the grid's products (bf_segments' default
 * layout: grid 5, extent 0.9 radii, 21 segments). */
#define DPC_GRID_SEGMENT_GRID 5
#define DPC_GRID_SEGMENT_EXTENT 0.9
#define DPC_GRID_SEGMENTS_MAX 64

/* A case's products: the CoM (cr, cc), the ADF image, the segments
 * [n_seg][rows * cols] with their offsets [n_seg][3] (disk radii, pixel
 * count), and the probe (semi-angle, rad; scan step, A). */
typedef struct dpc_grid_fields {
  double *cr, *cc, *adf;
  uint64_t *seg;
  double offsets[3 * DPC_GRID_SEGMENTS_MAX];
  int n_seg;
  double alpha, step;
} dpc_grid_fields;

/* Runs dpc on a case's products [rows, cols]. */
typedef dpc_grid_answer (*dpc_grid_runner)(const dpc_grid_fields *f, int rows, int cols);

/* Counts over the cases, and over the determinable ones: those whose
 * Cramer-Rao bound is at most DPC_GRID_DETERMINABLE degrees, so that an
 * efficient fit lands within 2 degrees (2.9 bounds) in 99.6% of them, one
 * that is not quite efficient still in 95%. */
#define DPC_GRID_DETERMINABLE 0.7

/* Where the data hold the 180-degree branch: a Cramer-Rao bound of at most
 * this many degrees (an efficient fit is then 90 degrees off in none of a
 * million cases; the node's rule was right in all 243 such cases of the
 * 64x64 grid of docs/nodes/dpc.md). */
#define DPC_GRID_BRANCH_HELD 5.0

typedef struct dpc_grid_counts {
  int cases, right, within1, within2, within5, transpose_right;
} dpc_grid_counts;

/* The cases of one (dose, defocus) of the grid, over semi-angles and
 * rotations: counts, and each case's angle error (mod 180) and bound for
 * the medians. */
typedef struct dpc_grid_cell {
  dpc_grid_counts c;
  double *err180, *bound;
} dpc_grid_cell;

typedef struct dpc_grid_stats {
  dpc_grid_counts all, det;
  dpc_grid_counts held; /* bound <= DPC_GRID_BRANCH_HELD */
  dpc_grid_counts sure; /* no branch warning: the branch must be right there */
  double worst_det; /* degrees, mod 180, over the determinable cases */
} dpc_grid_stats;

static inline void dpc_grid_count(dpc_grid_counts *c, double err, double err180, int t_right) {
  c->cases++;
  c->right += err < 90;
  c->transpose_right += t_right;
  c->within1 += err180 < 1, c->within2 += err180 < 2, c->within5 += err180 < 5;
}

static inline void dpc_grid_print(const char *what, const dpc_grid_counts *c) {
  if (!c->cases) return;
  fprintf(stderr,
          "  %s: %d cases; branch right %d (%.1f%%); transpose right %d; angle error (mod 180) "
          "< 1 deg %d, < 2 deg %d (%.1f%%), < 5 deg %d\n",
          what, c->cases, c->right, 100.0 * c->right / c->cases, c->transpose_right, c->within1,
          c->within2, 100.0 * c->within2 / c->cases, c->within5);
}

static inline int dpc_grid_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[n] (sorts v). */
static inline double dpc_grid_median(double *v, int n) {
  if (n == 0) return NAN;
  qsort(v, (size_t)n, sizeof *v, dpc_grid_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The table per dose and defocus (markdown): branch right, angle within 2
 * degrees (mod 180), median angle error (mod 180), median bound. */
static inline void dpc_grid_table(const dpc_grid *g, dpc_grid_cell *cells) {
  fprintf(stderr, "| scan | dose | defocus A | cases | branch right %% | within 2 deg %% | "
                  "transpose right %% | median error deg | median bound deg |\n"
                  "|---|---|---|---|---|---|---|---|---|\n");
  for (int ido = 0; ido < g->n_doses; ido++)
    for (int id = 0; id < g->n_defoci; id++) {
      dpc_grid_cell *c = &cells[ido * g->n_defoci + id];
      if (!c->c.cases) continue;
      fprintf(stderr, "| %dx%d | %s | %+.0f | %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n", g->scan,
              g->scan, g->doses[ido], g->defoci[id], c->c.cases, 100.0 * c->c.right / c->c.cases,
              100.0 * c->c.within2 / c->c.cases, 100.0 * c->c.transpose_right / c->c.cases,
              dpc_grid_median(c->err180, c->c.cases), dpc_grid_median(c->bound, c->c.cases));
    }
}

static inline double dpc_grid_diff(double a, double b) {
  double d = fmod(a - b, 360.0);
  if (d > 180) d -= 360;
  if (d < -180) d += 360;
  return fabs(d);
}

/* The segments of u32 frames by a plain loop over each segment's pixels
 * (disk at the detector centre, bf_segments' default layout), and their
 * offsets; returns the segment count. */
static inline int dpc_grid_segments(const synth_data *d, double radius, uint64_t *seg, double *offsets) {
  sl_bf_segment_layout l;
  sl_bf_segment_layout_init(&l, DPC_GRID_SEGMENT_GRID, DPC_GRID_SEGMENT_EXTENT);
  int64_t h = d->h, w = d->w, hw = h * w;
  double yc = (double)(h - 1) / 2, xc = (double)(w - 1) / 2;
  int *of = malloc((size_t)hw * sizeof *of);
  memset(offsets, 0, (size_t)l.count * 3 * sizeof *offsets);
  for (int64_t q = 0; q < hw; q++) {
    int64_t r = q / w, c = q % w;
    of[q] = sl_bf_segment_of(&l, sl_disk_d2(r, c, yc, xc), (double)r - yc, (double)c - xc, radius);
    if (of[q] >= 0) {
      offsets[3 * of[q]] += ((double)r - yc) / radius, offsets[3 * of[q] + 1] += ((double)c - xc) / radius;
      offsets[3 * of[q] + 2] += 1;
    }
  }
  for (int k = 0; k < l.count; k++)
    if (offsets[3 * k + 2] > 0) offsets[3 * k] /= offsets[3 * k + 2], offsets[3 * k + 1] /= offsets[3 * k + 2];
  memset(seg, 0, (size_t)l.count * (size_t)d->npos * sizeof *seg);
  for (int64_t p = 0; p < d->npos; p++) {
    const uint32_t *f = (const uint32_t *)d->frames + p * hw;
    for (int64_t q = 0; q < hw; q++)
      if (of[q] >= 0) seg[(size_t)of[q] * (size_t)d->npos + (size_t)p] += f[q];
  }
  free(of);
  return l.count;
}

/* CoM (scan mean removed) and the ADF image (counts in the ring from 1.5 to
 * 3 disk radii, clipped to the detector) of u32 frames, by plain loops
 * (integer sums; the ring's pixels listed once). */
static inline void dpc_grid_products(const synth_data *d, double radius, double *cr, double *cc,
                                     double *adf) {
  const uint32_t *fr = d->frames;
  int64_t h = d->h, w = d->w, hw = h * w, n_ring = 0;
  double yc = (double)(h - 1) / 2, xc = (double)(w - 1) / 2, mr = 0, mc = 0;
  double r_in = 1.5 * radius, r_out = 3 * radius;
  int64_t *ring = malloc((size_t)hw * sizeof *ring);
  for (int64_t q = 0; q < hw; q++) {
    double r = hypot((double)(q / w) - yc, (double)(q % w) - xc);
    if (r >= r_in && r < r_out) ring[n_ring++] = q;
  }
  for (int64_t p = 0; p < d->npos; p++) {
    const uint32_t *f = fr + p * hw;
    uint64_t s = 0, sr = 0, sc = 0, a = 0;
    for (int64_t y = 0; y < h; y++) {
      uint64_t row = 0;
      for (int64_t x = 0; x < w; x++) row += f[y * w + x], sc += (uint64_t)x * f[y * w + x];
      s += row, sr += (uint64_t)y * row;
    }
    for (int64_t k = 0; k < n_ring; k++) a += f[ring[k]];
    cr[p] = s > 0 ? (double)sr / (double)s : 0, cc[p] = s > 0 ? (double)sc / (double)s : 0;
    adf[p] = (double)a;
    mr += cr[p], mc += cc[p];
  }
  for (int64_t p = 0; p < d->npos; p++) cr[p] -= mr / d->npos, cc[p] -= mc / d->npos;
  free(ring);
}

/* The Cramer-Rao bound of the rotation angle, degrees: the measured field
 * is c = R(d) F + n with F the noiseless CoM (com_expected, scan mean
 * removed) and n the shot noise, white with variance s2 per component
 * (measured as the mean squared difference of the Poisson CoM from F). The
 * derivative of R(d) F in d is J F, the field turned by 90 degrees, so the
 * Fisher information is sum |F|^2 / s2 and no unbiased fit does better than
 * sqrt(s2 / sum |F|^2) radians rms. (F itself is unknown, but a gradient
 * turned by 90 degrees is orthogonal to every gradient, so estimating it
 * does not lower the information.) */
static inline double dpc_grid_bound(const synth_data *d, const double *cr, const double *cc) {
  double mr = 0, mc = 0, f2 = 0, s2 = 0;
  for (int64_t p = 0; p < d->npos; p++) mr += d->com[2 * p], mc += d->com[2 * p + 1];
  mr /= (double)d->npos, mc /= (double)d->npos;
  for (int64_t p = 0; p < d->npos; p++) {
    double fr = d->com[2 * p] - mr, fc = d->com[2 * p + 1] - mc;
    f2 += fr * fr + fc * fc;
    s2 += (cr[p] - fr) * (cr[p] - fr) + (cc[p] - fc) * (cc[p] - fc);
  }
  s2 /= 2.0 * (double)d->npos;
  return f2 > 0 ? sqrt(s2 / f2) * 180 / M_PI : INFINITY;
}

/* A case's fields in the cache directory: its name from the case's
 * parameters; rows, cols (int32), the bound, then cr, cc, adf (f64), the
 * segment count (int32), the offsets (f64) and the segments (u64).
 * Reading returns false when the file is not there or not whole. With
 * SLUICE_DPC_GRID_CACHED_ONLY set, cases not in the cache are skipped (a
 * rule measured on what a running grid has made so far). */
static inline void dpc_grid_cache_name(char *name, size_t size, const char *dir, double alpha,
                                       double df, const char *dose, int rot, int t, int scan,
                                       int seed) {
  const char *step = getenv("SLUICE_DPC_GRID_STEP"); /* in the name when not the default */
  snprintf(name, size, "%s/a%.0f_df%+.0f_dose%s_r%d_t%d_scan%d_seed%d%s%s.v2.f64", dir, alpha * 1e3,
           df, dose, rot, t, scan, seed, step ? "_step" : "", step ? step : "");
}

static inline bool dpc_grid_cache_read(const char *name, int scan, double *bound, double **f,
                                       dpc_grid_fields *g) {
  FILE *fp = fopen(name, "rb");
  if (!fp) return false;
  int32_t rc[2] = {0, 0}, ns = 0;
  size_t np = (size_t)scan * (size_t)scan;
  bool ok = fread(rc, sizeof rc, 1, fp) == 1 && rc[0] == scan && rc[1] == scan &&
            fread(bound, sizeof *bound, 1, fp) == 1;
  for (int k = 0; k < 3 && ok; k++) ok = fread(f[k], 8, np, fp) == np;
  ok = ok && fread(&ns, sizeof ns, 1, fp) == 1 && ns > 0 && ns <= DPC_GRID_SEGMENTS_MAX &&
       fread(g->offsets, 8, 3 * (size_t)ns, fp) == 3 * (size_t)ns &&
       fread(g->seg, 8, (size_t)ns * np, fp) == (size_t)ns * np;
  g->n_seg = ns;
  fclose(fp);
  return ok;
}

static inline void dpc_grid_cache_write(const char *name, int scan, double bound, double **f,
                                        const dpc_grid_fields *g) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", name);
  FILE *fp = fopen(tmp, "wb");
  if (!fp) return;
  int32_t rc[2] = {scan, scan};
  size_t np = (size_t)scan * (size_t)scan;
  bool ok = fwrite(rc, sizeof rc, 1, fp) == 1 && fwrite(&bound, sizeof bound, 1, fp) == 1;
  for (int k = 0; k < 3 && ok; k++) ok = fwrite(f[k], 8, np, fp) == np;
  int32_t ns = g->n_seg;
  ok = ok && fwrite(&ns, sizeof ns, 1, fp) == 1 && fwrite(g->offsets, 8, 3 * (size_t)ns, fp) == 3 * (size_t)ns &&
       fwrite(g->seg, 8, (size_t)ns * np, fp) == (size_t)ns * np;
  ok &= fclose(fp) == 0;
  if (ok) rename(tmp, name);
  else remove(tmp);
}

/* The window (A) a case's probe needs: the geometric diameter of the
 * defocused probe, 2 |df| alpha, plus 6 A for its fringes and the focused
 * tails; its detector side H and its object pixel dx = window / H. */
static inline double dpc_grid_window(double alpha, double df, int *H, double *dx) {
  double window = fmax(8.0, 2 * fabs(df) * alpha + 6.0);
  *H = window / 64 <= 0.15 ? 64 : window / 96 <= 0.15 ? 96 : 128;
  *dx = window / *H;
  return window;
}

/* A case's acquisition: physical params -> generator params -> frames. */
static inline synth_data dpc_grid_generate(double alpha, double df, const char *dose, int rot,
                                           int transpose, int scan, int seed_no) {
  const double lambda = DPC_GRID_LAMBDA;
  int H;
  double dx, window = dpc_grid_window(alpha, df, &H, &dx), radius = window * alpha / lambda;
  char det[32], scan_s[32], rad[32], spacing[32], sigma[32], jitter[32], step[32], chi[32],
      rots[16], seed[16];
  snprintf(det, sizeof det, "[%d, %d]", H, H);
  snprintf(scan_s, sizeof scan_s, "[%d, %d]", scan, scan);
  snprintf(rad, sizeof rad, "%.6g", radius);
  snprintf(spacing, sizeof spacing, "%.6g", 2.5 / dx);
  snprintf(sigma, sizeof sigma, "%.6g", 0.35 / 2.3548 / dx);
  snprintf(jitter, sizeof jitter, "%.6g", 0.1 / dx);
  const char *step_a = getenv("SLUICE_DPC_GRID_STEP"); /* A, default 0.4 */
  snprintf(step, sizeof step, "%.6g", (step_a ? atof(step_a) : 0.4) / dx);
  snprintf(chi, sizeof chi, "%.6g", M_PI * df * alpha * alpha / lambda);
  snprintf(rots, sizeof rots, "%d", rot);
  snprintf(seed, sizeof seed, "%d", seed_no);
  kv o[] = {{"scan_shape", scan_s}, {"detector_shape", det}, {"disk_radius", rad},
            {"dose", dose}, {"dtype", "u32"}, {"phase_max", "0.5"},
            {"atom_spacing", spacing}, {"atom_sigma", sigma}, {"atom_jitter", jitter},
            {"background", "0.05"}, {"step", step}, {"defocus", chi},
            {"scan_rotation", rots}, {"scan_transpose", transpose ? "true" : "false"},
            {"seed", seed}};
  return synth_run(o, (int)(sizeof o / sizeof o[0]), INT64_MAX, 2);
}

/* One case: physical params -> generator params -> products -> dpc. With
 * a cache directory, the products (and the bound) are read from it when
 * there and written to it when made: the generator is most of a case's
 * time, so a changed rule can be measured on a large grid again at once. */
static inline dpc_grid_answer dpc_grid_case(double alpha, double df, const char *dose, int rot,
                                            int transpose, int scan, int seed_no,
                                            const char *cache, dpc_grid_runner run) {
  int H;
  double dx, radius = dpc_grid_window(alpha, df, &H, &dx) * alpha / DPC_GRID_LAMBDA;
  size_t np = (size_t)scan * (size_t)scan;
  double *f[3] = {malloc(np * 8), malloc(np * 8), malloc(np * 8)}, bound = 0;
  dpc_grid_fields g;
  memset(&g, 0, sizeof g);
  g.seg = malloc(DPC_GRID_SEGMENTS_MAX * np * 8);
  const char *step_a = getenv("SLUICE_DPC_GRID_STEP");
  g.alpha = alpha, g.step = step_a ? atof(step_a) : 0.4;
  char name[600] = "";
  if (cache)
    dpc_grid_cache_name(name, sizeof name, cache, alpha, df, dose, rot, transpose, scan, seed_no);
  bool cached = cache && dpc_grid_cache_read(name, scan, &bound, f, &g);
  if (!cached && cache && getenv("SLUICE_DPC_GRID_CACHED_ONLY")) {
    for (int k = 0; k < 3; k++) free(f[k]);
    free(g.seg);
    return (dpc_grid_answer){NAN, -1, NAN, 0, true}; /* skipped: not made yet */
  }
  if (!cached) {
    synth_data d = dpc_grid_generate(alpha, df, dose, rot, transpose, scan, seed_no);
    dpc_grid_products(&d, radius, f[0], f[1], f[2]);
    g.n_seg = dpc_grid_segments(&d, radius, g.seg, g.offsets);
    bound = dpc_grid_bound(&d, f[0], f[1]);
    synth_free(&d);
    if (cache) dpc_grid_cache_write(name, scan, bound, f, &g);
  }
  g.cr = f[0], g.cc = f[1], g.adf = f[2];
  dpc_grid_answer a = run(&g, scan, scan);
  a.bound = bound;
  for (int k = 0; k < 3; k++) free(f[k]);
  free(g.seg);
  return a;
}

/* The whole grid; every fifth case transposed. Prints each failure (wrong
 * branch, or an angle error over 2 degrees where the case is determinable),
 * a summary and the table per dose and defocus; every case's answer too
 * with DPC_GRID_VERBOSE set (to compare two versions of the fit case by
 * case). */
static inline dpc_grid_stats dpc_grid_run(const dpc_grid *g, dpc_grid_runner run) {
  dpc_grid_stats s;
  memset(&s, 0, sizeof s);
  int case_no = 0;
  /* SLUICE_DPC_GRID_PART "k/n": only the cases whose number is k modulo n
   * (the same numbers, seeds and transposes as the whole grid), so that n
   * processes can share a large grid; their verbose lines together are the
   * whole grid's. */
  int part_k = 0, part_n = 1;
  const char *part = getenv("SLUICE_DPC_GRID_PART");
  if (part && (sscanf(part, "%d/%d", &part_k, &part_n) != 2 || part_n < 1 || part_k < 0 || part_k >= part_n))
    part_k = 0, part_n = 1;
  const int n_cells = g->n_doses * g->n_defoci, per_cell = g->n_alphas * g->n_rotations;
  dpc_grid_cell *cells = calloc((size_t)n_cells, sizeof *cells);
  for (int k = 0; k < n_cells; k++) {
    cells[k].err180 = malloc((size_t)per_cell * sizeof(double));
    cells[k].bound = malloc((size_t)per_cell * sizeof(double));
  }
  for (int ia = 0; ia < g->n_alphas; ia++)
    for (int id = 0; id < g->n_defoci; id++)
      for (int ido = 0; ido < g->n_doses; ido++)
        for (int ir = 0; ir < g->n_rotations; ir++) {
          int rot = g->rotations[ir], t = case_no % 5 == 4;
          if (case_no % part_n != part_k) {
            case_no++;
            continue;
          }
          dpc_grid_answer a = dpc_grid_case(g->alphas[ia], g->defoci[id], g->doses[ido], rot, t,
                                            g->scan, 1 + case_no++, g->cache, run);
          if (a.transpose < 0) continue; /* not in the cache (SLUICE_DPC_GRID_CACHED_ONLY) */
          double err = dpc_grid_diff(a.angle, rot), err180 = err > 90 ? 180 - err : err;
          int det = a.bound <= DPC_GRID_DETERMINABLE;
          dpc_grid_cell *cell = &cells[ido * g->n_defoci + id];
          cell->err180[cell->c.cases] = err180, cell->bound[cell->c.cases] = a.bound;
          dpc_grid_count(&cell->c, err, err180, a.transpose == t);
          dpc_grid_count(&s.all, err, err180, a.transpose == t);
          if (a.bound <= DPC_GRID_BRANCH_HELD) dpc_grid_count(&s.held, err, err180, a.transpose == t);
          if (!a.warned) dpc_grid_count(&s.sure, err, err180, a.transpose == t);
          if (det) {
            dpc_grid_count(&s.det, err, err180, a.transpose == t);
            if (err180 > s.worst_det) s.worst_det = err180;
          }
          if (getenv("DPC_GRID_VERBOSE"))
            fprintf(stderr, "  case %d: alpha %2.0f mrad, df %+4.0f A, dose %s, rotation %3d t %d: "
                    "fitted %.6f t %d (bound %.3f deg, branch confidence %.3f)\n", case_no - 1,
                    g->alphas[ia] * 1e3, g->defoci[id], g->doses[ido], rot, t, a.angle,
                    a.transpose, a.bound, a.confidence);
          if (err >= 90 || (det && (err180 >= 2 || a.transpose != t)))
            fprintf(stderr,
                    "  alpha %2.0f mrad, df %+4.0f A, dose %s, rotation %3d%s: fitted %8.2f t %d "
                    "(bound %.2f deg, branch confidence %.3f)%s\n",
                    g->alphas[ia] * 1e3, g->defoci[id], g->doses[ido], rot,
                    t ? " (transposed)" : "", a.angle, a.transpose, a.bound, a.confidence,
                    err >= 90 ? " wrong branch" : "");
        }
  fprintf(stderr, "atomic columns, %dx%d scan:\n", g->scan, g->scan);
  dpc_grid_print("all", &s.all);
  dpc_grid_print("determinable (Cramer-Rao bound <= 0.7 deg)", &s.det);
  dpc_grid_print("branch held by the data (bound <= 5 deg)", &s.held);
  dpc_grid_print("no branch warning", &s.sure);
  fprintf(stderr, "  worst determinable angle error %.2f deg\n", s.worst_det);
  dpc_grid_table(g, cells);
  for (int k = 0; k < n_cells; k++) free(cells[k].err180), free(cells[k].bound);
  free(cells);
  return s;
}

#endif
