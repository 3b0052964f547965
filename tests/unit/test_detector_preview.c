/* detector_preview: the mean of the first frames of acquisitions written with
 * the HDF5 C API (test_h5_index.c's fixtures, whose pixels are a known
 * function fx_value of frame, row and column) against that mean computed
 * here by plain loops, for every storage layout sluice reads (chunked raw,
 * contiguous, bitshuffle, bitshuffle-LZ4 through the official plugin), frames
 * spanning files and partial stored chunks, with and without a mask input;
 * and its errors. */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include "nodes/common/madd_u16.h"
#include "nodes/registry.h"
#include "tests/unit/expect_error.h"
#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_detector_preview;

/* Runs detector_preview on `path` averaging `frames` frames (mask: NULL or
 * h * w bytes), into out (h * w doubles). */
static sl_code preview_run(const char *path, int64_t frames, const uint8_t *mask, int64_t h, int64_t w,
                           int threads, double *out, sl_node *n, sl_error *e) {
  char p[600], f[32];
  snprintf(p, sizeof p, "'%s'", path);
  snprintf(f, sizeof f, "%lld", (long long)frames);
  kv over[2] = {{"path", p}, {"frames", f}};
  int64_t d[2] = {h, w};
  sl_tensor_desc m = sl_desc_make(SL_U8, 2, d, 0);
  sl_code rc = node_make(n, &sl_node_detector_preview, over, 2, &m, mask ? 1 : 0, e);
  if (rc != SL_OK) return rc;
  const void *ins[1] = {mask};
  void *outs[1] = {out};
  return run_whole_threads(n, threads, ins, 1, outs, e);
}

/* The reference: frames [0, min(frames, total)) of the fixture's pixels
 * (fx_pixel), masked pixels and pixels at the dtype maximum counted as 0. */
static void reference(const fx_opts *o, int64_t frames, int64_t total, const uint8_t *mask, int64_t h, int64_t w,
                      size_t elem, double *want) {
  int64_t n = frames < total ? frames : total;
  uint64_t flag = elem == 1 ? 0xFF : elem == 2 ? 0xFFFF : 0xFFFFFFFFu;
  for (int64_t i = 0; i < h * w; i++) {
    double s = 0;
    for (int64_t f = 0; f < n; f++) {
      uint32_t v = fx_pixel(o, f, i / w, i % w, elem);
      if (!(mask && mask[i]) && v != flag) s += (double)v;
    }
    want[i] = s / (double)n;
  }
}

/* elem: bytes per pixel of the file type dtype (0: u16); flagged: about a
 * pixel in eleven at the flag value (fx_pixel). */
static void check_layout_flags(const char *name, int layout, bool need_plugin, hid_t dtype, size_t elem,
                               bool flagged) {
  if (need_plugin) fx_require_bitshuffle();
  const int64_t h = 9, w = 11, total = 3 + 4 + 2;
  fx_opts o = {.n_files = 3, .frames = {3, 4, 2}, .h = h, .w = w, .k = 2, .layout = layout, .dtype = dtype,
               .flagged = flagged};
  char m[512];
  fx_write(name, &o, m, sizeof m);
  uint8_t mask[9 * 11] = {0};
  mask[5] = mask[40] = 1;
  const int64_t counts[] = {1, 2, 5, 9, 100}; /* within a chunk, across files, more than there are */
  /* 1 and 3 workers: each adds its stored chunks into its own partial sum */
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (int with_mask = 0; with_mask < 4; with_mask++) {
      double got[9 * 11], want[9 * 11];
      sl_node n;
      sl_error e;
      sl_code rc = preview_run(m, counts[k], with_mask & 1 ? mask : NULL, h, w, with_mask < 2 ? 1 : 3, got, &n, &e);
      if (rc) print_error("%s, %lld frames: %s\n", name, (long long)counts[k], e.msg);
      assert_int_equal(rc, SL_OK);
      reference(&o, counts[k], total, with_mask & 1 ? mask : NULL, h, w, elem, want);
      assert_memory_equal(got, want, sizeof want);
      assert_non_null(strstr(note(&n, "preview"), "mean of the first"));
      node_free(&n);
    }
}

static void check_layout_type(const char *name, int layout, bool need_plugin, hid_t dtype, size_t elem) {
  check_layout_flags(name, layout, need_plugin, dtype, elem, false);
}

static void check_layout(const char *name, int layout, bool need_plugin) {
  check_layout_type(name, layout, need_plugin, 0, 2);
}

