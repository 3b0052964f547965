/* CUDA product kernels on resident frames: BF, ADF, DF (virtual_image),
 * virtual_detectors (BF+ADF+DF fused), moments, com (+ finalize),
 * mask_correct, bin_detector, sum; CUDA events around each launcher, median
 * of 7 runs after a warm-up. Prints ms, GB/s of frame bytes (the whole frames;
 * BF/ADF read only the rows' sectors they need, so theirs is "effective") and
 * the quantem.gpu reference (REFERENCE.md section 7: BF 3.8 ms, ADF 5.6 ms,
 * CoM 13 ms on 262144 frames of 192x192 u16) scaled to the frames used.
 *
 *   bench_cuda_products [frames=65536] [size=192]
 *
 * Frames: 256 distinct synthetic u16 frames (a bright disk of radius 24 with
 * ~50 counts, a faint Poisson-like background of 0-3, 1/4096 pixels at the
 * 0xFFFF flag value) uploaded and replicated on the device. */
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
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/pipeline/yaml_tree.h"
#include "bench/bench_node.h"
#include "tests/unit/device_table_lend.h"

extern const sl_node_desc sl_node_virtual_detectors, sl_node_virtual_image, sl_node_moments,
    sl_node_com, sl_node_mask_correct, sl_node_bin_detector, sl_node_sum;

typedef struct kv {
  const char *name, *yaml;
} kv;

