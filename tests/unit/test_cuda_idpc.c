/* idpc on CUDA (shaders/cuda/stem/idpc.cu, run through the node descriptor)
 * against the host path (FFTW, nodes/common/fourier_integral.c) on square,
 * non-square and odd scans up to 512x512, with and without mirroring,
 * highpass and scale: max |gpu - cpu| / max |cpu| < 1e-12; an exact
 * gradient of a periodic potential integrated back to the potential on the
 * device; the device state reused by a second run; the host fallback on a
 * CUDA backend when cuFFT is not loaded (SLUICE_CUFFT=none: the CPU's
 * doubles, with a note saying why).
 *
 * The cuFFT loader (shaders/cuda/common/cufft_loader.c) is tested without a
 * GPU: "none", a missing library, a library without cuFFT's symbols, and the
 * real one where this machine has it. The device tests skip with a visible
 * line when no GPU (or no cuFFT) is present. */
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

#include "engine/backend/backend.h"
#include "engine/core/settings.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "shaders/cuda/common/cufft_loader.h"
#include "shaders/cuda/common/cufft_warm_up.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/cufft_test_main.h"
#include "tests/unit/device_table_lend.h"
#include "tests/unit/node_harness.h"
#include "tests/unit/stem_test_data.h"

extern const sl_node_desc sl_node_idpc;

static sl_backend *g_cpu, *g_cuda;

/* ---- the loader (no GPU needed) ------------------------------------------------- */

static bool api_empty(const sl_cufft_api *api) {
  return !api->create && !api->set_auto_allocation && !api->make_plan_many && !api->set_work_area &&
         !api->set_stream && !api->exec_z2z && !api->destroy && !api->get_version;
}

/* The setting cufft as its environment variable gives it (NULL: unset),
 * read again as a command does at start. */
static void cufft_setting(const char *value) {
  if (value) setenv("SLUICE_CUFFT", value, 1);
  else unsetenv("SLUICE_CUFFT");
  sl_error e;
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
}

/* Loads with SLUICE_CUFFT set to `env`: must fail with `needle` in why. */
static void expect_load_fails(const char *env, const char *needle) {
  cufft_setting(env);
  sl_cufft_api api;
  char why[512] = "";
  bool ok = sl_cufft_load(&api, why, sizeof why);
  cufft_setting(NULL);
  if (ok || !strstr(why, needle)) fprintf(stderr, "SLUICE_CUFFT=%s: ok %d why '%s' (want '%s')\n", env, ok, why, needle);
  assert_false(ok);
  assert_non_null(strstr(why, needle));
  assert_true(api_empty(&api));
}

static void test_loader_refusals(void **st) {
  (void)st;
  expect_load_fails("none", "SLUICE_CUFFT=none");
  expect_load_fails("/nonexistent/libcufft_missing.so.12", "/nonexistent/libcufft_missing.so.12");
  /* A real library that is not cuFFT: loads, lacks the first symbol. */
  expect_load_fails("libm.so.6", "libm.so.6 has no cufftCreate");
}

/* The default list finds the toolkit's cuFFT where there is one; every
 * function resolves and the version is a cuFFT version (10000 and up:
 * major * 1000 + minor * 100 + patch). Needs no GPU. */
static void test_loader_default(void **st) {
  (void)st;
  cufft_setting(NULL);
  sl_cufft_api api;
  char why[512] = "";
  if (!sl_cufft_load(&api, why, sizeof why)) {
    assert_true(why[0] != 0);
    print_message("SKIP: no cuFFT on this machine (%s)\n", why);
    return;
  }
  assert_non_null(api.create);
  assert_non_null(api.set_auto_allocation);
  assert_non_null(api.make_plan_many);
  assert_non_null(api.set_work_area);
  assert_non_null(api.set_stream);
  assert_non_null(api.exec_z2z);
  assert_non_null(api.destroy);
  assert_non_null(api.get_version);
  assert_true(api.library[0] != 0);
  int v = 0;
  assert_int_equal(api.get_version(&v), SL_CUFFT_SUCCESS);
  print_message("cuFFT %d from %s\n", v, api.library);
  assert_true(v >= 10000);
}

/* The background load's state for the plan's refreshed wait
 * (sl_plan_refresh_warm_up_waits): not finished before anything began it,
 * finished once joined (whether or not the library loaded: the helper has
 * returned). Needs no GPU. */
static void test_warm_up_done(void **st) {
  (void)st;
  cufft_setting(NULL);
  assert_false(sl_cufft_warm_up_done());
  sl_cufft_warm_up_begin();
  sl_cufft_warm_up_wait();
  assert_true(sl_cufft_warm_up_done());
}

static void test_result_names(void **st) {
  (void)st;
  assert_string_equal(sl_cufft_result_name(0), "CUFFT_SUCCESS");
  assert_string_equal(sl_cufft_result_name(2), "CUFFT_ALLOC_FAILED");
  assert_string_equal(sl_cufft_result_name(0x8), "CUFFT_INVALID_SIZE");
  assert_string_equal(sl_cufft_result_name(0x10), "CUFFT_NOT_SUPPORTED");
  assert_string_equal(sl_cufft_result_name(0x14), "CUFFT_NVSHMEM_FAILURE");
  assert_string_equal(sl_cufft_result_name(-1), "unknown cuFFT result");
  assert_string_equal(sl_cufft_result_name(0x15), "unknown cuFFT result");
}

