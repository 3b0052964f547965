#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/exec/sinks.h"

bool sl_output_is_image(const sl_output_data *out) {
  return out->desc.rank == 2 && out->desc.dtype != SL_C64 && out->desc.dims[0] > 0 &&
         out->desc.dims[1] > 0;
}

static double value_at(const sl_output_data *o, int64_t i) {
  switch (o->desc.dtype) {
    case SL_U8: return ((const uint8_t *)o->data)[i];
    case SL_U16: return ((const uint16_t *)o->data)[i];
    case SL_U32: return ((const uint32_t *)o->data)[i];
    case SL_U64: return (double)((const uint64_t *)o->data)[i];
    case SL_I32: return ((const int32_t *)o->data)[i];
    case SL_I64: return (double)((const int64_t *)o->data)[i];
    case SL_F32: return ((const float *)o->data)[i];
    case SL_F64: return ((const double *)o->data)[i];
    default: return 0;
  }
}

sl_code sl_write_png(const char *path, const sl_output_data *o, sl_error *err) {
  int64_t h = o->desc.dims[0], w = o->desc.dims[1];
  if (h > 1 << 20 || w > 1 << 20) return sl_fail(err, SL_ERR_IO, "%s: image too large for PNG", path);
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < h * w; i++) {
    double v = value_at(o, i);
    if (isfinite(v)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  double scale = hi > lo ? 255.0 / (hi - lo) : 0;
  png_bytep row = malloc((size_t)w);
  FILE *f = fopen(path, "wb");
  if (!f || !row) {
    free(row);
    if (f) fclose(f);
    return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fclose(f);
    free(row);
    return sl_fail(err, SL_ERR_IO, "cannot write PNG %s", path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t r = 0; r < h; r++) {
    for (int64_t c = 0; c < w; c++) {
      double v = value_at(o, r * w + c);
      row[c] = isfinite(v) ? (png_byte)lround((v - lo) * scale) : 0;
    }
    png_write_row(png, row);
  }
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(row);
  if (fclose(f) != 0) return sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return SL_OK;
}
