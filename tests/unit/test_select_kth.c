/* select_kth: sl_select_kth and sl_select_extremes against a sorted copy
 * (qsort, the definition of "the value a sort puts at index k"), on data
 * with many ties and without, in order, reversed and shuffled, for every k
 * the callers use; sl_select_extremes leaves its input as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nodes/common/select_kth.h"
#include "tests/unit/test_rng.h"

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* n values of one of four kinds: distinct uniforms, a few levels (ties),
 * ascending, descending. */
static void fill(double *v, int64_t n, int kind) {
  for (int64_t i = 0; i < n; i++)
    v[i] = kind == 0   ? urand() * 1000 - 500
           : kind == 1 ? (double)(rng() % 5)
           : kind == 2 ? (double)i * 0.5
                       : (double)(n - i);
}

static void test_against_sort(void **state) {
  (void)state;
  const int64_t sizes[] = {1, 2, 3, 17, 33, 65, 100, 1000, 36864};
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (int kind = 0; kind < 4; kind++) {
      const int64_t n = sizes[si];
      double *v = malloc((size_t)n * sizeof *v), *sorted = malloc((size_t)n * sizeof *v),
             *work = malloc((size_t)n * sizeof *v);
      assert_non_null(v), assert_non_null(sorted), assert_non_null(work);
      fill(v, n, kind);
      memcpy(sorted, v, (size_t)n * sizeof *v);
      qsort(sorted, (size_t)n, sizeof *sorted, by_value);
      for (int64_t k = 0; k < n && k < SL_SELECT_EXTREMES_MAX; k++) {
        double lo = -1e300, hi = 1e300;
        memcpy(work, v, (size_t)n * sizeof *v);
        sl_select_extremes(work, n, k, &lo, &hi);
        assert_memory_equal(work, v, (size_t)n * sizeof *v); /* untouched */
        assert_true(lo == sorted[k]);
        assert_true(hi == sorted[n - 1 - k]);
        /* the two quickselects it replaces in disk_fit give the same */
        assert_true(sl_select_kth(work, n, k) == lo);
        assert_true(sl_select_kth(work, n, n - 1 - k) == hi);
      }
      free(v), free(sorted), free(work);
    }
}

/* A pattern's robust bounds as disk_fit takes them: the 17th smallest and
 * largest, with a few hot and dead pixels that must not be the bounds. */
static void test_robust_bounds(void **state) {
  (void)state;
  enum { N = 192 * 192 };
  static double v[N];
  for (int i = 0; i < N; i++) v[i] = 10 + urand();
  for (int i = 0; i < 16; i++) v[(i * 7919) % N] = 1e9, v[(i * 104729 + 5) % N] = -1e9;
  double lo, hi;
  sl_select_extremes(v, N, 16, &lo, &hi);
  assert_true(lo >= 10 && lo < 11);
  assert_true(hi >= 10 && hi < 11);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_sort),
      cmocka_unit_test(test_robust_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
