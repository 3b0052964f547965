/* The CUDA backend (engine/backend/cuda). Without a device (or without the
 * backend built in) the device tests skip visibly ("SKIP: no CUDA device")
 * and what can be checked on the host still is: the clear "no device" error
 * of probe, create, selection and a run, and the kernel registry's table.
 *
 * With a device: probe fields, transfers (round trip, zero, copy, pinned
 * staging), batches (a real kernel, a launch that fails with its node and
 * chunk, a launcher error, recovery afterwards), the registry check at
 * create, 20 create/alloc/free/destroy cycles leaving the device's free
 * memory where it was, an asynchronous device fault (in a child process,
 * because it poisons the CUDA context) that names the batch's node and chunk
 * and still lets the backend be destroyed, a pipeline of host nodes that
 * gives on CUDA exactly what it gives on the CPU, and the asynchronous
 * interface: the launchers' device environment, events and copies on both
 * queues (ordered only by events), a helper thread bound to the device.
 *
 * Environment: SLUICE_CUDA_TEST_NO_FAULT=1 skips the device-fault test (for
 * compute-sanitizer, which reports the deliberate fault). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>

#include "nodes/registry.h"
#include "engine/backend/backend.h"
#include "engine/exec/run.h"
#include "engine/graph/graph.h"
#include "tests/unit/test_support.h"
#ifdef SLUICE_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "shaders/cuda/selftest.h"
#endif

extern char **environ;

__attribute__((unused)) static const char *k_host_chain =
    "pipeline: host_chain\n"
    "nodes:\n"
    "  r: {type: ramp, params: {positions: [13, 11], item_shape: [40], dtype: f64}}\n"
    "  a: {type: affine, inputs: {x: r.out}, params: {scale: 3, offset: 0.25}}\n"
    "  b: {type: affine, inputs: {x: a.y}, params: {scale: -0.5, offset: 2}}\n"
    "outputs: {first: a.y, second: b.y}\n";

__attribute__((unused)) static sl_code run_chain(int backend, int64_t chunk, sl_run *run, sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, "host_chain.yaml", k_host_chain);
  sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .backend = backend,
                        .chunk_positions = chunk, .threads = 2};
  sl_error_clear(err);
  return sl_run_pipeline(&req, run, err);
}

#ifndef SLUICE_HAVE_CUDA

static void test_not_built_in(void **state) {
  (void)state;
  assert_null(sl_backend_ops_for(SL_BACKEND_CUDA));
  sl_backend_kind k;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_backend_select(SL_BACKEND_CUDA, &k, &err), SL_ERR_BACKEND);
  assert_non_null(strstr(err.msg, "not available in this build"));
  print_message("SKIP: no CUDA device (the CUDA backend is not built in: no nvcc at configure time)\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_not_built_in)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static bool g_have_device;
static char g_reason[1024];

static void require_device(void) {
  if (!g_have_device) {
    print_message("SKIP: no CUDA device (%s)\n", g_reason);
    skip();
  }
}

static const sl_backend_ops *cuda(void) { return &sl_cuda_backend_ops; }

static sl_backend *create_or_fail(int threads) {
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  sl_code rc = cuda()->create(threads, &b, &err);
  if (rc != SL_OK) fail_msg("cuda create failed: %s", err.msg);
  assert_non_null(b);
  return b;
}

/* A one-thread backend on the device (the test is skipped without one),
 * with err cleared for the test's calls. */
static sl_backend *device_backend(sl_error *err) {
  require_device();
  sl_error_clear(err);
  return create_or_fail(1);
}

/* The backend holds these many device and pinned host allocations and bytes. */
static void assert_held(const sl_backend *b, int64_t device_allocs, uint64_t device_bytes,
                        int64_t pinned_allocs, uint64_t pinned_bytes) {
  int64_t da, pa;
  uint64_t db, pb;
  sl_cuda_backend_held(b, &da, &db, &pa, &pb);
  assert_int_equal(da, device_allocs);
  assert_int_equal(db, device_bytes);
  assert_int_equal(pa, pinned_allocs);
  assert_int_equal(pb, pinned_bytes);
}

static void assert_nothing_held(const sl_backend *b) { assert_held(b, 0, 0, 0, 0); }

/* ---- without a device too ---- */

static void test_registry_table(void **state) {
  (void)state;
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  assert_non_null(k);
  assert_true(n >= 1);
  bool fill = false;
  for (int i = 0; i < n; i++) {
    assert_non_null(k[i].name);
    assert_non_null(k[i].func);
    assert_int_equal(k[i].abi, SL_KERNEL_ABI_VERSION);
    if (!strcmp(k[i].name, "sl_k_fill_u32")) fill = true;
    for (int j = 0; j < i; j++)
      if (!strcmp(k[i].name, k[j].name)) fail_msg("kernel '%s' is registered twice", k[i].name);
  }
  assert_true(fill);
  int again = 0;
  assert_ptr_equal(sl_cuda_kernels(&again), k); /* built once */
  assert_int_equal(again, n);
}

