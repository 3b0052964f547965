/* virtual_image: masked sums against a plain per-pixel reference; chunking;
 * .npy, PNG and HDF5 masks (good and malformed); the disk input; parameter
 * and input validation. */
#define _POSIX_C_SOURCE 200809L
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
#include <hdf5.h>
#include <png.h>

#include "tests/unit/stem_test_data.h"
#include "tests/unit/test_support.h"

extern const sl_node_desc sl_node_virtual_image;

/* ---- harness ------------------------------------------------------------ */

static char g_dir[256];
/* Optional second input (the disk) for image_make and its data for run_chunks. */
static const sl_tensor_desc *g_in1;
static const double *g_disk;

/* A virtual_image node on `in` (and g_in1 when set); runs infer. */
static sl_code image_make(sl_node *n, const kv *over, int n_over, const sl_tensor_desc *in,
                          sl_error *e) {
  sl_tensor_desc ins[2] = {*in, g_in1 ? *g_in1 : *in};
  return node_make(n, &sl_node_virtual_image, over, n_over, ins, g_in1 ? 2 : 1, e);
}

/* Runs the kernel over all positions in chunks of `chunk` (g_disk the disk). */
static void run_chunks(sl_node *n, sl_backend *b, const void *frames, int64_t npos,
                       int64_t chunk, uint64_t *image) {
  sl_error e;
  const void *whole[1] = {g_disk};
  void *outs[1] = {image};
  assert_int_equal(run_stream(n, b, frames, whole, 1, outs, npos, chunk, &e), SL_OK);
}

/* The reference: 0 bf, 1 adf/annulus, 2 df, 3 explicit mask. Radii in pixels. */
typedef struct ref_geom {
  int kind;
  double cr, cc, r, in, out;
  const uint8_t *mask;
} ref_geom;

static int ref_in(const ref_geom *g, int64_t r, int64_t c, int64_t w) {
  double d2 = (r - g->cr) * (r - g->cr) + (c - g->cc) * (c - g->cc);
  switch (g->kind) {
    case 0: return d2 <= g->r * g->r;
    case 1: return d2 >= g->in * g->in && d2 < g->out * g->out;
    case 2: return !(d2 <= g->r * g->r);
    default: return g->mask[r * w + c] != 0;
  }
}

static void reference(const void *frames, sl_dtype t, int64_t npos, int64_t h, int64_t w,
                      const ref_geom *g, uint64_t *out) {
  for (int64_t p = 0; p < npos; p++) {
    uint64_t s = 0;
    for (int64_t r = 0; r < h; r++)
      for (int64_t c = 0; c < w; c++)
        if (ref_in(g, r, c, w)) s += pix(frames, t, p * h * w + r * w + c);
    out[p] = s;
  }
}

/* Checks kernel == reference for chunks of 1, 7 and all, on 1 and 2 threads. */
static void check_case(const kv *over, int n_over, sl_dtype t, int64_t h, int64_t w,
                       const ref_geom *g) {
  const int64_t rows = 4, cols = 9, npos = rows * cols;
  sl_tensor_desc in = frames_desc(t, rows, cols, h, w);
  sl_node n;
  sl_error e;
  sl_code rc = image_make(&n, over, n_over, &in, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  assert_int_equal(n.out[0].dtype, SL_U64);
  assert_int_equal(n.out[0].rank, 2);
  assert_int_equal(n.out[0].stream_rank, 2);
  assert_int_equal(n.out[0].dims[0], rows);
  assert_int_equal(n.out[0].dims[1], cols);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  void *frames = random_frames(t, npos * h * w);
  uint64_t *want = calloc((size_t)npos, 8), *got = calloc((size_t)npos, 8);
  reference(frames, t, npos, h, w, g, want);
  int any = 0;
  for (int64_t p = 0; p < npos; p++) any |= want[p] != 0;
  assert_true(any); /* the case selects something */
  int64_t chunks[3] = {1, 7, npos};
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    for (int k = 0; k < 3; k++) {
      memset(got, 0xAB, (size_t)npos * 8);
      run_chunks(&n, b, frames, npos, chunks[k], got);
      for (int64_t p = 0; p < npos; p++) {
        if (got[p] != want[p])
          fprintf(stderr, "position %lld chunk %lld: got %llu want %llu\n", (long long)p,
                  (long long)chunks[k], (unsigned long long)got[p], (unsigned long long)want[p]);
        assert_true(got[p] == want[p]);
      }
    }
    sl_cpu_backend_ops.destroy(b);
  }
  free(frames);
  free(want);
  free(got);
  node_free(&n);
}

