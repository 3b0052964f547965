/* One-sweep exact frame moments (see frame_moments.h). */
#include "frame_moments.h"

#include <stdlib.h>
#include <string.h>

#include "../../engine/core/util.h"

#include "../../engine/graph/graph.h"

static uint64_t dtype_max(sl_dtype t) {
  return t == SL_U8 ? 0xFFu : t == SL_U16 ? 0xFFFFu : 0xFFFFFFFFu;
}

bool sl_frame_moments_fit(sl_dtype t, int64_t h, int64_t w) {
  /* Sr <= max * W * H(H-1)/2, Sc <= max * H * W(W-1)/2, S <= max * H * W. */
  long double m = (long double)dtype_max(t), hh = (long double)h, ww = (long double)w;
  long double lim = 18446744073709551615.0L;
  return m * ww * hh * (hh - 1) / 2 <= lim && m * hh * ww * (ww - 1) / 2 <= lim &&
         m * hh * ww <= lim;
}

int64_t sl_frame_moments_scratch(int64_t w) { return w * 8; }

/* Column and row sums in ACC: u32 is exact when max * H and max * W fit in
 * u32 (sl_frame_moments picks it only then), u64 always. */
#define FM_SWEEP(NAME, T, ACC)                                                     \
  SL_HOT_CLONES static void NAME(const T *restrict f, int64_t h, int64_t w, ACC *restrict col, \
                   uint64_t out[3]) {                                              \
    memset(col, 0, (size_t)w * sizeof *col);                                       \
    uint64_t s = 0, sr = 0, sc = 0;                                                \
    for (int64_t r = 0; r < h; r++) {                                              \
      const T *restrict x = f + r * w;                                             \
      ACC rs = 0;                                                                  \
      for (int64_t c = 0; c < w; c++) {                                            \
        col[c] += x[c];                                                            \
        rs += x[c];                                                                \
      }                                                                            \
      s += rs;                                                                     \
      sr += (uint64_t)r * rs;                                                      \
    }                                                                              \
    for (int64_t c = 0; c < w; c++) sc += (uint64_t)c * col[c];                    \
    out[0] = s, out[1] = sr, out[2] = sc;                                          \
  }
FM_SWEEP(fm_u8_32, uint8_t, uint32_t)
FM_SWEEP(fm_u16_32, uint16_t, uint32_t)
FM_SWEEP(fm_u8_64, uint8_t, uint64_t)
FM_SWEEP(fm_u16_64, uint16_t, uint64_t)
FM_SWEEP(fm_u32_64, uint32_t, uint64_t)
#undef FM_SWEEP

void sl_frame_moments(const void *f, sl_dtype t, int64_t h, int64_t w, void *scratch,
                      uint64_t out[3]) {
  uint64_t m = dtype_max(t);
  bool narrow = t != SL_U32 && m * (uint64_t)h <= 0xFFFFFFFFu && m * (uint64_t)w <= 0xFFFFFFFFu;
  if (t == SL_U8) {
    if (narrow) fm_u8_32(f, h, w, scratch, out);
    else fm_u8_64(f, h, w, scratch, out);
  } else if (t == SL_U16) {
    if (narrow) fm_u16_32(f, h, w, scratch, out);
    else fm_u16_64(f, h, w, scratch, out);
  } else {
    fm_u32_64(f, h, w, scratch, out);
  }
}

typedef struct fm_job {
  const sl_kernel_args *a;
  sl_frame_moments_emit emit;
  void *ctx;
  int64_t h, w, item_bytes;
  int failed;
} fm_job;

static void fm_range(void *ctx, int64_t begin, int64_t end, int worker) {
  fm_job *j = ctx;
  void *scratch = malloc((size_t)sl_frame_moments_scratch(j->w));
  if (!scratch) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  sl_dtype t = j->a->node->in[0].dtype;
  const char *x = j->a->in[0];
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[3];
    sl_frame_moments(x + p * j->item_bytes, t, j->h, j->w, scratch, m);
    j->emit(j->a, j->ctx, p, m);
  }
  free(scratch);
}

bool sl_frame_moments_chunk(const sl_kernel_args *a, sl_frame_moments_emit emit, void *ctx) {
  const sl_tensor_desc *x = &a->node->in[0];
  fm_job j = {a, emit, ctx, x->dims[x->rank - 2], x->dims[x->rank - 1], sl_desc_item_bytes(x), 0};
  int64_t grain = 65536 / (j.h * j.w + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fm_range, &j);
  return !j.failed;
}
