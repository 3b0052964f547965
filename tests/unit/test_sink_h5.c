/* results.h5's writer (engine/exec/sink_h5.c) as write_h5 and write_png use
 * it: streamed images written chunk by chunk, their range folded on the way
 * (sl_h5_writer_range) and their rows served from the write-behind buffer
 * (sl_h5_writer_rows_held) or read back from the file (sl_h5_writer_read_rows),
 * also with the dataset and buffer made before the stream (sl_h5_writer_reserve);
 * ragged items past both of its write-behind buffers (sl_h5_writer_ragged);
 * one writer shared by threads, as a split run's shards share it.
 * Every check is against the test's own data and plain loops, and the file
 * is read back with HDF5 itself after the writer finished it. */
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
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
 * positions, in order (or with the first two chunks swapped), its dataset
 * and buffer made first when `reserved` (sl_h5_writer_reserve, as `sluice
 * run` does when it opens the file), then checks the range, the rows held
 * or read back, and the finished file. */
static void image_case_as(sl_dtype t, int64_t rows, int64_t cols, int64_t chunk, bool swapped, bool expect_held,
                          bool reserved) {
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
  if (reserved) {
    assert_int_equal(sl_h5_writer_reserve(w, "img", &d, &e), SL_OK);
    assert_false(sl_h5_writer_range(w, "img", &lo, &hi)); /* nothing written yet */
    assert_null(sl_h5_writer_rows_held(w, "img", 0, 1));
  }
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

static void image_case(sl_dtype t, int64_t rows, int64_t cols, int64_t chunk, bool swapped, bool expect_held) {
  image_case_as(t, rows, cols, chunk, swapped, expect_held, false);
}

/* The dataset and its write-behind buffer made before the first chunk:
 * the same rows held or read back, the same file, whether the image fits
 * the buffer or not, in order or not. */
static void test_reserved_before_the_stream(void **st) {
  (void)st;
  image_case_as(SL_U16, 37, 53, 100, false, true, true);
  image_case_as(SL_F64, 64, 64, 7, false, true, true);
  image_case_as(SL_U16, 37, 53, 100, true, true, true);
  const int64_t cols = 1500, rows = SL_H5_IMAGE_BEHIND_BYTES / (8 * cols) + 2; /* over the buffer */
  image_case_as(SL_F64, rows, cols, 4096, false, false, true);
}

static void test_small_images_held_whole(void **st) {
  (void)st;
  image_case(SL_U16, 37, 53, 100, false, true);
  image_case(SL_F64, 64, 64, 7, false, true);
  image_case(SL_F64, 5, 9, 45, false, true); /* one chunk */
}

/* Chunks out of order: an image the buffer holds whole keeps each position
 * at its place, so its rows are all held; over the buffer, the buffer is
 * written out when the next positions do not follow, so the first rows
 * come back from the file. */
static void test_out_of_order(void **st) {
  (void)st;
  image_case(SL_U16, 37, 53, 100, true, true);
  image_case(SL_F64, 40, 41, 64, true, true);
  const int64_t cols = 1500, rows = SL_H5_IMAGE_BEHIND_BYTES / (8 * cols) + 2;
  image_case(SL_F64, rows, cols, 4096, true, false);
}

/* The shards of a split run share one writer: threads writing interleaved
 * chunks of the same outputs (an image held whole, a 3-D output over its
 * buffer) at once, under the writer's lock; the finished file holds every
 * position. */
typedef struct shard_writes {
  sl_h5_writer *w;
  const sl_tensor_desc *img_d, *cube_d;
  const char *img, *cube;
  int index, count;
  int64_t chunk, n_img, n_cube;
  sl_code rc;
} shard_writes;

static void *shard_write(void *arg) {
  shard_writes *s = arg;
  sl_error e;
  sl_error_clear(&e);
  const int64_t ci = 8 * 64 * 32; /* a cube position's bytes */
  for (int64_t c = s->index; s->rc == SL_OK && c * s->chunk < s->n_img; c += s->count) {
    int64_t start = c * s->chunk, count = s->n_img - start < s->chunk ? s->n_img - start : s->chunk;
    s->rc = sl_h5_writer_positions(s->w, "img", s->img_d, c, start, count, s->img + start * 8, &e);
    if (s->rc == SL_OK && start < s->n_cube) {
      int64_t m = s->n_cube - start < count ? s->n_cube - start : count;
      s->rc = sl_h5_writer_positions(s->w, "cube", s->cube_d, c, start, m, s->cube + start * ci, &e);
    }
  }
  return NULL;
}

static void test_shared_by_threads(void **st) {
  (void)st;
  /* what a split run asks before it shares the library among threads */
  char version[32];
  hbool_t ts = 0;
  unsigned maj, min, rel;
  assert_true(H5is_library_threadsafe(&ts) >= 0 && H5get_libversion(&maj, &min, &rel) >= 0);
  assert_int_equal(sl_h5_threadsafe(version, sizeof version), (bool)ts);
  char want[32];
  snprintf(want, sizeof want, "%u.%u.%u", maj, min, rel);
  assert_string_equal(version, want);
  if (!ts) skip(); /* threads sharing a non-thread-safe HDF5: what split runs refuse */
  path_make("shared");
  sl_error e;
  sl_error_clear(&e);
  sl_h5_writer *w = NULL;
  assert_int_equal(sl_h5_writer_open(g_path, NULL, 0, &w, &e), SL_OK);
  int64_t di[2] = {96, 80}, dc[4] = {48, 40, 64, 32}; /* 3,840 positions of f64; 1,920 of 16 KiB */
  sl_tensor_desc img_d = sl_desc_make(SL_F64, 2, di, 2), cube_d = sl_desc_make(SL_F64, 4, dc, 2);
  const int64_t n_img = 96 * 80, n_cube = 48 * 40;
  char *img = image_make(SL_F64, n_img), *cube = image_make(SL_F64, n_cube * 64 * 32);
  assert_int_equal(sl_h5_writer_reserve(w, "img", &img_d, &e), SL_OK);
  enum { T = 3 };
  pthread_t th[T];
  shard_writes sw[T];
  for (int t = 0; t < T; t++) {
    sw[t] = (shard_writes){w, &img_d, &cube_d, img, cube, t, T, 7, n_img, n_cube, SL_OK};
    assert_int_equal(pthread_create(&th[t], NULL, shard_write, &sw[t]), 0);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(sw[t].rc, SL_OK);
  }
  double lo, hi, want_lo, want_hi;
  plain_range(SL_F64, img, n_img, &want_lo, &want_hi);
  assert_true(sl_h5_writer_range(w, "img", &lo, &hi));
  assert_true(lo == want_lo && hi == want_hi);
  const void *held = sl_h5_writer_rows_held(w, "img", 0, 96);
  assert_non_null(held);
  assert_memory_equal(held, img, (size_t)n_img * 8);
  sl_output_data out[2];
  memset(out, 0, sizeof out);
  out[0].name = "img", out[0].node_id = "n", out[0].port = "p", out[0].scan_axes = 2, out[0].desc = img_d;
  out[1].name = "cube", out[1].node_id = "n", out[1].port = "q", out[1].scan_axes = 2, out[1].desc = cube_d;
  assert_int_equal(sl_h5_writer_finish(w, out, 2, &e), SL_OK);
  file_equals("img", SL_F64, img, n_img);
  file_equals("cube", SL_F64, cube, n_cube * 64 * 32);
  unlink(g_path);
  free(img);
  free(cube);
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

/* Ragged items straight into the writer, past both write-behind buffers:
 * 10,000 items (more than SL_H5_RAGGED_BEHIND_ITEMS entries), some empty,
 * some over SL_H5_WRITE_BEHIND_BYTES, in calls of 1 to 700 items with gaps
 * between items (positions no item holds); read back with HDF5 against the
 * items as made here. */
#define RAGGED_ITEMS 10000
static int64_t ragged_size(int64_t k) {
  if (k % 3001 == 7) return SL_H5_WRITE_BEHIND_BYTES + 4097; /* larger than the bytes' buffer */
  return k % 11 == 0 ? 0 : (k * 37) % 300;                   /* some empty */
}
static uint8_t ragged_byte(int64_t k, int64_t j) { return (uint8_t)(k * 13 + j); }

static void test_ragged_items_past_the_buffers(void **st) {
  (void)st;
  path_make("ragged");
  sl_error e;
  sl_error_clear(&e);
  sl_h5_writer *w = NULL;
  assert_int_equal(sl_h5_writer_open(g_path, NULL, 0, &w, &e), SL_OK);
  /* item k holds positions 3k and 3k + 1; position 3k + 2 has none */
  int64_t dims[2] = {3 * RAGGED_ITEMS, 64};
  sl_tensor_desc d = sl_desc_make(SL_U8, 2, dims, 1);
  d.variable = true;
  assert_true(sl_desc_is_ragged(&d));
  int64_t k = 0, chunk = 0;
  while (k < RAGGED_ITEMS) {
    const int64_t m = RAGGED_ITEMS - k < 1 + chunk * 37 % 700 ? RAGGED_ITEMS - k : 1 + chunk * 37 % 700;
    int64_t bytes = (int64_t)sizeof(sl_packed_items) + m * (int64_t)sizeof(sl_packed_entry);
    for (int64_t i = k; i < k + m; i++) bytes += ragged_size(i);
    sl_packed_items *pk = malloc((size_t)bytes);
    assert_non_null(pk);
    pk->n = (uint64_t)m, pk->reserved = 0;
    uint64_t at = sizeof *pk + (uint64_t)m * sizeof(sl_packed_entry);
    for (int64_t i = k; i < k + m; i++) {
      for (int64_t j = 0; j < ragged_size(i); j++) ((uint8_t *)pk)[at + (uint64_t)j] = ragged_byte(i, j);
      pk->entries[i - k] = (sl_packed_entry){.offset = at, .size = (uint64_t)ragged_size(i),
                                             .first_position = 3 * i, .n_positions = 2, .origin = (uint64_t)i};
      at += (uint64_t)ragged_size(i);
    }
    assert_int_equal(sl_h5_writer_ragged(w, "r", &d, chunk, 3 * k, 3 * m, pk, bytes, &e), SL_OK);
    free(pk);
    k += m, chunk++;
  }
  sl_output_data out;
  memset(&out, 0, sizeof out);
  out.name = "r", out.node_id = "n", out.port = "p", out.scan_axes = 1, out.desc = d;
  assert_int_equal(sl_h5_writer_finish(w, &out, 1, &e), SL_OK);
  hid_t f = H5Fopen(g_path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  uint64_t *off = malloc((RAGGED_ITEMS + 1) * sizeof *off);
  int64_t *first = malloc(RAGGED_ITEMS * sizeof *first), *npos = malloc(RAGGED_ITEMS * sizeof *npos);
  hid_t ds = H5Dopen2(f, "r/offsets", H5P_DEFAULT);
  assert_true(ds >= 0 && H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off) >= 0);
  H5Dclose(ds);
  ds = H5Dopen2(f, "r/first_position", H5P_DEFAULT);
  assert_true(ds >= 0 && H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, first) >= 0);
  H5Dclose(ds);
  ds = H5Dopen2(f, "r/n_positions", H5P_DEFAULT);
  assert_true(ds >= 0 && H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, npos) >= 0);
  H5Dclose(ds);
  ds = H5Dopen2(f, "r/bytes", H5P_DEFAULT);
  assert_true(ds >= 0);
  hid_t space = H5Dget_space(ds);
  hsize_t total = 0;
  H5Sget_simple_extent_dims(space, &total, NULL);
  H5Sclose(space);
  uint8_t *b = malloc(total + 1);
  assert_true(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
  H5Dclose(ds);
  H5Fclose(f);
  assert_int_equal(off[0], 0);
  for (int64_t i = 0; i < RAGGED_ITEMS; i++) {
    if (off[i + 1] - off[i] != (uint64_t)ragged_size(i) || first[i] != 3 * i || npos[i] != 2)
      fail_msg("item %lld: %llu bytes at %lld (+%lld), not %lld at %lld (+2)", (long long)i,
               (unsigned long long)(off[i + 1] - off[i]), (long long)first[i], (long long)npos[i],
               (long long)ragged_size(i), (long long)(3 * i));
    for (int64_t j = 0; j < ragged_size(i); j++)
      if (b[off[i] + (uint64_t)j] != ragged_byte(i, j))
        fail_msg("item %lld byte %lld: %u, not %u", (long long)i, (long long)j, b[off[i] + (uint64_t)j],
                 ragged_byte(i, j));
  }
  assert_int_equal((int64_t)total, (int64_t)off[RAGGED_ITEMS]);
  free(b), free(off), free(first), free(npos);
  unlink(g_path);
}

/* One call of entries {first position, positions} (items of 3 bytes) to
 * ragged output "q" of 40 positions; its code, the message in e. */
static sl_code ragged_call(sl_h5_writer *w, int64_t chunk, int64_t start, int64_t count, const int64_t (*ent)[2],
                           int n, sl_error *e) {
  int64_t dims[2] = {40, 8};
  sl_tensor_desc d = sl_desc_make(SL_U8, 2, dims, 1);
  d.variable = true;
  uint8_t buf[16 + 8 * 48 + 8 * 3];
  sl_packed_items *pk = (sl_packed_items *)(void *)buf;
  pk->n = (uint64_t)n, pk->reserved = 0;
  uint64_t at = 16 + (uint64_t)n * 48;
  for (int i = 0; i < n; i++, at += 3) {
    memset(buf + at, 'a' + i, 3);
    pk->entries[i] = (sl_packed_entry){.offset = at, .size = 3, .first_position = ent[i][0], .n_positions = ent[i][1]};
  }
  sl_error_clear(e);
  return sl_h5_writer_ragged(w, "q", &d, chunk, start, count, buf, (int64_t)at, e);
}

/* Which entries a call may hold: the item the previous call ended with,
 * sent again, is skipped; one that begins before the call and is not that
 * item, one outside the stream (a negative position too), one beginning
 * after the call, or one overlapping what was written, is an internal error
 * naming the output, the chunk and the item. */
static void test_ragged_entries_refused(void **st) {
  (void)st;
  static const struct {
    int64_t ent[2];
    const char *why;
  } bad[] = {
      {{1, 1}, "is not the item the previous call ended with"}, /* began before, not the last item */
      {{-3, 1}, "positions outside it"},
      {{6, 0}, "holds no positions"},
      {{39, 2}, "positions outside it"},
      {{9, 1}, "does not begin in the call's positions"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    path_make("ragged-refused");
    sl_error e;
    sl_error_clear(&e);
    sl_h5_writer *w = NULL;
    assert_int_equal(sl_h5_writer_open(g_path, NULL, 0, &w, &e), SL_OK);
    const int64_t first[2][2] = {{0, 2}, {2, 3}}; /* call 0: positions 0-3; item [2, 5) runs into call 1 */
    assert_int_equal(ragged_call(w, 0, 0, 4, first, 2, &e), SL_OK);
    const int64_t again[2][2] = {{2, 3}, {5, 1}}; /* call 1: positions 4-7, the item sent again, and the next */
    if (ragged_call(w, 1, 4, 4, again, 2, &e) != SL_OK) fail_msg("the item sent again: %s", e.msg);
    const int64_t one[1][2] = {{bad[k].ent[0], bad[k].ent[1]}};
    assert_int_equal(ragged_call(w, 2, 8, 1, one, 1, &e), SL_ERR_INTERNAL);
    if (!strstr(e.msg, bad[k].why) || !strstr(e.msg, "output 'q', chunk 2"))
      fail_msg("entry %lld +%lld: '%s'", (long long)bad[k].ent[0], (long long)bad[k].ent[1], e.msg);
    /* after the refusal the writer goes on: [5, 6) was the last item */
    const int64_t overlap[1][2] = {{5, 1}};
    assert_int_equal(ragged_call(w, 2, 4, 4, overlap, 1, &e), SL_ERR_INTERNAL);
    assert_non_null(strstr(e.msg, "overlaps an item written before it"));
    const int64_t next[1][2] = {{6, 1}};
    assert_int_equal(ragged_call(w, 2, 6, 1, next, 1, &e), SL_OK);
    assert_int_equal(ragged_call(w, 3, 7, 4, next, 1, &e), SL_OK); /* the last item, sent again: skipped */
    const int64_t before[1][2] = {{5, 3}};
    assert_int_equal(ragged_call(w, 3, 7, 4, before, 1, &e), SL_ERR_INTERNAL);
    assert_non_null(strstr(e.msg, "is not the item the previous call ended with"));
    const int64_t after[1][2] = {{7, 2}};
    assert_int_equal(ragged_call(w, 3, 7, 4, after, 1, &e), SL_OK);
    sl_h5_writer_abandon(w);
    unlink(g_path);
  }
}

int main(void) {
  sl_h5_writer_process_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_images_held_whole),
      cmocka_unit_test(test_reserved_before_the_stream),
      cmocka_unit_test(test_out_of_order),
      cmocka_unit_test(test_shared_by_threads),
      cmocka_unit_test(test_large_image_read_back),
      cmocka_unit_test(test_only_images),
      cmocka_unit_test(test_ragged_items_past_the_buffers),
      cmocka_unit_test(test_ragged_entries_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
