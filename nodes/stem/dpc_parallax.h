/* The parallax of the bright-field disk's segments, for dpc's 180-degree
 * branch where the centre of mass holds no signal (low dose, large defocus:
 * docs/nodes/dpc.md, "The parallax").
 *
 * Why: a segment of the BF disk at offset o (disk radii) sees the object
 * through a beam tilted by alpha o, so under a defocus df its image is the
 * object shifted by df alpha o / step scan steps, seen through the
 * scan-to-detector map: S_o(r) = I(r - M o) with M = kappa df A^-1
 * (A = R(theta) T^t, dpc's convention). The segment images shifted back and
 * summed (tilt-corrected BF, tcBF) keep the lattice with a transfer of
 * sin(chi), chi = pi lambda df |k|^2, near 1 where the CoM's (the probe
 * intensity's) has fallen to a few percent.
 *
 * 1. M = s R(p) T^t is found by the largest power of the shifted sum. The
 *    power is a sum over segment pairs of their cross-correlations at the
 *    lags M (o_i - o_j), so the correlations of a central window of the scan
 *    (at most SL_DPC_PARALLAX_WINDOW a side, means over the overlap) are computed
 *    once and every trial M costs one interpolated look-up per pair: a grid
 *    over s (shift steps of half a scan step at the outermost segment, up to
 *    a quarter of the window), p (the same half step) and t, then a local
 *    refinement. A lattice makes single cross-correlation peaks ambiguous
 *    (a shift of one period fits as well); the joint fit of all pairs
 *    through one linear map is not. Where a parallax is found, the fit is
 *    refined once more on correlations with each frequency weighted by its
 *    signal's share (1 - noise / power): at low dose most frequencies are
 *    shot noise.
 * 2. The same M comes from (A, df) and (-A, -df), and with a symmetric
 *    aperture and a phase object (A, df, phi) and (-A, -df, -phi) give the
 *    same frames: the data alone cannot tell the branch. The prior that
 *    columns have positive phase can, on a phase image whose transfer sign
 *    is known: the tcBF with each frequency's sign turned by
 *    sign(sin(chi)) for |df| = s step / alpha (which needs the probe's
 *    semi-angle, wavelength and the scan step) is the phase blurred by
 *    |sin(chi)| times the sign of df. Its skewness (columns are sparse
 *    positive peaks) gives the sign of df, and with it A:
 *    theta = -p (t = 0) or p (t = 1) for df < 0, plus 180 for df > 0.
 * 3. Without the probe's params the sign correction's one unknown,
 *    f_max = alpha step / lambda (the aperture's cut-off in cycles per scan
 *    step: chi = pi s |f|^2 / f_max), is estimated from the segments'
 *    spectra: a segment at offset o sees scan frequency f only where the
 *    disk shifted by g = M^T f / (s f_max) covers o (term e^{-i chi}) or
 *    the one shifted by -g does (term -e^{+i chi}), so each f_max predicts
 *    every segment's transfer T_o(f) up to the object's spectrum, and the
 *    one whose matched sum sum_f |sum_o w_o T_o^* S_o|^2 / sum_o w_o |T_o|^2
 *    (w_o: the inverse of the segment's Poisson variance), over the
 *    frequencies that hold power above the noise, stands highest above
 *    the noise's expectation (1 a frequency) is taken, with M's scale
 *    searched beside it. The sums are the same for (A, df) and (-A, -df):
 *    the branch is the skewness's as above. */
#ifndef SL_DPC_PARALLAX_H
#define SL_DPC_PARALLAX_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "shaders/cuda/stem/dpc_gain_bound.h"

/* The side of the scan window the parallax is fitted on, and of the one
 * its tilt-corrected image's skewness is taken on (positions; central). */
#define SL_DPC_PARALLAX_WINDOW 128
#define SL_DPC_PARALLAX_TCBF 256

/* The probe, for the defocus in Angstrom. */
typedef struct sl_dpc_probe {
  double semiangle;  /* rad */
  double wavelength; /* A */
  double step;       /* A, the scan step */
} sl_dpc_probe;

