/* disk_fit: the bright-field disk of a diffraction pattern (typically the sum
 * or mean of all frames): sub-pixel centre and radius (REFERENCE.md section 4:
 * "the disk centre and radius are fitted from the mean pattern").
 *
 * Method (pixel centres at integer (row, col)):
 *  1. Levels. Histogram (1024 bins) of the pattern between robust bounds (the
 *     17th smallest and 17th largest pixel, so that a few dead or hot pixels
 *     do not squash it); Otsu's threshold splits it into background and disk;
 *     background = median of the pixels below, plateau = median of the pixels
 *     above. level = background + threshold * (plateau - background).
 *  2. Disk. Pixels >= level, 4-connected components; the disk is the
 *     component with the most intensity above background (pixels clipped at
 *     the robust upper bound, so that a hot pixel does not win). Initial
 *     centre = its centroid weighted by (I - background), same clipping;
 *     initial radius = sqrt(area/pi).
 *  3. Edge. Rays from the centre (about 4 pi R of them, 32..1440); along each,
 *     the pattern is sampled bilinearly every 0.25 px around the radius and
 *     the downward crossing of `level` nearest the radius is located by linear
 *     interpolation: one edge point per ray. A circle is fitted to the edge
 *     points (algebraic Kasa fit, then Gauss-Newton on the geometric distance);
 *     the rays are cast again from the new centre, 3 rounds in all.
 *  4. residual = RMS distance of the edge points from the fitted circle.
 * The result is checked to be a disk: enough edge points (>= 8, and at least
 * a quarter of the rays), >= 80% of the pixels inside R - 1 at or above the
 * level, <= 15% of the component's pixels outside R + 1.5. Otherwise, or for
 * a flat pattern, the kernel fails with SL_ERR_FORMAT saying why. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/select_kth.h"

#define DISK_FIT_PARAMS(P)                                                                    \
  P(FLOAT, threshold, "0.5",                                                                  \
    "edge level as a fraction of the way from the background to the disk plateau, in (0, 1)", \
    NULL)                                                                                     \
  P(FLOAT, radius, "0",                                                                       \
    "explicit disk radius in pixels: wins over the fit (a warning when the fit differs by "  \
    "more than 20%); 0 = the fitted radius", NULL)                                            \
  P(LIST, center, "[]",                                                                       \
    "explicit disk centre [row, col] in pixels: wins over the fit; [] = the fitted centre",   \
    NULL)
SL_NODE_PARAMS(disk_fit_params, DISK_FIT_PARAMS)

#define HIST_BINS 1024
#define FIT_ROUNDS 3

typedef struct disk_fit_result {
  double cr, cc, r, resid;
  double bg, plateau, level;
  int64_t area;
  int n_edge, n_rays;
  int64_t clipped;  /* outlying pixels clipped (clip_outliers), and to what */
  double clipped_to;
} disk_fit_result;

/* The explicit centre (param 'center'), or false when it is empty. */
static bool explicit_center(const sl_node *n, double *cr, double *cc) {
  const sl_param_value *v = disk_fit_params_of(n)->center;
  if (!v || v->n != 2) return false;
  char *end0 = NULL, *end1 = NULL;
  *cr = strtod(v->strs[0], &end0);
  *cc = strtod(v->strs[1], &end1);
  return end0 && !*end0 && end1 && !*end1;
}

static sl_code disk_fit_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  int ok = x->stream_rank == 0 && x->rank == 2 && x->dims[0] > 0 && x->dims[1] > 0;
  switch (x->dtype) {
    case SL_U8: case SL_U16: case SL_U32: case SL_U64: case SL_F32: case SL_F64: break;
    default: ok = 0;
  }
  if (!ok)
    return sl_input_refuse(err, "pattern",
                           "a whole 2-D diffraction pattern [H, W] (u8..u64, f32 or f64; e.g. "
                           "the total of a sum node)",
                           x);
  double t = disk_fit_params_of(n)->threshold;
  if (!(t > 0 && t < 1))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'threshold' must be in (0, 1) (fraction of the way from the background "
                   "to the disk plateau), got %g",
                   t);
  double r = disk_fit_params_of(n)->radius, cr, cc;
  if (!(isfinite(r) && r >= 0))
    return sl_fail(err, SL_ERR_PIPELINE, "param 'radius' must be >= 0 (0 = fitted), got %g", r);
  const sl_param_value *c = disk_fit_params_of(n)->center;
  if (c->n && !explicit_center(n, &cr, &cc))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'center' must be [] (fitted) or [row, col] in pixels, got %zu item(s)", c->n);
  int64_t d[1] = {4};
  n->out[0] = sl_desc_make(SL_F64, 1, d, 0);
  return SL_OK;
}

