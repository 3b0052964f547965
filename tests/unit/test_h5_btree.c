/* h5_btree: the direct version-1 B-tree chunk listing (h5_btree.c, used by
 * h5_chunk_list.c) compared with HDF5's own listing (SLUICE_H5_INDEX=api and
 * H5Dget_chunk_info) on files written by the HDF5 C API in this test: one,
 * several and 5000 chunks per file (a B-tree of more than one level),
 * uncompressed and bitshuffle-compressed, k frames per chunk, user blocks,
 * object header version 2 (libver 1.8 bounds, with and without attribute
 * creation order), many attributes (continuation blocks), layout version 4
 * (libver latest: not handled, the API path runs). The parser is also driven
 * through its in-memory read callback, on intact and corrupted bytes. */
#define SL_H5_FIXTURES_ONLY
#include "engine/core/settings.h"
#include "test_h5_index.c"

#include "nodes/hdf5/h5_btree.h"

/* ---- helpers ---------------------------------------------------------------- */

static sl_h5_index *open_with(const char *path, const char *dataset, const char *mode) {
  char setting[64];
  snprintf(setting, sizeof setting, "h5_index=%s", mode ? mode : "btree");
  const char *settings[] = {setting};
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_settings_init(settings, 1, &e), SL_OK);
  sl_h5_index *ix = NULL;
  sl_code rc = sl_h5_index_open(path, dataset, &ix, &e);
  (void)sl_settings_init(NULL, 0, &e);
  if (rc) print_error("sl_h5_index_open(%s, %s): %s: %s\n", path, mode ? mode : "fast", e.file, e.msg);
  assert_int_equal(rc, SL_OK);
  return ix;
}

/* The fast listing and the API listing must agree chunk by chunk. */
static void compare_fast_api(const char *path, const char *dataset, int64_t expect_chunks) {
  sl_h5_index *a = open_with(path, dataset, NULL), *b = open_with(path, dataset, "api");
  assert_int_equal(a->n_chunks, b->n_chunks);
  if (expect_chunks >= 0) assert_int_equal(a->n_chunks, expect_chunks);
  assert_int_equal(a->n_frames, b->n_frames);
  for (int i = 0; i < a->n_chunks; i++) {
    assert_int_equal(a->chunks[i].file, b->chunks[i].file);
    assert_int_equal(a->chunks[i].file_offset, b->chunks[i].file_offset);
    assert_int_equal(a->chunks[i].size, b->chunks[i].size);
    assert_int_equal(a->chunks[i].filter_mask, b->chunks[i].filter_mask);
    assert_int_equal(a->chunks[i].first_frame, b->chunks[i].first_frame);
    assert_int_equal(a->chunks[i].n_frames, b->chunks[i].n_frames);
  }
  sl_h5_index_free(a);
  sl_h5_index_free(b);
}

typedef struct membuf {
  uint8_t *p;
  size_t n;
} membuf;

static int mem_read(void *ctx, uint64_t off, void *buf, size_t n) {
  membuf *m = ctx;
  assert_true(off <= m->n && n <= m->n - off); /* the parser must never ask past the end */
  memcpy(buf, m->p + off, n);
  return 0;
}

