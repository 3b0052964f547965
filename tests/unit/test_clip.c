/* clip: every numeric dtype against a plain reference with the integer
 * bounds written out by hand; bounds beyond a dtype's range; NaN kept and
 * infinities clamped; f32 bounds rounded; streamed in chunks on 1 and 2
 * threads and whole; lo > hi and empty integer ranges refused, at the node's
 * line when the graph is built; the example pipeline run end to end; cost. */
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

#define NH_RNG_SEED 0xBF58476D1CE4E5B9ULL
#include "engine/exec/run.h"
#include "tests/unit/basic_node_checks.h"

extern const sl_node_desc sl_node_clip;

/* ---- integers ------------------------------------------------------------- */

/* Element i of i32 or i64 data. */
static int64_t get_signed(const void *x, sl_dtype t, int64_t i) {
  return t == SL_I32 ? ((const int32_t *)x)[i] : ((const int64_t *)x)[i];
}

static void random_ints(void *x, sl_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    switch (t) {
      case SL_I32: ((int32_t *)x)[i] = (int32_t)(uint32_t)v; break;
      case SL_I64: ((int64_t *)x)[i] = (int64_t)v; break;
      case SL_U64: ((uint64_t *)x)[i] = v; break;
      default: set_pix(x, t, i, v & dmax(t)); break;
    }
  }
}

/* Clips n random elements of type t with params lo, hi and compares with
 * the integer bounds [want_lo, want_hi] given by the caller. */
static void check_unsigned(sl_dtype t, const char *lo, const char *hi, uint64_t want_lo,
                           uint64_t want_hi) {
  const int64_t n = 4000;
  int64_t d[1] = {n};
  sl_tensor_desc in = sl_desc_make(t, 1, d, 0);
  sl_node node;
  const kv o[] = {{"lo", lo}, {"hi", hi}};
  node_make_ok(&node, &sl_node_clip, o, 2, &in, 1);
  assert_int_equal(node.out[0].dtype, t);
  void *x = malloc((size_t)n * sl_dtype_size(t)), *y = calloc((size_t)n, sl_dtype_size(t));
  random_ints(x, t, n);
  if (t == SL_U64) { /* the extremes of the dtype */
    ((uint64_t *)x)[0] = 0, ((uint64_t *)x)[1] = UINT64_MAX;
  } else {
    set_pix(x, t, 0, 0), set_pix(x, t, 1, dmax(t));
  }
  const void *ins[1] = {x};
  void *outs[1] = {y};
  sl_error e;
  assert_int_equal(run_whole(&node, ins, 1, outs, &e), SL_OK);
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = pix(x, t, i), want = v < want_lo ? want_lo : v > want_hi ? want_hi : v;
    if (pix(y, t, i) != want)
      fail_msg("%s [%s, %s] element %lld: %llu -> %llu, want %llu", sl_dtype_name(t), lo, hi,
               (long long)i, (unsigned long long)v, (unsigned long long)pix(y, t, i),
               (unsigned long long)want);
  }
  free(x);
  free(y);
  node_free(&node);
}

static void check_signed(sl_dtype t, const char *lo, const char *hi, int64_t want_lo,
                         int64_t want_hi) {
  const int64_t n = 4000;
  int64_t d[2] = {40, 100};
  sl_tensor_desc in = sl_desc_make(t, 2, d, 1);
  sl_node node;
  const kv o[] = {{"lo", lo}, {"hi", hi}};
  node_make_ok(&node, &sl_node_clip, o, 2, &in, 1);
  void *x = malloc((size_t)n * sl_dtype_size(t)), *y = calloc((size_t)n, sl_dtype_size(t));
  random_ints(x, t, n);
  run_chunked(&node, x, NULL, y, 40, 7, 2);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = get_signed(x, t, i), want = v < want_lo ? want_lo : v > want_hi ? want_hi : v;
    if (get_signed(y, t, i) != want)
      fail_msg("%s [%s, %s] element %lld: %lld -> %lld, want %lld", sl_dtype_name(t), lo, hi,
               (long long)i, (long long)v, (long long)get_signed(y, t, i), (long long)want);
  }
  free(x);
  free(y);
  node_free(&node);
}

static void test_unsigned(void **st) {
  /* fractional bounds round inwards: the integers of [10.5, 200.25] */
  check_unsigned(SL_U8, "10.5", "200.25", 11, 200);
  check_unsigned(SL_U16, "1000", "60000", 1000, 60000);
  check_unsigned(SL_U32, "-7", "3000000000.9", 0, 3000000000u);
  check_unsigned(SL_U64, "1e18", "1.5e19", 1000000000000000000ull, 15000000000000000000ull);
  /* bounds beyond the dtype's range leave every value as it is */
  check_unsigned(SL_U8, "-1e9", "1e9", 0, 255);
  check_unsigned(SL_U64, "-1", "1e30", 0, UINT64_MAX);
  /* one value */
  check_unsigned(SL_U16, "77", "77", 77, 77);
}