static int node_make(sl_node *n, const sl_node_desc *d, const kv *over, int n_over,
                     const sl_tensor_desc *x, sl_error *e) {
  memset(n, 0, sizeof *n);
  n->desc = d;
  n->id = (char *)d->type;
  n->params = calloc((size_t)(d->n_params ? d->n_params : 1), sizeof *n->params);
  for (int i = 0; i < d->n_params; i++) {
    const char *text = d->params[i].default_value;
    for (int k = 0; k < n_over; k++)
      if (!strcmp(over[k].name, d->params[i].name)) text = over[k].yaml;
    sl_yaml *y = NULL;
    sl_loc loc = {"bench", 1, 1};
    if (!text || !text[0]) y = sl_yaml_new_scalar("", loc);
    else if (sl_yaml_load_string(text, strlen(text), "bench", &y, e)) return 1;
    sl_code rc = sl_param_convert(&d->params[i], y, ".", &n->params[i], e);
    sl_yaml_free(y);
    if (rc) return 1;
  }
  sl_node_bind_typed_params(n);
  n->n_in = d->n_inputs;
  n->n_out = d->n_outputs;
  for (int k = 0; k < 8; k++) n->in_src[k].node = k ? SL_SRC_NONE : 0;
  n->in[0] = *x;
  if (d->infer(n, e)) return 1;
  if (d->prepare && d->prepare(n, e)) return 1;
  return 0;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static sl_backend *g_b;
static void *g_frames, *g_out[3];
static int64_t g_n, g_item;

/* Times one node's launcher (and its finalize) over all frames in one call. */
static void bench(const char *label, const sl_node_desc *d, const kv *p, int np,
                  const sl_tensor_desc *x, double ref_ms, int fin) {
  sl_node n;
  sl_error e;
  sl_error_clear(&e);
  if (node_make(&n, d, p, np, x, &e)) {
    printf("%-22s setup failed: %s\n", label, e.msg);
    return;
  }
  cudaStream_t st = (cudaStream_t)g_b->ops->device_env(g_b)->queue;
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  float ms[7];
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = g_b;
  a.dev = g_b->ops->device_env(g_b); /* as batch_encode lends it */
  a.node = &n;
  a.node_id = label;
  a.state = n.state;
  a.pos_count = g_n;
  a.n_chunks = 1;
  a.in[0] = g_frames;
  for (int k = 0; k < 3; k++) a.out[k] = g_out[k];
  a.err = &e;
  test_table table = {0};
  if (test_table_lend(&table, g_b, test_table_bytes(&n, g_n, g_n), &e) != SL_OK) {
    printf("%-22s device table: %s\n", label, e.msg);
    node_free(&n);
    return;
  }
  test_table_args(&table, &a);
  sl_kernel_fn fn = fin ? d->finalize[SL_BACKEND_CUDA] : d->kernel[SL_BACKEND_CUDA];
  if (fin && d->kernel[SL_BACKEND_CUDA](&a)) { /* the pass that fills the state */
    printf("%-22s failed: %s\n", label, e.msg);
    test_table_give_back(&table, &n.dev_state, &n.dev_state_free);
    node_free(&n);
    return;
  }
  for (int r = -1; r < 7; r++) {
    cudaEventRecord(t0, st);
    sl_code rc = fn(&a);
    cudaEventRecord(t1, st);
    cudaEventSynchronize(t1);
    if (rc) {
      printf("%-22s failed: %s\n", label, e.msg);
      test_table_give_back(&table, &n.dev_state, &n.dev_state_free);
      node_free(&n);
      return;
    }
    if (r >= 0) cudaEventElapsedTime(&ms[r], t0, t1);
  }
  qsort(ms, 7, sizeof ms[0], cmp_f);
  double m = ms[3], gb = (double)g_n * (double)g_item * 2 / 1e9;
  if (fin)
    printf("%-22s %9.3f ms  (per-run finalize)\n", label, m);
  else if (ref_ms > 0)
    printf("%-22s %9.3f ms %8.1f GB/s   quantem %8.3f ms   ratio %5.2fx\n", label, m, gb / (m / 1e3),
           ref_ms, ref_ms / m);
  else
    printf("%-22s %9.3f ms %8.1f GB/s\n", label, m, gb / (m / 1e3));
  test_table_give_back(&table, &n.dev_state, &n.dev_state_free);
  node_free(&n);
}

int main(int argc, char **argv) {
  g_n = argc > 1 ? atoll(argv[1]) : 65536;
  int64_t s = argc > 2 ? atoll(argv[2]) : 192;
  g_item = s * s;
  sl_error e;
  sl_error_clear(&e);
  const sl_backend_ops *o = sl_backend_ops_for(SL_BACKEND_CUDA);
  if (!o || o->create(0, &g_b, &e)) {
    printf("SKIP: no CUDA device (%s)\n", o ? e.msg : "not built");
    return 0;
  }
  size_t fb = (size_t)g_item * 2, total = (size_t)g_n * fb;
  printf("device: %s\nframes: %lld of %lldx%lld u16 = %.2f GB resident\n", g_b->caps.device,
         (long long)g_n, (long long)s, (long long)s, (double)total / 1e9);
  if (cudaMalloc(&g_frames, total + 64) != cudaSuccess) {
    printf("cannot allocate the frames\n");
    return 1;
  }
  int distinct = 256;
  uint16_t *h = malloc(fb * (size_t)distinct);
  uint64_t r = 88172645463325252ULL;
  double c = (double)(s - 1) / 2;
  for (int f = 0; f < distinct; f++)
    for (int64_t i = 0; i < g_item; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      double dr = (double)(i / s) - c - (f % 5), dc = (double)(i % s) - c + (f % 3);
      uint16_t v = dr * dr + dc * dc <= 24.0 * 24.0 ? (uint16_t)(40 + (r >> 40) % 20)
                                                   : (uint16_t)((r >> 40) % 4 == 0 ? (r >> 50) % 4 : 0);
      if ((r & 4095) == 0) v = 0xFFFF;
      h[(size_t)f * (size_t)g_item + (size_t)i] = v;
    }
  cudaMemcpy(g_frames, h, fb * (size_t)(g_n < distinct ? g_n : distinct), cudaMemcpyHostToDevice);
  for (int64_t done = distinct; done < g_n;) {
    int64_t k = done < g_n - done ? done : g_n - done;
    cudaMemcpy((char *)g_frames + (size_t)done * fb, g_frames, (size_t)k * fb, cudaMemcpyDeviceToDevice);
    done += k;
  }
  free(h);
  for (int k = 0; k < 3; k++)
    if (cudaMalloc(&g_out[k], (size_t)g_n * 8 + 64) != cudaSuccess) return 1;
  int64_t dims[3] = {g_n, s, s};
  sl_tensor_desc x = sl_desc_make(SL_U16, 3, dims, 1);
  double sc = (double)g_n / 262144.0;
  kv bf[2] = {{"kind", "bf"}, {"radius", "24"}}, adf[2] = {{"kind", "adf"}, {"radius", "24"}},
     df[2] = {{"kind", "df"}, {"radius", "24"}}, vd[1] = {{"radius", "24"}};
  printf("%-22s %12s %13s   %s\n", "kernel", "median", "frame bytes", "reference (scaled)");
  bench("virtual_image bf", &sl_node_virtual_image, bf, 2, &x, 3.8 * sc, 0);
  bench("virtual_image adf", &sl_node_virtual_image, adf, 2, &x, 5.6 * sc, 0);
  bench("virtual_image df", &sl_node_virtual_image, df, 2, &x, 0, 0);
  bench("virtual_detectors", &sl_node_virtual_detectors, vd, 1, &x, 0, 0);
  bench("moments", &sl_node_moments, NULL, 0, &x, 0, 0);
  /* com writes whole [scan] outputs */
  int64_t sd[3] = {g_n, s, s};
  sl_tensor_desc xc = sl_desc_make(SL_U16, 3, sd, 1);
  bench("com", &sl_node_com, NULL, 0, &xc, 13.0 * sc, 0);
  kv pl[1] = {{"descan", "plane"}};
  bench("com finalize (plane)", &sl_node_com, pl, 1, &xc, 0, 1);
  kv s4[1] = {{"factor", "4"}};
  /* mask_correct and bin_detector write frames: outputs the size of the input */
  void *big = NULL;
  if (cudaMalloc(&big, total + 64) == cudaSuccess) {
    void *keep = g_out[0];
    g_out[0] = big;
    kv mc[1] = {{"policy", "median"}};
    bench("mask_correct (r+w)", &sl_node_mask_correct, mc, 1, &x, 0, 0);
    bench("bin_detector x4", &sl_node_bin_detector, s4, 1, &x, 0, 0);
    g_out[0] = keep;
    cudaFree(big);
  } else {
    printf("mask_correct/bin_detector skipped: no memory for a second copy of the frames\n");
  }
  cudaMemset(g_out[0], 0, (size_t)g_n * 8);
  /* sum over positions: output item-sized u64 */
  void *sumo = NULL;
  if (cudaMalloc(&sumo, (size_t)g_item * 8) == cudaSuccess) {
    void *keep = g_out[0];
    g_out[0] = sumo;
    bench("sum (u16 -> u64)", &sl_node_sum, NULL, 0, &x, 0, 0);
    g_out[0] = keep;
    cudaFree(sumo);
  }
  cudaFree(g_frames);
  for (int k = 0; k < 3; k++) cudaFree(g_out[k]);
  g_b->ops->destroy(g_b);
  return 0;
}
#endif
