/* mask_correct on CUDA, in place (out == in, as the planner runs it on the
 * shipped pipelines) and into a buffer of its own, against the CPU kernel
 * (itself checked against an independent reference in test_mask_correct.c),
 * bit for bit: u8/u16/u32, every policy, flagged on and off, a static mask
 * input with corner and edge clusters, frames with flagged clusters (3x3 and
 * 5x5 blocks, row pairs, border columns, a frame flagged entirely), odd
 * sizes (scalar scan) and 16-byte rows (vector scan), chunks of 1, 7 and all
 * positions; and with the flag_counts input (counted here from the values,
 * as bslz4_decode gives them), the same bytes. Skips visibly without a CUDA device. */
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
#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_mask_correct;

static sl_backend *g_cpu, *g_cuda;
static int g_sparse; /* frames flagged as on a detector (check()) */

/* Frames: ~1 in 12 pixels at the flag value, clusters of flagged pixels,
 * the last frame flagged entirely. */
static void *flagged_frames(sl_dtype t, int64_t npos, int64_t h, int64_t w) {
  int64_t item = h * w;
  void *f = malloc((size_t)(npos * item) * sl_dtype_size(t));
  for (int64_t i = 0; i < npos * item; i++) {
    uint64_t v = rnd();
    set_pix(f, t, i, v % 12 == 0 ? dmax(t) : v % 12 == 1 ? dmax(t) - 1 : (v >> 8) & dmax(t));
  }
  for (int64_t p = 0; p < npos; p++) {
    char *g = (char *)f + (size_t)(p * item) * sl_dtype_size(t);
    int64_t r0 = (int64_t)(rnd() % (uint64_t)h), c0 = (int64_t)(rnd() % (uint64_t)w), side = p % 2 ? 5 : 3;
    for (int64_t r = r0; r < r0 + side && r < h; r++)
      for (int64_t c = c0; c < c0 + side && c < w; c++) set_pix(g, t, r * w + c, dmax(t));
    if (p % 3 == 0)
      for (int64_t c = 0; c < 2 * w && r0 * w + c < item; c++) set_pix(g, t, r0 * w + c, dmax(t));
    if (p % 4 == 1)
      for (int64_t r = 0; r < h; r++) set_pix(g, t, r * w, dmax(t)), set_pix(g, t, r * w + w - 1, dmax(t));
    if (p == npos - 1)
      for (int64_t i = 0; i < item; i++) set_pix(g, t, i, dmax(t));
  }
  return f;
}

static sl_code run1(sl_backend *b, sl_kernel_args *a, sl_error *e) {
  sl_code rc = b->ops->batch_begin(b, e);
  if (rc == SL_OK) rc = b->ops->batch_encode(b, a->node->desc->kernel[b->caps.kind], a, e);
  if (rc == SL_OK) rc = b->ops->batch_commit(b, e);
  sl_code w = b->ops->batch_wait(b, e);
  return rc ? rc : w;
}

/* Runs n on CUDA over npos positions in chunks, as the executor does: one
 * device chunk buffer for the input and (in_place) the same or (else) a
 * second one for the output; the mask uploaded once. */