/* Every kernel file says which node types launch its kernels (the run
 * loads those before the first call, sl_backend_ops.warm_up_nodes): each
 * type named is a registered node with a CUDA kernel, and every node type
 * with a CUDA kernel is named by some file, except those whose CUDA path
 * launches none of the registry's kernels (copies, cuFFT plans, host
 * work). A node whose kernels are not named still runs; its first call
 * loads them, inside the run. */
/* Every word of a kernel's `nodes` list is a registered node type with a
 * CUDA kernel (`what` names the list in a failure). */
static void assert_cuda_node_types(const sl_node_registry *reg, const char *what, const char *list) {
  char word[128];
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    size_t w = strcspn(p, " ");
    if (!w) break;
    snprintf(word, sizeof word, "%.*s", (int)w, p);
    const sl_node_desc *d = sl_registry_find(reg, word);
    if (!d) fail_msg("%s names node type '%s', which is not registered", what, word);
    if (!d->kernel[SL_BACKEND_CUDA]) fail_msg("%s names node type '%s', which has no CUDA kernel", what, word);
    p += w;
  }
}

static void test_registry_node_types(void **state) {
  (void)state;
  const sl_node_registry *reg = sl_nodes_registry();
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  char what[160];
  for (int i = 0; i < n; i++) {
    if (!k[i].nodes) fail_msg("kernel '%s': its file names no node types (SL_CUDA_REGISTER_KERNELS)", k[i].name);
    snprintf(what, sizeof what, "kernel '%s'", k[i].name);
    assert_cuda_node_types(reg, what, k[i].nodes);
  }
  /* the CUDA node types that launch no registered kernel: device copies
   * (gather) and views (stream) */
  const sl_device_kernel none = {.nodes = "gather stream"};
  assert_cuda_node_types(reg, "the list of types without kernels", none.nodes);
  int count = 0;
  const sl_node_desc **all = sl_registry_list(reg, &count);
  for (int t = 0; t < count; t++) {
    if (!all[t]->kernel[SL_BACKEND_CUDA]) continue;
    bool named = false;
    for (int i = 0; i < n && !named; i++) named = sl_device_kernel_serves(&k[i], all[t]->type);
    const bool listed = sl_device_kernel_serves(&none, all[t]->type);
    if (!named && !listed)
      fail_msg("node type '%s' has a CUDA kernel but no kernel file names it (SL_CUDA_REGISTER_KERNELS)",
               all[t]->type);
    if (named && listed) fail_msg("node type '%s' is named by a kernel file: take it off the list", all[t]->type);
  }
  free(all);
}

static void test_no_device_is_a_clear_error(void **state) {
  (void)state;
  if (g_have_device) {
    print_message("SKIP: a CUDA device is present (this test checks the no-device errors)\n");
    skip();
  }
  assert_ptr_equal(sl_backend_ops_for(SL_BACKEND_CUDA), &sl_cuda_backend_ops);
  sl_backend_caps caps;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(cuda()->probe(&caps, &err), SL_ERR_BACKEND);
  assert_int_equal(strncmp(err.msg, "no CUDA device", 14), 0);
  sl_backend *b = (sl_backend *)&caps; /* must be reset to NULL */
  sl_error_clear(&err);
  assert_int_equal(cuda()->create(0, &b, &err), SL_ERR_BACKEND);
  assert_null(b);
  assert_int_equal(strncmp(err.msg, "no CUDA device", 14), 0);
  /* No silent fallback for an explicit backend; auto picks the CPU. */
  sl_backend_kind k = SL_BACKEND_CUDA;
  sl_error_clear(&err);
  assert_int_equal(sl_backend_select(SL_BACKEND_CUDA, &k, &err), SL_ERR_BACKEND);
  assert_non_null(strstr(err.msg, "no CUDA device"));
  sl_error_clear(&err);
  assert_int_equal(sl_backend_select(SL_BACKEND_AUTO, &k, &err), SL_OK);
  assert_int_equal(k, SL_BACKEND_CPU);
  /* A run asking for CUDA fails before allocating anything. */
  sl_run run;
  assert_int_equal(run_chain(SL_BACKEND_CUDA, 0, &run, &err), SL_ERR_BACKEND);
  assert_non_null(strstr(err.msg, "no CUDA device"));
  assert_false(run.executed);
  sl_run_free(&run);
  /* The memory report needs a device too. */
  size_t f = 1;
  assert_int_equal(sl_cuda_memory_report(NULL, &f, NULL, NULL), SL_ERR_BACKEND);
  int64_t da = -1;
  sl_cuda_backend_held(NULL, &da, NULL, NULL, NULL);
  assert_int_equal(da, 0);
  /* The CPU backend's memory is the host's: no queues, events or env. */
  assert_null(sl_cpu_backend_ops.device_env);
  assert_null(sl_cpu_backend_ops.copy_async);
  assert_null(sl_cpu_backend_ops.event_create);
}

