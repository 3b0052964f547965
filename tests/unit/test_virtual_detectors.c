/* virtual_detectors: BF/ADF/DF from one sweep against plain per-pixel loops
 * written here and against three virtual_image runs (bit for bit); random data
 * with values at the dtype max, odd detector sizes, chunks of 1, 7 and all
 * positions, 1 and 2 threads; runs longer than 65536 pixels; the disk input;
 * validation. Every case runs every sweep, forced through param 'simd' and
 * the AVX-512 switch (madd_u16.h): the run-based portable loops and, for u16
 * frames, the AVX2 vpmaddwd sweep and its AVX-512 vpdpwssd variant
 * (half the random u16 pixels are >= 32768, one in sixteen 65535), over
 * widths that 16 does or does not divide, discs and rings clipped by every
 * edge or lying only in a row's last partial vector, no BF/ADF pixel at all,
 * and all-0 / all-65535 frames at the accumulators' spill bound. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/core/simd.h"
#include "nodes/common/madd_u16.h"
#include "tests/unit/stem_test_data.h"

extern const sl_node_desc sl_node_virtual_detectors;
extern const sl_node_desc sl_node_virtual_image;

/* Plain reference: radii in pixels. */
static void reference(const void *f, sl_dtype t, int64_t npos, int64_t h, int64_t w, double cr,
                      double cc, double r, double in, double out, uint64_t *bf, uint64_t *adf,
                      uint64_t *df) {
  for (int64_t p = 0; p < npos; p++) {
    uint64_t a = 0, b = 0, c = 0;
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w; x++) {
        double d2 = (y - cr) * (y - cr) + (x - cc) * (x - cc);
        uint64_t v = pix(f, t, p * h * w + y * w + x);
        if (d2 <= r * r) a += v;
        else c += v;
        if (d2 >= in * in && d2 < out * out) b += v;
      }
    bf[p] = a, adf[p] = b, df[p] = c;
  }
}

typedef struct geometry_case {
  const char *center; /* YAML or NULL */
  const char *radius, *inner, *outer, *units;
  double cr, cc, r, in, out; /* reference geometry in pixels (cr < -1e8: detector centre) */
} geometry_case;

/* The sweeps to run: the portable loops, the AVX2 one and its AVX-512
 * variant where the CPU has them. */
static int n_paths(void) {
  static int warned;
  sl_madd_allow_avx512(true);
  const bool avx512 = sl_madd_avx512_used();
  if (!sl_simd_supported(SL_SIMD_AVX2) && !warned++)
    print_message("no AVX2 on this CPU: the AVX2 sweep is not exercised\n");
  else if (!avx512 && !warned++)
    print_message("no AVX-512 BW/VNNI on this CPU: the AVX-512 sweep is not exercised\n");
  return sl_simd_supported(SL_SIMD_AVX2) ? avx512 ? 3 : 2 : 1;
}
static const char *const k_paths[3] = {"scalar", "avx2", "avx512"};

/* Param 'simd' of path i, with the AVX-512 switch set for it (before the
 * node's prepare, which lays out the band for the width that will run). */
static const char *use_path(int path) {
  sl_madd_allow_avx512(path == 2);
  return path == 0 ? "scalar" : "avx2";
}