static void run_cuda(sl_node *n, const void *frames, const uint8_t *mask, const uint32_t *counts, int64_t npos,
                     int64_t chunk, bool in_place, void *out) {
  const sl_backend_ops *o = g_cuda->ops;
  sl_error e;
  sl_error_clear(&e);
  int64_t ib = sl_desc_item_bytes(&n->in[0]), item = n->in[0].dims[n->in[0].rank - 2] *
                                                     n->in[0].dims[n->in[0].rank - 1];
  const int64_t cb = (item + 1023) / 1024 * 4; /* flag-count bytes per frame */
  void *din = NULL, *dout = NULL, *dmask = NULL, *dcounts = NULL;
  if (counts) assert_int_equal(o->alloc(g_cuda, (size_t)(chunk * cb), &dcounts, &e), SL_OK);
  assert_int_equal(o->alloc(g_cuda, (size_t)(chunk * ib) + 64, &din, &e), SL_OK);
  if (!in_place) assert_int_equal(o->alloc(g_cuda, (size_t)(chunk * ib) + 64, &dout, &e), SL_OK);
  if (mask) {
    assert_int_equal(o->alloc(g_cuda, (size_t)item, &dmask, &e), SL_OK);
    assert_int_equal(o->upload(g_cuda, dmask, mask, (size_t)item, &e), SL_OK);
  }
  test_table table = {0};
  const int64_t last = npos % chunk ? npos % chunk : chunk;
  assert_int_equal(test_table_lend(&table, g_cuda, test_table_bytes(n, chunk, last), &e), SL_OK);
  for (int64_t s = 0; s < npos; s += chunk) {
    int64_t cnt = npos - s < chunk ? npos - s : chunk;
    sl_kernel_args a;
    memset(&a, 0, sizeof a);
    a.backend = g_cuda;
    a.node = n;
    a.state = n->state;
    test_table_args(&table, &a);
    a.pos_start = s;
    a.pos_count = cnt;
    a.chunk = s / chunk;
    a.n_chunks = (npos + chunk - 1) / chunk;
    a.err = &e;
    assert_int_equal(o->upload(g_cuda, din, (const char *)frames + s * ib, (size_t)(cnt * ib), &e), SL_OK);
    if (counts)
      assert_int_equal(o->upload(g_cuda, dcounts, (const char *)counts + s * cb, (size_t)(cnt * cb), &e), SL_OK);
    a.in[0] = din;
    a.in[1] = dmask;
    a.in[2] = dcounts;
    a.out[0] = in_place ? din : dout;
    sl_code rc = run1(g_cuda, &a, &e);
    if (rc) fprintf(stderr, "cuda: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    assert_int_equal(o->download(g_cuda, (char *)out + s * ib, a.out[0], (size_t)(cnt * ib), &e), SL_OK);
  }
  test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
  o->free(g_cuda, din, 0);
  if (dout) o->free(g_cuda, dout, 0);
  if (dmask) o->free(g_cuda, dmask, 0);
  if (dcounts) o->free(g_cuda, dcounts, 0);
}

/* The flag counts of the frames, by value (bslz4_decode's flag_counts). */
static uint32_t *value_counts(const void *frames, sl_dtype t, int64_t npos, int64_t item) {
  const int64_t groups = (item + 1023) / 1024;
  uint32_t *c = calloc((size_t)(npos * groups), 4);
  for (int64_t i = 0; i < npos * item; i++) c[(i / item) * groups + (i % item) / 1024] += pix(frames, t, i) == dmax(t);
  return c;
}

static void check(sl_dtype t, int64_t h, int64_t w, const char *policy, bool flagged, bool with_mask) {
  const int64_t npos = 23, item = h * w;
  int64_t d[3] = {npos, h, w}, md[2] = {h, w}, cd[2] = {npos, (item + 1023) / 1024};
  sl_tensor_desc in[3] = {sl_desc_make(t, 3, d, 1), sl_desc_make(SL_U8, 2, md, 0), sl_desc_make(SL_U32, 2, cd, 1)};
  sl_tensor_desc in_counts[3] = {in[0], in[1], in[2]};
  if (!with_mask) in_counts[1].dtype = SL_DT_INVALID; /* not connected */
  uint8_t *mask = malloc((size_t)item);
  for (int64_t i = 0; i < item; i++) mask[i] = rnd() % 19 == 0;
  mask[0] = mask[1] = mask[w] = 1;                     /* a corner cluster */
  mask[item - 1] = mask[item - 2] = 1;                 /* the last corner */
  if (h > 4 && w > 4) mask[2 * w + 2] = mask[2 * w + 3] = mask[3 * w + 2] = 1;
  void *frames = flagged_frames(t, npos, h, w);
  if (g_sparse) /* as a detector: the static bad pixels at the flag value, one more per frame */
    for (int64_t i = 0; i < npos * item; i++) {
      if (mask[i % item]) set_pix(frames, t, i, dmax(t));
      else if (pix(frames, t, i) == dmax(t) || i % item == 0) set_pix(frames, t, i, dmax(t) - 1);
      if (i % item == (int64_t)(rnd() % (uint64_t)item) && !mask[i % item]) set_pix(frames, t, i, dmax(t));
    }
  size_t bytes = (size_t)(npos * item) * sl_dtype_size(t);
  void *want = malloc(bytes), *got = malloc(bytes);
  kv p[2] = {{"policy", policy}, {"flagged", flagged ? "true" : "false"}};
  sl_error e;
  sl_node cpu, dev;
  assert_int_equal(node_make(&cpu, &sl_node_mask_correct, p, 2, in, with_mask ? 2 : 1, &e), SL_OK);
  assert_int_equal(cpu.desc->prepare(&cpu, &e), SL_OK);
  const void *whole[1] = {with_mask ? mask : NULL};
  void *outs[1] = {want};
  assert_int_equal(run_stream(&cpu, g_cpu, frames, whole, 1, outs, npos, npos, &e), SL_OK);
  const int64_t chunks[3] = {1, 7, npos};
  uint32_t *counts = value_counts(frames, t, npos, item);
  for (int c = 0; c < 3; c++)
    for (int ip = 0; ip <= 1; ip++)
      for (int wc = 0; wc <= 1; wc++) {
      /* a fresh node per run: device state is built on its first call */
      if (wc)
        assert_int_equal(node_make(&dev, &sl_node_mask_correct, p, 2, in_counts, 3, &e), SL_OK);
      else
        assert_int_equal(node_make(&dev, &sl_node_mask_correct, p, 2, in, with_mask ? 2 : 1, &e), SL_OK);
      assert_int_equal(dev.desc->prepare(&dev, &e), SL_OK);
      memset(got, 0xA5, bytes);
      run_cuda(&dev, frames, with_mask ? mask : NULL, wc ? counts : NULL, npos, chunks[c], ip, got);
      if (memcmp(got, want, bytes)) {
        for (int64_t i = 0; i < npos * item; i++)
          if (pix(got, t, i) != pix(want, t, i)) {
            fprintf(stderr, "%s %lldx%lld %s flagged %d mask %d counts %d chunk %lld %s: frame %lld (%lld, %lld): "
                    "cuda %llu cpu %llu\n", sl_dtype_name(t), (long long)h, (long long)w, policy, flagged,
                    with_mask, wc, (long long)chunks[c], ip ? "in place" : "own buffer", (long long)(i / item),
                    (long long)(i % item / w), (long long)(i % w), (unsigned long long)pix(got, t, i),
                    (unsigned long long)pix(want, t, i));
            break;
          }
        fail();
      }
      node_free(&dev);
    }
  free(counts);
  node_free(&cpu);
  free(frames);
  free(want);
  free(got);
  free(mask);
}

static void test_in_place_and_own_buffer(void **st) {
  (void)st;
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const int64_t sizes[][2] = {{17, 23}, {16, 32}, {64, 64}, {1, 9}, {45, 48}}; /* 45x48: 3 flag groups */
  static const char *pol[3] = {"median", "zero", "none"};
  for (int ti = 0; ti < 3; ti++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (int k = 0; k < 3; k++)
        for (int fl = 0; fl <= 1; fl++)
          for (int m = 0; m <= 1; m++) check(types[ti], sizes[si][0], sizes[si][1], pol[k], fl, m);
  /* sparse flags: most groups' counts agree and are skipped with the counts */
  g_sparse = 1;
  for (int ti = 0; ti < 3; ti++)
    for (int k = 0; k < 2; k++) {
      check(types[ti], 45, 48, pol[k], true, true);
      check(types[ti], 64, 64, pol[k], true, true);
      check(types[ti], 33, 71, pol[k], true, false);
    }
  g_sparse = 0;
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
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_in_place_and_own_buffer)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  g_cpu->ops->destroy(g_cpu);
  g_cuda->ops->destroy(g_cuda);
  return rc;
}
