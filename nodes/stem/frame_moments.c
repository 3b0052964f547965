/* One-sweep exact frame moments (see frame_moments.h). */
#include "frame_moments.h"

#include <string.h>

sl_code sl_frames_check(const sl_tensor_desc *x, sl_error *err) {
  if ((x->dtype != SL_U8 && x->dtype != SL_U16 && x->dtype != SL_U32) || x->stream_rank < 1 ||
      x->rank - x->stream_rank != 2 || x->dims[x->rank - 1] <= 0 || x->dims[x->rank - 2] <= 0) {
    char buf[160];
    sl_desc_format(x, buf, sizeof buf);
    return sl_fail(err, SL_ERR_PIPELINE,
                   "input 'frames' expects u8, u16 or u32 frames with 2 item axes, got %s%s", buf,
                   x->stream_rank < 1 && x->dtype != SL_DT_INVALID ? " (frames must be streamed)"
                                                                   : "");
  }
  return SL_OK;
}

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

/* u32 column and row sums: exact when max * H and max * W fit in u32. */
#define FM_NARROW(NAME, T)                                                             \
  static void NAME(const T *restrict f, int64_t h, int64_t w, uint32_t *restrict col, \
                   uint64_t out[3]) {                                                  \
    memset(col, 0, (size_t)w * sizeof *col);                                           \
    uint64_t s = 0, sr = 0, sc = 0;                                                    \
    for (int64_t r = 0; r < h; r++) {                                                  \
      const T *restrict x = f + r * w;                                                 \
      uint32_t rs = 0;                                                                 \
      for (int64_t c = 0; c < w; c++) {                                                \
        col[c] += x[c];                                                                \
        rs += x[c];                                                                    \
      }                                                                                \
      s += rs;                                                                         \
      sr += (uint64_t)r * rs;                                                          \
    }                                                                                  \
    for (int64_t c = 0; c < w; c++) sc += (uint64_t)c * col[c];                        \
    out[0] = s, out[1] = sr, out[2] = sc;                                              \
  }
FM_NARROW(fm_u8_32, uint8_t)
FM_NARROW(fm_u16_32, uint16_t)
#undef FM_NARROW

#define FM_WIDE(NAME, T)                                                               \
  static void NAME(const T *restrict f, int64_t h, int64_t w, uint64_t *restrict col, \
                   uint64_t out[3]) {                                                  \
    memset(col, 0, (size_t)w * sizeof *col);                                           \
    uint64_t s = 0, sr = 0, sc = 0;                                                    \
    for (int64_t r = 0; r < h; r++) {                                                  \
      const T *restrict x = f + r * w;                                                 \
      uint64_t rs = 0;                                                                 \
      for (int64_t c = 0; c < w; c++) {                                                \
        col[c] += x[c];                                                                \
        rs += x[c];                                                                    \
      }                                                                                \
      s += rs;                                                                         \
      sr += (uint64_t)r * rs;                                                          \
    }                                                                                  \
    for (int64_t c = 0; c < w; c++) sc += (uint64_t)c * col[c];                        \
    out[0] = s, out[1] = sr, out[2] = sc;                                              \
  }
FM_WIDE(fm_u8_64, uint8_t)
FM_WIDE(fm_u16_64, uint16_t)
FM_WIDE(fm_u32_64, uint32_t)
#undef FM_WIDE

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
