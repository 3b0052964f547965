/* bf_segments: the segment sums and offsets against a brute-force reference
 * written here from the rule documented in docs/nodes/bf_segments.md (each
 * pixel's cell from its offset in units of the grid's half side, the kept
 * cells by integer arithmetic; the layout header is not used); u8/u16/u32,
 * odd detectors, off-centre and edge-clipped disks, grids 1, 5, 7 and 15,
 * extents 0.9, 0.5 and 1, params and the `disk` input, a 2-D scan in chunks
 * that do not divide it, 1 and 2 threads; segment counts and a small case
 * counted by hand; param validation; the cost; and a pipeline run through
 * the engine (disk_fit feeding the disk) on the CPU and, where there is a
 * device, on CUDA, also with one output of each node unread (no buffer). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nodes/common/madd_u16.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/run_support.h"
#include "tests/unit/stem_test_data.h"
#include "tests/unit/test_support.h"

extern const sl_node_desc sl_node_bf_segments;

/* ---- the reference ----------------------------------------------------------------- */

/* A disk and a layout: centre and radius in pixels, grid cells a side,
 * extent in disk radii. */
typedef struct ref_geom {
  double cr, cc, radius, extent;
  int grid;
} ref_geom;

/* The segment number of each cell (row-major over the kept cells), -1 for
 * a cell not kept; returns the count. Cell (i, j)'s centre is at
 * ((2i + 1 - grid) / grid, (2j + 1 - grid) / grid) half sides, so it is
 * kept when (2i + 1 - grid)^2 + (2j + 1 - grid)^2 <= grid^2: integers, no
 * rounding. */
static int ref_cells(int grid, int *id) {
  int count = 0;
  for (int i = 0; i < grid; i++)
    for (int j = 0; j < grid; j++) {
      int a = 2 * i + 1 - grid, b = 2 * j + 1 - grid;
      id[i * grid + j] = a * a + b * b <= grid * grid ? count++ : -1;
    }
  return count;
}

/* Whether x lies within 1e-9 of an integer boundary strictly inside (0, n). */
static bool near_inner_boundary(double x, int n) {
  double k = round(x);
  return k > 0 && k < n && fabs(x - k) < 1e-9;
}

/* The segment of pixel (r, c), or -1. In units of the half side s = extent
 * * radius: u = (r - cr) / s, v = (c - cc) / s; the pixel is in when
 * u^2 + v^2 <= 1, in cell (floor((u + 1) grid / 2), floor((v + 1) grid / 2))
 * (the far edge in the last cell). *tie is set when the pixel lies within
 * 1e-9 of the circle or of a cell boundary, where the node's own rounding
 * may decide the other way: the cases are chosen to have none. */
static int ref_segment(const ref_geom *g, const int *id, int64_t r, int64_t c, bool *tie) {
  const double s = g->extent * g->radius;
  const double u = ((double)r - g->cr) / s, v = ((double)c - g->cc) / s;
  const double q = u * u + v * v;
  if (fabs(q - 1) < 1e-9) *tie = true;
  if (q > 1) return -1;
  const double x = (u + 1) * g->grid / 2, y = (v + 1) * g->grid / 2;
  if (near_inner_boundary(x, g->grid) || near_inner_boundary(y, g->grid)) *tie = true;
  int i = (int)floor(x), j = (int)floor(y);
  if (i > g->grid - 1) i = g->grid - 1;
  if (j > g->grid - 1) j = g->grid - 1;
  if (i < 0) i = 0;
  if (j < 0) j = 0;
  return id[i * g->grid + j];
}

/* seg[k * npos + p] = frame p's sum over segment k; off[3k..3k+2] = the
 * mean of (r - cr) / radius and (c - cc) / radius over segment k's pixels
 * and their count (0, 0, 0 when none). Returns the count. */
