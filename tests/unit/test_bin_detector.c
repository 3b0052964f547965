/* bin_detector: exact sums against a plain u64 reference for every factor,
 * input dtype and output dtype, odd detector sizes (dropped rows/columns),
 * values at the bound, chunks of 1..all on 1 and 2 threads; auto dtype
 * choice and its recorded reason; the run-time audit of max_value; dtype and
 * parameter errors. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NH_RNG_SEED 0x9E3779B97F4A7C15ULL
#include "tests/unit/node_harness.h"
#include "nodes/registry.h"

extern const sl_node_desc sl_node_bin_detector;

/* ---- harness ------------------------------------------------------------------ */

static sl_code bin_make(sl_node *n, const kv *over, int n_over, const sl_tensor_desc *in,
                        sl_error *e) {
  return node_make(n, &sl_node_bin_detector, over, n_over, in, 1, e);
}

/* Runs all positions in chunks; returns the first failing code (e filled). */
static sl_code run_chunks(sl_node *n, sl_backend *b, const void *frames, int64_t npos,
                          int64_t chunk, void *out, sl_error *e) {
  void *outs[1] = {out};
  return run_stream(n, b, frames, NULL, 0, outs, npos, chunk, e);
}

/* Frames with values in [0, bound]: frame 0 all at the bound (every bin sum
 * is exactly factor^2 * bound), frame 1 all zero, the rest random with about
 * a quarter at the bound. */
static void *make_frames(sl_dtype t, int64_t npos, int64_t item, uint64_t bound) {
  void *f = malloc((size_t)(npos * item) * sl_dtype_size(t));
  for (int64_t p = 0; p < npos; p++)
    for (int64_t i = 0; i < item; i++) {
      uint64_t v = rnd();
      uint64_t x = p == 0 ? bound : p == 1 ? 0 : (v & 3) == 0 ? bound : (v >> 8) % (bound + 1);
      set_pix(f, t, p * item + i, x);
    }
  return f;
}

/* The plain reference: u64 sums of f x f blocks; trailing rows/cols dropped. */
static void reference(const void *in, sl_dtype t, int64_t npos, int64_t h, int64_t w, int f,
                      uint64_t *out) {
  int64_t ho = h / f, wo = w / f;
  for (int64_t p = 0; p < npos; p++)
    for (int64_t r = 0; r < ho; r++)
      for (int64_t c = 0; c < wo; c++) {
        uint64_t s = 0;
        for (int64_t i = r * f; i < r * f + f; i++)
          for (int64_t j = c * f; j < c * f + f; j++) s += pix(in, t, p * h * w + i * w + j);
        out[p * ho * wo + r * wo + c] = s;
      }
}

/* ---- sums --------------------------------------------------------------------- */

typedef struct bin_case {
  sl_dtype in;
  int f;
  int64_t h, w;
  const char *dtype; /* param */
  uint64_t max_value; /* param (0 = default) */
  sl_dtype want_out;
} bin_case;

