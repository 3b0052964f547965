/* h5_index: Dectris-style fixtures written with the HDF5 C API (not by
 * sluice): chunked (1 and k frames per chunk), contiguous, several data
 * files, single-file and explicit-dataset layouts, bitshuffle through the
 * official plugin, user blocks; chunk offsets and sizes checked against
 * H5Dget_chunk_info read independently; metadata; malformed inputs.
 *
 * The fixture writer is shared: test_chunk_reader.c, test_h5_btree.c and the
 * node tests of hdf5_source, detector_mask and bslz4_decode include this file
 * with SL_H5_FIXTURES_ONLY defined (tests/unit may only hold test_*.c files).
 * They run their tests with cmocka_run_group_tests(tests, fx_setup,
 * fx_teardown). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>

#include "nodes/hdf5/h5_index.h"
#include "tests/unit/test_support.h"

/* ---- fixture writer ------------------------------------------------------ */

#define FX_PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"

/* Not every includer uses every helper. */
#define FX_HELPER static __attribute__((unused))

/* FX_BSLZ4: bitshuffle with LZ4 (what detectors write); FX_BITSHUFFLE:
 * bitshuffle without compression. Both through the official plugin. */
enum { FX_CHUNKED = 0, FX_CONTIG, FX_BSLZ4, FX_DEFLATE, FX_BITSHUFFLE };

typedef struct fx_opts {
  int n_files;                /* 0: single-file layout, /entry/data/data in the master */
  int64_t frames[8];          /* frames per file (frames[0] for the single file) */
  int64_t h, w;
  hid_t dtype;                /* file type; 0 = H5T_STD_U16LE */
  int layout;                 /* FX_* */
  int64_t k;                  /* frames per chunk (chunked layouts) */
  int64_t chunk_rows;         /* 0 = h */
  bool meta;                  /* /entry/instrument/detector metadata */
  bool sat_in_cutoff;         /* saturation at detectorSpecific/countrate_correction_count_cutoff */
  bool image_nr;              /* image_nr_low/high attributes on the data */
  int64_t image_nr_shift;     /* added to image_nr_low (a malformed file when != 0) */
  int64_t nimages;            /* 0 = total frames */
  hsize_t userblock;          /* user block of the data files */
  const char *dataset;        /* single-file layout: dataset path (NULL = /entry/data/data) */
  bool skip_link2;            /* write data_000001 and data_000003 only */
  bool unwritten;             /* datasets declare their frames but store no chunk */
  bool flagged;               /* about one pixel in eleven at the dtype's maximum (fx_pixel) */
} fx_opts;

static char g_tmp[256];

FX_HELPER const char *fx_tmpdir(void) {
  if (!g_tmp[0]) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/sluice-h5-XXXXXX");
    if (!mkdtemp(g_tmp)) abort();
  }
  return g_tmp;
}

/* Value of pixel (r, c) of global frame f; fits every integer dtype used. */
FX_HELPER uint32_t fx_value(int64_t f, int64_t r, int64_t c, size_t elem) {
  uint64_t v = (uint64_t)(f * 7919 + r * 131 + c * 17 + (f * r * c) % 13);
  if (elem == 1) return (uint32_t)(v % 251);
  if (elem == 2) return (uint32_t)(v % 60000);
  return (uint32_t)(v * 65537u % 4000000000u);
}

/* The pixel the fixture writes: fx_value, or with o->flagged the dtype's
 * maximum (a detector's flag value) where (f + 3r + 5c) % 11 == 0. */
FX_HELPER uint32_t fx_pixel(const fx_opts *o, int64_t f, int64_t r, int64_t c, size_t elem) {
  if (o->flagged && (f + 3 * r + 5 * c) % 11 == 0) return elem == 1 ? 0xFFu : elem == 2 ? 0xFFFFu : 0xFFFFFFFFu;
  return fx_value(f, r, c, elem);
}

