/* com: the centre of mass against plain loops written here (random data with
 * values at the dtype max, odd detector sizes, chunks of 1, 7 and all
 * positions, 1 and 2 threads); descan by mean and by plane; com reading the
 * moments node's outputs instead of frames; both sweeps of frame_moments.c
 * forced through param 'simd'; com against synthetic_4dstem's ground truth. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/core/simd.h"
#include "tests/unit/stem_test_data.h"

extern const sl_node_desc sl_node_moments;
extern const sl_node_desc sl_node_com;

/* ---- reference ----------------------------------------------------------- */

/* CoM minus the mean over positions with S > 0 (0 where S = 0). */
static void ref_com(const uint64_t *s, const uint64_t *m, int64_t npos, double *out) {
  double sum = 0;
  int64_t nv = 0;
  for (int64_t p = 0; p < npos; p++)
    if (s[p]) sum += (double)m[p] / (double)s[p], nv++;
  double mean = nv ? sum / (double)nv : 0;
  for (int64_t p = 0; p < npos; p++) out[p] = s[p] ? (double)m[p] / (double)s[p] - mean : 0;
}

/* ---- every dtype, odd sizes ------------------------------------------------------ */

typedef struct reference_case {
  int64_t npos;
  const double *want_r, *want_c;
  double *got_r, *got_c;
} reference_case;

static void reference_compare(void *ctx) {
  const reference_case *c = ctx;
  for (int64_t p = 0; p < c->npos; p++) {
    if (fabs(c->got_r[p] - c->want_r[p]) > 1e-12 || fabs(c->got_c[p] - c->want_c[p]) > 1e-12)
      fprintf(stderr, "pos %lld: (%.17g, %.17g) != (%.17g, %.17g)\n", (long long)p, c->got_r[p],
              c->got_c[p], c->want_r[p], c->want_c[p]);
    assert_true(fabs(c->got_r[p] - c->want_r[p]) <= 1e-12);
    assert_true(fabs(c->got_c[p] - c->want_c[p]) <= 1e-12);
  }
  assert_true(c->got_r[3] == 0 && c->got_c[3] == 0); /* S = 0 */
}

static void reference_case_run(sl_dtype t, int64_t h, int64_t w) {
  const int64_t rows = 3, cols = 11, npos = rows * cols;
  sl_node n;
  node_on_frames(&n, &sl_node_com, t, rows, cols, h, w);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(n.out[k].dtype, SL_F64);
    assert_int_equal(n.out[k].stream_rank, 0);
    assert_int_equal(n.out[k].rank, 2);
    assert_int_equal(n.out[k].dims[0], rows);
    assert_int_equal(n.out[k].dims[1], cols);
  }
  void *f = moment_frames(t, npos, h, w);
  uint64_t *m[3];
  for (int k = 0; k < 3; k++) m[k] = calloc((size_t)npos, 8);
  ref_moments(f, t, npos, h, w, m[0], m[1], m[2]);
  double *want_r = calloc((size_t)npos, 8), *want_c = calloc((size_t)npos, 8);
  reference_case c = {npos, want_r, want_c, calloc((size_t)npos, 8), calloc((size_t)npos, 8)};
  ref_com(m[0], m[1], npos, want_r);
  ref_com(m[0], m[2], npos, want_c);
  void *outs[2] = {c.got_r, c.got_c};
  run_each_chunking(&n, f, npos, outs, 2, reference_compare, &c);
  for (int k = 0; k < 3; k++) free(m[k]);
  free(want_r), free(want_c), free(c.got_r), free(c.got_c), free(f);
  node_free(&n);
}

static void test_com_reference(void **st) {
  const int64_t sizes[][2] = {{13, 17}, {1, 1}, {40, 33}};
  each_frame_case(sizes, sizeof sizes / sizeof sizes[0], reference_case_run);
}

/* ---- the two sweeps, and the moments as input ----------------------------------- */

/* com gives the same doubles on both paths; a forced path the CPU lacks is an
 * error at run time, never a fallback; a bad name is refused at build. */
