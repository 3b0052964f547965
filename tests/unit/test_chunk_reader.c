/* chunk_reader: raw chunk bytes read through the reader against
 * H5Dread_chunk (independent), uncompressed frames against H5Dread;
 * double-buffered windows, FIFO order, merged reads, a data file truncated
 * after indexing, usage errors, close with requests outstanding.
 * Fixtures come from test_h5_index.c (written with the HDF5 C API). */
#define SL_H5_FIXTURES_ONLY
#include <pthread.h>

#include "engine/core/cpus.h"
#include "engine/core/settings.h"
#include "test_h5_index.c"

#include "nodes/hdf5/chunk_reader.h"
#include "tests/unit/expect_error.h"

/* All frames of the acquisition through HDF5 (H5Dread of every data file),
 * as uint32. */
static uint32_t *read_all_frames(const sl_h5_index *ix) {
  size_t fp = (size_t)(ix->frame_rows * ix->frame_cols);
  uint32_t *all = malloc((size_t)ix->n_frames * fp * sizeof *all);
  size_t at = 0;
  for (int f = 0; f < ix->n_files; f++) {
    hid_t fid = H5Fopen(ix->files[f], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(fid, "/entry/data/data", H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hsize_t dims[3];
    H5Sget_simple_extent_dims(sp, dims, NULL);
    assert_true(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, all + at) >= 0);
    at += (size_t)dims[0] * fp;
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(fid);
  }
  assert_int_equal(at, (size_t)ix->n_frames * fp);
  return all;
}

static uint32_t elem_at(const uint8_t *p, int size, size_t i) {
  if (size == 1) return p[i];
  if (size == 2) {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return v;
  }
  uint32_t v;
  memcpy(&v, p + 4 * i, 4);
  return v;
}

/* A reader of windows of up to `win` chunks (SL_OK asserted); e cleared. */
static sl_chunk_reader *reader_open(const sl_h5_index *ix, int64_t win, const sl_chunk_reader_opts *opts,
                                    sl_error *e) {
  sl_chunk_reader *r = NULL;
  sl_error_clear(e);
  sl_code rc = sl_chunk_reader_open_opts(ix, win, opts, &r, e);
  if (rc) print_error("sl_chunk_reader_open: %s\n", e->msg);
  assert_int_equal(rc, SL_OK);
  return r;
}

/* Reads the whole acquisition in windows of `win` chunks, double-buffered:
 * request(k+1) before checking window k. Checks every frame against H5Dread
 * (uncompressed) or every chunk against H5Dread_chunk (compressed). */
static void read_all_and_check_opts(const sl_h5_index *ix, int64_t win, const sl_chunk_reader_opts *opts,
                                   sl_chunk_reader_stats *stats_out) {
  sl_error e;
  sl_chunk_reader *r = reader_open(ix, win, opts, &e);
  size_t cap = (size_t)(ix->max_chunk_size * (uint64_t)win);
  uint8_t *buf[2] = {malloc(cap), malloc(cap)};
  uint32_t *frames = ix->filter == SL_H5_FILTER_NONE ? read_all_frames(ix) : NULL;
  size_t fp = (size_t)(ix->frame_rows * ix->frame_cols);
  uint64_t *offs = malloc((size_t)(win + 1) * sizeof *offs);

  int64_t nwin = (ix->n_chunks + win - 1) / win;
  assert_int_equal(sl_chunk_reader_request(r, 0, win < ix->n_chunks ? win : ix->n_chunks, buf[0], cap, &e), SL_OK);
  for (int64_t k = 0; k < nwin; k++) {
    int64_t first = -1, count = -1;
    uint8_t *dst = NULL;
    sl_code rc = sl_chunk_reader_wait_window(r, &first, &count, &dst, &e);
    if (rc) print_error("wait: %s: %s\n", e.file, e.msg);
    assert_int_equal(rc, SL_OK);
    assert_int_equal(first, k * win);
    assert_ptr_equal(dst, buf[k % 2]);
    if (k + 1 < nwin) {
      int64_t f1 = (k + 1) * win, c1 = f1 + win <= ix->n_chunks ? win : ix->n_chunks - f1;
      assert_int_equal(sl_chunk_reader_request(r, f1, c1, buf[(k + 1) % 2], cap, &e), SL_OK);
    }
    sl_h5_window_offsets(ix, first, count, offs);
    assert_int_equal(offs[count], sl_h5_window_bytes(ix, first, count));
    for (int64_t j = 0; j < count; j++) {
      const sl_h5_chunk *c = &ix->chunks[first + j];
      const uint8_t *p = dst + offs[j];
      if (frames) {
        for (int64_t t = 0; t < c->n_frames; t++)
          for (size_t i = 0; i < fp; i++)
            if (elem_at(p, ix->elem_size, (size_t)t * fp + i) != frames[(size_t)(c->first_frame + t) * fp + i])
              fail_msg("chunk %lld frame %lld pixel %zu differs", (long long)(first + j),
                       (long long)(c->first_frame + t), i);
      }
      if (!ix->contiguous) { /* raw bytes == H5Dread_chunk */
        int64_t file_first = c->first_frame;
        for (int64_t q = first + j - 1; q >= 0 && ix->chunks[q].file == c->file; q--)
          file_first = ix->chunks[q].first_frame;
        size_t sz = 0;
        uint32_t fm = 0;
        uint8_t *chunk = fx_read_chunk(ix->files[c->file], "/entry/data/data",
                                       c->first_frame - file_first, &sz, &fm);
        assert_int_equal(sz, c->size);
        assert_int_equal(fm, c->filter_mask);
        assert_memory_equal(chunk, p, c->size);
        free(chunk);
      }
    }
  }
  assert_int_equal(sl_chunk_reader_pending(r), 0);
  if (stats_out) sl_chunk_reader_get_stats(r, stats_out);
  sl_chunk_reader_close(r);
  free(offs);
  free(frames);
  free(buf[0]);
  free(buf[1]);
}

static void read_all_and_check(const sl_h5_index *ix, int64_t win, sl_chunk_reader_stats *stats_out) {
  read_all_and_check_opts(ix, win, NULL, stats_out);
}

static void t_uncompressed_chunked(void **state) {
  fx_opts o = {.n_files = 3, .frames = {10, 10, 7}, .h = 12, .w = 20, .k = 4};
  char m[512];
  sl_h5_index *ix = fx_index("rk", &o, m, sizeof m);
  for (int64_t win = 1; win <= 9; win += 2) read_all_and_check(ix, win, NULL);
  sl_h5_index_free(ix);

  fx_opts p = {.n_files = 2, .frames = {5, 4}, .h = 9, .w = 7, .k = 1, .dtype = H5T_STD_U32LE};
  ix = fx_index("r1", &p, m, sizeof m);
  read_all_and_check(ix, 4, NULL);
  sl_h5_index_free(ix);
}

static void t_contiguous_merged(void **state) {
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 10, .w = 10, .layout = FX_CONTIG, .dtype = H5T_STD_U8LE};
  char m[512];
  sl_h5_index *ix = fx_index("rc", &o, m, sizeof m);
  assert_int_equal(ix->n_chunks, 11);
  sl_chunk_reader_stats st;
  read_all_and_check(ix, 11, &st);
  /* One window over two files of adjacent frames: one read per file. */
  assert_int_equal(st.requests, 1);
  assert_int_equal(st.reads, 2);
  assert_int_equal(st.bytes, 11 * 100);
  sl_h5_index_free(ix);
}

