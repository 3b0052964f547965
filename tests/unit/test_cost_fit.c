/* Fitting a rate to calibrate's samples (engine/plan/cost_fit.c) on samples
 * whose answer is known: an exact setup plus a rate, times that do not grow
 * with the work (a setup alone, not a rate through the origin), and times
 * that grow (the rate kept); the least work a setup was fitted on; no
 * cost per call from as many samples as terms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "engine/plan/cost_fit.h"

static sl_cost_sample op_sample(int64_t calls, int64_t ops, double seconds) {
  sl_cost_sample s;
  memset(&s, 0, sizeof s);
  snprintf(s.type, sizeof s.type, "x");
  s.calls = calls, s.cost.ops = ops, s.seconds = seconds;
  return s;
}

static double estimate(const sl_cost_rate *r, int64_t calls, int64_t ops) {
  sl_cost_profile p;
  memset(&p, 0, sizeof p);
  assert_true(sl_cost_profile_set_rate(&p, r));
  sl_node_cost c = {.ops = ops};
  return sl_cost_estimate(&p, r->type, &c, calls, false);
}

/* The rate "x" of per-op samples s[0..n). */
static sl_cost_rate fitted(const sl_cost_sample *s, int n) {
  sl_cost_rate r;
  memset(&r, 0, sizeof r);
  snprintf(r.type, sizeof r.type, "x");
  r.per_op = true; /* as calibrate's fit_rates sets it */
  assert_true(sl_cost_fit_rate(s, n, true, 1e-6, 0, &r));
  return r;
}

/* seconds = 2 ms once + 1 ns an op, exactly: the fit finds both, and the
 * least work it saw. */
static void test_setup_and_rate(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(1, 1000000, 0.003), op_sample(4, 1000000, 0.003),
                              op_sample(9, 16000000, 0.018), op_sample(35, 16000000, 0.018)};
  const sl_cost_rate r = fitted(s, 4);
  assert_true(fabs(r.run_seconds - 0.002) < 1e-9);
  assert_true(fabs(r.seconds_per_unit - 1e-9) < 1e-15);
  assert_true(r.call_seconds < 1e-12);
  assert_true(r.run_work_least == 1000000);
}

/* The H200's preview on calibrate's two sizes (32 and 256 frames of 192 x
 * 192: 1.18 M and 9.44 M ops) took 2.3-3.4 ms either way. A rate through the
 * origin priced a 24 x 20 run's preview (0.49 M ops; measured 1.4-1.5 ms)
 * at 0.14 ms; a setup alone prices it at the samples' time. */
static void test_flat_times_are_a_setup(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(1, 9437184, 0.002294), op_sample(1, 1179648, 0.002349),
                              op_sample(1, 9437184, 0.002515), op_sample(1, 1179648, 0.003397)};
  const sl_cost_rate r = fitted(s, 4);
  assert_true(r.seconds_per_unit == 0);
  assert_true(r.run_seconds > 0.0023 && r.run_seconds < 0.0034);
  const double small = estimate(&r, 1, 491520);
  assert_true(small > 0.0023 && small < 0.0034);
}

/* Times that grow with the work, with noise: the rate stays, the setup
 * alone is not taken. */
static void test_growing_times_keep_the_rate(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(1, 45298483, 0.000075), op_sample(4, 45298480, 0.000153),
                              op_sample(9, 724775726, 0.000724), op_sample(35, 724775724, 0.001398)};
  const sl_cost_rate r = fitted(s, 4);
  assert_true(r.seconds_per_unit > 0);
  const double big = estimate(&r, 35, 724775724);
  assert_true(big > 0.0007 && big < 0.0028);
}

/* Two samples pass through a setup with a rate, or a cost per call with a
 * rate, exactly, whatever their noise. calibrate's two samples of
 * affine/f64 on the dev VM, one of them 3 us slow, gave a cost per call of
 * 10.8 us, and iterate_until's 31 calls of a few ops (about 1 us each) an
 * estimate of 0.34 ms for its 0.04 ms loop. The noise now goes into a
 * setup, paid once a run. */
static void test_two_samples_no_call_cost(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(1, 32768, 15e-6), op_sample(4, 2097152, 310e-6)};
  const sl_cost_rate r = fitted(s, 2);
  assert_true(r.call_seconds == 0);
  assert_true(estimate(&r, 31, 31 * 16) < 31e-6);
  const double big = estimate(&r, 4, 2097152);
  assert_true(big > 0.25e-3 && big < 0.37e-3);
}

/* ... and two samples that take the same time whatever their work are a
 * setup alone (test_flat_times_are_a_setup with half its samples). */
static void test_two_flat_samples_are_a_setup(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(1, 9437184, 0.002294), op_sample(1, 1179648, 0.002515)};
  const sl_cost_rate r = fitted(s, 2);
  assert_true(r.seconds_per_unit == 0);
  const double small = estimate(&r, 1, 491520);
  assert_true(small > 0.0022 && small < 0.0026);
}

/* Samples of 0 s (a loop whose time calibrate's body estimates account
 * for), here of the same work, so that a setup alone competes: they say
 * nothing costs anything, and the generic call cost stands. */
static void test_nothing_measured_keeps_the_call_cost(void **state) {
  (void)state;
  const sl_cost_sample s[] = {op_sample(4, 32768, 0), op_sample(16, 32768, 0)};
  const sl_cost_rate r = fitted(s, 2);
  assert_true(r.call_seconds == 1e-6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_setup_and_rate),
      cmocka_unit_test(test_flat_times_are_a_setup),
      cmocka_unit_test(test_growing_times_keep_the_rate),
      cmocka_unit_test(test_two_samples_no_call_cost),
      cmocka_unit_test(test_two_flat_samples_are_a_setup),
      cmocka_unit_test(test_nothing_measured_keeps_the_call_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
