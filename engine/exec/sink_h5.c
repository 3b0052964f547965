#include <hdf5.h>
#include <string.h>

#include "engine/exec/sinks.h"

static hid_t h5_type(sl_dtype t) {
  switch (t) {
    case SL_U8: return H5T_NATIVE_UINT8;
    case SL_U16: return H5T_NATIVE_UINT16;
    case SL_U32: return H5T_NATIVE_UINT32;
    case SL_U64: return H5T_NATIVE_UINT64;
    case SL_I32: return H5T_NATIVE_INT32;
    case SL_I64: return H5T_NATIVE_INT64;
    case SL_F32: return H5T_NATIVE_FLOAT;
    case SL_F64: return H5T_NATIVE_DOUBLE;
    default: return -1;
  }
}

static herr_t put_str_attr(hid_t obj, const char *key, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, strlen(value) + 1);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, key, type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = attr < 0 ? -1 : H5Awrite(attr, type, value);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  return rc;
}

static herr_t put_int_attr(hid_t obj, const char *key, int64_t v) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, key, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = attr < 0 ? -1 : H5Awrite(attr, H5T_NATIVE_INT64, &v);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  return rc;
}

/* A variable-size concat's per-chunk byte counts, so a reader can find each
 * chunk's bytes in the concatenation. */
static herr_t put_int_array_attr(hid_t obj, const char *key, const int64_t *v, int64_t n) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t space = H5Screate_simple(1, dims, NULL);
  hid_t attr = H5Acreate2(obj, key, H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = attr < 0 ? -1 : H5Awrite(attr, H5T_NATIVE_INT64, v);
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  return rc;
}

sl_code sl_write_results_h5(const char *path, const sl_output_data *outs, int n,
                            const sl_attr *file_attrs, int n_attrs, sl_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are reported by us, with context */
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  sl_code rc = SL_OK;
  for (int a = 0; a < n_attrs && rc == SL_OK; a++)
    if (put_str_attr(f, file_attrs[a].key, file_attrs[a].value) < 0)
      rc = sl_fail(err, SL_ERR_IO, "%s: cannot write attribute '%s'", path, file_attrs[a].key);
  for (int i = 0; i < n && rc == SL_OK; i++) {
    const sl_output_data *o = &outs[i];
    hsize_t dims[SL_MAX_RANK];
    for (int k = 0; k < o->desc.rank; k++) dims[k] = (hsize_t)o->desc.dims[k];
    hid_t type = -1;
    bool own_type = false;
    if (o->desc.dtype == SL_C64) {
      /* Complex as the common {r, i} compound of two f32 (h5py reads it as complex64). */
      type = H5Tcreate(H5T_COMPOUND, 8);
      H5Tinsert(type, "r", 0, H5T_NATIVE_FLOAT);
      H5Tinsert(type, "i", 4, H5T_NATIVE_FLOAT);
      own_type = true;
    } else {
      type = h5_type(o->desc.dtype);
    }
    hid_t space = o->desc.rank ? H5Screate_simple(o->desc.rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(f, o->name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ds < 0 || H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, o->data) < 0) {
      rc = sl_fail(err, SL_ERR_IO, "%s: cannot write dataset '%s'", path, o->name);
    } else {
      herr_t h = 0;
      if (o->unit) h |= put_str_attr(ds, "unit", o->unit);
      char src[256];
      snprintf(src, sizeof src, "%s.%s", o->node_id, o->port);
      h |= put_str_attr(ds, "source", src);
      h |= put_str_attr(ds, "dtype", sl_dtype_name(o->desc.dtype));
      h |= put_int_attr(ds, "scan_axes", o->scan_axes);
      if (o->provenance) h |= put_str_attr(ds, "provenance", o->provenance);
      if (o->chunk_bytes && o->n_chunk_bytes > 0)
        h |= put_int_array_attr(ds, "chunk_bytes", o->chunk_bytes, o->n_chunk_bytes);
      if (h < 0) rc = sl_fail(err, SL_ERR_IO, "%s: cannot write attributes of '%s'", path, o->name);
    }
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(space);
    if (own_type) H5Tclose(type);
  }
  if (H5Fclose(f) < 0 && rc == SL_OK) rc = sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return rc;
}
