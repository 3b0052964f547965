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
 * nodes/common/fourier_integral.h), is Fourier transformed; a gradient field
 * is parallel to k at every frequency, so the field rotated by theta is
 * scored by its transverse part T(k) = k^ x F_theta(k) (unit k: every
 * frequency counts by its power, not by |k|^2). Rotation is linear, so
 * sum_k w(k) |T(k)|^2 = cos^2 uu + 2 cos sin uv + sin^2 vv is a 2x2
 * quadratic form, minimised exactly (1-degree grid over [0, 180), then
 * golden section to 1e-4 degree). The noise of the CoM is white and
 * isotropic, so it adds the same transverse power sigma^2 at every
 * frequency and angle: it does not move the minimum, it only hides it. The
 * weights are Wiener's: w = s / (s + sigma^2), s = max(0, P - 2 sigma^2)
 * the signal power estimated from the rotation-invariant power P of both
 * components, sigma^2 the mean transverse power at the current optimum
 * (an upper bound of the noise: the field is curl free there). A first pass
 * with w = 1 gives the angle that gives sigma^2; three reweighted passes
 * follow. The noise-only frequencies drop out and the lattice reflections,
 * where the signal is, decide the angle. */
#ifndef SL_DPC_FIT_H
#define SL_DPC_FIT_H

#include <stdint.h>

#include "engine/core/status.h"

typedef struct sl_dpc_fit {
  int64_t rows, cols, pr, pc; /* field and mirrored sizes */
  void *spec[4];              /* fftw_complex[pr * pc]: c_r, c_c, each odd in rows / in cols */
  double *weight;             /* [pr * pc] */
  double *ring;               /* [2 (max(pr, pc) + 1)]: power sums and counts per ring of |k| */
  void *fwd;                  /* fftw_plan */
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
 * and only the residuals are evaluated (Wiener weights from that angle). */
void sl_dpc_fit_run(sl_dpc_fit *f, const double *cr, const double *cc, const double *given,
                    sl_dpc_fit_result *r);

/* The minimum of c^2 uu + 2 c s uv + s^2 vv over angles in [0, 180): degrees. */
double sl_dpc_quad_argmin(const sl_dpc_quad *q);
double sl_dpc_quad_at(const sl_dpc_quad *q, double deg);

#endif
