/* One-sweep exact frame moments (see frame_moments.h). */
#include "engine/backend/backend.h"
#include "nodes/common/frame_moments.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/simd.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/madd_u16.h"

bool sl_frame_moments_fit(sl_dtype t, int64_t h, int64_t w) {
  /* Sr <= max * W * H(H-1)/2, Sc <= max * H * W(W-1)/2, S <= max * H * W. */
  long double m = (long double)sl_frame_max(t), hh = (long double)h, ww = (long double)w;
  long double lim = 18446744073709551615.0L;
  return m * ww * hh * (hh - 1) / 2 <= lim && m * hh * ww * (ww - 1) / 2 <= lim &&
         m * hh * ww <= lim;
}

/* Column sums of u64, or (AVX2) W + 32 int16 weights, or (AVX-512) W
 * rounded up to 32, which fit in 8 * W bytes for the widths those paths
 * take (W >= 16). */
int64_t sl_frame_moments_scratch(int64_t w) { return w * 8; }

/* Column and row sums in ACC: u32 is exact when max * H and max * W fit in
 * u32 (sweep_portable picks it only then), u64 always. */
#define SUMS_SWEEP(NAME, T, ACC)                                                               \
  SL_HOT_CLONES static void NAME(const T *restrict f, int64_t h, int64_t w, ACC *restrict col, \
                   uint64_t out[3]) {                                                          \
    memset(col, 0, (size_t)w * sizeof *col);                                                   \
    uint64_t s = 0, sr = 0, sc = 0;                                                            \
    for (int64_t r = 0; r < h; r++) {                                                          \
      const T *restrict x = f + r * w;                                                         \
      ACC rs = 0;                                                                              \
      for (int64_t c = 0; c < w; c++) {                                                        \
        col[c] += x[c];                                                                        \
        rs += x[c];                                                                            \
      }                                                                                        \
      s += rs;                                                                                 \
      sr += (uint64_t)r * rs;                                                                  \
    }                                                                                          \
    for (int64_t c = 0; c < w; c++) sc += (uint64_t)c * col[c];                                \
    out[0] = s, out[1] = sr, out[2] = sc;                                                      \
  }
/* u32 sums: frames where max * H and max * W fit in u32 (sweep_portable). */
SUMS_SWEEP(sweep_u8_32, uint8_t, uint32_t)
SUMS_SWEEP(sweep_u16_32, uint16_t, uint32_t)
/* u64 sums: any frame. */
SUMS_SWEEP(sweep_u8_64, uint8_t, uint64_t)
SUMS_SWEEP(sweep_u16_64, uint16_t, uint64_t)
SUMS_SWEEP(sweep_u32_64, uint32_t, uint64_t)

static void sweep_portable(const void *f, sl_dtype t, int64_t h, int64_t w, void *scratch,
                           uint64_t out[3]) {
  uint64_t m = sl_frame_max(t);
  bool narrow = t != SL_U32 && m * (uint64_t)h <= 0xFFFFFFFFu && m * (uint64_t)w <= 0xFFFFFFFFu;
  if (t == SL_U8) {
    if (narrow) sweep_u8_32(f, h, w, scratch, out);
    else sweep_u8_64(f, h, w, scratch, out);
  } else if (t == SL_U16) {
    if (narrow) sweep_u16_32(f, h, w, scratch, out);
    else sweep_u16_64(f, h, w, scratch, out);
  } else {
    sweep_u32_64(f, h, w, scratch, out);
  }
}

/* Whether the AVX2 sweep takes these frames: u16, and column indices that
 * are int16 weights; from 16 columns, so the last partial vector of a row can
 * be loaded ending at the row's end (overlapping the previous one). */
static bool madd_fits(sl_dtype t, int64_t w) { return t == SL_U16 && w >= 16 && w <= 32768; }

#if SL_MADD_X86
void sl_frame_moments_madd_weights(int16_t *wt, int64_t w) {
  int64_t full = w / 16;
  for (int64_t c = 0; c < 16 * full; c++) wt[c] = (int16_t)c;
  for (int64_t l = 0; l < 16; l++) {
    int64_t c = w - 16 + l;
    bool fresh = w % 16 && c >= 16 * full;
    wt[16 * full + l] = fresh ? 1 : 0;
    wt[16 * full + 16 + l] = fresh ? (int16_t)c : 0;
  }
}

/* S, Sr, Sc of an H x W frame from the madd sweeps' sums of x - 32768
 * (wrapping u64): 32768 times each sum's weights added back. */
static void unbias(uint64_t s, uint64_t sr, uint64_t sc, int64_t h, int64_t w, uint64_t out[3]) {
  const uint64_t uh = (uint64_t)h, uw = (uint64_t)w;
  out[0] = s + 32768u * uh * uw;
  out[1] = sr + 32768u * uw * (uh * (uh - 1) / 2);
  out[2] = sc + 32768u * uh * (uw * (uw - 1) / 2);
}