typedef struct sl_dpc_parallax_result {
  bool found;       /* a parallax above noise: gain over SL_DPC_PARALLAX_GAIN, s inside its range */
  double scale;     /* s: scan steps of shift per disk radius of offset */
  double angle;     /* p, degrees in [0, 360) */
  int transpose;    /* t */
  double gain;      /* power of the shifted sum over the plain sum's */
  double defocus;   /* |df|, A (s step / alpha) */
  double skewness;  /* of the sign-corrected tcBF over the scan's interior */
  double theta;     /* degrees in (-180, 180]: A's angle on the branch of the skewness's sign */
  double fmax;      /* alpha step / lambda, cycles per scan step: from the probe, or estimated (and
                       then s refined with it: the matched sums place the shifts more sharply) */
  bool fmax_estimated; /* no probe: fmax from the segments' spectra (then defocus is 0: unknown) */
  double fmax_energy;  /* estimated: the matched sum's excess over the noise at fmax, in frequencies */
  bool axis_only;      /* fitted for the axis alone: no sign correction (theta on the df < 0 branch, skewness
                          0, no f_max) */
  /* Wall seconds of the fit's steps (SL_DPC_PARALLAX_STEP_*; a device's
   * steps as its host waits for them), for the node's notes. */
  double step_seconds[5];
} sl_dpc_parallax_result;

/* The fit's steps, in sl_dpc_parallax_result.step_seconds: the plain
 * correlations, the search (grid and pattern), the refinement on the
 * weighted correlations, the estimate of f_max, the sign-corrected tcBF. */
enum {
  SL_DPC_PARALLAX_STEP_CORRELATE,
  SL_DPC_PARALLAX_STEP_SEARCH,
  SL_DPC_PARALLAX_STEP_REFINE,
  SL_DPC_PARALLAX_STEP_FMAX,
  SL_DPC_PARALLAX_STEP_TCBF
};

/* The range of f_max = alpha step / lambda an estimate searches (cycles per
 * scan step): 5-40 mrad, 0.1-4 A steps, 60-300 kV span about 0.01-8; below
 * 0.05 the BF disk's lunes are narrower than a frequency of a 128-wide
 * window, above 2 the scan undersamples the BF image fourfold. */
#define SL_DPC_FMAX_MIN 0.05
#define SL_DPC_FMAX_MAX 2.0

/* The least gain of a parallax that is taken as found. */
#define SL_DPC_PARALLAX_GAIN 1.05

typedef struct sl_dpc_parallax sl_dpc_parallax;

/* Bytes and operations of a fit of n segments on a rows x cols scan, and
 * the host scratch each worker needs (a padded window's transform). */
int64_t sl_dpc_parallax_bytes(int n, int64_t rows, int64_t cols);
int64_t sl_dpc_parallax_worker_bytes(int64_t rows, int64_t cols);
int64_t sl_dpc_parallax_ops(int n, int64_t rows, int64_t cols);
/* The operations of a fit of each kind: with the probe's params (as
 * sl_dpc_parallax_ops), without them (f_max estimated), or for the axis
 * alone (sl_dpc_parallax_fit's axis_only). */
typedef enum {
  SL_DPC_PARALLAX_OPS_PROBE,
  SL_DPC_PARALLAX_OPS_NO_PROBE,
  SL_DPC_PARALLAX_OPS_AXIS
} sl_dpc_parallax_ops_kind;
int64_t sl_dpc_parallax_ops_of(int n, int64_t rows, int64_t cols, sl_dpc_parallax_ops_kind kind);

/* The plans and buffers (FFTW planning is not thread safe: call where no
 * other thread plans, a node's prepare or its kernel on the executor's
 * thread). */
sl_code sl_dpc_parallax_new(int n, int64_t rows, int64_t cols, sl_dpc_parallax **out, sl_error *err);
/* Only what sl_dpc_parallax_fit itself needs (the geometry and the noise
 * weights' buffers), for steps that run elsewhere (a device): no plans, and
 * sl_dpc_parallax_run finds nothing with it. */
sl_code sl_dpc_parallax_new_driver(int n, int64_t rows, int64_t cols, sl_dpc_parallax **out, sl_error *err);
int64_t sl_dpc_parallax_driver_bytes(int64_t rows, int64_t cols);
/* Whether p has the host steps' plans and buffers (sl_dpc_parallax_new). */
bool sl_dpc_parallax_has_host_steps(const sl_dpc_parallax *p);
void sl_dpc_parallax_free(sl_dpc_parallax *p);