static void t_bitshuffle_raw(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 3, .frames = {7, 7, 3}, .h = 40, .w = 36, .k = 1, .layout = FX_BSLZ4};
  char m[512];
  sl_h5_index *ix = fx_index("rbs", &o, m, sizeof m);
  assert_int_equal(ix->filter, SL_H5_FILTER_BITSHUFFLE);
  for (int64_t win = 1; win <= 8; win *= 2) read_all_and_check(ix, win, NULL);
  sl_h5_index_free(ix);
}

static void t_fifo_depth(void **state) {
  fx_opts o = {.n_files = 1, .frames = {12}, .h = 4, .w = 4, .k = 1};
  char m[512];
  sl_h5_index *ix = fx_index("rfifo", &o, m, sizeof m);
  sl_error e;
  sl_chunk_reader *r = reader_open(ix, 3, NULL, &e);
  uint8_t buf[SL_CHUNK_READER_DEPTH + 1][3 * 32];
  for (int i = 0; i < SL_CHUNK_READER_DEPTH; i++)
    assert_int_equal(sl_chunk_reader_request(r, 3 * i, 3, buf[i], sizeof buf[i], &e), SL_OK);
  assert_int_equal(sl_chunk_reader_pending(r), SL_CHUNK_READER_DEPTH);
  assert_int_equal(sl_chunk_reader_request(r, 0, 1, buf[SL_CHUNK_READER_DEPTH], 96, &e), SL_ERR_USAGE);
  assert_non_null(strstr(e.msg, "outstanding"));
  for (int i = 0; i < SL_CHUNK_READER_DEPTH; i++) {
    int64_t first = -1;
    assert_int_equal(sl_chunk_reader_wait_window(r, &first, NULL, NULL, &e), SL_OK);
    assert_int_equal(first, 3 * i);
    for (int j = 0; j < 3; j++) {
      uint16_t v;
      memcpy(&v, buf[i] + 32 * j + 2 * 5, 2); /* pixel (1, 1) */
      assert_int_equal(v, fx_value(3 * i + j, 1, 1, 2));
    }
  }
  assert_int_equal(sl_chunk_reader_wait(r, &e), SL_ERR_USAGE);
  assert_non_null(strstr(e.msg, "nothing requested"));
  sl_chunk_reader_close(r);
  sl_h5_index_free(ix);
}

