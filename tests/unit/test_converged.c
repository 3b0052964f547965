/* converged: the flag against the definition max |a - b| <= tolerance on
 * tensors built here (differences just inside and just outside, NaN, f32
 * and f64), the boundary itself, and the refusals. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/basic_node_checks.h"

extern const sl_node_desc sl_node_converged;

static uint8_t flag_of(const double *a, const double *b, int64_t n, const char *tol) {
  int64_t dims[1] = {n};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 1, dims, 0), sl_desc_make(SL_F64, 1, dims, 0)};
  const kv o[] = {{"tolerance", tol}};
  sl_node node;
  node_make_ok(&node, &sl_node_converged, o, 1, in, 2);
  assert_int_equal(node.out[0].dtype, SL_U8);
  assert_int_equal(sl_desc_elems(&node.out[0]), 1);
  uint8_t flag = 7;
  const void *ins[2] = {a, b};
  void *outs[1] = {&flag};
  sl_error e;
  assert_int_equal(run_whole(&node, ins, 2, outs, &e), SL_OK);
  node_free(&node);
  return flag;
}

static void test_f64_flag(void **st) {
  (void)st;
  enum { N = 1000 };
  double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  for (int i = 0; i < N; i++) a[i] = b[i] = sin(i) * 100;
  assert_int_equal(flag_of(a, b, N, "0"), 1); /* equal tensors, tolerance 0 */
  b[517] += 0.25;                              /* one element off by exactly 0.25 */
  assert_int_equal(flag_of(a, b, N, "0.25"), 1);
  assert_int_equal(flag_of(a, b, N, "0.2499"), 0);
  b[517] = a[517] - 3;                         /* the sign of the difference does not matter */
  assert_int_equal(flag_of(a, b, N, "2.999"), 0);
  assert_int_equal(flag_of(a, b, N, "3"), 1);
  b[3] = NAN;                                  /* a NaN never agrees */
  assert_int_equal(flag_of(a, b, N, "1e300"), 0);
  free(a);
  free(b);
}

static void test_f32(void **st) {
  (void)st;
  int64_t dims[2] = {3, 4};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F32, 2, dims, 0), sl_desc_make(SL_F32, 2, dims, 0)};
  float a[12], b[12];
  for (int i = 0; i < 12; i++) a[i] = b[i] = (float)i * 0.25f; /* exact in f32 */
  b[11] = a[11] + 0.5f;
  const char *tols[] = {"0.5", "0.49"};
  const uint8_t want[] = {1, 0};
  for (int t = 0; t < 2; t++) {
    const kv o[] = {{"tolerance", tols[t]}};
    sl_node node;
    node_make_ok(&node, &sl_node_converged, o, 1, in, 2);
    uint8_t flag = 9;
    const void *ins[2] = {a, b};
    void *outs[1] = {&flag};
    sl_error e;
    assert_int_equal(run_whole(&node, ins, 2, outs, &e), SL_OK);
    assert_int_equal(flag, want[t]);
    node_free(&node);
  }
}

static void test_refusals(void **st) {
  (void)st;
  int64_t d3[1] = {3}, d4[1] = {4};
  sl_tensor_desc f3 = sl_desc_make(SL_F64, 1, d3, 0), f4 = sl_desc_make(SL_F64, 1, d4, 0),
                 u3 = sl_desc_make(SL_U16, 1, d3, 0), s3 = sl_desc_make(SL_F64, 1, d3, 1),
                 g3 = sl_desc_make(SL_F32, 1, d3, 0);
  sl_tensor_desc shape[2] = {f3, f4}, type[2] = {f3, g3}, ints[2] = {u3, u3}, streamed[2] = {s3, s3};
  node_make_refused(&sl_node_converged, NULL, 0, shape, 2, "input 'b' expects a whole tensor of the type and shape");
  node_make_refused(&sl_node_converged, NULL, 0, type, 2, "input 'b' expects");
  node_make_refused(&sl_node_converged, NULL, 0, ints, 2, "input 'a' expects a whole f32 or f64");
  node_make_refused(&sl_node_converged, NULL, 0, streamed, 2, "input 'a' expects a whole f32 or f64");
  sl_tensor_desc ok[2] = {f3, f3};
  const kv neg[] = {{"tolerance", "-1"}};
  node_make_refused(&sl_node_converged, neg, 1, ok, 2, "'tolerance' must be a finite number >= 0");
}

static void test_descriptor(void **st) {
  (void)st;
  check_registered(&sl_node_converged, "converged");
  assert_true(sl_node_converged.host);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f64_flag),
      cmocka_unit_test(test_f32),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
