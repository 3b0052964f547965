/* State a kernel makes only where the data decide
 * (sl_node_cost.decided_state_bytes, sl_node_decided_state), through the
 * whole engine: the plan keeps it apart from its usual host peak and holds
 * it in the budget (peak_host_bytes_most); a run whose kernel made none
 * reports the usual peak as planned, a run whose kernel made some reports
 * the usual peak plus what it made (at most what its cost declared); a
 * budget between the two peaks refuses the plan before anything runs; and
 * `sluice plan` shows it, in text and JSON. Work decided inside an iterate
 * body is in report.json's estimates. As dpc's parallax fit without
 * the probe's params: its 42 MiB at a 128 x 128 scan are made only where
 * the CoM's angle is weak (docs/nodes/dpc.md). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "engine/core/json.h"
#include "engine/exec/report.h"
#include "engine/plan/cost_profile.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

#define NPOS 40
#define ITEM 4
#define MOST ((int64_t)8 << 20) /* the decided state t_decide's cost declares */

/* What t_decide's kernel makes once the data decide (its total crosses
 * g_threshold): g_make bytes, touched, recorded as g_record bytes. */
static double g_threshold;
static int64_t g_make, g_record;
static int g_calls;

typedef struct decide_state {
  double total;
  unsigned char *made;
} decide_state;

static sl_code decide_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  const int64_t one = 1;
  n->out[0] = sl_desc_make(SL_F64, 1, &one, 0);
  return SL_OK;
}

#define DEVICE_MOST ((int64_t)3 << 20) /* and what only its device path would make */

static void decide_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c);
  c->decided_state_bytes = MOST;
  c->device_decided_state_bytes = DEVICE_MOST;
}

static sl_code decide_prepare(sl_node *n, sl_error *err) {
  n->state = calloc(1, sizeof(decide_state));
  return n->state ? SL_OK : sl_fail(err, SL_ERR_NOMEM, "t_decide's state");
}

static void decide_release(sl_node *n) {
  decide_state *s = n->state;
  if (s) free(s->made);
  free(s);
  n->state = NULL;
}

/* Sums its input; the first call that sees the sum cross the threshold
 * makes the decided state. */
static sl_code decide_cpu(sl_kernel_args *a) {
  sl_node *n = (sl_node *)a->node;
  decide_state *s = n->state;
  const double *x = a->in[0];
  g_calls++;
  double chunk = 0;
  for (int64_t i = 0; i < a->pos_count * ITEM; i++) chunk += x[i];
  s->total += chunk;
  if (s->total > g_threshold && !s->made) {
    if (!(s->made = malloc((size_t)g_make))) return sl_fail(a->err, SL_ERR_NOMEM, "t_decide's decided state");
    memset(s->made, 1, (size_t)g_make);
    sl_node_decided_state(n, g_record);
  }
  *(double *)a->out[0] += chunk; /* a whole output the kernel folds (a declared sum) */
  return SL_OK;
}

static const sl_port_def x_in[] = {{"x", "streamed values", NULL, false}};
static const sl_port_def total_out[] = {{"total", "their sum", NULL, false}};
static const sl_node_desc t_decide = {
    .type = "t_decide", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = total_out, .n_outputs = 1,
    .infer = decide_infer, .cost = decide_cost, .prepare = decide_prepare, .release = decide_release,
    .kernel = {[SL_BACKEND_CPU] = decide_cpu}, .combine = {SL_COMBINE_SUM}, .fold_outputs = 1u};

/* t_work: y = x; each call records DECIDED_OPS of work decided from the
 * data (its cost declares them as its most), priced at its type's rate. */
#define DECIDED_OPS ((int64_t)1 << 30)

static sl_code work_infer(sl_node *n, sl_error *err) {
  (void)err;
  n->out[0] = n->in[0];
  return SL_OK;
}

static void work_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c);
  c->decided_ops_most = DECIDED_OPS;
}

static sl_code work_cpu(sl_kernel_args *a) {
  memcpy(a->out[0], a->in[0], (size_t)a->in_bytes[0]);
  sl_node_decided_work((sl_node *)a->node, DECIDED_OPS);
  return SL_OK;
}

static const sl_port_def y_out[] = {{"y", "x", NULL, false}};
static const sl_node_desc t_work = {
    .type = "t_work", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = y_out, .n_outputs = 1,
    .infer = work_infer, .cost = work_cost, .kernel = {[SL_BACKEND_CPU] = work_cpu}};

static const sl_node_desc *const test_nodes[] = {&t_decide, &t_work};
static const sl_node_family test_family = {"test", test_nodes, SL_COUNT_OF(test_nodes)};