FX_HELPER void fx_mkgroups(hid_t f, const char *path) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (H5Lexists(f, buf, H5P_DEFAULT) <= 0) H5Gclose(H5Gcreate2(f, buf, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    *p = '/';
  }
  if (H5Lexists(f, buf, H5P_DEFAULT) <= 0) H5Gclose(H5Gcreate2(f, buf, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
}

FX_HELPER void fx_scalar(hid_t f, const char *path, hid_t type, const void *v) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  fx_mkgroups(f, dir);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(f, path, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t mt = H5Tget_native_type(type, H5T_DIR_DEFAULT);
  assert_true(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
  H5Tclose(mt);
  H5Dclose(d);
  H5Sclose(sp);
}

FX_HELPER void fx_data(hid_t f, const char *path, const fx_opts *o, int64_t first_frame, int64_t n) {
  hid_t dtype = o->dtype ? o->dtype : H5T_STD_U16LE;
  size_t elem = H5Tget_size(dtype);
  char dir[256];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  fx_mkgroups(f, dir);
  hsize_t dims[3] = {(hsize_t)n, (hsize_t)o->h, (hsize_t)o->w};
  hsize_t maxd[3] = {o->layout == FX_CONTIG ? (hsize_t)n : H5S_UNLIMITED, (hsize_t)o->h, (hsize_t)o->w};
  hid_t sp = H5Screate_simple(3, dims, maxd);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (o->layout != FX_CONTIG) {
    hsize_t cd[3] = {(hsize_t)o->k, (hsize_t)(o->chunk_rows ? o->chunk_rows : o->h), (hsize_t)o->w};
    H5Pset_chunk(dcpl, 3, cd);
    if (o->layout == FX_BSLZ4 || o->layout == FX_BITSHUFFLE) {
      /* User cd_values of the plugin are (block size, compression: 2 = LZ4,
       * 0 = none); its set_local prepends (major, minor, element size), so
       * the file stores {0, minor, elem, 0, 2}. (Passing all five values
       * would shift them.) */
      unsigned cdv[2] = {0, o->layout == FX_BSLZ4 ? 2 : 0};
      assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cdv) >= 0);
    } else if (o->layout == FX_DEFLATE) {
      H5Pset_deflate(dcpl, 4);
    }
  }
  hid_t d = H5Dcreate2(f, path, dtype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  assert_true(d >= 0);
  if (!o->unwritten) {
    size_t np = (size_t)(n * o->h * o->w);
    uint32_t *buf = malloc(np * sizeof *buf);
    for (int64_t i = 0; i < n; i++)
      for (int64_t r = 0; r < o->h; r++)
        for (int64_t c = 0; c < o->w; c++)
          buf[(i * o->h + r) * o->w + c] = fx_pixel(o, first_frame + i, r, c, elem);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    free(buf);
  }
  if (o->image_nr) {
    hid_t asp = H5Screate(H5S_SCALAR);
    long long lo = first_frame + 1 + o->image_nr_shift, hi = first_frame + n;
    hid_t a = H5Acreate2(d, "image_nr_low", H5T_STD_I64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &lo);
    H5Aclose(a);
    a = H5Acreate2(d, "image_nr_high", H5T_STD_I64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &hi);
    H5Aclose(a);
    H5Sclose(asp);
  }
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}

FX_HELPER void fx_meta(hid_t f, const fx_opts *o, int64_t total) {
  long long xp = o->w, yp = o->h, nimg = o->nimages ? o->nimages : total, ntr = 1;
  unsigned sat = 12345;
  double ct = 0.001, ft = 0.0011;
  fx_scalar(f, "/entry/instrument/detector/x_pixels_in_detector", H5T_STD_I64LE, &xp);
  fx_scalar(f, "/entry/instrument/detector/y_pixels_in_detector", H5T_STD_I64LE, &yp);
  fx_scalar(f, "/entry/instrument/detector/detectorSpecific/nimages", H5T_STD_I64LE, &nimg);
  fx_scalar(f, "/entry/instrument/detector/detectorSpecific/ntrigger", H5T_STD_I64LE, &ntr);
  fx_scalar(f,
            o->sat_in_cutoff ? "/entry/instrument/detector/detectorSpecific/countrate_correction_count_cutoff"
                             : "/entry/instrument/detector/saturation_value",
            H5T_STD_U32LE, &sat);
  fx_scalar(f, "/entry/instrument/detector/count_time", H5T_IEEE_F64LE, &ct);
  fx_scalar(f, "/entry/instrument/detector/frame_time", H5T_IEEE_F32LE, &(float){0.0011f});
  (void)ft;
  hsize_t md[2] = {(hsize_t)o->h, (hsize_t)o->w};
  uint32_t *mask = calloc((size_t)(o->h * o->w), sizeof *mask);
  mask[3] = 1;
  mask[o->w + 5] = 4;
  mask[o->h * o->w - 1] = 2;
  hid_t sp = H5Screate_simple(2, md, NULL);
  hid_t d = H5Dcreate2(f, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5T_STD_U32LE, sp, H5P_DEFAULT,
                       H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask);
  H5Dclose(d);
  H5Sclose(sp);
  free(mask);
}

FX_HELPER hid_t fx_create(const char *path, hsize_t userblock) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (userblock) H5Pset_userblock(fcpl, userblock);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  H5Pclose(fcpl);
  assert_true(f >= 0);
  return f;
}

/* Writes fixture `name` into the temp dir; returns the master (or single)
 * file path in `master`; data file i (1-based) is `<dir>/<name>_data_%06d.h5`. */
FX_HELPER void fx_write(const char *name, const fx_opts *o, char *master, size_t n) {
  const char *dir = fx_tmpdir();
  snprintf(master, n, "%s/%s_master.h5", dir, name);
  int64_t total = 0;
  if (o->n_files == 0) {
    hid_t f = fx_create(master, o->userblock);
    fx_data(f, o->dataset ? o->dataset : "/entry/data/data", o, 0, o->frames[0]);
    total = o->frames[0];
    if (o->meta) fx_meta(f, o, total);
    H5Fclose(f);
    return;
  }
  hid_t m = fx_create(master, 0);
  fx_mkgroups(m, "/entry/data");
  for (int i = 0; i < o->n_files; i++) {
    char data[512], base[256], link[64];
    snprintf(base, sizeof base, "%s_data_%06d.h5", name, i + 1);
    snprintf(data, sizeof data, "%s/%s", dir, base);
    hid_t f = fx_create(data, o->userblock);
    fx_data(f, "/entry/data/data", o, total, o->frames[i]);
    H5Fclose(f);
    total += o->frames[i];
    int li = o->skip_link2 && i >= 1 ? i + 2 : i + 1;
    snprintf(link, sizeof link, "/entry/data/data_%06d", li);
    assert_true(H5Lcreate_external(base, "/entry/data/data", m, link, H5P_DEFAULT, H5P_DEFAULT) >= 0);
  }
  if (o->meta) fx_meta(m, o, total);
  H5Fclose(m);
}

FX_HELPER void fx_data_path(const char *name, int i, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s_data_%06d.h5", fx_tmpdir(), name, i);
}

FX_HELPER bool fx_bitshuffle_available(void) {
  return H5Zfilter_avail(32008) > 0;
}

/* Skips the calling test when the bitshuffle plugin is not installed. */
FX_HELPER void fx_require_bitshuffle(void) {
  if (fx_bitshuffle_available()) return;
  print_message("SKIPPED: bitshuffle HDF5 plugin (filter 32008) not found in %s\n", FX_PLUGIN_DIR);
  skip();
}

/* Before the first HDF5 call: the official bitshuffle plugin. */
FX_HELPER void fx_init(void) {
  setenv("HDF5_PLUGIN_PATH", FX_PLUGIN_DIR, 1);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* fx_init, unless HDF5_PLUGIN_PATH already names the plugins (the device
 * bundle carries its own); true when the bitshuffle plugin is there. */
FX_HELPER bool fx_init_plugins(void) {
  const char *plugins = getenv("HDF5_PLUGIN_PATH");
  if (!plugins || !plugins[0])
    fx_init(); /* the plugin where the system installs it */
  else
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  return fx_bitshuffle_available();
}

/* The fixtures' temp dir goes. */
FX_HELPER void fx_cleanup(void) {
  if (!g_tmp[0]) return;
  if (temp_dir_remove(g_tmp) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
}

/* fx_init and fx_cleanup as cmocka group setup and teardown. */
FX_HELPER int fx_setup(void **state) {
  (void)state;
  fx_init();
  return 0;
}

FX_HELPER int fx_teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

/* The index of `path` (SL_OK asserted). */
FX_HELPER sl_h5_index *fx_open_index(const char *path, const char *dataset) {
  sl_h5_index *ix = NULL;
  sl_error e;
  sl_error_clear(&e);
  sl_code rc = sl_h5_index_open(path, dataset, &ix, &e);
  if (rc) print_error("sl_h5_index_open(%s): %s: %s\n", path, e.file, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_non_null(ix);
  return ix;
}

/* Writes fixture `name` (master path to `master`) and opens its index. */
FX_HELPER sl_h5_index *fx_index(const char *name, const fx_opts *o, char *master, size_t n) {
  fx_write(name, o, master, n);
  return fx_open_index(master, NULL);
}

/* Independent listing: H5Dget_chunk_info of every chunk of one data file,
 * sorted by frame. Returns the count; fills addr/size/frame arrays. */
FX_HELPER int fx_list_chunks(const char *file, const char *dset, uint64_t *addr, uint64_t *size,
                             int64_t *frame, int cap) {
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
  assert_true(d >= 0);
  hsize_t n = 0;
  hid_t sp = H5Dget_space(d);
  assert_true(H5Dget_num_chunks(d, sp, &n) >= 0);
  assert_true((int)n <= cap);
  for (hsize_t i = 0; i < n; i++) {
    hsize_t off[3];
    unsigned mask;
    haddr_t a;
    hsize_t s;
    assert_true(H5Dget_chunk_info(d, sp, i, off, &mask, &a, &s) >= 0);
    /* insertion sort by frame */
    int j = (int)i;
    while (j > 0 && frame[j - 1] > (int64_t)off[0]) {
      addr[j] = addr[j - 1], size[j] = size[j - 1], frame[j] = frame[j - 1];
      j--;
    }
    addr[j] = a, size[j] = s, frame[j] = (int64_t)off[0];
  }
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return (int)n;
}

/* The stored chunk of `dset` in `file` whose first frame is `frame` (local
 * to the file), through H5Dread_chunk: its bytes (malloc'd), size and
 * filter mask. */
FX_HELPER uint8_t *fx_read_chunk(const char *file, const char *dset, int64_t frame, size_t *size,
                                 uint32_t *mask) {
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
  assert_true(d >= 0);
  hsize_t coord[3] = {(hsize_t)frame, 0, 0}, sz = 0;
  assert_true(H5Dget_chunk_storage_size(d, coord, &sz) >= 0);
  uint8_t *buf = malloc(sz ? (size_t)sz : 1);
  *mask = 0;
  assert_true(H5Dread_chunk(d, H5P_DEFAULT, coord, mask, buf) >= 0);
  *size = (size_t)sz;
  H5Dclose(d);
  H5Fclose(f);
  return buf;
}

/* Checks frames 0.. n_frames - 1 of h x w elements of elem_size bytes
 * (little-endian unsigned) against fx_value, pixel by pixel. */
FX_HELPER void fx_check_frames(const void *frames, size_t elem_size, int64_t n_frames, int64_t h,
                               int64_t w) {
  const uint8_t *p = frames;
  for (int64_t f = 0; f < n_frames; f++)
    for (int64_t r = 0; r < h; r++)
      for (int64_t c = 0; c < w; c++, p += elem_size) {
        uint32_t got = 0;
        memcpy(&got, p, elem_size);
        uint32_t want = fx_value(f, r, c, elem_size);
        if (got != want)
          fail_msg("frame %lld pixel (%lld, %lld): %u, want %u", (long long)f, (long long)r,
                   (long long)c, got, want);
      }
}

/* The acquisition the engine-level source tests share: 10 x 10 positions of
 * 24 x 20 u16 in two data files (60 + 40 frames), 4 frames per stored chunk,
 * bitshuffle-LZ4 when the plugin is there (the return value), else raw
 * chunks; its master's path into master. */
FX_HELPER bool fx_two_file_acquisition(const char *name, char *master, size_t n) {
  bool compressed = fx_init_plugins();
  if (!compressed) print_message("NOTE: bitshuffle plugin not found: raw chunked acquisition\n");
  fx_opts o = {.n_files = 2, .frames = {60, 40}, .h = 24, .w = 20, .layout = compressed ? FX_BSLZ4 : FX_CHUNKED,
               .k = 4, .meta = true};
  fx_write(name, &o, master, n);
  return compressed;
}

#ifndef SL_H5_FIXTURES_ONLY

/* ---- tests ---------------------------------------------------------------- */

static void check_against_hdf5(const sl_h5_index *ix, const char *dset) {
  int c = 0;
  int64_t frame0 = 0;
  for (int f = 0; f < ix->n_files; f++) {
    uint64_t addr[256], size[256];
    int64_t frame[256];
    int n = fx_list_chunks(ix->files[f], dset, addr, size, frame, 256);
    for (int i = 0; i < n; i++, c++) {
      assert_true(c < ix->n_chunks);
      assert_int_equal(ix->chunks[c].file, f);
      assert_int_equal(ix->chunks[c].file_offset, addr[i]);
      assert_int_equal(ix->chunks[c].size, size[i]);
      assert_int_equal(ix->chunks[c].first_frame, frame0 + frame[i]);
    }
    int64_t nf = 0;
    for (int i = 0; i < ix->n_chunks; i++)
      if (ix->chunks[i].file == f) nf += ix->chunks[i].n_frames;
    frame0 += nf;
  }
  assert_int_equal(c, ix->n_chunks);
  assert_int_equal(frame0, ix->n_frames);
}

/* Opening must fail with `code`; the formatted error (file: message) must
 * contain `needle` and the error's file `file_needle`. The formatted text is
 * left in g_fmt. */
static char g_fmt[2048];

static void expect_error(const char *path, const char *dataset, sl_code code, const char *needle,
                         const char *file_needle) {
  sl_h5_index *ix = NULL;
  sl_error e;
  sl_error_clear(&e);
  sl_code rc = sl_h5_index_open(path, dataset, &ix, &e);
  sl_error_format(&e, g_fmt, sizeof g_fmt);
  if (rc != code || !strstr(g_fmt, needle) || (file_needle && !strstr(e.file, file_needle)))
    print_error("got code %d: '%s'; wanted code %d containing '%s'\n", rc, g_fmt, code, needle);
  else
    print_message("expected error: %s\n", g_fmt);
  assert_int_equal(rc, code);
  assert_null(ix);
  assert_non_null(strstr(g_fmt, needle));
  if (file_needle) assert_non_null(strstr(e.file, file_needle));
}

/* Writes fixture `name` and expects opening it to fail as expect_error says. */
static void expect_fixture_error(const char *name, const fx_opts *o, sl_code code, const char *needle,
                                 const char *file_needle) {
  char m[512];
  fx_write(name, o, m, sizeof m);
  expect_error(m, NULL, code, needle, file_needle);
}

static void t_master_one_frame_chunks(void **state) {
  fx_opts o = {.n_files = 3, .frames = {5, 5, 3}, .h = 16, .w = 12, .k = 1, .meta = true, .image_nr = true};
  char m[512];
  sl_h5_index *ix = fx_index("one", &o, m, sizeof m);
  assert_string_equal(ix->layout, "dectris-master");
  assert_int_equal(ix->n_files, 3);
  assert_int_equal(ix->n_frames, 13);
  assert_int_equal(ix->n_chunks, 13);
  assert_int_equal(ix->frame_rows, 16);
  assert_int_equal(ix->frame_cols, 12);
  assert_int_equal(ix->elem_size, 2);
  assert_false(ix->is_signed);
  assert_int_equal(ix->frames_per_chunk, 1);
  assert_int_equal(ix->filter, SL_H5_FILTER_NONE);
  assert_int_equal(ix->frame_bytes, 16 * 12 * 2);
  assert_int_equal(ix->max_chunk_size, 16 * 12 * 2);
  char d2[512];
  fx_data_path("one", 2, d2, sizeof d2);
  assert_string_equal(ix->files[1], d2);
  check_against_hdf5(ix, "/entry/data/data");
  for (int i = 0; i < 13; i++) {
    assert_int_equal(ix->chunks[i].first_frame, i);
    assert_int_equal(ix->chunks[i].n_frames, 1);
    assert_int_equal(ix->chunks[i].filter_mask, 0);
  }
  /* metadata */
  const sl_h5_detector_meta *md = &ix->meta;
  assert_true(md->has_x_pixels && md->has_y_pixels && md->has_nimages && md->has_ntrigger);
  assert_int_equal(md->x_pixels, 12);
  assert_int_equal(md->y_pixels, 16);
  assert_int_equal(md->nimages, 13);
  assert_int_equal(md->ntrigger, 1);
  assert_true(md->has_saturation_value);
  assert_int_equal(md->saturation_value, 12345);
  assert_string_equal(md->saturation_source, "/entry/instrument/detector/saturation_value");
  assert_true(md->has_count_time && md->has_frame_time);
  assert_true(md->count_time == 0.001);
  assert_true(md->frame_time > 0.00109 && md->frame_time < 0.00111);
  assert_true(md->has_pixel_mask);
  assert_non_null(md->pixel_mask);
  assert_int_equal(md->n_bad_pixels, 3);
  assert_int_equal(md->pixel_mask[3], 1);
  assert_int_equal(md->pixel_mask[12 + 5], 4);
  assert_int_equal(md->pixel_mask[16 * 12 - 1], 2);
  assert_int_equal(md->pixel_mask[0], 0);
  /* helpers */
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 0), 0);
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 12), 12);
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 13), -1);
  assert_int_equal(sl_h5_window_bytes(ix, 2, 3), 3 * 16 * 12 * 2);
  assert_int_equal(sl_h5_window_bytes(ix, 12, 2), 0);
  uint64_t off[4];
  sl_h5_window_offsets(ix, 2, 3, off);
  assert_int_equal(off[0], 0);
  assert_int_equal(off[1], 384);
  assert_int_equal(off[3], 3 * 384);
  sl_h5_index_free(ix);
}

