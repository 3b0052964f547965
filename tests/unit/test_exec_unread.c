/* Outputs nobody reads (sl_node_desc.omit_unread_outputs) through the whole
 * engine: a node that opts in gets no bytes for an unread output (no slot,
 * no partial, no staging; the planned peaks drop by exactly those bytes)
 * and its kernel gets out[k] == NULL and out_bytes[k] == 0; a read output
 * is planned and computed as before; a node that does not opt in keeps a
 * buffer for every output; an input its consumer declares unread
 * (sl_node.in_unread) leaves its producer's output unread and reaches the
 * consumer as NULL. On the CPU backend, and on a device-like backend (the
 * CPU's with device memory) where a host node's outputs are staged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>
#include <stdlib.h>

#include "engine/backend/backend.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

#define NPOS 37
#define ITEM 6
#define CHUNK 7

/* ---- t_trio: from streamed f64 x, three outputs, each computed only when
 * read: 0 `sum` whole f64[item] that the kernel folds into the run's
 * accumulator (a declared sum, fold_outputs), 1 `twice`
 * streamed 2x, 2 `total` whole f64[item] with a declared sum (a partial per
 * chunk). Its kernel checks the executor's side of the promise: out[k] is
 * NULL (and out_bytes[k] 0) exactly when port k is unread and the node
 * opted in; otherwise the call fails. Variants: opted in or not, host node
 * or not. */
static sl_code trio_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  int64_t item = sl_desc_item_elems(x);
  n->out[0] = sl_desc_make(SL_F64, 1, &item, 0);
  n->out[1] = *x;
  n->out[2] = sl_desc_make(SL_F64, 1, &item, 0);
  return SL_OK;
}

static void no_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c);
}

static sl_code trio_cpu(sl_kernel_args *a) {
  const sl_node *n = a->node;
  for (int k = 0; k < 3; k++) {
    bool read = (n->out_used >> k) & 1u, omitted = !read && (n->desc->omit_unread_outputs >> k & 1u);
    if ((a->out[k] == NULL) != omitted || (omitted && a->out_bytes[k] != 0) || (!omitted && a->out_bytes[k] <= 0))
      return sl_fail(a->err, SL_ERR_INTERNAL, "output %d (%s, %s): out %p, out_bytes %lld", k,
                     read ? "read" : "unread", omitted ? "omitted" : "kept", a->out[k],
                     (long long)a->out_bytes[k]);
  }
  const int64_t item = sl_desc_item_elems(&n->in[0]);
  const double *x = a->in[0];
  double *sum = a->out[0], *twice = a->out[1], *total = a->out[2];
  for (int64_t p = 0; p < a->pos_count; p++)
    for (int64_t e = 0; e < item; e++) {
      const double v = x[p * item + e];
      if (n->out_used & 1u) sum[e] += v;
      if (n->out_used & 2u) twice[p * item + e] = 2 * v;
      if (n->out_used & 4u) total[e] += v;
    }
  return SL_OK;
}

static const sl_port_def x_in[] = {{"x", "streamed values", NULL, false}};
static const sl_port_def trio_out[] = {{"sum", "sum over the scan", NULL, false},
                                       {"twice", "2 x, streamed", NULL, false},
                                       {"total", "sum over the scan, declared", NULL, false}};

#define TRIO(NAME, HOST, OMIT)                                                                      \
  static const sl_node_desc NAME = {                                                                \
      .type = #NAME, .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = trio_out,             \
      .n_outputs = 3, .infer = trio_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = trio_cpu}, \
      .combine = {SL_COMBINE_SUM, SL_COMBINE_NONE, SL_COMBINE_SUM}, .fold_outputs = 1u, .host = HOST, \
      .omit_unread_outputs = OMIT};
TRIO(t_trio, false, 7u)
TRIO(t_trio_kept, false, 0u)
TRIO(t_trio_host, true, 7u)
TRIO(t_trio_host_kept, true, 0u)