static void t_usage_errors(void **state) {
  fx_opts o = {.n_files = 1, .frames = {5}, .h = 4, .w = 4, .k = 1};
  char m[512];
  sl_h5_index *ix = fx_index("rusage", &o, m, sizeof m);
  sl_chunk_reader *r = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_chunk_reader_open(ix, 0, &r, &e), SL_ERR_USAGE);
  assert_null(r);
  assert_int_equal(sl_chunk_reader_open(ix, 2, &r, &e), SL_OK);
  uint8_t buf[256];
  assert_int_equal(sl_chunk_reader_request(r, 4, 2, buf, sizeof buf, &e), SL_ERR_USAGE); /* past the end */
  assert_int_equal(sl_chunk_reader_request(r, -1, 1, buf, sizeof buf, &e), SL_ERR_USAGE);
  assert_int_equal(sl_chunk_reader_request(r, 0, 0, buf, sizeof buf, &e), SL_ERR_USAGE);
  assert_int_equal(sl_chunk_reader_request(r, 0, 3, buf, sizeof buf, &e), SL_ERR_USAGE); /* > max window */
  assert_non_null(strstr(e.msg, "exceeds the maximum"));
  assert_int_equal(sl_chunk_reader_request(r, 0, 2, buf, 63, &e), SL_ERR_USAGE); /* 64 bytes needed */
  assert_non_null(strstr(e.msg, "need 64 bytes"));
  assert_int_equal(sl_chunk_reader_pending(r), 0);
  /* Close with requests outstanding: no leak, no use after free. */
  uint8_t *heap = malloc(64);
  assert_int_equal(sl_chunk_reader_request(r, 0, 2, heap, 64, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_request(r, 2, 2, buf, 64, &e), SL_OK);
  sl_chunk_reader_close(r);
  free(heap);
  sl_h5_index_free(ix);
}

