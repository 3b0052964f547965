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

#endif