static void t_chunked(void **state) { check_layout("pvchunk", FX_CHUNKED, false); }
/* u8, u16 and u32 frames (each worker's partial sums are u64) */
static void t_u8(void **state) { check_layout_type("pvu8", FX_CHUNKED, false, H5T_STD_U8LE, 1); }
static void t_u32(void **state) { check_layout_type("pvu32", FX_CHUNKED, false, H5T_STD_U32LE, 4); }

/* More u16 frames than a u32 partial sum takes (65537 of at most 65534),
 * whose sums pass 2^32 (160000 frames of values about 30000 on average):
 * the u64 partial sums, on 1 and 2 workers. */
static void t_many_frames(void **state) {
  const int64_t h = 1, w = 3, total = 160000;
  fx_opts o = {.n_files = 1, .frames = {total}, .h = h, .w = w, .k = 1000, .layout = FX_CHUNKED};
  char m[512];
  fx_write("pvmany", &o, m, sizeof m);
  for (int threads = 1; threads <= 2; threads++) {
    double got[3], want[3];
    sl_node n;
    sl_error e;
    sl_code rc = preview_run(m, total, NULL, h, w, threads, got, &n, &e);
    if (rc) print_error("pvmany: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    reference(&o, total, total, NULL, h, w, 2, want);
    assert_memory_equal(got, want, sizeof want);
    node_free(&n);
  }
}
static void t_contiguous(void **state) { check_layout("pvcontig", FX_CONTIG, false); }
static void t_bitshuffle(void **state) { check_layout("pvbs", FX_BITSHUFFLE, true); }
static void t_bslz4(void **state) { check_layout("pvlz4", FX_BSLZ4, true); }
/* Pixels at the dtype's maximum (the detector's flag value) count as 0 in
 * their frame, stored raw or encoded, for each dtype. */
static void t_flagged(void **state) {
  check_layout_flags("pvflag16", FX_CHUNKED, false, 0, 2, true);
  check_layout_flags("pvflag8", FX_CHUNKED, false, H5T_STD_U8LE, 1, true);
  check_layout_flags("pvflag32", FX_CHUNKED, false, H5T_STD_U32LE, 4, true);
  check_layout_flags("pvflaglz4", FX_BSLZ4, true, 0, 2, true);
}

/* Frames large enough that a worker decodes a few stored chunks into its
 * group and adds the group when the next might not fit (the preview's
 * PREVIEW_GROUP_BYTES: 512 KiB; three 64 x 517 u16 frames a chunk, 198 KB,
 * so two chunks a group), a file's last chunk padded (7 and 5 frames of
 * three a chunk) and decoded before the next file's first: u16 pixels,
 * some at the flag value, stored raw (added from the window) or as
 * bitshuffle-LZ4 (decoded into the group), with and without a mask, on 1
 * and 3 workers, with the AVX-512 tiles (517 columns: the last 64 pixels by
 * the portable fold) and without. Fails when a group is added twice or not
 * at all, when a padded chunk's frames are added, or when the flagged
 * pixels are not taken out. */
static void check_groups(const char *name, int layout, bool need_plugin) {
  if (need_plugin) fx_require_bitshuffle();
  const int64_t h = 64, w = 517, total = 7 + 5 + 8;
  fx_opts o = {.n_files = 3, .frames = {7, 5, 8}, .h = h, .w = w, .k = 3, .layout = layout, .flagged = true};
  char m[512];
  fx_write(name, &o, m, sizeof m);
  uint8_t *mask = calloc((size_t)(h * w), 1);
  double *got = malloc((size_t)(h * w) * sizeof *got), *want = malloc((size_t)(h * w) * sizeof *want);
  assert_true(mask && got && want);
  mask[3] = mask[h * w / 2] = mask[h * w - 1] = 1;
  const int64_t counts[] = {13, total};
  for (int avx512 = 0; avx512 < 2; avx512++) {
    sl_madd_allow_avx512(avx512 == 1);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (int with_mask = 0; with_mask < 2; with_mask++) {
        reference(&o, counts[k], total, with_mask ? mask : NULL, h, w, 2, want);
        for (int threads = 1; threads <= 3; threads += 2) {
          sl_node n;
          sl_error e;
          sl_code rc = preview_run(m, counts[k], with_mask ? mask : NULL, h, w, threads, got, &n, &e);
          if (rc) print_error("%s, %lld frames: %s\n", name, (long long)counts[k], e.msg);
          assert_int_equal(rc, SL_OK);
          assert_memory_equal(got, want, (size_t)(h * w) * sizeof *want);
          node_free(&n);
        }
      }
  }
  sl_madd_allow_avx512(true);
  free(mask);
  free(got);
  free(want);
}
static void t_groups_raw(void **state) { check_groups("pvgroup", FX_CHUNKED, false); }
static void t_groups_bslz4(void **state) { check_groups("pvgrouplz4", FX_BSLZ4, true); }

/* A stored chunk that does not decode, in a later window than the first
 * (the preview reads its chunks in up to SL_CHUNK_READER_DEPTH windows and
 * decodes each as it arrives, the later ones still being read): the run
 * fails with a format error that names the data file and the chunk, at 1
 * and 3 workers, and nothing leaks (the outstanding windows are dropped;
 * the sanitizer build checks). Chunks 4 and 5 of 9 are in the second of
 * three windows (frames of 256 x 512, big enough to be cut into windows):
 * the error is chunk 4's, the one a serial run meets first, whichever
 * worker fails first. */
static void t_corrupt_later_chunk(void **state) {
  fx_require_bitshuffle();
  const int64_t h = 256, w = 512;
  fx_opts o = {.n_files = 2, .frames = {5, 4}, .h = h, .w = w, .k = 1, .layout = FX_BSLZ4};
  char m[512];
  sl_h5_index *ix = fx_index("pvbad", &o, m, sizeof m);
  assert_int_equal(ix->n_chunks, 9);
  /* windows of at least 256 KiB (PREVIEW_PIECE_BYTES), so these stored
   * bytes make three windows of three chunks */
  assert_true(sl_h5_window_bytes(ix, 0, 9) >= 3 * (256 << 10));
  const sl_h5_chunk *c = &ix->chunks[4];
  char data[512];
  snprintf(data, sizeof data, "%s", ix->files[c->file]);
  /* bitshuffle's header: the chunk's decoded size, big-endian u64 */
  const uint8_t bogus[8] = {0, 0, 0, 0, 0, 1, 0, 0};
  for (int k = 4; k <= 5; k++) {
    FILE *f = fopen(ix->files[ix->chunks[k].file], "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)ix->chunks[k].file_offset, SEEK_SET), 0);
    assert_int_equal(fwrite(bogus, 1, 8, f), 8);
    assert_int_equal(fclose(f), 0);
  }
  sl_h5_index_free(ix);
  double *got = malloc((size_t)(h * w) * sizeof *got);
  assert_non_null(got);
  for (int threads = 1; threads <= 3; threads += 2) {
    sl_node n;
    sl_error e;
    sl_error_clear(&e);
    sl_code rc = preview_run(m, 9, NULL, h, w, threads, got, &n, &e);
    expect_error_at(&e, rc, SL_ERR_FORMAT, data, 4);
    node_free(&n);
    /* the frames before the bad chunk still make a preview */
    rc = preview_run(m, 4, NULL, h, w, threads, got, &n, &e);
    assert_int_equal(rc, SL_OK);
    node_free(&n);
  }
  free(got);
}

static void t_errors(void **state) {
  kv empty[] = {{"path", "''"}};
  expect_node_error(&sl_node_detector_preview, empty, 1, NULL, 0, SL_ERR_PIPELINE,
                    "param 'path' is empty", NULL);
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 4, .w = 4, .k = 1};
  char m[512], p[600];
  fx_write("pverr", &o, m, sizeof m);
  snprintf(p, sizeof p, "'%s'", m);
  kv zero[] = {{"path", p}, {"frames", "0"}};
  expect_node_error(&sl_node_detector_preview, zero, 2, NULL, 0, SL_ERR_PIPELINE, "'frames'", NULL);
  int64_t d[2] = {5, 4};
  sl_tensor_desc wrong = sl_desc_make(SL_U8, 2, d, 0);
  kv ok[] = {{"path", p}};
  expect_node_error(&sl_node_detector_preview, ok, 1, &wrong, 1, SL_ERR_PIPELINE, "input 'mask'", NULL);
  const sl_node_desc *desc = &sl_node_detector_preview;
  assert_true(desc->host);
  assert_ptr_equal(sl_registry_find(sl_nodes_registry(), "detector_preview"), desc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_chunked),
      cmocka_unit_test(t_u8),
      cmocka_unit_test(t_u32),
      cmocka_unit_test(t_many_frames),
      cmocka_unit_test(t_contiguous),
      cmocka_unit_test(t_bitshuffle),
      cmocka_unit_test(t_bslz4),
      cmocka_unit_test(t_flagged),
      cmocka_unit_test(t_groups_raw),
      cmocka_unit_test(t_groups_bslz4),
      cmocka_unit_test(t_corrupt_later_chunk),
      cmocka_unit_test(t_errors),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  fx_cleanup();
  return rc;
}