/* ---- t_ignore: reads nothing of its whole input `v` (infer declares it
 * unread, as dpc does its segments without the probe's params) and says
 * what the executor passed it. */
static const void *g_ignore_in;
static int64_t g_ignore_in_bytes;
static int g_ignore_calls;

static sl_code ignore_infer(sl_node *n, sl_error *err) {
  (void)err;
  const int64_t one = 1;
  n->out[0] = sl_desc_make(SL_F64, 1, &one, 0);
  n->in_unread = 1u;
  return SL_OK;
}

static sl_code ignore_cpu(sl_kernel_args *a) {
  g_ignore_in = a->in[0];
  g_ignore_in_bytes = a->in_bytes[0];
  g_ignore_calls++;
  *(double *)a->out[0] = 1;
  return SL_OK;
}

static const sl_port_def v_in[] = {{"v", "not read", NULL, false}};
static const sl_port_def one_out[] = {{"one", "1", NULL, false}};
static const sl_node_desc t_ignore = {
    .type = "t_ignore", .doc = "test", .inputs = v_in, .n_inputs = 1, .outputs = one_out, .n_outputs = 1,
    .infer = ignore_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = ignore_cpu}};

static const sl_node_desc *const test_nodes[] = {&t_trio, &t_trio_kept, &t_trio_host, &t_trio_host_kept, &t_ignore};
static const sl_node_family test_family = {"test", test_nodes, SL_COUNT_OF(test_nodes)};

static const sl_node_registry *registry(void) { return registry_with(&test_family); }

/* ---- runs ------------------------------------------------------------------------------- */

/* Runs pipeline `text` (named `name`) with the node `type` as t and the
 * given outputs, on the CPU backend or the device-like one. */
static sl_code run_trio(const char *type, const char *extra_nodes, const char *outputs, bool device,
                        int64_t chunk, int threads, sl_run *run, sl_error *err) {
  char text[1024], path[512], name[64];
  snprintf(text, sizeof text,
           "pipeline: unread\nnodes:\n"
           "  src: {type: ramp, params: {positions: [%d], item_shape: [%d], dtype: f64}}\n"
           "  t: {type: %s, inputs: {x: src.out}}\n%s"
           "outputs: {%s}\n",
           NPOS, ITEM, type, extra_nodes, outputs);
  snprintf(name, sizeof name, "%s.yaml", type);
  write_temp_file(path, sizeof path, name, text);
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU,
                        .chunk_positions = chunk, .threads = threads,
                        .ops_override = device ? device_like_ops() : NULL};
  sl_error_clear(err);
  memset(run, 0, sizeof *run);
  return sl_run_pipeline(&req, run, err);
}

static const sl_plan_buffer *buffer(const sl_run *run, const char *node, int port) {
  int i = sl_graph_find(run->graph, node);
  assert_true(i >= 0);
  int b = sl_plan_buffer_index(run->plan, i, port);
  assert_true(b >= 0);
  return &run->plan->buffers[b];
}

static void expect_unread(const sl_plan_buffer *b) {
  assert_true(b->unread);
  assert_int_equal(b->bytes, 0);
  assert_int_equal(b->slot, -1);
  assert_int_equal(b->partial_bytes, 0);
  assert_false(b->graph_output);
}

static void expect_planned(const sl_plan_buffer *b, int64_t bytes) {
  assert_false(b->unread);
  assert_int_equal(b->bytes, bytes);
  assert_true(b->slot >= 0);
}

/* The outputs that were read hold the ramp's sums (and 2x). */
static void expect_values(const sl_run *run, bool twice, bool total) {
  const double *sum = output(run, "sum")->data;
  for (int e = 0; e < ITEM; e++) {
    double want = 0;
    for (int64_t p = 0; p < NPOS; p++) want += ramp_expected(p, ITEM, e);
    assert_true(sum[e] == want);
    if (total) assert_true(((const double *)output(run, "total")->data)[e] == want);
  }
  if (twice) {
    const double *t = output(run, "twice")->data;
    for (int64_t p = 0; p < NPOS; p++)
      for (int e = 0; e < ITEM; e++) assert_true(t[p * ITEM + e] == 2 * ramp_expected(p, ITEM, e));
  }
}