/* S, Sr, Sc of a u16 frame with vpmaddwd (madd_u16.h, frame_moments.h). */
SL_MADD_AVX2 static void sweep_u16_madd(const uint16_t *f, int64_t h, int64_t w,
                                        const int16_t *wt, uint64_t out[3]) {
  const int64_t full = w / 16, nvec = full + (w % 16 != 0);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i ones_t = _mm256_loadu_si256((const __m256i *)(wt + 16 * full));
  const __m256i col_t = _mm256_loadu_si256((const __m256i *)(wt + 16 * full + 16));
  /* Sc takes kc madds (weights <= W - 1) between spills: whole rows at a
   * time (spilled at the end of each block of rows) when a row has at most kc
   * vectors, else segments of kc vectors within a row (wide frames). T and P
   * (weights 1): after i rows of a block of n, |T| <= i * nvec madds and
   * |P| <= n(n+1)/2 * nvec madds, at most k1. */
  const int64_t kc = sl_madd_spill_every(w - 1), k1 = sl_madd_spill_every(1);
  const bool wide = kc < nvec;
  int64_t rb = 1;
  while ((rb + 1) * (rb + 2) / 2 * nvec <= k1 && (wide || (rb + 1) * nvec <= kc)) rb++;
  __m256i c32 = zero, c64 = zero;
  uint64_t s = 0, sr = 0; /* biased, wrapping */
  for (int64_t r0 = 0; r0 < h; r0 += rb) {
    const int64_t n = h - r0 < rb ? h - r0 : rb;
    __m256i t = zero, p = zero;
    for (int64_t r = r0; r < r0 + n; r++) {
      const uint16_t *row = f + r * w;
      if (!wide) {
        sl_madd_run_sc(row, wt, full, &t, &c32);
      } else {
        for (int64_t v0 = 0; v0 < full; v0 += kc) {
          sl_madd_run_sc(row + 16 * v0, wt + 16 * v0, full - v0 < kc ? full - v0 : kc, &t, &c32);
          c64 = sl_madd_spill(c64, c32), c32 = zero;
        }
      }
      if (nvec > full) {
        __m256i x = sl_madd_bias(row + w - 16);
        t = _mm256_add_epi32(t, _mm256_madd_epi16(x, ones_t));
        c32 = _mm256_add_epi32(c32, _mm256_madd_epi16(x, col_t));
        if (wide) c64 = sl_madd_spill(c64, c32), c32 = zero;
      }
      p = _mm256_add_epi32(p, t);
    }
    c64 = sl_madd_spill(c64, c32), c32 = zero;
    /* Rows r0 + i, i < n: sum (r0 + i) S_i = (r0 + n) * sum S_i - sum_i (n - i) S_i. */
    const uint64_t sb = sl_madd_hsum32(t), pb = sl_madd_hsum32(p);
    s += sb;
    sr += (uint64_t)(r0 + n) * sb - pb;
  }
  unbias(s, sr, sl_madd_hsum64(c64), h, w, out);
}

/* The same moments with vpdpwssd, 32 pixels a vector, where the AVX-512
 * variants run (sl_madd_avx512_used): `cw` holds the column index of every
 * column of the nvec vectors (0 past W; sl_frame_moments_madd512_weights);
 * a row's last partial vector is a masked load, its other lanes 0 (not
 * biased). The same blocks of rows, bounds and spills as the AVX2 sweep;
 * three accumulators (chains) of each sum, a row's vectors dealt among
 * them, so that vpdpwssd's latency does not bind (virtual_detectors.c's
 * sweep512 says how much). dpc.yaml's com sweep of 192 x 192 frames:
 * see performance.md (twenty-ninth session). */