static membuf slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  membuf m = {malloc((size_t)n), (size_t)n};
  assert_int_equal(fread(m.p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return m;
}

/* What the parser needs from HDF5 about one dataset. */
typedef struct ds_facts {
  uint64_t ohdr, base;
  unsigned sa, ss;
  uint64_t extent[3];
  int64_t nc;
} ds_facts;

static ds_facts facts(const char *path, const char *dset) {
  ds_facts x;
  memset(&x, 0, sizeof x);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
  assert_true(d >= 0);
  H5O_info_t oi;
  assert_true(H5Oget_info2(d, &oi, H5O_INFO_BASIC) >= 0);
  x.ohdr = oi.addr;
  hid_t fcpl = H5Fget_create_plist(f);
  hsize_t ub = 0;
  size_t sa = 0, ss = 0;
  H5Pget_userblock(fcpl, &ub);
  H5Pget_sizes(fcpl, &sa, &ss);
  x.base = ub, x.sa = (unsigned)sa, x.ss = (unsigned)ss;
  H5Pclose(fcpl);
  hid_t sp = H5Dget_space(d);
  hsize_t dims[3];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  for (int i = 0; i < 3; i++) x.extent[i] = dims[i];
  hsize_t n = 0;
  H5Dget_num_chunks(d, sp, &n);
  x.nc = (int64_t)n;
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return x;
}

static sl_h5_btree_io mem_io(membuf *m, const ds_facts *x) {
  sl_h5_btree_io io = {.read = mem_read, .ctx = m, .name = "mem.h5", .file_size = m->n, .base = x->base,
                   .sizeof_addr = x->sa, .sizeof_size = x->ss};
  return io;
}

/* Parses the in-memory file; returns the rc of the listing (after a
 * successful, handled find_layout). */
static sl_code parse_mem(membuf *m, const ds_facts *x, sl_h5_btree_layout *lay, sl_h5_btree_chunk **out, int64_t *n,
                         sl_error *e) {
  sl_h5_btree_io io = mem_io(m, x);
  bool handled = false;
  char why[128];
  sl_error_clear(e);
  sl_code rc = sl_h5_btree_find_layout(&io, x->ohdr, lay, &handled, why, sizeof why, e);
  if (rc) return rc;
  assert_true(handled);
  *n = sl_h5_btree_grid_size(lay, 3, x->extent, 1 << 24);
  assert_true(*n >= 0);
  *out = calloc((size_t)*n + 1, sizeof **out);
  return sl_h5_btree_list(&io, lay, 3, x->extent, *out, *n, e);
}

/* The intact data file at `path`, parsed in memory (SL_OK asserted). */
typedef struct parsed_file {
  ds_facts x;
  membuf mb;
  sl_h5_btree_layout lay;
  sl_h5_btree_chunk *chunks;
  int64_t n;
} parsed_file;

static parsed_file parse_file(const char *path) {
  parsed_file p;
  memset(&p, 0, sizeof p);
  p.x = facts(path, "/entry/data/data");
  p.mb = slurp(path);
  sl_error e;
  sl_code rc = parse_mem(&p.mb, &p.x, &p.lay, &p.chunks, &p.n, &e);
  if (rc) print_error("%s: %s\n", path, e.msg);
  assert_int_equal(rc, SL_OK);
  return p;
}

/* ---- tests -------------------------------------------------------------------- */

static void t_one_several_many(void **state) {
  (void)state;
  fx_opts one = {.n_files = 3, .frames = {1, 1, 1}, .h = 8, .w = 8, .k = 1};
  char m[512];
  fx_write("bt1", &one, m, sizeof m);
  compare_fast_api(m, NULL, 3);
  fx_opts sev = {.n_files = 2, .frames = {7, 10}, .h = 8, .w = 6, .k = 3, .image_nr = true};
  fx_write("btk", &sev, m, sizeof m);
  compare_fast_api(m, NULL, 3 + 4);
  /* 5000 chunks in one file: a B-tree of two levels (64 entries a node). */
  fx_opts many = {.n_files = 2, .frames = {5000, 300}, .h = 4, .w = 4, .k = 1, .dtype = H5T_STD_U8LE};
  fx_write("btmany", &many, m, sizeof m);
  compare_fast_api(m, NULL, 5300);
  char d1[512];
  fx_data_path("btmany", 1, d1, sizeof d1);
  parsed_file pf = parse_file(d1);
  assert_int_equal(pf.n, 5000);
  assert_int_equal(pf.lay.ndims, 4);
  assert_int_equal(pf.lay.dims[0], 1);
  assert_int_equal(pf.lay.dims[3], 1);
  uint8_t level = pf.mb.p[pf.x.base + pf.lay.btree_addr + 5];
  print_message("5000 chunks: root level %u\n", level);
  assert_true(level >= 1);
  /* Every chunk against H5Dget_chunk_info (by index: one pass in the test). */
  uint64_t *addr = malloc(5000 * sizeof *addr), *size = malloc(5000 * sizeof *size);
  int64_t *frame = malloc(5000 * sizeof *frame);
  assert_int_equal(fx_list_chunks(d1, "/entry/data/data", addr, size, frame, 5000), 5000);
  for (int i = 0; i < 5000; i++) {
    assert_true(pf.chunks[i].found);
    assert_int_equal(frame[i], i);
    assert_int_equal(pf.chunks[i].addr + pf.x.base, addr[i]);
    assert_int_equal(pf.chunks[i].size, size[i]);
  }
  free(addr), free(size), free(frame), free(pf.chunks), free(pf.mb.p);
}

static void t_bitshuffle_and_userblock(void **state) {
  (void)state;
  char m[512];
  fx_opts ub = {.n_files = 2, .frames = {200, 9}, .h = 6, .w = 5, .k = 2, .userblock = 1024};
  fx_write("btub", &ub, m, sizeof m);
  compare_fast_api(m, NULL, 100 + 5);
  if (!fx_bitshuffle_available()) {
    print_message("bitshuffle plugin not available: compressed case skipped\n");
    return;
  }
  fx_opts bs = {.n_files = 2, .frames = {130, 3}, .h = 16, .w = 16, .k = 1, .layout = FX_BSLZ4, .userblock = 512};
  fx_write("btbs", &bs, m, sizeof m);
  compare_fast_api(m, NULL, 133);
  sl_h5_index *ix = open_with(m, NULL, NULL);
  assert_int_equal(ix->filter, SL_H5_FILTER_BITSHUFFLE);
  bool varied = false;
  for (int i = 1; i < ix->n_chunks; i++) varied |= ix->chunks[i].size != ix->chunks[0].size;
  assert_true(varied); /* really compressed */
  sl_h5_index_free(ix);
}

/* A single file written with given library-version bounds and dcpl tweaks. */
static void write_libver(const char *path, H5F_libver_t low, bool crt_order, int n_attrs, int64_t n) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, low, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  assert_true(f >= 0);
  fx_mkgroups(f, "/entry/data");
  hsize_t dims[3] = {(hsize_t)n, 4, 4}, maxd[3] = {H5S_UNLIMITED, 4, 4}, cd[3] = {1, 4, 4};
  hid_t sp = H5Screate_simple(3, dims, maxd);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, cd);
  if (crt_order) H5Pset_attr_creation_order(dcpl, H5P_CRT_ORDER_TRACKED);
  hid_t d = H5Dcreate2(f, "/entry/data/data", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  assert_true(d >= 0);
  uint16_t *buf = calloc((size_t)n * 16, 2);
  for (int64_t i = 0; i < n * 16; i++) buf[i] = (uint16_t)(i * 7);
  assert_true(H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  free(buf);
  hid_t asp = H5Screate(H5S_SCALAR);
  for (int i = 0; i < n_attrs; i++) {
    char name[32];
    double v = i;
    snprintf(name, sizeof name, "attribute_number_%03d", i);
    hid_t a = H5Acreate2(d, name, H5T_IEEE_F64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
  }
  H5Sclose(asp);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);
}

static bool parser_handles(const char *path) {
  ds_facts x = facts(path, "/entry/data/data");
  membuf mb = slurp(path);
  sl_h5_btree_io io = mem_io(&mb, &x);
  sl_h5_btree_layout lay;
  bool handled = false;
  char why[128] = "";
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_h5_btree_find_layout(&io, x.ohdr, &lay, &handled, why, sizeof why, &e), SL_OK);
  if (!handled) print_message("%s: not handled: %s\n", path, why);
  free(mb.p);
  return handled;
}