static int reference(const void *frames, sl_dtype t, int64_t npos, int64_t h, int64_t w,
                     const ref_geom *g, uint64_t *seg, double *off) {
  int id[15 * 15];
  const int count = ref_cells(g->grid, id);
  int *map = malloc((size_t)(h * w) * sizeof *map);
  bool tie = false;
  for (int k = 0; k < 3 * count; k++) off[k] = 0;
  for (int64_t r = 0; r < h; r++)
    for (int64_t c = 0; c < w; c++) {
      int k = map[r * w + c] = ref_segment(g, id, r, c, &tie);
      if (k < 0) continue;
      off[3 * k] += ((double)r - g->cr) / g->radius;
      off[3 * k + 1] += ((double)c - g->cc) / g->radius;
      off[3 * k + 2] += 1;
    }
  if (tie) fprintf(stderr, "reference: a pixel on a boundary; choose another case\n");
  assert_false(tie);
  for (int k = 0; k < count; k++)
    if (off[3 * k + 2] > 0) off[3 * k] /= off[3 * k + 2], off[3 * k + 1] /= off[3 * k + 2];
  memset(seg, 0, (size_t)(count * npos) * 8);
  for (int64_t p = 0; p < npos; p++)
    for (int64_t i = 0; i < h * w; i++)
      if (map[i] >= 0) seg[map[i] * npos + p] += pix(frames, t, p * h * w + i);
  free(map);
  return count;
}

/* got == want: the sums exactly, the offsets within 1e-12, the counts exactly. */
static void expect_outputs(const uint64_t *seg, const double *off, const uint64_t *want_seg,
                           const double *want_off, int count, int64_t npos, const char *what) {
  for (int64_t i = 0; i < count * npos; i++)
    if (seg[i] != want_seg[i]) {
      fprintf(stderr, "%s: segment %lld position %lld: got %llu want %llu\n", what,
              (long long)(i / npos), (long long)(i % npos), (unsigned long long)seg[i],
              (unsigned long long)want_seg[i]);
      fail();
    }
  for (int k = 0; k < count; k++) {
    if (fabs(off[3 * k] - want_off[3 * k]) > 1e-12 || fabs(off[3 * k + 1] - want_off[3 * k + 1]) > 1e-12 ||
        off[3 * k + 2] != want_off[3 * k + 2]) {
      fprintf(stderr, "%s: offsets of segment %d: got (%.17g, %.17g, %g) want (%.17g, %.17g, %g)\n", what,
              k, off[3 * k], off[3 * k + 1], off[3 * k + 2], want_off[3 * k], want_off[3 * k + 1],
              want_off[3 * k + 2]);
      fail();
    }
  }
}

/* ---- running the node ---------------------------------------------------------------- */


/* A bf_segments node on frames `in` (and a whole f64 [4] disk when
 * with_disk); runs infer. */
static sl_code seg_make(sl_node *n, const kv *over, int n_over, const sl_tensor_desc *in,
                        bool with_disk, sl_error *e) {
  int64_t dd[1] = {4};
  sl_tensor_desc ins[2] = {*in, sl_desc_make(SL_F64, 1, dd, 0)};
  sl_code rc = node_make(n, &sl_node_bf_segments, over, n_over, ins, with_disk ? 2 : 1, e);
  n->out_used = 3u; /* both outputs read, as in a graph that uses them */
  return rc;
}

/* One case: frames of `t` on a rows x cols scan of h x w; the node with
 * params `over` (and the `disk` input when disk is not NULL) against the
 * reference of `g`, in chunks of 1, 8 and all positions on 1 and 2
 * threads. Returns the segment count. */