/* The scan rows the fit reads (the tilt-corrected image's band, which holds
 * the fit's window): [*row0, *row0 + *nrows). A caller that copies the
 * segments (dpc on CUDA reads them back) copies those rows only. */
void sl_dpc_parallax_band(int64_t rows, int64_t *row0, int64_t *nrows);

/* The windows of a fit on a rows x cols scan: the pairs' correlations are
 * of the central wr x wc positions, zero padded to pr x pc (so that no lag
 * up to lr, lc wraps around); the tilt-corrected image is of the central
 * tr x tc. The host's fit and a device's (dpc on CUDA) use the same. */
typedef struct sl_dpc_parallax_geometry {
  int64_t wr, wc; /* the fit's window */
  int64_t lr, lc; /* the largest lags kept: half the window */
  int64_t pr, pc; /* the padded transform */
  int64_t tr, tc; /* the tilt-corrected image's window */
} sl_dpc_parallax_geometry;
void sl_dpc_parallax_geometry_of(int64_t rows, int64_t cols, sl_dpc_parallax_geometry *g);

/* The segments a fit uses (those with pixels) and their geometry, from the
 * offsets. */
typedef struct sl_dpc_parallax_set {
  int used;     /* segments with pixels */
  int *index;   /* [used]: their numbers */
  double *pair; /* [pairs][2]: o_i - o_j, i < j over the used ones */
  int pairs;
  double omax;  /* largest |o| */
  double dmax;  /* largest |o_i - o_j| */
  double cell;  /* the segments' side, radii: the median nearest-neighbour distance */
  double *sum;  /* [used]: their counts over the fit's window (the plain correlation fills it) */
} sl_dpc_parallax_set;

/* The fit's heavy steps, where the segments are: on the host (FFTW and the
 * backend's workers, sl_dpc_parallax_run) or on a device (dpc on CUDA:
 * shaders/cuda/stem/dpc_parallax.h). sl_dpc_parallax_fit drives them, so
 * the decisions (search, threshold, refinement, branch) are one code. Each
 * returns false when it failed (out of memory; a device error, which the
 * device's context keeps). */
typedef struct sl_dpc_parallax_steps {
  void *ctx;
  /* The pairs' correlations over the window, X_ij(d) = the mean of
   * S_i(r + d) S_j(r) over the positions where both lie in the window
   * (means removed). weight NULL: plain, and then also set->sum and the
   * diagonal's sum, sum_i X_ii(0), into *diag; else [pr pc]: each
   * frequency of the products weighted. */
  bool (*correlate)(void *ctx, sl_dpc_parallax_set *set, const double *weight, double *diag);
  /* The window spectra's mean power per frequency over the used
   * segments, [pr pc]. */
  bool (*power)(void *ctx, const sl_dpc_parallax_set *set, double *power);
  /* The grid: for each s = half (k + 1), k < n_s, the largest objective
   * over p = 2 pi q / ceil(2 pi s / half) and t, the first of equal values
   * in the order (t, q): best[4 k ..] = value, s, p, t. */
  bool (*grid)(void *ctx, const sl_dpc_parallax_set *set, double half, int64_t n_s, double *best);
  /* The objective at M (sl_pair_power). */
  bool (*value)(void *ctx, const sl_dpc_parallax_set *set, const double m[4], double *v);
  /* The pattern search from (s, p), t fixed, best value v: steps of a
   * quarter scan step at the outermost segment, halved until 1e-4 of it. */
  bool (*pattern)(void *ctx, const sl_dpc_parallax_set *set, double half, double *s, double *p, int t, double *v);
  /* The skewness of the tcBF (segments shifted back by M o and summed),
   * each frequency's sign turned by sign(sin(chi_per_f2 |f|^2)) times the
   * segment's blur (sincs of set->cell along M^T f), over the interior
   * `margin` positions away from the edges (the whole window when that
   * leaves fewer than 3 a side). */
  bool (*tcbf)(void *ctx, const sl_dpc_parallax_set *set, const double *offsets, const double m[4],
               double chi_per_f2, int64_t margin, double *skewness);
  /* Without the probe: the matched sums' excess over the noise, energy[k]
   * for f_max = fmax[k] and M scaled by scale[k] (item 3 above), on the
   * window's spectra of the plain correlation. NULL where the steps cannot
   * (a device's: the caller runs the host's instead). */
  bool (*fmax)(void *ctx, const sl_dpc_parallax_set *set, const double *offsets, const double m[4], double s,
               const double *fmax, const double *scale, int n, double *energy);
} sl_dpc_parallax_steps;

