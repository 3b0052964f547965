/* The transpose region: data streamed over the scan made pixel-major
 * (transpose_scan) and streamed again over the pixels (stream), then back.
 * Every result is checked against the ramp's closed form (element e of
 * position p is (p * item + e) mod 1024), bit for bit, over chunk sizes and
 * thread counts; the plan must show one pass per stream. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

#define SCAN_R 9
#define SCAN_C 7
#define NPOS (SCAN_R * SCAN_C)
#define ITEM_R 5
#define ITEM_C 4
#define ITEM (ITEM_R * ITEM_C)

static float ramp(int64_t p, int64_t e) { return (float)((p * ITEM + e) & 1023); }

static const char *k_round_trip =
    "pipeline: round_trip\n"
    "nodes:\n"
    "  src: {type: ramp, params: {positions: [9, 7], item_shape: [5, 4], dtype: f32}}\n"
    "  tp: {type: transpose_scan, inputs: {x: src.out}}\n"
    "  pixels: {type: stream, inputs: {x: tp.pixel_major}, params: {axes: 2, name: pixels}}\n"
    "  per_position: {type: sum, inputs: {x: pixels.out}}\n"
    "  back: {type: transpose_scan, inputs: {x: pixels.out}}\n"
    "  scan: {type: stream, inputs: {x: back.pixel_major}, params: {axes: 2, name: scan}}\n"
    "  again: {type: gather, inputs: {x: scan.out}}\n"
    "  frames_sum: {type: sum, inputs: {x: scan.out}}\n"
    "outputs: {pixel_major: tp.pixel_major, per_position: per_position.total,\n"
    "          back: back.pixel_major, again: again.whole, frames_sum: frames_sum.total,\n"
    "          pixel_stream: pixels.out}\n";

static void check_round_trip(int64_t chunk, int threads) {
  char path[512];
  write_temp_file(path, sizeof path, "round_trip.yaml", k_round_trip);
  sl_run run;
  sl_error err;
  sl_code rc = run_file(path, NULL, 0, chunk, threads, 0, NULL, &run, &err);
  if (rc != SL_OK) fail_msg("chunk %lld: %s", (long long)chunk, err.msg);
  /* pixel-major: [5,4,9,7], element (e, p) = ramp(p, e) */
  const sl_output_data *pm = output(&run, "pixel_major");
  assert_int_equal(pm->desc.rank, 4);
  assert_int_equal(pm->desc.dims[0], ITEM_R);
  assert_int_equal(pm->desc.dims[3], SCAN_C);
  const float *y = pm->data;
  for (int64_t e = 0; e < ITEM; e++)
    for (int64_t p = 0; p < NPOS; p++)
      if (y[e * NPOS + p] != ramp(p, e)) fail_msg("pixel_major[%lld][%lld]", (long long)e, (long long)p);
  /* the pixel stream itself, assembled: the same layout */
  assert_memory_equal(output(&run, "pixel_stream")->data, y, sizeof(float) * NPOS * ITEM);
  /* a sum over the pixel stream: one total per scan position */
  const double *pp = output(&run, "per_position")->data;
  for (int64_t p = 0; p < NPOS; p++) {
    double want = 0;
    for (int64_t e = 0; e < ITEM; e++) want += ramp(p, e);
    assert_true(pp[p] == want);
  }
  /* back to scan-major, whole and as a stream over the scan again */
  const float *back = output(&run, "back")->data, *again = output(&run, "again")->data;
  for (int64_t p = 0; p < NPOS; p++)
    for (int64_t e = 0; e < ITEM; e++) {
      assert_true(back[p * ITEM + e] == ramp(p, e));
      assert_true(again[p * ITEM + e] == ramp(p, e));
    }
  const double *fs = output(&run, "frames_sum")->data;
  for (int64_t e = 0; e < ITEM; e++) {
    double want = 0;
    for (int64_t p = 0; p < NPOS; p++) want += ramp(p, e);
    assert_true(fs[e] == want);
  }
  /* the plan: scan, then pixels, then the scan again, each its own pass */
  const sl_plan *plan = run.plan;
  assert_int_equal(plan->n_passes, 3);
  assert_null(plan->passes[0].axis);
  assert_string_equal(plan->passes[1].axis, "pixels");
  assert_null(plan->passes[2].axis);
  assert_int_equal(plan->passes[0].positions, NPOS);
  assert_int_equal(plan->passes[1].positions, ITEM);
  if (chunk > 0) assert_int_equal(plan->passes[0].chunk_positions, chunk < NPOS ? chunk : NPOS);
  /* the stream node's outputs are views: no bytes of their own */
  int views = 0;
  for (int b = 0; b < plan->n_buffers; b++)
    if (plan->buffers[b].view) {
      views++;
      assert_int_equal(plan->buffers[b].bytes, 0);
      assert_int_equal(plan->buffers[b].slot, -1);
    }
  assert_int_equal(views, 2);
  sl_run_free(&run);
}

static void test_round_trip_bit_exact(void **state) {
  (void)state;
  const int64_t chunks[] = {1, 4, 10, NPOS, 0};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++)
    for (int threads = 1; threads <= 2; threads++) check_round_trip(chunks[c], threads);
}

static void expect_refused(const char *name, const char *text, const char *needle) {
  char path[512];
  write_temp_file(path, sizeof path, name, text);
  sl_run run;
  sl_error err;
  sl_code rc = run_file(path, NULL, 0, 0, 1, 0, NULL, &run, &err);
  if (rc != SL_ERR_PIPELINE || !strstr(err.msg, needle))
    fail_msg("%s: expected an error with '%s', got %d '%s'", name, needle, rc, err.msg);
  sl_run_free(&run);
}

static void test_refusals(void **state) {
  (void)state;
  expect_refused("streamed_twice.yaml",
                 "pipeline: p\nnodes:\n"
                 "  src: {type: ramp, params: {positions: [6], item_shape: [4], dtype: f32}}\n"
                 "  s: {type: stream, inputs: {x: src.out}}\noutputs: {o: s.out}\n",
                 "already streamed");
  expect_refused("no_item.yaml",
                 "pipeline: p\nnodes:\n"
                 "  src: {type: ramp, params: {positions: [6], item_shape: [4], dtype: f32}}\n"
                 "  w: {type: gather, inputs: {x: src.out}}\n"
                 "  s: {type: stream, inputs: {x: w.whole}, params: {axes: 2}}\noutputs: {o: s.out}\n",
                 "param 'axes'");
  /* two streams of one name must have the same positions */
  expect_refused("clash.yaml",
                 "pipeline: p\nnodes:\n"
                 "  src: {type: ramp, params: {positions: [6], item_shape: [4], dtype: f32}}\n"
                 "  tp: {type: transpose_scan, inputs: {x: src.out}}\n"
                 "  w: {type: gather, inputs: {x: src.out}}\n"
                 "  a: {type: stream, inputs: {x: tp.pixel_major}}\n"
                 "  b: {type: stream, inputs: {x: w.whole}}\n"
                 "  sa: {type: sum, inputs: {x: a.out}}\n  sb: {type: sum, inputs: {x: b.out}}\n"
                 "outputs: {a: sa.total, b: sb.total}\n",
                 "must share one scan");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_bit_exact),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