static void check_case(const geometry_case *k, sl_dtype t, int64_t h, int64_t w) {
  const int64_t rows = 4, cols = 9, npos = rows * cols;
  double cr = k->cr < -1e8 ? (h - 1) / 2.0 : k->cr, cc = k->cr < -1e8 ? (w - 1) / 2.0 : k->cc;
  sl_tensor_desc in = frames_desc(t, rows, cols, h, w);
  sl_error e;
  void *f = random_frames(t, npos * h * w);
  uint64_t *want[6], *got[6], *vi[3];
  for (int q = 0; q < 6; q++) {
    want[q] = calloc((size_t)npos, 8);
    got[q] = calloc((size_t)npos, 8);
    if (q < 3) vi[q] = calloc((size_t)npos, 8);
  }
  reference(f, t, npos, h, w, cr, cc, k->r, k->in, k->out, want[0], want[1], want[2]);
  /* The moments outputs s, sr, sc: plain u64 loops. */
  for (int64_t p = 0; p < npos; p++)
    for (int64_t r = 0; r < h; r++)
      for (int64_t c = 0; c < w; c++) {
        uint64_t x = pix(f, t, p * h * w + r * w + c);
        want[3][p] += x, want[4][p] += (uint64_t)r * x, want[5][p] += (uint64_t)c * x;
      }
  /* The same through virtual_image, one kind at a time. */
  const char *kinds[3] = {"bf", "adf", "df"};
  for (int q = 0; q < 3; q++) {
    kv vo[6] = {{"kind", kinds[q]}, {"radius", k->radius}, {"inner", k->inner},
                {"outer", k->outer}, {"units", k->units}, {"center", k->center ? k->center : "[]"}};
    sl_node v;
    assert_int_equal(node_make(&v, &sl_node_virtual_image, vo, 6, &in, 1, &e), SL_OK);
    assert_int_equal(v.desc->prepare(&v, &e), SL_OK);
    sl_backend *b = backend(2);
    void *outs[1] = {vi[q]};
    assert_int_equal(run_stream(&v, b, f, NULL, 0, outs, npos, 5, &e), SL_OK);
    sl_cpu_backend_ops.destroy(b);
    node_free(&v);
  }
  int64_t chunks[3] = {1, 7, npos};
  for (int path = 0; path < n_paths(); path++) {
    kv o[6] = {{"radius", k->radius}, {"inner", k->inner},   {"outer", k->outer},
               {"units", k->units},   {"center", k->center ? k->center : "[]"},
               {"simd", use_path(path)}};
    sl_node n;
    sl_code rc = node_make(&n, &sl_node_virtual_detectors, o, 6, &in, 1, &e);
    if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    for (int q = 0; q < 3; q++) {
      assert_int_equal(n.out[q].dtype, SL_U64);
      assert_int_equal(n.out[q].stream_rank, 2);
      assert_int_equal(n.out[q].rank, 2);
    }
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    for (int th = 1; th <= 2; th++) {
      sl_backend *b = backend(th);
      /* mom 1: the moments outputs are read (a com wired to them), so the
       * node sweeps the moments and BF/ADF over the band only. */
      for (int c = 0; c < 6; c++) {
        const int mom = c >= 3;
        n.out_used = mom ? 0x3Fu : 0x07u;
        for (int q = 0; q < 6; q++) memset(got[q], 0xAB, (size_t)npos * 8);
        void *outs[6] = {got[0], got[1], got[2], got[3], got[4], got[5]};
        assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, chunks[c % 3], &e), SL_OK);
        for (int q = 3; q < 6 && mom; q++)
          for (int64_t p = 0; p < npos; p++) {
            if (got[q][p] != want[q][p])
              fprintf(stderr, "%s %lldx%lld simd %s moment %d pos %lld: %llu ref %llu\n",
                      sl_dtype_name(t), (long long)h, (long long)w, k_paths[path], q - 3, (long long)p,
                      (unsigned long long)got[q][p], (unsigned long long)want[q][p]);
            assert_true(got[q][p] == want[q][p]);
          }
        for (int q = 0; q < 3; q++)
          for (int64_t p = 0; p < npos; p++) {
            if (got[q][p] != want[q][p] || got[q][p] != vi[q][p])
              fprintf(stderr,
                      "%s %lldx%lld simd %s %s pos %lld: %llu ref %llu virtual_image %llu\n",
                      sl_dtype_name(t), (long long)h, (long long)w, k_paths[path], kinds[q],
                      (long long)p, (unsigned long long)got[q][p],
                      (unsigned long long)want[q][p], (unsigned long long)vi[q][p]);
            assert_true(got[q][p] == want[q][p]);
            assert_true(got[q][p] == vi[q][p]);
          }
      }
      sl_cpu_backend_ops.destroy(b);
    }
    node_free(&n);
  }
  for (int q = 0; q < 6; q++) free(want[q]), free(got[q]);
  for (int q = 0; q < 3; q++) free(vi[q]);
  free(f);
}