static void run_ok(const char *type, const char *extra, const char *outputs, bool device, int64_t chunk, int threads,
                   sl_run *run) {
  sl_error err;
  if (run_trio(type, extra, outputs, device, chunk, threads, run, &err) != SL_OK)
    fail_msg("%s (%s), chunk %lld, %d threads: %s", type, device ? "device" : "cpu", (long long)chunk, threads,
             err.msg);
}

/* Only `sum` read: twice and total get nothing, at every chunking. */
static void test_unread_outputs_get_no_bytes(void **state) {
  (void)state;
  const int64_t chunks[] = {1, 3, CHUNK, NPOS};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++)
    for (int threads = 1; threads <= 2; threads++) {
      sl_run run;
      run_ok("t_trio", "", "sum: t.sum", false, chunks[c], threads, &run);
      expect_planned(buffer(&run, "t", 0), ITEM * 8);
      expect_unread(buffer(&run, "t", 1));
      expect_unread(buffer(&run, "t", 2));
      assert_int_equal(run.plan->partial_bytes, 0);
      expect_values(&run, false, false);
      sl_run_free(&run);
    }
}

/* Every output read: planned and computed as before. */
static void test_read_outputs_are_planned_and_computed(void **state) {
  (void)state;
  sl_run run;
  run_ok("t_trio", "", "sum: t.sum, twice: t.twice, total: t.total", false, CHUNK, 2, &run);
  expect_planned(buffer(&run, "t", 0), ITEM * 8);
  expect_planned(buffer(&run, "t", 1), CHUNK * ITEM * 8);
  expect_planned(buffer(&run, "t", 2), ITEM * 8);
  assert_int_equal(buffer(&run, "t", 2)->partial_bytes, ITEM * 8);
  expect_values(&run, true, true);
  sl_run_free(&run);
}

/* The same graph without the opt-in keeps a buffer for every output (its
 * kernel fails on a NULL one); the planned peak differs by exactly the
 * omitted slots and partial. */
static void test_without_opt_in_every_output_has_bytes(void **state) {
  (void)state;
  sl_run omit, kept;
  run_ok("t_trio", "", "sum: t.sum", false, CHUNK, 2, &omit);
  run_ok("t_trio_kept", "", "sum: t.sum", false, CHUNK, 2, &kept);
  assert_false(buffer(&kept, "t", 1)->unread);
  assert_false(buffer(&kept, "t", 2)->unread);
  assert_int_equal(buffer(&kept, "t", 1)->bytes, CHUNK * ITEM * 8);
  assert_int_equal(buffer(&kept, "t", 2)->bytes, ITEM * 8);
  expect_values(&kept, false, false);
  /* twice and total overlap every other buffer's lifetime: a slot each */
  const int64_t slots = sl_size_class(CHUNK * ITEM * 8) + sl_size_class(ITEM * 8);
  assert_int_equal(kept.plan->slot_bytes - omit.plan->slot_bytes, slots);
  assert_int_equal(kept.plan->partial_bytes - omit.plan->partial_bytes, sl_size_class(ITEM * 8));
  assert_int_equal(kept.plan->peak_host_bytes - omit.plan->peak_host_bytes, slots + sl_size_class(ITEM * 8));
  sl_run_free(&omit);
  sl_run_free(&kept);
}

/* An input its consumer declares unread: the producer's output is unread,
 * gets no bytes, and the consumer sees NULL; without the opt-in it sees
 * the buffer. */
