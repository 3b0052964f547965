/* mask_correct: every policy against a plainly written reference (its own
 * median by qsort over a per-pixel bad map), u8/u16/u32, odd detector sizes,
 * masked corners/edges/clusters, flagged values, chunks of 1..all on 1 and 2
 * threads, into a buffer of its own and in place (out == in, as the planner
 * runs it), dense and clustered flags, masks from the input, a .npy file or
 * both; with the flag_counts input (counted here by value, per 1024 pixels)
 * the same bytes as without; notes; errors. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/core/simd.h"
#include "tests/unit/node_harness.h"
#include "nodes/registry.h"
#include "tests/unit/test_support.h"

extern const sl_node_desc sl_node_mask_correct;

/* ---- harness ------------------------------------------------------------------ */

static char g_dir[256];

/* A node of mask_correct with params from `over` (YAML text) or defaults, the
 * frames descriptor and an optional mask descriptor (NULL = unconnected);
 * runs infer. */
static sl_code correct_make(sl_node *n, const kv *over, int n_over, const sl_tensor_desc *frames,
                       const sl_tensor_desc *mask, sl_error *e) {
  sl_tensor_desc in[2] = {*frames, mask ? *mask : *frames};
  return node_make(n, &sl_node_mask_correct, over, n_over, in, mask ? 2 : 1, e);
}

/* Runs the kernel over all positions in chunks of `chunk`. */
static void run_chunks(sl_node *n, sl_backend *b, const void *frames, const void *mask,
                       int64_t npos, int64_t chunk, void *out) {
  sl_error e;
  const void *whole[1] = {mask};
  void *outs[1] = {out};
  sl_code rc = run_stream(n, b, frames, whole, 1, outs, npos, chunk, &e);
  if (rc) fprintf(stderr, "kernel: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
}

/* Runs a node with all three inputs (the mask's dtype SL_DT_INVALID when it
 * is not connected) over all positions in chunks of `chunk`: the frames and
 * the flag counts advance with the chunk. */
static void run_chunks_counts(sl_node *n, sl_backend *b, const void *frames, const void *mask,
                              const uint32_t *counts, int64_t npos, int64_t chunk, void *out) {
  const int64_t ib = sl_desc_item_bytes(&n->in[0]), groups = n->in[2].dims[n->in[2].rank - 1];
  sl_error e;
  sl_error_clear(&e);
  for (int64_t s = 0; s < npos; s += chunk) {
    sl_kernel_args a;
    memset(&a, 0, sizeof a);
    a.backend = b;
    a.node = n;
    a.state = n->state;
    a.pos_start = s;
    a.pos_count = npos - s < chunk ? npos - s : chunk;
    a.in[0] = (const char *)frames + s * ib;
    a.in[1] = mask;
    a.in[2] = counts + s * groups;
    a.out[0] = (char *)out + s * ib;
    a.err = &e;
    sl_code rc = n->desc->kernel[SL_BACKEND_CPU](&a);
    if (rc) fprintf(stderr, "kernel: %s\n", e.msg);
    assert_int_equal(rc, SL_OK);
  }
}

/* Makes and prepares a node with the mask input connected and runs it on
 * the one frame `frame` into out. The node stays for note checks: node_free
 * it. */
static void correct_one_frame(sl_node *n, const kv *o, int n_o, const sl_tensor_desc *in,
                              const sl_tensor_desc *mdesc, sl_backend *b, const void *frame,
                              const void *mask, void *out) {
  sl_error e;
  assert_int_equal(correct_make(n, o, n_o, in, mdesc, &e), SL_OK);
  assert_int_equal(n->desc->prepare(n, &e), SL_OK);
  run_chunks(n, b, frame, mask, 1, 1, out);
}

/* Random frames; about 1 in `one_in` pixels at the dtype max (the flag
 * value; 1 in 12 when 0); one in `one_in` more just below it, the rest spread
 * over the whole range. */
static void *random_frames_near_max(sl_dtype t, int64_t n, int one_in) {
  void *f = malloc((size_t)n * sl_dtype_size(t));
  uint64_t k = one_in > 1 ? (uint64_t)one_in : 12;
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    uint64_t x = v % k == 0 ? dmax(t) : v % k == 1 ? dmax(t) - 1 : (v >> 8) & dmax(t);
    if (one_in == 1) x = v % 8 ? dmax(t) : (v >> 8) & dmax(t); /* nearly all flagged */
    set_pix(f, t, i, x);
  }
  return f;
}

/* Frames of flagged clusters: whole rows, row pairs, 3x3 and 5x5 blocks at
 * the flag value, at the borders and inside; one frame flagged entirely. */