static int check_case(const kv *over, int n_over, const double *disk, sl_dtype t, int64_t rows,
                      int64_t cols, int64_t h, int64_t w, const ref_geom *g) {
  const int64_t npos = rows * cols;
  int64_t d[4] = {rows, cols, h, w};
  sl_tensor_desc in = sl_desc_make(t, 4, d, 2);
  sl_node n;
  sl_error e;
  sl_code rc = seg_make(&n, over, n_over, &in, disk != NULL, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  const int64_t count = n.out[0].dims[0];
  /* segments: whole u64 [n, rows, cols]; offsets: whole f64 [n, 3] */
  assert_int_equal(n.out[0].dtype, SL_U64);
  assert_int_equal(n.out[0].stream_rank, 0);
  assert_int_equal(n.out[0].rank, 3);
  assert_int_equal(n.out[0].dims[1], rows);
  assert_int_equal(n.out[0].dims[2], cols);
  assert_int_equal(n.out[1].dtype, SL_F64);
  assert_int_equal(n.out[1].stream_rank, 0);
  assert_int_equal(n.out[1].rank, 2);
  assert_int_equal(n.out[1].dims[0], count);
  assert_int_equal(n.out[1].dims[1], 3);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  void *frames = random_frames(t, npos * h * w);
  uint64_t *want = malloc((size_t)(count * npos) * 8), *got = malloc((size_t)(count * npos) * 8);
  double *want_off = malloc((size_t)count * 24), *got_off = malloc((size_t)count * 24);
  assert_int_equal(reference(frames, t, npos, h, w, g, want, want_off), count);
  int64_t pixels = 0;
  for (int k = 0; k < count; k++) pixels += (int64_t)want_off[3 * k + 2];
  assert_true(pixels > 0); /* the case selects something */
  const int64_t chunks[3] = {1, 8, npos};
  const void *whole[1] = {disk};
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    for (int c = 0; c < 3; c++) {
      memset(got, 0xAB, (size_t)(count * npos) * 8);
      memset(got_off, 0xAB, (size_t)count * 24);
      void *outs[2] = {got, got_off};
      rc = run_stream(&n, b, frames, whole, 1, outs, npos, chunks[c], &e);
      if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
      assert_int_equal(rc, SL_OK);
      char what[64];
      snprintf(what, sizeof what, "chunk %lld, %d threads", (long long)chunks[c], th);
      expect_outputs(got, got_off, want, want_off, (int)count, npos, what);
    }
    sl_cpu_backend_ops.destroy(b);
  }
  free(frames);
  free(want), free(got), free(want_off), free(got_off);
  node_free(&n);
  return (int)count;
}

/* ---- tests: sums and offsets --------------------------------------------------------- */

static void test_params_geometry(void **st) {
  (void)st;
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++) {
    const sl_dtype t = types[ti];
    /* grid 5, extent 0.9, the default centre of an odd detector */
    {
      kv o[] = {{"radius", "9.3"}};
      ref_geom g = {14, 15, 9.3, 0.9, 5};
      assert_int_equal(check_case(o, 1, NULL, t, 5, 7, 29, 31, &g), 21);
    }
    /* grid 7, extent 0.5, a centre off the detector centre */
    {
      kv o[] = {{"radius", "10.2"}, {"center", "[8.4, 17.7]"}, {"grid", "7"}, {"extent", "0.5"}};
      ref_geom g = {8.4, 17.7, 10.2, 0.5, 7};
      assert_int_equal(check_case(o, 4, NULL, t, 5, 7, 25, 31, &g), 37);
    }
    /* grid 5 clipped by the detector's top and right edges: the top row of
     * cells has no pixel (offsets 0, 0, 0) */
    {
      kv o[] = {{"radius", "8.7"}, {"center", "[2.3, 26.6]"}};
      ref_geom g = {2.3, 26.6, 8.7, 0.9, 5};
      check_case(o, 2, NULL, t, 5, 7, 23, 29, &g);
    }
    /* grid 1: one segment, the whole circle */
    {
      kv o[] = {{"radius", "6.55"}, {"grid", "1"}, {"center", "[11.2, 9.6]"}};
      ref_geom g = {11.2, 9.6, 6.55, 0.9, 1};
      assert_int_equal(check_case(o, 3, NULL, t, 3, 4, 21, 19, &g), 1);
    }
  }
  /* grid 15, extent 1, a large disk on an even detector */
  kv o[] = {{"radius", "17.35"}, {"grid", "15"}, {"extent", "1"}, {"center", "[19.1, 20.45]"}};
  ref_geom g = {19.1, 20.45, 17.35, 1, 15};
  check_case(o, 4, NULL, SL_U16, 2, 3, 40, 42, &g);
}

/* u16 frames wide enough for the kernel's vector paths (boxes of one to
 * eight vectors of 16 columns, one to four of 32 on AVX-512, a box at the
 * right edge whose vectors start left of it, a box at the left edge), and a
 * box wider than eight vectors (the scalar path), against the same
 * reference; with the AVX-512 path where the CPU has it, and without. */