static void check_case(const bin_case *k) {
  const int64_t rows = 2, cols = 5, npos = rows * cols, item = k->h * k->w;
  int64_t d[4] = {rows, cols, k->h, k->w};
  sl_tensor_desc in = sl_desc_make(k->in, 4, d, 2);
  char fy[16], my[32], dy[16];
  snprintf(fy, sizeof fy, "%d", k->f);
  snprintf(my, sizeof my, "%llu", (unsigned long long)k->max_value);
  snprintf(dy, sizeof dy, "%s", k->dtype);
  kv o[] = {{"factor", fy}, {"max_value", my}, {"dtype", dy}};
  sl_node n;
  sl_error e;
  sl_code rc = bin_make(&n, o, 3, &in, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  const sl_tensor_desc *od = &n.out[0];
  if (od->dtype != k->want_out)
    fprintf(stderr, "%s f%d max %llu dtype %s: got %s want %s\n", sl_dtype_name(k->in), k->f,
            (unsigned long long)k->max_value, k->dtype, sl_dtype_name(od->dtype),
            sl_dtype_name(k->want_out));
  assert_int_equal(od->dtype, k->want_out);
  assert_int_equal(od->rank, 4);
  assert_int_equal(od->stream_rank, 2);
  assert_int_equal(od->dims[0], rows);
  assert_int_equal(od->dims[1], cols);
  int64_t ho = k->h / k->f, wo = k->w / k->f;
  assert_int_equal(od->dims[2], ho);
  assert_int_equal(od->dims[3], wo);
  assert_non_null(note(&n, "dtype"));
  assert_non_null(note(&n, "factor"));
  assert_non_null(note(&n, "input"));
  assert_non_null(note(&n, "output"));
  const char *dropped = note(&n, "dropped");
  assert_non_null(dropped);
  if (k->h % k->f || k->w % k->f) assert_non_null(strstr(dropped, "trailing"));
  else assert_non_null(strstr(dropped, "none"));
  if (n.desc->prepare) assert_int_equal(n.desc->prepare(&n, &e), SL_OK);

  uint64_t bound = k->max_value ? k->max_value : dmax(k->in);
  void *frames = make_frames(k->in, npos, item, bound);
  int64_t oitem = ho * wo;
  uint64_t *want = malloc((size_t)(npos * oitem) * 8);
  reference(frames, k->in, npos, k->h, k->w, k->f, want);
  /* frame 0 reaches the largest bin sum exactly */
  assert_true(want[0] == (uint64_t)(k->f * k->f) * bound);
  size_t osz = sl_dtype_size(od->dtype);
  void *got = malloc((size_t)(npos * oitem) * osz);
  int64_t chunks[3] = {1, 3, npos};
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    for (int c = 0; c < 3; c++) {
      memset(got, 0xA5, (size_t)(npos * oitem) * osz);
      rc = run_chunks(&n, b, frames, npos, chunks[c], got, &e);
      if (rc) fprintf(stderr, "kernel: %s\n", e.msg);
      assert_int_equal(rc, SL_OK);
      for (int64_t i = 0; i < npos * oitem; i++)
        if (pix(got, od->dtype, i) != want[i]) {
          fprintf(stderr, "%s f%d %lldx%lld -> %s chunk %lld: out %lld got %llu want %llu\n",
                  sl_dtype_name(k->in), k->f, (long long)k->h, (long long)k->w,
                  sl_dtype_name(od->dtype), (long long)chunks[c], (long long)i,
                  (unsigned long long)pix(got, od->dtype, i), (unsigned long long)want[i]);
          fail();
        }
    }
    sl_cpu_backend_ops.destroy(b);
  }
  free(frames);
  free(want);
  free(got);
  node_free(&n);
}

/* The narrowest unsigned type >= the input holding f^2 * bound. */
static sl_dtype expected_auto(sl_dtype in, int f, uint64_t bound) {
  static const sl_dtype order[4] = {SL_U8, SL_U16, SL_U32, SL_U64};
  uint64_t need = (uint64_t)(f * f) * bound;
  for (int i = 0; i < 4; i++)
    if (sl_dtype_size(order[i]) >= sl_dtype_size(in) && dmax(order[i]) >= need) return order[i];
  return SL_DT_INVALID;
}

static void test_auto_all_factors(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const int factors[3] = {2, 4, 8};
  /* 130x67: frames large enough that 2 threads split a chunk's frames */
  const int64_t sizes[][2] = {{16, 16}, {17, 23}, {8, 8}, {9, 15}, {31, 8}, {130, 67}};
  for (int ti = 0; ti < 3; ti++)
    for (int fi = 0; fi < 3; fi++)
      for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        bin_case k = {types[ti], factors[fi], sizes[si][0], sizes[si][1], "auto", 0,
                      expected_auto(types[ti], factors[fi], dmax(types[ti]))};
        check_case(&k);
      }
}

static void test_known_auto_choices(void **st) {
  /* Spelled out, not computed: the dtype each combination must get. */
  const struct {
    sl_dtype in;
    int f;
    uint64_t mv;
    sl_dtype out;
  } t[] = {
      {SL_U8, 2, 0, SL_U16},    /* 4 * 255 = 1020 */
      {SL_U8, 8, 0, SL_U16},    /* 64 * 255 = 16320 */
      {SL_U8, 4, 15, SL_U8},    /* 16 * 15 = 240 fits u8 */
      {SL_U8, 4, 16, SL_U16},   /* 256 does not */
      {SL_U16, 2, 0, SL_U32},   /* 4 * 65535 */
      {SL_U16, 8, 0, SL_U32},   /* 64 * 65535 = 4194240 */
      {SL_U16, 4, 4095, SL_U16}, /* 16 * 4095 = 65520 */
      {SL_U16, 8, 1023, SL_U16}, /* 64 * 1023 = 65472 */
      {SL_U16, 8, 1024, SL_U32}, /* 65536 */
      {SL_U32, 2, 0, SL_U64},
      {SL_U32, 8, 67108863, SL_U32}, /* 64 * (2^26 - 1) = 2^32 - 64 */
      {SL_U32, 8, 67108864, SL_U64}, /* 2^32 */
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    bin_case k = {t[i].in, t[i].f, 17, 19, "auto", t[i].mv, t[i].out};
    check_case(&k);
  }
}