/* ---- with a device ---- */

static void test_probe_fields(void **state) {
  (void)state;
  require_device();
  sl_backend_caps caps;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(cuda()->probe(&caps, &err), SL_OK);
  assert_int_equal(caps.kind, SL_BACKEND_CUDA);
  assert_true(caps.compute_units > 0);
  assert_true(caps.memory_bytes > ((uint64_t)256 << 20));
  assert_true(caps.device_memory);
  assert_true(caps.bytes_per_second > 1e11);
  assert_true(caps.ops_per_second > 1e11);
  assert_non_null(strstr(caps.device, ", sm_"));
  assert_non_null(strstr(caps.device, " SMs, "));
  size_t f = 0, t = 0, used = 0;
  assert_int_equal(sl_cuda_memory_report(NULL, &f, &t, &used), SL_OK);
  assert_true(caps.memory_bytes <= t);
  assert_int_equal(used, t - f);
  print_message("cuda probe: %s; %.3g B/s, %.3g op/s, %d SMs, free %zu of %zu bytes\n", caps.device,
                caps.bytes_per_second, caps.ops_per_second, caps.compute_units, f, t);

  sl_backend *b = create_or_fail(2);
  assert_int_equal(b->caps.kind, SL_BACKEND_CUDA);
  assert_true(b->caps.device_memory);
  assert_int_equal(b->ops->workers(b), 2);
  const sl_device_env *env = b->ops->device_env(b);
  assert_non_null(env);
  assert_true(env->compute_capability >= 80);
  assert_true(env->shared_memory_per_block >= 48 * 1024);
  assert_int_equal(env->multiprocessors, caps.compute_units);
  assert_non_null(env->queue);
  assert_non_null(env->copy_queue);
  assert_true(env->queue != env->copy_queue);
  assert_non_null(env->sync);
  assert_non_null(env->check_launch);
  b->ops->destroy(b);
}

static void test_round_trip_zero_copy(void **state) {
  (void)state;
  sl_error err;
  sl_backend *b = device_backend(&err);
  const size_t n = (1u << 20) + 13; /* not a multiple of anything */
  uint8_t *src = malloc(n), *back = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + 7);
  void *d1 = NULL, *d2 = NULL;
  assert_int_equal(b->ops->alloc(b, n, &d1, &err), SL_OK);
  assert_int_equal(b->ops->alloc(b, n, &d2, &err), SL_OK);
  assert_held(b, 2, 2 * n, 0, 0);
  /* round trip */
  assert_int_equal(b->ops->upload(b, d1, src, n, &err), SL_OK);
  memset(back, 0, n);
  assert_int_equal(b->ops->download(b, back, d1, n, &err), SL_OK);
  assert_memory_equal(back, src, n);
  /* copy: all of d1 to d2, then d2 back */
  assert_int_equal(b->ops->copy(b, d2, d1, n, &err), SL_OK);
  memset(back, 0, n);
  assert_int_equal(b->ops->download(b, back, d2, n, &err), SL_OK);
  assert_memory_equal(back, src, n);
  /* zero a range in the middle of d2 */
  const size_t off = 3, len = 100003;
  assert_int_equal(b->ops->zero(b, (uint8_t *)d2 + off, len, &err), SL_OK);
  assert_int_equal(b->ops->download(b, back, d2, n, &err), SL_OK);
  for (size_t i = 0; i < n; i++) {
    uint8_t want = i >= off && i < off + len ? 0 : src[i];
    if (back[i] != want) fail_msg("byte %zu: %u, expected %u", i, back[i], want);
  }
  /* zero-byte transfers are no-ops */
  assert_int_equal(b->ops->upload(b, d1, src, 0, &err), SL_OK);
  assert_int_equal(b->ops->download(b, back, d1, 0, &err), SL_OK);
  b->ops->free(b, d1, n);
  b->ops->free(b, d2, n);
  assert_nothing_held(b);
  free(src);
  free(back);
  b->ops->destroy(b);
}

/* Same bits, except that a NaN equals any NaN: the device makes the
 * canonical NaN where x86 keeps an operand's payload. */
static bool same_values(sl_dtype t, const void *a, const void *b, int64_t n) {
  if (t != SL_F32 && t != SL_F64 && t != SL_C64) return !memcmp(a, b, (size_t)n * sl_dtype_size(t));
  for (int64_t i = 0; i < (t == SL_F64 ? n : t == SL_C64 ? 2 * n : n); i++) {
    double x = t == SL_F64 ? ((const double *)a)[i] : ((const float *)a)[i];
    double y = t == SL_F64 ? ((const double *)b)[i] : ((const float *)b)[i];
    bool same = t == SL_F64 ? !memcmp((const double *)a + i, (const double *)b + i, 8)
                            : !memcmp((const float *)a + i, (const float *)b + i, 4);
    if (!same && !(x != x && y != y)) return false;
  }
  return true;
}