/* The kernel's working memory, lent by the executor as its workspace: the
 * pattern as f64, labels, the flood fill's stack, the edge points and the
 * histogram (fit_scratch). */
#define MAX_RAYS 1440
static int64_t disk_fit_work_bytes(int64_t px) {
  return px * (8 + 4 + 8) + 2 * MAX_RAYS * 8 + HIST_BINS * 8 + 64;
}

static void disk_fit_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t px = sl_desc_elems(&n->in[0]);
  c->bytes_read = sl_desc_bytes(&n->in[0]);
  c->bytes_written = 32;
  c->ops = 30 * px;
  c->workspace_bytes = disk_fit_work_bytes(px);
}

/* ---- helpers ------------------------------------------------------------------ */

static void swapd(double *a, double *b) {
  double t = *a;
  *a = *b;
  *b = t;
}

/* Median of the histogram bins [b0, b1), linear within a bin. */
static double hist_median(const int64_t *hist, int b0, int b1, double lo, double bw) {
  int64_t tot = 0;
  for (int b = b0; b < b1; b++) tot += hist[b];
  if (tot == 0) return lo + bw * b0;
  double half = 0.5 * (double)tot, acc = 0;
  for (int b = b0; b < b1; b++) {
    if (acc + (double)hist[b] >= half)
      return lo + bw * ((double)b + (hist[b] ? (half - acc) / (double)hist[b] : 0.5));
    acc += (double)hist[b];
  }
  return lo + bw * b1;
}

static double sample(const double *p, int64_t h, int64_t w, double y, double x) {
  int64_t r = (int64_t)floor(y), c = (int64_t)floor(x);
  if (r >= h - 1) r = h - 2;
  if (c >= w - 1) c = w - 2;
  if (r < 0) r = 0;
  if (c < 0) c = 0;
  double fy = y - (double)r, fx = x - (double)c;
  const double *q = p + r * w + c;
  return (1 - fy) * ((1 - fx) * q[0] + fx * q[1]) + fy * ((1 - fx) * q[w] + fx * q[w + 1]);
}

/* Solves the 3x3 system A x = b (Gaussian elimination, partial pivoting). */
static int solve3(double A[3][3], double b[3], double x[3]) {
  for (int i = 0; i < 3; i++) {
    int piv = i;
    for (int k = i + 1; k < 3; k++)
      if (fabs(A[k][i]) > fabs(A[piv][i])) piv = k;
    if (fabs(A[piv][i]) < 1e-300) return 0;
    if (piv != i) {
      for (int k = 0; k < 3; k++) swapd(&A[i][k], &A[piv][k]);
      swapd(&b[i], &b[piv]);
    }
    for (int k = i + 1; k < 3; k++) {
      double f = A[k][i] / A[i][i];
      for (int m = i; m < 3; m++) A[k][m] -= f * A[i][m];
      b[k] -= f * b[i];
    }
  }
  for (int i = 2; i >= 0; i--) {
    double s = b[i];
    for (int k = i + 1; k < 3; k++) s -= A[i][k] * x[k];
    x[i] = s / A[i][i];
  }
  return 1;
}