static sl_code run_decide_on(double threshold, int64_t make, int64_t record, uint64_t limit, bool device,
                             sl_run *run, sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, "decide.yaml",
                  "pipeline: decide\nnodes:\n"
                  "  src: {type: ramp, params: {positions: [40], item_shape: [4], dtype: f64}}\n"
                  "  t: {type: t_decide, inputs: {x: src.out}}\n"
                  "outputs: {total: t.total}\n");
  g_threshold = threshold, g_make = make, g_record = record, g_calls = 0;
  sl_run_request req = {.file = path, .registry = registry_with(&test_family), .backend = SL_BACKEND_CPU,
                        .chunk_positions = 8, .threads = 2, .memory_limit = limit,
                        .ops_override = device ? device_like_ops() : NULL};
  sl_error_clear(err);
  memset(run, 0, sizeof *run);
  return sl_run_pipeline(&req, run, err);
}

static sl_code run_decide(double threshold, int64_t make, int64_t record, uint64_t limit, sl_run *run,
                          sl_error *err) {
  return run_decide_on(threshold, make, record, limit, false, run, err);
}

static void run_ok(double threshold, int64_t make, int64_t record, sl_run *run) {
  sl_error err;
  if (run_decide(threshold, make, record, 0, run, &err) != SL_OK) fail_msg("run failed: %s", err.msg);
  double want = 0;
  for (int64_t p = 0; p < NPOS; p++)
    for (int e = 0; e < ITEM; e++) want += ramp_expected(p, ITEM, e);
  assert_true(*(const double *)output(run, "total")->data == want);
}

/* The plan keeps the decided state apart and holds it in the budget. */
static void test_plan_holds_decided_state_apart(void **state) {
  (void)state;
  sl_run run;
  run_ok(1e300, 0, 0, &run);
  const sl_plan *p = run.plan;
  assert_int_equal(p->decided_state_bytes, MOST);
  assert_int_equal(p->peak_host_bytes_most, p->peak_host_bytes + MOST);
  assert_true(p->peak_host_bytes < MOST); /* the usual peak: ramp chunks, no decided state */
  sl_run_free(&run);
}

/* Where the node's device kernel runs, the decided state only its device
 * path makes is decided state too (dpc's band read back for a host fit
 * without the probe's params); on the CPU backend it is not. */
static void test_device_decided_state(void **state) {
  (void)state;
  sl_run run;
  sl_error err;
  if (run_decide_on(1e300, 0, 0, 0, true, &run, &err) != SL_OK) fail_msg("run failed: %s", err.msg);
  assert_int_equal(run.plan->decided_state_bytes, MOST + DEVICE_MOST);
  assert_int_equal(run.plan->nodes[sl_graph_find(run.graph, "t")].cost.decided_state_bytes, MOST + DEVICE_MOST);
  assert_int_equal(run.plan->peak_host_bytes_most, run.plan->peak_host_bytes + MOST + DEVICE_MOST);
  sl_run_free(&run);
  run_ok(1e300, 0, 0, &run);
  assert_int_equal(run.plan->decided_state_bytes, MOST);
  sl_run_free(&run);
}

/* Data that decide nothing: the usual peak is the run's planned peak. */
static void test_undecided_run_plans_usual_peak(void **state) {
  (void)state;
  sl_run run;
  run_ok(1e300, 0, 0, &run);
  assert_int_equal(run.result.planned_decided_host_bytes, 0);
  assert_int_equal(run.result.planned_host_bytes, run.plan->peak_host_bytes);
  assert_int_equal(run.result.planned_peak_bytes, run.plan->peak_host_bytes);
  assert_int_equal(run.result.planned_most_host_bytes, run.plan->peak_host_bytes + MOST);
  assert_true(run.result.measured_peak_bytes <= run.result.planned_peak_bytes);
  sl_run_free(&run);
}

/* Data that decide: the planned peak adds what the kernel made, and the
 * process's growth (it touched the bytes) stays within it. */
static void test_decided_run_plans_what_was_made(void **state) {
  (void)state;
  const int64_t made = (int64_t)6 << 20;
  sl_run run;
  run_ok(100, made, made, &run);
  assert_int_equal(run.result.planned_decided_host_bytes, made);
  assert_int_equal(run.result.planned_host_bytes, run.plan->peak_host_bytes + made);
  assert_int_equal(run.result.planned_peak_bytes, run.result.planned_host_bytes);
  assert_true(sl_report_measured_host_bytes(&run.result, false) >= made);
  assert_true(sl_report_measured_host_bytes(&run.result, false) <= run.result.planned_host_bytes);
  sl_run_free(&run);
  /* a record over the declared most counts at the most */
  run_ok(100, 1 << 20, 2 * MOST, &run);
  assert_int_equal(run.result.planned_decided_host_bytes, MOST);
  sl_run_free(&run);
}

/* A budget that holds the usual peak but not the decided state refuses
 * the plan before any kernel runs, and says so. */
