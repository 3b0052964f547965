/* A PNG's value range (engine/exec/sink_png.c): sl_values_range_on split
 * over a pool of 4 workers gives the smallest and largest finite values
 * planted at known places in large arrays (f64 with NaN and infinities
 * around them, i32, u64), whatever the split: at the first, a middle and
 * the last index; below the split's size it is the one-thread fold;
 * values already in lo and hi are kept when wider; an array without a
 * finite value leaves them as they are. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/exec/sinks.h"

enum { N = 300007 };

static sl_backend *pool(void) {
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(4, &b, &err), SL_OK);
  return b;
}

static void test_f64_planted(void **state) {
  (void)state;
  sl_backend *b = pool();
  double *x = malloc(N * sizeof *x);
  const int64_t at[] = {0, N / 2 + 3, N - 1};
  for (int lo_at = 0; lo_at < 3; lo_at++)
    for (int hi_at = 0; hi_at < 3; hi_at++) {
      if (lo_at == hi_at) continue;
      for (int64_t i = 0; i < N; i++) x[i] = (double)(i % 1000) * 0.001; /* 0 .. 0.999 */
      for (int64_t i = 5; i < N; i += 9973) x[i] = i % 2 ? NAN : (i % 3 ? INFINITY : -INFINITY);
      x[at[lo_at]] = -7.25, x[at[hi_at]] = 11.5;
      double lo = INFINITY, hi = -INFINITY;
      sl_values_range_on(b, SL_F64, x, N, &lo, &hi);
      assert_true(lo == -7.25 && hi == 11.5);
      /* wider values already there are kept */
      lo = -100, hi = 100;
      sl_values_range_on(b, SL_F64, x, N, &lo, &hi);
      assert_true(lo == -100 && hi == 100);
    }
  /* no finite value: lo and hi left as they are */
  for (int64_t i = 0; i < N; i++) x[i] = i % 2 ? NAN : INFINITY;
  double lo = 3, hi = 4;
  sl_values_range_on(b, SL_F64, x, N, &lo, &hi);
  assert_true(lo == 3 && hi == 4);
  /* small: one thread's fold, the same answer */
  for (int64_t i = 0; i < 1000; i++) x[i] = (double)i;
  lo = INFINITY, hi = -INFINITY;
  sl_values_range_on(b, SL_F64, x, 1000, &lo, &hi);
  assert_true(lo == 0 && hi == 999);
  free(x);
  sl_cpu_backend_ops.destroy(b);
}

static void test_integers_planted(void **state) {
  (void)state;
  sl_backend *b = pool();
  int32_t *s = malloc(N * sizeof *s);
  uint64_t *u = malloc(N * sizeof *u);
  for (int64_t i = 0; i < N; i++) s[i] = (int32_t)(i % 500) - 250, u[i] = (uint64_t)(i % 777) + 10;
  s[N - 1] = -2000000000, s[12345] = 2000000000;
  u[0] = 3, u[N / 3] = (uint64_t)1 << 52;
  double lo = INFINITY, hi = -INFINITY;
  sl_values_range_on(b, SL_I32, s, N, &lo, &hi);
  assert_true(lo == -2000000000.0 && hi == 2000000000.0);
  lo = INFINITY, hi = -INFINITY;
  sl_values_range_on(b, SL_U64, u, N, &lo, &hi);
  assert_true(lo == 3.0 && hi == (double)((uint64_t)1 << 52));
  free(s);
  free(u);
  sl_cpu_backend_ops.destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f64_planted),
      cmocka_unit_test(test_integers_planted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
