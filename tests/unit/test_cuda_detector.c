/* CUDA kernels of the detector/STEM nodes (shaders/cuda/{detector,stem,basic}/,
 * run through the node descriptors) against
 * the CPU kernels, bit for bit: virtual_image, virtual_detectors and
 * bf_segments (params and disk input), moments, com (+ finalize: mean and plane; identical doubles, also over
 * many positions: blocked sums),
 * mask_correct, bin_detector (with the max_value audit error), sum.
 * Random frames with values at the dtype max, odd sizes (scalar path) and
 * 16-byte rows (vector path), chunks of 1, 7 and all positions. Both backends
 * run through the same harness (alloc, upload, batch, download, as the
 * executor does). Skips visibly without a CUDA device. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/device_table_lend.h"
#include "tests/unit/lend_scratch.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/pipeline/yaml_tree.h"
#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_virtual_detectors, sl_node_virtual_image, sl_node_bf_segments,
    sl_node_moments, sl_node_com, sl_node_mask_correct, sl_node_bin_detector, sl_node_sum;

static sl_backend *g_cpu, *g_cuda;

/* The harness's node_make, then prepare (each backend's copy of a node needs
 * its own state). */
static sl_code node_make_prepared(sl_node *n, const sl_node_desc *d, const kv *over, int n_over,
                                  const sl_tensor_desc *in, int n_in, sl_error *e) {
  sl_code rc = node_make(n, d, over, n_over, in, n_in, e);
  if (rc == SL_OK && d->prepare) rc = d->prepare(n, e);
  return rc;
}

static size_t out_bytes(const sl_tensor_desc *d, int64_t npos) {
  return d->stream_rank ? (size_t)(npos * sl_desc_item_bytes(d)) : (size_t)sl_desc_bytes(d);
}

static sl_code run1(sl_backend *b, sl_kernel_fn fn, sl_kernel_args *a, sl_error *e) {
  sl_code rc = b->ops->batch_begin(b, e);
  if (rc == SL_OK) rc = b->ops->batch_encode(b, fn, a, e);
  if (rc == SL_OK) rc = b->ops->batch_commit(b, e);
  sl_code w = b->ops->batch_wait(b, e);
  return rc ? rc : w;
}

/* Runs node n on backend b over npos positions in chunks: input 0 streamed
 * (`in0`), inputs 1.. whole (`whole`, whole_bytes). Host outputs in out[k]
 * (full size). Device buffers as the executor: one chunk of each streamed
 * port, whole outputs zeroed before the first chunk and handed to each call
 * where the executor would (a concat's chunk place: chunk_out), then
 * finalize. */
