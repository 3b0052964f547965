/* The k-th smallest of an array of doubles in linear expected time
 * (quickselect, median-of-three pivots), for medians and quantiles where a
 * sort would take n log n: disk_fit's levels, dpc's parallax weights (the
 * median power of 36,864 frequencies at a 128-wide window: qsort took a
 * few ms of the fit's refinement). The value is the one a sort would put
 * at index k, whatever the order it leaves. */
#ifndef SL_SELECT_KTH_H
#define SL_SELECT_KTH_H

#include <stdint.h>

/* k-th smallest (0-based, k < n) of v[0..n); reorders v. No NaN in v. */
double sl_select_kth(double *v, int64_t n, int64_t k);

/* The k-th smallest and the k-th largest (0-based from either end: k = 0 is
 * the minimum and the maximum) of v[0..n), in one pass that leaves v as it
 * is: k < SL_SELECT_EXTREMES_MAX and k < n. The values two calls of
 * sl_select_kth (k and n - 1 - k) would give, without the copy they
 * reorder (disk_fit's robust bounds: 0.4 of a 192 x 192 fit's 1.3 ms). */
#define SL_SELECT_EXTREMES_MAX 64
void sl_select_extremes(const double *v, int64_t n, int64_t k, double *kth_smallest,
                        double *kth_largest);

#endif