static void test_com_paths(void **st) {
  const int64_t rows = 3, cols = 4, npos = rows * cols, h = 21, w = 37;
  uint16_t *f = u16_frames(0, npos * h * w);
  sl_tensor_desc in = frames_desc(SL_U16, rows, cols, h, w);
  double got[2][2][12];
  const char *paths[2] = {"scalar", "avx2"};
  sl_backend *b = backend(2);
  for (int q = 0; q < 2; q++) {
    kv o[] = {{"simd", paths[q]}};
    sl_node n;
    sl_error e;
    assert_int_equal(node_make(&n, &sl_node_com, o, 1, &in, 1, &e), SL_OK);
    void *outs[2] = {got[q][0], got[q][1]};
    sl_code rc = run_stream(&n, b, f, NULL, 0, outs, npos, 5, &e);
    if (q == 1 && !sl_simd_supported(SL_SIMD_AVX2)) {
      assert_int_equal(rc, SL_ERR_BACKEND);
      memcpy(got[1], got[0], sizeof got[0]);
    } else {
      assert_int_equal(rc, SL_OK);
    }
    node_free(&n);
  }
  assert_memory_equal(got[0], got[1], sizeof got[0]);
  kv bad[] = {{"simd", "avx512"}};
  expect_node_error(&sl_node_com, bad, 1, &in, 1, SL_ERR_PIPELINE, "'simd'", NULL);
  sl_cpu_backend_ops.destroy(b);
  free(f);
}

/* com reading the moments (inputs s, sr, sc: here the moments node's
 * outputs, chunk by chunk) gives the same doubles as com reading the frames,
 * for both descan modes; a com with frames and moments, or with only some
 * moments, is refused. */
static void test_com_from_moments(void **st) {
  const int64_t rows = 5, cols = 7, npos = rows * cols, h = 19, w = 23, chunk = 4;
  uint16_t *f = u16_frames(0, npos * h * w);
  for (int64_t i = 0; i < h * w; i++) f[3 * h * w + i] = 0; /* a frame with S = 0 */
  sl_tensor_desc in = frames_desc(SL_U16, rows, cols, h, w);
  sl_backend *b = backend(2);
  sl_error e;
  /* the moments of every frame */
  uint64_t m[3][35];
  sl_node mo;
  assert_int_equal(node_make(&mo, &sl_node_moments, NULL, 0, &in, 1, &e), SL_OK);
  void *mouts[3] = {m[0], m[1], m[2]};
  assert_int_equal(run_stream(&mo, b, f, NULL, 0, mouts, npos, chunk, &e), SL_OK);
  sl_tensor_desc md[4] = {{0}, mo.out[0], mo.out[1], mo.out[2]};
  md[0].dtype = SL_DT_INVALID;
  const char *modes[2] = {"none", "plane"};
  for (int q = 0; q < 2; q++) {
    kv o[] = {{"descan", modes[q]}};
    double want[2][35], got[2][35];
    sl_node a, c;
    assert_int_equal(node_make(&a, &sl_node_com, o, 1, &in, 1, &e), SL_OK);
    void *aouts[2] = {want[0], want[1]};
    assert_int_equal(run_stream(&a, b, f, NULL, 0, aouts, npos, chunk, &e), SL_OK);
    sl_code rc = node_make(&c, &sl_node_com, o, 1, md, 4, &e);
    if (rc) fprintf(stderr, "com from moments: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    assert_int_equal(c.out[0].rank, 2);
    assert_int_equal(c.out[0].dims[1], cols);
    sl_kernel_args k;
    for (int64_t s0 = 0; s0 < npos; s0 += chunk) {
      memset(&k, 0, sizeof k);
      k.backend = b, k.node = &c, k.state = c.state, k.err = &e;
      k.pos_start = s0;
      k.pos_count = npos - s0 < chunk ? npos - s0 : chunk;
      for (int j = 0; j < 3; j++) k.in[1 + j] = m[j] + s0;
      k.out[0] = got[0] + s0, k.out[1] = got[1] + s0; /* the chunk's place: a concat */
      assert_int_equal(c.desc->kernel[SL_BACKEND_CPU](&k), SL_OK);
    }
    memset(&k, 0, sizeof k);
    k.backend = b, k.node = &c, k.state = c.state, k.err = &e, k.pos_count = npos;
    k.out[0] = got[0], k.out[1] = got[1];
    assert_int_equal(c.desc->finalize[SL_BACKEND_CPU](&k), SL_OK);
    assert_memory_equal(want, got, sizeof want);
    assert_true(got[0][3] == 0 && got[1][3] == 0);
    node_free(&a);
    node_free(&c);
  }
  /* frames and moments together; moments without sr */
  sl_tensor_desc both[4] = {in, mo.out[0], mo.out[1], mo.out[2]};
  expect_node_error(&sl_node_com, NULL, 0, both, 4, SL_ERR_PIPELINE, "not both", NULL);
  sl_tensor_desc partial[4] = {md[0], mo.out[0], md[0], mo.out[2]};
  expect_node_error(&sl_node_com, NULL, 0, partial, 4, SL_ERR_PIPELINE, "'sr'", NULL);
  node_free(&mo);
  sl_cpu_backend_ops.destroy(b);
  free(f);
}

/* ---- descan ----------------------------------------------------------------------- */

/* One bright pixel per frame at (2 + i + 0.5 j, 3 + j): CoM is a plane over the
 * scan. descan plane removes it exactly; descan none leaves the plane minus
 * its mean. Frame (1, 1) is empty (S = 0) and stays 0. */
static void test_com_plane(void **st) {
  const int64_t rows = 6, cols = 8, npos = rows * cols, h = 24, w = 16;
  uint16_t *f = calloc((size_t)(npos * h * w), 2);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      int64_t p = i * cols + j;
      if (p == cols + 1) continue;
      /* row 2 + i + j/2: two pixels when j is odd (half-way) */
      uint16_t *fr = f + p * h * w;
      int64_t r = 2 + i + j / 2;
      if (j % 2) fr[r * w + 3 + j] = 500, fr[(r + 1) * w + 3 + j] = 500;
      else fr[r * w + 3 + j] = 1000;
    }
  sl_tensor_desc in = frames_desc(SL_U16, rows, cols, h, w);
  double want_r[48], want_c[48];
  /* Plane means: over the valid positions. */
  double mr = 0, mc = 0;
  for (int64_t p = 0; p < npos; p++)
    if (p != cols + 1) {
      mr += 2.0 + (double)(p / cols) + 0.5 * (double)(p % cols);
      mc += 3.0 + (double)(p % cols);
    }
  mr /= (double)(npos - 1), mc /= (double)(npos - 1);
  for (int64_t p = 0; p < npos; p++) {
    want_r[p] = p == cols + 1 ? 0 : 2.0 + (double)(p / cols) + 0.5 * (double)(p % cols) - mr;
    want_c[p] = p == cols + 1 ? 0 : 3.0 + (double)(p % cols) - mc;
  }
  sl_backend *b = backend(2);
  for (int mode = 0; mode < 2; mode++) {
    kv o[] = {{"descan", mode ? "plane" : "none"}};
    sl_node n;
    sl_error e;
    assert_int_equal(node_make(&n, &sl_node_com, o, 1, &in, 1, &e), SL_OK);
    double got_r[48], got_c[48];
    void *outs[2] = {got_r, got_c};
    assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 7, &e), SL_OK);
    for (int64_t p = 0; p < npos; p++) {
      double er = mode ? 0 : want_r[p], ec = mode ? 0 : want_c[p];
      assert_true(fabs(got_r[p] - er) < 1e-9);
      assert_true(fabs(got_c[p] - ec) < 1e-9);
    }
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
  free(f);
}

