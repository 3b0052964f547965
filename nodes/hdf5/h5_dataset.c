/* One 3-D frame dataset: its shape, dtype, layout and filter, each checked
 * against what sluice reads (see h5_dataset.h, docs/formats/dectris-hdf5.md). */
#include "nodes/hdf5/h5_dataset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool sl_h5_path_exists(hid_t loc, const char *path) {
  char buf[1024];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (i > 1 && H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return false;
      buf[i] = c;
    }
  }
  return true;
}

void sl_h5_type_name(hid_t t, char *buf, size_t n) {
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  switch (c) {
    case H5T_INTEGER:
      snprintf(buf, n, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", sz * 8);
      break;
    case H5T_FLOAT: snprintf(buf, n, "float%zu", sz * 8); break;
    case H5T_STRING: snprintf(buf, n, "string"); break;
    case H5T_COMPOUND: snprintf(buf, n, "compound (%zu bytes)", sz); break;
    case H5T_ENUM: snprintf(buf, n, "enum (%zu bytes)", sz); break;
    case H5T_ARRAY: snprintf(buf, n, "array (%zu bytes)", sz); break;
    case H5T_OPAQUE: snprintf(buf, n, "opaque (%zu bytes)", sz); break;
    case H5T_BITFIELD: snprintf(buf, n, "bitfield (%zu bytes)", sz); break;
    default: snprintf(buf, n, "type class %d (%zu bytes)", (int)c, sz); break;
  }
}

/* The innermost message of HDF5's current error stack (e.g. "truncated
 * file: eof = ..."), "" when none. */
static herr_t first_error_cb(unsigned n, const H5E_error2_t *e, void *op) {
  char *buf = op;
  if (n == 0 && e->desc) snprintf(buf, 256, "%s", e->desc);
  return 0;
}

sl_code sl_h5_file_open(const char *path, hid_t *fid, sl_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return sl_fail_in(err, SL_ERR_IO, path, "cannot open: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return sl_fail_in(err, SL_ERR_IO, path, "not a regular file");
  *fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (*fid < 0) {
    char why[256] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error_cb, why);
    return sl_fail_in(err, SL_ERR_FORMAT, path, "not a readable HDF5 file%s%s", why[0] ? ": " : "",
                      why);
  }
  return SL_OK;
}

void sl_h5_error_wrap(sl_error *err, const char *prefix, const char *suffix) {
  if (!err) return;
  char m[2 * sizeof err->msg + 1024];
  int k = snprintf(m, sizeof m, "%s%s%s", prefix, err->msg, suffix);
  size_t len = k < 0 ? 0 : (size_t)k < sizeof err->msg ? (size_t)k : sizeof err->msg - 1;
  memcpy(err->msg, m, len);
  err->msg[len] = 0;
}

/* ---- inspecting one dataset ---------------------------------------------- */

static sl_code inspect_shape(sl_h5_dataset *d, const char *file, hsize_t dims[3], sl_error *err) {
  hid_t space = H5Dget_space(d->did);
  int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  if (rank == 3) H5Sget_simple_extent_dims(space, dims, NULL);
  if (space >= 0) H5Sclose(space);
  if (rank != 3)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s has rank %d; detector frames need rank 3 (frames, rows, cols)",
                      d->link, rank);
  if (dims[1] == 0 || dims[2] == 0 || dims[1] >= SL_H5_MAX_FRAME_DIM ||
      dims[2] >= SL_H5_MAX_FRAME_DIM)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s has frames of %llu x %llu pixels (each must be 1..%d)", d->link,
                      (unsigned long long)dims[1], (unsigned long long)dims[2],
                      SL_H5_MAX_FRAME_DIM - 1);
  if (dims[0] == 0 || dims[0] > (hsize_t)1 << 40)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s holds %llu frames", d->link,
                      (unsigned long long)dims[0]);
  d->n = (int64_t)dims[0];
  d->h = (int64_t)dims[1];
  d->w = (int64_t)dims[2];
  return SL_OK;
}

static sl_code inspect_dtype(sl_h5_dataset *d, const char *file, sl_error *err) {
  hid_t type = H5Dget_type(d->did);
  char tname[64];
  sl_h5_type_name(type, tname, sizeof tname);
  size_t sz = H5Tget_size(type);
  sl_code rc = SL_OK;
  if (H5Tget_class(type) != H5T_INTEGER || (sz != 1 && sz != 2 && sz != 4)) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                    "dataset %s has dtype %s; supported: 8, 16 or 32-bit integers", d->link, tname);
  } else if (sz > 1 && H5Tget_order(type) != H5T_ORDER_LE) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s holds big-endian %s: not supported",
                    d->link, tname);
  } else {
    d->elem_size = (int)sz;
    d->is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
  }
  if (type >= 0) H5Tclose(type);
  return rc;
}

