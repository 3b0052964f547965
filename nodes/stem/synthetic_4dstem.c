/* synthetic_4dstem: a physics-based 4D-STEM generator (a source node).
 *
 * Probe: P(k) = aperture disk of radius `disk_radius` detector pixels, centred
 * on the detector centre ((H-1)/2, (W-1)/2) (its rim pixels covered by their
 * share inside the circle: aperture_cover), times exp(-i defocus (|k|/R)^2).
 * The real-space probe is its inverse DFT on an H x W window (window pixel =
 * object pixel). Object: a weak phase object phi(r) over the scan field, a
 * jittered square lattice of Gaussian "atoms" (seeded), scaled so max phi =
 * phase_max. Frame at scan position (i, j) (object coords (i, j) * step plus
 * a margin): psi = probe(r) exp(i phi(r + R_ij)) (phi bilinear between object
 * pixels), I = |DFT(psi)|^2 fftshifted so that the disk sits at the detector
 * centre, lambda = dose * I / sum(I), counts ~ Poisson(lambda) clamped to
 * dtype max - 1 (the max is the detector's flag value).
 *
 * Random numbers: xoshiro256** seeded from (seed, global position index), so
 * frames are identical whatever the chunking and the number of threads.
 * Poisson: CDF inversion for lambda < 30, Hormann's PTRS (transformed
 * rejection with squeeze, exact) for lambda >= 30.
 *
 * Ground truth: `phase` = phi at each probe centre; `com_expected` = the
 * expectation-value centre of mass (row, col) of the noiseless pattern I,
 * in detector pixels relative to ((H-1)/2, (W-1)/2). Sign and scale: a
 * phase gradient g (radians per object pixel) along +row deflects the
 * pattern towards +row by H g / (2 pi) pixels (com_row ~ H/(2 pi) times the
 * probe-intensity-weighted d phi/d row; likewise for columns with W).
 *
 * Scan rotation: `scan_rotation` theta and `scan_transpose` t model the
 * scan-to-detector relation of a microscope: a vector in scan coordinates c
 * appears on the detector as A c, A = R(theta) T^t, R(theta) = [[cos, -sin],
 * [sin, cos]] on (row, col), T the swap (row, col) -> (col, row). The window
 * (and so the detector) is in detector coordinates, the object in scan
 * coordinates: window pixel r sees the object at R_ij + A^-1 r,
 * psi(r) = probe(r) exp(i phi(R_ij + A^-1 r)) (phi by cubic B-spline). The
 * probe is symmetric, so this is the exit wave of the scan's own frame
 * turned by A, and its far field is the unrotated one's turned by A,
 * I_det(d) = I(A^-1 d),
 * with nothing resampled: com_expected (in detector coordinates) is A times
 * the unrotated run's up to the object's interpolation, and stays the exact
 * CoM of the pattern (the rotation of a CoM field is what dpc fits).
 * Resampling the pattern instead (bilinear, the earlier model) turned the
 * CoM by up to 1.5 degrees more than theta under large defocus: a defocused
 * probe's pattern (a shadow image of the object) has fringes near the
 * detector's sampling limit, and a bilinear resample of those moves its first
 * moment. The object, the positions and `phase` do not change; theta 0 and
 * t false read the object without the rotation (data bit-identical to the
 * model without these params). */
#include <fftw3.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/fourier_integral.h"
#include "nodes/common/fftw_planner.h"

#define MAX_OBJECT_PIXELS ((int64_t)1 << 23)

typedef struct synthetic_config {
  int64_t rows, cols; /* scan */
  int64_t h, w;       /* detector */
  double dose;
  int64_t seed;
  sl_dtype dtype;
  double radius, defocus, step, phase_max;
  double atom_spacing, atom_sigma, atom_jitter, background;
  int64_t oh, ow;   /* object grid */
  double oy0, ox0;  /* object coordinates of scan position (0, 0) */
  double rotation;  /* scan_rotation, degrees */
  bool transpose;   /* scan_transpose */
  bool remap;       /* rotation or transpose: the window sees the object turned */
  double inv[2][2]; /* window (detector) offset -> object (scan) offset: A^-1 = T^t R(-theta) */
} synthetic_config;

