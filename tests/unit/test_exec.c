/* Executor: results against independent closed forms, chunking invariance,
 * measured peak <= planned peak, iteration with carried state, the budget
 * refusing before any allocation, and repeated runs (leaks are caught by
 * LeakSanitizer in the sanitizer build). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "nodes/registry.h"
#include "engine/exec/run.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

static const char *k_chain =
    "pipeline: chain\n"
    "params:\n"
    "  scale: {type: float, default: 1}\n"
    "nodes:\n"
    "  r: {type: ramp, params: {positions: [37, 29], item_shape: [300], dtype: f64}}\n"
    "  a: {type: affine, inputs: {x: r.out}, params: {scale: \"${scale}\", offset: 0.5}}\n"
    "  s: {type: sum, inputs: {x: a.y}}\n"
    "  e: {type: affine, inputs: {x: s.total}, params: {scale: 2}}\n"
    "outputs: {total: s.total, doubled: e.y, scaled: a.y}\n";

static void test_chain_matches_closed_form(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "chain.yaml", k_chain);
  const int64_t positions = 37 * 29, item = 300;
  double *expect = calloc((size_t)item, sizeof *expect);
  for (int64_t p = 0; p < positions; p++)
    for (int64_t e = 0; e < item; e++) expect[e] += (double)((p * item + e) % 1024) + 0.5;
  int64_t chunks[] = {1, 7, 64, 1073, 0};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    for (int threads = 1; threads <= 2; threads++) {
      sl_run run;
      sl_error err;
      sl_code rc = run_file(path, NULL, 0, chunks[c], threads, 0, NULL, &run, &err);
      if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
      const sl_output_data *t = output(&run, "total"), *d = output(&run, "doubled"),
                           *s = output(&run, "scaled");
      assert_int_equal(t->desc.dtype, SL_F64);
      assert_int_equal(t->desc.dims[0], item);
      const double *tv = t->data, *dv = d->data, *sv = s->data;
      for (int64_t e = 0; e < item; e++) {
        assert_true(tv[e] == expect[e]); /* integers + halves: exact in f64 */
        assert_true(dv[e] == 2 * expect[e]);
      }
      /* the streamed output is assembled in scan order */
      assert_int_equal(s->desc.rank, 3);
      assert_int_equal(s->desc.dims[0], 37);
      for (int64_t p = 0; p < positions; p += 101)
        assert_true(sv[p * item + 5] == (double)((p * item + 5) % 1024) + 0.5);
      assert_true(run.result.measured_peak_bytes <= run.result.planned_peak_bytes);
      assert_true(run.result.measured_peak_bytes > 0);
      sl_run_free(&run);
    }
  }
  free(expect);
}

static void test_set_overrides_param(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "chain.yaml", k_chain);
  sl_setting set = {"scale", "3"};
  sl_run run;
  sl_error err;
  assert_int_equal(run_file(path, &set, 1, 0, 0, 0, NULL, &run, &err), SL_OK);
  const double *sv = output(&run, "scaled")->data;
  assert_true(sv[1] == 3.0 * 1 + 0.5);
  sl_run_free(&run);
}

static void test_iterate_closed_form(void **state) {
  char body[512], path[512];
  write_temp_file(body, sizeof body, "step.yaml",
                  "pipeline: step\n"
                  "params: {a: {type: float, default: 0.5}, b: {type: float, default: 1}}\n"
                  "inputs: [x]\n"
                  "nodes:\n"
                  "  s: {type: affine, inputs: {x: inputs.x}, params: {scale: \"${a}\", offset: \"${b}\"}}\n"
                  "outputs: {x: s.y}\n");
  write_temp_file(path, sizeof path, "loop.yaml",
                  "pipeline: loop\n"
                  "params: {n: {type: int, default: 10}}\n"
                  "nodes:\n"
                  "  init: {type: constant, params: {shape: [3, 5], value: 4}}\n"
                  "  loop:\n"
                  "    iterate: step.yaml\n"
                  "    times: ${n}\n"
                  "    params: {a: 0.75, b: 2}\n"
                  "    inputs: {x: init.out}\n"
                  "    carry: [x]\n"
                  "outputs: {x: loop.x}\n");
  int counts[] = {0, 1, 10, 57};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    char n[16];
    snprintf(n, sizeof n, "%d", counts[i]);
    sl_setting set = {"n", n};
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, &set, 1, 0, 0, 0, NULL, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    double an = pow(0.75, counts[i]);
    double expect = an * 4 + 2 * (1 - an) / (1 - 0.75);
    const sl_output_data *x = output(&run, "x");
    assert_int_equal(x->desc.rank, 2);
    for (int k = 0; k < 15; k++) assert_true(fabs(((double *)x->data)[k] - expect) < 1e-12 * expect);
    int loop = sl_graph_find(run.graph, "loop");
    assert_int_equal(run.result.node_calls[loop], counts[i]);
    assert_non_null(run.plan->nodes[loop].body); /* planned once */
    assert_true(run.result.measured_peak_bytes <= run.result.planned_peak_bytes);
    sl_run_free(&run);
  }
}

