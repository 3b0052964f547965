/* variance through the whole engine (its chunks merged by the node's own
 * merge, SL_COMBINE_MERGE), against what is known without it:
 *  - physics: frames with no object are the probe's intensity with shot
 *    noise, so every pixel's counts are Poisson: the variance equals the
 *    mean and the normalized variance (FEM's V(k)) is 1 / mean, within the
 *    sampling error of a variance over N positions;
 *  - the same frames (also a graph output) with an object, u8/u16/u32, over
 *    chunk sizes, 1 and 2 threads, ddof 0 and 1: mean, variance and
 *    normalized variance against two passes over all positions in long
 *    double, written here;
 *  - values far from zero (a ramp shifted by 1e9): a merge that kept
 *    running sums of squares would lose every digit; Chan's keeps them;
 *  - the refusals, and the plan showing the combine. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

static sl_code run_text(const char *name, const char *text, int64_t chunk, int threads,
                        const sl_backend_ops *ops, sl_run *run, sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, name, text);
  return run_file(path, NULL, 0, chunk, threads, 0, ops, run, err);
}

/* Element e of frame p of the frames output as a double. */
static double frame_value(const sl_output_data *f, int64_t p, int64_t item, int64_t e) {
  const int64_t i = p * item + e;
  switch (f->desc.dtype) {
    case SL_U8: return ((const uint8_t *)f->data)[i];
    case SL_U16: return ((const uint16_t *)f->data)[i];
    case SL_U32: return ((const uint32_t *)f->data)[i];
    default: fail_msg("frames of an unexpected dtype"); return 0;
  }
}

static void test_shot_noise_is_poisson(void **state) {
  (void)state;
  static const struct {
    const char *dtype;
    double dose;
  } cases[] = {{"u16", 20000}, {"u32", 5000}, {"u8", 8000}};
  for (size_t c = 0; c < SL_COUNT_OF(cases); c++) {
    char text[1024];
    snprintf(text, sizeof text,
             "pipeline: shot_noise\nnodes:\n"
             "  src: {type: synthetic_4dstem, params: {scan_shape: [48, 48], detector_shape: [32, 32],"
             " phase_max: 0, dose: %g, disk_radius: 9, dtype: %s, seed: %zu}}\n"
             "  v: {type: variance, inputs: {x: src.frames}, params: {ddof: 1}}\n"
             "outputs: {mean: v.mean, variance: v.variance, normalized: v.normalized}\n",
             cases[c].dose, cases[c].dtype, c + 3);
    sl_run run;
    sl_error err;
    if (run_text("shot_noise.yaml", text, 100, 2, NULL, &run, &err) != SL_OK) fail_msg("%s", err.msg);
    const double *m = output(&run, "mean")->data, *v = output(&run, "variance")->data,
                 *nv = output(&run, "normalized")->data;
    const double N = 48 * 48;
    int lit = 0;
    for (int e = 0; e < 32 * 32; e++) {
      if (m[e] < 10) continue; /* outside the disk, and its rim */
      if (!strcmp(cases[c].dtype, "u8") && m[e] > 200) fail_msg("u8 case clamps: mean %g", m[e]);
      lit++;
      /* the sample variance of Poisson(l) has variance l^2 (2 / (N - 1) + 1 / (l N)) */
      const double sd = m[e] * sqrt(2 / (N - 1) + 1 / (m[e] * N));
      if (fabs(v[e] - m[e]) > 6 * sd)
        fail_msg("%s, pixel %d: variance %g against a Poisson mean %g (6 sd = %g)", cases[c].dtype, e, v[e], m[e], 6 * sd);
      if (fabs(nv[e] * m[e] - 1) > 6 * sd / m[e])
        fail_msg("%s, pixel %d: normalized variance %g, not 1 / %g", cases[c].dtype, e, nv[e], m[e]);
    }
    if (lit < 150) fail_msg("%s: only %d pixels in the disk", cases[c].dtype, lit);
    sl_run_free(&run);
  }
}