static void t_truncated_after_open(void **state) {
  fx_opts o = {.n_files = 2, .frames = {3, 30}, .h = 32, .w = 32, .k = 1};
  char m[512], d2[512];
  sl_h5_index *ix = fx_index("rtrunc", &o, m, sizeof m);
  fx_data_path("rtrunc", 2, d2, sizeof d2);
  sl_error e;
  sl_chunk_reader *r = reader_open(ix, ix->n_chunks, NULL, &e);
  /* Cut the file inside chunk 3 + 20 (frame 20 of the second file). */
  const sl_h5_chunk *c = &ix->chunks[23];
  assert_int_equal(truncate(d2, (off_t)(c->file_offset + 100)), 0);
  size_t cap = (size_t)sl_h5_window_bytes(ix, 0, ix->n_chunks);
  uint8_t *buf = malloc(cap);
  assert_int_equal(sl_chunk_reader_request(r, 0, ix->n_chunks, buf, cap, &e), SL_OK);
  sl_code rc = sl_chunk_reader_wait(r, &e);
  expect_error_at(&e, rc, SL_ERR_FORMAT, d2, 23);
  char off[64];
  snprintf(off, sizeof off, "offset %llu", (unsigned long long)(c->file_offset + 100));
  assert_non_null(strstr(e.msg, off));
  assert_non_null(strstr(e.msg, "end of file"));
  sl_chunk_reader_close(r);
  free(buf);
  /* Reopening the index now fails on the truncated file. */
  sl_h5_index *ix2 = NULL;
  sl_error_clear(&e);
  assert_int_not_equal(sl_h5_index_open(m, NULL, &ix2, &e), SL_OK);
  assert_string_equal(e.file, d2);
  sl_h5_index_free(ix);
}

static void t_missing_at_reader_open(void **state) {
  fx_opts o = {.n_files = 2, .frames = {2, 2}, .h = 4, .w = 4, .k = 1};
  char m[512], d1[512];
  sl_h5_index *ix = fx_index("rgone", &o, m, sizeof m);
  fx_data_path("rgone", 1, d1, sizeof d1);
  assert_int_equal(unlink(d1), 0);
  sl_chunk_reader *r = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_chunk_reader_open(ix, 4, &r, &e), SL_ERR_IO);
  assert_null(r);
  assert_string_equal(e.file, d1);
  assert_non_null(strstr(e.msg, "No such file"));
  sl_h5_index_free(ix);
}

/* A reader opened for a range of chunks opens only their files: with the
 * second of three files gone, a reader for the first file's chunks opens,
 * reads them as H5Dread does, and refuses a request outside its range; one
 * for every chunk (several threads opening the files) fails at open, naming
 * the missing file. */