/* The filter pipeline of a chunked dataset: none, or bitshuffle alone. */
static sl_code inspect_filters(sl_h5_dataset *d, const char *file, hid_t dcpl, sl_error *err) {
  int nf = H5Pget_nfilters(dcpl);
  if (nf < 0) return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read its filters", d->link);
  d->filter = SL_H5_FILTER_NONE;
  if (nf == 0) return SL_OK;
  char ids[256] = "";
  size_t o = 0;
  int first_id = -1;
  for (int i = 0; i < nf; i++) {
    unsigned flags = 0, config = 0;
    size_t ncd = 8;
    unsigned cdv[8] = {0};
    char name[64] = "";
    H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof name, name, &config);
    if (i == 0) {
      first_id = (int)id;
      d->n_cd = (int)(ncd < 8 ? ncd : 8);
      memcpy(d->cd, cdv, sizeof cdv);
    }
    int k = snprintf(ids + o, sizeof ids - o, "%s%d%s%s%s", i ? ", " : "", (int)id,
                     name[0] ? " (" : "", name, name[0] ? ")" : "");
    if (k > 0 && (size_t)k < sizeof ids - o) o += (size_t)k;
  }
  if (nf != 1 || first_id != SL_H5_FILTER_BITSHUFFLE)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s uses HDF5 filter %s: not supported (supported: none, or "
                      "bitshuffle 32008 alone)",
                      d->link, ids);
  d->filter = SL_H5_FILTER_BITSHUFFLE;
  return SL_OK;
}

/* Contiguous, or chunked in whole frames with at most 4 GiB per chunk. */
static sl_code inspect_storage(sl_h5_dataset *d, const char *file, const hsize_t dims[3],
                               hid_t dcpl, sl_error *err) {
  H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS) {
    d->chunked = false;
    d->filter = SL_H5_FILTER_NONE;
    return SL_OK;
  }
  if (layout != H5D_CHUNKED)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s has layout %s: not supported (contiguous or chunked only)", d->link,
                      layout == H5D_COMPACT ? "compact" : layout == H5D_VIRTUAL ? "virtual" : "unknown");
  d->chunked = true;
  hsize_t cd[3] = {0, 0, 0};
  if (H5Pget_chunk(dcpl, 3, cd) != 3)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read its chunk shape", d->link);
  if (cd[0] == 0 || cd[1] != dims[1] || cd[2] != dims[2])
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: chunks split frames (chunk shape %llu x %llu x %llu, frames %llu "
                      "x %llu): not supported",
                      d->link, (unsigned long long)cd[0], (unsigned long long)cd[1],
                      (unsigned long long)cd[2], (unsigned long long)dims[1],
                      (unsigned long long)dims[2]);
  uint64_t frame_bytes = (uint64_t)d->h * (uint64_t)d->w * (uint64_t)d->elem_size;
  if ((uint64_t)cd[0] * frame_bytes > UINT32_MAX)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: chunks of %llu frames exceed 4 GiB",
                      d->link, (unsigned long long)cd[0]);
  d->frames_per_chunk = (int64_t)cd[0];
  return inspect_filters(d, file, dcpl, err);
}

sl_code sl_h5_dataset_inspect(sl_h5_dataset *d, const char *file, sl_error *err) {
  struct stat st;
  if (stat(file, &st) != 0)
    return sl_fail_in(err, SL_ERR_IO, file, "cannot stat: %s", strerror(errno));
  d->file_size = (uint64_t)st.st_size;
  hsize_t dims[3] = {0, 0, 0};
  sl_code rc = inspect_shape(d, file, dims, err);
  if (rc == SL_OK) rc = inspect_dtype(d, file, err);
  if (rc != SL_OK) return rc;
  hid_t dcpl = H5Dget_create_plist(d->did);
  rc = inspect_storage(d, file, dims, dcpl, err);
  if (dcpl >= 0) H5Pclose(dcpl);
  return rc;
}

bool sl_h5_dataset_scan_shape(const sl_h5_dataset *d, int64_t *rows, int64_t *cols) {
  if (H5Aexists(d->did, "scan_shape") <= 0) return false;
  hid_t a = H5Aopen(d->did, "scan_shape", H5P_DEFAULT);
  hid_t sp = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
  long long v[2] = {0, 0};
  bool ok = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 2 && H5Aread(a, H5T_NATIVE_LLONG, v) >= 0 && v[0] > 0 &&
            v[1] > 0;
  if (sp >= 0) H5Sclose(sp);
  if (a >= 0) H5Aclose(a);
  if (ok) *rows = v[0], *cols = v[1];
  return ok;
}

sl_code sl_h5_dataset_check_image_nr(const sl_h5_dataset *d, const char *file, int64_t first_frame,
                                     sl_error *err) {
  static const char *names[2] = {"image_nr_low", "image_nr_high"};
  int64_t expect[2] = {first_frame + 1, first_frame + d->n};
  for (int i = 0; i < 2; i++) {
    if (H5Aexists(d->did, names[i]) <= 0) continue;
    hid_t a = H5Aopen(d->did, names[i], H5P_DEFAULT);
    if (a < 0) continue;
    hid_t sp = H5Aget_space(a);
    long long v = 0;
    bool ok = H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0;
    H5Sclose(sp);
    H5Aclose(a);
    if (ok && v != expect[i])
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                        "dataset %s has %s = %lld, but it holds frames %lld..%lld of the "
                        "acquisition (1-based)",
                        d->link, names[i], v, (long long)expect[0], (long long)expect[1]);
  }
  return SL_OK;
}
