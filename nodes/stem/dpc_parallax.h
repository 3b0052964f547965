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
 *    theta = -p (t = 0) or p (t = 1) for df < 0, plus 180 for df > 0. */
#ifndef SL_DPC_PARALLAX_H
#define SL_DPC_PARALLAX_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

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
} sl_dpc_parallax_result;

/* The least gain of a parallax that is taken as found. */
#define SL_DPC_PARALLAX_GAIN 1.05

typedef struct sl_dpc_parallax sl_dpc_parallax;

/* Bytes and operations of a fit of n segments on a rows x cols scan, and
 * the host scratch each worker needs (a padded window's transform). */
int64_t sl_dpc_parallax_bytes(int n, int64_t rows, int64_t cols);
int64_t sl_dpc_parallax_worker_bytes(int64_t rows, int64_t cols);
int64_t sl_dpc_parallax_ops(int n, int64_t rows, int64_t cols);

/* The plans and buffers (FFTW planning is not thread safe: call from a
 * node's prepare). */
sl_code sl_dpc_parallax_new(int n, int64_t rows, int64_t cols, sl_dpc_parallax **out, sl_error *err);
void sl_dpc_parallax_free(sl_dpc_parallax *p);

/* The scan rows the fit reads (the tilt-corrected image's band, which holds
 * the fit's window): [*row0, *row0 + *nrows). A caller that copies the
 * segments (dpc on CUDA reads them back) copies those rows only. */
void sl_dpc_parallax_band(int64_t rows, int64_t *row0, int64_t *nrows);

/* The fit: segments [n][seg_rows * cols] holding scan rows [seg_row0,
 * seg_row0 + seg_rows), at least the band (exact sums), offsets [n][3] (row
 * and column offset in disk radii, pixel count: bf_segments' outputs;
 * segments without pixels are left out). The transforms of the window and the
 * search are shared among the workers of b, each with
 * sl_dpc_parallax_worker_bytes of `scratch` (worker w's at scratch + w *
 * stride); with b or scratch NULL, this thread does all. The result does
 * not depend on the workers. */
struct sl_backend;
void sl_dpc_parallax_run(sl_dpc_parallax *p, struct sl_backend *b, void *scratch, int64_t stride,
                         const uint64_t *segments, int64_t seg_row0, int64_t seg_rows, const double *offsets,
                         const sl_dpc_probe *probe, sl_dpc_parallax_result *r);

/* The electron wavelength (A) at an accelerating voltage in kV, relativistic. */
double sl_electron_wavelength(double kilovolts);

#endif