/* Declared reductions on the device give the host merge's bits: identities,
 * wrapping integer sums, float sums, and min/max with NaN, per dtype. */
static void test_combines_match_host(void **state) {
  (void)state;
  sl_error err;
  sl_backend *b = device_backend(&err);
  const int64_t n = 100003;
  const sl_dtype types[] = {SL_U8, SL_U16, SL_U32, SL_U64, SL_I32, SL_I64, SL_F32, SL_F64, SL_C64};
  const sl_combine combines[] = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX};
  for (size_t t = 0; t < SL_COUNT_OF(types); t++)
    for (size_t c = 0; c < SL_COUNT_OF(combines); c++) {
      if (sl_combine_check(combines[c], types[t], NULL) != SL_OK) continue;
      size_t bytes = (size_t)n * sl_dtype_size(types[t]);
      uint8_t *acc = malloc(bytes), *part = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
      for (size_t i = 0; i < bytes; i++) acc[i] = (uint8_t)(i * 131 + 7), part[i] = (uint8_t)(i * 29 + t);
      void *dacc = NULL, *dpart = NULL;
      assert_int_equal(b->ops->alloc(b, bytes, &dacc, &err), SL_OK);
      assert_int_equal(b->ops->alloc(b, bytes, &dpart, &err), SL_OK);
      /* identity */
      assert_int_equal(b->ops->combine_identity(b, combines[c], types[t], dacc, n, &err), SL_OK);
      assert_int_equal(b->ops->download(b, got, dacc, bytes, &err), SL_OK);
      sl_combine_identity_host(combines[c], types[t], want, 0, n);
      assert_memory_equal(got, want, bytes);
      /* merge */
      memcpy(want, acc, bytes);
      sl_combine_merge_host(combines[c], types[t], want, part, 0, n);
      assert_int_equal(b->ops->upload(b, dacc, acc, bytes, &err), SL_OK);
      assert_int_equal(b->ops->upload(b, dpart, part, bytes, &err), SL_OK);
      assert_int_equal(b->ops->combine_merge(b, combines[c], types[t], dacc, dpart, n, &err), SL_OK);
      assert_int_equal(b->ops->download(b, got, dacc, bytes, &err), SL_OK);
      if (!same_values(types[t], got, want, n))
        fail_msg("%s %s: device merge differs from the host's", sl_combine_name(combines[c]),
                 sl_dtype_name(types[t]));
      b->ops->free(b, dacc, bytes);
      b->ops->free(b, dpart, bytes);
      free(acc), free(part), free(want), free(got);
    }
  b->ops->destroy(b);
}

static void test_pinned_host_memory(void **state) {
  (void)state;
  sl_error err;
  sl_backend *b = device_backend(&err);
  const size_t n = 4u << 20;
  uint32_t *h1 = NULL, *h2 = NULL;
  void *d = NULL;
  assert_int_equal(b->ops->host_alloc(b, n, (void **)&h1, &err), SL_OK);
  assert_int_equal(b->ops->host_alloc(b, n, (void **)&h2, &err), SL_OK);
  assert_held(b, 0, 0, 2, 2 * n);
  for (size_t i = 0; i < n / 4; i++) h1[i] = (uint32_t)(i * 2654435761u);
  assert_int_equal(b->ops->alloc(b, n, &d, &err), SL_OK);
  assert_int_equal(b->ops->upload(b, d, h1, n, &err), SL_OK); /* asynchronous */
  assert_int_equal(b->ops->download(b, h2, d, n, &err), SL_OK); /* same stream: after it */
  assert_memory_equal(h1, h2, n);
  b->ops->free(b, d, n);
  b->ops->host_free(b, h1, n);
  b->ops->host_free(b, h2, n);
  assert_nothing_held(b);
  b->ops->destroy(b);
}

static sl_code failing_launcher(sl_kernel_args *a) {
  return sl_fail(a->err, SL_ERR_BACKEND, "launcher refused: test");
}

static void init_args(sl_kernel_args *a, sl_backend *b, const sl_node *node, sl_error *kerr,
                      int64_t chunk) {
  memset(a, 0, sizeof *a);
  a->backend = b;
  a->node = node;
  a->node_id = node->id; /* what the backend names in errors */
  a->chunk = chunk;
  a->n_chunks = chunk + 1;
  a->err = kerr;
}

