/* Loops (iterate nodes) beyond a fixed count: a stop condition read back
 * after each iteration (until:), the iteration index reaching kernels, and
 * a body that streams (passes over its own scan in every iteration). Each
 * result is checked against a closed form computed here, independently of
 * the engine, on the CPU backend and, where a device is, on CUDA (the loop's
 * carries and its stop flag then live in device memory). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "tests/unit/cuda_probe.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

/* The backend each test runs on: the CPU's (NULL: run_file's default),
 * then CUDA's where a device is. */
static const sl_backend_ops *g_ops;
static bool backend_at(int k) {
  g_ops = k == 1 && sl_test_cuda_available() ? sl_backend_ops_for(SL_BACKEND_CUDA) : NULL;
  return k == 0 || (k == 1 && g_ops);
}
#define FOR_EACH_BACKEND for (int be_ = 0; backend_at(be_); be_++)

/* x <- 0.5 x + 1 from x = 0 until two iterates agree within `tol`. */
static const char *k_halving_body =
    "pipeline: halving\n"
    "inputs: [x]\n"
    "nodes:\n"
    "  s: {type: affine, inputs: {x: inputs.x}, params: {scale: 0.5, offset: 1}}\n"
    "  c: {type: converged, inputs: {a: inputs.x, b: s.y}, params: {tolerance: \"${tol}\"}}\n"
    "params: {tol: {type: float, default: 1e-6}}\n"
    "outputs: {x: s.y, done: c.flag}\n";

static const char *k_halving =
    "pipeline: until\n"
    "params: {tol: {type: float, default: 1e-6}, most: {type: int, default: 200}}\n"
    "nodes:\n"
    "  init: {type: constant, params: {shape: [4], value: 0}}\n"
    "  loop:\n"
    "    iterate: halving.yaml\n"
    "    times: ${most}\n"
    "    until: done\n"
    "    params: {tol: \"${tol}\"}\n"
    "    inputs: {x: init.out}\n"
    "    carry: [x]\n"
    "outputs: {x: loop.x, done: loop.done}\n";

static void write_halving(char *path, size_t n) {
  char body[512];
  write_temp_file(body, sizeof body, "halving.yaml", k_halving_body);
  write_temp_file(path, n, "until.yaml", k_halving);
}

static void test_until_stops_when_converged(void **state) {
  (void)state;
  char path[512];
  write_halving(path, sizeof path);
  const double tols[] = {0.3, 1e-3, 1e-6, 1e-12};
  FOR_EACH_BACKEND for (size_t t = 0; t < sizeof tols / sizeof tols[0]; t++) {
    /* Closed form: iteration i (from 0) makes x_{i+1} = 2 - 2^-i from
     * x_i = 2 - 2^(1-i) (all exact in binary), a step of 2^-i; the loop
     * stops after the first iteration whose step is within tol. */
    int64_t last = 0;
    while (ldexp(1.0, (int)-last) > tols[t]) last++;
    int64_t ran = last + 1;
    char tol[32];
    snprintf(tol, sizeof tol, "%.17g", tols[t]);
    sl_setting set = {"tol", tol};
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, &set, 1, 0, 1, 0, g_ops, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    const double *x = output(&run, "x")->data;
    for (int k = 0; k < 4; k++) assert_true(x[k] == 2.0 - ldexp(1.0, (int)-last));
    assert_int_equal(((const uint8_t *)output(&run, "done")->data)[0], 1);
    assert_int_equal(run.result.node_calls[sl_graph_find(run.graph, "loop")], ran);
    const char *note = node_note(&run, "loop", "iterations");
    assert_non_null(note);
    char want[64];
    snprintf(want, sizeof want, "iterations: %lld of at most 200", (long long)ran);
    if (strncmp(note, want, strlen(want))) fail_msg("note '%s', expected '%s...'", note, want);
    assert_null(node_note(&run, "loop", "warning"));
    sl_run_free(&run);
  }
}