typedef struct synthetic_state {
  synthetic_config cfg;
  fftw_plan fwd;        /* H x W forward, out of place */
  fftw_complex *probe;  /* real-space probe, DFT order */
  double *phi;          /* object phase, oh x ow */
  double *spline;       /* with a turned window: phi's cubic B-spline coefficients, oh x ow */
  fftw_complex *trans;  /* exp(i phi), oh x ow */
} synthetic_state;

/* ---- random numbers ------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

typedef struct xoshiro {
  uint64_t s[4];
} xoshiro;

static void rng_init(xoshiro *r, int64_t seed, uint64_t key) {
  uint64_t x = mix64(mix64((uint64_t)seed + 0x9E3779B97F4A7C15ULL) ^ key);
  for (int i = 0; i < 4; i++) {
    x += 0x9E3779B97F4A7C15ULL;
    r->s[i] = mix64(x);
  }
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(xoshiro *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

/* Uniform in [0, 1). */
static inline double rng_uniform(xoshiro *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* log(k!) */
static double log_factorial(double k) {
  if (k < 16) {
    double p = 1;
    for (int i = 2; i <= (int)k; i++) p *= i;
    return log(p);
  }
  double x = k + 1, x2 = x * x;
  return (x - 0.5) * log(x) - x + 0.91893853320467274178 + 1.0 / (12.0 * x) -
         1.0 / (360.0 * x * x2) + 1.0 / (1260.0 * x * x2 * x2);
}

/* Poisson(lam) as a double (exact integer value). */
static double poisson(xoshiro *r, double lam) {
  if (!(lam > 0)) return 0;
  if (lam < 30) {
    double u = rng_uniform(r);
    if (u < 1.0 - lam) return 0; /* exp(-lam) >= 1 - lam: most dark pixels end here */
    double p = exp(-lam), f = p, k = 0, kmax = lam + 40.0 * sqrt(lam) + 60.0;
    while (u >= f && k < kmax) {
      k += 1;
      p *= lam / k;
      f += p;
    }
    return k;
  }
  /* PTRS: W. Hormann, "The transformed rejection method for generating
   * Poisson random variables", Insurance: Math. and Econ. 12 (1993). */
  double slam = sqrt(lam), loglam = log(lam);
  double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
  for (;;) {
    double u = rng_uniform(r) - 0.5, v = rng_uniform(r);
    double us = 0.5 - fabs(u);
    double k = floor((2 * a / us + b) * u + lam + 0.43);
    if (us >= 0.07 && v <= vr) return k;
    if (k < 0 || (us < 0.013 && v > us)) continue;
    if (log(v) + log(invalpha) - log(a / (us * us) + b) <= -lam + k * loglam - log_factorial(k))
      return k;
  }
}

/* ---- params ---------------------------------------------------------------- */

/* Param 'dtype', in the order of its choices. */
static const sl_dtype frame_dtypes[] = {SL_U8, SL_U16, SL_U32};

#define SYNTHETIC_4DSTEM_PARAMS(P)                                                            \
  P(SHAPE, scan_shape, "[32, 32]", "scan positions [rows, cols]", NULL)                       \
  P(SHAPE, detector_shape, "[64, 64]", "detector pixels [H, W] (each 8..4096)", NULL)         \
  P(FLOAT, dose, "1000", "mean electrons per probe position (> 0)", NULL)                     \
  P(INT, seed, "1", "random seed (object and shot noise)", NULL)                              \
  P(ENUM, dtype, "u16", "frame type: u8, u16 or u32 (counts clamp to max - 1)", "u8|u16|u32") \
  P(FLOAT, disk_radius, "0",                                                                  \
    "bright-field disk radius in detector pixels; 0 = auto (rows/8); < half the detector",    \
    NULL)                                                                                     \
  P(FLOAT, defocus, "0", "defocus phase in radians at the aperture edge", NULL)               \
  P(FLOAT, step, "1", "scan step in object pixels (> 0)", NULL)                               \
  P(FLOAT, phase_max, "0.2", "peak phase of the weak phase object, radians [0, 2 pi]", NULL)  \
  P(FLOAT, atom_spacing, "8", "spacing of the square lattice of atomic columns, object pixels " \
                               "(1..1000)", NULL)                                              \
  P(FLOAT, atom_sigma, "1.6", "Gaussian sigma of a column's phase, object pixels (0.1..100)",   \
    NULL)                                                                                     \
  P(FLOAT, atom_jitter, "1", "+- random displacement of each column, object pixels "           \
                             "(0..spacing/2)", NULL)                                           \
  P(FLOAT, background, "0", "a weak amorphous background: random-sign blobs (sigma 2 x "      \
                            "atom_sigma, one per lattice cell) of this fraction of the "       \
                            "columns' weight, [0, 1]", NULL)                                   \
  P(FLOAT, scan_rotation, "0",                                                                \
    "scan-to-detector rotation theta in degrees [-360, 360]: detector CoM = R(theta) [T] "    \
    "scan CoM",                                                                               \
    NULL)                                                                                     \
  P(BOOL, scan_transpose, "false",                                                            \
    "swap the scan's (row, col) before the rotation (a mirrored scan)", NULL)
SL_NODE_PARAMS(synthetic_4dstem_params, SYNTHETIC_4DSTEM_PARAMS)

/* Param `name` (a SHAPE) as [rows, cols], each in [lo, hi]. */
static sl_code shape2(const sl_param_value *v, const char *name, int64_t lo, int64_t hi,
                      int64_t *a, int64_t *b, sl_error *err) {
  if (v->n != 2)
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' must have 2 axes [rows, cols], got %zu",
                   name, v->n);
  for (int i = 0; i < 2; i++)
    if (v->ints[i] < lo || v->ints[i] > hi)
      return sl_fail(err, SL_ERR_PIPELINE, "param '%s': axis %d must be in [%lld, %lld], got %lld",
                     name, i, (long long)lo, (long long)hi, (long long)v->ints[i]);
  *a = v->ints[0];
  *b = v->ints[1];
  return SL_OK;
}

