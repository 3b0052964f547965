/* The rotation fit of dpc: least transverse (curl) power of the rotated
 * centre-of-mass field, in Fourier space, weighted by signal to noise.
 *
 * Why not the mean squared curl by finite differences (REFERENCE.md 4): the
 * curl is a second derivative, a high-pass, so at low dose its sum is
 * dominated by shot noise at the highest scan frequencies, and on atomic
 * columns narrower than a scan step the central differences of a sampled
 * gradient are not curl free (an O(h^2) residual as large as the signal);
 * both bias the angle by tens of degrees at 1e3 electrons per frame.
 *
 * Here: the field, extended by mirror images to 2R x 2C (the even
 * reflection of the phase: no wrap-around jump at the scan's edges, as
 * nodes/common/fourier_integral.h), is Fourier transformed (as R x C real
 * transforms, nodes/common/mirror_spectrum.h); a gradient field
 * is parallel to k at every frequency, so the field rotated by theta is
 * scored by its transverse part T(k) = k^ x F_theta(k) (unit k: every
 * frequency counts by its power, not by |k|^2). Rotation is linear, so
 * sum_k w(k) |T(k)|^2 = cos^2 uu + 2 cos sin uv + sin^2 vv is a 2x2
 * quadratic form, minimised exactly (in closed form: it is (uu + vv) / 2
 * + (uu - vv) / 2 cos 2 theta + uv sin 2 theta). The noise of the CoM is
 * white and isotropic, so it adds the same transverse power sigma^2 at
 * every frequency and angle: it does not move the minimum, it only hides
 * it. The
 * weights are Wiener's: w = s / (s + sigma^2), s = max(0, P - 2 sigma^2)
 * the signal power estimated from the rotation-invariant power P of both
 * (P = (|A|^2 + |B|^2) / 2, the mean over the angle of the rotated field's
 * power: the field at angle 0 alone made the weights follow the noise of uu
 * and pulled fits without signal towards 90 degrees)
 * components, sigma^2 the mean transverse power at the current optimum
 * (an upper bound of the noise: the field is curl free there). A first pass
 * with w = 1 gives the angle that gives sigma^2; three reweighted passes
 * follow. The noise-only frequencies drop out and the lattice reflections,
 * where the signal is, decide the angle.
 *
 * Cost: the weights are constant on each ring of |k|, so one pass over the
 * spectra sums the three coefficients of each form and the power per ring
 * and transpose; every reweighting is then a sum over rings, not over
 * frequencies. The pass runs over fixed blocks of column frequencies, each
 * with its own ring sums, added in block order: the same bits at any thread
 * count. */
#ifndef SL_DPC_FIT_H
#define SL_DPC_FIT_H

#include <math.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "nodes/common/mirror_spectrum.h"

struct sl_backend;

typedef struct sl_dpc_fit {
  int64_t rows, cols;
  sl_mirror ms;
  /* Mirror spectra [rows * cols] (sl_mirror_forward's layout): c_r odd in
   * rows, c_r odd in cols, c_c odd in rows, c_c odd in cols. */
  double *spec[4];
  int64_t rings;     /* rings of |k|: 2 max(rows, cols) + 1 */
  int64_t block;     /* column frequencies per block of the pass */
  int64_t blocks;    /* ceil((cols + 1) / block) */
  double *ring_sums; /* [blocks][rings][8]: per transpose uu, uv, vv, power; block 0 holds
                        the totals after the pass */
  double *ring_count; /* [rings]: frequencies of the 2R x 2C spectrum per ring */
} sl_dpc_fit;

/* The quadratic form of the weighted transverse power in (cos, sin). */
typedef struct sl_dpc_quad {
  double uu, uv, vv;
} sl_dpc_quad;

typedef struct sl_dpc_fit_result {
  double angle[2];    /* degrees in [0, 180), per transpose (0, 1) */
  double residual[2]; /* transverse fraction of the weighted power at the angle: 0 curl free,
                         0.5 no information */
  double sharpness;   /* 1 - (smallest / largest eigenvalue) of the chosen form: 0 flat */
  double noise;       /* sigma^2 over the mean power: 0 noiseless */
} sl_dpc_fit_result;

int64_t sl_dpc_fit_bytes(int64_t rows, int64_t cols);
int64_t sl_dpc_fit_ops(int64_t rows, int64_t cols);

sl_code sl_dpc_fit_init(sl_dpc_fit *f, int64_t rows, int64_t cols, sl_error *err);
void sl_dpc_fit_free(sl_dpc_fit *f);

/* Fits the angle of the field (cr, cc) [rows * cols], detector coordinates,
 * for both transposes; with `given` (non-NULL) the angle is *given for both
 * and only the residuals are evaluated (Wiener weights from that angle).
 * The work is shared among the workers of b (NULL: this thread); the
 * result does not depend on their number. */
void sl_dpc_fit_run(sl_dpc_fit *f, struct sl_backend *b, const double *cr, const double *cc,
                    const double *given, sl_dpc_fit_result *r);

/* The fit from the ring sums alone, already in f->ring_sums (block 0, the
 * totals: [rings][SL_DPC_RING_SUMS], shaders/cuda/stem/dpc_math.h): the
 * second half of sl_dpc_fit_run, for a caller that summed the rings
 * elsewhere (dpc on CUDA sums them on the device). */
void sl_dpc_fit_solve(sl_dpc_fit *f, const double *given, sl_dpc_fit_result *r);

/* After sl_dpc_fit_run: the mirror spectra of the field rotated into scan
 * coordinates, c_scan = T^t R(-theta) c_det: x_r of its row component odd
 * in rows, x_c of its column component odd in columns (the gradient
 * spectra sl_fourier_integral_from_spectra takes), each [rows * cols]. */
void sl_dpc_fit_rotated_spectra(const sl_dpc_fit *f, double theta_deg, int t, double *x_r,
                                double *x_c);

/* An angle in degrees wrapped to (-180, 180]. */
static inline double sl_dpc_wrap_deg(double d) {
  d = fmod(d, 360.0);
  if (d <= -180) d += 360;
  if (d > 180) d -= 360;
  return d;
}

/* The minimum of c^2 uu + 2 c s uv + s^2 vv over angles in [0, 180): degrees. */
double sl_dpc_quad_argmin(const sl_dpc_quad *q);
double sl_dpc_quad_at(const sl_dpc_quad *q, double deg);

#endif
