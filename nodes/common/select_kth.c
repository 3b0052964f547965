/* Quickselect (select_kth.h). */
#include "nodes/common/select_kth.h"

static void swapd(double *a, double *b) {
  double t = *a;
  *a = *b;
  *b = t;
}

double sl_select_kth(double *v, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (hi > lo) {
    int64_t mid = lo + (hi - lo) / 2;
    if (v[mid] < v[lo]) swapd(&v[mid], &v[lo]);
    if (v[hi] < v[lo]) swapd(&v[hi], &v[lo]);
    if (v[hi] < v[mid]) swapd(&v[hi], &v[mid]);
    double piv = v[mid];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < piv) i++;
      while (v[j] > piv) j--;
      if (i <= j) {
        swapd(&v[i], &v[j]);
        i++;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return v[k];
  }
  return v[k];
}

/* Inserts x into the sorted a[0..m), dropping a[m - 1] (x belongs before
 * it); OP is the order: < keeps the smallest, > the largest. */
#define KEEP_SORTED(NAME, OP)                                     \
  static void NAME(double *a, int64_t m, double x) {              \
    int64_t i = m - 1;                                            \
    while (i > 0 && x OP a[i - 1]) a[i] = a[i - 1], i--;          \
    a[i] = x;                                                     \
  }
KEEP_SORTED(keep_smallest, <)
KEEP_SORTED(keep_largest, >)
#undef KEEP_SORTED

void sl_select_extremes(const double *v, int64_t n, int64_t k, double *kth_smallest,
                        double *kth_largest) {
  double small[SL_SELECT_EXTREMES_MAX + 1], large[SL_SELECT_EXTREMES_MAX + 1];
  const int64_t m = k + 1;
  /* the first m values, sorted both ways */
  for (int64_t i = 0; i < m; i++) {
    keep_smallest(small, i + 1, v[i]);
    keep_largest(large, i + 1, v[i]);
  }
  /* Past them a value enters only when it beats the m-th kept: rarely, on
   * a pattern's pixels, so this is one pass of two compares. */
  for (int64_t i = m; i < n; i++) {
    if (v[i] < small[k]) keep_smallest(small, m, v[i]);
    if (v[i] > large[k]) keep_largest(large, m, v[i]);
  }
  *kth_smallest = small[k];
  *kth_largest = large[k];
}