/* Param `name` of value v in [lo, hi] (lo excluded when lo_open). */
static sl_code ranged(double v, const char *name, double lo, double hi, int lo_open, double *out,
                      sl_error *err) {
  if (!isfinite(v) || v > hi || v < lo || (lo_open && v <= lo))
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' must be in %s%g, %g], got %g", name,
                   lo_open ? "(" : "[", lo, hi, v);
  *out = v;
  return SL_OK;
}

static sl_code config_resolve(const sl_node *n, synthetic_config *c, sl_error *err) {
  const synthetic_4dstem_params *p = synthetic_4dstem_params_of(n);
  memset(c, 0, sizeof *c);
  sl_code rc;
  if ((rc = shape2(p->scan_shape, "scan_shape", 1, 1 << 20, &c->rows, &c->cols, err)) ||
      (rc = shape2(p->detector_shape, "detector_shape", 8, 4096, &c->h, &c->w, err)))
    return rc;
  c->dtype = frame_dtypes[p->dtype];
  c->seed = p->seed;
  if ((rc = ranged(p->dose, "dose", 0, 1e12, 1, &c->dose, err)) ||
      (rc = ranged(p->defocus, "defocus", -1e4, 1e4, 0, &c->defocus, err)) ||
      (rc = ranged(p->step, "step", 0, 1e4, 1, &c->step, err)) ||
      (rc = ranged(p->phase_max, "phase_max", 0, 2 * M_PI, 0, &c->phase_max, err)) ||
      (rc = ranged(p->atom_spacing, "atom_spacing", 1, 1000, 1, &c->atom_spacing, err)) ||
      (rc = ranged(p->atom_sigma, "atom_sigma", 0.1, 100, 1, &c->atom_sigma, err)) ||
      (rc = ranged(p->atom_jitter, "atom_jitter", 0, c->atom_spacing / 2, 0, &c->atom_jitter, err)) ||
      (rc = ranged(p->background, "background", 0, 1, 0, &c->background, err)) ||
      (rc = ranged(p->scan_rotation, "scan_rotation", -360, 360, 0, &c->rotation, err)))
    return rc;
  c->transpose = p->scan_transpose;
  c->remap = c->rotation != 0 || c->transpose;
  /* Detector = A scan with A = R(theta) T^t, R(theta) = [[cos, -sin], [sin, cos]]
   * on (row, col) vectors and T the swap (row, col) -> (col, row). Window
   * pixel r (offset from the probe centre, detector coordinates) sees the
   * object at offset A^-1 r = T^t R(-theta) r. Exact quarter turns give exact
   * cosines. */
  double th = c->rotation * M_PI / 180.0, q = c->rotation / 90.0, cs = cos(th), sn = sin(th);
  if (q == floor(q)) {
    int k = (((int)q % 4) + 4) % 4;
    cs = k == 0 ? 1 : k == 2 ? -1 : 0;
    sn = k == 1 ? 1 : k == 3 ? -1 : 0;
  }
  double r0[2] = {cs, sn}, r1[2] = {-sn, cs}; /* rows of R(-theta) */
  for (int i = 0; i < 2; i++) {
    c->inv[0][i] = c->transpose ? r1[i] : r0[i];
    c->inv[1][i] = c->transpose ? r0[i] : r1[i];
  }
  double half = 0.5 * (double)(c->h < c->w ? c->h : c->w);
  double r = p->disk_radius;
  if (!isfinite(r) || r < 0 || (r > 0 && r < 1) || r >= half)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'disk_radius' must be 0 (auto: rows/8) or in [1, %g) pixels (less than "
                   "half the detector), got %g",
                   half, r);
  c->radius = r > 0 ? r : (double)c->h / 8.0;
  /* The object covers the window around every position, turned or not (the
   * window's half diagonal each side): the same object, at the same place
   * under the positions, whatever scan_rotation and scan_transpose. */
  int64_t m = (int64_t)ceil(0.5 * hypot((double)c->h, (double)c->w)) + 2;
  c->oy0 = c->ox0 = (double)m;
  c->oh = (int64_t)ceil((double)(c->rows - 1) * c->step) + 2 * m + 2;
  c->ow = (int64_t)ceil((double)(c->cols - 1) * c->step) + 2 * m + 2;
  if ((double)c->oh * (double)c->ow > (double)MAX_OBJECT_PIXELS)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "scan field too large: 'scan_shape' x 'step' plus the detector window needs a "
                   "%lldx%lld object (at most %lld pixels); reduce 'step' or 'scan_shape'",
                   (long long)c->oh, (long long)c->ow, (long long)MAX_OBJECT_PIXELS);
  return SL_OK;
}

