/* Detector mask files: .npy, PNG and HDF5 datasets (see mask_file.h). */
#include "nodes/common/mask_file.h"

#include <hdf5.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nodes/common/npy.h"

static int ends_with(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && strncasecmp(s + n - k, suffix, k) == 0;
}

static int h5_name(const char *s, size_t n) {
  static const char *ext[] = {".h5", ".hdf5", ".hdf", ".nxs", ".emd", ".cxi"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (ends_with(s, n, ext[i])) return 1;
  return 0;
}

static sl_code shape_mismatch(sl_error *err, const char *spec, long long fh, long long fw,
                              int64_t h, int64_t w) {
  return sl_fail(err, SL_ERR_PIPELINE,
                 "mask file '%s': shape (%lld, %lld) does not match the %lldx%lld detector", spec,
                 fh, fw, (long long)h, (long long)w);
}

/* ---- PNG ------------------------------------------------------------------ */

typedef struct png_err_ctx {
  char msg[256];
} png_err_ctx;

static void png_error_fn(png_structp png, png_const_charp msg) {
  png_err_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_warning_fn(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static sl_code read_png(const char *path, int64_t h, int64_t w, uint8_t **mask, sl_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(err, SL_ERR_IO, "mask file '%s': cannot open", path);
  unsigned char sig[8];
  if (fread(sig, 1, 8, f) != 8 || png_sig_cmp(sig, 0, 8)) {
    fclose(f);
    return sl_fail(err, SL_ERR_FORMAT, "mask file '%s': not a PNG file (bad signature)", path);
  }
  png_err_ctx ctx = {{0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_error_fn,
                                           png_warning_fn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    if (png) png_destroy_read_struct(&png, NULL, NULL);
    fclose(f);
    return sl_fail(err, SL_ERR_NOMEM, "mask file '%s': out of memory", path);
  }
  /* Written between setjmp and a possible longjmp: volatile. */
  unsigned char *volatile img = NULL;
  png_bytep *volatile rows = NULL;
  volatile sl_code rc = SL_OK;
  if (setjmp(png_jmpbuf(png))) {
    rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': malformed PNG: %s", path, ctx.msg);
    goto done;
  }
  png_init_io(png, f);
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
  int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
  if (ctype != PNG_COLOR_TYPE_GRAY) {
    rc = sl_fail(err, SL_ERR_FORMAT,
                 "mask file '%s': PNG masks must be grayscale without alpha (color type %d); "
                 "nonzero = included",
                 path, ctype);
    goto done;
  }
  if ((int64_t)ph != h || (int64_t)pw != w) {
    rc = shape_mismatch(err, path, (long long)ph, (long long)pw, h, w);
    goto done;
  }
  if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  size_t rb = png_get_rowbytes(png, info);
  size_t bpp = depth == 16 ? 2 : 1;
  if (rb != (size_t)w * bpp) {
    rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': unexpected PNG row size %zu", path, rb);
    goto done;
  }
  img = malloc(rb * (size_t)h);
  rows = malloc(sizeof(png_bytep) * (size_t)h);
  if (!img || !rows) {
    rc = sl_fail(err, SL_ERR_NOMEM, "mask file '%s': out of memory", path);
    goto done;
  }
  for (int64_t r = 0; r < h; r++) rows[r] = img + (size_t)r * rb;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  if (mask) {
    uint8_t *m = malloc((size_t)(h * w));
    if (!m) {
      rc = sl_fail(err, SL_ERR_NOMEM, "mask file '%s': out of memory", path);
      goto done;
    }
    for (int64_t i = 0; i < h * w; i++)
      m[i] = bpp == 1 ? img[i] != 0 : (img[2 * i] | img[2 * i + 1]) != 0;
    *mask = m;
  }
done:
  png_destroy_read_struct(&png, &info, NULL);
  free(img);
  free(rows);
  fclose(f);
  return rc;
}

/* ---- HDF5 ------------------------------------------------------------------- */

static sl_code read_h5(const char *spec, const char *file, const char *dset, int64_t h, int64_t w,
                       uint8_t **mask, sl_error *err) {
  sl_code rc = SL_OK;
  hid_t f = H5I_INVALID_HID, d = H5I_INVALID_HID, sp = H5I_INVALID_HID, ty = H5I_INVALID_HID;
  double *buf = NULL;
  H5E_BEGIN_TRY {
    f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0) d = H5Dopen2(f, dset, H5P_DEFAULT);
  }
  H5E_END_TRY;
  if (f < 0) {
    FILE *probe = fopen(file, "rb");
    if (!probe) return sl_fail(err, SL_ERR_IO, "mask file '%s': cannot open '%s'", spec, file);
    fclose(probe);
    return sl_fail(err, SL_ERR_FORMAT, "mask file '%s': '%s' is not an HDF5 file", spec, file);
  }
  if (d < 0) {
    rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': no dataset '%s' in '%s'", spec, dset, file);
    goto done;
  }
  sp = H5Dget_space(d);
  ty = H5Dget_type(d);
  int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  if (rank != 2) {
    rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': dataset must have 2 dimensions, has %d",
                 spec, rank);
    goto done;
  }
  hsize_t dims[2];
  H5Sget_simple_extent_dims(sp, dims, NULL);
  H5T_class_t cls = H5Tget_class(ty);
  size_t size = H5Tget_size(ty);
  int ok = (cls == H5T_INTEGER && H5Tget_sign(ty) == H5T_SGN_NONE &&
            (size == 1 || size == 2 || size == 4)) ||
           (cls == H5T_FLOAT && (size == 4 || size == 8));
  if (!ok) {
    rc = sl_fail(err, SL_ERR_FORMAT,
                 "mask file '%s': unsupported element type (class %d, %zu bytes); use u8, u16, "
                 "u32, f32 or f64",
                 spec, (int)cls, size);
    goto done;
  }
  if ((int64_t)dims[0] != h || (int64_t)dims[1] != w) {
    rc = shape_mismatch(err, spec, (long long)dims[0], (long long)dims[1], h, w);
    goto done;
  }
  buf = malloc((size_t)(h * w) * sizeof *buf);
  if (!buf) {
    rc = sl_fail(err, SL_ERR_NOMEM, "mask file '%s': out of memory", spec);
    goto done;
  }
  herr_t st;
  H5E_BEGIN_TRY { st = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }
  H5E_END_TRY;
  if (st < 0) {
    rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': cannot read the dataset", spec);
    goto done;
  }
  for (int64_t i = 0; i < h * w; i++)
    if (isnan(buf[i])) {
      rc = sl_fail(err, SL_ERR_FORMAT, "mask file '%s': NaN at element %lld", spec, (long long)i);
      goto done;
    }
  if (mask) {
    uint8_t *m = malloc((size_t)(h * w));
    if (!m) {
      rc = sl_fail(err, SL_ERR_NOMEM, "mask file '%s': out of memory", spec);
      goto done;
    }
    for (int64_t i = 0; i < h * w; i++) m[i] = buf[i] != 0;
    *mask = m;
  }
done:
  free(buf);
  if (ty >= 0) H5Tclose(ty);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return rc;
}

/* ---- dispatch ------------------------------------------------------------------- */

sl_code sl_mask_file_read(const char *spec, int64_t h, int64_t w, uint8_t **mask, sl_error *err) {
  size_t n = strlen(spec);
  const char *split = NULL;
  for (const char *p = spec; (p = strstr(p, ":/")) != NULL; p++) split = p;
  if (split && h5_name(spec, (size_t)(split - spec))) {
    char *file = malloc((size_t)(split - spec) + 1);
    if (!file) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
    memcpy(file, spec, (size_t)(split - spec));
    file[split - spec] = 0;
    sl_code rc = read_h5(spec, file, split + 1, h, w, mask, err);
    free(file);
    return rc;
  }
  if (h5_name(spec, n))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "mask file '%s': an HDF5 mask needs a dataset: write 'file.h5:/path/to/dataset'",
                   spec);
  if (ends_with(spec, n, ".png")) return read_png(spec, h, w, mask, err);
  return sl_npy_read_mask(spec, h, w, mask, err);
}
