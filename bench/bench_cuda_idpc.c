/* iDPC (the idpc node) of an R x C scan: the host path (FFTW, one thread,
 * the CPU kernel) and the device (cuFFT + kernels, CUDA events around the
 * launcher), median of 7 after a warm-up (the first device call plans),
 * side by side with the ratio, and quantem.gpu's 21 ms for 512x512
 * (issue 12). Checks that the two agree (max |gpu - cpu| / max |cpu|).
 *
 *   bench_cuda_idpc [rows=512] [cols=512]
 *
 * Both mirror: true (the default: 2R x 2C transforms) and mirror: false. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SLUICE_HAVE_CUDA
int main(void) {
  printf("SKIP: built without CUDA\n");
  return 0;
}
#else
#include <cuda_runtime.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "bench/bench_node.h"
#include "tests/unit/device_table_lend.h"
#include "engine/pipeline/yaml_tree.h"

extern const sl_node_desc sl_node_idpc;

#define RUNS 7

/* An idpc node on a whole f64 [R, C] field pair, prepared; mirror as given. */
static int node_make(sl_node *n, int64_t R, int64_t C, const char *mirror, sl_error *e) {
  const sl_node_desc *d = &sl_node_idpc;
  memset(n, 0, sizeof *n);
  n->desc = d;
  n->id = (char *)"idpc";
  n->params = calloc((size_t)d->n_params, sizeof *n->params);
  for (int i = 0; i < d->n_params; i++) {
    const char *text = strcmp(d->params[i].name, "mirror") ? d->params[i].default_value : mirror;
    sl_yaml *y = NULL;
    if (sl_yaml_load_string(text, strlen(text), "bench", &y, e)) return 1;
    sl_code rc = sl_param_convert(&d->params[i], y, ".", &n->params[i], e);
    sl_yaml_free(y);
    if (rc) return 1;
  }
  sl_node_bind_typed_params(n);
  n->n_in = d->n_inputs;
  n->n_out = d->n_outputs;
  int64_t dims[2] = {R, C};
  for (int k = 0; k < 8; k++) n->in_src[k] = (sl_edge_src){k < 2 ? k : SL_SRC_NONE, 0};
  n->in[0] = n->in[1] = sl_desc_make(SL_F64, 2, dims, 0);
  if (d->infer(n, e) || d->prepare(n, e)) return 1;
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static sl_kernel_args args_for(sl_backend *b, sl_node *n, const void *gr, const void *gc, void *phi,
                               sl_error *e) {
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b;
  a.dev = b->ops->device_env ? b->ops->device_env(b) : NULL; /* as batch_encode lends it */
  a.node = n;
  a.node_id = "idpc";
  a.state = n->state;
  a.pos_count = 1;
  a.n_chunks = 1;
  a.in[0] = gr;
  a.in[1] = gc;
  a.out[0] = phi;
  a.err = e;
  return a;
}

/* Median milliseconds of the host kernel, or -1 on failure. */
static double time_host(sl_backend *cpu, sl_node *n, const double *gr, const double *gc, double *phi) {
  sl_error e;
  sl_error_clear(&e);
  sl_kernel_args a = args_for(cpu, n, gr, gc, phi, &e);
  double ms[RUNS];
  for (int r = -1; r < RUNS; r++) {
    double t0 = sl_now();
    if (n->desc->kernel[SL_BACKEND_CPU](&a)) {
      printf("host idpc failed: %s\n", e.msg);
      return -1;
    }
    if (r >= 0) ms[r] = (sl_now() - t0) * 1e3;
  }
  qsort(ms, RUNS, sizeof ms[0], cmp_d);
  return ms[RUNS / 2];
}

/* Median device milliseconds (events around the launcher), or -1. */
static double time_device(sl_backend *b, sl_node *n, const double *dgr, const double *dgc, double *dphi) {
  sl_error e;
  sl_error_clear(&e);
  sl_kernel_args a = args_for(b, n, dgr, dgc, dphi, &e);
  sl_node_cost cost;
  n->desc->cost(n, 1, &cost);
  test_table table = {0};
  if (test_table_lend(&table, b, cost.device_state_bytes, &e) != SL_OK) {
    printf("device table: %s\n", e.msg);
    return -1;
  }
  test_table_args(&table, &a);
  cudaStream_t st = (cudaStream_t)a.dev->queue;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  double ms[RUNS];
  for (int r = -1; r < RUNS; r++) {
    cudaEventRecord(t0, st);
    sl_code rc = n->desc->kernel[SL_BACKEND_CUDA](&a);
    cudaEventRecord(t1, st);
    cudaEventSynchronize(t1);
    if (rc) {
      printf("device idpc failed: %s\n", e.msg);
      test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
      return -1;
    }
    float f = 0;
    cudaEventElapsedTime(&f, t0, t1);
    if (r >= 0) ms[r] = f;
  }
  test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  qsort(ms, RUNS, sizeof ms[0], cmp_d);
  return ms[RUNS / 2];
}

static void bench(sl_backend *cpu, sl_backend *gpu, int64_t R, int64_t C, const char *mirror) {
  size_t n = (size_t)(R * C), bytes = n * sizeof(double);
  double *gr = malloc(bytes), *gc = malloc(bytes), *hphi = malloc(bytes), *dphi_host = malloc(bytes);
  uint64_t s = 88172645463325252ULL;
  for (size_t k = 0; k < n; k++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double i = (double)(k / (size_t)C), j = (double)(k % (size_t)C);
    gr[k] = sin(0.05 * i + 0.02 * j) + (double)(s >> 11) / 9007199254740992.0 - 0.5;
    gc[k] = cos(0.03 * i - 0.04 * j) + (double)(s & 0xFFFF) / 65536.0 - 0.5;
  }
  sl_node nh, nd;
  sl_error e;
  sl_error_clear(&e);
  void *d[3] = {0};
  if (node_make(&nh, R, C, mirror, &e) || node_make(&nd, R, C, mirror, &e)) {
    printf("setup failed: %s\n", e.msg);
    exit(1);
  }
  for (int k = 0; k < 3; k++)
    if (cudaMalloc(&d[k], bytes) != cudaSuccess) exit(1);
  cudaMemcpy(d[0], gr, bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(d[1], gc, bytes, cudaMemcpyHostToDevice);
  double th = time_host(cpu, &nh, gr, gc, hphi);
  double td = time_device(gpu, &nd, d[0], d[1], d[2]);
  cudaMemcpy(dphi_host, d[2], bytes, cudaMemcpyDeviceToHost);
  double md = 0, mc = 0;
  for (size_t k = 0; k < n; k++) md = fmax(md, fabs(dphi_host[k] - hphi[k])), mc = fmax(mc, fabs(hphi[k]));
  for (int i = 0; i < nd.n_notes; i++) printf("  note: %s\n", nd.notes[i]);
  char label[64];
  snprintf(label, sizeof label, "%lldx%lld mirror=%s", (long long)R, (long long)C, mirror);
  printf("%-24s host %9.3f ms   device %8.3f ms   host/device %7.1fx   ", label, th, td, th / td);
  if (R == 512 && C == 512) printf("quantem.gpu 21 ms: %5.1fx   ", 21.0 / td);
  printf("max|gpu-cpu|/max|cpu| %.2g\n", mc > 0 ? md / mc : md);
  for (int k = 0; k < 3; k++) cudaFree(d[k]);
  node_free(&nh);
  node_free(&nd);
  free(gr), free(gc), free(hphi), free(dphi_host);
}

int main(int argc, char **argv) {
  int64_t R = argc > 1 ? atoll(argv[1]) : 512, C = argc > 2 ? atoll(argv[2]) : 512;
  sl_error e;
  sl_error_clear(&e);
  sl_backend *gpu = NULL, *cpu = NULL;
  const sl_backend_ops *o = sl_backend_ops_for(SL_BACKEND_CUDA);
  if (!o || o->create(0, &gpu, &e)) {
    printf("SKIP: no CUDA device (%s)\n", o ? e.msg : "not built");
    return 0;
  }
  if (sl_cpu_backend_ops.create(1, &cpu, &e)) return 1;
  printf("device: %s\nidpc of %lldx%lld (host: FFTW on one thread; device: events around the launcher; "
         "median of %d)\n",
         gpu->caps.device, (long long)R, (long long)C, RUNS);
  bench(cpu, gpu, R, C, "true");
  bench(cpu, gpu, R, C, "false");
  cpu->ops->destroy(cpu);
  gpu->ops->destroy(gpu);
  return 0;
}
#endif
