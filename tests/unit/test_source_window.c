/* hdf5_source's windows (nodes/hdf5/source_window.c): every frame of a
 * scan read through them, in calls of several sizes, against the values
 * the fixture wrote with the HDF5 C API (fx_value); and a scan whose every
 * position fits the first window (one_window) read in the call itself: no
 * reader thread started (the process's threads counted), and with an
 * allocator (the device backends' pinned memory) one window made instead
 * of three. A scan of several windows starts its reader threads and makes
 * its three windows, so both counts can fail.
 * Fixtures come from test_h5_index.c (written with the HDF5 C API). */
#define SL_H5_FIXTURES_ONLY
#include <dirent.h>

#include "test_h5_index.c"

#include "nodes/hdf5/source_window.h"

/* The process's threads now (the entries of /proc/self/task). */
static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* A malloc'd allocator that counts its windows. */
typedef struct counting_alloc {
  int made, freed;
} counting_alloc;

static sl_code count_alloc(void *ctx, size_t bytes, void **ptr, sl_error *err) {
  (void)err;
  *ptr = malloc(bytes);
  assert_non_null(*ptr);
  __atomic_add_fetch(&((counting_alloc *)ctx)->made, 1, __ATOMIC_RELAXED); /* the spare: its own thread */
  return SL_OK;
}

static void count_free(void *ctx, void *ptr, size_t bytes) {
  (void)bytes;
  free(ptr);
  __atomic_add_fetch(&((counting_alloc *)ctx)->freed, 1, __ATOMIC_RELAXED);
}

static sl_code copy_out(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  (void)err;
  memcpy((uint8_t *)ctx + dst_offset, src, bytes);
  return SL_OK;
}

/* Windows over ix (malloc'd until an allocator is set) whose reader would
 * start `read_threads` threads. */
static sl_src_windows windows_for(const sl_h5_index *ix, int read_threads) {
  sl_src_windows w;
  memset(&w, 0, sizeof w);
  w.ix = ix;
  w.read_threads = read_threads;
  return w;
}

/* Reads the whole scan of ix through w in calls of `call` positions and
 * checks every pixel against the fixture's values (u32 frames). Returns
 * the most threads the process had during the reads. */
static int read_scan(sl_src_windows *w, const sl_h5_index *ix, int64_t call) {
  const int64_t total = ix->n_frames, fp = ix->frame_rows * ix->frame_cols;
  const char *where[8];
  for (int f = 0; f < ix->n_files; f++) where[f] = ix->files[f];
  uint32_t *out = malloc((size_t)(call * fp) * sizeof *out);
  assert_non_null(out);
  int most = 0;
  for (int64_t p = 0; p < total; p += call) {
    const int64_t n = total - p < call ? total - p : call;
    sl_src_window win;
    sl_error e;
    sl_error_clear(&e);
    sl_code rc = sl_src_windows_get(w, p, n, total, &win, &e);
    if (rc) print_error("sl_src_windows_get: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    rc = sl_src_plain(&win, ix, where, p, n, fp * 4, copy_out, out, &e);
    assert_int_equal(rc, SL_OK);
    for (int64_t f = 0; f < n; f++)
      for (int64_t r = 0; r < ix->frame_rows; r++)
        for (int64_t c = 0; c < ix->frame_cols; c++)
          assert_int_equal(out[(f * ix->frame_rows + r) * ix->frame_cols + c], fx_value(p + f, r, c, 4));
    const int t = thread_count();
    most = t > most ? t : most;
  }
  free(out);
  return most;
}

/* A scan of 3 files, 26 frames of 12 x 20 u32 (25 KB): the first window
 * holds it all, malloc'd (the CPU kernel) in calls of any size. */
static void t_one_window_reads_in_the_call(void **state) {
  (void)state;
  fx_opts o = {.n_files = 3, .frames = {10, 9, 7}, .h = 12, .w = 20, .k = 3, .dtype = H5T_STD_U32LE};
  char m[512];
  sl_h5_index *ix = fx_index("sw1", &o, m, sizeof m);
  for (int64_t call = 1; call <= 26; call += 5) {
    sl_src_windows w = windows_for(ix, 3); /* would start them */
    const int before = thread_count();
    assert_int_equal(read_scan(&w, ix, call), before);
    assert_true(w.one_window);
    sl_chunk_reader_stats st;
    sl_src_windows_stats(&w, &st);
    assert_int_equal(st.threads, 1);
    sl_src_windows_free(&w);
  }
  sl_h5_index_free(ix);
}

/* With an allocator, one call for the whole scan (a device backend's small
 * run): one window made, no thread; in calls of 4 positions, the read-ahead
 * and the spare: three windows, and reader threads. */
static void t_one_window_with_an_allocator(void **state) {
  (void)state;
  fx_opts o = {.n_files = 2, .frames = {9, 8}, .h = 16, .w = 10, .k = 2, .dtype = H5T_STD_U32LE};
  char m[512];
  sl_h5_index *ix = fx_index("sw2", &o, m, sizeof m);
  for (int whole = 1; whole >= 0; whole--) {
    counting_alloc ca = {0};
    sl_src_windows w = windows_for(ix, 2);
    w.al = (sl_src_alloc){.alloc = count_alloc, .free = count_free, .ctx = &ca};
    const int before = thread_count();
    const int most = read_scan(&w, ix, whole ? ix->n_frames : 4);
    assert_int_equal(w.one_window, whole);
    if (whole) {
      assert_int_equal(most, before);
      assert_int_equal(ca.made, 1);
    } else {
      assert_true(most > before);
      assert_int_equal(ca.made, SL_SRC_WINDOWS);
    }
    sl_src_windows_free(&w);
    assert_int_equal(ca.freed, ca.made);
  }
  sl_h5_index_free(ix);
}

/* A scan over a malloc'd window's bytes (SL_SRC_WINDOW_BYTES): 80 frames
 * of 64 x 64 u32 (1.3 MB) read ahead window by window on reader threads. */
static void t_many_windows_read_ahead(void **state) {
  (void)state;
  fx_opts o = {.n_files = 2, .frames = {40, 40}, .h = 64, .w = 64, .k = 4, .dtype = H5T_STD_U32LE};
  char m[512];
  sl_h5_index *ix = fx_index("sw3", &o, m, sizeof m);
  sl_src_windows w = windows_for(ix, 2);
  const int before = thread_count();
  assert_true(read_scan(&w, ix, 8) > before);
  assert_false(w.one_window);
  sl_chunk_reader_stats st;
  sl_src_windows_stats(&w, &st);
  assert_true(st.requests >= 2);
  sl_src_windows_free(&w);
  sl_h5_index_free(ix);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_one_window_reads_in_the_call),
      cmocka_unit_test(t_one_window_with_an_allocator),
      cmocka_unit_test(t_many_windows_read_ahead),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