static void t_object_header_versions(void **state) {
  (void)state;
  static const struct {
    const char *file, *what;
    H5F_libver_t low;
    bool crt_order;
    int n_attrs;
    int64_t frames;
    bool handled;
  } cases[] = {
      {"v18.h5", "object header v2 (OHDR), layout v3", H5F_LIBVER_V18, false, 0, 150, true},
      {"v18crt.h5", "the same with attribute creation order", H5F_LIBVER_V18, true, 40, 70, true},
      {"v1attrs.h5", "object header v1, many attributes (continuation blocks)", H5F_LIBVER_EARLIEST,
       false, 60, 90, true},
      {"latest.h5", "layout v4 (extensible array index): not handled, the API lists it",
       H5F_LIBVER_LATEST, false, 0, 80, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", fx_tmpdir(), cases[i].file);
    print_message("%s: %s\n", cases[i].file, cases[i].what);
    write_libver(p, cases[i].low, cases[i].crt_order, cases[i].n_attrs, cases[i].frames);
    assert_int_equal(parser_handles(p), cases[i].handled);
    compare_fast_api(p, NULL, cases[i].frames);
  }
}

/* Corrupted bytes must give SL_ERR_FORMAT naming an address, never a crash
 * (the fuzzer covers this at large; these are the named cases). */
static void expect_mem_error(membuf *m, const ds_facts *x, const char *needle) {
  sl_h5_btree_layout lay;
  sl_h5_btree_chunk *ch = NULL;
  int64_t n = 0;
  sl_error e;
  sl_code rc = parse_mem(m, x, &lay, &ch, &n, &e);
  free(ch);
  if (rc != SL_ERR_FORMAT || !strstr(e.msg, needle))
    print_error("got %d '%s', wanted SL_ERR_FORMAT with '%s'\n", rc, e.msg, needle);
  else
    print_message("expected error: %s: %s\n", e.file, e.msg);
  assert_int_equal(rc, SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, needle));
  assert_non_null(strstr(e.msg, "address"));
  assert_string_equal(e.file, "mem.h5");
}