static void test_input_declared_unread_reaches_consumer_as_null(void **state) {
  (void)state;
  const char *ignore = "  i: {type: t_ignore, inputs: {v: t.total}}\n";
  sl_run run;
  g_ignore_calls = 0;
  run_ok("t_trio", ignore, "sum: t.sum, one: i.one", false, CHUNK, 2, &run);
  expect_unread(buffer(&run, "t", 2));
  assert_int_equal(g_ignore_calls, 1);
  assert_null(g_ignore_in);
  assert_int_equal(g_ignore_in_bytes, 0);
  assert_true(*(const double *)output(&run, "one")->data == 1);
  expect_values(&run, false, false);
  sl_run_free(&run);
  run_ok("t_trio_kept", ignore, "sum: t.sum, one: i.one", false, CHUNK, 2, &run);
  assert_false(buffer(&run, "t", 2)->unread);
  assert_non_null(g_ignore_in);
  assert_int_equal(g_ignore_in_bytes, ITEM * 8);
  sl_run_free(&run);
}

/* A host node on a device backend: an unread output is neither staged on
 * the host nor given device memory; the read one is staged, uploaded and
 * right. */
static void test_host_node_stages_no_unread_output(void **state) {
  (void)state;
  sl_run omit, kept, all;
  run_ok("t_trio_host", "", "sum: t.sum", true, CHUNK, 2, &omit);
  run_ok("t_trio_host_kept", "", "sum: t.sum", true, CHUNK, 2, &kept);
  run_ok("t_trio_host", "", "sum: t.sum, twice: t.twice, total: t.total", true, CHUNK, 2, &all);
  assert_true(omit.plan->caps.device_memory);
  expect_unread(buffer(&omit, "t", 1));
  expect_unread(buffer(&omit, "t", 2));
  expect_values(&omit, false, false);
  expect_values(&kept, false, false);
  expect_values(&all, true, true);
  /* staging counts buffers' bytes as they are (no size classes) */
  assert_int_equal(kept.plan->staging_bytes - omit.plan->staging_bytes, CHUNK * ITEM * 8 + ITEM * 8);
  /* the device's blocks are carved from one arena SL_PLAN_ARENA_ALIGN apart */
#define CARVED(b) ((sl_size_class(b) + SL_PLAN_ARENA_ALIGN - 1) / SL_PLAN_ARENA_ALIGN * SL_PLAN_ARENA_ALIGN)
  const int64_t device = CARVED(CHUNK * ITEM * 8) + 2 * CARVED(ITEM * 8);
#undef CARVED
  assert_int_equal(kept.plan->peak_device_bytes - omit.plan->peak_device_bytes, device);
  assert_int_equal(sl_plan_arena_bytes(kept.plan) - sl_plan_arena_bytes(omit.plan), device);
  assert_true(kept.plan->peak_host_bytes > omit.plan->peak_host_bytes);
  sl_run_free(&omit);
  sl_run_free(&kept);
  sl_run_free(&all);
}

/* Whether the line of the printed plan that starts with buffer `name`
 * says "unread". */
static bool line_says_unread(const char *text, const char *name) {
  char needle[64];
  snprintf(needle, sizeof needle, "\n  %s ", name);
  const char *line = strstr(text, needle);
  assert_non_null(line);
  const char *eol = strchr(line + 1, '\n'), *word = strstr(line, "unread");
  return word && (!eol || word < eol);
}

/* `sluice plan` says which buffers are unread. */
static void test_plan_shows_unread(void **state) {
  (void)state;
  sl_run run;
  run_ok("t_trio", "", "sum: t.sum", false, CHUNK, 1, &run);
  char *text = NULL;
  plan_text(&run, &text);
  assert_false(line_says_unread(text, "t.sum"));
  assert_true(line_says_unread(text, "t.twice"));
  assert_true(line_says_unread(text, "t.total"));
  free(text);
  sl_run_free(&run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unread_outputs_get_no_bytes),
      cmocka_unit_test(test_read_outputs_are_planned_and_computed),
      cmocka_unit_test(test_without_opt_in_every_output_has_bytes),
      cmocka_unit_test(test_input_declared_unread_reaches_consumer_as_null),
      cmocka_unit_test(test_host_node_stages_no_unread_output),
      cmocka_unit_test(test_plan_shows_unread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