static void test_wide_frames(void **st) {
  (void)st;
  const struct {
    const char *radius, *center, *grid, *extent;
    double cr, cc, r, ext;
    int g;
    int64_t h, w;
  } k[] = {
      {"6.8", "[20.4, 30.1]", "3", "0.9", 20.4, 30.1, 6.8, 0.9, 3, 40, 48},      /* 1 vector */
      {"9.6", "[40.2, 50.7]", "5", "0.9", 40.2, 50.7, 9.6, 0.9, 5, 83, 96},      /* 2 */
      {"20.3", "[44.5, 47.25]", "5", "0.9", 44.5, 47.25, 20.3, 0.9, 5, 90, 100}, /* 3 */
      {"18.4", "[35.1, 63.4]", "7", "0.9", 35.1, 63.4, 18.4, 0.9, 7, 71, 70},    /* right edge */
      {"17.9", "[30.6, 3.2]", "5", "1", 30.6, 3.2, 17.9, 1, 5, 64, 72},          /* left edge */
      {"40.7", "[50.3, 52.8]", "9", "1", 50.3, 52.8, 40.7, 1, 9, 104, 110},      /* 6 */
      {"58.2", "[62.5, 66.1]", "15", "1", 62.5, 66.1, 58.2, 1, 15, 126, 134},    /* 8 */
      {"70.4", "[72.2, 80.5]", "5", "1", 72.2, 80.5, 70.4, 1, 5, 146, 162},      /* 9: scalar */
  };
  for (int avx512 = 0; avx512 < 2; avx512++) {
    sl_madd_allow_avx512(avx512 == 1);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
      kv o[] = {{"radius", k[i].radius}, {"center", k[i].center}, {"grid", k[i].grid},
                {"extent", k[i].extent}};
      ref_geom g = {k[i].cr, k[i].cc, k[i].r, k[i].ext, k[i].g};
      check_case(o, 4, NULL, SL_U16, 2, 3, k[i].h, k[i].w, &g);
    }
  }
  sl_madd_allow_avx512(true);
}

/* The edge-clipped case's empty segments are really there (and 0, 0, 0). */
static void test_clipped_segments_empty(void **st) {
  (void)st;
  int64_t d[4] = {1, 1, 23, 29};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  kv o[] = {{"radius", "8.7"}, {"center", "[2.3, 26.6]"}};
  sl_node n;
  sl_error e;
  assert_int_equal(seg_make(&n, o, 2, &in, false, &e), SL_OK);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  uint16_t *f = calloc(23 * 29, 2);
  uint64_t seg[21];
  double off[63];
  void *outs[2] = {seg, off};
  sl_backend *b = backend(1);
  assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, 1, 1, &e), SL_OK);
  int empty = 0;
  for (int k = 0; k < 21; k++)
    if (off[3 * k + 2] == 0) {
      empty++;
      assert_true(off[3 * k] == 0 && off[3 * k + 1] == 0);
    }
  assert_true(empty >= 3); /* the top row of cells (i = 0: 3 segments) at least */
  sl_cpu_backend_ops.destroy(b);
  free(f);
  node_free(&n);
}

/* Counted by hand: a 5 x 5 detector of ones, centre (2, 2), radius 2,
 * extent 1. Grid 1 holds the 13 pixels with d2 <= 4 (offsets 0, 0 by
 * symmetry). Grid 3 keeps all 9 cells (a corner's centre is at
 * (2/3, 2/3) half sides, within the circle); its boundaries lie at +-2/3
 * pixels from the centre, so the middle cell holds the centre pixel, each
 * edge cell the two pixels on its axis at 1 and 2 pixels (mean 1.5 pixels,
 * 0.75 radii) and each corner cell one pixel at (+-1, +-1) (0.5 radii). */