static void t_corrupted(void **state) {
  (void)state;
  fx_opts o = {.n_files = 1, .frames = {200}, .h = 4, .w = 4, .k = 1, .userblock = 512};
  char m[512], d1[512];
  fx_write("btbad", &o, m, sizeof m);
  fx_data_path("btbad", 1, d1, sizeof d1);
  parsed_file pf = parse_file(d1);
  free(pf.chunks);
  const ds_facts x = pf.x;
  const membuf good = pf.mb;
  sl_h5_btree_layout lay = pf.lay;
  sl_error e;
  uint64_t root = x.base + lay.btree_addr;
  assert_memory_equal(good.p + root, "TREE", 4);
  assert_true(good.p[root + 5] >= 1); /* 200 chunks: two levels */
  membuf b = {malloc(good.n), good.n};
  size_t hdr = 8 + 2 * x.sa, ks = 8 + 8 * 4;

  memcpy(b.p, good.p, good.n);
  b.p[root] = 'X';
  expect_mem_error(&b, &x, "TREE signature");

  memcpy(b.p, good.p, good.n);
  b.p[root + 4] = 0; /* group node type */
  expect_mem_error(&b, &x, "node type 0");

  /* The first child of the root points at the root itself. */
  memcpy(b.p, good.p, good.n);
  memcpy(b.p + root + hdr + ks, &lay.btree_addr, 8);
  expect_mem_error(&b, &x, "referenced twice");

  /* A root that claims a level its children do not have. */
  memcpy(b.p, good.p, good.n);
  b.p[root + 5] = 5;
  expect_mem_error(&b, &x, "its parent expects 4");

  /* Two root entries pointing at the same leaf. */
  memcpy(b.p, good.p, good.n);
  memcpy(b.p + root + hdr + 2 * ks + 8, b.p + root + hdr + ks, 8);
  expect_mem_error(&b, &x, "referenced twice");

  /* A leaf key whose frame offset is not in the extent / duplicates another. */
  uint64_t leaf = 0;
  memcpy(&leaf, good.p + root + hdr + ks, 8);
  leaf += x.base;
  memcpy(b.p, good.p, good.n);
  uint64_t big = 1000000;
  memcpy(b.p + leaf + hdr + 8, &big, 8);
  expect_mem_error(&b, &x, "not a chunk of the dataset");
  memcpy(b.p, good.p, good.n);
  memcpy(b.p + leaf + hdr + ks + 8 + 8, b.p + leaf + hdr + 8, 8); /* key 1 = key 0 */
  expect_mem_error(&b, &x, "listed twice");

  /* A chunk address past the end of the file. */
  memcpy(b.p, good.p, good.n);
  uint64_t far = good.n;
  memcpy(b.p + leaf + hdr + ks, &far, 8);
  expect_mem_error(&b, &x, "outside the file");

  /* An entry count that reaches past the end of the file. */
  memcpy(b.p, good.p, good.n);
  b.p[leaf + 6] = 0xff, b.p[leaf + 7] = 0xff;
  expect_mem_error(&b, &x, "past the end of the file");

  /* Truncated file: the tree is gone. */
  memcpy(b.p, good.p, good.n);
  membuf t = {b.p, (size_t)root + 10};
  expect_mem_error(&t, &x, "past the end of the file");

  /* Not an object header. */
  memcpy(b.p, good.p, good.n);
  b.p[x.base + x.ohdr] = 7;
  {
    sl_h5_btree_io io = mem_io(&b, &x);
    bool handled = true;
    sl_error_clear(&e);
    assert_int_equal(sl_h5_btree_find_layout(&io, x.ohdr, &lay, &handled, NULL, 0, &e), SL_ERR_FORMAT);
    assert_false(handled);
    assert_non_null(strstr(e.msg, "no object header at address"));
  }
  free(b.p);
  free(good.p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_one_several_many),
      cmocka_unit_test(t_bitshuffle_and_userblock),
      cmocka_unit_test(t_object_header_versions),
      cmocka_unit_test(t_corrupted),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
