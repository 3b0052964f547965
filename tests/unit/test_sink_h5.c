/* results.h5's writer (engine/exec/sink_h5.c) as write_h5 and write_png use
 * it: streamed images written chunk by chunk, their range folded on the way
 * (sl_h5_writer_range) and their rows served from the write-behind buffer
 * (sl_h5_writer_rows_held) or read back from the file (sl_h5_writer_read_rows).
 * Every check is against the test's own data and plain loops, and the file
 * is read back with HDF5 itself after the writer finished it. */
#include <hdf5.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/exec/sinks.h"

static char g_path[256];

static void path_make(const char *tag) {
  snprintf(g_path, sizeof g_path, "/tmp/sluice-test-sink-h5-%d-%s.h5", (int)getpid(), tag);
}

/* A rows x cols image of dtype t (u16 or f64), values from a hash of the
 * index; f64 images hold a NaN and an infinity, which the range skips. */
static void *image_make(sl_dtype t, int64_t n) {
  void *p = malloc((size_t)n * sl_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    if (t == SL_U16) ((uint16_t *)p)[i] = (uint16_t)(h % 50000 + 7);
    else ((double *)p)[i] = (double)(int64_t)(h % 100001) * 0.37 - 123.0;
  }
  if (t == SL_F64 && n > 20) {
    ((double *)p)[3] = NAN;
    ((double *)p)[11] = INFINITY;
  }
  return p;
}

/* The finite range by a plain loop. */
static void plain_range(sl_dtype t, const void *p, int64_t n, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double v = t == SL_U16 ? (double)((const uint16_t *)p)[i] : ((const double *)p)[i];
    if (!isfinite(v)) continue;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
  }
}