static void test_small_by_hand(void **st) {
  (void)st;
  int64_t d[3] = {2, 5, 5};
  sl_tensor_desc in = sl_desc_make(SL_U8, 3, d, 1);
  uint8_t f[50];
  memset(f, 1, sizeof f);
  f[25 + 12] = 255; /* the flag value at frame 1's centre: summed as stored */
  sl_backend *b = backend(2);
  {
    kv o[] = {{"radius", "2"}, {"grid", "1"}, {"extent", "1"}};
    sl_node n;
    sl_error e;
    assert_int_equal(seg_make(&n, o, 3, &in, false, &e), SL_OK);
    assert_int_equal(n.out[0].dims[0], 1);
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    uint64_t seg[2];
    double off[3];
    void *outs[2] = {seg, off};
    assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, 2, 1, &e), SL_OK);
    assert_true(seg[0] == 13 && seg[1] == 13 + 254);
    assert_true(off[0] == 0 && off[1] == 0 && off[2] == 13);
    node_free(&n);
  }
  {
    kv o[] = {{"radius", "2"}, {"grid", "3"}, {"extent", "1"}};
    sl_node n;
    sl_error e;
    assert_int_equal(seg_make(&n, o, 3, &in, false, &e), SL_OK);
    assert_int_equal(n.out[0].dims[0], 9);
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    uint64_t seg[18];
    double off[27];
    void *outs[2] = {seg, off};
    assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, 2, 2, &e), SL_OK);
    /* row-major cells: TL, top, TR, left, middle, right, BL, bottom, BR */
    const uint64_t want[9] = {1, 2, 1, 2, 1, 2, 1, 2, 1};
    const double rows[9] = {-0.5, -0.75, -0.5, 0, 0, 0, 0.5, 0.75, 0.5};
    const double cols[9] = {-0.5, 0, 0.5, -0.75, 0, 0.75, -0.5, 0, 0.5};
    for (int k = 0; k < 9; k++) {
      assert_true(seg[2 * k] == want[k]);
      assert_true(seg[2 * k + 1] == want[k] + (k == 4 ? 254 : 0));
      assert_true(off[3 * k] == rows[k] && off[3 * k + 1] == cols[k] && off[3 * k + 2] == (double)want[k]);
    }
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
}

/* The disk input replaces the params (which are ignored), on a 2-D scan in
 * chunks; bad disk values fail the kernel with SL_ERR_FORMAT. */
static void test_disk_input(void **st) {
  (void)st;
  const double disk[4] = {12.35, 14.8, 9.15, 0.05};
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++) {
    kv o[] = {{"grid", "5"}, {"extent", "0.9"}, {"radius", "3"}, {"center", "[1, 1]"}};
    ref_geom g = {12.35, 14.8, 9.15, 0.9, 5};
    check_case(o, 4, disk, types[ti], 5, 7, 27, 29, &g);
    kv o2[] = {{"grid", "7"}, {"extent", "0.5"}};
    ref_geom g2 = {12.35, 14.8, 9.15, 0.5, 7};
    check_case(o2, 2, disk, types[ti], 4, 5, 27, 29, &g2);
  }
  /* the note, and no radius needed */
  int64_t d[4] = {2, 3, 27, 29};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  sl_node n;
  sl_error e;
  assert_int_equal(seg_make(&n, NULL, 0, &in, true, &e), SL_OK);
  assert_non_null(note(&n, "geometry"));
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  uint16_t *f = calloc(6 * 27 * 29, 2);
  uint64_t seg[21 * 6];
  double off[63];
  void *outs[2] = {seg, off};
  sl_backend *b = backend(1);
  const double bad[4][4] = {{10, 10, -1, 0}, {10, NAN, 5, 0}, {1e9, 3, 5, 0}};
  const char *needles[3] = {"radius", "finite", "far outside"};
  for (int k = 0; k < 3; k++) {
    const void *whole[1] = {bad[k]};
    expect_failed(run_stream(&n, b, f, whole, 1, outs, 6, 4, &e), &e, SL_ERR_FORMAT, "input 'disk'",
                  needles[k]);
  }
  /* the same node then runs with a good disk */
  const void *whole[1] = {disk};
  assert_int_equal(run_stream(&n, b, f, whole, 1, outs, 6, 4, &e), SL_OK);
  sl_cpu_backend_ops.destroy(b);
  free(f);
  node_free(&n);
  /* a disk of the wrong shape */
  int64_t d3[1] = {3};
  sl_tensor_desc ins[2] = {in, sl_desc_make(SL_F64, 1, d3, 0)};
  expect_node_error(&sl_node_bf_segments, NULL, 0, ins, 2, SL_ERR_PIPELINE, "input 'disk'", NULL);
}

