/* affine: y = scale * x + offset against a float64 reference, streamed in
 * chunks on 1 and 2 threads and whole, in f32 (within f32 rounding) and f64;
 * defaults give the identity; dtype errors; cost of a chunk and of a whole
 * tensor. */
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

#define NH_RNG_SEED 0x2545F4914F6CDD1DULL
#include "tests/unit/basic_node_checks.h"

extern const sl_node_desc sl_node_affine;

/* A value in [-1000, 1000) with a fractional part. */
static double random_value(void) { return (double)(rnd() >> 11) / 9007199254740992.0 * 2000 - 1000; }

/* y against scale * x + offset computed in f64: f64 results within an ulp
 * (the kernel may fuse the multiply-add), f32 results within the rounding of
 * the f32 inputs and the f32 multiply-add. */
static void check_against_reference(sl_dtype t, const void *x, const void *y, int64_t n,
                                    double scale, double offset) {
  for (int64_t i = 0; i < n; i++) {
    double xi = t == SL_F32 ? ((const float *)x)[i] : ((const double *)x)[i];
    double yi = t == SL_F32 ? ((const float *)y)[i] : ((const double *)y)[i];
    double want = scale * xi + offset;
    double eps = t == SL_F32 ? FLT_EPSILON : DBL_EPSILON;
    double tol = 4 * eps * (fabs(scale * xi) + fabs(offset) + fabs(want));
    if (fabs(yi - want) > tol) fail_msg("element %lld: %.17g, want %.17g", (long long)i, yi, want);
  }
}

static void *random_tensor(sl_dtype t, int64_t n) {
  void *x = malloc((size_t)n * sl_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    if (t == SL_F32) ((float *)x)[i] = (float)random_value();
    else ((double *)x)[i] = random_value();
  }
  return x;
}

static void check_streamed(sl_dtype t, int64_t npos, int64_t item, int64_t chunk, int threads) {
  int64_t d[2] = {npos, item};
  sl_tensor_desc in = sl_desc_make(t, 2, d, 1);
  sl_node n;
  const kv o[] = {{"scale", "-1.75"}, {"offset", "3.125"}};
  node_make_ok(&n, &sl_node_affine, o, 2, &in, 1);
  assert_int_equal(n.out[0].dtype, t);
  assert_int_equal(n.out[0].stream_rank, 1);
  assert_int_equal(n.out[0].dims[1], item);
  void *x = random_tensor(t, npos * item);
  void *y = calloc((size_t)(npos * item), sl_dtype_size(t));
  run_chunked(&n, x, NULL, y, npos, chunk, threads);
  check_against_reference(t, x, y, npos * item, -1.75, 3.125);
  free(x);
  free(y);
  node_free(&n);
}

static void test_streamed(void **st) {
  const sl_dtype types[] = {SL_F32, SL_F64};
  for (int k = 0; k < 2; k++) {
    check_streamed(types[k], 13, 57, 1, 1);
    check_streamed(types[k], 13, 57, 5, 2);
    /* more elements per chunk than one thread's share: the work is split */
    check_streamed(types[k], 4, 40000, 4, 2);
  }
}

static void test_whole(void **st) {
  int64_t d[2] = {6, 9};
  sl_tensor_desc in = sl_desc_make(SL_F64, 2, d, 0);
  sl_node n;
  const kv o[] = {{"scale", "0.5"}, {"offset", "-2"}};
  node_make_ok(&n, &sl_node_affine, o, 2, &in, 1);
  assert_int_equal(n.out[0].stream_rank, 0);
  double *x = random_tensor(SL_F64, 54), y[54];
  const void *ins[1] = {x};
  void *outs[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&n, ins, 1, outs, &e), SL_OK);
  check_against_reference(SL_F64, x, y, 54, 0.5, -2);
  free(x);
  node_free(&n);
}

/* scale 1 and offset 0 (the defaults) give x back exactly. */
static void test_defaults_are_identity(void **st) {
  int64_t d[1] = {100};
  sl_tensor_desc in = sl_desc_make(SL_F32, 1, d, 0);
  sl_node n;
  node_make_ok(&n, &sl_node_affine, NULL, 0, &in, 1);
  float *x = random_tensor(SL_F32, 100), y[100];
  const void *ins[1] = {x};
  void *outs[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&n, ins, 1, outs, &e), SL_OK);
  assert_memory_equal(x, y, sizeof y);
  free(x);
  node_free(&n);
}

static void test_errors(void **st) {
  int64_t d[2] = {4, 4};
  const sl_dtype bad[] = {SL_U8, SL_U16, SL_I32, SL_C64};
  for (int k = 0; k < 4; k++) {
    sl_tensor_desc in = sl_desc_make(bad[k], 2, d, 1);
    node_make_refused(&sl_node_affine, NULL, 0, &in, 1, "input 'x' expects f32 or f64");
  }
  sl_tensor_desc in = sl_desc_make(SL_F32, 2, d, 1);
  const kv text[] = {{"scale", "[1]"}};
  node_make_refused(&sl_node_affine, text, 1, &in, 1, "param 'scale' expects a number");
}

static void test_cost_and_descriptor(void **st) {
  int64_t d[3] = {10, 20, 30};
  sl_tensor_desc streamed = sl_desc_make(SL_F32, 3, d, 2), whole = sl_desc_make(SL_F64, 3, d, 0);
  sl_node n;
  node_make_ok(&n, &sl_node_affine, NULL, 0, &streamed, 1);
  sl_node_cost c = cost_of(&n, 7); /* 7 positions of 30 f32 */
  assert_int_equal(c.bytes_read, 7 * 30 * 4);
  assert_int_equal(c.bytes_written, 7 * 30 * 4);
  assert_int_equal(c.ops, 2 * 7 * 30);
  node_free(&n);
  node_make_ok(&n, &sl_node_affine, NULL, 0, &whole, 1);
  c = cost_of(&n, 1); /* the whole tensor */
  assert_int_equal(c.bytes_read, 6000 * 8);
  assert_int_equal(c.ops, 2 * 6000);
  node_free(&n);
  check_registered(&sl_node_affine, "affine");
  assert_int_equal(sl_node_affine.n_inputs, 1);
  assert_int_equal(sl_node_affine.n_outputs, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_streamed),
      cmocka_unit_test(test_whole),
      cmocka_unit_test(test_defaults_are_identity),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