static sl_code synthetic_infer(sl_node *n, sl_error *err) {
  synthetic_config c;
  sl_code rc = config_resolve(n, &c, err);
  if (rc) return rc;
  int64_t fd[4] = {c.rows, c.cols, c.h, c.w}, pd[2] = {c.rows, c.cols},
          cd[3] = {c.rows, c.cols, 2};
  n->out[0] = sl_desc_make(c.dtype, 4, fd, 2);
  n->out[1] = sl_desc_make(SL_F64, 2, pd, 0);
  n->out[2] = sl_desc_make(SL_F64, 3, cd, 0);
  return SL_OK;
}

static void synthetic_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t hw = sl_desc_item_elems(&n->out[0]);
  c->bytes_written = positions * (sl_desc_item_bytes(&n->out[0]) + 3 * 8);
  c->bytes_read = positions * hw * 16 * 2; /* probe and transmission */
  c->ops = positions * hw * (int64_t)(5.0 * log2((double)hw) + 40.0);
  /* Each worker's FFT and sampling scratch (psi, spectrum, intensity) is
   * lent by the executor; prepare() holds the probe, the object phase and
   * its transmission function. */
  c->per_worker_bytes = 40 * hw;
  c->library_bytes = SL_FFTW_PLANNER_BYTES;
  synthetic_config cfg;
  if (config_resolve(n, &cfg, NULL) == SL_OK)
    c->state_bytes = hw * 16 + cfg.oh * cfg.ow * (8 + 16 + (cfg.remap ? 8 : 0));
}

/* ---- prepare: probe, object, plan ------------------------------------------ */

static void synthetic_release(sl_node *n) {
  synthetic_state *s = n->state;
  if (!s) return;
  if (s->fwd) fftw_destroy_plan(s->fwd);
  fftw_free(s->probe);
  fftw_free(s->trans);
  free(s->phi);
  free(s->spline);
  free(s);
  n->state = NULL;
}