static sl_code run_node(sl_node *n, sl_backend *b, const void *in0, const void *whole,
                        size_t whole_bytes, void **out, int64_t npos, int64_t chunk, sl_error *e) {
  const sl_backend_ops *o = b->ops;
  sl_backend_kind kind = b->caps.kind;
  n->phase = SL_PHASE_STREAM; /* as the graph makes it: the declared combines are its reductions' */
  int64_t ib = sl_desc_item_bytes(&n->in[0]);
  void *din = NULL, *dwhole = NULL, *dout[8] = {0};
  sl_code rc = o->alloc(b, (size_t)(chunk * ib) + 64, &din, e);
  if (rc == SL_OK && whole) rc = o->alloc(b, whole_bytes, &dwhole, e);
  if (rc == SL_OK && whole) rc = o->upload(b, dwhole, whole, whole_bytes, e);
  for (int k = 0; k < n->n_out && rc == SL_OK; k++) {
    size_t sz = n->out[k].stream_rank ? (size_t)(chunk * sl_desc_item_bytes(&n->out[k]))
                                      : out_bytes(&n->out[k], npos);
    rc = o->alloc(b, sz + 64, &dout[k], e);
    if (rc == SL_OK && !n->out[k].stream_rank) rc = o->zero(b, dout[k], sz, e);
  }
  test_table table = {0};
  const int64_t last = npos % chunk ? npos % chunk : chunk;
  if (rc == SL_OK) rc = test_table_lend(&table, b, test_table_bytes(n, chunk, last), e);
  /* The CPU kernels' workspace and workers' scratch, as the executor lends
   * them (no worker partials: a kernel without them reduces by itself). */
  sl_kernel_args lent;
  memset(&lent, 0, sizeof lent);
  void *scratch = kind == SL_BACKEND_CPU ? lend_scratch(n, b, chunk, &lent) : NULL;
  sl_kernel_args a;
  for (int64_t s = 0; s < npos && rc == SL_OK; s += chunk) {
    int64_t cnt = npos - s < chunk ? npos - s : chunk;
    memset(&a, 0, sizeof a);
    a.workspace = lent.workspace;
    a.worker_scratch = lent.worker_scratch, a.worker_scratch_stride = lent.worker_scratch_stride;
    a.backend = b;
    a.node = n;
    a.state = n->state;
    test_table_args(&table, &a);
    a.pos_start = s;
    a.pos_count = cnt;
    a.chunk = s / chunk;
    a.n_chunks = (npos + chunk - 1) / chunk;
    rc = o->upload(b, din, (const char *)in0 + s * ib, (size_t)(cnt * ib), e);
    if (rc) break;
    a.in[0] = din;
    a.in[1] = dwhole;
    for (int k = 0; k < n->n_out; k++) a.out[k] = n->out[k].stream_rank ? dout[k] : chunk_out(n, k, dout[k], s, npos);
    a.err = e;
    rc = run1(b, n->desc->kernel[kind], &a, e);
    for (int k = 0; k < n->n_out && rc == SL_OK; k++)
      if (n->out[k].stream_rank) {
        size_t it = (size_t)sl_desc_item_bytes(&n->out[k]);
        rc = o->download(b, (char *)out[k] + (size_t)s * it, dout[k], (size_t)cnt * it, e);
      }
  }
  if (rc == SL_OK && n->desc->finalize[kind]) {
    memset(&a, 0, sizeof a);
    a.backend = b;
    a.node = n;
    a.state = n->state;
    a.pos_count = npos;
    a.chunk = (npos + chunk - 1) / chunk;
    test_table_args(&table, &a);
    a.in[1] = dwhole;
    for (int k = 0; k < n->n_out; k++) a.out[k] = dout[k];
    a.err = e;
    rc = run1(b, n->desc->finalize[kind], &a, e);
  }
  for (int k = 0; k < n->n_out && rc == SL_OK; k++)
    if (!n->out[k].stream_rank) rc = o->download(b, out[k], dout[k], out_bytes(&n->out[k], npos), e);
  test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
  free(scratch);
  o->free(b, din, (size_t)(chunk * ib) + 64);
  if (dwhole) o->free(b, dwhole, whole_bytes);
  for (int k = 0; k < n->n_out; k++)
    if (dout[k]) o->free(b, dout[k], 0);
  return rc;
}

/* Random counts; ~1/16 at the dtype max; ~1/8 of frames have a hot spot;
 * frame 3 all zero (S = 0). */
static void *skewed_frames(sl_dtype t, int64_t npos, int64_t item) {
  size_t sz = sl_dtype_size(t);
  uint64_t mx = dmax(t);
  char *f = malloc((size_t)(npos * item) * sz);
  for (int64_t p = 0; p < npos; p++)
    for (int64_t i = 0; i < item; i++) {
      uint64_t r = rnd(), v;
      if (p == 3) v = 0;
      else if ((r & 15) == 0) v = mx;
      else if ((r & 15) == 1) v = (r >> 8) & mx;
      else v = (r >> 8) % 7;
      size_t o = (size_t)(p * item + i);
      if (t == SL_U8) ((uint8_t *)f)[o] = (uint8_t)v;
      else if (t == SL_U16) ((uint16_t *)f)[o] = (uint16_t)v;
      else ((uint32_t *)f)[o] = (uint32_t)v;
    }
  return f;
}

/* The outputs a graph would read (sl_node.out_used): all of them unless a
 * test narrows it (virtual_detectors skips its moments when unread). */
static unsigned g_out_used = ~0u;

/* Builds the node twice (CPU and CUDA need their own state), runs both and
 * compares every read output byte for byte; returns the CPU code (both equal). */