static void t_range_opens_its_files(void **state) {
  fx_opts o = {.n_files = 3, .frames = {4, 4, 4}, .h = 4, .w = 4, .k = 1};
  char m[512], d1[512];
  sl_h5_index *ix = fx_index("rrange", &o, m, sizeof m);
  uint32_t *frames = read_all_frames(ix); /* before the file goes */
  fx_data_path("rrange", 2, d1, sizeof d1); /* numbered from 1: the second */
  assert_int_equal(unlink(d1), 0);
  sl_error e;
  const sl_chunk_reader_opts first_file = {.threads = 3, .first_chunk = 0, .chunk_count = 4};
  sl_chunk_reader *r = reader_open(ix, 4, &first_file, &e);
  size_t cap = (size_t)(ix->max_chunk_size * 4);
  uint8_t *buf = malloc(cap);
  assert_int_equal(sl_chunk_reader_request(r, 0, 4, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_wait(r, &e), SL_OK);
  size_t fp = (size_t)(ix->frame_rows * ix->frame_cols);
  for (size_t i = 0; i < 4 * fp; i++) assert_int_equal(elem_at(buf, ix->elem_size, i), frames[i]);
  sl_error_clear(&e);
  assert_int_equal(sl_chunk_reader_request(r, 4, 2, buf, cap, &e), SL_ERR_USAGE);
  assert_non_null(strstr(e.msg, "outside [0, 4)"));
  sl_chunk_reader_close(r);
  const sl_chunk_reader_opts all = {.threads = 3};
  sl_chunk_reader *r2 = NULL;
  sl_error_clear(&e);
  assert_int_equal(sl_chunk_reader_open_opts(ix, 4, &all, &r2, &e), SL_ERR_IO);
  assert_null(r2);
  assert_string_equal(e.file, d1);
  free(buf);
  free(frames);
  sl_h5_index_free(ix);
}

/* Parallel reads: windows cut into pieces of a few bytes (chunks split across
 * pieces, pieces across chunk and file boundaries) read by several threads,
 * checked byte for byte like the single-threaded reads. */
static void t_parallel_pieces(void **state) {
  fx_opts o = {.n_files = 3, .frames = {10, 10, 7}, .h = 12, .w = 20, .k = 4};
  char m[512];
  sl_h5_index *ix = fx_index("rpar", &o, m, sizeof m);
  for (int threads = 1; threads <= 5; threads += 2)
    for (uint64_t piece = 1; piece <= 4096; piece *= 8) {
      sl_chunk_reader_opts opts = {.threads = threads, .piece_bytes = piece};
      sl_chunk_reader_stats st;
      for (int64_t win = 1; win <= 9; win += 4) read_all_and_check_opts(ix, win, &opts, &st);
      assert_int_equal(st.threads, threads);
      assert_true(st.pieces >= st.requests);
      if (threads > 1 && piece == 1) assert_true(st.pieces > (uint64_t)ix->n_chunks); /* chunks were cut */
    }
  sl_h5_index_free(ix);

  fx_opts c = {.n_files = 2, .frames = {6, 5}, .h = 10, .w = 10, .layout = FX_CONTIG, .dtype = H5T_STD_U8LE};
  ix = fx_index("rparc", &c, m, sizeof m);
  sl_chunk_reader_opts opts = {.threads = 4, .piece_bytes = 96};
  sl_chunk_reader_stats st;
  read_all_and_check_opts(ix, 11, &opts, &st);
  /* 1100 bytes in two merged reads (one per file: 600 and 500 bytes), cut
   * for 4 threads into pieces of at most max(1100 / 16 + 1, 96) = 96 bytes. */
  assert_int_equal(st.requests, 1);
  assert_int_equal(st.bytes, 11 * 100);
  assert_int_equal(st.pieces, 7 + 6);
  assert_int_equal(st.reads, 7 + 6);
  /* Large pieces: one per merged read, as with one thread. */
  opts.piece_bytes = 1 << 20;
  read_all_and_check_opts(ix, 11, &opts, &st);
  assert_int_equal(st.pieces, 2);
  assert_int_equal(st.reads, 2);
  sl_h5_index_free(ix);

  if (fx_bitshuffle_available()) {
    fx_opts b = {.n_files = 3, .frames = {7, 7, 3}, .h = 40, .w = 36, .k = 1, .layout = FX_BSLZ4};
    ix = fx_index("rparb", &b, m, sizeof m);
    sl_chunk_reader_opts bo = {.threads = 3, .piece_bytes = 7};
    for (int64_t win = 1; win <= 8; win *= 2) read_all_and_check_opts(ix, win, &bo, NULL);
    sl_h5_index_free(ix);
  }
}

/* A caller's workers for reading in the wait (sl_chunk_reader_opts.run):
 * `workers` threads that each call fn over a share of [0, n), joined
 * before it returns, as a backend's parallel_for; counts its calls. */
typedef struct test_runner {
  int workers;
  int calls;
} test_runner;

typedef struct runner_share {
  sl_range_fn fn;
  void *fn_ctx;
  int64_t begin, end;
  int worker;
} runner_share;

static void *runner_thread(void *p) {
  runner_share *sh = p;
  if (sh->begin < sh->end) sh->fn(sh->fn_ctx, sh->begin, sh->end, sh->worker);
  return NULL;
}

static void test_run(void *run_ctx, int64_t n, sl_range_fn fn, void *fn_ctx) {
  test_runner *t = run_ctx;
  t->calls++;
  pthread_t th[8];
  runner_share sh[8];
  assert_true(t->workers >= 1 && t->workers <= 8);
  for (int w = 0; w < t->workers; w++) {
    sh[w] = (runner_share){fn, fn_ctx, n * w / t->workers, n * (w + 1) / t->workers, w};
    assert_int_equal(pthread_create(&th[w], NULL, runner_thread, &sh[w]), 0);
  }
  for (int w = 0; w < t->workers; w++) pthread_join(th[w], NULL);
}

/* A good window, then one over the truncated file, then a good one again:
 * the FIFO reports each with its own status, the failing one at the first
 * failing byte (file d2, offset cut, chunk 23). */
static void read_truncated(const sl_h5_index *ix, const sl_chunk_reader_opts *opts, const char *d2, uint64_t cut,
                           uint8_t *buf, size_t cap) {
  sl_error e;
  sl_chunk_reader *r = reader_open(ix, ix->n_chunks, opts, &e);
  assert_int_equal(sl_chunk_reader_request(r, 0, 3, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_request(r, 0, ix->n_chunks, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_wait(r, &e), SL_OK);
  sl_code rc = sl_chunk_reader_wait(r, &e);
  expect_error_at(&e, rc, SL_ERR_FORMAT, d2, 23);
  char off[64];
  snprintf(off, sizeof off, "offset %llu", (unsigned long long)cut);
  if (!strstr(e.msg, off))
    fail_msg("threads %d, workers %d: expected '%s' in: %s", opts->threads, opts->run_workers, off, e.msg);
  assert_non_null(strstr(e.msg, "end of file"));
  assert_int_equal(sl_chunk_reader_request(r, 1, 2, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_wait(r, &e), SL_OK);
  sl_chunk_reader_close(r);
}

/* A truncated data file read by several threads in tiny pieces, or in the
 * wait by 1-4 workers: the error is the first failing byte's, as with one
 * thread (file, offset, chunk), however the pieces after it fail or finish
 * first. */
static void t_parallel_truncated(void **state) {
  fx_opts o = {.n_files = 2, .frames = {3, 30}, .h = 32, .w = 32, .k = 1};
  char m[512], d2[512];
  sl_h5_index *ix = fx_index("rptrunc", &o, m, sizeof m);
  fx_data_path("rptrunc", 2, d2, sizeof d2);
  const sl_h5_chunk *c = &ix->chunks[23];
  uint64_t cut = c->file_offset + 100;
  assert_int_equal(truncate(d2, (off_t)cut), 0);
  size_t cap = (size_t)sl_h5_window_bytes(ix, 0, ix->n_chunks);
  uint8_t *buf = malloc(cap);
  for (int threads = 1; threads <= 8; threads *= 2)
    for (int rep = 0; rep < 5; rep++) {
      sl_chunk_reader_opts opts = {.threads = threads, .piece_bytes = rep % 2 ? 512 : 3000};
      read_truncated(ix, &opts, d2, cut, buf, cap);
    }
  for (int workers = 1; workers <= 4; workers++) {
    test_runner t = {.workers = workers};
    sl_chunk_reader_opts opts = {.run = test_run, .run_ctx = &t, .run_workers = workers,
                                 .piece_bytes = workers % 2 ? 512 : 3000};
    read_truncated(ix, &opts, d2, cut, buf, cap);
    assert_true(workers == 1 || t.calls > 0);
  }
  /* Close while a large window is being read by several threads. */
  for (int rep = 0; rep < 5; rep++) {
    sl_chunk_reader_opts opts = {.threads = 4, .piece_bytes = 16};
    sl_error e;
    sl_chunk_reader *r = reader_open(ix, ix->n_chunks, &opts, &e);
    assert_int_equal(sl_chunk_reader_request(r, 0, 20, buf, cap, &e), SL_OK);
    assert_int_equal(sl_chunk_reader_request(r, 0, 20, buf, cap, &e), SL_OK);
    sl_chunk_reader_close(r);
  }
  free(buf);
  sl_h5_index_free(ix);
}

/* Reading in the wait: the same bytes as the reader threads' (tiny pieces
 * spread over 1-3 workers, windows of 1-9 chunks, chunks cut across pieces);
 * nothing is read until the wait (no thread of the reader's own: a window
 * requested and not waited for stays untouched); the pieces go to the
 * caller's runner. */
static void t_read_in_wait(void **state) {
  fx_opts o = {.n_files = 3, .frames = {10, 10, 7}, .h = 12, .w = 20, .k = 4};
  char m[512];
  sl_h5_index *ix = fx_index("rwait", &o, m, sizeof m);
  for (int workers = 1; workers <= 3; workers++)
    for (uint64_t piece = 1; piece <= 4096; piece *= 64) {
      test_runner t = {.workers = workers};
      sl_chunk_reader_opts opts = {.run = test_run, .run_ctx = &t, .run_workers = workers, .piece_bytes = piece};
      sl_chunk_reader_stats st;
      for (int64_t win = 1; win <= 9; win += 4) read_all_and_check_opts(ix, win, &opts, &st);
      assert_int_equal(st.threads, workers);
      if (piece == 1 && workers == 3) {
        assert_true(st.pieces > (uint64_t)ix->n_chunks); /* chunks were cut */
        assert_true(t.calls > 0);                          /* ... and read by the runner */
      }
    }
  /* Requested, not waited for: nothing read. */
  test_runner t = {.workers = 2};
  sl_chunk_reader_opts opts = {.run = test_run, .run_ctx = &t, .run_workers = 2, .piece_bytes = 16};
  sl_error e;
  sl_chunk_reader *r = reader_open(ix, ix->n_chunks, &opts, &e);
  size_t cap = (size_t)sl_h5_window_bytes(ix, 0, ix->n_chunks);
  uint8_t *buf = malloc(cap), *b2 = malloc(cap);
  memset(buf, 0xA5, cap);
  assert_int_equal(sl_chunk_reader_request(r, 0, 5, buf, cap, &e), SL_OK);
  usleep(20000);
  for (size_t i = 0; i < cap; i++)
    if (buf[i] != 0xA5) fail_msg("byte %zu written before the wait", i);
  assert_int_equal(t.calls, 0);
  assert_int_equal(sl_chunk_reader_wait(r, &e), SL_OK);
  assert_true(t.calls > 0);
  uint64_t *offs = malloc(6 * sizeof *offs);
  sl_h5_window_offsets(ix, 0, 5, offs);
  uint8_t *chunk = fx_read_chunk(ix->files[0], "/entry/data/data", 0, &(size_t){0}, &(uint32_t){0});
  assert_memory_equal(chunk, buf + offs[0], ix->chunks[0].size);
  free(chunk);
  /* The oldest request given up: forgotten (never read); the next is
   * the one waited for. */
  memset(buf, 0xA5, cap);
  assert_int_equal(sl_chunk_reader_request(r, 0, 3, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_request(r, 3, 2, b2, cap, &e), SL_OK);
  sl_chunk_reader_abandon_oldest(r);
  assert_int_equal(sl_chunk_reader_pending(r), 1);
  int64_t first = -1, count = -1;
  uint8_t *dst = NULL;
  assert_int_equal(sl_chunk_reader_wait_window(r, &first, &count, &dst, &e), SL_OK);
  assert_int_equal(first, 3);
  assert_int_equal(count, 2);
  assert_ptr_equal(dst, b2);
  for (size_t i = 0; i < cap; i++)
    if (buf[i] != 0xA5) fail_msg("byte %zu of the abandoned window written", i);
  sl_chunk_reader_abandon_oldest(r); /* nothing outstanding: no-op */
  assert_int_equal(sl_chunk_reader_pending(r), 0);
  sl_chunk_reader_close(r);
  /* With reader threads: the abandoned window is waited for or forgotten,
   * and the next is still the one waited for. */
  sl_chunk_reader_opts th = {.threads = 3, .piece_bytes = 16};
  r = reader_open(ix, ix->n_chunks, &th, &e);
  assert_int_equal(sl_chunk_reader_request(r, 0, 3, buf, cap, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_request(r, 3, 2, b2, cap, &e), SL_OK);
  sl_chunk_reader_abandon_oldest(r);
  assert_int_equal(sl_chunk_reader_wait_window(r, &first, &count, &dst, &e), SL_OK);
  assert_int_equal(first, 3);
  assert_ptr_equal(dst, b2);
  sl_chunk_reader_close(r);
  free(offs);
  free(b2);
  free(buf);
  sl_h5_index_free(ix);
}

/* Who reads: in the wait when the caller's workers hold every CPU the
 * process may use and read_threads is not set; else reader threads. */
static void t_reads_in_wait_rule(void **state) {
  sl_error e;
  unsetenv("SLUICE_READ_THREADS");
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
  const int cpus = sl_usable_cpus();
  assert_true(sl_chunk_reader_reads_in_wait(cpus));
  assert_true(sl_chunk_reader_reads_in_wait(cpus + 1));
  if (cpus > 1) assert_false(sl_chunk_reader_reads_in_wait(cpus - 1));
  const char *two[] = {"read_threads=2"};
  assert_int_equal(sl_settings_init(two, 1, &e), SL_OK);
  assert_false(sl_chunk_reader_reads_in_wait(cpus));
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
}

/* The read_threads setting: from SLUICE_READ_THREADS or --setting (which
 * wins), capped; a bad value is refused when the settings are read. */
static void t_default_threads(void **state) {
  sl_error e;
  setenv("SLUICE_READ_THREADS", "3", 1);
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_default_threads(), 3);
  const char *two[] = {"read_threads=2"};
  assert_int_equal(sl_settings_init(two, 1, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_default_threads(), 2);
  setenv("SLUICE_READ_THREADS", "1000", 1);
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
  assert_int_equal(sl_chunk_reader_default_threads(), SL_CHUNK_READER_MAX_THREADS);
  setenv("SLUICE_READ_THREADS", "x", 1);
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_ERR_USAGE);
  assert_non_null(strstr(e.msg, "read_threads=x (from SLUICE_READ_THREADS)"));
  unsetenv("SLUICE_READ_THREADS");
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
  int d = sl_chunk_reader_default_threads();
  assert_true(d >= 1 && d <= 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_uncompressed_chunked),
      cmocka_unit_test(t_contiguous_merged),
      cmocka_unit_test(t_bitshuffle_raw),
      cmocka_unit_test(t_fifo_depth),
      cmocka_unit_test(t_usage_errors),
      cmocka_unit_test(t_truncated_after_open),
      cmocka_unit_test(t_missing_at_reader_open),
      cmocka_unit_test(t_range_opens_its_files),
      cmocka_unit_test(t_parallel_pieces),
      cmocka_unit_test(t_parallel_truncated),
      cmocka_unit_test(t_default_threads),
      cmocka_unit_test(t_read_in_wait),
      cmocka_unit_test(t_reads_in_wait_rule),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