static void t_master_k_frame_chunks(void **state) {
  fx_opts o = {.n_files = 3, .frames = {10, 10, 7}, .h = 8, .w = 20, .k = 4, .dtype = H5T_STD_U32LE};
  char m[512];
  sl_h5_index *ix = fx_index("kf", &o, m, sizeof m);
  assert_int_equal(ix->n_frames, 27);
  assert_int_equal(ix->n_chunks, 3 + 3 + 2);
  assert_int_equal(ix->frames_per_chunk, 4);
  assert_int_equal(ix->elem_size, 4);
  static const int64_t first[8] = {0, 4, 8, 10, 14, 18, 20, 24}, nf[8] = {4, 4, 2, 4, 4, 2, 4, 3};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(ix->chunks[i].first_frame, first[i]);
    assert_int_equal(ix->chunks[i].n_frames, nf[i]);
    assert_int_equal(ix->chunks[i].size, 4 * 8 * 20 * 4); /* stored chunks are full */
  }
  check_against_hdf5(ix, "/entry/data/data");
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 9), 2);
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 10), 3);
  assert_int_equal(sl_h5_index_chunk_of_frame(ix, 26), 7);
  assert_false(ix->meta.has_pixel_mask);
  assert_false(ix->meta.has_saturation_value);
  sl_h5_index_free(ix);
}

