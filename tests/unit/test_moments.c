/* moments: exact u64 moments against plain loops written here (random data
 * with values at the dtype max, odd detector sizes, chunks of 1, 7 and all
 * positions, 1 and 2 threads). Both sweeps of frame_moments.c forced through
 * param 'simd' (the portable loops and the AVX2 vpmaddwd sweep of u16
 * frames) on u16 frames full of values >= 32768 and 65535, all-0 and
 * all-65535 frames at the accumulators' spill bounds, widths that 16 does
 * not divide, and the widths where the AVX2 sweep stops. */
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
#include "nodes/common/madd_u16.h"
#include "tests/unit/stem_test_data.h"

extern const sl_node_desc sl_node_moments;

/* ---- every dtype, odd sizes ------------------------------------------------------ */

typedef struct exact_case {
  sl_dtype t;
  int64_t h, w, npos;
  uint64_t *want[3], *got[3];
} exact_case;

static void exact_compare(void *ctx) {
  const exact_case *c = ctx;
  for (int k = 0; k < 3; k++)
    for (int64_t p = 0; p < c->npos; p++) {
      if (c->got[k][p] != c->want[k][p])
        fprintf(stderr, "%s %lldx%lld out %d pos %lld: %llu != %llu\n", sl_dtype_name(c->t),
                (long long)c->h, (long long)c->w, k, (long long)p,
                (unsigned long long)c->got[k][p], (unsigned long long)c->want[k][p]);
      assert_true(c->got[k][p] == c->want[k][p]);
    }
}

static void exact_case_run(sl_dtype t, int64_t h, int64_t w) {
  const int64_t npos = 3 * 11;
  sl_node n;
  node_on_frames(&n, &sl_node_moments, t, 3, 11, h, w);
  for (int k = 0; k < 3; k++) {
    assert_int_equal(n.out[k].dtype, SL_U64);
    assert_int_equal(n.out[k].stream_rank, 2);
    assert_int_equal(n.out[k].rank, 2);
  }
  void *f = moment_frames(t, npos, h, w);
  exact_case c = {t, h, w, npos, {NULL}, {NULL}};
  for (int k = 0; k < 3; k++) {
    c.want[k] = calloc((size_t)npos, 8);
    c.got[k] = calloc((size_t)npos, 8);
  }
  ref_moments(f, t, npos, h, w, c.want[0], c.want[1], c.want[2]);
  assert_true(c.want[0][3] == 0);
  assert_true(c.want[0][5] == dmax(t) * (uint64_t)(h * w));
  void *outs[3] = {c.got[0], c.got[1], c.got[2]};
  run_each_chunking(&n, f, npos, outs, 3, exact_compare, &c);
  for (int k = 0; k < 3; k++) free(c.want[k]), free(c.got[k]);
  free(f);
  node_free(&n);
}

static void test_moments_exact(void **st) {
  const int64_t sizes[][2] = {{13, 17}, {1, 1}, {31, 2}, {64, 65}};
  each_frame_case(sizes, sizeof sizes / sizeof sizes[0], exact_case_run);
}

/* Identical frames at every position, all at the u16 max: one more exact case
 * and the widest u32 accumulators (H * 65535 close to 2^32 is not reachable
 * here; the u64 path is checked by the u32 frames above). */
static void test_moments_identical(void **st) {
  const int64_t h = 255, w = 257, npos = 20;
  uint16_t *f = malloc((size_t)(npos * h * w) * 2);
  for (int64_t i = 0; i < npos * h * w; i++) f[i] = 0xFFFF;
  int64_t d[3] = {npos, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  sl_node n;
  sl_error e;
  assert_int_equal(node_make(&n, &sl_node_moments, NULL, 0, &in, 1, &e), SL_OK);
  uint64_t s[20], sr[20], sc[20];
  void *outs[3] = {s, sr, sc};
  sl_backend *b = backend(2);
  assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 7, &e), SL_OK);
  for (int p = 0; p < npos; p++) {
    assert_true(s[p] == 65535ull * (uint64_t)(h * w));
    assert_true(sr[p] == 65535ull * (uint64_t)w * (uint64_t)(h * (h - 1) / 2));
    assert_true(sc[p] == 65535ull * (uint64_t)h * (uint64_t)(w * (w - 1) / 2));
  }
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(f);
}

/* ---- the two sweeps on u16 frames ------------------------------------------------ */

/* The moments node with param simd = `path` over u16 frames [npos | h, w]
 * against ref_moments. */