static void test_against_reference(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const geometry_case cases[] = {
      /* default centre, ADF 1..2 radii */
      {NULL, "7.5", "1", "2", "radii", -1e9, 0, 7.5, 7.5, 15},
      /* integer radius, pixel boundaries exactly on d = r */
      {"[18, 20]", "5", "1", "2", "radii", 18, 20, 5, 5, 10},
      /* fractional centre, ring overlapping the disk (inner < radius) */
      {"[17.25, 21.5]", "6", "3", "9.5", "pixels", 17.25, 21.5, 6, 3, 9.5},
      /* off-centre, clipped by the edge */
      {"[3, 38]", "4", "2", "5", "radii", 3, 38, 4, 8, 20},
      /* disk bigger than the detector: no DF */
      {NULL, "100", "1", "2", "radii", -1e9, 0, 100, 100, 200},
  };
  for (int ti = 0; ti < 3; ti++)
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_case(&cases[k], types[ti], 37, 41);
  /* Odd small detectors. */
  geometry_case tiny = {NULL, "1", "1", "2", "radii", -1e9, 0, 1, 1, 2};
  check_case(&tiny, SL_U16, 1, 1);
  check_case(&tiny, SL_U8, 3, 1);
  check_case(&tiny, SL_U32, 5, 7);
}

/* u16 frames of every width class of the AVX2 sweep (16, a partial last
 * vector, 192, 200, 1030), of its AVX-512 variant (16: only a masked vector;
 * 48: one full and a masked half; 64: whole vectors; 128, 160, 192 and 250:
 * rows of 4, 5 and 6 vectors, and of 7 and a masked one, dealt to its
 * three chains in threes with one or two left over, in the plain and the
 * band segments) and of the portable loops (15), against the plain loops
 * and virtual_image. Geometry: centred; a disc and ring clipped by the
 * top-left, top-right and bottom edges; a centre outside the frame; a ring
 * only in the last columns (the partial vector); nothing inside the frame
 * (no BF or ADF pixel: an empty band). */