static void test_until_never_holds(void **state) {
  (void)state;
  char path[512];
  write_halving(path, sizeof path);
  FOR_EACH_BACKEND {
    /* A tolerance of 0 is never met before x reaches 2 exactly (53 steps);
     * 10 iterations is the most allowed: the loop says it stopped there. */
    sl_setting sets[2] = {{"tol", "0"}, {"most", "10"}};
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, sets, 2, 0, 1, 0, g_ops, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    assert_true(((const double *)output(&run, "x")->data)[0] == 2.0 - ldexp(1.0, -9));
    assert_int_equal(((const uint8_t *)output(&run, "done")->data)[0], 0);
    assert_int_equal(run.result.node_calls[sl_graph_find(run.graph, "loop")], 10);
    assert_non_null(node_note(&run, "loop", "warning"));
    assert_non_null(strstr(node_note(&run, "loop", "iterations"), "never held"));
    sl_run_free(&run);
    /* No iteration at all: the carried start comes out, the flag is 0. */
    sl_setting none[1] = {{"most", "0"}};
    rc = run_file(path, none, 1, 0, 1, 0, g_ops, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    assert_true(((const double *)output(&run, "x")->data)[3] == 0.0);
    assert_int_equal(((const uint8_t *)output(&run, "done")->data)[0], 0);
    sl_run_free(&run);
  }
}

/* acc <- acc + i in iteration i: after n iterations, n (n - 1) / 2. */
static void test_iteration_index_reaches_kernels(void **state) {
  (void)state;
  char body[512], path[512];
  write_temp_file(body, sizeof body, "count.yaml",
                  "pipeline: count\n"
                  "inputs: [acc]\n"
                  "nodes:\n"
                  "  i: {type: iteration}\n"
                  "  neg: {type: affine, inputs: {x: i.index}, params: {scale: -1}}\n"
                  "  add: {type: subtract, inputs: {x: inputs.acc, y: neg.y}}\n"
                  "outputs: {acc: add.out, last: i.index}\n");
  write_temp_file(path, sizeof path, "counting.yaml",
                  "pipeline: counting\n"
                  "params: {n: {type: int, default: 5}}\n"
                  "nodes:\n"
                  "  zero: {type: constant, params: {shape: [1], value: 0}}\n"
                  "  loop: {iterate: count.yaml, times: \"${n}\", inputs: {acc: zero.out}, carry: [acc]}\n"
                  "outputs: {acc: loop.acc, last: loop.last}\n");
  const int counts[] = {1, 2, 7, 100};
  FOR_EACH_BACKEND for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    char n[16];
    snprintf(n, sizeof n, "%d", counts[c]);
    sl_setting set = {"n", n};
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, &set, 1, 0, 1, 0, g_ops, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    double want = (double)counts[c] * (counts[c] - 1) / 2;
    assert_true(((const double *)output(&run, "acc")->data)[0] == want);
    assert_true(((const double *)output(&run, "last")->data)[0] == counts[c] - 1);
    sl_run_free(&run);
  }
}

/* A body that streams a table of P rows of I values (ramp: row p, column e
 * holds (p I + e) mod 1024) in every iteration, and moves its estimate c
 * halfway to the column means: c <- c + 0.5 mean_p(x - c). After k passes
 * c = m (1 - 2^-k), m the column means. A table of 1,000 rows fits one
 * chunk; on the CPU one of 100,000 (29.6 MB) is streamed in several every
 * iteration whatever the cache (a worker's share is at most 4 MiB), so the
 * sum's partials are merged across chunks inside each pass of the loop. */