static void check_u16_path(const char *path, const uint16_t *f, int64_t npos, int64_t h,
                           int64_t w, const uint64_t *const want[3]) {
  int64_t d[3] = {npos, h, w};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  kv o[] = {{"simd", path}};
  sl_node n;
  sl_error e;
  assert_int_equal(node_make(&n, &sl_node_moments, o, 1, &in, 1, &e), SL_OK);
  uint64_t *got[3];
  for (int k = 0; k < 3; k++) got[k] = malloc((size_t)npos * 8);
  void *outs[3] = {got[0], got[1], got[2]};
  sl_backend *b = backend(2);
  assert_int_equal(run_stream(&n, b, f, NULL, 0, outs, npos, 2, &e), SL_OK);
  for (int k = 0; k < 3; k++)
    for (int64_t p = 0; p < npos; p++) {
      if (got[k][p] != want[k][p])
        fprintf(stderr, "simd %s %lldx%lld out %d pos %lld: %llu != %llu\n", path, (long long)h,
                (long long)w, k, (long long)p, (unsigned long long)got[k][p],
                (unsigned long long)want[k][p]);
      assert_true(got[k][p] == want[k][p]);
    }
  sl_cpu_backend_ops.destroy(b);
  for (int k = 0; k < 3; k++) free(got[k]);
  node_free(&n);
}

/* The sweeps against the plain loops: the portable one, the AVX2 one and
 * its AVX-512 variant where the CPU has it (sl_madd_allow_avx512). Widths:
 * 16 to 200 with and without a partial last vector (of 16 or of 32), rows
 * of 1 to 7 AVX-512 vectors (the three chains' leftovers); 1030,
 * where a row needs several Sc spills; 32768, the widest the AVX2 sweeps
 * take (Sc spilled after every vector); 15 and 32769, which they leave to
 * the portable loops. 300 x 16: the row blocks of T and P at their bound;
 * 80 x 192: several row blocks, each at its Sc bound. */
static void test_moments_u16_paths(void **st) {
  const int64_t sizes[][2] = {{5, 16},   {7, 17},    {6, 37},    {9, 192},  {80, 192}, {4, 200},
                              {3, 1030}, {40, 1030}, {300, 16}, {2, 32768}, {3, 15},  {2, 32769},
                              {1, 48},   {5, 32},    {4, 64},    {3, 95},   {150, 33},
                              {4, 128},  {3, 160}};
  const bool avx2 = sl_simd_supported(SL_SIMD_AVX2);
  if (!avx2) print_message("no AVX2 on this CPU: the AVX2 sweep is not exercised\n");
  sl_madd_allow_avx512(true);
  const bool avx512 = sl_madd_avx512_used();
  if (avx2 && !avx512) print_message("no AVX-512 BW/VNNI on this CPU: its sweep is not exercised\n");
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (int pattern = 0; pattern < 4; pattern++) {
      const int64_t h = sizes[si][0], w = sizes[si][1], npos = 5;
      uint16_t *f = u16_frames(pattern, npos * h * w);
      uint64_t *want[3];
      for (int k = 0; k < 3; k++) want[k] = malloc((size_t)npos * 8);
      ref_moments(f, SL_U16, npos, h, w, want[0], want[1], want[2]);
      check_u16_path("scalar", f, npos, h, w, (const uint64_t *const *)want);
      for (int wide = 0; avx2 && wide <= avx512; wide++) {
        sl_madd_allow_avx512(wide);
        check_u16_path("avx2", f, npos, h, w, (const uint64_t *const *)want);
      }
      sl_madd_allow_avx512(true);
      for (int k = 0; k < 3; k++) free(want[k]);
      free(f);
    }
}

/* ---- refusals and cost ------------------------------------------------------------ */

/* u32 frames of 4096 x 4096 could overflow sum r*I: refused at infer, like
 * float frames; a SIMD path that does not exist is refused at build. */
static void test_moments_errors(void **st) {
  int64_t big[3] = {4, 4096, 4096}, small[4] = {2, 2, 8, 8};
  const refusal_case cases[] = {
      {{"simd", "auto"}, "u64", {sl_desc_make(SL_U32, 3, big, 1)}},
      {{"simd", "auto"}, "input 'frames'", {sl_desc_make(SL_F32, 4, small, 2)}},
      {{"simd", "avx512"}, "'simd'", {frames_desc(SL_U16, 3, 4, 21, 37)}},
  };
  expect_refusals(&sl_node_moments, 1, cases, SL_COUNT_OF(cases));
}

static void test_cost(void **st) {
  sl_tensor_desc in = frames_desc(SL_U16, 3, 4, 16, 20);
  sl_node_cost c = cost_before_prepare(&sl_node_moments, &in, 10);
  assert_true(c.bytes_read == 10 * 320 * 2 && c.bytes_written == 240);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_moments_exact),     cmocka_unit_test(test_moments_identical),
      cmocka_unit_test(test_moments_u16_paths), cmocka_unit_test(test_moments_errors),
      cmocka_unit_test(test_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