static void test_u16_widths(void **st) {
  const int64_t sizes[][2] = {{13, 16}, {11, 17}, {9, 37}, {8, 48}, {6, 64}, {5, 128}, {4, 160},
                               {20, 192}, {7, 200}, {3, 250}, {6, 1030}, {5, 15}};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const int64_t h = sizes[si][0], w = sizes[si][1];
    char c_tl[64], c_tr[64], c_bot[64], c_out[64], c_last[64], c_none[64];
    snprintf(c_tl, sizeof c_tl, "[1, 2]");
    snprintf(c_tr, sizeof c_tr, "[0.5, %lld.5]", (long long)(w - 2));
    snprintf(c_bot, sizeof c_bot, "[%lld, %lld]", (long long)h, (long long)(w / 2));
    snprintf(c_out, sizeof c_out, "[-2, %lld]", (long long)(w + 3));
    snprintf(c_last, sizeof c_last, "[%lld, %lld]", (long long)(h / 2), (long long)(w - 1));
    snprintf(c_none, sizeof c_none, "[%lld, %lld]", (long long)(-h + 1), (long long)(-w + 1));
    const double r = (double)(w < h ? w : h) / 5 + 1;
    char rs[32];
    snprintf(rs, sizeof rs, "%g", r);
    const geometry_case cases[] = {
        {NULL, rs, "1", "2", "radii", -1e9, 0, r, r, 2 * r},
        {c_tl, "3", "0.5", "3", "radii", 1, 2, 3, 1.5, 9},
        {c_tr, "2.5", "1", "7", "pixels", 0.5, (double)(w - 2) + 0.5, 2.5, 1, 7},
        {c_bot, "4", "1", "2", "radii", (double)h, (double)(w / 2), 4, 4, 8},
        {c_out, "5", "1", "2", "radii", -2, (double)(w + 3), 5, 5, 10},
        {c_last, "0.8", "1", "2.5", "pixels", (double)(h / 2), (double)(w - 1), 0.8, 1, 2.5},
        {c_none, "1", "1", "2", "radii", (double)(-h + 1), (double)(-w + 1), 1, 1, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_case(&cases[k], SL_U16, h, w);
  }
}

/* All-0 and all-65535 u16 frames: the most negative and most positive biased
 * sums, BF and the ring over the whole frame so that every accumulator is at
 * its bound; 600 x 1030 needs a spill after 504 rows (the bound of
 * 32767 vector madds per int32 lane), and its moments take frame_moments.c's
 * sweep; 300 x 720 is the widest frame whose moments the AVX2 sweep adds
 * itself (a row's 45 Sc madds at weights up to 719 fill an int32 lane to
 * 45 of its 45.6). */
static void test_u16_extremes(void **st) {
  const int64_t sizes[][2] = {{600, 1030}, {40, 192}, {300, 720}};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    const int64_t h = sizes[si][0], w = sizes[si][1], npos = 3;
    int64_t d[3] = {npos, h, w};
    sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
    uint16_t *f = malloc((size_t)(npos * h * w) * 2);
    for (int64_t p = 0; p < npos; p++)
      for (int64_t i = 0; i < h * w; i++)
        f[p * h * w + i] = p == 0 ? 0 : p == 1 ? 0xFFFF : (i / w + i) % 2 ? 0xFFFF : 0;
    for (int geo = 0; geo < 2; geo++) {
      /* the whole frame in BF and in the ring; or a small disc in the middle */
      kv o[] = {{"radius", geo ? "5" : "5000"}, {"inner", "0"}, {"outer", geo ? "2" : "3"},
                {"simd", ""}};
      double rad = geo ? 5 : 5000, cr = (double)(h - 1) / 2, cc = (double)(w - 1) / 2;
      uint64_t want[6][3] = {{0}};
      reference(f, SL_U16, npos, h, w, cr, cc, rad, 0, (geo ? 2 : 3) * rad, want[0], want[1],
                want[2]);
      for (int64_t p = 0; p < npos; p++) /* S, Sr, Sc: plain u64 loops */
        for (int64_t i = 0; i < h * w; i++) {
          uint64_t x = f[p * h * w + i];
          want[3][p] += x, want[4][p] += (uint64_t)(i / w) * x, want[5][p] += (uint64_t)(i % w) * x;
        }
      for (int path = 0; path < n_paths(); path++) {
        o[3].yaml = use_path(path);
        sl_node n;
        sl_error e;
        assert_int_equal(node_make(&n, &sl_node_virtual_detectors, o, 4, &in, 1, &e), SL_OK);
        assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
        uint64_t got[6][3];
        void *outs[6] = {got[0], got[1], got[2], got[3], got[4], got[5]};
        sl_backend *b = backend(2);
        for (int mom = 0; mom < 2; mom++) { /* mom: moments read, BF/ADF over the band only */
          n.out_used = mom ? 0x3Fu : 0x07u;
          assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 1, &e), SL_OK);
          for (int q = 0; q < 3; q++)
            for (int p = 0; p < npos; p++) {
              if (got[q][p] != want[q][p])
                fprintf(stderr, "%lldx%lld simd %s moments %d out %d frame %d: %llu != %llu\n",
                        (long long)h, (long long)w, k_paths[path], mom, q, p,
                        (unsigned long long)got[q][p], (unsigned long long)want[q][p]);
              assert_true(got[q][p] == want[q][p]);
              if (mom) assert_true(got[3][p] == want[0][p] + want[2][p]); /* S = BF + DF */
            }
          for (int q = 3; q < 6 && mom; q++)
            for (int p = 0; p < npos; p++) assert_true(got[q][p] == want[q][p]);
        }
        sl_cpu_backend_ops.destroy(b);
        node_free(&n);
      }
    }
    free(f);
  }
}

/* Runs longer than 65536 pixels (cut in the u32 sums) and every pixel at the
 * max: 300 x 300 u16 and u8 frames, and u32 beyond 2^32. */
