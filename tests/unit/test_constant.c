/* constant: every element equals the value in the chosen dtype, for shapes
 * of 1 to 8 axes; shape and dtype errors; the cost is the tensor's bytes. */
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

extern const sl_node_desc sl_node_constant;

static void test_f64_default(void **st) {
  sl_node n;
  const kv o[] = {{"shape", "[3, 4, 5]"}, {"value", "-2.75"}};
  node_make_ok(&n, &sl_node_constant, o, 2, NULL, 0);
  assert_int_equal(n.out[0].dtype, SL_F64); /* the default dtype */
  assert_int_equal(n.out[0].rank, 3);
  assert_int_equal(n.out[0].stream_rank, 0);
  assert_int_equal(n.out[0].dims[0] * n.out[0].dims[1] * n.out[0].dims[2], 60);
  double y[60];
  memset(y, 0xAB, sizeof y);
  void *out[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&n, NULL, 0, out, &e), SL_OK);
  for (int i = 0; i < 60; i++) assert_true(y[i] == -2.75);
  node_free(&n);
}

static void test_f32_rounds_the_value(void **st) {
  sl_node n;
  const kv o[] = {{"shape", "[7]"}, {"value", "0.1"}, {"dtype", "f32"}};
  node_make_ok(&n, &sl_node_constant, o, 3, NULL, 0);
  assert_int_equal(n.out[0].dtype, SL_F32);
  float y[7] = {0};
  void *out[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&n, NULL, 0, out, &e), SL_OK);
  const float tenth = 0.1f; /* the f32 nearest to 0.1 */
  for (int i = 0; i < 7; i++) assert_memory_equal(&y[i], &tenth, sizeof tenth);
  node_free(&n);
}

static void test_eight_axes(void **st) {
  sl_node n;
  const kv o[] = {{"shape", "[2, 1, 2, 1, 2, 1, 2, 3]"}, {"value", "7"}};
  node_make_ok(&n, &sl_node_constant, o, 2, NULL, 0);
  assert_int_equal(n.out[0].rank, 8);
  assert_int_equal(sl_desc_elems(&n.out[0]), 48);
  double y[48];
  void *out[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&n, NULL, 0, out, &e), SL_OK);
  for (int i = 0; i < 48; i++) assert_true(y[i] == 7.0);
  node_free(&n);
}

static void test_errors(void **st) {
  const kv empty[] = {{"shape", "[]"}};
  node_make_refused(&sl_node_constant, empty, 1, NULL, 0, "needs 1 to 8 axes");
  const kv nine[] = {{"shape", "[1, 1, 1, 1, 1, 1, 1, 1, 1]"}};
  node_make_refused(&sl_node_constant, nine, 1, NULL, 0, "needs 1 to 8 axes");
  const kv zero[] = {{"shape", "[4, 0]"}};
  node_make_refused(&sl_node_constant, zero, 1, NULL, 0, "axis 1 must be positive");
  const kv u8[] = {{"shape", "[4]"}, {"dtype", "u8"}};
  node_make_refused(&sl_node_constant, u8, 2, NULL, 0, "must be one of f32|f64");
  const kv text[] = {{"shape", "[4]"}, {"value", "one"}};
  node_make_refused(&sl_node_constant, text, 2, NULL, 0, "expects a number");
}

static void test_cost_and_descriptor(void **st) {
  sl_node n;
  const kv o[] = {{"shape", "[10, 3]"}, {"dtype", "f32"}};
  node_make_ok(&n, &sl_node_constant, o, 2, NULL, 0);
  sl_node_cost c = cost_of(&n, 1);
  assert_int_equal(c.bytes_written, 30 * 4);
  assert_int_equal(c.bytes_read, 0);
  assert_int_equal(c.ops, 30);
  node_free(&n);
  check_registered(&sl_node_constant, "constant");
  assert_int_equal(sl_node_constant.n_inputs, 0);
  assert_int_equal(sl_node_constant.n_outputs, 1);
  assert_true(sl_node_constant.host);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f64_default),
      cmocka_unit_test(test_f32_rounds_the_value),
      cmocka_unit_test(test_eight_axes),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
