/* gather: a streamed tensor made whole equals the tensor built here
 * element by element, whatever the chunking (chunks of 1, uneven, whole)
 * and threads, for several dtypes and item shapes; the output keeps the
 * scan axes; streamed or encoded inputs are refused where they must be.
 * And in a pipeline: the whole ADF image gathered from virtual_detectors
 * equals the streamed one the run assembles. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/basic_node_checks.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

extern const sl_node_desc sl_node_gather;

static void check_gather(sl_dtype t, int rank, const int64_t *dims, int stream_rank) {
  sl_tensor_desc in = sl_desc_make(t, rank, dims, stream_rank);
  sl_node n;
  node_make_ok(&n, &sl_node_gather, NULL, 0, &in, 1);
  assert_int_equal(n.out[0].stream_rank, 0);
  assert_int_equal(n.out[0].rank, rank);
  for (int i = 0; i < rank; i++) assert_int_equal(n.out[0].dims[i], dims[i]);
  const int64_t npos = sl_desc_positions(&in), bytes = sl_desc_bytes(&n.out[0]);
  uint8_t *x = malloc((size_t)bytes), *y = malloc((size_t)bytes);
  for (int64_t i = 0; i < bytes; i++) x[i] = (uint8_t)(rnd() >> 11); /* position-major, as streamed */
  const int64_t chunks[] = {1, 3, 7, npos};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
    for (int threads = 1; threads <= 2; threads++) {
      memset(y, 0xEE, (size_t)bytes);
      run_chunked(&n, x, NULL, y, npos, chunks[c], threads);
      assert_memory_equal(x, y, (size_t)bytes);
    }
  free(x);
  free(y);
  node_free(&n);
}

static void test_made_whole(void **st) {
  (void)st;
  const int64_t image[2] = {13, 11}, frames[4] = {5, 6, 3, 4}, vec[2] = {40, 3};
  check_gather(SL_U64, 2, image, 2);
  check_gather(SL_F64, 2, image, 2);
  check_gather(SL_U16, 4, frames, 2);
  check_gather(SL_F32, 2, vec, 1);
}

static void test_refusals(void **st) {
  (void)st;
  const int64_t dims[2] = {4, 4};
  sl_tensor_desc whole = sl_desc_make(SL_F64, 2, dims, 0);
  node_make_refused(&sl_node_gather, NULL, 0, &whole, 1, "must be streamed");
  sl_tensor_desc enc = sl_desc_make(SL_U16, 2, dims, 1);
  enc.encoding = SL_ENC_BSLZ4;
  node_make_refused(&sl_node_gather, NULL, 0, &enc, 1, "is encoded");
  check_registered(&sl_node_gather, "gather");
  assert_int_equal(sl_node_gather.scan_image_outputs, 1u);
}

static void test_in_a_pipeline(void **st) {
  (void)st;
  char path[512];
  write_temp_file(path, sizeof path, "gathered.yaml",
                  "pipeline: gathered\n"
                  "nodes:\n"
                  "  src: {type: synthetic_4dstem, params: {scan_shape: [9, 7], detector_shape: [24, 24]}}\n"
                  "  images: {type: virtual_detectors, inputs: {frames: src.frames},\n"
                  "           params: {radius: 5, center: [11.5, 11.5]}}\n"
                  "  whole: {type: gather, inputs: {x: images.adf}}\n"
                  "outputs: {adf: images.adf, adf_whole: whole.whole}\n");
  const int64_t chunks[] = {1, 5, 0};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    sl_run run;
    sl_error err;
    sl_code rc = run_file(path, NULL, 0, chunks[c], 2, 0, NULL, &run, &err);
    if (rc != SL_OK) fail_msg("run failed: %s", err.msg);
    const sl_output_data *s = output(&run, "adf"), *w = output(&run, "adf_whole");
    assert_int_equal(sl_desc_bytes(&s->desc), sl_desc_bytes(&w->desc));
    assert_memory_equal(s->data, w->data, (size_t)sl_desc_bytes(&s->desc));
    assert_int_equal(w->scan_axes, 2);
    sl_run_free(&run);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_made_whole),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_in_a_pipeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