static sl_code compare(const sl_node_desc *d, const kv *over, int n_over, const sl_tensor_desc *in,
                       int n_in, const void *in0, const void *whole, size_t whole_bytes,
                       int64_t npos, int64_t chunk, const char *what) {
  sl_node nc, ng;
  sl_error e1, e2;
  sl_code r1 = node_make_prepared(&nc, d, over, n_over, in, n_in, &e1);
  sl_code r2 = node_make_prepared(&ng, d, over, n_over, in, n_in, &e2);
  if (r1) fprintf(stderr, "%s: %s\n", what, e1.msg);
  assert_int_equal(r1, SL_OK);
  assert_int_equal(r2, SL_OK);
  assert_non_null(d->kernel[SL_BACKEND_CUDA]);
  nc.out_used = ng.out_used = g_out_used;
  void *oc[8] = {0}, *og[8] = {0};
  for (int k = 0; k < nc.n_out; k++) {
    size_t sz = out_bytes(&nc.out[k], npos);
    oc[k] = calloc(1, sz + 1);
    og[k] = calloc(1, sz + 1);
  }
  r1 = run_node(&nc, g_cpu, in0, whole, whole_bytes, oc, npos, chunk, &e1);
  r2 = run_node(&ng, g_cuda, in0, whole, whole_bytes, og, npos, chunk, &e2);
  if (r1 != r2 || (r1 && strcmp(e1.msg, e2.msg)))
    fprintf(stderr, "%s (chunk %lld): cpu %d '%s' / cuda %d '%s'\n", what, (long long)chunk, r1,
            r1 ? e1.msg : "", r2, r2 ? e2.msg : "");
  assert_int_equal(r1, r2);
  if (r1) assert_string_equal(e1.msg, e2.msg);
  for (int k = 0; k < nc.n_out && r1 == SL_OK; k++) {
    if (!(g_out_used & (1u << k))) continue;
    size_t sz = out_bytes(&nc.out[k], npos);
    if (memcmp(oc[k], og[k], sz)) {
      fprintf(stderr, "%s (chunk %lld): output %d differs\n", what, (long long)chunk, k);
      fail();
    }
  }
  for (int k = 0; k < nc.n_out; k++) free(oc[k]), free(og[k]);
  node_free(&nc);
  node_free(&ng);
  return r1;
}

static const sl_dtype DTS[3] = {SL_U8, SL_U16, SL_U32};
/* 37x41: odd (scalar path); 48x64: 16-byte rows (vector path) for every dtype. */
static const int64_t SIZES[2][2] = {{37, 41}, {48, 64}};

static void frames_loop(void (*body)(sl_dtype t, int64_t h, int64_t w, const void *fr,
                                     int64_t npos, const sl_tensor_desc *x, int64_t chunk)) {
  const int64_t npos = 23;
  for (int di = 0; di < 3; di++)
    for (int si = 0; si < 2; si++) {
      int64_t h = SIZES[si][0], w = SIZES[si][1];
      int64_t dims[3] = {npos, h, w};
      sl_tensor_desc x = sl_desc_make(DTS[di], 3, dims, 1);
      void *fr = skewed_frames(DTS[di], npos, h * w);
      const int64_t chunks[3] = {1, 7, npos};
      for (int c = 0; c < 3; c++) body(DTS[di], h, w, fr, npos, &x, chunks[c]);
      free(fr);
    }
}

static void virtual_image_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                    const sl_tensor_desc *x, int64_t chunk) {
  static const char *kinds[4] = {"bf", "adf", "df", "annulus"};
  for (int k = 0; k < 4; k++) {
    kv p[4] = {{"kind", kinds[k]}, {"radius", "7.5"}, {"center", "[17.25, 19]"},
               {"units", k == 3 ? "pixels" : "radii"}};
    compare(&sl_node_virtual_image, p, 4, x, 1, fr, NULL, 0, npos, chunk, kinds[k]);
  }
  /* disk input (built on the device) */
  int64_t dd[1] = {4};
  sl_tensor_desc in[2] = {*x, sl_desc_make(SL_F64, 1, dd, 0)};
  double disk[4] = {(double)h / 2 - 1.3, (double)w / 2 + 0.7, 6.0, 0.1};
  for (int k = 0; k < 4; k++) {
    kv p[1] = {{"kind", kinds[k]}};
    compare(&sl_node_virtual_image, p, 1, in, 2, fr, disk, sizeof disk, npos, chunk, kinds[k]);
  }
  (void)t;
}