SL_MADD_AVX512 static void sweep_u16_madd512(const uint16_t *f, int64_t h, int64_t w,
                                             const int16_t *cw, uint64_t out[3]) {
  const int64_t full = w / 32, nvec = (w + 31) / 32;
  const __mmask32 tmask = (__mmask32)((1u << (w % 32)) - 1u);
  const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
  const int64_t kc = sl_madd_spill_every(w - 1), k1 = sl_madd_spill_every(1);
  const bool wide = kc < nvec;
  int64_t rb = 1;
  while ((rb + 1) * (rb + 2) / 2 * nvec <= k1 && (wide || (rb + 1) * nvec <= kc)) rb++;
  __m512i c64 = zero;
  uint64_t s = 0, sr = 0; /* biased, wrapping */
/* One vector x of column vector v into the S chain T and the Sc chain C. */
#define MOM512(x, v, T, C)                                                  \
  do {                                                                      \
    T = sl_madd512_acc(T, x, ones);                                         \
    C = sl_madd512_acc(C, x, _mm512_loadu_si512(cw + 32 * (v)));            \
    if (wide) c64 = sl_madd512_spill(c64, C), C = zero;                     \
  } while (0)
  for (int64_t r0 = 0; r0 < h; r0 += rb) {
    const int64_t n = h - r0 < rb ? h - r0 : rb;
    __m512i t0 = zero, t1 = zero, t2 = zero, c0 = zero, c1 = zero, c2 = zero, p = zero;
    for (int64_t r = r0; r < r0 + n; r++) {
      const uint16_t *row = f + r * w;
      int64_t v = 0;
      for (; v + 3 <= full; v += 3) {
        __m512i x = sl_madd512_bias(row + 32 * v), y = sl_madd512_bias(row + 32 * v + 32),
                z = sl_madd512_bias(row + 32 * v + 64);
        MOM512(x, v, t0, c0);
        MOM512(y, v + 1, t1, c1);
        MOM512(z, v + 2, t2, c2);
      }
      if (v < full) {
        MOM512(sl_madd512_bias(row + 32 * v), v, t0, c0);
        v++;
      }
      if (v < full) MOM512(sl_madd512_bias(row + 32 * v), v, t1, c1);
      if (nvec > full) MOM512(sl_madd512_bias_masked(row + 32 * full, tmask), full, t2, c2);
      p = _mm512_add_epi32(p, _mm512_add_epi32(_mm512_add_epi32(t0, t1), t2));
    }
    c64 = sl_madd512_spill(sl_madd512_spill(sl_madd512_spill(c64, c0), c1), c2);
    /* Rows r0 + i, i < n: sum (r0 + i) S_i = (r0 + n) * sum S_i - sum_i (n - i) S_i. */
    const uint64_t sb = sl_madd512_hsum32(_mm512_add_epi32(_mm512_add_epi32(t0, t1), t2)),
                   pb = sl_madd512_hsum32(p);
    s += sb;
    sr += (uint64_t)(r0 + n) * sb - pb;
  }
#undef MOM512
  unbias(s, sr, sl_madd512_hsum64(c64), h, w, out);
}

void sl_frame_moments_madd512_weights(int16_t *cw, int64_t w) {
  const int64_t nvec = (w + 31) / 32;
  for (int64_t c = 0; c < 32 * nvec; c++) cw[c] = c < w ? (int16_t)c : 0;
}
#endif

typedef struct moments_job {
  const sl_kernel_args *a;
  sl_frame_moments_emit emit;
  void *ctx;
  int64_t h, w, item_bytes;
  bool madd, madd512;
} moments_job;

static void moments_range(void *ctx, int64_t begin, int64_t end, int worker) {
  moments_job *j = ctx;
  void *scratch = sl_worker_scratch(j->a, worker);
  sl_dtype t = j->a->node->in[0].dtype;
  const char *x = j->a->in[0];
#if SL_MADD_X86
  if (j->madd512) sl_frame_moments_madd512_weights(scratch, j->w);
  else if (j->madd) sl_frame_moments_madd_weights(scratch, j->w);
#endif
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[3];
#if SL_MADD_X86
    if (j->madd512) sweep_u16_madd512((const uint16_t *)(x + p * j->item_bytes), j->h, j->w, scratch, m);
    else if (j->madd) sweep_u16_madd((const uint16_t *)(x + p * j->item_bytes), j->h, j->w, scratch, m);
    else
#endif
      sweep_portable(x + p * j->item_bytes, t, j->h, j->w, scratch, m);
    j->emit(j->a, j->ctx, p, m);
  }
}

sl_code sl_frame_moments_chunk(const sl_kernel_args *a, sl_simd simd, sl_frame_moments_emit emit,
                               void *ctx) {
  const sl_tensor_desc *x = &a->node->in[0];
  moments_job j = {a, emit, ctx, x->dims[x->rank - 2], x->dims[x->rank - 1], sl_desc_item_bytes(x),
                   false, false};
  if (!a->worker_scratch || a->worker_scratch_stride < sl_frame_moments_scratch(j.w))
    return sl_fail(a->err, SL_ERR_INTERNAL, "%s: called without %lld bytes of scratch per worker",
                   a->node->desc->type, (long long)sl_frame_moments_scratch(j.w));
  sl_simd path;
  sl_code rc = sl_simd_resolve(simd, &path, a->err);
  if (rc) return rc;
  j.madd = SL_MADD_X86 && path == SL_SIMD_AVX2 && madd_fits(x->dtype, j.w);
  j.madd512 = j.madd && sl_madd_avx512_used();
  int64_t grain = 65536 / (j.h * j.w + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, moments_range, &j);
  return SL_OK;
}