/* Circle through points (y, x): algebraic fit, then geometric Gauss-Newton. */
static int fit_circle(const double *ey, const double *ex, int n, double *cy, double *cx,
                      double *rad) {
  double my = 0, mx = 0;
  for (int i = 0; i < n; i++) my += ey[i], mx += ex[i];
  my /= n, mx /= n;
  double A[3][3] = {{0}}, b[3] = {0}, s[3];
  for (int i = 0; i < n; i++) {
    double y = ey[i] - my, x = ex[i] - mx, z = y * y + x * x, v[3] = {y, x, 1};
    for (int j = 0; j < 3; j++) {
      for (int k = 0; k < 3; k++) A[j][k] += v[j] * v[k];
      b[j] -= v[j] * z;
    }
  }
  if (!solve3(A, b, s)) return 0;
  double a0 = -s[0] / 2, b0 = -s[1] / 2, r2 = a0 * a0 + b0 * b0 - s[2];
  if (!(r2 > 0)) return 0;
  double p[3] = {a0, b0, sqrt(r2)};
  for (int it = 0; it < 20; it++) {
    double N[3][3] = {{0}}, g[3] = {0}, dlt[3];
    for (int i = 0; i < n; i++) {
      double y = ey[i] - my - p[0], x = ex[i] - mx - p[1], d = sqrt(y * y + x * x);
      if (d == 0) continue;
      double J[3] = {-y / d, -x / d, -1}, res = d - p[2];
      for (int j = 0; j < 3; j++) {
        for (int k = 0; k < 3; k++) N[j][k] += J[j] * J[k];
        g[j] -= J[j] * res;
      }
    }
    if (!solve3(N, g, dlt)) break;
    for (int j = 0; j < 3; j++) p[j] += dlt[j];
    if (fabs(dlt[0]) + fabs(dlt[1]) + fabs(dlt[2]) < 1e-10) break;
  }
  if (!(p[2] > 0) || !isfinite(p[0]) || !isfinite(p[1])) return 0;
  *cy = p[0] + my;
  *cx = p[1] + mx;
  *rad = p[2];
  return 1;
}

/* Casts rays from (cy, cx) and stores the edge points; returns their number. */
static int edge_points(const double *p, int64_t h, int64_t w, double level, double cy, double cx,
                       double rad, int n_rays, double *ey, double *ex) {
  const double step = 0.25;
  double span = fmax(3.0, 0.5 * rad);
  double t0 = fmax(0.5, rad - span), t1 = rad + span;
  int n = 0;
  for (int k = 0; k < n_rays; k++) {
    double th = 2 * M_PI * (double)k / (double)n_rays, dy = sin(th), dx = cos(th);
    double best = -1, bestd = INFINITY, prev = 0;
    int have_prev = 0;
    for (double t = t0; t <= t1 + 1e-9; t += step) {
      double y = cy + t * dy, x = cx + t * dx;
      if (y < 0 || x < 0 || y > (double)(h - 1) || x > (double)(w - 1)) break;
      double v = sample(p, h, w, y, x);
      if (have_prev && prev >= level && v < level) {
        double tc = t - step + step * (prev - level) / (prev - v);
        if (fabs(tc - rad) < bestd) bestd = fabs(tc - rad), best = tc;
      }
      prev = v;
      have_prev = 1;
    }
    if (best >= 0) {
      ey[n] = cy + best * dy;
      ex[n] = cx + best * dx;
      n++;
    }
  }
  return n;
}

/* Working memory of one fit. */
typedef struct fit_scratch {
  int32_t *label; /* per pixel: -1 below the level, else its region */
  int64_t *stack; /* the flood fill's */
  double *ey, *ex; /* edge points, MAX_RAYS */
  int64_t *hist;  /* HIST_BINS */
} fit_scratch;

/* 1. Levels: robust bounds [lo, *hi], Otsu's split of their histogram, the
 * background and plateau medians and the level between them. */