/* A CPU backend that counts what it is asked to create and allocate. */
static int g_creates, g_allocs;
static sl_code counting_create(int threads, sl_backend **out, sl_error *err) {
  g_creates++;
  return sl_cpu_backend_ops.create(threads, out, err);
}
static sl_code counting_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  g_allocs++;
  return sl_cpu_backend_ops.alloc(b, bytes, ptr, err);
}

static void test_over_budget_allocates_nothing(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "chain.yaml", k_chain);
  sl_backend_ops ops = sl_cpu_backend_ops;
  ops.create = counting_create;
  ops.alloc = counting_alloc;
  g_creates = g_allocs = 0;
  sl_run run;
  sl_error err;
  /* the assembled streamed output alone needs 37*29*300*8 bytes: 2.5 MB */
  assert_int_equal(run_file(path, NULL, 0, 0, 0, 1 << 20, &ops, &run, &err), SL_ERR_BUDGET);
  assert_int_equal(g_creates, 0);
  assert_int_equal(g_allocs, 0);
  assert_non_null(strstr(err.msg, "assembled outputs"));
  sl_run_free(&run);
  /* the same backend table runs normally with room */
  assert_int_equal(run_file(path, NULL, 0, 0, 0, 0, &ops, &run, &err), SL_OK);
  assert_int_equal(g_creates, 1);
  assert_true(g_allocs > 0);
  sl_run_free(&run);
}

/* Centering needs the mean first: the mean is a reduction over the whole
 * scan, so subtracting it streams the data again in a second pass. */
static void test_second_pass(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "center.yaml",
                  "pipeline: center\n"
                  "nodes:\n"
                  "  r: {type: ramp, params: {positions: [50], item_shape: [8], dtype: f64}}\n"
                  "  s: {type: sum, inputs: {x: r.out}}\n"
                  "  m: {type: affine, inputs: {x: s.total}, params: {scale: 0.02}}\n"
                  "  d: {type: subtract, inputs: {x: r.out, y: m.y}}\n"
                  "  t: {type: sum, inputs: {x: d.out}}\n"
                  "outputs: {centered: d.out, residual: t.total, mean: m.y}\n");
  int64_t chunks[] = {7, 50};
  for (size_t c = 0; c < 2; c++) {
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, NULL, 0, chunks[c], 2, 0, NULL, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    const sl_graph *g = run.graph;
    assert_int_equal(g->n_passes, 2);
    int r = sl_graph_find(g, "r"), d = sl_graph_find(g, "d"), m = sl_graph_find(g, "m");
    assert_int_equal(g->nodes[d].pass, 1);
    assert_int_equal(g->nodes[m].pass, 0);
    assert_int_equal(g->nodes[m].phase, SL_PHASE_EPILOGUE);
    assert_int_equal(g->nodes[r].pass_mask, 3u); /* the source runs in both passes */
    assert_int_equal(run.result.node_calls[r], 2 * run.plan->n_chunks);
    double mean[8];
    for (int e = 0; e < 8; e++) {
      double sum = 0;
      for (int p = 0; p < 50; p++) sum += (double)((p * 8 + e) % 1024);
      mean[e] = sum * 0.02;
      assert_true(fabs(((const double *)output(&run, "mean")->data)[e] - mean[e]) < 1e-9);
    }
    const double *cv = output(&run, "centered")->data;
    for (int p = 0; p < 50; p++)
      for (int e = 0; e < 8; e++)
        assert_true(fabs(cv[p * 8 + e] - ((double)((p * 8 + e) % 1024) - mean[e])) < 1e-9);
    for (int e = 0; e < 8; e++) assert_true(fabs(((const double *)output(&run, "residual")->data)[e]) < 1e-6);
    assert_true(run.result.measured_peak_bytes <= run.result.planned_peak_bytes);
    sl_run_free(&run);
  }
}