static void t_contiguous(void **state) {
  fx_opts o = {.n_files = 2, .frames = {4, 3}, .h = 5, .w = 7, .layout = FX_CONTIG, .dtype = H5T_STD_U8LE};
  char m[512];
  sl_h5_index *ix = fx_index("contig", &o, m, sizeof m);
  assert_true(ix->contiguous);
  assert_int_equal(ix->n_chunks, 7);
  assert_int_equal(ix->n_frames, 7);
  assert_int_equal(ix->elem_size, 1);
  for (int f = 0; f < 2; f++) {
    hid_t fid = H5Fopen(ix->files[f], H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(fid, "/entry/data/data", H5P_DEFAULT);
    haddr_t base = H5Dget_offset(d);
    for (int i = 0; i < ix->n_chunks; i++) {
      if (ix->chunks[i].file != f) continue;
      int64_t local = ix->chunks[i].first_frame - (f ? 4 : 0);
      assert_int_equal(ix->chunks[i].file_offset, base + (uint64_t)local * 35);
      assert_int_equal(ix->chunks[i].size, 35);
    }
    H5Dclose(d);
    H5Fclose(fid);
  }
  sl_h5_index_free(ix);
}

static void t_single_file_and_dataset_param(void **state) {
  fx_opts o = {.n_files = 0, .frames = {9}, .h = 6, .w = 6, .k = 2, .meta = true, .image_nr = true};
  char m[512];
  sl_h5_index *ix = fx_index("single", &o, m, sizeof m);
  assert_string_equal(ix->layout, "single");
  assert_int_equal(ix->n_files, 1);
  assert_string_equal(ix->files[0], m);
  assert_int_equal(ix->n_chunks, 5);
  assert_int_equal(ix->chunks[4].n_frames, 1);
  check_against_hdf5(ix, "/entry/data/data");
  assert_true(ix->meta.has_pixel_mask);
  sl_h5_index_free(ix);

  fx_opts p = {.n_files = 0, .frames = {3}, .h = 4, .w = 5, .k = 3, .dataset = "/scan/frames"};
  fx_write("dsparam", &p, m, sizeof m);
  expect_error(m, NULL, SL_ERR_FORMAT, "found neither", "dsparam");
  ix = fx_open_index(m, "/scan/frames");
  assert_string_equal(ix->layout, "dataset:/scan/frames");
  assert_int_equal(ix->n_chunks, 1);
  check_against_hdf5(ix, "/scan/frames");
  sl_h5_index_free(ix);
  expect_error(m, "/scan/nothing", SL_ERR_FORMAT, "no dataset /scan/nothing", "dsparam");
}

static void t_bitshuffle(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 32, .w = 24, .k = 2, .layout = FX_BSLZ4, .meta = true};
  char m[512];
  sl_h5_index *ix = fx_index("bs", &o, m, sizeof m);
  assert_int_equal(ix->filter, SL_H5_FILTER_BITSHUFFLE);
  print_message("bitshuffle cd_values (%d):", ix->n_cd_values);
  for (int i = 0; i < ix->n_cd_values; i++) print_message(" %u", ix->bs_cd_values[i]);
  print_message("\n");
  assert_int_equal(ix->n_cd_values, 5);
  assert_int_equal(ix->bs_cd_values[2], 2);
  assert_int_equal(ix->bs_cd_values[3], 0);
  assert_int_equal(ix->bs_cd_values[4], 2);
  assert_int_equal(ix->n_chunks, 3 + 3);
  assert_int_equal(ix->chunks[5].n_frames, 1);
  check_against_hdf5(ix, "/entry/data/data");
  for (int i = 0; i < ix->n_chunks; i++) assert_true(ix->chunks[i].size < 2 * 32 * 24 * 2);
  sl_h5_index_free(ix);

  /* Bitshuffle without compression: cd_values[4] = 0, stored chunks of the
   * raw size. */
  o.layout = FX_BITSHUFFLE;
  ix = fx_index("bsraw", &o, m, sizeof m);
  assert_int_equal(ix->filter, SL_H5_FILTER_BITSHUFFLE);
  assert_int_equal(ix->n_cd_values, 5);
  assert_int_equal(ix->bs_cd_values[4], 0);
  check_against_hdf5(ix, "/entry/data/data");
  for (int i = 0; i < ix->n_chunks; i++) assert_int_equal(ix->chunks[i].size, 2 * 32 * 24 * 2);
  sl_h5_index_free(ix);
}