/* ---- tests: sums --------------------------------------------------------- */

static void test_kinds_all_dtypes(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const int64_t h = 37, w = 41;
  for (int ti = 0; ti < 3; ti++) {
    sl_dtype t = types[ti];
    double cr = (h - 1) / 2.0, cc = (w - 1) / 2.0;
    /* bf, default centre */
    {
      kv o[] = {{"kind", "bf"}, {"radius", "7.5"}};
      ref_geom g = {0, cr, cc, 7.5, 0, 0, NULL};
      check_case(o, 2, t, h, w, &g);
    }
    /* bf, integer radius (boundary pixels at exactly d = r are included) */
    {
      kv o[] = {{"kind", "bf"}, {"radius", "5"}, {"center", "[18, 20]"}};
      ref_geom g = {0, 18, 20, 5, 0, 0, NULL};
      check_case(o, 3, t, h, w, &g);
    }
    /* adf, default 1..2 radii, fractional centre */
    {
      kv o[] = {{"kind", "adf"}, {"radius", "6"}, {"center", "[17.25, 21.5]"}};
      ref_geom g = {1, 17.25, 21.5, 6, 6, 12, NULL};
      check_case(o, 3, t, h, w, &g);
    }
    /* annulus in pixels */
    {
      kv o[] = {{"kind", "annulus"}, {"inner", "3"}, {"outer", "14.5"}, {"units", "pixels"}};
      ref_geom g = {1, cr, cc, 0, 3, 14.5, NULL};
      check_case(o, 4, t, h, w, &g);
    }
    /* annulus in radii, off-centre ring clipped by the edge */
    {
      kv o[] = {{"kind", "annulus"}, {"radius", "4"}, {"inner", "2"}, {"outer", "5"},
                {"center", "[3, 38]"}};
      ref_geom g = {1, 3, 38, 4, 8, 20, NULL};
      check_case(o, 5, t, h, w, &g);
    }
    /* df */
    {
      kv o[] = {{"kind", "df"}, {"radius", "9"}};
      ref_geom g = {2, cr, cc, 9, 0, 0, NULL};
      check_case(o, 2, t, h, w, &g);
    }
  }
}

/* Hand-counted geometry on a 5x5 detector of ones, independent of any formula. */
static void test_small_geometry(void **st) {
  const int64_t h = 5, w = 5, npos = 3;
  uint16_t frames[3 * 25];
  for (int i = 0; i < 75; i++) frames[i] = 1;
  frames[25 + 12] = 0xFFFF; /* flag value at the centre of frame 1: summed as stored */
  struct {
    kv o[3];
    int n;
    uint64_t want;
  } cases[] = {
      {{{"kind", "bf"}, {"radius", "1"}}, 2, 5},                   /* centre + 4 neighbours */
      {{{"kind", "adf"}, {"radius", "1"}}, 2, 8},                  /* 1 <= d2 < 4 */
      {{{"kind", "df"}, {"radius", "1"}}, 2, 20},                  /* 25 - 5 */
      {{{"kind", "bf"}, {"radius", "0.99"}}, 2, 1},                /* centre only */
      {{{"kind", "bf"}, {"radius", "1.5"}}, 2, 9},                 /* d2 = 2 included */
      {{{"kind", "bf"}, {"radius", "1"}, {"center", "[0, 0]"}}, 3, 3}, /* corner */
  };
  int64_t d[4] = {1, 3, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  sl_backend *b = backend(2);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    sl_node n;
    sl_error e;
    assert_int_equal(image_make(&n, cases[k].o, cases[k].n, &in, &e),
                     SL_OK);
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    uint64_t img[3];
    run_chunks(&n, b, frames, npos, 2, img);
    assert_true(img[0] == cases[k].want);
    assert_true(img[2] == cases[k].want);
    /* frame 1: the centre pixel holds 65535 instead of 1 */
    uint64_t centre_in = (k == 0 || k == 3 || k == 4) ? 1 : 0;
    assert_true(img[1] == cases[k].want + centre_in * 65534);
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
}

/* Exactness beyond 32 bits: every pixel at the u32 flag value. */
static void test_u64_exact(void **st) {
  const int64_t h = 65, w = 63; /* odd: the centre (32, 31) is a pixel */
  uint32_t *f = malloc((size_t)(h * w) * 4);
  for (int64_t i = 0; i < h * w; i++) f[i] = 0xFFFFFFFFu;
  int64_t d[3] = {1, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U32, 3, d, 1);
  kv o[] = {{"kind", "df"}, {"radius", "0.5"}};
  sl_node n;
  sl_error e;
  assert_int_equal(image_make(&n, o, 2, &in, &e), SL_OK);
  assert_int_equal(n.out[0].rank, 1);
  assert_int_equal(n.out[0].stream_rank, 1);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  sl_backend *b = backend(1);
  uint64_t img = 0;
  run_chunks(&n, b, f, 1, 1, &img);
  assert_true(img == (uint64_t)(h * w - 1) * 0xFFFFFFFFull);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(f);
}

/* ---- .npy masks ------------------------------------------------------------ */

static void mask_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_dir, name);
}