/* Adds wgt * exp(-d^2 / (2 sig^2)) around (y, x) to the oh x ow grid g. */
static void add_blob(double *g, int64_t oh, int64_t ow, double y, double x, double sig, double wgt) {
  double reach = 4.0 * sig;
  int64_t y0 = (int64_t)floor(y - reach), y1 = (int64_t)ceil(y + reach);
  int64_t x0 = (int64_t)floor(x - reach), x1 = (int64_t)ceil(x + reach);
  if (y0 < 0) y0 = 0;
  if (x0 < 0) x0 = 0;
  if (y1 > oh - 1) y1 = oh - 1;
  if (x1 > ow - 1) x1 = ow - 1;
  for (int64_t u = y0; u <= y1; u++)
    for (int64_t v = x0; v <= x1; v++) {
      double d2 = ((double)u - y) * ((double)u - y) + ((double)v - x) * ((double)v - x);
      g[u * ow + v] += wgt * exp(-d2 / (2 * sig * sig));
    }
}

/* The cubic B-spline coefficients of the n samples x[0], x[stride], ...
 * in place: the causal and anticausal passes of the pole z = sqrt(3) - 2
 * (Unser's recursive prefilter; mirror boundaries, the causal start summed
 * until z^k is below 1e-16). */
static void spline_prefilter(double *x, int64_t n, int64_t stride) {
  if (n < 2) return;
  const double z = sqrt(3.0) - 2, gain = (1 - z) * (1 - 1 / z);
  for (int64_t k = 0; k < n; k++) x[k * stride] *= gain;
  double sum = x[0], zk = z;
  for (int64_t k = 1; k < n && fabs(zk) > 1e-16; k++, zk *= z) sum += zk * x[k * stride];
  x[0] = sum;
  for (int64_t k = 1; k < n; k++) x[k * stride] += z * x[(k - 1) * stride];
  x[(n - 1) * stride] = z / (z * z - 1) * (x[(n - 1) * stride] + z * x[(n - 2) * stride]);
  for (int64_t k = n - 2; k >= 0; k--) x[k * stride] = z * (x[(k + 1) * stride] - x[k * stride]);
}

/* The B-spline coefficients of the gh x gw samples g, in place (rows, then
 * columns: the filter is separable). */
static void spline_coefficients(double *g, int64_t gh, int64_t gw) {
  for (int64_t r = 0; r < gh; r++) spline_prefilter(g + r * gw, gw, 1);
  for (int64_t col = 0; col < gw; col++) spline_prefilter(g + col, gh, gw);
}

static void make_object(synthetic_state *s) {
  const synthetic_config *c = &s->cfg;
  int64_t oh = c->oh, ow = c->ow;
  double *g = s->phi;
  memset(g, 0, (size_t)(oh * ow) * sizeof *g);
  if (c->phase_max > 0) {
    xoshiro r;
    rng_init(&r, c->seed, 0xA70A70A70A70A70AULL); /* the object's own stream */
    const double a = c->atom_spacing;
    int64_t nr = (int64_t)(oh / a) + 3, nc = (int64_t)(ow / a) + 3;
    for (int64_t li = 0; li < nr; li++)
      for (int64_t lj = 0; lj < nc; lj++) {
        double y = (double)(li - 1) * a + c->atom_jitter * (2 * rng_uniform(&r) - 1);
        double x = (double)(lj - 1) * a + c->atom_jitter * (2 * rng_uniform(&r) - 1);
        double wgt = 0.6 + 0.4 * rng_uniform(&r);
        add_blob(g, oh, ow, y, x, c->atom_sigma, wgt);
      }
    if (c->background > 0) {
      /* Drawn after the columns, from the same stream: the columns stay the
       * same with or without a background. */
      for (int64_t k = 0; k < nr * nc; k++) {
        double y = ((double)nr * rng_uniform(&r) - 1) * a, x = ((double)nc * rng_uniform(&r) - 1) * a;
        double wgt = c->background * (2 * rng_uniform(&r) - 1);
        add_blob(g, oh, ow, y, x, 2 * c->atom_sigma, wgt);
      }
    }
    double mx = 0;
    for (int64_t i = 0; i < oh * ow; i++) mx = g[i] > mx ? g[i] : mx;
    double k = mx > 0 ? c->phase_max / mx : 0;
    for (int64_t i = 0; i < oh * ow; i++) g[i] *= k;
  }
  for (int64_t i = 0; i < oh * ow; i++) {
    s->trans[i][0] = cos(g[i]);
    s->trans[i][1] = sin(g[i]);
  }
}