static void t_userblock(void **state) {
  /* HDF5 addresses are relative to the base address; the index holds byte
   * offsets in the file. Check against the bytes themselves. */
  for (int layout = 0; layout < 2; layout++) {
    fx_opts o = {.n_files = 0, .frames = {3}, .h = 4, .w = 4, .k = 1, .userblock = 512,
                 .layout = layout ? FX_CONTIG : FX_CHUNKED};
    char m[512];
    sl_h5_index *ix = fx_index(layout ? "ubc" : "ubk", &o, m, sizeof m);
    FILE *fp = fopen(m, "rb");
    for (int i = 0; i < ix->n_chunks; i++) {
      uint16_t px[16];
      assert_int_equal(fseek(fp, (long)ix->chunks[i].file_offset, SEEK_SET), 0);
      assert_int_equal(fread(px, 2, 16, fp), 16);
      for (int j = 0; j < 16; j++) assert_int_equal(px[j], fx_value(i, j / 4, j % 4, 2));
    }
    fclose(fp);
    sl_h5_index_free(ix);
  }
}

static void t_missing_file(void **state) {
  fx_opts o = {.n_files = 3, .frames = {2, 2, 2}, .h = 4, .w = 4, .k = 1};
  char m[512], d2[512];
  fx_write("miss", &o, m, sizeof m);
  fx_data_path("miss", 2, d2, sizeof d2);
  assert_int_equal(unlink(d2), 0);
  expect_error(m, NULL, SL_ERR_IO, "/entry/data/data_000002", "miss_master.h5");
  assert_non_null(strstr(g_fmt, m));
  assert_non_null(strstr(g_fmt, d2));
  assert_non_null(strstr(g_fmt, "missing"));
}