static sl_code levels_find(const double *p, int64_t n, double mn, double mx, double frac,
                           const fit_scratch *s, disk_fit_result *f, double *hi_out,
                           sl_error *err) {
  int64_t *hist = s->hist;
  double lo, hi;
  sl_select_extremes(p, n, n > 64 ? 16 : 0, &lo, &hi);
  if (!(hi > lo)) lo = mn, hi = mx;
  double bw = (hi - lo) / HIST_BINS;
  for (int64_t i = 0; i < n; i++) {
    double u = (p[i] - lo) / bw;
    int b = u < 0 ? 0 : u >= HIST_BINS ? HIST_BINS - 1 : (int)u;
    hist[b]++;
  }
  double sum_all = 0;
  for (int b = 0; b < HIST_BINS; b++) sum_all += (double)hist[b] * (b + 0.5);
  double best = -1, w0 = 0, s0 = 0;
  int tb = 1;
  for (int b = 1; b < HIST_BINS; b++) { /* split: bins < b | bins >= b */
    w0 += (double)hist[b - 1];
    s0 += (double)hist[b - 1] * (b - 0.5);
    double w1 = (double)n - w0;
    if (w0 == 0 || w1 == 0) continue;
    double m0 = s0 / w0, m1 = (sum_all - s0) / w1, v = w0 * w1 * (m1 - m0) * (m1 - m0);
    if (v > best) best = v, tb = b;
  }
  f->bg = hist_median(hist, 0, tb, lo, bw);
  f->plateau = hist_median(hist, tb, HIST_BINS, lo, bw);
  if (!(f->plateau > f->bg))
    return sl_fail(err, SL_ERR_FORMAT,
                   "disk_fit: no disk found: no bright plateau above the background (%g)", f->bg);
  f->level = f->bg + frac * (f->plateau - f->bg);
  *hi_out = hi;
  return SL_OK;
}

/* The fewest pixels a disk's region may have: a disk of radius 2 px has
 * 12 or 13. Fewer are hot pixels, alone or in a cluster (a cluster of 3
 * passed as a disk of radius 0.9 px where 300 hot pixels lay on 64 x 64). */
#define DISK_MIN_AREA 12

/* 2. The brightest 4-connected region above the level (pixels clipped at
 * `hi`): its label, and its weighted centroid and area into (*cy, *cx, *rad). */
static sl_code region_find(const double *p, int64_t h, int64_t w, double hi, const fit_scratch *s,
                           disk_fit_result *f, int32_t *best_out, double *cy, double *cx,
                           double *rad, sl_error *err) {
  const int64_t n = h * w;
  int32_t *label = s->label;
  int64_t *stack = s->stack;
  for (int64_t i = 0; i < n; i++) label[i] = p[i] >= f->level ? 0 : -1;
  int32_t n_lab = 0, best_lab = -1;
  double best_wt = -1;
  for (int64_t i = 0; i < n; i++) {
    if (label[i] != 0) continue;
    int32_t lab = ++n_lab;
    int64_t sp = 0;
    double wt = 0;
    stack[sp++] = i;
    label[i] = lab;
    while (sp > 0) {
      int64_t q = stack[--sp], r = q / w, c = q % w;
      wt += fmin(p[q], hi) - f->bg; /* hot pixels count as the plateau at most */
      int64_t nb[4] = {r > 0 ? q - w : -1, r < h - 1 ? q + w : -1, c > 0 ? q - 1 : -1,
                       c < w - 1 ? q + 1 : -1};
      for (int m = 0; m < 4; m++)
        if (nb[m] >= 0 && label[nb[m]] == 0) label[nb[m]] = lab, stack[sp++] = nb[m];
    }
    if (wt > best_wt) best_wt = wt, best_lab = lab;
  }
  double sw = 0, sy = 0, sx = 0;
  for (int64_t i = 0; i < n; i++)
    if (label[i] == best_lab) {
      double wt = fmin(p[i], hi) - f->bg;
      f->area++;
      sw += wt;
      sy += wt * (double)(i / w);
      sx += wt * (double)(i % w);
    }
  if (f->area < DISK_MIN_AREA || !(sw > 0))
    return sl_fail(err, SL_ERR_FORMAT,
                   "disk_fit: no disk found: the largest region above the level %g has %lld "
                   "pixel(s) (a disk has at least %d)",
                   f->level, (long long)f->area, DISK_MIN_AREA);
  *best_out = best_lab;
  *cy = sy / sw, *cx = sx / sw, *rad = sqrt((double)f->area / M_PI);
  return SL_OK;
}

/* 3. Edge points and circle fits, FIT_ROUNDS times from the last centre;
 * the circle and its residual into f. */
