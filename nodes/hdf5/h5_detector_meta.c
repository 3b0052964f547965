/* Detector metadata next to the frames (/entry/instrument/detector/...):
 * every item optional, every item found checked (see h5_index.h,
 * sl_h5_detector_meta, and docs/formats/dectris-hdf5.md). */
#include <math.h>
#include <stdlib.h>

#include "nodes/hdf5/h5_dataset.h"

#define DETECTOR "/entry/instrument/detector"

/* Reads a numeric scalar (or 1-element) dataset as double. *found = false
 * when absent. */
static sl_code read_scalar(hid_t fid, const char *file, const char *path, double *v, bool *found,
                           sl_error *err) {
  *found = false;
  if (!sl_h5_path_exists(fid, path)) return SL_OK;
  hid_t d = H5Dopen2(fid, path, H5P_DEFAULT);
  if (d < 0) return SL_OK; /* a group or dangling link of that name: not our metadata */
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  H5T_class_t c = H5Tget_class(t);
  sl_code rc = SL_OK;
  if (H5Sget_simple_extent_npoints(sp) != 1 || (c != H5T_INTEGER && c != H5T_FLOAT)) {
    char tn[64];
    sl_h5_type_name(t, tn, sizeof tn);
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s should be one number, found %lld elements of %s",
                    path, (long long)H5Sget_simple_extent_npoints(sp), tn);
  } else if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 || !isfinite(*v)) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "cannot read %s as a number", path);
  } else {
    *found = true;
  }
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return rc;
}

static sl_code read_count(hid_t fid, const char *file, const char *path, int64_t *v, bool *found,
                          sl_error *err) {
  double d = 0;
  sl_code rc = read_scalar(fid, file, path, &d, found, err);
  if (rc || !*found) return rc;
  if (d < 0 || d > 9007199254740992.0 || d != floor(d))
    return sl_fail_in(err, SL_ERR_FORMAT, file, "%s = %g is not a non-negative integer", path, d);
  *v = (int64_t)d;
  return SL_OK;
}

/* The saturation value: saturation_value, else the count-rate correction
 * cutoff, whichever is found first. */
static sl_code read_saturation(sl_h5_detector_meta *m, hid_t fid, const char *file, sl_error *err) {
  static const char *paths[2] = {DETECTOR "/saturation_value",
                                 DETECTOR "/detectorSpecific/countrate_correction_count_cutoff"};
  for (int i = 0; i < 2 && !m->has_saturation_value; i++) {
    int64_t v = 0;
    bool found = false;
    sl_code rc = read_count(fid, file, paths[i], &v, &found, err);
    if (rc) return rc;
    if (found) {
      m->has_saturation_value = true;
      m->saturation_value = (uint64_t)v;
      m->saturation_source = paths[i];
    }
  }
  return SL_OK;
}

/* detectorSpecific/pixel_mask: a 2-D integer array of the frame's shape. */
static sl_code read_pixel_mask(sl_h5_index *ix, hid_t fid, const char *file, sl_error *err) {
  sl_h5_detector_meta *m = &ix->meta;
  const char *mp = DETECTOR "/detectorSpecific/pixel_mask";
  if (!sl_h5_path_exists(fid, mp)) return SL_OK;
  hid_t d = H5Dopen2(fid, mp, H5P_DEFAULT);
  if (d < 0) return SL_OK;
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  hsize_t dims[2] = {0, 0};
  sl_code rc = SL_OK;
  if (H5Sget_simple_extent_ndims(sp) != 2 || H5Tget_class(t) != H5T_INTEGER) {
    char tn[64];
    sl_h5_type_name(t, tn, sizeof tn);
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s should be a 2-D integer array, found rank %d %s",
                    mp, H5Sget_simple_extent_ndims(sp), tn);
  } else if (H5Sget_simple_extent_dims(sp, dims, NULL),
             (int64_t)dims[0] != ix->frame_rows || (int64_t)dims[1] != ix->frame_cols) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s is %llu x %llu, but frames are %lld x %lld", mp,
                    (unsigned long long)dims[0], (unsigned long long)dims[1],
                    (long long)ix->frame_rows, (long long)ix->frame_cols);
  } else {
    size_t n = (size_t)(ix->frame_rows * ix->frame_cols);
    m->pixel_mask = malloc(n * sizeof *m->pixel_mask);
    if (!m->pixel_mask) {
      rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for the pixel mask");
    } else if (H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->pixel_mask) < 0) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "cannot read %s", mp);
      free(m->pixel_mask);
      m->pixel_mask = NULL;
    } else {
      m->has_pixel_mask = true;
      for (size_t i = 0; i < n; i++) m->n_bad_pixels += m->pixel_mask[i] > 0;
    }
  }
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return rc;
}

sl_code sl_h5_detector_meta_read(sl_h5_index *ix, hid_t fid, const char *file, sl_error *err) {
  sl_h5_detector_meta *m = &ix->meta;
  sl_code rc;
  if ((rc = read_count(fid, file, DETECTOR "/x_pixels_in_detector", &m->x_pixels, &m->has_x_pixels,
                       err)) ||
      (rc = read_count(fid, file, DETECTOR "/y_pixels_in_detector", &m->y_pixels, &m->has_y_pixels,
                       err)) ||
      (rc = read_count(fid, file, DETECTOR "/detectorSpecific/nimages", &m->nimages,
                       &m->has_nimages, err)) ||
      (rc = read_count(fid, file, DETECTOR "/detectorSpecific/ntrigger", &m->ntrigger,
                       &m->has_ntrigger, err)) ||
      (rc = read_scalar(fid, file, DETECTOR "/count_time", &m->count_time, &m->has_count_time,
                        err)) ||
      (rc = read_scalar(fid, file, DETECTOR "/frame_time", &m->frame_time, &m->has_frame_time,
                        err)) ||
      (rc = read_saturation(m, fid, file, err)))
    return rc;
  /* Frames beyond what the detector says it recorded mean inconsistent files. */
  if (m->has_nimages && m->nimages > 0) {
    int64_t expect = m->nimages * (m->has_ntrigger && m->ntrigger > 0 ? m->ntrigger : 1);
    if (ix->n_frames > expect)
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                        "the data files hold %lld frames, more than nimages x ntrigger = %lld",
                        (long long)ix->n_frames, (long long)expect);
  }
  return read_pixel_mask(ix, fid, file, err);
}