/* The share of detector pixel (dr, dc) (offset of its centre from the disk's
 * centre) inside the aperture of radius r, from 16 x 16 sub-pixels where
 * the rim crosses it: the aperture's edge is round to a sixteenth of a
 * pixel, not a staircase. A staircase makes the probe anisotropic (square
 * symmetric), which a turned window (scan_rotation) turns against the
 * object: where the scan undersamples the CoM (the probe passes spatial
 * frequencies above the scan's Nyquist), that tilted the fitted angle by
 * up to 1.6 degrees at 15 mrad, +-100 A, 0.4 A steps. */
static double aperture_cover(double dr, double dc, double r) {
  double d = hypot(dr, dc);
  if (d <= r - 0.75) return 1;
  if (d >= r + 0.75) return 0;
  int in = 0;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      double y = dr + ((double)i + 0.5) / 16 - 0.5, x = dc + ((double)j + 0.5) / 16 - 0.5;
      in += y * y + x * x <= r * r;
    }
  return in / 256.0;
}

static sl_code synthetic_prepare(sl_node *n, sl_error *err) {
  synthetic_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  sl_code rc = config_resolve(n, &s->cfg, err);
  if (rc) {
    free(s);
    return rc;
  }
  n->state = s;
  const synthetic_config *c = &s->cfg;
  int64_t h = c->h, w = c->w, hw = h * w;
  s->probe = fftw_malloc((size_t)hw * sizeof(fftw_complex));
  s->phi = malloc((size_t)(c->oh * c->ow) * sizeof(double));
  if (c->remap) s->spline = malloc((size_t)(c->oh * c->ow) * sizeof(double));
  s->trans = fftw_malloc((size_t)(c->oh * c->ow) * sizeof(fftw_complex));
  fftw_complex *tmp = fftw_malloc((size_t)hw * sizeof(fftw_complex));
  if (!s->probe || !s->phi || !s->trans || !tmp || (c->remap && !s->spline)) {
    fftw_free(tmp);
    synthetic_release(n);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for the probe and object");
  }
  /* Aperture in detector coordinates, stored in DFT order (ifftshift). */
  double cr = (double)(h - 1) / 2, cc = (double)(w - 1) / 2, r2 = c->radius * c->radius;
  for (int64_t r = 0; r < h; r++)
    for (int64_t col = 0; col < w; col++) {
      double dr = (double)r - cr, dc = (double)col - cc, d2 = dr * dr + dc * dc;
      int64_t ky = (r - h / 2 + h) % h, kx = (col - w / 2 + w) % w;
      double *p = tmp[ky * w + kx];
      double cover = aperture_cover(dr, dc, c->radius), chi = c->defocus * d2 / r2;
      p[0] = cover * cos(chi);
      p[1] = -cover * sin(chi);
    }
  sl_fftw_planner_thread_safe();
  fftw_plan inv =
      fftw_plan_dft_2d((int)h, (int)w, tmp, s->probe, FFTW_BACKWARD, FFTW_ESTIMATE);
  s->fwd = fftw_plan_dft_2d((int)h, (int)w, s->probe, tmp, FFTW_FORWARD, FFTW_ESTIMATE);
  if (!inv || !s->fwd) {
    if (inv) fftw_destroy_plan(inv);
    fftw_free(tmp);
    synthetic_release(n);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan a %lldx%lld transform",
                   (long long)h, (long long)w);
  }
  fftw_execute(inv);
  fftw_destroy_plan(inv);
  fftw_free(tmp);
  double norm = 1.0 / (double)hw;
  for (int64_t i = 0; i < hw; i++) s->probe[i][0] *= norm, s->probe[i][1] *= norm;
  make_object(s);
  if (c->remap) {
    memcpy(s->spline, s->phi, (size_t)(c->oh * c->ow) * sizeof *s->spline);
    spline_coefficients(s->spline, c->oh, c->ow);
  }
  return SL_OK;
}

/* ---- kernel ------------------------------------------------------------------ */