static void test_batches(void **state) {
  (void)state;
  sl_error err, kerr;
  sl_backend *b = device_backend(&err);
  sl_error_clear(&kerr);
  sl_node fill_node, other_node, bad_node;
  memset(&fill_node, 0, sizeof fill_node);
  memset(&other_node, 0, sizeof other_node);
  memset(&bad_node, 0, sizeof bad_node);
  fill_node.id = (char *)"fill_node";
  other_node.id = (char *)"other_node";
  bad_node.id = (char *)"bad_node";
  const int64_t count = 100001;
  void *d = NULL;
  assert_int_equal(b->ops->alloc(b, (size_t)count * 8, &d, &err), SL_OK);
  uint32_t *back = malloc((size_t)count * 8);

  /* Two real kernels in one batch, in stream order. */
  sl_kernel_args a1, a2;
  init_args(&a1, b, &fill_node, &kerr, 0);
  a1.out[0] = d;
  a1.pos_start = 0xABCD;
  a1.pos_count = count;
  init_args(&a2, b, &other_node, &kerr, 0);
  a2.out[0] = (uint32_t *)d + count;
  a2.pos_start = 0x1234;
  a2.pos_count = count;
  assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_fill, &a1, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_fill, &a2, &err), SL_OK);
  assert_ptr_equal(a1.dev, b->ops->device_env(b)); /* encode lends the launchers the env */
  assert_int_equal(b->ops->batch_commit(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_wait(b, &err), SL_OK);
  assert_int_equal(b->ops->download(b, back, d, (size_t)count * 8, &err), SL_OK);
  for (int64_t i = 0; i < count; i++) {
    if (back[i] != 0xABCD) fail_msg("fill: [%lld] = %u", (long long)i, back[i]);
    if (back[count + i] != 0x1234) fail_msg("fill 2: [%lld] = %u", (long long)i, back[count + i]);
  }

  /* A launch that fails names its kernel, node and chunk, at encode and at
   * wait; the batch is still waited for. */
  sl_kernel_args bad;
  init_args(&bad, b, &bad_node, &kerr, 7);
  bad.out[0] = d;
  sl_error_clear(&err);
  sl_error_clear(&kerr);
  assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_fill, &a1, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_bad_launch, &bad, &err), SL_ERR_BACKEND);
  assert_int_equal(b->ops->batch_wait(b, &err), SL_ERR_BACKEND);
  assert_int_equal(err.code, SL_ERR_BACKEND);
  assert_string_equal(err.node, "bad_node");
  assert_int_equal(err.chunk, 7);
  assert_non_null(strstr(err.msg, "sl_k_fill_u32"));
  print_message("launch failure reported as: node '%s', chunk %lld: %s\n", err.node,
                (long long)err.chunk, err.msg);

  /* A launcher that fails by itself: the same context. */
  sl_error_clear(&err);
  sl_error_clear(&kerr);
  init_args(&bad, b, &bad_node, &kerr, 9);
  assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, failing_launcher, &bad, &err), SL_ERR_BACKEND);
  assert_int_equal(b->ops->batch_wait(b, &err), SL_ERR_BACKEND);
  assert_string_equal(err.node, "bad_node");
  assert_int_equal(err.chunk, 9);
  assert_non_null(strstr(err.msg, "launcher refused"));

  /* Encoding outside a batch is a programming error, reported. */
  sl_error_clear(&err);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_fill, &a1, &err), SL_ERR_INTERNAL);

  /* Launch errors are not sticky: the backend keeps working. */
  sl_error_clear(&err);
  sl_error_clear(&kerr);
  a1.pos_start = 77;
  assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_encode(b, sl_cuda_selftest_fill, &a1, &err), SL_OK);
  assert_int_equal(b->ops->batch_commit(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_wait(b, &err), SL_OK);
  assert_int_equal(b->ops->download(b, back, d, 16, &err), SL_OK);
  assert_int_equal(back[0], 77);
  assert_int_equal(back[3], 77);

  /* An empty batch (a level of host nodes only) is fine. */
  assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_commit(b, &err), SL_OK);
  assert_int_equal(b->ops->batch_wait(b, &err), SL_OK);

  b->ops->free(b, d, (size_t)count * 8);
  free(back);
  assert_nothing_held(b);
  b->ops->destroy(b);
}

static void test_registry_check_at_create(void **state) {
  (void)state;
  require_device();
  /* create checks every registered kernel's ABI and the backend's own
   * kernel's code; every kernel has code for this device: */
  sl_backend *b = create_or_fail(1);
  sl_error err;
  sl_error_clear(&err);
  if (sl_cuda_backend_check_kernels(b, &err) != SL_OK) fail_msg("%s", err.msg);
  int n = 0;
  sl_cuda_kernels(&n);
  print_message("kernel registry: %d kernels, all with code for sm_%d\n", n, b->ops->device_env(b)->compute_capability);
  b->ops->destroy(b);
}