static void flag_clusters(void *f, sl_dtype t, int64_t npos, int64_t h, int64_t w) {
  for (int64_t p = 0; p < npos; p++) {
    char *g = (char *)f + (size_t)(p * h * w) * sl_dtype_size(t);
    int64_t r0 = (int64_t)(rnd() % (uint64_t)h), c0 = (int64_t)(rnd() % (uint64_t)w);
    int64_t side = p % 2 ? 5 : 3;
    for (int64_t r = r0; r < r0 + side && r < h; r++)
      for (int64_t c = c0; c < c0 + side && c < w; c++) set_pix(g, t, r * w + c, dmax(t));
    if (p % 3 == 0) /* a full row and the next */
      for (int64_t c = 0; c < 2 * w && r0 * w + c < h * w; c++) set_pix(g, t, r0 * w + c, dmax(t));
    if (p % 4 == 1) /* the corners and the first and last columns */
      for (int64_t r = 0; r < h; r++) {
        set_pix(g, t, r * w, dmax(t));
        set_pix(g, t, r * w + w - 1, dmax(t));
      }
    if (p == npos - 1)
      for (int64_t i = 0; i < h * w; i++) set_pix(g, t, i, dmax(t));
  }
}

/* As a detector writes them: only the static bad pixels at the flag value,
 * and one more pixel per frame, somewhere else each time (the case where a
 * block's flag count must be this frame's and this block's). */
static void sparse_flags(void *f, sl_dtype t, int64_t npos, int64_t item, const uint8_t *static_bad) {
  for (int64_t p = 0; p < npos; p++)
    for (int64_t i = 0; i < item; i++) {
      int64_t q = p * item + i;
      if (static_bad[i]) set_pix(f, t, q, dmax(t));
      else if (pix(f, t, q) == dmax(t)) set_pix(f, t, q, dmax(t) - 1);
    }
  for (int64_t p = 0; p < npos; p++) set_pix(f, t, p * item + (int64_t)(rnd() % (uint64_t)item), dmax(t));
}

/* ---- reference ------------------------------------------------------------------ */

/* What bslz4_decode's flag_counts holds, counted plainly: per frame, per
 * 1024 consecutive pixels, the pixels at the dtype maximum. */
enum { GROUP = 1024 };
static uint32_t *reference_counts(const void *in, sl_dtype t, int64_t npos, int64_t item) {
  const int64_t groups = (item + GROUP - 1) / GROUP;
  uint32_t *c = calloc((size_t)(npos * groups), sizeof *c);
  for (int64_t p = 0; p < npos; p++)
    for (int64_t i = 0; i < item; i++)
      c[p * groups + i / GROUP] += pix(in, t, p * item + i) == dmax(t);
  return c;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* policy: 0 median, 1 zero, 2 none. static_bad: H*W 0/1. */
static void reference(const void *in, void *out, sl_dtype t, int64_t npos, int64_t h, int64_t w,
                      const uint8_t *static_bad, int policy, int flagged) {
  int64_t item = h * w;
  uint8_t *bad = malloc((size_t)item);
  for (int64_t p = 0; p < npos; p++) {
    const char *f = (const char *)in + (size_t)(p * item) * sl_dtype_size(t);
    char *g = (char *)out + (size_t)(p * item) * sl_dtype_size(t);
    for (int64_t i = 0; i < item; i++)
      bad[i] = static_bad[i] || (flagged && pix(f, t, i) == dmax(t));
    for (int64_t r = 0; r < h; r++)
      for (int64_t c = 0; c < w; c++) {
        int64_t i = r * w + c;
        uint64_t v = pix(f, t, i);
        if (policy != 2 && bad[i]) {
          if (policy == 1) {
            v = 0;
          } else {
            uint64_t vals[9];
            size_t nv = 0;
            for (int64_t rr = r - 1; rr <= r + 1; rr++)
              for (int64_t cc = c - 1; cc <= c + 1; cc++) {
                if (rr < 0 || cc < 0 || rr >= h || cc >= w || (rr == r && cc == c)) continue;
                if (bad[rr * w + cc]) continue;
                vals[nv++] = pix(f, t, rr * w + cc);
              }
            qsort(vals, nv, sizeof vals[0], cmp_u64);
            if (nv == 0) v = 0;
            else if (nv % 2) v = vals[nv / 2];
            else v = (vals[nv / 2 - 1] + vals[nv / 2]) / 2;
          }
        }
        set_pix(g, t, i, v);
      }
  }
  free(bad);
}

/* Bad pixels in the corners, on the edges, a 3x3 cluster (its centre has no
 * valid neighbour), a 2-pixel pair and ~4% at random. */
static void make_mask(uint8_t *m, int64_t h, int64_t w) {
  memset(m, 0, (size_t)(h * w));
  m[0] = 1;
  m[w - 1] = 1;
  m[(h - 1) * w] = 1;
  m[h * w - 1] = 1;
  m[w / 2] = 1;
  m[(h / 2) * w] = 1;
  if (h >= 5 && w >= 5) {
    for (int64_t r = h / 2 - 1; r <= h / 2 + 1; r++)
      for (int64_t c = w / 2 - 1; c <= w / 2 + 1; c++) m[r * w + c] = 1;
    m[(h - 2) * w + 1] = m[(h - 2) * w + 2] = 1;
  }
  for (int64_t i = 0; i < h * w; i++)
    if (rnd() % 25 == 0) m[i] = 1;
}

/* ---- .npy ------------------------------------------------------------------------ */

static void write_npy_u1(const char *path, const uint8_t *m, int64_t h, int64_t w) {
  char dict[128];
  snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (%lld, %lld), }",
           (long long)h, (long long)w);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  size_t dl = strlen(dict), total = 10 + dl + 1, padn = (64 - total % 64) % 64, hlen = dl + padn + 1;
  unsigned char hdr[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xFF),
                           (unsigned char)(hlen >> 8)};
  fwrite(hdr, 1, 10, f);
  fwrite(dict, 1, dl, f);
  for (size_t i = 0; i < padn; i++) fputc(' ', f);
  fputc('\n', f);
  /* nonzero other than 1, to check "nonzero = bad" */
  for (int64_t i = 0; i < h * w; i++) fputc(m[i] ? 0x80 : 0, f);
  fclose(f);
}