typedef struct synthetic_job {
  const sl_kernel_args *a;
  const synthetic_state *s;
} synthetic_job;

static double phi_at(const synthetic_state *s, double y, double x) {
  int64_t u = (int64_t)floor(y), v = (int64_t)floor(x), ow = s->cfg.ow;
  double fy = y - (double)u, fx = x - (double)v;
  const double *p = s->phi + u * ow + v;
  return (1 - fy) * ((1 - fx) * p[0] + fx * p[1]) + fy * ((1 - fx) * p[ow] + fx * p[ow + 1]);
}

/* Cubic B-spline weights of the samples at -1, 0, 1, 2 for offset t in [0, 1). */
static inline void spline_weights(double t, double w[4]) {
  double u = 1 - t, t2 = t * t, t3 = t2 * t;
  w[0] = u * u * u / 6;
  w[1] = (3 * t3 - 6 * t2 + 4) / 6;
  w[2] = (-3 * t3 + 3 * t2 + 3 * t + 1) / 6;
  w[3] = t3 / 6;
}

/* phi at (y, x) from its cubic B-spline coefficients (spline_coefficients):
 * the turned window reads the object between its pixels at every pixel.
 * Against A times the unrotated CoM (test_scan_rotation, columns of sigma
 * 1.6 pixels, largest difference over the rms CoM): bilinear 17%, cubic
 * convolution 2.1%, this B-spline 0.6% (most of it the window's corners,
 * which see other parts of the object). */
static double phi_spline(const synthetic_state *s, double y, double x) {
  double fy0 = floor(y), fx0 = floor(x), wy[4], wx[4], v = 0;
  int64_t ow = s->cfg.ow;
  spline_weights(y - fy0, wy), spline_weights(x - fx0, wx);
  const double *p = s->spline + ((int64_t)fy0 - 1) * ow + ((int64_t)fx0 - 1);
  for (int a = 0; a < 4; a++, p += ow)
    v += wy[a] * (wx[0] * p[0] + wx[1] * p[1] + wx[2] * p[2] + wx[3] * p[3]);
  return v;
}

#define STORE(T)                                        \
  {                                                     \
    T *o = (T *)j->a->out[0] + p * hw;                  \
    for (int64_t q = 0; q < hw; q++) {                  \
      double k = poisson(&rng, lam[q] * scale);         \
      o[q] = (T)(k < maxv ? k : maxv);                  \
    }                                                   \
  }