static sl_code circle_refine(const double *p, int64_t h, int64_t w, const fit_scratch *s,
                             double cy, double cx, double rad, disk_fit_result *f, sl_error *err) {
  double *ey = s->ey, *ex = s->ex;
  for (int round = 0; round < FIT_ROUNDS; round++) {
    int nr = (int)ceil(4 * M_PI * rad);
    nr = nr < 32 ? 32 : nr > MAX_RAYS ? MAX_RAYS : nr;
    int ne = edge_points(p, h, w, f->level, cy, cx, rad, nr, ey, ex);
    f->n_rays = nr;
    f->n_edge = ne;
    double ny, nx, nrad;
    if (ne < 8 || 4 * ne < nr || !fit_circle(ey, ex, ne, &ny, &nx, &nrad))
      return sl_fail(err, SL_ERR_FORMAT,
                     "disk_fit: no disk found: only %d of %d rays from (%.2f, %.2f) cross the "
                     "level %g near radius %.2f",
                     ne, nr, cy, cx, f->level, rad);
    cy = ny, cx = nx, rad = nrad;
  }
  double ss = 0;
  for (int i = 0; i < f->n_edge; i++) {
    double d = hypot(ey[i] - cy, ex[i] - cx) - rad;
    ss += d * d;
  }
  f->cr = cy, f->cc = cx, f->r = rad, f->resid = sqrt(ss / f->n_edge);
  return SL_OK;
}

/* 4. Is it a disk? Most pixels inside the circle at or above the level, few
 * of the region's outside it. */
static sl_code disk_verify(const double *p, int64_t h, int64_t w, const int32_t *label,
                           int32_t best_lab, const disk_fit_result *f, sl_error *err) {
  const double cy = f->cr, cx = f->cc, rad = f->r;
  int64_t inside = 0, inside_on = 0, outside_comp = 0;
  /* A pixel's distance is compared through its square where that is clear
   * by a margin far above the rounding of either form, and through hypot
   * (the comparison the counts were defined by) only near the two radii:
   * the same counts, without a hypot and two divisions a pixel (0.2-0.3
   * ms of a 192 x 192 fit's 1.8). A negative r_in holds no pixel. */
  const double r_in = rad - 1, r_out = rad + 1.5, tol = 1e-9;
  const double in_lo = r_in >= 0 ? r_in * r_in * (1 - tol) : -1, in_hi = r_in >= 0 ? r_in * r_in * (1 + tol) : -1;
  const double out_lo = r_out * r_out * (1 - tol), out_hi = r_out * r_out * (1 + tol);
  for (int64_t r = 0; r < h; r++) {
    const double dy = (double)r - cy;
    for (int64_t c = 0; c < w; c++) {
      const int64_t i = r * w + c;
      const double dx = (double)c - cx, d2 = dy * dy + dx * dx;
      const bool near = (d2 >= in_lo && d2 <= in_hi) || (d2 >= out_lo && d2 <= out_hi);
      const double d = near ? hypot(dy, dx) : 0;
      const bool in = near ? d <= r_in : d2 < in_lo;
      const bool out = near ? d > r_out : d2 > out_hi;
      if (in) inside++, inside_on += p[i] >= f->level;
      if (out && label[i] == best_lab) outside_comp++;
    }
  }
  if ((inside > 0 && (double)inside_on < 0.8 * (double)inside) ||
      (double)outside_comp > 0.15 * (double)f->area || !(rad < (double)(h > w ? h : w)))
    return sl_fail(err, SL_ERR_FORMAT,
                   "disk_fit: no disk found: the region above the level %g is not a disk (%.0f%% "
                   "of the pixels inside the fitted circle (%.2f, %.2f) r %.2f are above it, "
                   "%.0f%% of the region lies outside)",
                   f->level, inside ? 100.0 * (double)inside_on / (double)inside : 0.0, cy, cx,
                   rad, 100.0 * (double)outside_comp / (double)f->area);
  return SL_OK;
}

/* After a level that only regions too small for a disk reach (fewer than
 * DISK_MIN_AREA pixels): when their pixels are few (at most OUTLIERS_MAX(n),
 * 1.6% of the pattern), they are outliers far above the disk, hot pixels or
 * flagged ones summed as stored (a sum of 16,384 frames with 73 pixels at
 * 65535 put the level at 5.4e8, the disk's plateau at 3.3e5), not the
 * disk: they are clipped to the largest value below the level, so that the
 * disk sets the next level. Returns how many were clipped (0: none, or too
 * many to be outliers). A pattern whose fit succeeds never comes here: its
 * results do not change. */
