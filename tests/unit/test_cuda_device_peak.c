/* Every device byte planned: the shipped STEM pipeline (pipelines/
 * stem_products.yaml: hdf5_source, bslz4_decode, mask_correct,
 * virtual_detectors over the fitted disk, com, dpc, idpc) on the CUDA
 * backend, on a Dectris-style acquisition (128 x 64 positions of 64 x 64
 * u16, bitshuffle-LZ4, in two chunks of 4096 positions) large enough that
 * its nodes' device tables (prefetch buffers, mask corrections, class
 * tables, transform fields) are tens of MiB (the source's two prefetch
 * buffers alone 64 MiB; mask_correct's are planned for the file's bad
 * pixels, none here),
 * against the driver's own count (cudaMemGetInfo):
 *
 *  - the report's measured device peak (the pool's, which holds every buffer,
 *    workspace and device table) is at most the planned one;
 *  - every device allocation of the run was the pool's: the backend's
 *    allocator, watched through a wrapped ops table, held at its peak
 *    exactly the pool's measured peak;
 *  - the device memory the run took (the driver's used memory, sampled after
 *    every batch and before each block of the pool goes back, less what was
 *    used before the run) is at most the pool's blocks, each rounded up to
 *    the driver's 2 MiB pages, plus ALLOWANCE (below);
 *  - the plan's device tables are larger than ALLOWANCE, so a launcher that
 *    allocated its tables itself again would fail the check above.
 *
 * A first run loads the context, the kernels' modules and cuFFT, and grows
 * the kernels' local memory; the measured run is the second. The test runs
 * alone (RUN_SERIAL in tests/CMakeLists.txt): the driver's count is the
 * device's. Skips visibly without a CUDA device or the bitshuffle plugin. */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include "engine/backend/backend.h"
#include "engine/exec/run.h"
#include "nodes/registry.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/disk_acquisition.h"
#ifdef SLUICE_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

/* What the run may take beyond the pool's blocks: cuFFT's two plans for the
 * 128 x 128 transforms keep a little device memory of their own (twiddle
 * factors, kernel parameters: well under a MiB, but each allocation takes at
 * least a 2 MiB page), the backend creates its streams and events for the
 * run, and the driver keeps some bookkeeping: 12 pages of 2 MiB. */
#define ALLOWANCE ((int64_t)24 << 20)
#define DRIVER_PAGE ((int64_t)2 << 20)

static char g_master[512];
static bool g_compressed;

static int setup(void **state) {
  (void)state;
  g_compressed = fx_init_plugins();
  if (!g_compressed || !sl_test_cuda_available()) return 0;
  /* A disk of radius 10 in the middle of 64 x 64 frames; 2 x 4096 frames. */
  const disk_acquisition q = {.frames = {4096, 4096}, .h = 64, .w = 64, .row = 32, .col = 32, .radius = 10};
  disk_acquisition_write("devpeak", &q, g_master, sizeof g_master);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

#ifdef SLUICE_HAVE_CUDA
/* ---- the backend's allocator and the driver, watched ---------------------------- */

static sl_backend_ops g_watch;
static int64_t g_held, g_held_peak;       /* bytes the backend allocated and holds */
static int64_t g_paged, g_paged_peak;     /* the same, each rounded up to a driver page */
static size_t g_used_base, g_used_peak;   /* the driver's used device memory */

static int64_t paged(size_t bytes) { return ((int64_t)bytes + DRIVER_PAGE - 1) / DRIVER_PAGE * DRIVER_PAGE; }

static void sample_driver(void) {
  size_t used = 0;
  if (sl_cuda_memory_report(NULL, NULL, NULL, &used) == SL_OK && used > g_used_peak) g_used_peak = used;
}

static sl_code watch_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  sl_code rc = sl_cuda_backend_ops.alloc(b, bytes, ptr, err);
  if (rc != SL_OK) return rc;
  g_held += (int64_t)bytes;
  g_paged += paged(bytes);
  if (g_held > g_held_peak) g_held_peak = g_held;
  if (g_paged > g_paged_peak) g_paged_peak = g_paged;
  return SL_OK;
}

static void watch_free(sl_backend *b, void *ptr, size_t bytes) {
  sample_driver(); /* the pool gives its blocks back at the end: all of them still there */
  g_held -= (int64_t)bytes;
  g_paged -= paged(bytes);
  sl_cuda_backend_ops.free(b, ptr, bytes);
}

static sl_code watch_batch_wait(sl_backend *b, sl_error *err) {
  sl_code rc = sl_cuda_backend_ops.batch_wait(b, err);
  sample_driver(); /* after every level: the launchers' own state is alive */
  return rc;
}

static sl_code run_products(const sl_backend_ops *ops, sl_run *r, sl_error *err) {
  const char *src = getenv("SLUICE_SOURCE_DIR");
  char file[1024];
  snprintf(file, sizeof file, "%s/pipelines/stem_products.yaml", src && src[0] ? src : "../..");
  sl_setting sets[2] = {{.name = "input", .value = g_master}, {.name = "scan_shape", .value = "[128, 64]"}};
  sl_run_request req = {.file = file, .registry = sl_nodes_registry(), .sets = sets, .n_sets = 2,
                        .backend = SL_BACKEND_CUDA, .chunk_positions = 4096, .threads = 2,
                        .ops_override = ops};
  sl_error_clear(err);
  memset(r, 0, sizeof *r);
  return sl_run_pipeline(&req, r, err);
}
#endif

static void t_every_byte_planned(void **state) {
  (void)state;
  if (!g_compressed) {
    print_message("SKIP: the pipeline decodes bitshuffle-LZ4 (plugin not found)\n");
    skip();
  }
  if (!sl_test_cuda_available()) skip();
#ifdef SLUICE_HAVE_CUDA
  sl_error err;
  sl_run r;
  if (run_products(NULL, &r, &err) != SL_OK) fail_msg("first run: %s", err.msg);
  sl_run_free(&r);

  g_watch = sl_cuda_backend_ops;
  g_watch.alloc = watch_alloc;
  g_watch.free = watch_free;
  g_watch.batch_wait = watch_batch_wait;
  g_held = g_held_peak = g_paged = g_paged_peak = 0;
  assert_int_equal(sl_cuda_memory_report(NULL, NULL, NULL, &g_used_base), SL_OK);
  g_used_peak = g_used_base;
  if (run_products(&g_watch, &r, &err) != SL_OK) fail_msg("measured run: %s", err.msg);
  const sl_exec_result *res = &r.result;
  const int64_t tables = r.plan->device_state_bytes;
  const int64_t taken = (int64_t)(g_used_peak - g_used_base);
  print_message("device bytes: planned %lld, measured (pool) %lld, of which device tables %lld; backend held "
                "%lld (%lld in whole pages); the driver's count rose by %lld (allowance %lld)\n",
                (long long)res->planned_peak_bytes, (long long)res->measured_peak_bytes, (long long)tables,
                (long long)g_held_peak, (long long)g_paged_peak, (long long)taken, (long long)ALLOWANCE);
  assert_true(res->measured_peak_bytes <= res->planned_peak_bytes);
  assert_int_equal(g_held_peak, res->measured_peak_bytes);
  assert_int_equal(g_held, 0);
  assert_true(taken <= g_paged_peak + ALLOWANCE);
  assert_true(tables > ALLOWANCE);
  sl_run_free(&r);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_every_byte_planned),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