/* Reads dataset `name` of the finished file with HDF5 and compares it. */
static void file_equals(const char *name, sl_dtype t, const void *want, int64_t n) {
  hid_t f = H5Fopen(g_path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  assert_true(d >= 0);
  size_t bytes = (size_t)n * sl_dtype_size(t);
  void *got = malloc(bytes);
  assert_true(H5Dread(d, t == SL_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      got) >= 0);
  assert_memory_equal(got, want, bytes);
  free(got);
  H5Dclose(d);
  H5Fclose(f);
}

/* Writes a rows x cols streamed image (stream_rank 2) in chunks of `chunk`
 * positions, in order (or with the first two chunks swapped), then checks
 * the range, the rows held or read back, and the finished file. */
static void image_case(sl_dtype t, int64_t rows, int64_t cols, int64_t chunk, bool swapped, bool expect_held) {
  path_make("image");
  sl_error e;
  sl_error_clear(&e);
  sl_h5_writer *w = NULL;
  assert_int_equal(sl_h5_writer_open(g_path, NULL, 0, &w, &e), SL_OK);
  int64_t dims[2] = {rows, cols};
  sl_tensor_desc d = sl_desc_make(t, 2, dims, 2);
  const int64_t n = rows * cols, es = (int64_t)sl_dtype_size(t);
  char *img = image_make(t, n);
  double lo = 0, hi = 0;
  const int64_t chunks = (n + chunk - 1) / chunk;
  for (int64_t k = 0; k < chunks; k++) {
    int64_t c = swapped && chunks > 1 && k < 2 ? 1 - k : k; /* 1, 0, 2, 3, ... */
    int64_t start = c * chunk, count = n - start < chunk ? n - start : chunk;
    assert_int_equal(sl_h5_writer_positions(w, "img", &d, c, start, count, img + start * es, &e), SL_OK);
    if (k + 1 < chunks) assert_false(sl_h5_writer_range(w, "img", &lo, &hi)); /* positions missing */
  }
  double want_lo, want_hi;
  plain_range(t, img, n, &want_lo, &want_hi);
  assert_true(sl_h5_writer_range(w, "img", &lo, &hi));
  assert_true(lo == want_lo && hi == want_hi);
  /* rows: held in the buffer, or read back from the file */
  const void *held = sl_h5_writer_rows_held(w, "img", 0, rows);
  assert_true(expect_held ? held != NULL : held == NULL);
  if (held) assert_memory_equal(held, img, (size_t)(n * es));
  const int64_t strip = rows > 3 ? rows / 3 : 1;
  char *back = malloc((size_t)(strip * cols * es));
  for (int64_t r = 0; r < rows; r += strip) {
    int64_t m = rows - r < strip ? rows - r : strip;
    const void *h = sl_h5_writer_rows_held(w, "img", r, m);
    if (h) {
      assert_memory_equal(h, img + r * cols * es, (size_t)(m * cols * es));
    } else {
      assert_int_equal(sl_h5_writer_read_rows(w, "img", r, m, back, &e), SL_OK);
      assert_memory_equal(back, img + r * cols * es, (size_t)(m * cols * es));
    }
  }
  free(back);
  sl_output_data out;
  memset(&out, 0, sizeof out);
  out.name = "img", out.node_id = "n", out.port = "p", out.scan_axes = 2, out.desc = d;
  assert_int_equal(sl_h5_writer_finish(w, &out, 1, &e), SL_OK);
  file_equals("img", t, img, n);
  unlink(g_path);
  free(img);
}

static void test_small_images_held_whole(void **st) {
  (void)st;
  image_case(SL_U16, 37, 53, 100, false, true);
  image_case(SL_F64, 64, 64, 7, false, true);
  image_case(SL_F64, 5, 9, 45, false, true); /* one chunk */
}

/* Chunks out of order: the buffer is written out when the next positions do
 * not follow, so the first rows come back from the file. */
static void test_out_of_order_read_back(void **st) {
  (void)st;
  image_case(SL_U16, 37, 53, 100, true, false);
  image_case(SL_F64, 40, 41, 64, true, false);
}

/* An image over SL_H5_IMAGE_BEHIND_BYTES: the writer holds at most
 * SL_H5_WRITE_BEHIND_BYTES of it, so its PNG reads it back from the file. */
static void test_large_image_read_back(void **st) {
  (void)st;
  const int64_t cols = 1500, rows = SL_H5_IMAGE_BEHIND_BYTES / (8 * cols) + 2;
  int64_t dims[2] = {rows, cols};
  sl_tensor_desc d = sl_desc_make(SL_F64, 2, dims, 2);
  assert_int_equal(sl_h5_write_behind_bytes(&d), SL_H5_WRITE_BEHIND_BYTES);
  image_case(SL_F64, rows, cols, 4096, false, false);
}

/* Only images are held whole and ranged: a streamed 3-D output keeps the
 * bounded buffer, and no range is claimed for it. */
static void test_only_images(void **st) {
  (void)st;
  int64_t dims3[3] = {64, 64, 32};
  sl_tensor_desc d3 = sl_desc_make(SL_F64, 3, dims3, 2);
  assert_int_equal(sl_h5_write_behind_bytes(&d3), SL_H5_WRITE_BEHIND_BYTES);
  int64_t dims2[2] = {64, 64};
  sl_tensor_desc d2 = sl_desc_make(SL_F64, 2, dims2, 2);
  assert_int_equal(sl_h5_write_behind_bytes(&d2), 64 * 64 * 8);
  path_make("cube");
  sl_error e;
  sl_error_clear(&e);
  sl_h5_writer *w = NULL;
  assert_int_equal(sl_h5_writer_open(g_path, NULL, 0, &w, &e), SL_OK);
  double *x = calloc(64 * 64 * 32, sizeof *x);
  assert_int_equal(sl_h5_writer_positions(w, "cube", &d3, 0, 0, 64 * 64, x, &e), SL_OK);
  double lo, hi;
  assert_false(sl_h5_writer_range(w, "cube", &lo, &hi));
  assert_false(sl_h5_writer_range(w, "absent", &lo, &hi));
  assert_null(sl_h5_writer_rows_held(w, "absent", 0, 1));
  sl_output_data out;
  memset(&out, 0, sizeof out);
  out.name = "cube", out.node_id = "n", out.port = "p", out.scan_axes = 2, out.desc = d3;
  assert_int_equal(sl_h5_writer_finish(w, &out, 1, &e), SL_OK);
  unlink(g_path);
  free(x);
}

int main(void) {
  sl_h5_writer_process_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_images_held_whole),
      cmocka_unit_test(test_out_of_order_read_back),
      cmocka_unit_test(test_large_image_read_back),
      cmocka_unit_test(test_only_images),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
