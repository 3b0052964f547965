/* The ADF matched filter of dpc: the rotation angle over the full turn (axis
 * and 180-degree branch at once) from the correlation of the rotated CoM
 * field with the gradient of the ADF image.
 *
 * Why: the CoM of a phase object is the gradient of the phase blurred by
 * the probe intensity, grad(phi * |P|^2), and the ADF image is the columns'
 * scattering strength blurred by the same |P|^2, so grad q is a template of
 * the field in scan coordinates, up to a positive scale (columns are bright
 * in ADF and have positive phase; the probe's transfer, which inverts the
 * iDPC contrast under large defocus, enters both, so their product keeps its
 * sign at every frequency). The field rotated by theta is cos A + sin B
 * (shaders/cuda/stem/dpc_math.h), so its correlation with grad q is
 *
 *   c(theta) = a cos theta + b sin theta,  maximal at theta = atan2(b, a),
 *
 * two sums over the scan per transpose, in closed form. Correlating with the
 * gradient (not the integrated phase with q) is the matched filter for white
 * CoM noise: it weights each frequency by |k|^2 Phi Q, its signal over its
 * noise, and needs no integration (no mirror extension, whose edges bias a
 * rotated field). The wrong handedness keeps a part no rotation aligns, so
 * the transpose with the larger |(a, b)| wins. The cross term
 * sum J grad(phi) . grad(q) (J: a quarter turn) is a sum of differences of
 * products and cancels but at the scan's edges, whatever the shapes of phi
 * and q, so the angle is unbiased to O(1 / scan side) even where the ADF
 * image and the phase differ in shape.
 *
 * The angle's uncertainty, to first order: the CoM noise n (variance s2 per
 * component, white) moves c by n . (J grad q), so
 * sigma_theta = sqrt(s2 sum |grad q|^2) / |(a, b)| radians; s2 comes from
 * the curl fit's noise estimate (nodes/stem/dpc_fit.h). The ADF image's own
 * noise is not counted (see docs/nodes/dpc.md, Validation, for how the
 * estimate compares with the errors measured). */
#ifndef SL_DPC_ADF_H
#define SL_DPC_ADF_H

#include <stdint.h>

#include "nodes/stem/dpc_fit.h"
#include "shaders/cuda/stem/dpc_math.h"

typedef struct sl_dpc_adf_fit {
  double angle[2];    /* degrees in (-180, 180], per transpose: the maximum of c(theta) */
  double strength[2]; /* |(a, b)|: c at its maximum */
  double sigma[2];    /* degrees: the angle's standard uncertainty (INFINITY: no signal) */
} sl_dpc_adf_fit;

/* The totals of the rows' sums (sl_dpc_adf_row), added in row order into
 * totals[SL_DPC_ADF_SUMS]. */
void sl_dpc_adf_totals(const double *sums_of_row, int64_t rows, double *totals);

/* The fit from the totals; s2: the CoM noise variance per component and
 * scan position. */
void sl_dpc_adf_solve(const double *totals, double s2, sl_dpc_adf_fit *r);

/* The CoM noise variance per component and position from the curl fit's
 * noise share of the mean power per frequency and the field's sum of
 * squares over `positions` (Parseval: the same share in real space). */
double sl_dpc_adf_noise(const sl_dpc_fit_result *fit, double f2, int64_t positions);

#endif