/* ---- the main comparison -------------------------------------------------------- */

enum { SRC_INPUT = 1, SRC_FILE = 2 };

typedef struct correct_case {
  sl_dtype t;
  int64_t h, w;
  int policy; /* 0 median, 1 zero, 2 none */
  int flagged;
  int sources;       /* SRC_INPUT | SRC_FILE, or 0 */
  sl_dtype mask_t;   /* dtype of the mask input */
  int flags;         /* 0: 1 in 12 pixels flagged; k > 1: 1 in k; 1: nearly all;
                        -1: clusters of flagged pixels over the 1 in 12;
                        -2: as a detector: the static bad pixels and one more per frame */
} correct_case;

static const char *policy_yaml[3] = {"median", "zero", "none"};

/* One case on one of the CPU kernel's paths (param simd: scalar or avx2, the
 * static medians by gathers). */
static void check_case_path(const correct_case *k, const char *simd) {
  const int64_t rows = 3, cols = 5, npos = rows * cols, h = k->h, w = k->w, item = h * w;
  int64_t d[4] = {rows, cols, h, w};
  sl_tensor_desc in = sl_desc_make(k->t, 4, d, 2);
  int64_t md[2] = {h, w};
  sl_tensor_desc mdesc = sl_desc_make(k->mask_t, 2, md, 0);

  /* Static masks: input and file overlap in part. */
  uint8_t *m_in = calloc((size_t)item, 1), *m_file = calloc((size_t)item, 1),
          *m_all = calloc((size_t)item, 1);
  make_mask(m_all, h, w);
  for (int64_t i = 0; i < item; i++) {
    if (!m_all[i]) continue;
    int which = (int)(rnd() % 3); /* 0 input, 1 file, 2 both */
    if (!(k->sources & SRC_FILE)) which = 0;
    if (!(k->sources & SRC_INPUT)) which = 1;
    if (which != 1) m_in[i] = 1;
    if (which != 0) m_file[i] = 1;
  }
  if (!k->sources) memset(m_all, 0, (size_t)item);
  void *mask = malloc((size_t)item * sl_dtype_size(k->mask_t));
  for (int64_t i = 0; i < item; i++)
    set_pix(mask, k->mask_t, i, m_in[i] ? (k->mask_t == SL_U32 ? 0x80000000u : 3u) : 0);

  char path[512], yaml[600];
  snprintf(path, sizeof path, "%s/mask_%lldx%lld.npy", g_dir, (long long)h, (long long)w);
  write_npy_u1(path, m_file, h, w);
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv o[4] = {{"policy", policy_yaml[k->policy]}, {"flagged", k->flagged ? "true" : "false"},
             {"mask_file", (k->sources & SRC_FILE) ? yaml : ""}, {"simd", simd}};

  sl_node n;
  sl_error e;
  sl_code rc = correct_make(&n, o, 4, &in, (k->sources & SRC_INPUT) ? &mdesc : NULL, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  assert_true(sl_desc_equal_shape(&n.out[0], &in));
  assert_int_equal(n.out[0].dtype, k->t);
  assert_int_equal(n.out[0].stream_rank, 2);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);

  size_t bytes = (size_t)(npos * item) * sl_dtype_size(k->t);
  void *frames = random_frames_near_max(k->t, npos * item, k->flags > 0 ? k->flags : 0);
  if (k->flags == -1) flag_clusters(frames, k->t, npos, h, w);
  if (k->flags == -2) sparse_flags(frames, k->t, npos, item, m_all);
  void *want = malloc(bytes), *got = malloc(bytes);
  reference(frames, want, k->t, npos, h, w, m_all, k->policy, k->flagged);
  if (k->policy == 2) assert_memory_equal(want, frames, bytes);
  int64_t chunks[3] = {1, 4, npos};
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    for (int c = 0; c < 3; c++) {
      memset(got, 0xA5, bytes);
      run_chunks(&n, b, frames, (k->sources & SRC_INPUT) ? mask : NULL, npos, chunks[c], got);
      if (memcmp(got, want, bytes)) {
        for (int64_t i = 0; i < npos * item; i++)
          if (pix(got, k->t, i) != pix(want, k->t, i)) {
            fprintf(stderr,
                    "%s %lldx%lld policy %s flagged %d sources %d chunk %lld: frame %lld pixel "
                    "(%lld, %lld): got %llu want %llu (input %llu)\n",
                    sl_dtype_name(k->t), (long long)h, (long long)w, policy_yaml[k->policy],
                    k->flagged, k->sources, (long long)chunks[c], (long long)(i / item),
                    (long long)(i % item / w), (long long)(i % w),
                    (unsigned long long)pix(got, k->t, i), (unsigned long long)pix(want, k->t, i),
                    (unsigned long long)pix(frames, k->t, i));
            break;
          }
        fail();
      }
      /* In place, as the planner runs it on the shipped pipelines: out == in. */
      memcpy(got, frames, bytes);
      run_chunks(&n, b, got, (k->sources & SRC_INPUT) ? mask : NULL, npos, chunks[c], got);
      if (memcmp(got, want, bytes)) {
        for (int64_t i = 0; i < npos * item; i++)
          if (pix(got, k->t, i) != pix(want, k->t, i)) {
            fprintf(stderr,
                    "in place: %s %lldx%lld policy %s flagged %d flags %d chunk %lld: frame %lld "
                    "pixel (%lld, %lld): got %llu want %llu (input %llu)\n",
                    sl_dtype_name(k->t), (long long)h, (long long)w, policy_yaml[k->policy],
                    k->flagged, k->flags, (long long)chunks[c], (long long)(i / item),
                    (long long)(i % item / w), (long long)(i % w),
                    (unsigned long long)pix(got, k->t, i), (unsigned long long)pix(want, k->t, i),
                    (unsigned long long)pix(frames, k->t, i));
            break;
          }
        fail();
      }
    }
    sl_cpu_backend_ops.destroy(b);
  }
  /* With the flag_counts input: the same bytes, out of place and in place. */
  {
    int64_t cd[3] = {rows, cols, (item + GROUP - 1) / GROUP};
    sl_tensor_desc ins[3] = {in, mdesc, sl_desc_make(SL_U32, 3, cd, 2)};
    if (!(k->sources & SRC_INPUT)) ins[1].dtype = SL_DT_INVALID; /* not connected */
    sl_node nc;
    assert_int_equal(node_make(&nc, &sl_node_mask_correct, o, 4, ins, 3, &e), SL_OK);
    assert_int_equal(nc.desc->prepare(&nc, &e), SL_OK);
    if (k->flagged) assert_non_null(note(&nc, "flag_counts"));
    uint32_t *counts = reference_counts(frames, k->t, npos, item);
    const void *m = (k->sources & SRC_INPUT) ? mask : NULL;
    for (int th = 1; th <= 2; th++) {
      sl_backend *b = backend(th);
      for (int c = 0; c < 3; c++) {
        memset(got, 0xA5, bytes);
        run_chunks_counts(&nc, b, frames, m, counts, npos, chunks[c], got);
        assert_memory_equal(got, want, bytes);
        memcpy(got, frames, bytes);
        run_chunks_counts(&nc, b, got, m, counts, npos, chunks[c], got);
        assert_memory_equal(got, want, bytes);
      }
      sl_cpu_backend_ops.destroy(b);
    }
    free(counts);
    node_free(&nc);
  }
  /* The static count recorded once the mask is known. */
  int64_t n_static = 0;
  for (int64_t i = 0; i < item; i++) n_static += m_all[i];
  const char *sb = note(&n, "static_bad_pixels");
  assert_non_null(sb);
  char want_note[64];
  snprintf(want_note, sizeof want_note, "static_bad_pixels: %lld", (long long)n_static);
  size_t wl = strlen(want_note);
  int ok = !strncmp(sb, want_note, wl) && (sb[wl] == 0 || sb[wl] == ' ');
  if (!ok) fprintf(stderr, "note '%s', want '%s'\n", sb, want_note);
  assert_true(ok);
  assert_non_null(note(&n, "policy"));
  assert_non_null(strstr(note(&n, "policy"), policy_yaml[k->policy]));
  assert_non_null(note(&n, "flagged"));
  const char *ms = note(&n, "mask_sources");
  assert_non_null(ms);
  if (k->sources & SRC_FILE) assert_non_null(strstr(ms, path));
  if (k->sources & SRC_INPUT) assert_non_null(strstr(ms, "input 'mask'"));
  if (!k->sources) assert_non_null(strstr(ms, "none"));

  free(frames);
  free(want);
  free(got);
  free(mask);
  free(m_in);
  free(m_file);
  free(m_all);
  node_free(&n);
}