static void test_cycles_do_not_leak(void **state) {
  (void)state;
  sl_error err;
  /* The first create makes the primary context; measure after it. */
  sl_backend *b = device_backend(&err);
  size_t free0 = 0, total = 0, used0 = 0;
  assert_int_equal(sl_cuda_memory_report(b, &free0, &total, &used0), SL_OK);
  b->ops->destroy(b);
  for (int cycle = 0; cycle < 20; cycle++) {
    b = create_or_fail(1);
    void *d[3] = {0};
    void *h = NULL;
    size_t sizes[3] = {64u << 20, 1u << 20, 4097};
    for (int k = 0; k < 3; k++) assert_int_equal(b->ops->alloc(b, sizes[k], &d[k], &err), SL_OK);
    assert_int_equal(b->ops->host_alloc(b, 1u << 20, &h, &err), SL_OK);
    assert_int_equal(b->ops->zero(b, d[0], sizes[0], &err), SL_OK);
    assert_int_equal(b->ops->upload(b, d[1], h, 1u << 20, &err), SL_OK);
    assert_int_equal(b->ops->batch_begin(b, &err), SL_OK);
    assert_int_equal(b->ops->batch_wait(b, &err), SL_OK);
    for (int k = 0; k < 3; k++) b->ops->free(b, d[k], sizes[k]);
    b->ops->host_free(b, h, 1u << 20);
    assert_nothing_held(b);
    b->ops->destroy(b);
  }
  size_t free1 = 0, used1 = 0;
  assert_int_equal(sl_cuda_memory_report(NULL, &free1, NULL, &used1), SL_OK);
  long long drift = (long long)free0 - (long long)free1;
  print_message("device memory in use: %zu bytes before, %zu after 20 cycles (drift %lld bytes)\n", used0,
                used1, drift);
  assert_true(drift <= 2LL << 20 && drift >= -(2LL << 20));
}

/* ---- asynchronous copies and events ---- */

/* An upload on the copy queue, then on the compute queue (after waiting for
 * the upload's event) a device copy and a download into pinned memory,
 * waited for by the host with an event: the bytes come back. */
static void test_async_copies_and_events(void **state) {
  (void)state;
  sl_error err;
  sl_backend *b = device_backend(&err);
  const sl_backend_ops *o = b->ops;
  const size_t n = (32u << 20) + 5; /* large enough that an unordered copy would read early */
  uint8_t *h1 = NULL, *h2 = NULL;
  void *d1 = NULL, *d2 = NULL;
  assert_int_equal(o->host_alloc(b, n, (void **)&h1, &err), SL_OK);
  assert_int_equal(o->host_alloc(b, n, (void **)&h2, &err), SL_OK);
  assert_int_equal(o->alloc(b, n, &d1, &err), SL_OK);
  assert_int_equal(o->alloc(b, n, &d2, &err), SL_OK);
  sl_event *up = NULL, *done = NULL;
  assert_int_equal(o->event_create(b, &up, &err), SL_OK);
  assert_int_equal(o->event_create(b, &done, &err), SL_OK);
  assert_non_null(up);
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < n; i++) h1[i] = (uint8_t)(i * 131 + 7 + round);
    memset(h2, 0, n);
    assert_int_equal(o->zero(b, d2, n, &err), SL_OK);
    assert_int_equal(o->copy_async(b, SL_QUEUE_COPY, d1, h1, n, &err), SL_OK);
    assert_int_equal(o->event_record(b, up, SL_QUEUE_COPY, &err), SL_OK);
    assert_int_equal(o->queue_wait_event(b, SL_QUEUE_COMPUTE, up, &err), SL_OK);
    assert_int_equal(o->copy_async(b, SL_QUEUE_COMPUTE, d2, d1, n, &err), SL_OK);
    assert_int_equal(o->copy_async(b, SL_QUEUE_COMPUTE, h2, d2, n, &err), SL_OK);
    assert_int_equal(o->event_record(b, done, SL_QUEUE_COMPUTE, &err), SL_OK);
    assert_int_equal(o->event_wait(b, done, &err), SL_OK);
    if (memcmp(h1, h2, n) != 0) fail_msg("round %d: the bytes did not come back", round);
  }
  /* zero-byte copies are no-ops; waiting for an event twice is fine */
  assert_int_equal(o->copy_async(b, SL_QUEUE_COPY, d1, h1, 0, &err), SL_OK);
  assert_int_equal(o->event_wait(b, done, &err), SL_OK);
  o->event_destroy(b, up);
  o->event_destroy(b, done);
  o->free(b, d1, n);
  o->free(b, d2, n);
  o->host_free(b, h1, n);
  o->host_free(b, h2, n);
  assert_nothing_held(b);
  b->ops->destroy(b);
}

typedef struct copy_job {
  sl_backend *b;
  void *dst;
  const void *src;
  size_t n;
  sl_event *ev;
  sl_code rc;
  sl_error err;
} copy_job;

/* A helper thread: bind, upload on the copy queue, record the event. */
static void *copy_thread(void *arg) {
  copy_job *j = arg;
  const sl_backend_ops *o = j->b->ops;
  sl_error_clear(&j->err);
  j->rc = o->bind_thread(j->b, &j->err);
  if (j->rc == SL_OK) j->rc = o->copy_async(j->b, SL_QUEUE_COPY, j->dst, j->src, j->n, &j->err);
  if (j->rc == SL_OK) j->rc = o->event_record(j->b, j->ev, SL_QUEUE_COPY, &j->err);
  return NULL;
}