static void test_explicit_dtypes(void **st) {
  /* Wider than needed, and narrower than the input under an audited bound. */
  const bin_case cases[] = {
      {SL_U8, 2, 10, 11, "u64", 0, SL_U64},
      {SL_U8, 8, 16, 16, "u32", 0, SL_U32},
      {SL_U8, 2, 16, 16, "u8", 63, SL_U8},     /* 252 */
      {SL_U16, 2, 12, 13, "u8", 63, SL_U8},    /* narrower than the input */
      {SL_U16, 4, 12, 13, "u16", 4095, SL_U16},
      {SL_U16, 8, 16, 16, "u64", 0, SL_U64},
      {SL_U32, 4, 9, 9, "u16", 4095, SL_U16},
      {SL_U32, 2, 9, 9, "u32", 1073741823, SL_U32}, /* 4 * (2^30 - 1) */
      {SL_U32, 8, 8, 8, "u64", 0, SL_U64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* ---- notes ---------------------------------------------------------------------- */

static void test_notes(void **st) {
  int64_t d[3] = {4, 66, 67};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  sl_node n;
  sl_error e;
  kv o[] = {{"factor", "4"}};
  assert_int_equal(bin_make(&n, o, 1, &in, &e), SL_OK);
  assert_string_equal(note(&n, "dtype"), "dtype: u32 (auto): 16 * 65535 = 1048560 does not fit u16 "
                                         "(the u16 maximum)");
  assert_string_equal(note(&n, "input"), "input: u16[4|66,67]");
  assert_string_equal(note(&n, "output"), "output: u32[4|16,16]");
  assert_non_null(strstr(note(&n, "dropped"), "2 trailing row(s) and 3 trailing column(s)"));
  assert_non_null(strstr(note(&n, "factor"), "4"));
  assert_non_null(strstr(note(&n, "audit"), "not needed"));
  node_free(&n);

  kv o2[] = {{"factor", "2"}, {"max_value", "1000"}};
  assert_int_equal(bin_make(&n, o2, 2, &in, &e), SL_OK);
  assert_int_equal(n.out[0].dtype, SL_U16);
  assert_non_null(strstr(note(&n, "dtype"), "u16 (auto): 4 * 1000 = 4000 fits u16"));
  assert_non_null(strstr(note(&n, "dtype"), "max_value 1000"));
  assert_non_null(strstr(note(&n, "audit"), "1000"));
  node_free(&n);

  kv o3[] = {{"factor", "2"}, {"dtype", "u64"}};
  assert_int_equal(bin_make(&n, o3, 2, &in, &e), SL_OK);
  assert_non_null(strstr(note(&n, "dtype"), "u64 (requested)"));
  node_free(&n);

  int64_t d8[3] = {4, 8, 8};
  sl_tensor_desc in8 = sl_desc_make(SL_U8, 3, d8, 1);
  kv o4[] = {{"factor", "8"}};
  assert_int_equal(bin_make(&n, o4, 1, &in8, &e), SL_OK);
  assert_non_null(strstr(note(&n, "dtype"), "u16 (auto): 64 * 255 = 16320 does not fit u8"));
  assert_non_null(strstr(note(&n, "dropped"), "none"));
  sl_node_cost c;
  n.desc->cost(&n, 3, &c);
  assert_int_equal(c.bytes_read, 3 * 64);
  assert_int_equal(c.bytes_written, 3 * 1 * 2);
  node_free(&n);
}

/* ---- audit ------------------------------------------------------------------------ */

static void test_audit(void **st) {
  const int64_t rows = 3, cols = 4, npos = rows * cols, h = 10, w = 9, item = h * w;
  int64_t d[4] = {rows, cols, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  kv o[] = {{"factor", "2"}, {"max_value", "1000"}};
  sl_node n;
  sl_error e;
  assert_int_equal(bin_make(&n, o, 2, &in, &e), SL_OK);
  assert_int_equal(n.out[0].dtype, SL_U16);
  uint16_t *f = make_frames(SL_U16, npos, item, 1000);
  uint16_t *out = malloc((size_t)(npos * 5 * 4) * 2);
  /* Values at the bound pass. */
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    assert_int_equal(run_chunks(&n, b, f, npos, 5, out, &e), SL_OK);
    sl_cpu_backend_ops.destroy(b);
  }
  /* 1001 at frame 7, pixel (9, 8) (a dropped column: still audited) and a
   * later one at frame 8; chunks of 5: frame 7 is in chunk 1. The first is
   * reported, whatever the thread count. */
  f[7 * item + 9 * w + 8] = 1001;
  f[8 * item + 0] = 60000;
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    sl_code rc = run_chunks(&n, b, f, npos, 5, out, &e);
    if (rc != SL_ERR_FORMAT) fprintf(stderr, "rc %d: %s\n", rc, e.msg);
    assert_int_equal(rc, SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "chunk 1"));
    assert_non_null(strstr(e.msg, "frame 7"));
    assert_non_null(strstr(e.msg, "scan position [1, 3]"));
    assert_non_null(strstr(e.msg, "row 9, col 8"));
    assert_non_null(strstr(e.msg, "1001"));
    assert_non_null(strstr(e.msg, "max_value 1000"));
    assert_int_equal(e.chunk, 1);
    /* chunk of 1 frame */
    rc = run_chunks(&n, b, f, npos, 1, out, &e);
    assert_int_equal(rc, SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "chunk 7"));
    assert_non_null(strstr(e.msg, "frame 7"));
    sl_cpu_backend_ops.destroy(b);
  }
  node_free(&n);
  {
    /* Large frames: the chunk's frames are split over 2 workers; the lowest
     * failing frame is reported even when another worker fails too. */
    const int64_t np = 48, hh = 64, ww = 64, it = hh * ww;
    int64_t d2[3] = {np, hh, ww};
    sl_tensor_desc in2 = sl_desc_make(SL_U8, 3, d2, 1);
    kv o3[] = {{"factor", "4"}, {"max_value", "15"}};
    assert_int_equal(bin_make(&n, o3, 2, &in2, &e), SL_OK);
    assert_int_equal(n.out[0].dtype, SL_U8);
    uint8_t *g = make_frames(SL_U8, np, it, 15);
    uint8_t *o8 = malloc((size_t)(np * 256));
    uint64_t *w8 = malloc((size_t)(np * 256) * 8);
    reference(g, SL_U8, np, hh, ww, 4, w8);
    sl_backend *b2 = backend(2);
    assert_int_equal(run_chunks(&n, b2, g, np, np, o8, &e), SL_OK);
    for (int64_t i = 0; i < np * 256; i++) assert_true(o8[i] == w8[i]);
    g[40 * it + 5] = 16;
    g[20 * it + 64 * 3 + 2] = 200;
    g[21 * it] = 255;
    for (int rep = 0; rep < 20; rep++) {
      sl_code rc = run_chunks(&n, b2, g, np, np, o8, &e);
      assert_int_equal(rc, SL_ERR_FORMAT);
      if (!strstr(e.msg, "frame 20 ") || !strstr(e.msg, "row 3, col 2"))
        fprintf(stderr, "%s\n", e.msg);
      assert_non_null(strstr(e.msg, "chunk 0"));
      assert_non_null(strstr(e.msg, "frame 20 (scan position [20])"));
      assert_non_null(strstr(e.msg, "row 3, col 2"));
      assert_non_null(strstr(e.msg, "value 200"));
    }
    sl_cpu_backend_ops.destroy(b2);
    node_free(&n);
    free(g);
    free(o8);
    free(w8);
  }
  /* Without a max_value there is nothing to audit: 60000 is a value. */
  kv o2[] = {{"factor", "2"}};
  assert_int_equal(bin_make(&n, o2, 1, &in, &e), SL_OK);
  sl_backend *b = backend(2);
  uint32_t *out32 = malloc((size_t)(npos * 20) * 4);
  assert_int_equal(run_chunks(&n, b, f, npos, 5, out32, &e), SL_OK);
  uint64_t *want = malloc((size_t)(npos * 20) * 8);
  reference(f, SL_U16, npos, h, w, 2, want);
  for (int64_t i = 0; i < npos * 20; i++) assert_true(out32[i] == want[i]);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(want);
  free(out32);
  free(f);
  free(out);
}