/* Every case on the portable path and, where the CPU has it, the AVX2 one. */
static void check_case(const correct_case *k) {
  check_case_path(k, "scalar");
  if (sl_simd_supported(SL_SIMD_AVX2)) check_case_path(k, "avx2");
}

static void test_policies_dtypes_sizes(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const int64_t sizes[][2] = {{17, 23}, {5, 5}, {1, 9}, {8, 1}, {2, 3}, {1, 1}, {32, 31}};
  for (int ti = 0; ti < 3; ti++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (int pol = 0; pol < 3; pol++)
        for (int fl = 0; fl <= 1; fl++) {
          correct_case k = {types[ti], sizes[si][0], sizes[si][1], pol, fl, SRC_INPUT | SRC_FILE,
                       (si & 1) ? SL_U32 : SL_U8, 0};
          check_case(&k);
        }
}

/* Dense and clustered flags: many flagged pixels side by side (each must be
 * corrected from original values only, in place too), frames with hardly a
 * valid pixel, a frame flagged entirely; sparse flags as on a detector;
 * sizes that span several scan blocks, and widths of 1 and 2. */
static void test_dense_flags(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  const int64_t sizes[][2] = {{64, 67}, {40, 1}, {3, 700}, {130, 2}, {9, 9}};
  const int flags[5] = {-1, 3, 1, 2, -2};
  for (int ti = 0; ti < 3; ti++)
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
      for (int fi = 0; fi < 5; fi++)
        for (int pol = 0; pol < 3; pol++) {
          correct_case k = {types[ti], sizes[si][0], sizes[si][1], pol, 1, (int)(si % 4),
                            SL_U16, flags[fi]};
          check_case(&k);
        }
}

static void test_mask_sources(void **st) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++)
    for (int src = 0; src <= 3; src++)
      for (int pol = 0; pol < 2; pol++) {
        correct_case k = {types[ti], 19, 13, pol, 1, src, SL_U32, 0};
        check_case(&k);
        correct_case k2 = {types[ti], 19, 13, pol, 0, src, SL_U8, 0};
        check_case(&k2);
        correct_case k3 = {types[ti], 7, 6, pol, 1, src, SL_U16, 0};
        check_case(&k3);
        /* frames large enough that 2 threads split a chunk's frames */
        correct_case k4 = {types[ti], 128, 131, pol, 1, src, src & 1 ? SL_U8 : SL_U32, 0};
        check_case(&k4);
      }
}

