/* PNG drawing (see sinks.h): 8-bit grayscale, scaled from the smallest to the
 * largest finite value, row strip by row strip so that a large image never
 * needs to be in memory whole. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec/sinks.h"

bool sl_output_is_image(const sl_tensor_desc *d) {
  return d->rank == 2 && d->dtype != SL_C64 && d->dims[0] > 0 && d->dims[1] > 0;
}

/* lround(x) for the pixel of a finite value (x = (v - low) * scale, so
 * x >= 0): the integer part plus one when the fraction is at least a half,
 * which is exactly lround for 0 <= x < 2^52 (the fraction is exact there)
 * without a libm call per pixel; anything else (inf * 0 when the range
 * overflows) goes to lround itself, so every byte is what it was. */
static inline png_byte pixel(double x) {
  if (!(x >= 0 && x < 4096)) return (png_byte)lround(x);
  int64_t t = (int64_t)x;
  return (png_byte)(t + (x - (double)t >= 0.5));
}

/* Per element type, without a switch per value (a 512 x 512 image's range
 * and pixels were most of a PNG's time): the range of n values, and one row
 * of pixels. */
#define PNG_DTYPES(X) \
  X(SL_U8, uint8_t) X(SL_U16, uint16_t) X(SL_U32, uint32_t) X(SL_U64, uint64_t) \
  X(SL_I32, int32_t) X(SL_I64, int64_t) X(SL_F32, float) X(SL_F64, double)
#define PNG_TYPED(K, T)                                                                      \
  static void range_##K(const T *p, int64_t n, double *lo, double *hi) {                   \
    double l = *lo, h = *hi;                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                        \
      double v = (double)p[i];                                                               \
      if (isfinite(v)) {                                                                     \
        l = v < l ? v : l;                                                                   \
        h = v > h ? v : h;                                                                   \
      }                                                                                      \
    }                                                                                        \
    *lo = l, *hi = h;                                                                        \
  }                                                                                          \
  static void row_##K(const T *p, int64_t w, double lo, double scale, png_byte *out) {      \
    for (int64_t c = 0; c < w; c++) {                                                        \
      double v = (double)p[c];                                                               \
      out[c] = isfinite(v) ? pixel((v - lo) * scale) : 0;                                   \
    }                                                                                        \
  }
PNG_DTYPES(PNG_TYPED)
#undef PNG_TYPED

void sl_values_range(sl_dtype t, const void *data, int64_t n, double *lo, double *hi) {
  switch (t) {
#define PNG_RANGE(K, T) \
  case K: range_##K((const T *)data, n, lo, hi); break;
    PNG_DTYPES(PNG_RANGE)
#undef PNG_RANGE
    default: break;
  }
}

/* Row r of the strip at data. */
static void pixels_row(sl_dtype t, const void *data, int64_t r, int64_t w, double lo, double scale,
                       png_byte *out) {
  switch (t) {
#define PNG_ROW(K, T) \
  case K: row_##K((const T *)data + r * w, w, lo, scale, out); break;
    PNG_DTYPES(PNG_ROW)
#undef PNG_ROW
    default: memset(out, 0, (size_t)w); break;
  }
}

int64_t sl_png_strip_rows(const sl_tensor_desc *d) {
  int64_t row = d->dims[1] * sl_dtype_size(d->dtype);
  int64_t rows = row > 0 ? SL_PNG_STRIP_BYTES / row : 1;
  if (rows < 1) rows = 1;
  return rows < d->dims[0] ? rows : d->dims[0];
}

/* zlib's deflate at libpng's defaults (windowBits 15, memLevel 8): (1 <<
 * (15 + 2)) + (1 << (8 + 9)) bytes; libpng's structs and its compressed
 * output buffer; its current and previous rows and a filter row. */
int64_t sl_png_library_bytes(int64_t w) { return (256 << 10) + (16 << 10) + 3 * (w + 1); }

/* libpng's state and the file, released together on every path. */
typedef struct png_out {
  FILE *f;
  png_structp png;
  png_infop info;
  png_bytep row;
} png_out;

static void png_out_close(png_out *o) {
  png_destroy_write_struct(&o->png, &o->info);
  if (o->f) fclose(o->f);
  free(o->row);
}

sl_code sl_png_write(const char *path, const sl_tensor_desc *d, double lo, double hi, sl_png_rows_fn rows,
                     void *ctx, sl_error *err) {
  int64_t h = d->dims[0], w = d->dims[1];
  if (h > 1 << 20 || w > 1 << 20) return sl_fail(err, SL_ERR_IO, "%s: image too large for PNG", path);
  double scale = hi > lo ? 255.0 / (hi - lo) : 0;
  png_out o = {0};
  o.row = malloc((size_t)w);
  if (!o.row) return sl_fail(err, SL_ERR_NOMEM, "no memory to draw %s", path);
  o.f = fopen(path, "wb");
  if (!o.f) {
    png_out_close(&o);
    return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  }
  o.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  o.info = o.png ? png_create_info_struct(o.png) : NULL;
  if (!o.png || !o.info || setjmp(png_jmpbuf(o.png))) {
    png_out_close(&o);
    return sl_fail(err, SL_ERR_IO, "cannot write PNG %s", path);
  }
  png_init_io(o.png, o.f);
  png_set_IHDR(o.png, o.info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  /* A preview drawn inside the run: zlib's fastest level without per-row
   * filter trials (libpng's defaults tried five filters at level 6: 20-80 ms
   * per 512 x 512 image on the H200's host, for files a few percent smaller). */
  png_set_compression_level(o.png, 1);
  png_set_filter(o.png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_write_info(o.png, o.info);
  int64_t strip = sl_png_strip_rows(d);
  sl_code rc = SL_OK;
  for (int64_t r0 = 0; r0 < h && rc == SL_OK; r0 += strip) {
    int64_t n = h - r0 < strip ? h - r0 : strip;
    const void *data = NULL;
    rc = rows(ctx, r0, n, &data, err);
    for (int64_t r = 0; r < n && rc == SL_OK; r++) {
      pixels_row(d->dtype, data, r, w, lo, scale, o.row);
      png_write_row(o.png, o.row);
    }
  }
  if (rc != SL_OK) {
    png_out_close(&o);
    return rc;
  }
  png_write_end(o.png, NULL);
  FILE *f = o.f;
  o.f = NULL;
  png_out_close(&o);
  if (fclose(f) != 0) return sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return SL_OK;
}