/* Copies enqueued by another thread (bound to the device) are ordered with
 * the compute queue by their event alone. */
static void test_helper_thread_copies(void **state) {
  (void)state;
  sl_error err;
  sl_backend *b = device_backend(&err);
  const sl_backend_ops *o = b->ops;
  const size_t n = 4u << 20;
  uint32_t *h = NULL, *back = malloc(n);
  void *d = NULL, *d2 = NULL;
  assert_int_equal(o->host_alloc(b, n, (void **)&h, &err), SL_OK);
  assert_int_equal(o->alloc(b, n, &d, &err), SL_OK);
  assert_int_equal(o->alloc(b, n, &d2, &err), SL_OK);
  for (size_t i = 0; i < n / 4; i++) h[i] = (uint32_t)(i * 2654435761u);
  copy_job j = {.b = b, .dst = d, .src = h, .n = n};
  assert_int_equal(o->event_create(b, &j.ev, &err), SL_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, copy_thread, &j), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  if (j.rc != SL_OK) fail_msg("helper thread: %s", j.err.msg);
  assert_int_equal(o->queue_wait_event(b, SL_QUEUE_COMPUTE, j.ev, &err), SL_OK);
  assert_int_equal(o->copy(b, d2, d, n, &err), SL_OK);
  assert_int_equal(o->download(b, back, d2, n, &err), SL_OK);
  assert_memory_equal(back, h, n);
  o->event_destroy(b, j.ev);
  o->free(b, d, n);
  o->free(b, d2, n);
  o->host_free(b, h, n);
  free(back);
  assert_nothing_held(b);
  b->ops->destroy(b);
}

/* The device-fault scenario, run in a child process (the fault poisons the
 * context for the rest of the process). Exit 0 when everything held. */
static int child_fault(void) {
  sl_backend *b = NULL;
  sl_error err, kerr;
  sl_error_clear(&err);
  sl_error_clear(&kerr);
  if (sl_cuda_backend_ops.create(1, &b, &err) != SL_OK) {
    fprintf(stderr, "child: create failed: %s\n", err.msg);
    return 2;
  }
  void *d = NULL;
  if (b->ops->alloc(b, 1024, &d, &err) != SL_OK) return 3;
  sl_node node;
  memset(&node, 0, sizeof node);
  node.id = (char *)"trap_node";
  sl_kernel_args a;
  init_args(&a, b, &node, &kerr, 3);
  int bad = 0;
  /* Batches run ahead of the host: the trap (chunk 3) is followed by a good
   * batch (chunk 4) before anything waits. Waits may see the fault or not
   * yet; the sync after them must, and must name the trap's batch, not the
   * later one. (SLUICE_CUDA_SYNC=1 reports it at the trap's own wait.) */
  sl_node later;
  memset(&later, 0, sizeof later);
  later.id = (char *)"later_node";
  sl_kernel_args a2;
  init_args(&a2, b, &later, &kerr, 4);
  a2.out[0] = d;
  a2.pos_count = 4;
  if (b->ops->batch_begin(b, &err) != SL_OK) bad |= 1;
  if (b->ops->batch_encode(b, sl_cuda_selftest_trap, &a, &err) != SL_OK) bad |= 2; /* asynchronous */
  if (b->ops->batch_commit(b, &err) != SL_OK) bad |= 4;
  sl_code w = b->ops->batch_wait(b, &err);
  if (w == SL_OK) {
    if (b->ops->batch_begin(b, &err) != SL_OK) bad |= 1;
    (void)b->ops->batch_encode(b, sl_cuda_selftest_fill, &a2, &err); /* may fail: the context is gone */
    (void)b->ops->batch_commit(b, &err);
    w = b->ops->batch_wait(b, &err);
    if (w == SL_OK) w = b->ops->sync(b, &err);
  }
  if (w != SL_ERR_BACKEND) bad |= 8;
  if (strcmp(err.node, "trap_node") != 0) bad |= 16;
  if (err.chunk != 3) bad |= 32;
  if (!strstr(err.msg, "in the batch of node trap_node (chunk 3)")) bad |= 64;
  fprintf(stderr, "child: device fault reported as: node '%s', chunk %lld: %s\n", err.node,
          (long long)err.chunk, err.msg);
  /* Everything after a sticky error fails, clearly, and tearing down is safe. */
  uint32_t x;
  sl_error_clear(&err);
  if (b->ops->download(b, &x, d, sizeof x, &err) == SL_OK) bad |= 128;
  b->ops->free(b, d, 1024);
  b->ops->destroy(b);
  if (bad) fprintf(stderr, "child: failed checks mask %d\n", bad);
  return bad ? 1 : 0;
}