/* A kind mask node reading mask file `name` (under g_dir) must be refused
 * with `want`, its message naming `needle` and the file. */
static void expect_mask_refused(const sl_tensor_desc *in, const char *name, sl_code want,
                                const char *needle) {
  char path[512], yaml[600];
  mask_path(path, sizeof path, name);
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv o[] = {{"kind", "mask"}, {"mask", yaml}};
  sl_node n;
  sl_error e;
  sl_code rc = image_make(&n, o, 2, in, &e);
  expect_failed(rc, &e, want, needle, name);
  node_free(&n);
}

/* Writes a .npy file: header dict text as given (padded), then data. */
static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t len, int pad) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  size_t prefix = major == 1 ? 10 : 12;
  size_t dl = strlen(dict);
  size_t total = prefix + dl + 1;
  size_t padn = pad ? (64 - total % 64) % 64 : 0;
  size_t hlen = dl + padn + 1;
  unsigned char hdr[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
  hdr[8] = (unsigned char)(hlen & 0xFF);
  hdr[9] = (unsigned char)((hlen >> 8) & 0xFF);
  hdr[10] = (unsigned char)((hlen >> 16) & 0xFF);
  hdr[11] = (unsigned char)((hlen >> 24) & 0xFF);
  fwrite(hdr, 1, prefix, f);
  fwrite(dict, 1, dl, f);
  for (size_t i = 0; i < padn; i++) fputc(' ', f);
  fputc('\n', f);
  if (len) fwrite(data, 1, len, f);
  fclose(f);
}

/* Element of type descr set from a 0/1 (or arbitrary nonzero) value. */
static void put_elem(unsigned char *p, const char *descr, int v) {
  if (!strcmp(descr, "|u1") || !strcmp(descr, "|b1")) {
    p[0] = (unsigned char)(v ? (strcmp(descr, "|b1") ? 200 : 1) : 0);
  } else if (!strcmp(descr, "<u2")) {
    uint16_t x = (uint16_t)(v ? 0x0100 : 0); /* high byte only: catches byte-order mistakes */
    memcpy(p, &x, 2);
  } else if (!strcmp(descr, "<i4")) {
    int32_t x = v ? -7 : 0;
    memcpy(p, &x, 4);
  } else if (!strcmp(descr, "<f4")) {
    float x = v ? 0.25f : 0.0f;
    memcpy(p, &x, 4);
  } else {
    double x = v ? -1e-300 : -0.0; /* negative zero is excluded */
    memcpy(p, &x, 8);
  }
}

static void test_npy_masks(void **st) {
  const int64_t h = 37, w = 41;
  const char *descrs[] = {"|u1", "|b1", "<u2", "<i4", "<f4", "<f8"};
  const int sizes[] = {1, 1, 2, 4, 4, 8};
  uint8_t *m = malloc((size_t)(h * w));
  for (int di = 0; di < 6; di++) {
    for (int64_t i = 0; i < h * w; i++) m[i] = (rnd() % 3) == 0;
    unsigned char *data = calloc((size_t)(h * w), (size_t)sizes[di]);
    for (int64_t i = 0; i < h * w; i++) put_elem(data + i * sizes[di], descrs[di], m[i]);
    char path[512], dict[160], yaml[600];
    snprintf(path, sizeof path, "%s/mask_%d.npy", g_dir, di);
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }",
             descrs[di], (long long)h, (long long)w);
    write_npy_raw(path, di == 3 ? 2 : 1, dict, data, (size_t)(h * w * sizes[di]), 1);
    free(data);
    snprintf(yaml, sizeof yaml, "'%s'", path);
    kv o[] = {{"kind", "mask"}, {"mask", yaml}};
    ref_geom g = {3, 0, 0, 0, 0, 0, m};
    check_case(o, 2, di % 3 == 0 ? SL_U8 : di % 3 == 1 ? SL_U16 : SL_U32, h, w, &g);
  }
  free(m);
}

