/* iteration: the output is the iteration index the executor passes in the
 * kernel's args, in both dtypes, for indices up to 2^24 (exact in f32);
 * outside a loop it is 0. (test_exec_loops.c checks the index a real loop
 * passes.) */
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

extern const sl_node_desc sl_node_iteration;

static void run_at(sl_node *n, int64_t it, void *out) {
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  sl_error e;
  a.node = n, a.pos_count = 1, a.n_chunks = 1, a.err = &e, a.iteration = it, a.out[0] = out;
  assert_int_equal(n->desc->kernel[SL_BACKEND_CPU](&a), SL_OK);
}

static void test_index(void **st) {
  (void)st;
  const int64_t its[] = {0, 1, 2, 99, 1 << 24};
  sl_node n64, n32;
  const kv f32[] = {{"dtype", "f32"}};
  node_make_ok(&n64, &sl_node_iteration, NULL, 0, NULL, 0);
  node_make_ok(&n32, &sl_node_iteration, f32, 1, NULL, 0);
  assert_int_equal(n64.out[0].dtype, SL_F64);
  assert_int_equal(n32.out[0].dtype, SL_F32);
  assert_int_equal(sl_desc_elems(&n64.out[0]), 1);
  for (size_t i = 0; i < sizeof its / sizeof its[0]; i++) {
    double d = -1;
    float f = -1;
    run_at(&n64, its[i], &d);
    run_at(&n32, its[i], &f);
    assert_true(d == (double)its[i]);
    assert_true(f == (float)its[i]);
  }
  node_free(&n64);
  node_free(&n32);
}

static void test_descriptor(void **st) {
  (void)st;
  check_registered(&sl_node_iteration, "iteration");
  const kv bad[] = {{"dtype", "u8"}};
  node_make_refused(&sl_node_iteration, bad, 1, NULL, 0, "must be one of f32|f64");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_index),
      cmocka_unit_test(test_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