static void t_float_dtype(void **state) {
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 4, .w = 4, .k = 1, .dtype = H5T_IEEE_F32LE};
  expect_fixture_error("float", &o, SL_ERR_FORMAT, "float32", "float_data_000001.h5");
  fx_opts p = {.n_files = 1, .frames = {2}, .h = 4, .w = 4, .k = 1, .dtype = H5T_STD_U64LE};
  expect_fixture_error("u64", &p, SL_ERR_FORMAT, "uint64", "u64_data_000001.h5");
}

static void t_truncated(void **state) {
  fx_opts o = {.n_files = 2, .frames = {3, 40}, .h = 32, .w = 32, .k = 1};
  char m[512], d2[512];
  fx_write("trunc", &o, m, sizeof m);
  fx_data_path("trunc", 2, d2, sizeof d2);
  struct stat st;
  assert_int_equal(stat(d2, &st), 0);
  assert_int_equal(truncate(d2, st.st_size - 3000), 0);
  sl_error e;
  sl_h5_index *ix = NULL;
  sl_error_clear(&e);
  sl_code rc = sl_h5_index_open(m, NULL, &ix, &e);
  /* Either HDF5 already fails to open the truncated file, or a chunk lies
   * past its end: both name the data file. */
  assert_int_not_equal(rc, SL_OK);
  assert_null(ix);
  sl_error_format(&e, g_fmt, sizeof g_fmt);
  print_message("expected error: %s\n", g_fmt);
  assert_non_null(strstr(e.file, "trunc_data_000002.h5"));
}

static void t_split_chunks(void **state) {
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 8, .w = 4, .k = 1, .chunk_rows = 4};
  expect_fixture_error("split", &o, SL_ERR_FORMAT, "chunks split frames (chunk shape 1 x 4 x 4",
                       "split_data_000001.h5");
}

static void t_unsupported_filter(void **state) {
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 8, .w = 4, .k = 1, .layout = FX_DEFLATE};
  expect_fixture_error("deflate", &o, SL_ERR_FORMAT, "filter 1 (", "deflate_data_000001.h5");
}

static void t_link_gap(void **state) {
  fx_opts o = {.n_files = 2, .frames = {2, 2}, .h = 4, .w = 4, .k = 1, .skip_link2 = true};
  expect_fixture_error("gap", &o, SL_ERR_FORMAT, "data_000002 is missing", "gap_master.h5");
}