#define OUTLIER_ROUNDS 3
#define OUTLIERS_MAX(n) ((n) / 64 > 16 ? (n) / 64 : 16)
static int64_t clip_outliers(double *p, int64_t n, double level, double *to) {
  int64_t above = 0;
  double below = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (p[i] >= level) above++;
    else if (p[i] > below) below = p[i];
  if (above == 0 || above > OUTLIERS_MAX(n) || !isfinite(below)) return 0;
  for (int64_t i = 0; i < n; i++)
    if (p[i] >= level) p[i] = below;
  *to = below;
  return above;
}

/* The fit; on failure fills `err` (SL_ERR_FORMAT) with why no disk was found.
 * p is the kernel's own copy of the pattern: outliers may be clipped in it. */
static sl_code disk_fit_run(double *p, int64_t h, int64_t w, double frac, void *work,
                            disk_fit_result *f, sl_error *err) {
  int64_t n = h * w;
  memset(f, 0, sizeof *f);
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(p[i]))
      return sl_fail(err, SL_ERR_FORMAT, "disk_fit: pattern pixel (%lld, %lld) is not finite",
                     (long long)(i / w), (long long)(i % w));
    mn = fmin(mn, p[i]);
    mx = fmax(mx, p[i]);
  }
  if (!(mx > mn))
    return sl_fail(err, SL_ERR_FORMAT,
                   "disk_fit: no disk found: the pattern is flat (all %lld pixels are %g)",
                   (long long)n, mn);
  if (h < 3 || w < 3)
    return sl_fail(err, SL_ERR_FORMAT, "disk_fit: no disk found: a %lldx%lld pattern is too small",
                   (long long)h, (long long)w);
  /* Carved from the lent workspace, 8-byte items first (disk_fit_work_bytes;
   * the pattern itself took its first n doubles). */
  fit_scratch s;
  s.stack = work;
  s.ey = (double *)(s.stack + n);
  s.ex = s.ey + MAX_RAYS;
  s.hist = (int64_t *)(s.ex + MAX_RAYS);
  s.label = (int32_t *)(s.hist + HIST_BINS);
  sl_code rc;
  double hi = 0, cy = 0, cx = 0, rad = 0;
  int32_t best_lab = -1;
  int64_t clipped = 0;
  double clipped_to = 0;
  for (int round = 0;; round++) {
    memset(s.hist, 0, HIST_BINS * sizeof *s.hist);
    if ((rc = levels_find(p, n, mn, mx, frac, &s, f, &hi, err)) != SL_OK) break;
    rc = region_find(p, h, w, hi, &s, f, &best_lab, &cy, &cx, &rad, err);
    if (rc == SL_OK || f->area >= DISK_MIN_AREA || round == OUTLIER_ROUNDS) break;
    int64_t k = clip_outliers(p, n, f->level, &clipped_to);
    if (!k) break;
    clipped += k;
    mx = clipped_to;
    memset(f, 0, sizeof *f);
    if (!(mx > mn)) {
      rc = sl_fail(err, SL_ERR_FORMAT,
                   "disk_fit: no disk found: apart from %lld isolated pixel(s) far above the rest, "
                   "the pattern is flat (%g)",
                   (long long)clipped, mn);
      break;
    }
    sl_error_clear(err);
  }
  if (rc == SL_OK && (rc = circle_refine(p, h, w, &s, cy, cx, rad, f, err)) == SL_OK)
    rc = disk_verify(p, h, w, s.label, best_lab, f, err);
  f->clipped = clipped, f->clipped_to = clipped_to;
  return rc;
}


/* Explicit params win over the fit; the fit still runs and a radius that
 * differs from it by more than 20% is a warning (a note the command line
 * prints). Without a fit (it failed) explicit values must cover both. */
