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
