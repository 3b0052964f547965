/* subtract: x - y with y subtracted at every position, against a float64
 * reference (f64 exact, f32 correctly rounded from the f64 difference),
 * streamed in chunks on 1 and 2 threads and whole; a stream of scalars
 * against y of one element; type and shape errors; cost. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NH_RNG_SEED 0x94D049BB133111EBULL
#include "tests/unit/basic_node_checks.h"

extern const sl_node_desc sl_node_subtract;

static double random_value(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 512 - 256; }

/* out[p, e] against x[p, e] - y[e] in f64: equal for f64 (one correctly
 * rounded subtraction); for f32 within half an f32 ulp of the f64 value. */
static void check_difference(sl_dtype t, const void *x, const double *y, const void *out,
                             int64_t npos, int64_t item) {
  for (int64_t p = 0; p < npos; p++)
    for (int64_t e = 0; e < item; e++) {
      int64_t i = p * item + e;
      double xi = t == SL_F32 ? ((const float *)x)[i] : ((const double *)x)[i];
      double want = xi - y[e];
      if (t == SL_F64) {
        if (((const double *)out)[i] != want) fail_msg("f64 [%lld, %lld]", (long long)p, (long long)e);
      } else {
        double got = ((const float *)out)[i];
        if (fabs(got - want) > fabs(want) * FLT_EPSILON / 2 + FLT_MIN)
          fail_msg("f32 [%lld, %lld]: %.9g, want %.17g", (long long)p, (long long)e, got, want);
      }
    }
}

static void check_streamed(sl_dtype t, int64_t chunk, int threads) {
  const int64_t rows = 4, cols = 3, h = 5, w = 6, npos = rows * cols, item = h * w;
  int64_t dx[4] = {rows, cols, h, w}, dy[2] = {h, w};
  sl_tensor_desc in[2] = {sl_desc_make(t, 4, dx, 2), sl_desc_make(SL_F64, 2, dy, 0)};
  sl_node n;
  node_make_ok(&n, &sl_node_subtract, NULL, 0, in, 2);
  assert_int_equal(n.out[0].dtype, t);
  assert_int_equal(n.out[0].stream_rank, 2);
  void *x = malloc((size_t)(npos * item) * sl_dtype_size(t));
  for (int64_t i = 0; i < npos * item; i++) {
    if (t == SL_F32) ((float *)x)[i] = (float)random_value();
    else ((double *)x)[i] = random_value();
  }
  double y[30];
  for (int e = 0; e < 30; e++) y[e] = random_value();
  void *out = calloc((size_t)(npos * item), sl_dtype_size(t));
  run_chunked(&n, x, y, out, npos, chunk, threads);
  check_difference(t, x, y, out, npos, item);
  free(x);
  free(out);
  node_free(&n);
}

static void test_streamed(void **st) {
  check_streamed(SL_F64, 1, 1);
  check_streamed(SL_F64, 5, 2);
  check_streamed(SL_F32, 1, 2);
  check_streamed(SL_F32, 12, 1);
}

static void test_whole(void **st) {
  int64_t d[2] = {3, 4};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 2, d, 0), sl_desc_make(SL_F64, 2, d, 0)};
  sl_node n;
  node_make_ok(&n, &sl_node_subtract, NULL, 0, in, 2);
  double x[12], y[12], out[12];
  for (int i = 0; i < 12; i++) x[i] = random_value(), y[i] = random_value();
  const void *ins[2] = {x, y};
  void *outs[1] = {out};
  sl_error e;
  assert_int_equal(run_whole(&n, ins, 2, outs, &e), SL_OK);
  for (int i = 0; i < 12; i++) assert_true(out[i] == x[i] - y[i]);
  node_free(&n);
}

/* A stream of scalars: y is a tensor of one element. */
static void test_scalar_items(void **st) {
  int64_t dx[1] = {7}, dy[1] = {1};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 1, dx, 1), sl_desc_make(SL_F64, 1, dy, 0)};
  sl_node n;
  node_make_ok(&n, &sl_node_subtract, NULL, 0, in, 2);
  double x[7] = {1, 2, 3, 4, 5, 6, 7}, y = 0.5, out[7];
  run_chunked(&n, x, &y, out, 7, 3, 1);
  for (int i = 0; i < 7; i++) assert_true(out[i] == x[i] - 0.5);
  node_free(&n);
}

static void test_errors(void **st) {
  int64_t dx[3] = {4, 5, 6}, dy[2] = {5, 6}, dz[2] = {6, 5};
  sl_tensor_desc ok_x = sl_desc_make(SL_F32, 3, dx, 1), ok_y = sl_desc_make(SL_F64, 2, dy, 0);
  sl_tensor_desc in[2] = {sl_desc_make(SL_U16, 3, dx, 1), ok_y};
  node_make_refused(&sl_node_subtract, NULL, 0, in, 2, "input 'x' expects f32 or f64");
  in[0] = ok_x, in[1] = sl_desc_make(SL_F32, 2, dy, 0);
  node_make_refused(&sl_node_subtract, NULL, 0, in, 2, "input 'y' expects a whole f64 tensor");
  in[1] = sl_desc_make(SL_F64, 3, dx, 1);
  node_make_refused(&sl_node_subtract, NULL, 0, in, 2, "input 'y' expects a whole f64 tensor");
  in[1] = sl_desc_make(SL_F64, 2, dz, 0); /* same count, other shape */
  node_make_refused(&sl_node_subtract, NULL, 0, in, 2, "must have the shape of one item of 'x'");
}

static void test_cost_and_descriptor(void **st) {
  int64_t dx[3] = {4, 5, 6}, dy[2] = {5, 6};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F32, 3, dx, 1), sl_desc_make(SL_F64, 2, dy, 0)};
  sl_node n;
  node_make_ok(&n, &sl_node_subtract, NULL, 0, in, 2);
  sl_node_cost c = cost_of(&n, 3);
  assert_int_equal(c.bytes_read, 3 * 30 * 4 + 30 * 8);
  assert_int_equal(c.bytes_written, 3 * 30 * 4);
  assert_int_equal(c.ops, 3 * 30);
  node_free(&n);
  check_registered(&sl_node_subtract, "subtract");
  assert_int_equal(sl_node_subtract.n_inputs, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_streamed),
      cmocka_unit_test(test_whole),
      cmocka_unit_test(test_scalar_items),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