/* ---- validation and cost ------------------------------------------------------------------ */

static void test_invalid_params(void **st) {
  (void)st;
  int64_t d[4] = {3, 4, 16, 16};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  const param_refusal cases[] = {
      {{{"radius", "3"}, {"grid", "0"}}, 2, "'grid'"},
      {{{"radius", "3"}, {"grid", "16"}}, 2, "'grid'"},
      {{{"radius", "3"}, {"grid", "-2"}}, 2, "'grid'"},
      {{{"radius", "3"}, {"extent", "0"}}, 2, "'extent'"},
      {{{"radius", "3"}, {"extent", "1.5"}}, 2, "'extent'"},
      {{{"radius", "3"}, {"extent", "-0.5"}}, 2, "'extent'"},
      {{{"radius", "3"}, {"extent", ".nan"}}, 2, "'extent'"},
      {{{"radius", "0"}}, 1, "'radius'"},
      {{{"grid", "5"}}, 1, "'radius'"}, /* the default radius 0, no disk */
      {{{"radius", "-2"}}, 1, "'radius'"},
      {{{"radius", ".nan"}}, 1, "'radius'"},
      {{{"radius", "3"}, {"center", "[1, 2, 3]"}}, 2, "'center'"},
      {{{"radius", "3"}, {"center", "[1, 1e9]"}}, 2, "'center'"},
  };
  expect_param_refusals(&sl_node_bf_segments, &in, 1, cases, SL_COUNT_OF(cases));
  /* grid and extent are checked with the disk input too; radius is not needed */
  int64_t dd[1] = {4};
  sl_tensor_desc ins[2] = {in, sl_desc_make(SL_F64, 1, dd, 0)};
  kv g0[] = {{"grid", "0"}}, e0[] = {{"extent", "0"}};
  expect_node_error(&sl_node_bf_segments, g0, 1, ins, 2, SL_ERR_PIPELINE, "'grid'", NULL);
  expect_node_error(&sl_node_bf_segments, e0, 1, ins, 2, SL_ERR_PIPELINE, "'extent'", NULL);
  /* frames of the wrong kind */
  int64_t d3[3] = {3, 16, 16};
  sl_tensor_desc bad[] = {sl_desc_make(SL_F32, 4, d, 2), sl_desc_make(SL_U16, 2, d3, 1),
                          sl_desc_make(SL_U16, 2, d + 2, 0)};
  kv o[] = {{"radius", "3"}};
  for (size_t k = 0; k < SL_COUNT_OF(bad); k++)
    expect_node_error(&sl_node_bf_segments, o, 1, &bad[k], 1, SL_ERR_PIPELINE, "input 'frames'", NULL);
}

/* The cost reads the disk's bounding box, not the frame; ops are the pixels
 * in segments (once prepared); 8 bytes a segment and position are written. */