/* Centering again and again: each stage subtracts the mean of the last,
 * which is known only after a pass over it, so `stages` stages need
 * stages + 1 passes (more than the 8 a graph once had). The first stage
 * centres the ramp; the others subtract means of about 0. 32 stages would
 * need 33 passes, one more than a graph may have: refused, naming the node. */
static void centering_stages(char *text, size_t n, int stages) {
  int at = snprintf(text, n, "pipeline: stages\nnodes:\n"
                             "  d0: {type: ramp, params: {positions: [50], item_shape: [8], dtype: f64}}\n");
  for (int k = 1; k <= stages; k++)
    at += snprintf(text + at, n - (size_t)at,
                   "  s%d: {type: sum, inputs: {x: d%d.out}}\n"
                   "  m%d: {type: affine, inputs: {x: s%d.total}, params: {scale: 0.02}}\n"
                   "  d%d: {type: subtract, inputs: {x: d%d.out, y: m%d.y}}\n",
                   k, k - 1, k, k, k, k - 1, k);
  snprintf(text + at, n - (size_t)at, "outputs: {centered: d%d.out}\n", stages);
}

static void test_many_passes(void **state) {
  (void)state;
  char text[16384], path[512];
  centering_stages(text, sizeof text, 11);
  write_temp_file(path, sizeof path, "stages.yaml", text);
  sl_run run;
  sl_error err;
  if (run_file(path, NULL, 0, 7, 2, 0, NULL, &run, &err) != SL_OK) fail_msg("run failed: %s", err.msg);
  assert_int_equal(run.graph->n_passes, 12);
  const double *cv = output(&run, "centered")->data;
  for (int e = 0; e < 8; e++) {
    double mean = 0;
    for (int p = 0; p < 50; p++) mean += (double)((p * 8 + e) % 1024) / 50;
    for (int p = 0; p < 50; p++)
      if (fabs(cv[p * 8 + e] - ((double)((p * 8 + e) % 1024) - mean)) > 1e-9)
        fail_msg("position %d, element %d: %g", p, e, cv[p * 8 + e]);
  }
  sl_run_free(&run);
  centering_stages(text, sizeof text, 32);
  write_temp_file(path, sizeof path, "stages32.yaml", text);
  if (run_file(path, NULL, 0, 7, 2, 0, NULL, &run, &err) == SL_OK || !strstr(err.msg, "at most 32"))
    fail_msg("33 passes: expected a refusal, got '%s'", err.msg);
  sl_run_free(&run);
}

static void test_repeated_runs(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "chain.yaml", k_chain);
  for (int i = 0; i < 100; i++) {
    sl_run run;
    sl_error err;
    assert_int_equal(run_file(path, NULL, 0, 97, 2, 0, NULL, &run, &err), SL_OK);
    sl_run_free(&run);
  }
}

static void test_failure_paths_release(void **state) {
  char path[512];
  write_temp_file(path, sizeof path, "broken.yaml",
                  "pipeline: broken\nnodes:\n  a: {type: affine, inputs: {x: nowhere.y}}\n"
                  "outputs: {y: a.y}\n");
  for (int i = 0; i < 10; i++) {
    sl_run run;
    sl_error err;
    assert_int_not_equal(run_file(path, NULL, 0, 0, 0, 0, NULL, &run, &err), SL_OK);
    sl_run_free(&run);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_matches_closed_form),
      cmocka_unit_test(test_set_overrides_param),
      cmocka_unit_test(test_iterate_closed_form),
      cmocka_unit_test(test_over_budget_allocates_nothing),
      cmocka_unit_test(test_second_pass),
      cmocka_unit_test(test_many_passes),
      cmocka_unit_test(test_repeated_runs),
      cmocka_unit_test(test_failure_paths_release),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