/* Hand-worked values, independent of both implementations above. */
static void test_hand_values(void **st) {
  /* 3x4 u16 frame:
   *   10   20   30   40
   *   50 [ 60] 70 65535
   *   80   90  100  110
   * (1,1) masked: neighbours 10 20 30 50 70 80 90 100 -> even count 8, middle
   * values 50 and 70 -> 60. (1,3) flagged: neighbours 30 40 70 100 110 ->
   * 70. With (1,2) also masked: (1,1) has 10 20 30 50 80 90 100 -> 50;
   * (1,3) has 30 40 100 110 -> floor((40 + 100) / 2) = 70; (1,2) has
   * 20 30 40 90 100 110 (60 masked, 65535 flagged) -> floor((40+90)/2) = 65. */
  uint16_t f[12] = {10, 20, 30, 40, 50, 60, 70, 65535, 80, 90, 100, 110};
  int64_t d[3] = {1, 3, 4};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  int64_t md[2] = {3, 4};
  sl_tensor_desc mdesc = sl_desc_make(SL_U8, 2, md, 0);
  /* Each case: the static mask, a param, and the output pixels it fixes. */
  static const struct {
    uint8_t mask[12];
    kv param; /* {NULL, NULL}: the defaults */
    int n;
    int at[4];
    uint16_t want[4];
    int static_bad;
  } cases[] = {
      {{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {NULL, NULL}, 4, {5, 7, 0, 6}, {60, 70, 10, 70}, 1},
      {{0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {NULL, NULL}, 3, {5, 6, 7}, {50, 65, 70}, 2},
      /* flagged off: 65535 is a value, a neighbour of (1,2):
       * 20 30 40 60 65535 90 100 110 -> floor((60 + 90) / 2) = 75 */
      {{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {"flagged", "false"}, 2, {6, 7}, {75, 65535}, 1},
      {{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {"policy", "zero"}, 3, {6, 7, 5}, {0, 0, 60}, 1},
  };
  sl_backend *b = backend(2);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t out[12];
    sl_node n;
    correct_one_frame(&n, &cases[i].param, cases[i].param.name ? 1 : 0, &in, &mdesc, b, f,
                      cases[i].mask, out);
    for (int k = 0; k < cases[i].n; k++) {
      if (out[cases[i].at[k]] != cases[i].want[k])
        fail_msg("case %zu: pixel %d is %u, want %u", i, cases[i].at[k], out[cases[i].at[k]],
                 cases[i].want[k]);
    }
    char want_note[64];
    snprintf(want_note, sizeof want_note, "static_bad_pixels: %d", cases[i].static_bad);
    assert_non_null(strstr(note(&n, "static_bad_pixels"), want_note));
    node_free(&n);
  }
  {
    /* Everything masked: no valid neighbour anywhere -> 0. u32 flag value. */
    uint32_t g[4] = {1, 0xFFFFFFFFu, 3, 4};
    uint32_t m[4] = {1, 0, 1, 1};
    uint32_t out[4];
    int64_t d2[3] = {1, 2, 2};
    sl_tensor_desc in2 = sl_desc_make(SL_U32, 3, d2, 1);
    int64_t md2[2] = {2, 2};
    sl_tensor_desc m2 = sl_desc_make(SL_U32, 2, md2, 0);
    sl_node n;
    correct_one_frame(&n, NULL, 0, &in2, &m2, b, g, m, out);
    for (int i = 0; i < 4; i++) assert_int_equal(out[i], 0);
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
}

/* ---- cost ------------------------------------------------------------------------- */

static void test_cost(void **st) {
  int64_t d[3] = {10, 17, 23};
  sl_tensor_desc in = sl_desc_make(SL_U16, 3, d, 1);
  sl_node n;
  sl_error e;
  /* Before the mask is read, the static lists are planned for what is known
   * of it: nothing without a mask, the producer's bad-pixel count when it
   * knows it (detector_mask), every pixel when it does not. 73 bytes of
   * list per bad pixel (an index, 8 neighbours, a count), and for the AVX2
   * medians of u16 frames 3 gather tables of 8 int32 slots, padded by 8, and
   * the window tables (an int32 offset and 8 u16 slot masks a pixel). */
  const int64_t item = 17 * 23, per_bad = 8 * 9 + 1;
  int64_t md[2] = {17, 23};
  sl_tensor_desc mdesc = sl_desc_make(SL_U8, 2, md, 0), known = mdesc;
  known.nonzero_known = true, known.nonzero_bound = 5;
  const struct { const sl_tensor_desc *mask; int64_t bad; } bounds[] = {
      {NULL, 0}, {&known, 5}, {&mdesc, item}};
  sl_node_cost c;
  for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
    assert_int_equal(correct_make(&n, NULL, 0, &in, bounds[k].mask, &e), SL_OK);
    n.desc->cost(&n, 4, &c);
    const int64_t gather = bounds[k].bad ? 3 * 8 * 4 * (bounds[k].bad + 8) + 20 * bounds[k].bad : 0;
    assert_int_equal(c.state_bytes, 2 * item + bounds[k].bad * per_bad + gather);
    assert_int_equal(c.bytes_read, 4 * item * 2); /* the flag scan reads every pixel */
    assert_int_equal(c.bytes_written, 4 * bounds[k].bad * 2);
    /* work: the scan a seventh a pixel, 30 a bad pixel, 16 a frame
     * (docs/nodes/mask_correct.md, Cost) */
    assert_int_equal(c.ops, 4 * (item / 7 + 16 + 30 * bounds[k].bad));
    assert_int_equal(c.workspace_bytes, 0);
    node_free(&n);
  }
  assert_int_equal(correct_make(&n, NULL, 0, &in, NULL, &e), SL_OK);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  sl_backend *b = backend(1);
  uint16_t *f = calloc(10 * 17 * 23, 2), *o = calloc(10 * 17 * 23, 2);
  run_chunks(&n, b, f, NULL, 10, 10, o);
  n.desc->cost(&n, 4, &c);
  assert_int_equal(c.state_bytes, 2 * item); /* no static bad pixel */
  /* In place, with no static bad pixel: the flag scan reads every pixel,
   * nothing is written but flagged pixels (not counted). */
  assert_int_equal(c.bytes_read, 4 * 17 * 23 * 2);
  assert_int_equal(c.bytes_written, 0);
  node_free(&n);
  /* Without `flagged`: only the static bad pixels (5 from the mask input)
   * and their 8 neighbours are touched; policy none costs nothing. */
  uint8_t mask[17 * 23] = {0};
  mask[0] = mask[40] = mask[100] = mask[200] = mask[390] = 1;
  kv off[1] = {{"flagged", "false"}};
  assert_int_equal(correct_make(&n, off, 1, &in, &mdesc, &e), SL_OK);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  run_chunks(&n, b, f, mask, 10, 10, o);
  n.desc->cost(&n, 4, &c);
  assert_int_equal(c.bytes_read, 4 * 5 * 9 * 2);
  assert_int_equal(c.bytes_written, 4 * 5 * 2);
  node_free(&n);
  /* A mask with more bad pixels than its producer said when planning (the
   * lists were planned for 4): refused at the first chunk, nothing written
   * past the plan. */
  {
    sl_tensor_desc four = mdesc;
    four.nonzero_known = true, four.nonzero_bound = 4;
    assert_int_equal(correct_make(&n, off, 1, &in, &four, &e), SL_OK);
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    const void *whole[1] = {mask};
    void *outs[1] = {o};
    sl_code rc = run_stream(&n, b, f, whole, 1, outs, 10, 10, &e);
    expect_failed(rc, &e, SL_ERR_PIPELINE, "5 bad pixels, more than the 4 the plan was made for", NULL);
    node_free(&n);
  }
  /* With `flagged` and the flag counts (1 group of 17 x 23): no scan; the
   * counts, and the static pixels with their neighbours, at most the frame. */
  {
    int64_t cd[2] = {10, 1};
    sl_tensor_desc ins[3] = {in, mdesc, sl_desc_make(SL_U32, 2, cd, 1)};
    assert_int_equal(node_make(&n, &sl_node_mask_correct, NULL, 0, ins, 3, &e), SL_OK);
    n.desc->cost(&n, 4, &c);
    assert_int_equal(c.bytes_read, 4 * (17 * 23 * 2 + 4)); /* every pixel bad bounds it */
    assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
    uint32_t counts[10] = {0};
    sl_backend *b1 = backend(1);
    run_chunks_counts(&n, b1, f, mask, counts, 10, 10, o);
    sl_cpu_backend_ops.destroy(b1);
    n.desc->cost(&n, 4, &c);
    assert_int_equal(c.bytes_read, 4 * (5 * 9 * 2 + 4));
    assert_int_equal(c.bytes_written, 4 * 5 * 2);
    node_free(&n);
  }
  kv none[1] = {{"policy", "none"}};
  assert_int_equal(correct_make(&n, none, 1, &in, NULL, &e), SL_OK);
  n.desc->cost(&n, 4, &c);
  assert_int_equal(c.bytes_read + c.bytes_written + c.ops, 0);
  sl_cpu_backend_ops.destroy(b);
  free(f);
  free(o);
  node_free(&n);
}

/* ---- errors ----------------------------------------------------------------------- */

/* A mask_correct node (see correct_make) must fail as expect_failed says. */
static void expect_error(const kv *o, int n_o, const sl_tensor_desc *in, const sl_tensor_desc *m,
                         sl_code want, const char *needle, const char *needle2) {
  sl_node n;
  sl_error e;
  sl_code rc = correct_make(&n, o, n_o, in, m, &e);
  expect_failed(rc, &e, want, needle, needle2);
  node_free(&n);
}

static void test_errors(void **st) {
  int64_t d[4] = {3, 4, 16, 12};
  sl_tensor_desc in = sl_desc_make(SL_U16, 4, d, 2);
  int64_t md[2] = {16, 12}, bad_md[2] = {12, 16}, md3[3] = {1, 16, 12};
  sl_tensor_desc m = sl_desc_make(SL_U8, 2, md, 0);

  kv p[] = {{"policy", "mean"}};
  expect_error(p, 1, &in, NULL, SL_ERR_PIPELINE, "'policy'", "median|zero|none");

  sl_tensor_desc mt = sl_desc_make(SL_U8, 2, bad_md, 0);
  expect_error(NULL, 0, &in, &mt, SL_ERR_PIPELINE, "input 'mask'", "[16, 12]");
  mt = sl_desc_make(SL_U8, 3, md3, 0);
  expect_error(NULL, 0, &in, &mt, SL_ERR_PIPELINE, "input 'mask'", NULL);
  mt = sl_desc_make(SL_F32, 2, md, 0);
  expect_error(NULL, 0, &in, &mt, SL_ERR_PIPELINE, "input 'mask'", "f32");
  mt = sl_desc_make(SL_U8, 3, md3, 1); /* streamed mask */
  expect_error(NULL, 0, &in, &mt, SL_ERR_PIPELINE, "input 'mask'", "streamed");
  /* flag_counts: u32 [3, 4 | 1] for 16 x 12 frames; wrong dtype, groups, scan */
  {
    int64_t cd_ok[3] = {3, 4, 1}, cd_groups[3] = {3, 4, 2}, cd_scan[3] = {4, 3, 1};
    sl_tensor_desc bad_counts[4] = {sl_desc_make(SL_U16, 3, cd_ok, 2), sl_desc_make(SL_U32, 3, cd_groups, 2),
                                    sl_desc_make(SL_U32, 3, cd_scan, 2), sl_desc_make(SL_U32, 3, cd_ok, 0)};
    for (int i = 0; i < 4; i++) {
      sl_tensor_desc ins[3] = {in, m, bad_counts[i]};
      expect_node_error(&sl_node_mask_correct, NULL, 0, ins, 3, SL_ERR_PIPELINE, "input 'flag_counts'",
                        "u32 [scan... | 1]");
    }
    sl_tensor_desc ins[3] = {in, m, sl_desc_make(SL_U32, 3, cd_ok, 2)};
    sl_node n;
    sl_error e;
    assert_int_equal(node_make(&n, &sl_node_mask_correct, NULL, 0, ins, 3, &e), SL_OK);
    node_free(&n);
  }

  sl_tensor_desc ft = sl_desc_make(SL_F32, 4, d, 2);
  expect_error(NULL, 0, &ft, &m, SL_ERR_PIPELINE, "input 'frames'", "f32");
  ft = sl_desc_make(SL_U64, 4, d, 2);
  expect_error(NULL, 0, &ft, &m, SL_ERR_PIPELINE, "input 'frames'", "u64");
  ft = sl_desc_make(SL_U16, 4, d, 0);
  expect_error(NULL, 0, &ft, &m, SL_ERR_PIPELINE, "input 'frames'", "streamed");
  ft = sl_desc_make(SL_U16, 4, d, 3);
  expect_error(NULL, 0, &ft, &m, SL_ERR_PIPELINE, "input 'frames'", NULL);
  ft = sl_desc_make(SL_U16, 4, d, 2);
  ft.encoding = SL_ENC_BSLZ4;
  expect_error(NULL, 0, &ft, &m, SL_ERR_PIPELINE, "input 'frames'", NULL);

  /* mask_file: missing, wrong shape, malformed; every message names the file. */
  char path[512], yaml[600];
  snprintf(path, sizeof path, "%s/absent_mc.npy", g_dir);
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv f1[] = {{"mask_file", yaml}};
  expect_error(f1, 1, &in, &m, SL_ERR_IO, "absent_mc.npy", "mask_file");
  uint8_t mm[12 * 16] = {0};
  snprintf(path, sizeof path, "%s/shape_mc.npy", g_dir);
  write_npy_u1(path, mm, 12, 16);
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv f2[] = {{"mask_file", yaml}};
  expect_error(f2, 1, &in, NULL, SL_ERR_PIPELINE, "shape_mc.npy", "mask_file");
  snprintf(path, sizeof path, "%s/junk_mc.npy", g_dir);
  FILE *jf = fopen(path, "wb");
  assert_non_null(jf);
  fputs("not a numpy file at all", jf);
  fclose(jf);
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv f3[] = {{"mask_file", yaml}};
  expect_error(f3, 1, &in, NULL, SL_ERR_FORMAT, "junk_mc.npy", "mask_file");

  /* policy none still validates shapes */
  kv pn[] = {{"policy", "none"}};
  mt = sl_desc_make(SL_U8, 2, bad_md, 0);
  expect_error(pn, 1, &in, &mt, SL_ERR_PIPELINE, "input 'mask'", NULL);

  /* kernel before prepare */
  sl_node n;
  sl_error e;
  assert_int_equal(correct_make(&n, NULL, 0, &in, NULL, &e), SL_OK);
  sl_backend *b = backend(1);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b;
  a.node = &n;
  a.pos_count = 1;
  a.err = &e;
  assert_int_equal(n.desc->kernel[SL_BACKEND_CPU](&a), SL_ERR_INTERNAL);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
}

/* The descriptor is what the registry will export. */
static void test_descriptor(void **st) {
  const sl_node_desc *d = &sl_node_mask_correct;
  assert_string_equal(d->type, "mask_correct");
  assert_int_equal(d->n_inputs, 3);
  assert_string_equal(d->inputs[0].name, "frames");
  assert_string_equal(d->inputs[1].name, "mask");
  assert_true(d->inputs[1].optional);
  assert_string_equal(d->inputs[2].name, "flag_counts");
  assert_true(d->inputs[2].optional);
  assert_string_equal(d->outputs[0].name, "frames");
  assert_non_null(d->kernel[SL_BACKEND_CPU]);
  /* The CUDA kernel reads these params by name. */
  assert_int_equal(d->n_params, 4);
  assert_string_equal(d->params[0].name, "policy");
  assert_string_equal(d->params[0].choices, "median|zero|none");
  assert_string_equal(d->params[2].name, "flagged");
  assert_int_equal(d->params[2].type, SL_PT_BOOL);
  const sl_node_desc *reg = sl_registry_find(sl_nodes_registry(), "mask_correct");
  if (reg) assert_ptr_equal(reg, d);
}

static int setup(void **st) { return temp_dir_make(g_dir, sizeof g_dir, "/tmp/sluice-mc-XXXXXX"); }

static int teardown(void **st) { return temp_dir_remove(g_dir); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_values),
      cmocka_unit_test(test_policies_dtypes_sizes),
      cmocka_unit_test(test_mask_sources),
      cmocka_unit_test(test_dense_flags),
      cmocka_unit_test(test_cost),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_descriptor),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