/* descan plane against a plain least-squares fit: normal equations of
 * [1, row, col] solved by Cramer's rule here. */
static void test_com_plane_random(void **st) {
  const int64_t rows = 5, cols = 7, npos = rows * cols, h = 9, w = 11;
  void *f = random_frames(SL_U8, npos * h * w);
  sl_tensor_desc in = frames_desc(SL_U8, rows, cols, h, w);
  uint64_t s[35], sr[35], sc[35];
  ref_moments(f, SL_U8, npos, h, w, s, sr, sc);
  kv o[] = {{"descan", "plane"}};
  sl_node n;
  sl_error e;
  assert_int_equal(node_make(&n, &sl_node_com, o, 1, &in, 1, &e), SL_OK);
  double got[2][35];
  void *outs[2] = {got[0], got[1]};
  sl_backend *b = backend(1);
  assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 4, &e), SL_OK);
  for (int k = 0; k < 2; k++) {
    double M[3][3] = {{0}}, v[3] = {0}, y[35];
    for (int64_t p = 0; p < npos; p++) {
      y[p] = (double)(k ? sc[p] : sr[p]) / (double)s[p];
      double x[3] = {1, (double)(p / cols), (double)(p % cols)};
      for (int i = 0; i < 3; i++) {
        v[i] += x[i] * y[p];
        for (int j = 0; j < 3; j++) M[i][j] += x[i] * x[j];
      }
    }
    double det = M[0][0] * (M[1][1] * M[2][2] - M[1][2] * M[2][1]) -
                 M[0][1] * (M[1][0] * M[2][2] - M[1][2] * M[2][0]) +
                 M[0][2] * (M[1][0] * M[2][1] - M[1][1] * M[2][0]);
    double coef[3];
    for (int c = 0; c < 3; c++) {
      double A[3][3];
      memcpy(A, M, sizeof A);
      for (int i = 0; i < 3; i++) A[i][c] = v[i];
      coef[c] = (A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[2][1]) -
                 A[0][1] * (A[1][0] * A[2][2] - A[1][2] * A[2][0]) +
                 A[0][2] * (A[1][0] * A[2][1] - A[1][1] * A[2][0])) /
                det;
    }
    for (int64_t p = 0; p < npos; p++) {
      double want = y[p] - coef[0] - coef[1] * (double)(p / cols) - coef[2] * (double)(p % cols);
      assert_true(fabs(got[k][p] - want) < 1e-9);
    }
  }
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(f);
}

