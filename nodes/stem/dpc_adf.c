/* The ADF matched filter of dpc. See dpc_adf.h for the method and why. */
#include "nodes/stem/dpc_adf.h"

#include <math.h>

void sl_dpc_adf_totals(const double *sums_of_row, int64_t rows, double *totals) {
  for (int k = 0; k < SL_DPC_ADF_SUMS; k++) totals[k] = 0;
  for (int64_t i = 0; i < rows; i++)
    for (int k = 0; k < SL_DPC_ADF_SUMS; k++) totals[k] += sums_of_row[i * SL_DPC_ADF_SUMS + k];
}

double sl_dpc_adf_noise(const sl_dpc_fit_result *fit, double f2, int64_t positions) {
  return positions > 0 ? fit->noise * f2 / (double)positions : 0;
}

void sl_dpc_adf_solve(const double *totals, double s2, sl_dpc_adf_fit *r) {
  for (int t = 0; t < 2; t++) {
    const double a = totals[t ? SL_DPC_ADF_A1 : SL_DPC_ADF_A0], b = totals[t ? SL_DPC_ADF_B1 : SL_DPC_ADF_B0];
    const double m = hypot(a, b);
    double deg = m > 0 ? atan2(b, a) * 180.0 / M_PI : 0;
    if (deg <= -180) deg += 360;
    r->angle[t] = deg;
    r->strength[t] = m;
    r->sigma[t] = m > 0 ? sqrt(s2 * totals[SL_DPC_ADF_G2]) / m * 180.0 / M_PI : INFINITY;
  }
}