static void synthetic_range(void *ctx, int64_t begin, int64_t end, int worker) {
  synthetic_job *j = ctx;
  const synthetic_state *s = j->s;
  const synthetic_config *c = &s->cfg;
  int64_t h = c->h, w = c->w, hw = h * w, ow = c->ow;
  /* The worker's lent scratch (synthetic_cost's per_worker_bytes, 64-byte
   * aligned: FFTW's new-array execute needs the plan's SIMD alignment). */
  char *scratch = sl_worker_scratch(j->a, worker);
  fftw_complex *psi = (fftw_complex *)scratch, *spec = psi + hw;
  double *lam = (double *)(spec + hw);
  double *phase = j->a->out[1], *com = j->a->out[2];
  double maxv = c->dtype == SL_U8 ? 254.0 : c->dtype == SL_U16 ? 65534.0 : 4294967294.0;
  double cr = (double)(h - 1) / 2, cc = (double)(w - 1) / 2;
  for (int64_t p = begin; p < end; p++) {
    int64_t gp = j->a->pos_start + p;
    double yc = c->oy0 + (double)(gp / c->cols) * c->step;
    double xc = c->ox0 + (double)(gp % c->cols) * c->step;
    double fy0 = floor(yc), fx0 = floor(xc);
    int64_t y0 = (int64_t)fy0, x0 = (int64_t)fx0;
    int exact = !c->remap && yc == fy0 && xc == fx0;
    /* Exit wave in DFT order: window pixel (y, x) is offset (dy, dx) from the
     * probe centre, dy in [-h/2, (h-1)/2]; the object there is at offset
     * A^-1 (dy, dx) from the position (the window is turned over it). */
    for (int64_t y = 0; y < h; y++) {
      int64_t dy = y < (h + 1) / 2 ? y : y - h;
      for (int64_t x = 0; x < w; x++) {
        int64_t dx = x < (w + 1) / 2 ? x : x - w;
        double tr, ti;
        if (exact) {
          const double *t = s->trans[(y0 + dy) * ow + (x0 + dx)];
          tr = t[0], ti = t[1];
        } else if (c->remap) {
          double ph = phi_spline(s, yc + c->inv[0][0] * (double)dy + c->inv[0][1] * (double)dx,
                             xc + c->inv[1][0] * (double)dy + c->inv[1][1] * (double)dx);
          tr = cos(ph), ti = sin(ph);
        } else {
          double ph = phi_at(s, yc + (double)dy, xc + (double)dx);
          tr = cos(ph), ti = sin(ph);
        }
        const double *pr = s->probe[y * w + x];
        psi[y * w + x][0] = pr[0] * tr - pr[1] * ti;
        psi[y * w + x][1] = pr[0] * ti + pr[1] * tr;
      }
    }
    fftw_execute_dft(s->fwd, psi, spec);
    /* Intensity, fftshifted into detector layout; centre of mass. */
    for (int64_t r = 0; r < h; r++) {
      int64_t ky = (r - h / 2 + h) % h;
      for (int64_t col = 0; col < w; col++) {
        int64_t kx = (col - w / 2 + w) % w;
        const double *z = spec[ky * w + kx];
        lam[r * w + col] = z[0] * z[0] + z[1] * z[1];
      }
    }
    double sum = 0, sr = 0, sc = 0;
    for (int64_t r = 0; r < h; r++) {
      double row = 0;
      for (int64_t col = 0; col < w; col++) {
        double v = lam[r * w + col];
        row += v;
        sc += ((double)col - cc) * v;
      }
      sum += row;
      sr += ((double)r - cr) * row;
    }
    /* phase and com_expected: declared concats, out[] at the chunk's place */
    phase[p] = phi_at(s, yc, xc);
    com[2 * p] = sum > 0 ? sr / sum : 0;
    com[2 * p + 1] = sum > 0 ? sc / sum : 0;
    double scale = sum > 0 ? c->dose / sum : 0;
    xoshiro rng;
    rng_init(&rng, c->seed, (uint64_t)gp);
    switch (c->dtype) {
      case SL_U8: STORE(uint8_t) break;
      case SL_U16: STORE(uint16_t) break;
      default: STORE(uint32_t) break;
    }
  }
}
#undef STORE

static sl_code synthetic_cpu(sl_kernel_args *a) {
  const synthetic_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "synthetic_4dstem: kernel called before prepare");
  if (!a->worker_scratch)
    return sl_fail(a->err, SL_ERR_INTERNAL, "synthetic_4dstem: called without the workers' scratch");
  synthetic_job j = {a, s};
  a->backend->ops->parallel_for(a->backend, a->pos_count, 1, synthetic_range, &j);
  return SL_OK;
}

static const sl_port_def synthetic_outputs[] = {
    {"frames", "streamed [R, C | H, W] Poisson counts (u8/u16/u32)", "counts", false},
    {"phase", "whole f64 [R, C]: object phase at each probe centre", "rad", false},
    {"com_expected", "whole f64 [R, C, 2]: noiseless centre of mass (row, col) relative to "
                     "the detector centre ((H-1)/2, (W-1)/2), in detector coordinates (after "
                     "scan_rotation / scan_transpose)", "pixels", false},
};

const sl_node_desc sl_node_synthetic_4dstem = {
    .type = "synthetic_4dstem",
    .doc = "Simulated 4D-STEM data of a seeded weak phase object: probe from an aperture with "
           "defocus, exit-wave FFT, Poisson counts; with ground-truth phase and centre of mass.",
    SL_PARAMS_DESC(synthetic_4dstem_params),
    .outputs = synthetic_outputs, .n_outputs = SL_COUNT_OF(synthetic_outputs),
    .infer = synthetic_infer, .cost = synthetic_cost,
    .prepare = synthetic_prepare, .release = synthetic_release,
    .kernel = {[SL_BACKEND_CPU] = synthetic_cpu},
    .host = true,
    .combine = {SL_COMBINE_NONE, SL_COMBINE_CONCAT, SL_COMBINE_CONCAT},
    .scan_image_outputs = 0x6u /* phase, com_expected */,
};