/* ---- com against synthetic_4dstem's ground truth ------------------------------ */

static void test_com_synthetic(void **st) {
  const int64_t rows = 12, cols = 12, h = 32, w = 32, npos = rows * cols;
  kv so[] = {{"scan_shape", "[12, 12]"}, {"detector_shape", "[32, 32]"}, {"dose", "1e6"},
             {"dtype", "u32"},           {"disk_radius", "5"},          {"seed", "7"}};
  synth_data syn = synth_run(so, 6, npos, 2);
  uint32_t *frames = syn.frames;
  double *comx = syn.com;
  sl_error e;
  sl_backend *b = backend(2);
  int64_t d[4] = {rows, cols, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U32, 4, d, 2);
  sl_node n;
  assert_int_equal(node_make(&n, &sl_node_com, NULL, 0, &in, 1, &e), SL_OK);
  double *cr = calloc((size_t)npos, 8), *cc = calloc((size_t)npos, 8);
  double *er = calloc((size_t)npos, 8), *ec = calloc((size_t)npos, 8);
  void *outs[2] = {cr, cc};
  assert_int_equal(run_stream(&n, b, frames, NULL, 0, outs, npos, 7, &e), SL_OK);
  double mr = 0, mc = 0, spread = 0;
  for (int64_t p = 0; p < npos; p++) mr += comx[2 * p], mc += comx[2 * p + 1];
  mr /= (double)npos, mc /= (double)npos;
  for (int64_t p = 0; p < npos; p++) {
    er[p] = comx[2 * p] - mr, ec[p] = comx[2 * p + 1] - mc;
    spread = fmax(spread, fabs(er[p]));
  }
  double rr = correlation(cr, er, npos), rc = correlation(cc, ec, npos);
  double mean_out = 0;
  for (int64_t p = 0; p < npos; p++) mean_out += cr[p];
  fprintf(stderr, "com vs synthetic com_expected: r_row %.5f r_col %.5f (spread %.3f px)\n", rr,
          rc, spread);
  assert_true(spread > 0.05); /* the object deflects the beam measurably */
  assert_true(rr >= 0.99);
  assert_true(rc >= 0.99);
  assert_true(fabs(mean_out) < 1e-9); /* mean removed */
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  synth_free(&syn);
  free(cr), free(cc), free(er), free(ec);
}

/* ---- refusals and cost ------------------------------------------------------------ */

/* u32 frames of 4096 x 4096 could overflow sum r*I: refused at infer, like
 * whole (not streamed) frames and a descan that does not exist. */
static void test_com_errors(void **st) {
  int64_t big[3] = {4, 4096, 4096}, small[4] = {2, 2, 8, 8};
  const refusal_case cases[] = {
      {{"descan", "none"}, "u64", {sl_desc_make(SL_U32, 3, big, 1)}},
      {{"descan", "none"}, "streamed", {sl_desc_make(SL_U16, 2, small + 2, 0)}},
      {{"descan", "linear"}, "'descan'", {sl_desc_make(SL_U16, 4, small, 2)}},
  };
  expect_refusals(&sl_node_com, 1, cases, SL_COUNT_OF(cases));
}

static void test_cost(void **st) {
  sl_tensor_desc in = frames_desc(SL_U16, 3, 4, 16, 20);
  sl_node_cost c = cost_before_prepare(&sl_node_com, &in, 10);
  /* no state: the outputs say which positions count (NaN where S = 0) */
  assert_true(c.bytes_read == 10 * 320 * 2 && c.bytes_written == 160 && c.state_bytes == 0);
  assert_int_equal(sl_node_com.combine[0], SL_COMBINE_CONCAT);
  assert_int_equal(sl_node_com.combine[1], SL_COMBINE_CONCAT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_com_reference),
      cmocka_unit_test(test_com_paths),
      cmocka_unit_test(test_com_from_moments),
      cmocka_unit_test(test_com_errors),
      cmocka_unit_test(test_com_plane),
      cmocka_unit_test(test_com_plane_random),
      cmocka_unit_test(test_com_synthetic),
      cmocka_unit_test(test_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
