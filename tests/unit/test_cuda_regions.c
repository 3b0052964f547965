/* The engine's schedules on CUDA: the transpose region (transpose_scan and
 * the stream node's views), gather's concat reduction, variance's merge by
 * the node (its CUDA merge kernel after each chunk) and streamed outputs
 * on a second stream give the CPU backend's bits. The CPU results are
 * themselves checked against closed forms (test_transpose_region.c,
 * test_exec_reductions.c); here every output of both backends must match
 * byte for byte, over chunk sizes. Skipped without a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "tests/unit/cuda_probe.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

static const char *k_regions =
    "pipeline: regions\n"
    "nodes:\n"
    "  src: {type: synthetic_4dstem, params: {scan_shape: [9, 7], detector_shape: [24, 24]}}\n"
    "  tp: {type: transpose_scan, inputs: {x: src.frames}}\n"
    "  pixels: {type: stream, inputs: {x: tp.pixel_major}, params: {axes: 2, name: pixels}}\n"
    "  per_position: {type: sum, inputs: {x: pixels.out}}\n"
    "  back: {type: transpose_scan, inputs: {x: pixels.out}}\n"
    "  images: {type: virtual_detectors, inputs: {frames: src.frames}, params: {radius: 5, center: [11.5, 11.5]}}\n"
    "  adf: {type: gather, inputs: {x: images.adf}}\n"
    "  var: {type: variance, inputs: {x: src.frames}, params: {ddof: 1}}\n"
    "outputs: {pixel_major: tp.pixel_major, per_position: per_position.total, back: back.pixel_major,\n"
    "          adf: adf.whole, pixel_stream: pixels.out, moments: var.moments, mean: var.mean,\n"
    "          variance: var.variance, normalized: var.normalized}\n";

static sl_code run_on(const char *path, int backend, int64_t chunk, sl_run *run, sl_error *err) {
  sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .backend = backend,
                        .chunk_positions = chunk, .threads = 2};
  sl_error_clear(err);
  return sl_run_pipeline(&req, run, err);
}

static void test_cuda_equals_cpu(void **state) {
  (void)state;
  if (!sl_test_cuda_available()) skip();
  char path[512];
  write_temp_file(path, sizeof path, "regions.yaml", k_regions);
  const int64_t chunks[] = {1, 5, 16, 63};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) {
    sl_run cpu, gpu;
    sl_error err;
    if (run_on(path, SL_BACKEND_CPU, chunks[c], &cpu, &err) != SL_OK) fail_msg("cpu: %s", err.msg);
    if (run_on(path, SL_BACKEND_CUDA, chunks[c], &gpu, &err) != SL_OK) fail_msg("cuda: %s", err.msg);
    for (int o = 0; o < cpu.result.n_outputs; o++) {
      const sl_output_data *a = &cpu.result.outputs[o], *b = output(&gpu, a->name);
      assert_int_equal(sl_desc_bytes(&a->desc), sl_desc_bytes(&b->desc));
      if (memcmp(a->data, b->data, (size_t)sl_desc_bytes(&a->desc)))
        fail_msg("chunk %lld: output %s differs between CPU and CUDA", (long long)chunks[c], a->name);
    }
    sl_run_free(&cpu);
    sl_run_free(&gpu);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_equals_cpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