/* The fit by `steps` on the geometry of p (its host buffers hold the
 * noise weights), offsets [n][3] on the host; false when a step failed
 * (r not found). probe NULL: unknown, f_max estimated (steps->fmax; r not
 * found where the steps have none or the estimate stands below the noise).
 * axis_only: M alone (steps 1 only; the caller knows the branch), without
 * the sign correction and the estimate of f_max (a third of a fit's time
 * without the probe's params). */
bool sl_dpc_parallax_fit(sl_dpc_parallax *p, const sl_dpc_parallax_steps *steps, const double *offsets,
                         const sl_dpc_probe *probe, bool axis_only, sl_dpc_parallax_result *r);

/* The fit: segments [n][seg_rows * cols] holding scan rows [seg_row0,
 * seg_row0 + seg_rows), at least the band (exact sums), offsets [n][3] (row
 * and column offset in disk radii, pixel count: bf_segments' outputs;
 * segments without pixels are left out). The transforms of the window and the
 * search are shared among the workers of b, each with
 * sl_dpc_parallax_worker_bytes of `scratch` (worker w's at scratch + w *
 * stride); with b or scratch NULL, this thread does all. The result does
 * not depend on the workers. probe NULL: unknown (as sl_dpc_parallax_fit). */
struct sl_backend;
void sl_dpc_parallax_run(sl_dpc_parallax *p, struct sl_backend *b, void *scratch, int64_t stride,
                         const uint64_t *segments, int64_t seg_row0, int64_t seg_rows, const double *offsets,
                         const sl_dpc_probe *probe, bool axis_only, sl_dpc_parallax_result *r);

/* An upper bound of the gain (sl_dpc_parallax_result.gain) any M can give
 * the segments (as sl_dpc_parallax_run's), in a pass over the fit's window
 * and no transform: the segments' powers plus the most their cross terms
 * can hold, (n - 1) times their signal's power (the power above the
 * Poisson noise's), over the plain sum's power, with allowances for the
 * estimate's noise and the fit's (dpc_parallax.c). Near 1 where no
 * parallax can gain: no object (bench_mask_cost.sh's acquisition: 1.31),
 * near focus (every segment the same image). A caller that takes a
 * parallax only above some gain skips the fit below it (dpc's axis
 * without the probe's params, at 1.5). INFINITY when out of memory or the
 * plain sum has no power. */
double sl_dpc_parallax_gain_bound(int n, int64_t rows, int64_t cols, const uint64_t *segments, int64_t seg_row0,
                                  int64_t seg_rows, const double *offsets);
/* The same over the fit's window alone (wr x wc of the geometry, its first
 * element at `window`; rows row_stride apart, segments segment_stride
 * apart). */
double sl_dpc_parallax_gain_bound_window(int n, int64_t wr, int64_t wc, const uint64_t *window, int64_t row_stride,
                                         int64_t segment_stride, const double *offsets);

/* The bound in two steps, the first of which a device also takes
 * (shaders/cuda/stem/dpc_gain_bound.h, the same bits): the window's
 * integer sums, exact in any order (segment_sums [n][SL_DPC_GAIN_SEGMENT_SUMS]:
 * the counts' sum and their squares' as 128 bits, zeros for a segment not
 * used; position_sums [wr wc]: over the used segments), then the bound
 * from them (as doubles: the numbers of a double's sums wherever those are
 * exact, below 2^53). */
void sl_dpc_parallax_gain_sums(int n, int64_t wr, int64_t wc, const uint64_t *window, int64_t row_stride,
                               int64_t segment_stride, const double *offsets, uint64_t *segment_sums,
                               uint64_t *position_sums);
double sl_dpc_parallax_gain_bound_of_sums(int n, int64_t npos, const uint64_t *segment_sums,
                                          const uint64_t *position_sums, const double *offsets);

/* The electron wavelength (A) at an accelerating voltage in kV, relativistic. */
double sl_electron_wavelength(double kilovolts);

#endif