static void test_signed(void **st) {
  check_signed(SL_I32, "-1000.5", "2000.5", -1000, 2000);
  check_signed(SL_I32, "-1e12", "1e12", INT32_MIN, INT32_MAX);
  check_signed(SL_I64, "-4e18", "-1e18", -4000000000000000000ll, -1000000000000000000ll);
  check_signed(SL_I64, "-1e30", "1e30", INT64_MIN, INT64_MAX);
  check_signed(SL_I64, "0", "0", 0, 0);
}

/* ---- floats --------------------------------------------------------------- */

static double get_float(const void *x, sl_dtype t, int64_t i) {
  return t == SL_F32 ? ((const float *)x)[i] : ((const double *)x)[i];
}

static void set_float(void *x, sl_dtype t, int64_t i, double v) {
  if (t == SL_F32) ((float *)x)[i] = (float)v;
  else ((double *)x)[i] = v;
}

/* Random values in [-4, 4) with NaN and both infinities among them; clipped
 * to [lo, hi] in chunks of `chunk` positions on `threads` threads. The
 * reference: NaN stays NaN, below lo gives lo, above hi gives hi (both
 * rounded to the dtype), the rest unchanged. */
static void check_float(sl_dtype t, double lo, double hi, int64_t npos, int64_t item,
                        int64_t chunk, int threads) {
  int64_t n = npos * item, d[2] = {npos, item};
  sl_tensor_desc in = sl_desc_make(t, 2, d, 1);
  char los[32], his[32];
  snprintf(los, sizeof los, "%.17g", lo);
  snprintf(his, sizeof his, "%.17g", hi);
  sl_node node;
  const kv o[] = {{"lo", los}, {"hi", his}};
  node_make_ok(&node, &sl_node_clip, o, 2, &in, 1);
  void *x = malloc((size_t)n * sl_dtype_size(t)), *y = calloc((size_t)n, sl_dtype_size(t));
  for (int64_t i = 0; i < n; i++)
    set_float(x, t, i, (double)(rnd() >> 11) / 9007199254740992.0 * 8 - 4);
  set_float(x, t, 0, NAN);
  set_float(x, t, 1, INFINITY);
  set_float(x, t, 2, -INFINITY);
  set_float(x, t, n - 1, NAN);
  run_chunked(&node, x, NULL, y, npos, chunk, threads);
  double lo_t = t == SL_F32 ? (double)(float)lo : lo, hi_t = t == SL_F32 ? (double)(float)hi : hi;
  for (int64_t i = 0; i < n; i++) {
    double v = get_float(x, t, i), got = get_float(y, t, i);
    if (isnan(v)) {
      if (!isnan(got)) fail_msg("%s element %lld: NaN became %g", sl_dtype_name(t), (long long)i, got);
      continue;
    }
    double want = v < lo_t ? lo_t : v > hi_t ? hi_t : v;
    if (got != want)
      fail_msg("%s element %lld: %.17g -> %.17g, want %.17g", sl_dtype_name(t), (long long)i, v,
               got, want);
  }
  assert_true(get_float(y, t, 1) == hi_t);
  assert_true(get_float(y, t, 2) == lo_t);
  free(x);
  free(y);
  node_free(&node);
}

static void test_floats(void **st) {
  const sl_dtype types[] = {SL_F32, SL_F64};
  for (int k = 0; k < 2; k++) {
    check_float(types[k], -1.5, 2.25, 13, 31, 1, 1);
    check_float(types[k], 0.1, 0.3, 13, 31, 4, 2); /* bounds not exact in f32 */
    check_float(types[k], -0.5, -0.5, 13, 31, 13, 1);
    check_float(types[k], -1e300, 1e300, 5, 17, 2, 1); /* beyond f32: +-inf in f32 */
    check_float(types[k], -1, 1, 3, 50000, 3, 2);      /* the work split between threads */
  }
}

/* ---- errors, graph, pipeline, cost ---------------------------------------- */

static void test_errors(void **st) {
  int64_t d[2] = {4, 4};
  sl_tensor_desc f32 = sl_desc_make(SL_F32, 2, d, 1);
  const kv reversed[] = {{"lo", "2"}, {"hi", "1"}};
  node_make_refused(&sl_node_clip, reversed, 2, &f32, 1, "param 'lo' (2) must not exceed param 'hi' (1)");
  const kv fraction[] = {{"lo", "0.2"}, {"hi", "0.8"}};
  sl_node n;
  node_make_ok(&n, &sl_node_clip, fraction, 2, &f32, 1); /* fine for floats ... */
  node_free(&n);
  sl_tensor_desc i32 = sl_desc_make(SL_I32, 2, d, 1);
  node_make_refused(&sl_node_clip, fraction, 2, &i32, 1, "no i32 value lies in [lo, hi]"); /* ... not for integers */
  const kv above[] = {{"lo", "300"}, {"hi", "400"}};
  sl_tensor_desc u8 = sl_desc_make(SL_U8, 2, d, 1);
  node_make_refused(&sl_node_clip, above, 2, &u8, 1, "no u8 value lies in [lo, hi]");
  const kv below[] = {{"lo", "-9"}, {"hi", "-1"}};
  sl_tensor_desc u64 = sl_desc_make(SL_U64, 2, d, 1);
  node_make_refused(&sl_node_clip, below, 2, &u64, 1, "no u64 value lies in [lo, hi]");
  const kv ok[] = {{"lo", "0"}, {"hi", "1"}};
  sl_tensor_desc c64 = sl_desc_make(SL_C64, 2, d, 1);
  node_make_refused(&sl_node_clip, ok, 2, &c64, 1, "input 'x' expects plain real numbers");
  sl_tensor_desc encoded = sl_desc_make(SL_U16, 2, d, 1);
  encoded.encoding = SL_ENC_BSLZ4;
  node_make_refused(&sl_node_clip, ok, 2, &encoded, 1, "input 'x' expects plain real numbers");
  const kv nan[] = {{"lo", "nan"}, {"hi", "1"}};
  node_make_refused(&sl_node_clip, nan, 2, &f32, 1, "param 'lo' expects a number");
}