/* Two passes in long double over the frames output, element by element. */
static void check_against_two_passes(const sl_run *run, int ddof, const char *what) {
  const sl_output_data *f = output(run, "frames");
  const int64_t npos = f->desc.dims[0] * f->desc.dims[1], item = sl_desc_item_elems(&f->desc);
  const double *m = output(run, "mean")->data, *v = output(run, "variance")->data,
               *nv = output(run, "normalized")->data, *mo = output(run, "moments")->data;
  for (int64_t e = 0; e < item; e++) {
    long double s = 0, q = 0;
    for (int64_t p = 0; p < npos; p++) s += frame_value(f, p, item, e);
    const long double mu = s / npos;
    for (int64_t p = 0; p < npos; p++) q += (frame_value(f, p, item, e) - mu) * (frame_value(f, p, item, e) - mu);
    const long double var = q / (npos - ddof), norm = mu != 0 ? var / (mu * mu) : 0;
    if (mo[e] != (double)npos || fabsl(m[e] - mu) > 1e-13L * fabsl(mu) || fabsl(v[e] - var) > 1e-12L * var ||
        fabsl(nv[e] - norm) > 1e-12L * norm || fabsl(mo[2 * item + e] - q) > 1e-12L * q)
      fail_msg("%s, element %lld: mean %.17g var %.17g norm %.17g against %.17Lg %.17Lg %.17Lg", what, (long long)e,
               m[e], v[e], nv[e], mu, var, norm);
  }
}

static void test_against_two_passes(void **state) {
  (void)state;
  static const char *const dtypes[] = {"u8", "u16", "u32"};
  static const int64_t chunks[] = {1, 7, 100, 299};
  for (size_t d = 0; d < SL_COUNT_OF(dtypes); d++)
    for (int ddof = 0; ddof <= 1; ddof++) {
      char text[1024];
      snprintf(text, sizeof text,
               "pipeline: object\nnodes:\n"
               "  src: {type: synthetic_4dstem, params: {scan_shape: [13, 23], detector_shape: [24, 20],"
               " phase_max: 0.4, dose: %s, disk_radius: 6, dtype: %s}}\n"
               "  v: {type: variance, inputs: {x: src.frames}, params: {ddof: %d}}\n"
               "outputs: {frames: src.frames, mean: v.mean, variance: v.variance, normalized: v.normalized,"
               " moments: v.moments}\n",
               d == 0 ? "300" : "30000", dtypes[d], ddof);
      for (size_t c = 0; c < SL_COUNT_OF(chunks); c++)
        for (int threads = 1; threads <= 2; threads++) {
          sl_run run;
          sl_error err;
          if (run_text("object.yaml", text, chunks[c], threads, NULL, &run, &err) != SL_OK)
            fail_msg("%s: %s", dtypes[d], err.msg);
          char what[96];
          snprintf(what, sizeof what, "%s, ddof %d, chunk %lld, %d threads", dtypes[d], ddof, (long long)chunks[c],
                   threads);
          check_against_two_passes(&run, ddof, what);
          sl_run_free(&run);
        }
    }
}

/* The executor's staging and device paths (the CPU backend posing as a
 * device: ops_override) give the same bits as the CPU backend. */
static void test_device_like_same_bits(void **state) {
  (void)state;
  const char *text =
      "pipeline: object\nnodes:\n"
      "  src: {type: synthetic_4dstem, params: {scan_shape: [9, 11], detector_shape: [16, 16], phase_max: 0.3}}\n"
      "  v: {type: variance, inputs: {x: src.frames}}\n"
      "outputs: {moments: v.moments, normalized: v.normalized}\n";
  sl_run a, b;
  sl_error err;
  if (run_text("dl.yaml", text, 10, 2, NULL, &a, &err) != SL_OK) fail_msg("%s", err.msg);
  if (run_text("dl.yaml", text, 10, 2, device_like_ops(), &b, &err) != SL_OK) fail_msg("%s", err.msg);
  for (int o = 0; o < a.result.n_outputs; o++) {
    const sl_output_data *x = &a.result.outputs[o], *y = output(&b, x->name);
    if (memcmp(x->data, y->data, (size_t)sl_desc_bytes(&x->desc))) fail_msg("%s differs", x->name);
  }
  sl_run_free(&a);
  sl_run_free(&b);
}

