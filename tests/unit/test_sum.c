/* sum: the sum over scan positions against plain loops (u64 for unsigned
 * data, f64 adding positions in scan order for floats, so float sums are
 * bit-identical), across chunk sizes and thread counts, with items longer
 * than the kernel's block and position counts that are not multiples of its
 * four-way sweep, u16 with and without the AVX-512 tiles of a worker's
 * positions; an item of no axes; errors; cost. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define NH_RNG_SEED 0xD1B54A32D192ED03ULL
#include "tests/unit/basic_node_checks.h"

#include "nodes/common/madd_u16.h"

extern const sl_node_desc sl_node_sum;

/* Random data of type t; unsigned values are near the dtype max (u64 below
 * 2^56 so that the sums fit). */
static void *random_data(sl_dtype t, int64_t n) {
  void *x = malloc((size_t)n * sl_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    switch (t) {
      case SL_U8: ((uint8_t *)x)[i] = (uint8_t)(v | 0xF0); break;
      case SL_U16: ((uint16_t *)x)[i] = (uint16_t)(v | 0xFF00); break;
      case SL_U32: ((uint32_t *)x)[i] = (uint32_t)v; break;
      case SL_U64: ((uint64_t *)x)[i] = v >> 8; break;
      case SL_F32: ((float *)x)[i] = (float)((double)(v >> 40) / 3.0 - 1e5); break;
      default: ((double *)x)[i] = (double)(v >> 11) * 1e-9 - 3e6; break;
    }
  }
  return x;
}

static void check_sum(sl_dtype t, int64_t npos, int64_t item, int64_t chunk, int threads) {
  int64_t d[3] = {npos, 1, item};
  sl_tensor_desc in = sl_desc_make(t, 3, d, 2);
  sl_node n;
  node_make_ok(&n, &sl_node_sum, NULL, 0, &in, 1);
  bool is_float = t == SL_F32 || t == SL_F64;
  assert_int_equal(n.out[0].dtype, is_float ? SL_F64 : SL_U64);
  assert_int_equal(n.out[0].stream_rank, 0);
  assert_int_equal(n.out[0].rank, 1);
  assert_int_equal(n.out[0].dims[0], item);
  void *x = random_data(t, npos * item);
  void *total = malloc((size_t)item * 8);
  run_chunked(&n, x, NULL, total, npos, chunk, threads);
  for (int64_t e = 0; e < item; e++) {
    if (is_float) {
      double want = 0;
      for (int64_t p = 0; p < npos; p++)
        want += t == SL_F32 ? (double)((const float *)x)[p * item + e]
                            : ((const double *)x)[p * item + e];
      double got = ((const double *)total)[e];
      if (memcmp(&got, &want, sizeof got))
        fail_msg("%s element %lld: %.17g, want %.17g", sl_dtype_name(t), (long long)e, got, want);
    } else {
      uint64_t want = 0;
      for (int64_t p = 0; p < npos; p++) want += pix(x, t, p * item + e);
      if (((const uint64_t *)total)[e] != want)
        fail_msg("%s element %lld", sl_dtype_name(t), (long long)e);
    }
  }
  free(x);
  free(total);
  node_free(&n);
}

/* Each dtype; u16 twice: with the AVX-512 tiles (where the CPU has them)
 * and without. */
static void test_all_dtypes(void **st) {
  const sl_dtype types[] = {SL_U8, SL_U16, SL_U32, SL_U64, SL_F32, SL_F64, SL_U16};
  for (int k = 0; k < 7; k++) {
    sl_madd_allow_avx512(k != 6);
    check_sum(types[k], 1, 5, 1, 1);
    check_sum(types[k], 11, 37, 3, 1); /* 11 positions: not a multiple of 4 */
    check_sum(types[k], 11, 37, 11, 2);
    check_sum(types[k], 9, 2500, 4, 2); /* items longer than one block of 1024 */
    check_sum(types[k], 23, 5000, 7, 2); /* more than one thread's share of the item */
    /* many workers: element blocks below 4096 (a multiple of 512), with and
     * without positions split as well */
    check_sum(types[k], 29, 9000, 14, 16);
    check_sum(types[k], 14, 40000, 14, 5);
  }
  sl_madd_allow_avx512(true);
}

/* u16 sums go through u32 sums of up to 65,537 positions: one call over
 * 66,000 positions of 65,280..65,535 (each element's sum passes 2^32 after
 * 65,794 positions at most) in one group of positions (an item of four
 * blocks on one worker), which a u32 sum without that limit wraps. 270 MB
 * of frames. */
static void test_u16_sums_past_u32(void **st) {
  (void)st;
  for (int avx512 = 0; avx512 <= 1; avx512++) {
    sl_madd_allow_avx512(avx512);
    check_sum(SL_U16, 66000, 2048, 66000, 1);
  }
}

/* A stream of scalars (no item axes) sums to a tensor of one element. */
static void test_scalar_item(void **st) {
  int64_t d[1] = {10};
  sl_tensor_desc in = sl_desc_make(SL_U16, 1, d, 1);
  sl_node n;
  node_make_ok(&n, &sl_node_sum, NULL, 0, &in, 1);
  assert_int_equal(n.out[0].rank, 1);
  assert_int_equal(n.out[0].dims[0], 1);
  uint16_t x[10];
  for (int i = 0; i < 10; i++) x[i] = (uint16_t)(60000 + i);
  uint64_t total = 0;
  run_chunked(&n, x, NULL, &total, 10, 3, 1);
  assert_int_equal(total, 600045);
  node_free(&n);
}

static void test_errors(void **st) {
  int64_t d[2] = {4, 4};
  sl_tensor_desc whole = sl_desc_make(SL_F32, 2, d, 0);
  node_make_refused(&sl_node_sum, NULL, 0, &whole, 1, "must be streamed");
  const sl_dtype bad[] = {SL_I32, SL_I64, SL_C64};
  for (int k = 0; k < 3; k++) {
    sl_tensor_desc in = sl_desc_make(bad[k], 2, d, 1);
    node_make_refused(&sl_node_sum, NULL, 0, &in, 1, "expects unsigned or float data");
  }
}

static void test_cost_and_descriptor(void **st) {
  int64_t d[3] = {10, 20, 30};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  sl_node n;
  node_make_ok(&n, &sl_node_sum, NULL, 0, &in, 1);
  sl_node_cost c = cost_of(&n, 3);
  assert_int_equal(c.bytes_read, 3 * 600 * 2);
  assert_int_equal(c.ops, 3 * 600);
  assert_int_equal(c.bytes_written, 0); /* the reduction's output is written once */
  node_free(&n);
  check_registered(&sl_node_sum, "sum");
  assert_int_equal(sl_node_sum.n_params, 0);
  assert_false(sl_node_sum.host);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_dtypes),
      cmocka_unit_test(test_u16_sums_past_u32),
      cmocka_unit_test(test_scalar_item),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
