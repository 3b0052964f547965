/* Graph building: each error class names the place and, where it can, the
 * closest known name; types and shapes are inferred before data moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "nodes/registry.h"
#include "engine/graph/graph.h"
#include "tests/unit/test_support.h"

/* Builds the graph of a pipeline text; returns the code and fills err. */
static sl_code build(const char *name, const char *text, sl_graph **g, sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, name, text);
  sl_spec *spec = NULL;
  sl_error_clear(err);
  *g = NULL;
  sl_code rc = sl_spec_load(path, NULL, 0, &spec, err);
  if (rc == SL_OK) rc = sl_graph_build(spec, NULL, sl_nodes_registry(), g, err);
  if (*g) (*g)->spec = NULL; /* the spec is freed here; tests only read the graph */
  sl_spec_free(spec);
  return rc;
}

static void test_types_and_phases(void **state) {
  sl_graph *g;
  sl_error err;
  assert_int_equal(build("ok.yaml",
                         "pipeline: t\n"
                         "nodes:\n"
                         "  r: {type: ramp, params: {positions: [8, 4], item_shape: [16]}}\n"
                         "  a: {type: affine, inputs: {x: r.out}, params: {scale: 2}}\n"
                         "  s: {type: sum, inputs: {x: a.y}}\n"
                         "  e: {type: affine, inputs: {x: s.total}}\n"
                         "outputs: {total: e.y, scaled: a.y}\n",
                         &g, &err),
                   SL_OK);
  int r = sl_graph_find(g, "r"), a = sl_graph_find(g, "a"), s = sl_graph_find(g, "s"),
      e = sl_graph_find(g, "e");
  assert_true(r >= 0 && a >= 0 && s >= 0 && e >= 0);
  assert_int_equal(g->nodes[a].out[0].dtype, SL_F32);
  assert_int_equal(g->nodes[a].out[0].rank, 3);
  assert_int_equal(g->nodes[a].out[0].stream_rank, 2);
  assert_int_equal(g->nodes[a].out[0].dims[2], 16);
  assert_int_equal(g->nodes[s].out[0].dtype, SL_F64);
  assert_int_equal(g->nodes[s].out[0].stream_rank, 0);
  assert_int_equal(g->nodes[s].out[0].dims[0], 16);
  assert_int_equal(g->nodes[r].phase, SL_PHASE_STREAM);
  assert_int_equal(g->nodes[s].phase, SL_PHASE_STREAM);
  assert_int_equal(g->nodes[e].phase, SL_PHASE_EPILOGUE);
  assert_int_equal(g->nodes[r].level, 0);
  assert_int_equal(g->nodes[a].level, 1);
  assert_int_equal(g->nodes[s].level, 2);
  assert_int_equal(g->nodes[e].level, 0);
  /* topological order: every producer before its consumers */
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) assert_true(g->nodes[i].in_src[k].node < i);
  sl_graph_free(g);
}

static void expect_error(const char *text, sl_code code, int line, const char *needle) {
  sl_graph *g;
  sl_error err;
  sl_code rc = build("bad.yaml", text, &g, &err);
  if (rc != code || (line && err.line != line) || !strstr(err.msg, needle))
    print_error("got code %d line %d: '%s'\n", rc, err.line, err.msg);
  assert_int_equal(rc, code);
  if (line) assert_int_equal(err.line, line);
  assert_non_null(strstr(err.msg, needle));
  assert_null(g);
}

static void test_unknown_type_suggests(void **state) {
  expect_error("pipeline: t\nnodes:\n  a: {type: afine}\noutputs: {y: a.y}\n", SL_ERR_PIPELINE, 3,
               "did you mean 'affine'");
}

static void test_unknown_param_suggests(void **state) {
  expect_error("pipeline: t\nnodes:\n  r: {type: ramp}\n"
               "  a:\n    type: affine\n    inputs: {x: r.out}\n    params:\n      scal: 2\n"
               "outputs: {y: a.y}\n",
               SL_ERR_PIPELINE, 8, "did you mean 'scale'");
}

static void test_bad_param_value(void **state) {
  expect_error("pipeline: t\nnodes:\n  r: {type: ramp}\n"
               "  a:\n    type: affine\n    inputs: {x: r.out}\n    params: {scale: fast}\n"
               "outputs: {y: a.y}\n",
               SL_ERR_PIPELINE, 7, "expects a number");
}

static void test_unknown_ports_suggest(void **state) {
  expect_error("pipeline: t\nnodes:\n  r: {type: ramp}\n"
               "  a:\n    type: affine\n    inputs: {xx: r.out}\n"
               "outputs: {y: a.y}\n",
               SL_ERR_PIPELINE, 6, "did you mean 'x'");
  expect_error("pipeline: t\nnodes:\n  r: {type: ramp}\n"
               "  a:\n    type: affine\n    inputs: {x: r.outt}\n"
               "outputs: {y: a.y}\n",
               SL_ERR_PIPELINE, 6, "did you mean 'out'");
  expect_error("pipeline: t\nnodes:\n  r: {type: ramp}\n"
               "outputs:\n  y: r.output\n",
               SL_ERR_PIPELINE, 5, "no output port 'output'");
}

static void test_unconnected_input(void **state) {
  expect_error("pipeline: t\nnodes:\n  a: {type: affine}\noutputs: {y: a.y}\n", SL_ERR_PIPELINE, 3,
               "not connected");
}

static void test_type_mismatch(void **state) {
  expect_error("pipeline: t\nnodes:\n"
               "  s: {type: synthetic_4dstem, params: {scan_shape: [2, 2], detector_shape: [16, 16]}}\n"
               "  a:\n    type: affine\n    inputs: {x: s.frames}\n"
               "outputs: {y: a.y}\n",
               SL_ERR_PIPELINE, 4, "expects f32 or f64");
  expect_error("pipeline: t\nnodes:\n  c: {type: constant, params: {shape: [4]}}\n"
               "  s: {type: sum, inputs: {x: c.out}}\n"
               "outputs: {y: s.total}\n",
               SL_ERR_PIPELINE, 4, "must be streamed");
}

static void test_cycle(void **state) {
  expect_error("pipeline: t\nnodes:\n"
               "  a: {type: affine, inputs: {x: b.y}}\n"
               "  b: {type: affine, inputs: {x: a.y}}\n"
               "outputs: {y: b.y}\n",
               SL_ERR_PIPELINE, 0, "cycle");
}

static void test_mismatched_scans(void **state) {
  expect_error("pipeline: t\nnodes:\n"
               "  r: {type: ramp, params: {positions: [8]}}\n"
               "  q: {type: ramp, params: {positions: [9]}}\n"
               "  a: {type: affine, inputs: {x: q.out}}\n"
               "outputs: {y: a.y, z: r.out}\n",
               SL_ERR_PIPELINE, 0, "share one scan");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_types_and_phases),   cmocka_unit_test(test_unknown_type_suggests),
      cmocka_unit_test(test_unknown_param_suggests), cmocka_unit_test(test_bad_param_value),
      cmocka_unit_test(test_unknown_ports_suggest), cmocka_unit_test(test_unconnected_input),
      cmocka_unit_test(test_type_mismatch),      cmocka_unit_test(test_cycle),
      cmocka_unit_test(test_mismatched_scans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