static void virtual_detectors_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                    const sl_tensor_desc *x, int64_t chunk) {
  kv p[3] = {{"radius", "6.5"}, {"inner", "0.8"}, {"outer", "2.5"}};
  compare(&sl_node_virtual_detectors, p, 3, x, 1, fr, NULL, 0, npos, chunk, "vd");
  g_out_used = 0x07u; /* bf, adf, df only: no moments sweep */
  compare(&sl_node_virtual_detectors, p, 3, x, 1, fr, NULL, 0, npos, chunk, "vd without moments");
  g_out_used = ~0u;
  int64_t dd[1] = {4};
  sl_tensor_desc in[2] = {*x, sl_desc_make(SL_F64, 1, dd, 0)};
  double disk[4] = {(double)h / 2 + 0.4, (double)w / 2 - 2.2, 5.5, 0};
  compare(&sl_node_virtual_detectors, NULL, 0, in, 2, fr, disk, sizeof disk, npos, chunk, "vd disk");
  /* bad disk: the same SL_ERR_FORMAT message on both (CUDA: at the finalize) */
  double bad[4] = {1e9, 3, 5, 0};
  assert_int_equal(compare(&sl_node_virtual_detectors, NULL, 0, in, 2, fr, bad, sizeof bad, npos,
                           chunk, "vd bad disk"),
                   SL_ERR_FORMAT);
  (void)t;
}

/* Whole outputs at each chunk's positions; a disk clipped by the edge (empty
 * segments), grid 15 (segments above 127), the disk input and a bad one. */
static void bf_segments_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                             const sl_tensor_desc *x, int64_t chunk) {
  kv p[4] = {{"radius", "9.3"}, {"center", "[17.25, 19.6]"}, {"grid", "7"}, {"extent", "0.6"}};
  compare(&sl_node_bf_segments, p, 4, x, 1, fr, NULL, 0, npos, chunk, "bf_segments");
  kv clipped[2] = {{"radius", "8.7"}, {"center", "[2.3, 36.6]"}};
  compare(&sl_node_bf_segments, clipped, 2, x, 1, fr, NULL, 0, npos, chunk, "bf_segments clipped");
  kv fine[3] = {{"radius", "15.2"}, {"grid", "15"}, {"extent", "1"}};
  compare(&sl_node_bf_segments, fine, 3, x, 1, fr, NULL, 0, npos, chunk, "bf_segments grid 15");
  int64_t dd[1] = {4};
  sl_tensor_desc in[2] = {*x, sl_desc_make(SL_F64, 1, dd, 0)};
  double disk[4] = {(double)h / 2 - 1.3, (double)w / 2 + 0.7, 8.4, 0.1};
  compare(&sl_node_bf_segments, NULL, 0, in, 2, fr, disk, sizeof disk, npos, chunk, "bf_segments disk");
  /* bad disk: the same SL_ERR_FORMAT message on both (CUDA: a call later or at the finalize) */
  double bad[4] = {1e9, 3, 5, 0};
  assert_int_equal(compare(&sl_node_bf_segments, NULL, 0, in, 2, fr, bad, sizeof bad, npos, chunk,
                           "bf_segments bad disk"),
                   SL_ERR_FORMAT);
  (void)t;
}

static void mo_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                    const sl_tensor_desc *x, int64_t chunk) {
  compare(&sl_node_moments, NULL, 0, x, 1, fr, NULL, 0, npos, chunk, "moments");
  kv pn[1] = {{"descan", "none"}}, pp[1] = {{"descan", "plane"}};
  compare(&sl_node_com, pn, 1, x, 1, fr, NULL, 0, npos, chunk, "com none");
  compare(&sl_node_com, pp, 1, x, 1, fr, NULL, 0, npos, chunk, "com plane 1d");
  /* 2D scan 4 x 6 (24 positions: first 23 frames + frame 0 again) */
  int64_t d2[4] = {4, 6, h, w};
  sl_tensor_desc x2 = sl_desc_make(t, 4, d2, 2);
  size_t fb = (size_t)(h * w) * sl_dtype_size(t);
  char *f2 = malloc(24 * fb);
  memcpy(f2, fr, 23 * fb);
  memcpy(f2 + 23 * fb, fr, fb);
  compare(&sl_node_com, pp, 1, &x2, 1, f2, NULL, 0, 24, chunk, "com plane 2d");
  free(f2);
  (void)npos;
}