static void t_bad_files(void **state) {
  char p[512];
  snprintf(p, sizeof p, "%s/not.h5", fx_tmpdir());
  FILE *f = fopen(p, "w");
  fputs("hello\n", f);
  fclose(f);
  expect_error(p, NULL, SL_ERR_FORMAT, "not a readable HDF5 file", "not.h5");
  snprintf(p, sizeof p, "%s/nothere_master.h5", fx_tmpdir());
  expect_error(p, NULL, SL_ERR_IO, "No such file", "nothere");
  /* A rank-2 dataset. */
  snprintf(p, sizeof p, "%s/rank2.h5", fx_tmpdir());
  hid_t fid = fx_create(p, 0);
  fx_mkgroups(fid, "/entry/data");
  hsize_t dims[2] = {4, 4};
  hid_t sp = H5Screate_simple(2, dims, NULL);
  H5Dclose(H5Dcreate2(fid, "/entry/data/data", H5T_STD_U16LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Sclose(sp);
  H5Fclose(fid);
  expect_error(p, NULL, SL_ERR_FORMAT, "rank 2", "rank2.h5");
}

static void t_metadata_variants(void **state) {
  fx_opts o = {.n_files = 1, .frames = {4}, .h = 4, .w = 6, .k = 1, .meta = true, .sat_in_cutoff = true};
  char m[512];
  sl_h5_index *ix = fx_index("cutoff", &o, m, sizeof m);
  assert_true(ix->meta.has_saturation_value);
  assert_int_equal(ix->meta.saturation_value, 12345);
  assert_non_null(strstr(ix->meta.saturation_source, "countrate_correction_count_cutoff"));
  sl_h5_index_free(ix);

  /* More frames than the detector says it recorded. */
  fx_opts p = {.n_files = 2, .frames = {4, 4}, .h = 4, .w = 6, .k = 1, .meta = true, .nimages = 5};
  expect_fixture_error("nimg", &p, SL_ERR_FORMAT, "more than nimages x ntrigger = 5",
                       "nimg_master.h5");

  /* image_nr_low that disagrees with the frame order. */
  fx_opts q = {.n_files = 2, .frames = {3, 3}, .h = 4, .w = 4, .k = 1, .image_nr = true, .image_nr_shift = 1};
  expect_fixture_error("imgnr", &q, SL_ERR_FORMAT, "image_nr_low = 2", "imgnr_data_000001.h5");
}

/* Describing reads the metadata only: the parts, the stored-chunk count and
 * the fewest frames of a chunk from the shapes; listing then gives exactly
 * the chunks sl_h5_index_open lists (which H5Dget_chunk_info confirms). */
static void t_describe_then_list(void **state) {
  fx_opts o = {.n_files = 3, .frames = {10, 10, 7}, .h = 8, .w = 20, .k = 4, .dtype = H5T_STD_U32LE};
  char m[512];
  fx_write("desc", &o, m, sizeof m);
  sl_error e;
  sl_error_clear(&e);
  uint64_t listings = sl_h5_index_listings();
  sl_h5_index *ix = NULL;
  assert_int_equal(sl_h5_index_describe(m, NULL, &ix, &e), SL_OK);
  assert_int_equal(sl_h5_index_listings(), listings);
  assert_false(ix->listed);
  assert_null(ix->chunks);
  assert_int_equal(ix->n_frames, 27);
  assert_int_equal(ix->n_chunks, 3 + 3 + 2);
  assert_int_equal(ix->n_parts, 3);
  static const int64_t first_frame[3] = {0, 10, 20}, first_chunk[3] = {0, 3, 6}, n_chunks[3] = {3, 3, 2};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(ix->parts[i].file, i);
    assert_string_equal(ix->parts[i].object, "/entry/data/data");
    assert_int_equal(ix->parts[i].first_frame, first_frame[i]);
    assert_int_equal(ix->parts[i].n_frames, o.frames[i]);
    assert_int_equal(ix->parts[i].first_chunk, first_chunk[i]);
    assert_int_equal(ix->parts[i].n_chunks, n_chunks[i]);
  }
  assert_int_equal(ix->min_chunk_frames, 2); /* 10 = 4 + 4 + 2 */
  assert_int_equal(ix->max_part_chunks, 3);
  /* No filter: a stored chunk holds its 4 frames as they are. */
  assert_int_equal(sl_h5_index_chunk_bound(ix), 4 * 8 * 20 * 4);
  assert_true(sl_h5_index_host_bytes(ix) >= 8 * sizeof(sl_h5_chunk));

  sl_h5_chunk *chunks = NULL;
  uint64_t max = 0;
  assert_int_equal(sl_h5_index_list_chunks(ix, &chunks, &max, &e), SL_OK);
  assert_int_equal(sl_h5_index_listings(), listings + 1);
  assert_false(ix->listed); /* listing leaves the index as it was */
  sl_h5_index_set_chunks(ix, chunks, max);
  assert_true(ix->listed);
  assert_int_equal(ix->max_chunk_size, 4 * 8 * 20 * 4);
  check_against_hdf5(ix, "/entry/data/data");
  sl_h5_index *full = fx_open_index(m, NULL);
  for (int i = 0; i < 8; i++) {
    const sl_h5_chunk *a = &ix->chunks[i], *b = &full->chunks[i];
    assert_int_equal(a->file_offset, b->file_offset);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->filter_mask, b->filter_mask);
    assert_int_equal(a->file, b->file);
    assert_int_equal(a->file_chunk, b->file_chunk);
    assert_int_equal(a->first_frame, b->first_frame);
    assert_int_equal(a->n_frames, b->n_frames);
  }
  sl_h5_index_free(full);

  /* A data file rewritten with other frames between describing and
   * listing: an error, never a misread. */
  sl_h5_index_free(ix);
  assert_int_equal(sl_h5_index_describe(m, NULL, &ix, &e), SL_OK);
  o.frames[1] = 12;
  fx_write("desc", &o, m, sizeof m);
  assert_int_equal(sl_h5_index_list_chunks(ix, &chunks, &max, &e), SL_ERR_IO);
  assert_null(chunks);
  print_message("expected error: %s: %s\n", e.file, e.msg);
  assert_non_null(strstr(e.msg, "changed since"));
  assert_non_null(strstr(e.file, "desc_data_000002.h5"));
  sl_h5_index_free(ix);
}