/* ---- running the node on a backend ---------------------------------------------- */

static void make_idpc(sl_node *n, int64_t R, int64_t C, const kv *over, int n_over) {
  int64_t dims[2] = {R, C};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 2, dims, 0), sl_desc_make(SL_F64, 2, dims, 0)};
  sl_error e;
  sl_code rc = node_make(n, &sl_node_idpc, over, n_over, in, 2, &e);
  if (rc == SL_OK) rc = sl_node_idpc.prepare(n, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
}

/* The device state the last run_on built (NULL: none), seen before it went
 * with the run's device table. */
static void *g_built_state;

/* Runs n's kernel for backend b as the executor does (device buffers and the
 * node's device table, upload, one batch, download; then the device state
 * goes with the table): phi from (gr, gc). */
static void run_on(sl_backend *b, sl_node *n, const double *gr, const double *gc, double *phi) {
  const sl_backend_ops *o = b->ops;
  size_t bytes = (size_t)sl_desc_bytes(&n->in[0]);
  void *d[3] = {0};
  sl_error e;
  sl_error_clear(&e);
  for (int k = 0; k < 3; k++) assert_int_equal(o->alloc(b, bytes, &d[k], &e), SL_OK);
  assert_int_equal(o->upload(b, d[0], gr, bytes, &e), SL_OK);
  assert_int_equal(o->upload(b, d[1], gc, bytes, &e), SL_OK);
  assert_int_equal(o->zero(b, d[2], bytes, &e), SL_OK);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b;
  a.node = n;
  a.node_id = "idpc";
  a.state = n->state;
  a.pos_count = 1;
  a.n_chunks = 1;
  a.in[0] = d[0];
  a.in[1] = d[1];
  a.out[0] = d[2];
  a.err = &e;
  test_table table = {0};
  sl_code rc = test_run_whole_call(b, n, &a, &table, &e);
  if (rc) fprintf(stderr, "idpc on %s: %s\n", b->caps.device, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_int_equal(o->download(b, phi, d[2], bytes, &e), SL_OK);
  g_built_state = n->dev_state;
  test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
  for (int k = 0; k < 3; k++) o->free(b, d[k], bytes);
}

/* A random field in [-1, 1) with a smooth part (so the integral is not all
 * noise). */
static double *random_field(int64_t R, int64_t C, double fr, double fc) {
  double *f = malloc(sizeof(double) * (size_t)(R * C));
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++)
      f[i * C + j] = (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1 + 3 * sin(fr * (double)i + fc * (double)j);
  return f;
}

/* max |x - y| / max |y| over n. */
static double rel_diff(const double *x, const double *y, int64_t n) {
  double md = 0, my = 0;
  for (int64_t k = 0; k < n; k++) {
    md = fmax(md, fabs(x[k] - y[k]));
    my = fmax(my, fabs(y[k]));
  }
  return my > 0 ? md / my : md;
}

/* The same field through the host path (CPU backend) and the device. */
static void compare(int64_t R, int64_t C, const kv *over, int n_over, const char *label) {
  double *gr = random_field(R, C, 0.11, 0.07), *gc = random_field(R, C, -0.05, 0.13);
  size_t n = (size_t)(R * C);
  double *cpu = malloc(sizeof(double) * n), *gpu = malloc(sizeof(double) * n);
  sl_node nc, ng;
  make_idpc(&nc, R, C, over, n_over);
  make_idpc(&ng, R, C, over, n_over);
  run_on(g_cpu, &nc, gr, gc, cpu);
  run_on(g_cuda, &ng, gr, gc, gpu);
  assert_null(note(&ng, "backend")); /* ran on the device, not the fallback */
  double r = rel_diff(gpu, cpu, (int64_t)n);
  print_message("%-28s %4lldx%-4lld max|gpu-cpu|/max|cpu| = %.3g\n", label, (long long)R, (long long)C, r);
  assert_true(r < 1e-12);
  node_free(&nc);
  node_free(&ng);
  free(gr), free(gc), free(cpu), free(gpu);
}

static void test_against_host(void **st) {
  (void)st;
  const int64_t sizes[][2] = {{2, 3}, {7, 5}, {24, 30}, {33, 17}, {64, 64}, {100, 37}, {1, 40}};
  kv flat[1] = {{"mirror", "false"}}, hp[2] = {{"highpass", "0.1"}, {"scale", "-2.5"}},
     hpf[3] = {{"mirror", "false"}, {"highpass", "0.37"}, {"scale", "3"}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    compare(sizes[s][0], sizes[s][1], NULL, 0, "mirror");
    compare(sizes[s][0], sizes[s][1], flat, 1, "no mirror");
    compare(sizes[s][0], sizes[s][1], hp, 2, "mirror highpass 0.1 scale -2.5");
    compare(sizes[s][0], sizes[s][1], hpf, 3, "no mirror highpass 0.37 scale 3");
  }
}

static void test_against_host_512(void **st) {
  (void)st;
  kv flat[1] = {{"mirror", "false"}};
  compare(512, 512, NULL, 0, "mirror");
  compare(512, 512, flat, 1, "no mirror");
  compare(511, 257, NULL, 0, "mirror");
}

/* A periodic potential and its exact gradient (sinusoids of integer
 * frequencies below Nyquist) integrate back to the potential minus its mean
 * on the device, without mirroring, scale 1: a first-principles check. */
static void test_device_exact_gradient(void **st) {
  (void)st;
  const int R = 48, C = 30;
  double *p = malloc(sizeof(double) * R * C), *gr = malloc(sizeof(double) * R * C),
         *gc = malloc(sizeof(double) * R * C), *phi = malloc(sizeof(double) * R * C);
  periodic_potential(R, C, p, gr, gc);
  double mean = 0;
  for (int k = 0; k < R * C; k++) mean += p[k];
  mean /= R * C;
  sl_node n;
  kv flat[1] = {{"mirror", "false"}};
  make_idpc(&n, R, C, flat, 1);
  run_on(g_cuda, &n, gr, gc, phi);
  assert_null(note(&n, "backend"));
  double maxe = 0;
  for (int k = 0; k < R * C; k++) maxe = fmax(maxe, fabs(phi[k] - (p[k] - mean)));
  print_message("device, exact periodic gradient: max error %.3g\n", maxe);
  assert_true(maxe < 1e-12);
  node_free(&n);
  free(p), free(gr), free(gc), free(phi);
}

/* Every run builds its plans over its own device table and leaves no device
 * state behind; runs give the same doubles again, also after another field
 * went through. */
static void test_state_reused(void **st) {
  (void)st;
  const int64_t R = 40, C = 52;
  double *gr = random_field(R, C, 0.2, 0.1), *gc = random_field(R, C, 0.1, -0.3);
  double *other = random_field(R, C, 0.3, 0.3);
  size_t bytes = sizeof(double) * (size_t)(R * C);
  double *first = malloc(bytes), *again = malloc(bytes), *tmp = malloc(bytes);
  sl_node n;
  make_idpc(&n, R, C, NULL, 0);
  run_on(g_cuda, &n, gr, gc, first);
  assert_non_null(g_built_state);
  assert_null(n.dev_state);
  run_on(g_cuda, &n, other, gc, tmp);
  run_on(g_cuda, &n, gr, gc, again);
  assert_null(n.dev_state);
  assert_memory_equal(first, again, bytes);
  node_free(&n);
  free(gr), free(gc), free(other), free(first), free(again), free(tmp);
}

/* Without cuFFT the CUDA kernel runs the host path on copies: the CPU's
 * doubles exactly, a note saying why, no device state kept. */
static void test_fallback_without_cufft(void **st) {
  (void)st;
  const int64_t R = 37, C = 29;
  double *gr = random_field(R, C, 0.2, 0.1), *gc = random_field(R, C, 0.1, -0.3);
  size_t bytes = sizeof(double) * (size_t)(R * C);
  double *cpu = malloc(bytes), *gpu = malloc(bytes);
  kv hp[1] = {{"highpass", "0.05"}};
  sl_node nc, ng;
  make_idpc(&nc, R, C, hp, 1);
  make_idpc(&ng, R, C, hp, 1);
  run_on(g_cpu, &nc, gr, gc, cpu);
  cufft_setting("none");
  run_on(g_cuda, &ng, gr, gc, gpu);
  cufft_setting(NULL);
  const char *why = note(&ng, "backend");
  assert_non_null(why);
  assert_non_null(strstr(why, "ran on the host"));
  assert_non_null(strstr(why, "SLUICE_CUFFT=none"));
  assert_null(g_built_state);
  assert_memory_equal(cpu, gpu, bytes);
  node_free(&nc);
  node_free(&ng);
  free(gr), free(gc), free(cpu), free(gpu);
}

int main(void) {
  const struct CMUnitTest loader_tests[] = {
      cmocka_unit_test(test_loader_refusals),
      cmocka_unit_test(test_loader_default),
      cmocka_unit_test(test_warm_up_done),
      cmocka_unit_test(test_result_names),
  };
  int rc = cmocka_run_group_tests_name("cufft_loader", loader_tests, NULL, NULL);
  if (rc) return rc;
  const struct CMUnitTest fallback_tests[] = {cmocka_unit_test(test_fallback_without_cufft)};
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_host),          cmocka_unit_test(test_against_host_512),
      cmocka_unit_test(test_device_exact_gradient), cmocka_unit_test(test_state_reused),
  };
  return sl_test_cufft_device_groups("idpc", &g_cuda, &g_cpu, fallback_tests, SL_COUNT_OF(fallback_tests),
                                     tests, SL_COUNT_OF(tests));
}
