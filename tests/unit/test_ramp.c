/* ramp: element e of position p is (p * item + e) mod 1024 for every chunk
 * size and thread count, in f32 and f64, across the wrap at 1024; its hash
 * values; the
 * stream and item axes of the output; axis errors; the cost per position. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/basic_node_checks.h"
#include "tests/unit/run_support.h"

extern const sl_node_desc sl_node_ramp;

/* The reference value: ramp_expected (run_support.h), from integer arithmetic. */
static void check_ramp(const char *dtype, sl_dtype want) {
  /* 5 x 7 positions of 3 x 50 elements: the values wrap at 1024 several times */
  const int64_t npos = 35, item = 150;
  sl_node n;
  const kv o[] = {{"positions", "[5, 7]"}, {"item_shape", "[3, 50]"}, {"dtype", dtype}};
  node_make_ok(&n, &sl_node_ramp, o, 3, NULL, 0);
  const sl_tensor_desc *d = &n.out[0];
  assert_int_equal(d->dtype, want);
  assert_int_equal(d->rank, 4);
  assert_int_equal(d->stream_rank, 2);
  assert_int_equal(d->dims[0], 5);
  assert_int_equal(d->dims[1], 7);
  assert_int_equal(d->dims[2], 3);
  assert_int_equal(d->dims[3], 50);
  size_t bytes = (size_t)(npos * item) * sl_dtype_size(want);
  void *y = malloc(bytes);
  const int64_t chunks[] = {1, 4, 35};
  for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
    for (int threads = 1; threads <= 2; threads++) {
      memset(y, 0xCD, bytes);
      run_chunked(&n, NULL, NULL, y, npos, chunks[c], threads);
      for (int64_t p = 0; p < npos; p++)
        for (int64_t e = 0; e < item; e++) {
          double got = want == SL_F32 ? ((const float *)y)[p * item + e]
                                      : ((const double *)y)[p * item + e];
          if (got != ramp_expected(p, item, e))
            fail_msg("%s chunk %lld: [%lld, %lld] = %g", dtype, (long long)chunks[c],
                     (long long)p, (long long)e, got);
        }
    }
  free(y);
  node_free(&n);
}

static void test_f32(void **st) { check_ramp("f32", SL_F32); }
static void test_f64(void **st) { check_ramp("f64", SL_F64); }

/* values: hash: MurmurHash3's fmix64 of the flat index (its published
 * constants), top 10 bits, for every chunk size and thread count; and
 * noise-like: every one of the 1024 values occurs about equally often. */
static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

static void test_hash(void **st) {
  const int64_t npos = 64, item = 1024;
  sl_node n;
  const kv o[] = {{"positions", "[64]"}, {"item_shape", "[1024]"}, {"dtype", "f64"}, {"values", "hash"}};
  node_make_ok(&n, &sl_node_ramp, o, 4, NULL, 0);
  double *y = malloc((size_t)(npos * item) * sizeof *y);
  const int64_t chunks[] = {1, 7, 64};
  for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
    for (int threads = 1; threads <= 2; threads++) {
      run_chunked(&n, NULL, NULL, y, npos, chunks[c], threads);
      for (int64_t i = 0; i < npos * item; i++)
        if (y[i] != (double)(fmix64((uint64_t)i) >> 54)) fail_msg("hash chunk %lld: [%lld] = %g", (long long)chunks[c], (long long)i, y[i]);
    }
  int count[1024] = {0};
  for (int64_t i = 0; i < npos * item; i++) count[(int)y[i]]++;
  double chi2 = 0; /* 64 expected per value; 1023 degrees of freedom */
  for (int v = 0; v < 1024; v++) chi2 += (count[v] - 64.0) * (count[v] - 64.0) / 64.0;
  assert_true(chi2 < 1250); /* p < 1e-4 for a uniform source */
  free(y);
  node_free(&n);
  const kv bad[] = {{"values", "noise"}};
  node_make_refused(&sl_node_ramp, bad, 1, NULL, 0, "must be one of ramp|hash");
}

/* Enough elements per chunk that the backend splits the work between threads. */
static void test_large_chunk_two_threads(void **st) {
  const int64_t npos = 3, item = 70000;
  sl_node n;
  const kv o[] = {{"positions", "[3]"}, {"item_shape", "[70000]"}};
  node_make_ok(&n, &sl_node_ramp, o, 2, NULL, 0);
  assert_int_equal(n.out[0].dtype, SL_F32); /* the default dtype */
  float *y = malloc((size_t)(npos * item) * sizeof *y);
  run_chunked(&n, NULL, NULL, y, npos, npos, 2);
  for (int64_t p = 0; p < npos; p++)
    for (int64_t e = 0; e < item; e++) assert_true(y[p * item + e] == ramp_expected(p, item, e));
  free(y);
  node_free(&n);
}

static void test_errors(void **st) {
  const kv deep[] = {{"positions", "[2, 2, 2, 2, 2]"}, {"item_shape", "[2, 2, 2, 2]"}};
  node_make_refused(&sl_node_ramp, deep, 2, NULL, 0, "more than 8 axes");
  const kv zero[] = {{"item_shape", "[0]"}};
  node_make_refused(&sl_node_ramp, zero, 1, NULL, 0, "param 'item_shape': axis 0");
  const kv none[] = {{"positions", "[]"}};
  node_make_refused(&sl_node_ramp, none, 1, NULL, 0, "param 'positions' needs 1 to 8 axes");
  const kv i32[] = {{"dtype", "i32"}};
  node_make_refused(&sl_node_ramp, i32, 1, NULL, 0, "must be one of f32|f64");
}

static void test_cost_and_descriptor(void **st) {
  sl_node n;
  const kv o[] = {{"positions", "[100]"}, {"item_shape", "[8, 4]"}, {"dtype", "f64"}};
  node_make_ok(&n, &sl_node_ramp, o, 3, NULL, 0);
  sl_node_cost c = cost_of(&n, 10);
  assert_int_equal(c.bytes_written, 10 * 32 * 8);
  assert_int_equal(c.ops, 10 * 32);
  assert_int_equal(c.bytes_read, 0);
  node_free(&n);
  check_registered(&sl_node_ramp, "ramp");
  assert_int_equal(sl_node_ramp.n_inputs, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f32),
      cmocka_unit_test(test_f64),
      cmocka_unit_test(test_large_chunk_two_threads),
      cmocka_unit_test(test_hash),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