static void test_long_runs(void **st) {
  const int64_t h = 300, w = 300, npos = 3;
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++) {
    sl_dtype t = types[ti];
    void *f = malloc((size_t)(npos * h * w) * sl_dtype_size(t));
    for (int64_t i = 0; i < npos * h * w; i++) set_pix(f, t, i, dmax(t));
    int64_t d[3] = {npos, h, w};
    sl_tensor_desc in = sl_desc_make(t, 3, d, 1);
    kv o[] = {{"radius", "10"}, {"center", "[20, 20]"}};
    sl_node n;
    sl_error e;
    assert_int_equal(node_make(&n, &sl_node_virtual_detectors, o, 2, &in, 1, &e), SL_OK);
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    uint64_t want[3][3], got[6][3];
    reference(f, t, npos, h, w, 20, 20, 10, 10, 20, want[0], want[1], want[2]);
    void *outs[6] = {got[0], got[1], got[2], got[3], got[4], got[5]};
    sl_backend *b = backend(2);
    assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 2, &e), SL_OK);
    for (int q = 0; q < 3; q++)
      for (int p = 0; p < npos; p++) assert_true(got[q][p] == want[q][p]);
    assert_true(got[0][0] + got[2][0] == dmax(t) * (uint64_t)(h * w));
    sl_cpu_backend_ops.destroy(b);
    node_free(&n);
    free(f);
  }
}

/* The disk input gives the same images as the same geometry in params. */
static void test_disk_input(void **st) {
  const int64_t rows = 3, cols = 5, npos = rows * cols, h = 33, w = 29;
  void *f = random_frames(SL_U16, npos * h * w);
  sl_tensor_desc in[2];
  in[0] = frames_desc(SL_U16, rows, cols, h, w);
  int64_t dd[1] = {4};
  in[1] = sl_desc_make(SL_F64, 1, dd, 0);
  const double disk[4] = {15.3, 12.7, 6.4, 0.05};
  kv po[] = {{"radius", "6.4"}, {"center", "[15.3, 12.7]"}, {"inner", "1.2"}, {"outer", "2.5"}};
  kv dn[] = {{"inner", "1.2"}, {"outer", "2.5"}};
  sl_node a, b2;
  sl_error e;
  assert_int_equal(node_make(&a, &sl_node_virtual_detectors, po, 4, in, 1, &e), SL_OK);
  assert_int_equal(node_make(&b2, &sl_node_virtual_detectors, dn, 2, in, 2, &e), SL_OK);
  assert_int_equal(a.desc->prepare(&a, &e), SL_OK);
  assert_int_equal(b2.desc->prepare(&b2, &e), SL_OK);
  uint64_t x[6][15], y[6][15];
  void *ox[6] = {x[0], x[1], x[2], x[3], x[4], x[5]}, *oy[6] = {y[0], y[1], y[2], y[3], y[4], y[5]};
  const void *whole[1] = {disk};
  sl_backend *b = backend(2);
  assert_int_equal(run_stream(&a, b, f, NULL, 0, ox, npos, 4, &e), SL_OK);
  assert_int_equal(run_stream(&b2, b, f, whole, 1, oy, npos, 4, &e), SL_OK);
  assert_memory_equal(x, y, 3 * sizeof x[0]); /* bf, adf, df (s, sr, sc are not read) */
  /* A second run with a different disk rebuilds the runs. */
  const double disk2[4] = {10, 10, 3, 0};
  const void *whole2[1] = {disk2};
  assert_int_equal(run_stream(&b2, b, f, whole2, 1, oy, npos, 4, &e), SL_OK);
  uint64_t ref[3][15];
  reference(f, SL_U16, npos, h, w, 10, 10, 3, 3.6, 7.5, ref[0], ref[1], ref[2]);
  assert_memory_equal(ref, y, sizeof ref);
  /* Bad disk values at run time. */
  const double bad[4] = {10, 10, 0, 0};
  const void *whole3[1] = {bad};
  assert_int_equal(run_stream(&b2, b, f, whole3, 1, oy, npos, 4, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "radius"));
  const double far[4] = {1e6, 10, 3, 0};
  const void *whole4[1] = {far};
  assert_int_equal(run_stream(&b2, b, f, whole4, 1, oy, npos, 4, &e), SL_ERR_FORMAT);
  sl_cpu_backend_ops.destroy(b);
  assert_true(b2.n_notes >= 1 && strstr(b2.notes[0], "disk"));
  node_free(&a);
  node_free(&b2);
  free(f);
}

