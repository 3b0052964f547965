/* Out of memory is an error value (issue 9): whole runs (load with a template
 * and an iterate body, build, plan, run on two CPU threads; and a run that
 * reads a Dectris-style HDF5 acquisition) with allocation N of the library's
 * control data failing, for N = 1, 2, ... until a run makes fewer than N
 * allocations and so succeeds. Every attempt with a fault must return
 * SL_ERR_NOMEM with a message that says so (never abort, never crash), and
 * the run that succeeds must give the closed-form results. Nothing may leak
 * on any of the error paths: the sanitizer build's LeakSanitizer checks every
 * attempt at exit. */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include <math.h>

#include "engine/core/alloc.h"
#include "engine/core/settings.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

/* Attempts above this mean the runs never stop allocating: a bug. */
enum { MAX_ATTEMPTS = 100000 };

/* Runs `path` with each allocation failing in turn; checks every failure and
 * returns the run that succeeded (the caller checks and frees it). */
static sl_run run_under_faults(const char *path, const sl_setting *sets, size_t n_sets, int64_t chunk) {
  int nomem = 0;
  for (long n = 1; n < MAX_ATTEMPTS; n++) {
    sl_run run;
    sl_error err;
    sl_alloc_fail_nth(n);
    sl_code rc = run_file(path, sets, n_sets, chunk, 2, 0, NULL, &run, &err);
    long made = sl_alloc_count();
    sl_alloc_fail_nth(0);
    if (made < n) { /* the fault never came: a whole run */
      if (rc != SL_OK) fail_msg("the run without a fault failed: %s", err.msg);
      print_message("%s: %d failed allocations, each an SL_ERR_NOMEM; %ld allocations in a whole run\n",
                    path, nomem, made);
      return run;
    }
    if (rc != SL_ERR_NOMEM)
      fail_msg("allocation %ld of %ld failed but the run returned %s (%s)", n, made, sl_code_name(rc),
               rc ? err.msg : "no error");
    if (!strstr(err.msg, "out of memory")) fail_msg("allocation %ld: the message '%s' does not say why", n, err.msg);
    nomem++;
    sl_run_free(&run);
  }
  fail_msg("more than %d allocations in a run", MAX_ATTEMPTS);
  abort(); /* not reached */
}

/* A template (two affine steps), an iterate node whose body is a file, params
 * through ${} and --set, a streamed ramp reduced by a sum. */
static void test_pipeline_under_faults(void **state) {
  (void)state;
  char step[512], tmpl[512], path[512];
  write_temp_file(step, sizeof step, "fault_step.yaml",
                  "pipeline: fault_step\n"
                  "params: {a: {type: float, default: 0.5}, b: {type: float, default: 1}}\n"
                  "inputs: [x]\n"
                  "nodes:\n"
                  "  s: {type: affine, inputs: {x: inputs.x}, params: {scale: \"${a}\", offset: \"${b}\"}}\n"
                  "outputs: {x: s.y}\n");
  write_temp_file(tmpl, sizeof tmpl, "fault_twice.yaml",
                  "pipeline: fault_twice\n"
                  "params: {k: {type: float, default: 1}}\n"
                  "inputs: [x]\n"
                  "nodes:\n"
                  "  one: {type: affine, inputs: {x: inputs.x}, params: {scale: \"${k}\", offset: 0}}\n"
                  "  two: {type: affine, inputs: {x: one.y}, params: {scale: 2, offset: 0.5}}\n"
                  "outputs: {y: two.y}\n");
  write_temp_file(path, sizeof path, "fault_main.yaml",
                  "pipeline: fault_main\n"
                  "description: every layer of a run, for the allocation fault injector\n"
                  "params:\n"
                  "  times: {type: int, default: 3}\n"
                  "  k: {type: float, required: true}\n"
                  "nodes:\n"
                  "  r: {type: ramp, params: {positions: [6, 5], item_shape: [7], dtype: f64}}\n"
                  "  t: {use: fault_twice.yaml, params: {k: \"${k}\"}, inputs: {x: r.out}}\n"
                  "  total: {type: sum, inputs: {x: t.y}}\n"
                  "  loop:\n"
                  "    iterate: fault_step.yaml\n"
                  "    times: ${times}\n"
                  "    params: {a: 0.5, b: 1}\n"
                  "    inputs: {x: total.total}\n"
                  "    carry: [x]\n"
                  "outputs: {total: total.total, looped: loop.x, frames: t.y}\n");
  sl_setting set = {"k", "3"};
  sl_run run = run_under_faults(path, &set, 1, 4);
  /* ramp: value (p * 7 + e) % 1024 at position p, element e; the template
   * gives 2 * (3 v) + 0.5; the loop x <- 0.5 x + 1 three times. */
  const int64_t positions = 30, item = 7;
  const double *total = output(&run, "total")->data, *looped = output(&run, "looped")->data;
  const double *frames = output(&run, "frames")->data;
  for (int64_t e = 0; e < item; e++) {
    double want = 0;
    for (int64_t p = 0; p < positions; p++) {
      double y = 2 * (3 * (double)((p * item + e) % 1024)) + 0.5;
      want += y;
      assert_true(frames[p * item + e] == y);
    }
    assert_true(total[e] == want); /* integers and halves: exact */
    double x = want;
    for (int i = 0; i < 3; i++) x = 0.5 * x + 1;
    assert_true(looped[e] == x);
  }
  sl_run_free(&run);
}