/* ---- errors ---------------------------------------------------------------------------- */

/* A bin_detector node on `in` with params `o` must be refused (SL_ERR_PIPELINE). */
static void expect_refused(const kv *o, int n_o, const sl_tensor_desc *in, const char *needle,
                           const char *needle2) {
  expect_node_error(&sl_node_bin_detector, o, n_o, in, 1, SL_ERR_PIPELINE, needle, needle2);
}

static void test_errors(void **st) {
  int64_t d[4] = {3, 4, 16, 12};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  /* dtype cannot hold the sum: the message names the numbers */
  kv a[] = {{"factor", "2"}, {"dtype", "u16"}};
  expect_refused(a, 2, &in, "'dtype' u16", "4 * 65535 = 262140");
  kv a2[] = {{"factor", "8"}, {"dtype", "u16"}, {"max_value", "1024"}};
  expect_refused(a2, 3, &in, "64 * 1024 = 65536", "65535");
  kv a3[] = {{"factor", "2"}, {"dtype", "u8"}, {"max_value", "64"}};
  expect_refused(a3, 3, &in, "4 * 64 = 256", NULL);
  kv a4[] = {{"factor", "2"}, {"dtype", "f32"}};
  expect_refused(a4, 2, &in, "'dtype'", "auto|u8|u16|u32|u64");
  kv a5[] = {{"factor", "2"}, {"dtype", "i32"}};
  expect_refused(a5, 2, &in, "'dtype'", NULL);
  /* factor */
  kv f3[] = {{"factor", "3"}};
  expect_refused(f3, 1, &in, "'factor'", "2, 4 or 8");
  kv f1[] = {{"factor", "1"}};
  expect_refused(f1, 1, &in, "'factor'", NULL);
  kv f16[] = {{"factor", "16"}};
  expect_refused(f16, 1, &in, "'factor'", NULL);
  /* max_value */
  kv m1[] = {{"factor", "2"}, {"max_value", "65536"}};
  expect_refused(m1, 2, &in, "'max_value'", "65535");
  kv m2[] = {{"factor", "2"}, {"max_value", "-1"}};
  expect_refused(m2, 2, &in, "'max_value'", NULL);
  /* detector smaller than a bin */
  int64_t ds[4] = {3, 4, 16, 7};
  sl_tensor_desc small = sl_desc_make(SL_U16, 4, ds, 2);
  kv f8[] = {{"factor", "8"}};
  expect_refused(f8, 1, &small, "smaller than one 8x8 bin", NULL);
  /* inputs */
  kv f2[] = {{"factor", "2"}};
  sl_tensor_desc bad = sl_desc_make(SL_F32, 4, d, 2);
  expect_refused(f2, 1, &bad, "input 'frames'", "f32");
  bad = sl_desc_make(SL_U64, 4, d, 2);
  expect_refused(f2, 1, &bad, "input 'frames'", "u64");
  bad = sl_desc_make(SL_U16, 4, d, 0);
  expect_refused(f2, 1, &bad, "input 'frames'", "streamed");
  bad = sl_desc_make(SL_U16, 4, d, 3);
  expect_refused(f2, 1, &bad, "input 'frames'", NULL);
  bad = sl_desc_make(SL_U16, 4, d, 2);
  bad.encoding = SL_ENC_BSLZ4;
  expect_refused(f2, 1, &bad, "input 'frames'", NULL);
}

static void test_descriptor(void **st) {
  const sl_node_desc *d = &sl_node_bin_detector;
  assert_string_equal(d->type, "bin_detector");
  assert_int_equal(d->n_inputs, 1);
  assert_string_equal(d->inputs[0].name, "frames");
  assert_string_equal(d->outputs[0].name, "frames");
  assert_non_null(d->kernel[SL_BACKEND_CPU]);
  /* The CUDA kernel reads factor and max_value by name, as integers. */
  assert_int_equal(d->n_params, 3);
  assert_string_equal(d->params[0].name, "factor");
  assert_int_equal(d->params[0].type, SL_PT_INT);
  assert_string_equal(d->params[1].choices, "auto|u8|u16|u32|u64");
  assert_string_equal(d->params[2].name, "max_value");
  assert_int_equal(d->params[2].type, SL_PT_INT);
  const sl_node_desc *reg = sl_registry_find(sl_nodes_registry(), "bin_detector");
  if (reg) assert_ptr_equal(reg, d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auto_all_factors),
      cmocka_unit_test(test_known_auto_choices),
      cmocka_unit_test(test_explicit_dtypes),
      cmocka_unit_test(test_notes),
      cmocka_unit_test(test_audit),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