static void test_cost(void **st) {
  (void)st;
  int64_t d[4] = {3, 4, 64, 64};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  kv o[] = {{"radius", "10"}};
  sl_node n;
  sl_error e;
  assert_int_equal(seg_make(&n, o, 1, &in, false, &e), SL_OK);
  sl_node_cost c;
  n.desc->cost(&n, 10, &c);
  /* the window of the circle of 9 pixels: at most 2 * 9 + 4 rows and cols */
  assert_true(c.bytes_read > 0 && c.bytes_read <= 10 * 22 * 22 * 2);
  assert_true(c.bytes_written == 10 * 21 * 8);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  n.desc->cost(&n, 10, &c);
  /* the bounding box of the pixels within 9 of (31.5, 31.5): rows 23..40 */
  assert_true(c.bytes_read == 10 * 18 * 18 * 2);
  uint8_t *zero = calloc(64 * 64, 1);
  uint64_t sums[21];
  double off[63];
  ref_geom g = {31.5, 31.5, 10, 0.9, 5};
  reference(zero, SL_U8, 1, 64, 64, &g, sums, off);
  int64_t px = 0;
  for (int k = 0; k < 21; k++) px += (int64_t)off[3 * k + 2];
  assert_true(c.ops == 10 * px);
  free(zero);
#ifdef SLUICE_HAVE_CUDA
  assert_true(c.device_state_bytes >= 64 * 64);
#endif
  node_free(&n);
  /* with the disk input, before the disk is known: a disk of a sixth of
   * the side (radius 64 / 6, extent 0.9: the window of rows and columns
   * floor(31.5 - 9.6) - 1 = 20 up to ceil(31.5 + 9.6) + 2 = 44, 24 of each) */
  int64_t dd[1] = {4};
  sl_tensor_desc ins[2] = {in, sl_desc_make(SL_F64, 1, dd, 0)};
  assert_int_equal(node_make(&n, &sl_node_bf_segments, NULL, 0, ins, 2, &e), SL_OK);
  n.out_used = 3u;
  n.desc->cost(&n, 10, &c);
  assert_true(c.bytes_read == 10 * 24 * 24 * 2);
  assert_true(c.ops > 10 * 280 && c.ops < 10 * 300); /* pi 9.6^2 = 289.5 */
  /* only the offsets read: no frame is read, nothing summed (the kernel
   * copies the offsets and returns) */
  n.out_used = 2u;
  n.desc->cost(&n, 10, &c);
  assert_true(c.bytes_read == 0 && c.ops == 0 && c.bytes_written == 0);
  node_free(&n);
}

/* ---- through the engine -------------------------------------------------------------------- */

/* The nodes of the two pipelines below. */
#define SEGMENTS_TEST_NODES                                                                          \
  "nodes:\n"                                                                                         \
  "  src: {type: synthetic_4dstem, params: {scan_shape: [7, 9], detector_shape: [29, 31],\n"         \
  "        disk_radius: 9.5, dose: 20000}}\n"                                                        \
  "  pattern: {type: sum, inputs: {x: src.frames}}\n"                                                \
  "  disk: {type: disk_fit, inputs: {pattern: pattern.total}}\n"                                     \
  "  fitted: {type: bf_segments, inputs: {frames: src.frames, disk: disk.disk},\n"                   \
  "           params: {grid: 7, extent: 0.5}}\n"                                                     \
  "  given: {type: bf_segments, inputs: {frames: src.frames}, params: {radius: 8.6, center: [13.3, 16.8]}}\n"

static const char *k_pipeline =
    "pipeline: bf_segments_test\n"
    SEGMENTS_TEST_NODES
    "outputs: {frames: src.frames, disk: disk.disk, fitted: fitted.segments, fitted_offsets: fitted.offsets,\n"
    "          given: given.segments, given_offsets: given.offsets}\n";

static void expect_run(const sl_run *run, const char *segs, const char *offs, const ref_geom *g,
                       const char *what) {
  const sl_output_data *fr = output(run, "frames");
  const int64_t npos = 63, h = 29, w = 31;
  uint64_t *want = malloc((size_t)(225 * npos) * 8);
  double want_off[225 * 3];
  int count = reference(fr->data, fr->desc.dtype, npos, h, w, g, want, want_off);
  const sl_output_data *s = output(run, segs), *o = output(run, offs);
  assert_int_equal(s->desc.dims[0], count);
  assert_int_equal(s->desc.dims[1], 7);
  assert_int_equal(s->desc.dims[2], 9);
  assert_int_equal(o->desc.dims[0], count);
  expect_outputs(s->data, o->data, want, want_off, count, npos, what);
  free(want);
}