/* Every malformed file is refused at infer with the file named. */
static void test_npy_errors(void **st) {
  const int64_t h = 6, w = 5;
  unsigned char data[6 * 5 * 8];
  memset(data, 1, sizeof data);
  double nan_data[30];
  for (int i = 0; i < 30; i++) nan_data[i] = 1.0;
  nan_data[7] = 0.0 / 0.0;
  struct {
    const char *name;
    int major;
    const char *dict;
    const void *data;
    size_t len;
    sl_code want;
    const char *needle;
  } cases[] = {
      {"shape.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (5, 6), }", data, 30,
       SL_ERR_PIPELINE, "does not match"},
      {"rank.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (30,), }", data, 30,
       SL_ERR_FORMAT, "2 dimensions"},
      {"short.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 5), }", data, 29,
       SL_ERR_FORMAT, "bytes"},
      {"long.npy", 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (6, 5), }", data, 61,
       SL_ERR_FORMAT, "bytes"},
      {"fortran.npy", 1, "{'descr': '|u1', 'fortran_order': True, 'shape': (6, 5), }", data, 30,
       SL_ERR_FORMAT, "Fortran"},
      {"big.npy", 1, "{'descr': '>u2', 'fortran_order': False, 'shape': (6, 5), }", data, 60,
       SL_ERR_FORMAT, "big endian"},
      {"c16.npy", 1, "{'descr': '<c16', 'fortran_order': False, 'shape': (6, 5), }", data, 240,
       SL_ERR_FORMAT, "unsupported element type"},
      {"nokey.npy", 1, "{'descr': '|u1', 'shape': (6, 5), }", data, 30, SL_ERR_FORMAT,
       "missing"},
      {"extra.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 5), 'x': 1}", data,
       30, SL_ERR_FORMAT, "unexpected key"},
      {"dup.npy", 1, "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (6, 5)}",
       data, 30, SL_ERR_FORMAT, "duplicate"},
      {"notdict.npy", 1, "['descr']", data, 30, SL_ERR_FORMAT, "dictionary"},
      {"badshape.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, -5), }", data, 30,
       SL_ERR_FORMAT, "shape"},
      {"trail.npy", 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 5), } x", data, 30,
       SL_ERR_FORMAT, "after the dictionary"},
      {"nan.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6, 5), }", nan_data, 240,
       SL_ERR_FORMAT, "NaN"},
      {"v9.npy", 9, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 5), }", data, 30,
       SL_ERR_FORMAT, "version"},
  };
  int64_t d[4] = {2, 2, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U8, 4, d, 2);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char path[512];
    mask_path(path, sizeof path, cases[k].name);
    write_npy_raw(path, cases[k].major, cases[k].dict, cases[k].data, cases[k].len, 1);
    expect_mask_refused(&in, cases[k].name, cases[k].want, cases[k].needle);
  }
  /* Raw byte-level damage: bad magic, truncated prefix, header length past the end,
   * missing final newline, missing file. */
  const struct {
    const char *name;
    const char *bytes;
    size_t len;
    sl_code want;
  } raw[] = {
      {"magic.npy", "\x93NUMPX\x01\x00\x04\x00{}  \n", 14, SL_ERR_FORMAT},
      {"tiny.npy", "\x93NUM", 4, SL_ERR_FORMAT},
      {"hlen.npy", "\x93NUMPY\x01\x00\xff\x7f{}\n", 13, SL_ERR_FORMAT},
      {"v2short.npy", "\x93NUMPY\x02\x00\x04\x00", 10, SL_ERR_FORMAT},
      {"nonl.npy", "\x93NUMPY\x01\x00\x03\x00{} ", 13, SL_ERR_FORMAT},
      {"ctrl.npy", "\x93NUMPY\x01\x00\x04\x00{\x01}\n", 14, SL_ERR_FORMAT},
  };
  for (size_t k = 0; k < sizeof raw / sizeof raw[0]; k++) {
    char path[512];
    mask_path(path, sizeof path, raw[k].name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(raw[k].bytes, 1, raw[k].len, f);
    fclose(f);
    expect_mask_refused(&in, raw[k].name, raw[k].want, raw[k].name);
  }
  expect_mask_refused(&in, "absent.npy", SL_ERR_IO, "absent.npy");
}