static sl_code apply_explicit(sl_kernel_args *a, bool fitted, const disk_fit_result *f, double out[4]) {
  sl_node *n = (sl_node *)a->node; /* the executor's node is the graph's own */
  double r = disk_fit_params_of(n)->radius, cr = 0, cc = 0;
  bool has_c = explicit_center(n, &cr, &cc);
  if (!fitted && (r <= 0 || !has_c))
    return a->err->code;
  if (r > 0) {
    if (fitted && fabs(r - f->r) > 0.2 * f->r)
      sl_node_note(n, "warning",
                   "the given disk radius %.3g px differs from the %.3g px fitted to the data by "
                   "%.0f%%; using the given one",
                   r, f->r, 100.0 * fabs(r - f->r) / f->r);
    out[2] = r;
  }
  if (has_c) out[0] = cr, out[1] = cc;
  if (!fitted) {
    out[3] = NAN;
    sl_node_note(n, "warning", "no disk fitted (%s); using the given centre and radius", a->err->msg);
    sl_error_clear(a->err);
  }
  const char *how = r > 0 && has_c ? "given" : r > 0 || has_c ? "given and fitted" : "fitted";
  sl_node_note(n, "result", "disk centre (%.2f, %.2f) radius %.2f px (%s)", out[0], out[1], out[2], how);
  return SL_OK;
}

static sl_code disk_fit_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  int64_t h = x->dims[0], w = x->dims[1], n = h * w;
  if (!a->workspace) return sl_fail(a->err, SL_ERR_INTERNAL, "disk_fit: called without its workspace");
  double *p = a->workspace;
  switch (x->dtype) {
#define CONV(T) { const T *s = a->in[0]; for (int64_t i = 0; i < n; i++) p[i] = (double)s[i]; break; }
    case SL_U8: CONV(uint8_t)
    case SL_U16: CONV(uint16_t)
    case SL_U32: CONV(uint32_t)
    case SL_U64: CONV(uint64_t)
    case SL_F32: CONV(float)
    default: CONV(double)
#undef CONV
  }
  disk_fit_result f;
  const double threshold = disk_fit_params_of(a->node)->threshold;
  sl_code rc = disk_fit_run(p, h, w, threshold, p + n, &f, a->err);
  double *out = a->out[0];
  if (rc == SL_OK) {
    out[0] = f.cr, out[1] = f.cc, out[2] = f.r, out[3] = f.resid;
    /* The executor's node is the graph's own (non-const) node. */
    sl_node_note((sl_node *)a->node, "disk_fit",
                 "centre (%.3f, %.3f) radius %.3f px, residual %.3f px from %d edge points on %d "
                 "rays; level %.6g (background %.6g, plateau %.6g, threshold %g), region %lld px",
                 f.cr, f.cc, f.r, f.resid, f.n_edge, f.n_rays, f.level, f.bg, f.plateau,
                 threshold, (long long)f.area);
    if (f.clipped)
      sl_node_note((sl_node *)a->node, "outliers",
                   "%lld isolated pixel(s) far above the disk (hot, or flagged and summed as stored) "
                   "clipped to %.6g before the level was set; correct them upstream (mask_correct) "
                   "for products that read them",
                   (long long)f.clipped, f.clipped_to);
  } else if (rc == SL_ERR_NOMEM) {
    return rc;
  }
  return apply_explicit(a, rc == SL_OK, &f, out);
}

static const sl_port_def disk_fit_inputs[] = {
    {"pattern", "whole [H, W] diffraction pattern (u8..u64, f32, f64), e.g. a sum node's total",
     "counts", false}};
static const sl_port_def disk_fit_outputs[] = {
    {"disk", "whole f64 [4]: centre_row, centre_col, radius, residual (RMS of the edge points "
             "from the circle)", "pixels", false}};

const sl_node_desc sl_node_disk_fit = {
    .type = "disk_fit",
    .doc = "Sub-pixel bright-field disk (centre, radius) of a diffraction pattern: threshold, "
           "centroid, circle fit to interpolated edge points.",
    SL_PARAMS_DESC(disk_fit_params),
    .inputs = disk_fit_inputs, .n_inputs = SL_COUNT_OF(disk_fit_inputs),
    .outputs = disk_fit_outputs, .n_outputs = SL_COUNT_OF(disk_fit_outputs),
    .infer = disk_fit_infer, .cost = disk_fit_cost,
    .kernel = {[SL_BACKEND_CPU] = disk_fit_cpu},
    .host = true,
    .cpu_serial = true,
};