/* Files that declare frames but store no chunk: describing needs none;
 * listing (and so opening) finds them missing. */
static void t_describe_unwritten(void **state) {
  fx_opts o = {.n_files = 2, .frames = {100000, 50000}, .h = 4, .w = 4, .k = 1, .unwritten = true};
  char m[512];
  fx_write("unwr", &o, m, sizeof m);
  sl_error e;
  sl_error_clear(&e);
  sl_h5_index *ix = NULL;
  assert_int_equal(sl_h5_index_describe(m, NULL, &ix, &e), SL_OK);
  assert_int_equal(ix->n_chunks, 150000);
  assert_int_equal(ix->n_frames, 150000);
  assert_int_equal(ix->max_part_chunks, 100000);
  sl_h5_index_free(ix);
  expect_error(m, NULL, SL_ERR_FORMAT, "stores 0 chunks", "unwr_data_000001.h5");
}

/* The bound on a bitshuffle-LZ4 chunk is the one the bitshuffle filter
 * sizes its output by (its header and bshuf_compress_lz4_bound, from the
 * official plugin), capped by what listing accepts; other storage holds
 * chunks as they are. */
static void t_chunk_bound(void **state) {
  void *so = dlopen(FX_PLUGIN_DIR "/libh5bshuf.so", RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    print_message("SKIPPED: %s\n", dlerror());
    skip();
  }
  int64_t (*lz4_bound)(size_t, size_t, size_t) =
      (int64_t (*)(size_t, size_t, size_t))dlsym(so, "bshuf_compress_lz4_bound");
  assert_non_null(lz4_bound);
  static const struct {
    int64_t k, h, w;
    int elem;
    unsigned block; /* cd_values[3] */
  } cases[] = {{1, 16, 16, 2, 0}, {1, 192, 192, 2, 0}, {2, 32, 24, 2, 0}, {3, 37, 41, 1, 0},
               {1, 512, 512, 4, 0}, {5, 7, 9, 4, 256}, {1, 33, 31, 2, 1000}, {1, 64, 64, 1, 8}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl_h5_index ix;
    memset(&ix, 0, sizeof ix);
    ix.filter = SL_H5_FILTER_BITSHUFFLE;
    ix.elem_size = cases[i].elem;
    ix.frames_per_chunk = cases[i].k;
    ix.frame_bytes = (uint64_t)(cases[i].h * cases[i].w * cases[i].elem);
    ix.n_cd_values = 5;
    unsigned cd[5] = {0, 3, (unsigned)cases[i].elem, cases[i].block, 2};
    memcpy(ix.bs_cd_values, cd, sizeof cd);
    uint64_t raw = (uint64_t)cases[i].k * ix.frame_bytes;
    uint64_t want = 12 + (uint64_t)lz4_bound(raw / (uint64_t)cases[i].elem, (size_t)cases[i].elem, cases[i].block);
    if (want > 2 * raw + 4096) want = 2 * raw + 4096; /* blocks of 8 bytes: LZ4's overhead exceeds the cap */
    assert_int_equal(sl_h5_index_chunk_bound(&ix), want);
    assert_true(sl_h5_index_chunk_bound(&ix) > raw); /* a chunk stored raw fits too */
    ix.bs_cd_values[4] = 0; /* bitshuffle without compression: as they are */
    assert_int_equal(sl_h5_index_chunk_bound(&ix), raw);
  }
  dlclose(so);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_describe_then_list),
      cmocka_unit_test(t_describe_unwritten),
      cmocka_unit_test(t_chunk_bound),
      cmocka_unit_test(t_master_one_frame_chunks),
      cmocka_unit_test(t_master_k_frame_chunks),
      cmocka_unit_test(t_contiguous),
      cmocka_unit_test(t_single_file_and_dataset_param),
      cmocka_unit_test(t_bitshuffle),
      cmocka_unit_test(t_userblock),
      cmocka_unit_test(t_missing_file),
      cmocka_unit_test(t_float_dtype),
      cmocka_unit_test(t_truncated),
      cmocka_unit_test(t_split_chunks),
      cmocka_unit_test(t_unsupported_filter),
      cmocka_unit_test(t_link_gap),
      cmocka_unit_test(t_bad_files),
      cmocka_unit_test(t_metadata_variants),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}

#endif /* SL_H5_FIXTURES_ONLY */