static void test_budget_holds_decided_state(void **state) {
  (void)state;
  sl_run probe;
  run_ok(1e300, 0, 0, &probe);
  const uint64_t between = (uint64_t)(probe.plan->peak_host_bytes + MOST / 2);
  sl_run_free(&probe);
  sl_run run;
  sl_error err;
  assert_int_equal(run_decide(1e300, 0, 0, between, &run, &err), SL_ERR_BUDGET);
  assert_int_equal(g_calls, 0);
  assert_non_null(strstr(err.msg, "the data may decide on"));
  sl_run_free(&run);
  assert_int_equal(run_decide(1e300, 0, 0, between + MOST, &run, &err), SL_OK);
  sl_run_free(&run);
}

/* `sluice plan` shows it: the node's line, the memory block, the JSON. */
static void test_plan_shows_decided_state(void **state) {
  (void)state;
  sl_run run;
  run_ok(1e300, 0, 0, &run);
  char *text = NULL;
  plan_text(&run, &text);
  size_t len = 0;
  assert_non_null(strstr(text, "and 8.00 MiB host if the data decide"));
  assert_non_null(strstr(text, "decided state      8.00 MiB"));
  assert_non_null(strstr(text, "peak host with every decided state"));
  free(text);
  FILE *f = open_memstream(&text, &len);
  sl_json j;
  sl_json_init(&j, f, false);
  sl_plan_json(&j, run.plan);
  sl_json_finish(&j);
  fclose(f);
  assert_non_null(strstr(text, "\"decided_state_bytes\":8388608"));
  char most[96];
  snprintf(most, sizeof most, "\"peak_host_bytes_most\":%lld", (long long)run.plan->peak_host_bytes_most);
  assert_non_null(strstr(text, most));
  free(text);
  sl_run_free(&run);
}

/* The value of `"key":` in JSON text after `from`, or -1 when absent. */
static double json_number_after(const char *text, const char *from, const char *key) {
  const char *at = from ? strstr(text, from) : text;
  char k[96];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *v = at ? strstr(at, k) : NULL;
  return v ? atof(v + strlen(k)) : -1;
}

/* Work decided inside an iterate body is in report.json's estimates: the
 * iterate node's and the run's, once per iteration. */
static void test_decided_work_in_iterate_body(void **state) {
  (void)state;
  char body[512], path[512];
  write_temp_file(body, sizeof body, "work_step.yaml",
                  "pipeline: work_step\ninputs: [x]\nnodes:\n"
                  "  w: {type: t_work, inputs: {x: inputs.x}}\n"
                  "outputs: {x: w.y}\n");
  char text[1024];
  snprintf(text, sizeof text,
           "pipeline: work_loop\nnodes:\n"
           "  init: {type: constant, params: {shape: [16], value: 2}}\n"
           "  loop: {iterate: %s, times: 3, inputs: {x: init.out}, carry: [x]}\n"
           "outputs: {x: loop.x}\n",
           body);
  write_temp_file(path, sizeof path, "work_loop.yaml", text);
  sl_run_request req = {.file = path, .registry = registry_with(&test_family), .backend = SL_BACKEND_CPU,
                        .threads = 1};
  sl_run run;
  sl_error err;
  memset(&run, 0, sizeof run);
  if (sl_run_pipeline(&req, &run, &err) != SL_OK) fail_msg("run failed: %s", err.msg);
  const sl_plan *bp = run.plan->nodes[sl_graph_find(run.graph, "loop")].body;
  assert_non_null(bp);
  const int w = sl_graph_find(bp->graph, "w");
  assert_int_equal(bp->graph->nodes[w].decided_ops, 3 * DECIDED_OPS);
  const double once = sl_cost_decided_seconds(&bp->profile, &bp->graph->nodes[w], NULL, DECIDED_OPS,
                                            &bp->nodes[w].cost, false, false);
  assert_true(once > 0);
  char *json = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&json, &len);
  sl_json j;
  sl_json_init(&j, f, false);
  const sl_run_info info = {.spec = run.spec, .plan = run.plan, .result = &run.result, .out_dir = "/tmp",
                            .started_at = "2026-12-03T00:00:00Z"};
  sl_report_json(&j, &info);
  sl_json_finish(&j);
  fclose(f);
  const double run_decided = json_number_after(json, NULL, "estimated_decided_seconds");
  const double loop_decided = json_number_after(json, "\"id\":\"loop\"", "estimated_decided_seconds");
  assert_true(fabs(run_decided - 3 * once) <= 1e-9 * run_decided);
  assert_true(fabs(loop_decided - 3 * once) <= 1e-9 * loop_decided);
  const double loop_est = json_number_after(json, "\"id\":\"loop\"", "estimated_seconds");
  assert_true(loop_est >= loop_decided);
  free(json);
  sl_run_free(&run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_holds_decided_state_apart),
      cmocka_unit_test(test_undecided_run_plans_usual_peak),
      cmocka_unit_test(test_decided_run_plans_what_was_made),
      cmocka_unit_test(test_device_decided_state),
      cmocka_unit_test(test_budget_holds_decided_state),
      cmocka_unit_test(test_plan_shows_decided_state),
      cmocka_unit_test(test_decided_work_in_iterate_body),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