static void streaming_body(int64_t P, int64_t min_chunks) {
  const int64_t I = 37;
  char body[1024], path[512], text[1024];
  snprintf(text, sizeof text,
           "pipeline: halfway\n"
           "inputs: [c]\n"
           "nodes:\n"
           "  rows: {type: ramp, params: {positions: [%lld], item_shape: [%lld], dtype: f64}}\n"
           "  dev: {type: subtract, inputs: {x: rows.out, y: inputs.c}}\n"
           "  total: {type: sum, inputs: {x: dev.out}}\n"
           "  step: {type: affine, inputs: {x: total.total}, params: {scale: %.17g}}\n"
           "  next: {type: subtract, inputs: {x: inputs.c, y: step.y}}\n"
           "outputs: {c: next.out}\n",
           (long long)P, (long long)I, -0.5 / (double)P);
  write_temp_file(body, sizeof body, "halfway.yaml", text);
  snprintf(text, sizeof text,
           "pipeline: passes\n"
           "params: {k: {type: int, default: 3}}\n"
           "nodes:\n"
           "  c0: {type: constant, params: {shape: [%lld], value: 0}}\n"
           "  loop: {iterate: halfway.yaml, times: \"${k}\", inputs: {c: c0.out}, carry: [c]}\n"
           "outputs: {c: loop.c}\n",
           (long long)I);
  write_temp_file(path, sizeof path, "passes.yaml", text);
  double m[64];
  for (int64_t e = 0; e < I; e++) {
    double s = 0;
    for (int64_t p = 0; p < P; p++) s += (double)((p * I + e) % 1024);
    m[e] = s / (double)P;
  }
  const int passes[] = {1, 2, 5};
  FOR_EACH_BACKEND for (size_t t = 0; t < sizeof passes / sizeof passes[0]; t++)
    for (int threads = 1; threads <= 2; threads++) {
      char k[16];
      snprintf(k, sizeof k, "%d", passes[t]);
      sl_setting set = {"k", k};
      sl_run run;
      sl_error err;
      sl_code rc = run_file(path, &set, 1, 0, threads, 0, g_ops, &run, &err);
      if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
      const double *c = output(&run, "c")->data;
      for (int64_t e = 0; e < I; e++) {
        double want = m[e] * (1 - ldexp(1.0, -passes[t]));
        if (fabs(c[e] - want) > 1e-9 * fabs(m[e]))
          fail_msg("P=%lld k=%d column %lld: %.17g, expected %.17g", (long long)P, passes[t], (long long)e, c[e],
                   want);
      }
      /* The body's plan streams its table in chunks, each iteration (on
       * the CPU; a device's chunk is sized by its memory, not a core's
       * cache: the H200 streams the 100,000 rows in one). */
      const sl_plan *bp = run.plan->nodes[sl_graph_find(run.graph, "loop")].body;
      assert_non_null(bp);
      assert_int_equal(bp->positions, P);
      if (!g_ops && bp->n_chunks < min_chunks)
        fail_msg("P=%lld: the body streamed %lld chunks, expected at least %lld", (long long)P,
                 (long long)bp->n_chunks, (long long)min_chunks);
      assert_true(run.result.measured_peak_bytes <= run.result.planned_peak_bytes);
      sl_run_free(&run);
    }
}

static void test_streaming_body(void **state) {
  (void)state;
  streaming_body(1000, 1);
  streaming_body(100000, 4);
}

static void expect_refused(const char *body_text, const char *loop_entry, const char *needle) {
  char body[512], path[512], text[1024];
  write_temp_file(body, sizeof body, "refused_body.yaml", body_text);
  snprintf(text, sizeof text,
           "pipeline: refused\n"
           "nodes:\n"
           "  init: {type: constant, params: {shape: [2], value: 0}}\n"
           "  loop: %s\n"
           "outputs: {x: loop.x}\n",
           loop_entry);
  write_temp_file(path, sizeof path, "refused.yaml", text);
  sl_run run;
  sl_error err;
  sl_code rc = run_file(path, NULL, 0, 0, 1, 0, NULL, &run, &err);
  if (rc != SL_ERR_PIPELINE || !strstr(err.msg, needle))
    fail_msg("expected a pipeline error with '%s', got %d '%s'", needle, rc, err.msg);
  sl_run_free(&run);
}

static void test_loop_errors(void **state) {
  (void)state;
  const char *body =
      "pipeline: b\ninputs: [x]\nnodes:\n"
      "  s: {type: affine, inputs: {x: inputs.x}}\n"
      "outputs: {x: s.y}\n";
  expect_refused(body, "{iterate: refused_body.yaml, times: 3, until: nothing, inputs: {x: init.out}}",
                 "is not an output of the body");
  expect_refused(body, "{iterate: refused_body.yaml, times: 3, until: x, inputs: {x: init.out}}",
                 "must be a one-element u8 flag");
  expect_refused(body, "{type: affine, until: x, inputs: {x: init.out}}",
                 "until: is only allowed on iterate nodes");
  expect_refused("pipeline: b\ninputs: [x]\nnodes:\n"
                 "  r: {type: ramp, params: {positions: [10], item_shape: [2], dtype: f64}}\n"
                 "outputs: {x: r.out}\n",
                 "{iterate: refused_body.yaml, times: 3, inputs: {x: init.out}}",
                 "is streamed; what leaves a loop is whole");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_until_stops_when_converged),
      cmocka_unit_test(test_until_never_holds),
      cmocka_unit_test(test_iteration_index_reaches_kernels),
      cmocka_unit_test(test_streaming_body),
      cmocka_unit_test(test_loop_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