static void run_pipeline(const char *path, int backend, int64_t chunk) {
  sl_run run;
  sl_error err;
  sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .backend = backend,
                        .chunk_positions = chunk, .threads = 2};
  sl_error_clear(&err);
  if (sl_run_pipeline(&req, &run, &err) != SL_OK) fail_msg("%s: %s", sl_backend_kind_name(backend), err.msg);
  const double *disk = output(&run, "disk")->data;
  ref_geom fitted = {disk[0], disk[1], disk[2], 0.5, 7}, given = {13.3, 16.8, 8.6, 0.9, 5};
  char what[64];
  snprintf(what, sizeof what, "%s fitted, chunk %lld", sl_backend_kind_name(backend), (long long)chunk);
  expect_run(&run, "fitted", "fitted_offsets", &fitted, what);
  snprintf(what, sizeof what, "%s given, chunk %lld", sl_backend_kind_name(backend), (long long)chunk);
  expect_run(&run, "given", "given_offsets", &given, what);
  sl_run_free(&run);
}

static void test_pipeline(void **st) {
  (void)st;
  char path[512];
  write_temp_file(path, sizeof path, "bf_segments.yaml", k_pipeline);
  const int64_t chunks[] = {10, 63};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) run_pipeline(path, SL_BACKEND_CPU, chunks[c]);
  if (!sl_test_cuda_available()) return;
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) run_pipeline(path, SL_BACKEND_CUDA, chunks[c]);
}

/* One output of each node read: fitted's segments and given's offsets. The
 * other ones have no buffer (omit_unread_outputs: the kernels leave them
 * alone) and the read ones are the bytes of a run that reads all four. */
static const char *k_pipeline_half =
    "pipeline: bf_segments_half\n"
    SEGMENTS_TEST_NODES
    "outputs: {fitted: fitted.segments, given_offsets: given.offsets}\n";

static void expect_unread(const sl_run *run, const char *node, int port) {
  int i = sl_graph_find(run->graph, node);
  assert_true(i >= 0);
  const sl_plan_buffer *b = &run->plan->buffers[sl_plan_buffer_index(run->plan, i, port)];
  assert_true(b->unread);
  assert_int_equal(b->bytes, 0);
  assert_int_equal(b->slot, -1);
}

static void expect_same_output(const sl_run *a, const sl_run *b, const char *name, const char *what) {
  const sl_output_data *x = output(a, name), *y = output(b, name);
  assert_int_equal(sl_desc_bytes(&x->desc), sl_desc_bytes(&y->desc));
  if (memcmp(x->data, y->data, (size_t)sl_desc_bytes(&x->desc)) != 0) fail_msg("%s: %s differs", what, name);
}

static void test_one_output_read(void **st) {
  (void)st;
  char all_path[512], half_path[512];
  write_temp_file(all_path, sizeof all_path, "bf_segments_all.yaml", k_pipeline);
  write_temp_file(half_path, sizeof half_path, "bf_segments_half.yaml", k_pipeline_half);
  const int backends[] = {SL_BACKEND_CPU, SL_BACKEND_CUDA};
  for (size_t k = 0; k < SL_COUNT_OF(backends); k++) {
    if (backends[k] == SL_BACKEND_CUDA && !sl_test_cuda_available()) return;
    sl_run all, half;
    sl_error err;
    sl_run_request req = {.file = all_path, .registry = sl_nodes_registry(), .backend = backends[k],
                          .chunk_positions = 10, .threads = 2};
    sl_error_clear(&err);
    if (sl_run_pipeline(&req, &all, &err) != SL_OK) fail_msg("all: %s", err.msg);
    req.file = half_path;
    if (sl_run_pipeline(&req, &half, &err) != SL_OK) fail_msg("half: %s", err.msg);
    expect_unread(&half, "fitted", 1);
    expect_unread(&half, "given", 0);
    const char *what = sl_backend_kind_name(backends[k]);
    expect_same_output(&all, &half, "fitted", what);
    expect_same_output(&all, &half, "given_offsets", what);
    sl_run_free(&all);
    sl_run_free(&half);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_params_geometry), cmocka_unit_test(test_wide_frames),
      cmocka_unit_test(test_clipped_segments_empty),
      cmocka_unit_test(test_small_by_hand),   cmocka_unit_test(test_disk_input),
      cmocka_unit_test(test_invalid_params),  cmocka_unit_test(test_cost),
      cmocka_unit_test(test_pipeline),        cmocka_unit_test(test_one_output_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