/* ramp + 1e9: values 1e9 + (p * 6 + e) mod 1024 over 37 positions. The
 * variance of the ramp's values is exact in long double; a sum of squares
 * of numbers near 1e9 (1e18 each, 37 of them) in f64 would keep no digit
 * of it. */
static void test_far_from_zero(void **state) {
  (void)state;
  const char *text =
      "pipeline: far\nnodes:\n"
      "  src: {type: ramp, params: {positions: [37], item_shape: [6], dtype: f64}}\n"
      "  up: {type: affine, inputs: {x: src.out}, params: {scale: 1, offset: 1e9}}\n"
      "  v: {type: variance, inputs: {x: up.y}}\n"
      "outputs: {variance: v.variance, mean: v.mean}\n";
  for (int64_t chunk = 1; chunk <= 37; chunk += 6) {
    sl_run run;
    sl_error err;
    if (run_text("far.yaml", text, chunk, 2, NULL, &run, &err) != SL_OK) fail_msg("%s", err.msg);
    const double *v = output(&run, "variance")->data, *m = output(&run, "mean")->data;
    for (int e = 0; e < 6; e++) {
      long double s = 0, q = 0;
      for (int p = 0; p < 37; p++) s += ramp_expected(p, 6, e);
      for (int p = 0; p < 37; p++) q += (ramp_expected(p, 6, e) - s / 37) * (ramp_expected(p, 6, e) - s / 37);
      if (fabsl(v[e] - q / 37) > 1e-6L * (q / 37) || fabsl(m[e] - (1e9L + s / 37)) > 1e-6L)
        fail_msg("chunk %lld, element %d: variance %.17g mean %.17g against %.17Lg %.17Lg", (long long)chunk, e,
                 v[e], m[e], q / 37, 1e9L + s / 37);
    }
    sl_run_free(&run);
  }
}

static void expect_refused(const char *nodes, const char *needle) {
  char text[1024];
  snprintf(text, sizeof text, "pipeline: bad\nnodes:\n%s", nodes);
  sl_run run;
  sl_error err;
  if (run_text("bad.yaml", text, 0, 1, NULL, &run, &err) == SL_OK || !strstr(err.msg, needle))
    fail_msg("expected '%s', got '%s'", needle, err.msg);
  assert_string_equal(err.node, "v");
  sl_run_free(&run);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refused("  src: {type: ramp, params: {positions: [5], item_shape: [3]}}\n"
                 "  v: {type: variance, inputs: {x: src.out}, params: {ddof: 2}}\noutputs: {m: v.mean}\n",
                 "'ddof' must be 0 or 1");
  expect_refused("  c: {type: constant, params: {shape: [4], value: 1}}\n"
                 "  v: {type: variance, inputs: {x: c.out}}\noutputs: {m: v.mean}\n",
                 "must be streamed");
}

/* The plan lends the moments a whole-sized partial and says how it merges. */
static void test_plan_shows_merge(void **state) {
  (void)state;
  const char *text =
      "pipeline: p\nnodes:\n"
      "  src: {type: ramp, params: {positions: [40], item_shape: [5]}}\n"
      "  v: {type: variance, inputs: {x: src.out}}\noutputs: {v: v.variance}\n";
  sl_run run;
  sl_error err;
  if (run_text("plan.yaml", text, 8, 1, NULL, &run, &err) != SL_OK) fail_msg("%s", err.msg);
  char *shown = NULL;
  plan_text(&run, &shown);
  if (!strstr(shown, "combine merge")) fail_msg("no 'combine merge' in:\n%s", shown);
  free(shown);
  int merged = 0;
  for (int b = 0; b < run.plan->n_buffers; b++)
    if (run.plan->buffers[b].combine == SL_COMBINE_MERGE) {
      merged++;
      assert_int_equal(run.plan->buffers[b].partial_bytes, 3 * 5 * 8);
    }
  assert_int_equal(merged, 1);
  sl_run_free(&run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shot_noise_is_poisson), cmocka_unit_test(test_against_two_passes),
      cmocka_unit_test(test_device_like_same_bits), cmocka_unit_test(test_far_from_zero),
      cmocka_unit_test(test_refusals),             cmocka_unit_test(test_plan_shows_merge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