/* lo > hi is refused when the graph is built, at the clip node's line. */
static void test_graph_error_names_the_node(void **st) {
  static const char text[] =
      "pipeline: t\n"
      "nodes:\n"
      "  r: {type: ramp, params: {positions: [4], item_shape: [3]}}\n"
      "  c: {type: clip, inputs: {x: r.out}, params: {lo: 5, hi: -5}}\n"
      "outputs: {y: c.y}\n";
  sl_spec *spec = NULL;
  sl_graph *g = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_spec_load_string(text, strlen(text), "clip.yaml", NULL, 0, &spec, &e), SL_OK);
  assert_int_equal(sl_graph_build(spec, NULL, sl_nodes_registry(), &g, &e), SL_ERR_PIPELINE);
  assert_null(g);
  assert_int_equal(e.line, 4);
  assert_string_equal(e.node, "c");
  assert_non_null(strstr(e.msg, "must not exceed"));
  sl_spec_free(spec);
}

/* tests/data/pipelines/clip_ramp.yaml, the guide's example, run in process:
 * the ramp's values (p * 64 + e) mod 1024 clamped to [lo, hi]. */
static void test_example_pipeline(void **st) {
  const char *src = getenv("SLUICE_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/pipelines/clip_ramp.yaml", src ? src : ".");
  const sl_setting sets[] = {{"lo", "200.5"}, {"hi", "700"}};
  sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .sets = sets, .n_sets = 2,
                        .backend = SL_BACKEND_CPU, .chunk_positions = 10, .threads = 2};
  sl_run run;
  sl_error e;
  sl_error_clear(&e);
  if (sl_run_pipeline(&req, &run, &e) != SL_OK) fail_msg("%s: %s", path, e.msg);
  const sl_output_data *clipped = NULL, *total = NULL;
  for (int i = 0; i < run.result.n_outputs; i++) {
    if (!strcmp(run.result.outputs[i].name, "clipped")) clipped = &run.result.outputs[i];
    if (!strcmp(run.result.outputs[i].name, "total")) total = &run.result.outputs[i];
  }
  assert_non_null(clipped);
  assert_non_null(total);
  const int64_t npos = 128, item = 64;
  const float *y = clipped->data;
  const double *t = total->data;
  for (int64_t e_ = 0; e_ < item; e_++) {
    double sum = 0;
    for (int64_t p = 0; p < npos; p++) {
      int64_t v = (p * item + e_) % 1024;
      double want = v < 200.5 ? 200.5 : v > 700 ? 700 : (double)v;
      assert_true(y[p * item + e_] == (float)want);
      sum += (float)want;
    }
    assert_true(t[e_] == sum);
  }
  sl_run_free(&run);
}

static void test_cost_and_descriptor(void **st) {
  int64_t d[3] = {10, 20, 30};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 2);
  sl_node n;
  const kv o[] = {{"lo", "1"}, {"hi", "2"}};
  node_make_ok(&n, &sl_node_clip, o, 2, &in, 1);
  assert_memory_equal(&n.out[0], &in, sizeof in); /* same dtype, shape and stream axes */
  sl_node_cost c = cost_of(&n, 4);
  assert_int_equal(c.bytes_read, 4 * 30 * 2);
  assert_int_equal(c.bytes_written, 4 * 30 * 2);
  assert_int_equal(c.ops, 2 * 4 * 30);
  node_free(&n);
  check_registered(&sl_node_clip, "clip");
  assert_int_equal(sl_node_clip.n_inputs, 1);
  assert_int_equal(sl_node_clip.n_outputs, 1);
  assert_int_equal(sl_node_clip.n_params, 2);
  assert_null(sl_node_clip.params[0].default_value); /* lo and hi are required */
  assert_null(sl_node_clip.params[1].default_value);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unsigned),
      cmocka_unit_test(test_signed),
      cmocka_unit_test(test_floats),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_graph_error_names_the_node),
      cmocka_unit_test(test_example_pipeline),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