static void test_invalid(void **st) {
  int64_t d[4] = {3, 4, 16, 16};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  const param_refusal cases[] = {
      {{{"radius", "0"}}, 1, "'radius'"},
      {{{"radius", "-1"}}, 1, "'radius'"},
      {{{"radius", ".nan"}}, 1, "'radius'"},
      {{{"radius", "3"}, {"outer", "1"}}, 2, "'outer'"},
      {{{"radius", "3"}, {"inner", "-1"}}, 2, "'inner'"},
      {{{"radius", "3"}, {"units", "mm"}}, 2, "'units'"},
      {{{"radius", "3"}, {"center", "[1, 2, 3]"}}, 2, "'center'"},
      {{{"radius", "3"}, {"center", "[1, x]"}}, 2, "'center'"},
      {{{"radius", "3"}, {"center", "[1, 1e9]"}}, 2, "'center'"},
  };
  expect_param_refusals(&sl_node_virtual_detectors, &in, 1, cases, SL_COUNT_OF(cases));
  /* Wrong frames and wrong disk ports. */
  sl_tensor_desc bad[2] = {sl_desc_make(SL_F32, 4, d, 2), in};
  kv o[] = {{"radius", "3"}};
  sl_node n;
  sl_error e;
  expect_node_error(&sl_node_virtual_detectors, o, 1, bad, 1, SL_ERR_PIPELINE, "input 'frames'",
                    NULL);
  int64_t d3[1] = {3};
  sl_tensor_desc withdisk[2] = {in, sl_desc_make(SL_F64, 1, d3, 0)};
  expect_node_error(&sl_node_virtual_detectors, o, 1, withdisk, 2, SL_ERR_PIPELINE, "input 'disk'",
                    NULL);
  /* With a disk, radius may stay unset. */
  int64_t d4[1] = {4};
  withdisk[1] = sl_desc_make(SL_F64, 1, d4, 0);
  assert_int_equal(node_make(&n, &sl_node_virtual_detectors, NULL, 0, withdisk, 2, &e), SL_OK);
  node_free(&n);
}

/* Throughput on a 256x256 u16 detector (printed, not asserted). */
static void test_speed(void **st) {
  const int64_t h = 256, w = 256, npos = 256;
  uint16_t *f = malloc((size_t)(npos * h * w) * 2);
  for (int64_t i = 0; i < npos * h * w; i++) f[i] = (uint16_t)(rnd() & 0x3FF);
  int64_t d[3] = {npos, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  kv o[] = {{"radius", "40"}};
  sl_node n;
  sl_error e;
  assert_int_equal(node_make(&n, &sl_node_virtual_detectors, o, 1, &in, 1, &e), SL_OK);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  uint64_t *o3 = malloc((size_t)npos * 48);
  void *outs[6] = {o3, o3 + npos, o3 + 2 * npos, o3 + 3 * npos, o3 + 4 * npos, o3 + 5 * npos};
  sl_backend *b = backend(1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int rep = 0; rep < 4; rep++)
    assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, npos, &e), SL_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  fprintf(stderr, "virtual_detectors: %.2f GB/s on 1 thread (256x256 u16)\n",
          4.0 * (double)(npos * h * w * 2) / s / 1e9);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(o3);
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_reference), cmocka_unit_test(test_u16_widths),
      cmocka_unit_test(test_u16_extremes),      cmocka_unit_test(test_long_runs),
      cmocka_unit_test(test_disk_input),        cmocka_unit_test(test_invalid),
      cmocka_unit_test(test_speed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
