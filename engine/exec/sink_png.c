/* PNG drawing (see sinks.h): 8-bit grayscale, scaled from the smallest to the
 * largest finite value, row strip by row strip so that a large image never
 * needs to be in memory whole. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/exec/sinks.h"

bool sl_output_is_image(const sl_tensor_desc *d) {
  return d->rank == 2 && d->dtype != SL_C64 && d->dims[0] > 0 && d->dims[1] > 0;
}

static double value_at(sl_dtype t, const void *data, int64_t i) {
  switch (t) {
    case SL_U8: return ((const uint8_t *)data)[i];
    case SL_U16: return ((const uint16_t *)data)[i];
    case SL_U32: return ((const uint32_t *)data)[i];
    case SL_U64: return (double)((const uint64_t *)data)[i];
    case SL_I32: return ((const int32_t *)data)[i];
    case SL_I64: return (double)((const int64_t *)data)[i];
    case SL_F32: return ((const float *)data)[i];
    case SL_F64: return ((const double *)data)[i];
    default: return 0;
  }
}

void sl_values_range(sl_dtype t, const void *data, int64_t n, double *lo, double *hi) {
  double l = *lo, h = *hi;
  for (int64_t i = 0; i < n; i++) {
    double v = value_at(t, data, i);
    if (isfinite(v)) {
      if (v < l) l = v;
      if (v > h) h = v;
    }
  }
  *lo = l, *hi = h;
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
      for (int64_t c = 0; c < w; c++) {
        double v = value_at(d->dtype, data, r * w + c);
        o.row[c] = isfinite(v) ? (png_byte)lround((v - lo) * scale) : 0;
      }
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