static void mc_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                    const sl_tensor_desc *x, int64_t chunk) {
  static const char *pol[3] = {"median", "zero", "none"};
  uint8_t *mask = malloc((size_t)(h * w));
  for (int64_t i = 0; i < h * w; i++) mask[i] = (rnd() % 19) == 0;
  mask[0] = mask[1] = mask[w] = 1; /* a cluster in the corner */
  int64_t md[2] = {h, w};
  sl_tensor_desc in[2] = {*x, sl_desc_make(SL_U8, 2, md, 0)};
  for (int k = 0; k < 3; k++)
    for (int fl = 0; fl < 2; fl++) {
      kv p[2] = {{"policy", pol[k]}, {"flagged", fl ? "true" : "false"}};
      compare(&sl_node_mask_correct, p, 2, x, 1, fr, NULL, 0, npos, chunk, pol[k]);
      compare(&sl_node_mask_correct, p, 2, in, 2, fr, mask, (size_t)(h * w), npos, chunk, pol[k]);
    }
  free(mask);
  (void)t;
}

static void bin_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                     const sl_tensor_desc *x, int64_t chunk) {
  static const char *f[3] = {"2", "4", "8"};
  for (int k = 0; k < 3; k++) {
    kv p[1] = {{"factor", f[k]}};
    compare(&sl_node_bin_detector, p, 1, x, 1, fr, NULL, 0, npos, chunk, "bin");
  }
  /* audit: frames hold the dtype max, so max_value 200 fails on both */
  kv pa[2] = {{"factor", "2"}, {"max_value", "200"}};
  assert_int_equal(compare(&sl_node_bin_detector, pa, 2, x, 1, fr, NULL, 0, npos, chunk, "audit"),
                   SL_ERR_FORMAT);
  (void)t, (void)h, (void)w;
}

static void sum_body(sl_dtype t, int64_t h, int64_t w, const void *fr, int64_t npos,
                     const sl_tensor_desc *x, int64_t chunk) {
  compare(&sl_node_sum, NULL, 0, x, 1, fr, NULL, 0, npos, chunk, "sum int");
  /* floats: the same values as f32 and f64 scaled by 1/3 (inexact sums) */
  int64_t n = npos * h * w;
  float *f32 = malloc((size_t)n * 4);
  double *f64 = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) {
    double v = t == SL_U8 ? ((const uint8_t *)fr)[i] : t == SL_U16 ? ((const uint16_t *)fr)[i]
                                                                   : ((const uint32_t *)fr)[i];
    f64[i] = v / 3.0 + 1e-7 * (double)(i % 97);
    f32[i] = (float)f64[i];
  }
  int64_t dims[3] = {npos, h, w};
  sl_tensor_desc xf = sl_desc_make(SL_F32, 3, dims, 1), xd = sl_desc_make(SL_F64, 3, dims, 1);
  compare(&sl_node_sum, NULL, 0, &xf, 1, f32, NULL, 0, npos, chunk, "sum f32");
  compare(&sl_node_sum, NULL, 0, &xd, 1, f64, NULL, 0, npos, chunk, "sum f64");
  free(f32);
  free(f64);
}

/* Calls of few frames split each frame over several warps (frame_split: up
 * to 48 warps a multiprocessor), which add their parts (virtual_detectors;
 * virtual_image's listed units are not split); the loops above (23 frames)
 * take that path. A call of more frames than any GPU's split limit (132
 * multiprocessors x 48 on an H200) takes the one-warp path. */