static void test_device_fault_names_node_and_chunk(void **state) {
  (void)state;
  require_device();
  const char *nf = getenv("SLUICE_CUDA_TEST_NO_FAULT");
  if (nf && *nf && strcmp(nf, "0") != 0) {
    print_message("SKIP: SLUICE_CUDA_TEST_NO_FAULT is set\n");
    skip();
  }
  setenv("SLUICE_CUDA_TEST_CHILD", "fault", 1);
  char *argv[] = {(char *)"test_cuda_backend", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
  unsetenv("SLUICE_CUDA_TEST_CHILD");
  assert_int_equal(rc, 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_host_pipeline_matches_cpu(void **state) {
  (void)state;
  require_device();
  int64_t chunks[] = {0, 7, 143};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    sl_run cpu_run, cuda_run;
    sl_error err;
    if (run_chain(SL_BACKEND_CPU, chunks[c], &cpu_run, &err) != SL_OK) fail_msg("cpu run: %s", err.msg);
    if (run_chain(SL_BACKEND_CUDA, chunks[c], &cuda_run, &err) != SL_OK) fail_msg("cuda run: %s", err.msg);
    assert_true(cuda_run.plan->caps.device_memory);
    assert_int_equal(cuda_run.result.n_outputs, cpu_run.result.n_outputs);
    for (int o = 0; o < cpu_run.result.n_outputs; o++) {
      const sl_output_data *x = &cpu_run.result.outputs[o], *y = &cuda_run.result.outputs[o];
      assert_string_equal(x->name, y->name);
      int64_t bytes = sl_desc_bytes(&x->desc);
      assert_int_equal(bytes, sl_desc_bytes(&y->desc));
      assert_true(bytes > 0);
      assert_memory_equal(x->data, y->data, (size_t)bytes);
    }
    /* spot check against the closed form: ramp = (p*40+e) % 1024 */
    const double *first = cuda_run.result.outputs[0].data;
    assert_true(first[5] == 3.0 * 5 + 0.25);
    sl_run_free(&cpu_run);
    sl_run_free(&cuda_run);
  }
}

/* 20 whole runs through the executor (pool, staging, batches, downloads):
 * the device's free memory ends where it began. */
static void test_repeated_runs_do_not_leak(void **state) {
  (void)state;
  require_device();
  sl_run run;
  sl_error err;
  /* a first run makes the primary context and warms the runtime */
  if (run_chain(SL_BACKEND_CUDA, 7, &run, &err) != SL_OK) fail_msg("cuda run: %s", err.msg);
  sl_run_free(&run);
  size_t free0 = 0, used0 = 0;
  assert_int_equal(sl_cuda_memory_report(NULL, &free0, NULL, &used0), SL_OK);
  for (int i = 0; i < 20; i++) {
    if (run_chain(SL_BACKEND_CUDA, i % 2 ? 7 : 0, &run, &err) != SL_OK) fail_msg("cuda run %d: %s", i, err.msg);
    sl_run_free(&run);
  }
  size_t free1 = 0, used1 = 0;
  assert_int_equal(sl_cuda_memory_report(NULL, &free1, NULL, &used1), SL_OK);
  long long drift = (long long)free0 - (long long)free1;
  print_message("device memory in use: %zu bytes before, %zu after 20 pipeline runs (drift %lld bytes)\n",
                used0, used1, drift);
  assert_true(drift <= 2LL << 20 && drift >= -(2LL << 20));
}

static int setup(void **state) {
  (void)state;
  sl_backend_caps caps;
  sl_error err;
  sl_error_clear(&err);
  g_have_device = sl_cuda_backend_ops.probe(&caps, &err) == SL_OK;
  snprintf(g_reason, sizeof g_reason, "%s", g_have_device ? caps.device : err.msg);
  if (g_have_device) print_message("CUDA device: %s\n", g_reason);
  else print_message("SKIP: device tests (%s)\n", g_reason);
  return 0;
}

int main(void) {
  const char *child = getenv("SLUICE_CUDA_TEST_CHILD");
  if (child && !strcmp(child, "fault")) return child_fault();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_table),
      cmocka_unit_test(test_registry_node_types),
      cmocka_unit_test(test_no_device_is_a_clear_error),
      cmocka_unit_test(test_probe_fields),
      cmocka_unit_test(test_round_trip_zero_copy),
      cmocka_unit_test(test_pinned_host_memory),
      cmocka_unit_test(test_batches),
      cmocka_unit_test(test_registry_check_at_create),
      cmocka_unit_test(test_cycles_do_not_leak),
      cmocka_unit_test(test_async_copies_and_events),
      cmocka_unit_test(test_helper_thread_copies),
      cmocka_unit_test(test_device_fault_names_node_and_chunk),
      cmocka_unit_test(test_host_pipeline_matches_cpu),
      cmocka_unit_test(test_repeated_runs_do_not_leak),
      cmocka_unit_test(test_combines_match_host),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}

#endif