/* ---- the disk input ------------------------------------------------------------- */

/* Runs a node over 36 random frames (chunks of 5) and returns the image. */
static uint64_t *run_image(const kv *o, int no, const sl_tensor_desc *disk_desc,
                           const double *disk, const void *frames, sl_dtype t, int64_t h,
                           int64_t w) {
  const int64_t rows = 4, cols = 9, npos = rows * cols;
  sl_tensor_desc in = frames_desc(t, rows, cols, h, w);
  sl_node n;
  sl_error e;
  g_in1 = disk_desc;
  sl_code rc = image_make(&n, o, no, &in, &e);
  g_in1 = NULL;
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  uint64_t *img = calloc((size_t)npos, 8);
  sl_backend *b = backend(2);
  g_disk = disk;
  run_chunks(&n, b, frames, npos, 5, img);
  g_disk = NULL;
  sl_cpu_backend_ops.destroy(b);
  if (disk_desc) assert_true(n.n_notes >= 1 && strstr(n.notes[0], "geometry: "));
  node_free(&n);
  return img;
}

static void test_disk_input(void **st) {
  const int64_t h = 37, w = 41, npos = 36;
  int64_t dd[1] = {4};
  sl_tensor_desc ddesc = sl_desc_make(SL_F64, 1, dd, 0);
  const double disk[4] = {17.25, 21.5, 6.3, 0.07};
  void *frames = random_frames(SL_U16, npos * h * w);
  struct {
    kv p[6];
    int np;
    kv d[4];
    int nd;
  } cases[] = {
      {{{"kind", "bf"}, {"radius", "6.3"}, {"center", "[17.25, 21.5]"}}, 3, {{"kind", "bf"}}, 1},
      {{{"kind", "df"}, {"radius", "6.3"}, {"center", "[17.25, 21.5]"}}, 3, {{"kind", "df"}}, 1},
      /* adf default ring: 1 to 2 disk radii */
      {{{"kind", "adf"}, {"radius", "6.3"}, {"center", "[17.25, 21.5]"}}, 3, {{"kind", "adf"}}, 1},
      {{{"kind", "annulus"}, {"radius", "6.3"}, {"center", "[17.25, 21.5]"}, {"inner", "0.5"},
        {"outer", "1.5"}},
       5,
       {{"kind", "annulus"}, {"inner", "0.5"}, {"outer", "1.5"}},
       3},
      {{{"kind", "annulus"}, {"center", "[17.25, 21.5]"}, {"inner", "2"}, {"outer", "9"},
        {"units", "pixels"}},
       5,
       {{"kind", "annulus"}, {"inner", "2"}, {"outer", "9"}, {"units", "pixels"}},
       4},
      /* the params are ignored when the disk is connected */
      {{{"kind", "bf"}, {"radius", "6.3"}, {"center", "[17.25, 21.5]"}}, 3,
       {{"kind", "bf"}, {"radius", "2"}, {"center", "[3, 3]"}}, 3},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    uint64_t *a = run_image(cases[k].p, cases[k].np, NULL, NULL, frames, SL_U16, h, w);
    uint64_t *b = run_image(cases[k].d, cases[k].nd, &ddesc, disk, frames, SL_U16, h, w);
    int any = 0;
    for (int64_t p = 0; p < npos; p++) any |= a[p] != 0;
    assert_true(any);
    assert_memory_equal(a, b, (size_t)npos * 8);
    free(a);
    free(b);
  }
  /* Errors: a disk with kind mask, a disk of the wrong shape, bad values at run time. */
  int64_t d4[4] = {4, 9, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d4, 2);
  sl_node n;
  sl_error e;
  kv om[] = {{"kind", "mask"}, {"mask", "'/nonexistent.npy'"}};
  g_in1 = &ddesc;
  assert_int_equal(image_make(&n, om, 2, &in, &e), SL_ERR_PIPELINE);
  assert_non_null(strstr(e.msg, "input 'disk'"));
  node_free(&n);
  int64_t d3[1] = {3};
  sl_tensor_desc wrong = sl_desc_make(SL_F64, 1, d3, 0);
  g_in1 = &wrong;
  kv ob[] = {{"kind", "bf"}};
  assert_int_equal(image_make(&n, ob, 1, &in, &e), SL_ERR_PIPELINE);
  assert_non_null(strstr(e.msg, "input 'disk'"));
  node_free(&n);
  g_in1 = &ddesc;
  assert_int_equal(image_make(&n, ob, 1, &in, &e), SL_OK);
  g_in1 = NULL;
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  const double bad[4] = {10, 10, -1, 0};
  sl_backend *b = backend(1);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  uint64_t img[36];
  a.backend = b, a.node = &n, a.state = n.state, a.pos_count = 36, a.n_chunks = 1;
  a.in[0] = frames, a.in[1] = bad, a.out[0] = img, a.err = &e;
  assert_int_equal(n.desc->kernel[SL_BACKEND_CPU](&a), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "radius"));
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(frames);
}