/* hdf5_source over a master with two data files (external links), raw
 * chunks of 2 frames, the detector metadata: the index, the chunk reader and
 * the source's windows under faults. */
static void test_hdf5_source_under_faults(void **state) {
  (void)state;
  char master[512], path[512], text[1024];
  fx_opts o = {.n_files = 2, .frames = {6, 3}, .h = 5, .w = 4, .layout = FX_CHUNKED, .k = 2, .meta = true};
  fx_write("faults", &o, master, sizeof master);
  snprintf(text, sizeof text,
           "pipeline: fault_source\n"
           "nodes:\n"
           "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
           "  total: {type: sum, inputs: {x: src.frames}}\n"
           "outputs: {frames: src.frames, total: total.total}\n",
           master);
  write_temp_file(path, sizeof path, "fault_source.yaml", text);
  sl_run run = run_under_faults(path, NULL, 0, 3);
  const sl_output_data *frames = output(&run, "frames");
  assert_int_equal(frames->desc.dtype, SL_U16);
  assert_int_equal(sl_desc_elems(&frames->desc), 9 * 5 * 4);
  const uint16_t *px = frames->data;
  for (int64_t f = 0; f < 9; f++)
    for (int64_t r = 0; r < 5; r++)
      for (int64_t c = 0; c < 4; c++) assert_int_equal(px[(f * 5 + r) * 4 + c], fx_value(f, r, c, 2));
  sl_run_free(&run);
}

/* The injector itself: the Nth allocation fails, once, and the count says
 * how many were made. */
static void test_injector_fails_the_nth_once(void **state) {
  (void)state;
  sl_alloc_fail_nth(3);
  void *a = sl_malloc(8), *b = sl_calloc(2, 4);
  char *c = sl_strdup("x"), *d = sl_strdup("y");
  assert_int_equal(sl_alloc_count(), 4);
  sl_alloc_fail_nth(0);
  assert_non_null(a);
  assert_non_null(b);
  assert_null(c);
  assert_non_null(d);
  /* a failed resize leaves the array as it was */
  int *v = sl_calloc(2, sizeof *v);
  v[1] = 7;
  sl_alloc_fail_nth(1);
  assert_false(sl_resize(&v, 1000, sizeof *v));
  sl_alloc_fail_nth(0);
  assert_int_equal(v[1], 7);
  assert_false(sl_resize(&v, SIZE_MAX / 2, sizeof *v)); /* overflow */
  assert_true(sl_resize(&v, 1000, sizeof *v));
  assert_int_equal(v[1], 7);
  free(v), free(a), free(b), free(d);
}

/* The runs' caches (cost profiles, stored indexes) in a fresh folder; no
 * index store, whose unreadable entry is a documented "no entry", not an
 * error. */
static int setup(void **state) {
  (void)state;
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", fx_tmpdir());
  setenv("XDG_CACHE_HOME", cache, 1);
  const char *settings[] = {"index_store=false"};
  sl_error err;
  return sl_settings_init(settings, 1, &err) == SL_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_injector_fails_the_nth_once),
      cmocka_unit_test(test_pipeline_under_faults),
      cmocka_unit_test(test_hdf5_source_under_faults),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