static void test_many_frames(void **st) {
  (void)st;
  const int64_t npos = 16384, h = 16, w = 24;
  for (int di = 0; di < 3; di++) {
    int64_t dims[3] = {npos, h, w};
    sl_tensor_desc x = sl_desc_make(DTS[di], 3, dims, 1);
    void *fr = skewed_frames(DTS[di], npos, h * w);
    virtual_image_body(DTS[di], h, w, fr, npos, &x, npos);
    virtual_detectors_body(DTS[di], h, w, fr, npos, &x, npos);
    free(fr);
  }
}

static void test_virtual_image(void **st) { (void)st; frames_loop(virtual_image_body); }
static void test_virtual_detectors(void **st) { (void)st; frames_loop(virtual_detectors_body); }
static void test_bf_segments(void **st) { (void)st; frames_loop(bf_segments_body); }
static void test_moments_com(void **st) { (void)st; frames_loop(mo_body); }
static void test_mask_correct(void **st) { (void)st; frames_loop(mc_body); }
static void test_bin_detector(void **st) { (void)st; frames_loop(bin_body); }
static void test_sum(void **st) { (void)st; frames_loop(sum_body); }

/* com finalize over many positions: the descan sums run in blocks of 256
 * positions (com.c remove_descan, k_descan_blocks); scans of 1189 positions
 * (29 x 41, 1D too) with every 17th frame and a whole block of frames empty,
 * and a scan where only a few positions are valid. */
static void test_com_blocks(void **st) {
  (void)st;
  const int64_t npos = 29 * 41, h = 8, w = 8;
  uint16_t *fr = skewed_frames(SL_U16, npos, h * w);
  for (int64_t p = 0; p < npos; p++)
    if (p % 17 == 5 || (p >= 512 && p < 768)) memset(fr + p * h * w, 0, (size_t)(h * w) * 2);
  uint16_t *sparse = calloc((size_t)(npos * h * w), 2);
  for (int64_t p = 300; p < npos; p += 400) sparse[p * h * w + 9] = (uint16_t)(p + 1);
  int64_t d2[4] = {29, 41, h, w}, d1[3] = {npos, h, w};
  sl_tensor_desc x2 = sl_desc_make(SL_U16, 4, d2, 2), x1 = sl_desc_make(SL_U16, 3, d1, 1);
  kv pn[1] = {{"descan", "none"}}, pp[1] = {{"descan", "plane"}};
  const int64_t chunks[2] = {npos, 100};
  for (int c = 0; c < 2; c++) {
    compare(&sl_node_com, pn, 1, &x2, 1, fr, NULL, 0, npos, chunks[c], "com blocks none 2d");
    compare(&sl_node_com, pp, 1, &x2, 1, fr, NULL, 0, npos, chunks[c], "com blocks plane 2d");
    compare(&sl_node_com, pp, 1, &x1, 1, fr, NULL, 0, npos, chunks[c], "com blocks plane 1d");
    compare(&sl_node_com, pp, 1, &x2, 1, sparse, NULL, 0, npos, chunks[c], "com blocks plane sparse");
    compare(&sl_node_com, pn, 1, &x2, 1, sparse, NULL, 0, npos, chunks[c], "com blocks none sparse");
  }
  free(fr);
  free(sparse);
}

int main(void) {
  sl_error e;
  sl_error_clear(&e);
  if (!sl_test_cuda_available()) return 0;
  if (sl_backend_ops_for(SL_BACKEND_CUDA)->create(0, &g_cuda, &e) != SL_OK) {
    printf("SKIP: no CUDA device (create failed: %s)\n", e.msg);
    return 0;
  }
  if (sl_cpu_backend_ops.create(2, &g_cpu, &e) != SL_OK) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_virtual_image), cmocka_unit_test(test_virtual_detectors),
      cmocka_unit_test(test_moments_com),   cmocka_unit_test(test_mask_correct),
      cmocka_unit_test(test_bin_detector),  cmocka_unit_test(test_sum),
      cmocka_unit_test(test_com_blocks),    cmocka_unit_test(test_many_frames),
      cmocka_unit_test(test_bf_segments),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  g_cpu->ops->destroy(g_cpu);
  g_cuda->ops->destroy(g_cuda);
  return rc;
}