/* ---- PNG and HDF5 masks ----------------------------------------------------------- */

/* Writes a PNG of `ctype` (gray or RGB) with `depth` bits from values v[i] (0..255). */
static void write_png(const char *path, int64_t h, int64_t w, const uint8_t *v, int ctype,
                      int depth) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  assert_true(png && info);
  if (setjmp(png_jmpbuf(png))) fail_msg("libpng write error");
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  int ch = ctype == PNG_COLOR_TYPE_RGB ? 3 : 1, bpc = depth == 16 ? 2 : 1;
  png_bytep row = calloc((size_t)(w * ch * bpc), 1);
  for (int64_t r = 0; r < h; r++) {
    for (int64_t c = 0; c < w; c++)
      for (int k = 0; k < ch; k++) {
        uint8_t x = v[r * w + c];
        if (bpc == 2) row[(c * ch + k) * 2] = 0, row[(c * ch + k) * 2 + 1] = x; /* low byte only */
        else row[c * ch + k] = x;
      }
    png_write_row(png, row);
  }
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(row);
  fclose(f);
}

/* Writes dataset `name` of `type` (rank 2 or 3) from doubles. */
static void write_h5(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
                     const double *v) {
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t ds = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(sp >= 0 && ds >= 0);
  assert_true(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
  H5Dclose(ds);
  H5Sclose(sp);
}

static void test_png_h5_masks(void **st) {
  const int64_t h = 37, w = 41, npos = 36;
  uint8_t *m = malloc((size_t)(h * w)), *pv = malloc((size_t)(h * w));
  for (int64_t i = 0; i < h * w; i++) {
    m[i] = (rnd() % 3) == 0;
    pv[i] = m[i] ? (uint8_t)(1 + rnd() % 255) : 0; /* any nonzero value is in */
  }
  char npy[512], png8[512], png16[512], h5[512], yaml[700];
  mask_path(npy, sizeof npy, "m.npy");
  mask_path(png8, sizeof png8, "m.png");
  mask_path(png16, sizeof png16, "m16.PNG");
  mask_path(h5, sizeof h5, "m.h5");
  char dict[160];
  snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (%lld, %lld), }",
           (long long)h, (long long)w);
  write_npy_raw(npy, 1, dict, m, (size_t)(h * w), 1);
  write_png(png8, h, w, pv, PNG_COLOR_TYPE_GRAY, 8);
  write_png(png16, h, w, m, PNG_COLOR_TYPE_GRAY, 16);
  double *dv = malloc((size_t)(h * w) * 8);
  for (int64_t i = 0; i < h * w; i++) dv[i] = m[i] ? (double)(1 + rnd() % 200) : 0;
  hid_t file = H5Fcreate(h5, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(file >= 0);
  H5Gclose(H5Gcreate2(file, "/entry", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  hsize_t dims[3] = {(hsize_t)h, (hsize_t)w, 1}, dims3[3] = {2, (hsize_t)h, (hsize_t)w};
  write_h5(file, "/entry/u8", H5T_STD_U8LE, 2, dims, dv);
  write_h5(file, "/entry/u16", H5T_STD_U16LE, 2, dims, dv);
  write_h5(file, "/entry/u32", H5T_STD_U32BE, 2, dims, dv);
  write_h5(file, "/entry/f32", H5T_IEEE_F32LE, 2, dims, dv);
  write_h5(file, "/entry/f64", H5T_IEEE_F64LE, 2, dims, dv);
  write_h5(file, "/entry/i16", H5T_STD_I16LE, 2, dims, dv);
  double *big = calloc((size_t)(2 * h * w), 8);
  write_h5(file, "/entry/rank3", H5T_IEEE_F64LE, 3, dims3, big);
  hsize_t small[2] = {(hsize_t)w, (hsize_t)h};
  write_h5(file, "/entry/transposed", H5T_STD_U8LE, 2, small, big);
  dv[7] = NAN;
  write_h5(file, "/entry/nan", H5T_IEEE_F64LE, 2, dims, dv);
  H5Fclose(file);
  free(big);

  void *frames = random_frames(SL_U32, npos * h * w);
  snprintf(yaml, sizeof yaml, "'%s'", npy);
  kv o[] = {{"kind", "mask"}, {"mask", yaml}};
  uint64_t *want = run_image(o, 2, NULL, NULL, frames, SL_U32, h, w);
  ref_geom g = {3, 0, 0, 0, 0, 0, m};
  uint64_t ref[36];
  reference(frames, SL_U32, npos, h, w, &g, ref);
  assert_memory_equal(ref, want, sizeof ref);
  const char *good[] = {"m.png", "m16.PNG", "m.h5:/entry/u8", "m.h5:/entry/u16",
                        "m.h5:/entry/u32", "m.h5:/entry/f32", "m.h5:/entry/f64"};
  for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
    char path[512];
    mask_path(path, sizeof path, good[k]);
    snprintf(yaml, sizeof yaml, "'%s'", path);
    uint64_t *got = run_image(o, 2, NULL, NULL, frames, SL_U32, h, w);
    if (memcmp(got, want, (size_t)npos * 8)) fprintf(stderr, "mask %s differs\n", good[k]);
    assert_memory_equal(got, want, (size_t)npos * 8);
    free(got);
  }
  /* Malformed or mismatched files, refused at infer with the file named. */
  char rgb[512], wrongsz[512], junk[512];
  mask_path(rgb, sizeof rgb, "rgb.png");
  mask_path(wrongsz, sizeof wrongsz, "small.png");
  mask_path(junk, sizeof junk, "junk.png");
  write_png(rgb, h, w, pv, PNG_COLOR_TYPE_RGB, 8);
  write_png(wrongsz, w, h, pv, PNG_COLOR_TYPE_GRAY, 8);
  FILE *f = fopen(junk, "wb");
  assert_non_null(f);
  static const char junk_bytes[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDRxx";
  fwrite(junk_bytes, 1, sizeof junk_bytes - 1, f);
  fclose(f);
  struct {
    const char *name;
    sl_code want;
    const char *needle;
  } bad[] = {
      {"rgb.png", SL_ERR_FORMAT, "grayscale"},
      {"small.png", SL_ERR_PIPELINE, "does not match"},
      {"junk.png", SL_ERR_FORMAT, "PNG"},
      {"absent.png", SL_ERR_IO, "cannot open"},
      {"m.npy.png", SL_ERR_IO, "cannot open"},
      {"m.h5", SL_ERR_PIPELINE, "dataset"},
      {"m.h5:/entry/none", SL_ERR_FORMAT, "no dataset"},
      {"m.h5:/entry/rank3", SL_ERR_FORMAT, "2 dimensions"},
      {"m.h5:/entry/i16", SL_ERR_FORMAT, "element type"},
      {"m.h5:/entry/transposed", SL_ERR_PIPELINE, "does not match"},
      {"m.h5:/entry/nan", SL_ERR_FORMAT, "NaN"},
      {"absent.h5:/x", SL_ERR_IO, "cannot open"},
      {"m.png.h5:/x", SL_ERR_IO, "cannot open"},
  };
  int64_t d4[4] = {4, 9, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U8, 4, d4, 2);
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    expect_mask_refused(&in, bad[k].name, bad[k].want, bad[k].needle);
  /* A file that is not HDF5. */
  {
    char path[512];
    mask_path(path, sizeof path, "m.npy");
    char fake[512];
    mask_path(fake, sizeof fake, "fake.h5");
    FILE *ff = fopen(fake, "wb");
    fputs("not hdf5", ff);
    fclose(ff);
    snprintf(yaml, sizeof yaml, "'%s:/x'", fake);
    sl_node n;
    sl_error e;
    assert_int_equal(image_make(&n, o, 2, &in, &e), SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "not an HDF5 file"));
    node_free(&n);
  }
  free(want);
  free(frames);
  free(m);
  free(pv);
  free(dv);
}

/* ---- validation ----------------------------------------------------------------- */

static void test_invalid_params(void **st) {
  int64_t d[4] = {3, 4, 16, 16};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  const param_refusal cases[] = {
      {{{"kind", "xx"}, {"radius", "3"}}, 2, "'kind'"},
      {{{"kind", "bf"}}, 1, "'radius'"},
      {{{"kind", "df"}, {"radius", "0"}}, 2, "'radius'"},
      {{{"kind", "adf"}, {"radius", "-2"}}, 2, "'radius'"},
      {{{"kind", "annulus"}, {"radius", "-1"}, {"units", "pixels"}}, 3, "'radius'"},
      {{{"kind", "annulus"}}, 1, "'radius'"}, /* units radii needs a radius */
      {{{"kind", "bf"}, {"radius", ".nan"}}, 2, "'radius'"},
      {{{"kind", "adf"}, {"radius", "3"}, {"outer", "1"}}, 3, "'outer'"},
      {{{"kind", "adf"}, {"radius", "3"}, {"inner", "-1"}}, 3, "'inner'"},
      {{{"kind", "adf"}, {"radius", "3"}, {"units", "mm"}}, 3, "'units'"},
      {{{"kind", "bf"}, {"radius", "3"}, {"center", "[1, 2, 3]"}}, 3, "'center'"},
      {{{"kind", "bf"}, {"radius", "3"}, {"center", "[1, x]"}}, 3, "'center'"},
      {{{"kind", "bf"}, {"radius", "3"}, {"center", "[1, 1e9]"}}, 3, "'center'"},
      {{{"kind", "mask"}}, 1, "'mask'"},
      {{{"kind", "bf"}, {"radius", "3"}, {"mask", "/tmp/x.npy"}}, 3, "'mask'"},
  };
  expect_param_refusals(&sl_node_virtual_image, &in, 1, cases, SL_COUNT_OF(cases));
  /* Inputs of the wrong kind. */
  int64_t d3[3] = {3, 16, 16}, d5[5] = {2, 3, 4, 16, 16};
  sl_tensor_desc bad[] = {
      sl_desc_make(SL_F32, 4, d, 2),      /* float frames */
      sl_desc_make(SL_U64, 4, d, 2),      /* u64 frames */
      sl_desc_make(SL_I32, 4, d, 2),      /* signed frames */
      sl_desc_make(SL_U16, 2, d3, 1),     /* one item axis */
      sl_desc_make(SL_U16, 5, d5, 2),     /* three item axes */
      sl_desc_make(SL_U16, 2, d + 2, 0),  /* a whole (not streamed) frame */
      sl_desc_make(SL_U16, 3, d3, 2),     /* one item axis */
  };
  kv o[] = {{"kind", "bf"}, {"radius", "3"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    expect_node_error(&sl_node_virtual_image, o, 2, &bad[k], 1, SL_ERR_PIPELINE,
                      "input 'frames' expects u8, u16 or u32 frames with 2 item axes", NULL);
}

static void test_cost(void **st) {
  int64_t d[4] = {3, 4, 16, 16};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  kv o[] = {{"kind", "bf"}, {"radius", "3"}};
  sl_node n;
  sl_error e;
  assert_int_equal(image_make(&n, o, 2, &in, &e), SL_OK);
  sl_node_cost c;
  n.desc->cost(&n, 10, &c);
  assert_true(c.bytes_read == 10 * 256 * 2); /* upper bound before prepare */
  assert_true(c.bytes_written == 80);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  n.desc->cost(&n, 10, &c);
  assert_true(c.bytes_read > 0 && c.bytes_read < 10 * 256 * 2);
  node_free(&n);
}

static int setup(void **st) { return temp_dir_make(g_dir, sizeof g_dir, "/tmp/sluice_test_vi_XXXXXX"); }

static int teardown(void **st) { return temp_dir_remove(g_dir); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kinds_all_dtypes), cmocka_unit_test(test_small_geometry),
      cmocka_unit_test(test_u64_exact),        cmocka_unit_test(test_npy_masks),
      cmocka_unit_test(test_npy_errors),       cmocka_unit_test(test_invalid_params),
      cmocka_unit_test(test_cost),            cmocka_unit_test(test_disk_input),
      cmocka_unit_test(test_png_h5_masks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
