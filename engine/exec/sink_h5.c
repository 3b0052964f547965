#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec/sinks.h"
#include "engine/plan/plan.h"

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

/* The HDF5 type of a dtype: complex as the common {r, i} compound of two f32
 * (h5py reads it as complex64); *own says the caller closes it. */
static hid_t dataset_type(sl_dtype t, bool *own) {
  *own = false;
  if (t != SL_C64) return h5_type(t);
  hid_t type = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(type, "r", 0, H5T_NATIVE_FLOAT);
  H5Tinsert(type, "i", 4, H5T_NATIVE_FLOAT);
  *own = true;
  return type;
}

/* A streamed output's positions waiting to be written: consecutive
 * positions from `start`, in a buffer of at most SL_PLAN_SINK_BUFFER_BYTES
 * (a chunk of a few frames' scalars would otherwise cost an HDF5 write
 * each). Written when the next positions do not follow or do not fit, and
 * when the file is finished. */
typedef struct pending {
  unsigned char *data;
  size_t cap, bytes;
  int64_t start, count;
} pending;

struct sl_h5_writer {
  char path[4352];
  hid_t file;
  int n;
  hid_t *ds;        /* per output: its dataset once created, or -1 */
  pending *waiting; /* per output */
  const sl_output_data **out; /* per output: what its pending positions belong to */
};

sl_code sl_h5_writer_open(const char *path, const sl_attr *file_attrs, int n_attrs, int n_outputs,
                          sl_h5_writer **out, sl_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are reported by us, with context */
  *out = NULL;
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  for (int a = 0; a < n_attrs; a++)
    if (put_str_attr(f, file_attrs[a].key, file_attrs[a].value) < 0) {
      H5Fclose(f);
      return sl_fail(err, SL_ERR_IO, "%s: cannot write attribute '%s'", path, file_attrs[a].key);
    }
  sl_h5_writer *w = calloc(1, sizeof *w);
  w->ds = malloc((size_t)(n_outputs ? n_outputs : 1) * sizeof *w->ds);
  w->waiting = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *w->waiting);
  w->out = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *w->out);
  if (!w->ds || !w->waiting || !w->out) {
    free(w->ds), free(w->waiting), free(w->out);
    free(w);
    H5Fclose(f);
    return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for the writer", path);
  }
  for (int o = 0; o < n_outputs; o++) w->ds[o] = -1;
  snprintf(w->path, sizeof w->path, "%s", path);
  w->file = f;
  w->n = n_outputs;
  *out = w;
  return SL_OK;
}

sl_code sl_h5_writer_create(sl_h5_writer *w, int o, const sl_output_data *out, sl_error *err) {
  hsize_t dims[SL_MAX_RANK];
  for (int k = 0; k < out->desc.rank; k++) dims[k] = (hsize_t)out->desc.dims[k];
  bool own;
  hid_t type = dataset_type(out->desc.dtype, &own);
  hid_t space = out->desc.rank ? H5Screate_simple(out->desc.rank, dims, NULL) : H5Screate(H5S_SCALAR);
  w->ds[o] = H5Dcreate2(w->file, out->name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  if (own) H5Tclose(type);
  if (w->ds[o] < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot create dataset '%s'", w->path, out->name);
  return SL_OK;
}

/* Selects scan positions [start, start + count) of a dataset whose first
 * `scan_rank` axes are the scan (C order) and whose other axes are whole:
 * the flat range as a union of boxes, from the innermost scan axis out (a
 * partial row, whole rows, a partial row; likewise for planes, ...). */
static herr_t select_positions(hid_t space, int rank, const hsize_t *dims, int scan_rank, hsize_t start,
                               hsize_t count) {
  herr_t rc = H5Sselect_none(space);
  hsize_t off[SL_MAX_RANK], len[SL_MAX_RANK];
  while (count > 0 && rc >= 0) {
    /* the largest aligned box starting at `start`: axis a and those inside it */
    hsize_t block = 1;
    int a = scan_rank - 1;
    while (a > 0 && start % (block * dims[a]) == 0 && count >= block * dims[a]) block *= dims[a--];
    /* block positions make whole rows of axis a+1..; take as many as fit along axis a */
    hsize_t rest = start / block, along = dims[a] - rest % dims[a];
    hsize_t n = count / block < along ? count / block : along;
    hsize_t idx = rest;
    for (int k = a; k >= 0; k--) {
      off[k] = idx % dims[k];
      idx /= dims[k];
      len[k] = 1;
    }
    len[a] = n;
    for (int k = a + 1; k < scan_rank; k++) off[k] = 0, len[k] = dims[k];
    for (int k = scan_rank; k < rank; k++) off[k] = 0, len[k] = dims[k];
    rc = H5Sselect_hyperslab(space, H5S_SELECT_OR, off, NULL, len, NULL);
    start += n * block;
    count -= n * block;
  }
  return rc;
}

static sl_code write_positions(sl_h5_writer *w, int o, const sl_output_data *out, int64_t start,
                               int64_t count, const void *data, sl_error *err);

/* Writes output o's pending positions. */
static sl_code flush(sl_h5_writer *w, int o, sl_error *err) {
  pending *q = &w->waiting[o];
  if (!q->count) return SL_OK;
  sl_code rc = write_positions(w, o, w->out[o], q->start, q->count, q->data, err);
  q->count = 0, q->bytes = 0;
  return rc;
}

sl_code sl_h5_writer_positions(sl_h5_writer *w, int o, const sl_output_data *out, int64_t start,
                               int64_t count, const void *data, sl_error *err) {
  if (count <= 0) return SL_OK;
  pending *q = &w->waiting[o];
  size_t bytes = (size_t)(count * sl_desc_item_bytes(&out->desc));
  bool follows = q->count && q->start + q->count == start;
  if (q->count && (!follows || q->bytes + bytes > q->cap)) {
    sl_code rc = flush(w, o, err);
    if (rc != SL_OK) return rc;
  }
  if (!q->data) { /* the buffer: as much of the output as the plan counted */
    int64_t whole = sl_desc_bytes(&out->desc);
    q->cap = (size_t)(whole < SL_PLAN_SINK_BUFFER_BYTES ? whole : SL_PLAN_SINK_BUFFER_BYTES);
    q->data = malloc(q->cap ? q->cap : 1);
  }
  if (!q->data || bytes > q->cap) return write_positions(w, o, out, start, count, data, err);
  if (!q->count) q->start = start;
  memcpy(q->data + q->bytes, data, bytes);
  q->bytes += bytes;
  q->count += count;
  w->out[o] = out;
  return SL_OK;
}

static sl_code write_positions(sl_h5_writer *w, int o, const sl_output_data *out, int64_t start,
                               int64_t count, const void *data, sl_error *err) {
  if (count <= 0) return SL_OK;
  int rank = out->desc.rank, scan_rank = out->desc.stream_rank;
  hsize_t dims[SL_MAX_RANK];
  for (int k = 0; k < rank; k++) dims[k] = (hsize_t)out->desc.dims[k];
  hid_t file_space = H5Dget_space(w->ds[o]);
  hsize_t mem_n = (hsize_t)(count * sl_desc_item_elems(&out->desc));
  hid_t mem_space = H5Screate_simple(1, &mem_n, NULL);
  bool own;
  hid_t type = dataset_type(out->desc.dtype, &own);
  herr_t h = select_positions(file_space, rank, dims, scan_rank, (hsize_t)start, (hsize_t)count);
  if (h >= 0) h = H5Dwrite(w->ds[o], type, mem_space, file_space, H5P_DEFAULT, data);
  H5Sclose(mem_space);
  H5Sclose(file_space);
  if (own) H5Tclose(type);
  if (h < 0)
    return sl_fail(err, SL_ERR_IO, "%s: cannot write positions %lld-%lld of '%s'", w->path, (long long)start,
                   (long long)(start + count - 1), out->name);
  return SL_OK;
}

sl_code sl_h5_writer_whole(sl_h5_writer *w, int o, const sl_output_data *out, sl_error *err) {
  sl_code rc = w->ds[o] < 0 ? sl_h5_writer_create(w, o, out, err) : SL_OK;
  if (rc != SL_OK) return rc;
  bool own;
  hid_t type = dataset_type(out->desc.dtype, &own);
  herr_t h = H5Dwrite(w->ds[o], type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data);
  if (own) H5Tclose(type);
  if (h < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot write dataset '%s'", w->path, out->name);
  return SL_OK;
}

/* The attributes a dataset gets once the run has ended (notes and sizes
 * are known then). */
static sl_code put_output_attrs(sl_h5_writer *w, hid_t ds, const sl_output_data *o, sl_error *err) {
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
  if (h < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot write attributes of '%s'", w->path, o->name);
  return SL_OK;
}

/* The pending positions' buffers go. */
static void free_waiting(sl_h5_writer *w) {
  for (int o = 0; o < w->n; o++) free(w->waiting[o].data);
  free(w->waiting);
  free(w->out);
}

sl_code sl_h5_writer_finish(sl_h5_writer *w, const sl_output_data *outs, sl_error *err) {
  sl_code rc = SL_OK;
  for (int o = 0; o < w->n && rc == SL_OK; o++) rc = flush(w, o, err);
  for (int o = 0; o < w->n && rc == SL_OK; o++) {
    if (w->ds[o] < 0) rc = sl_fail(err, SL_ERR_INTERNAL, "%s: dataset '%s' was never written", w->path, outs[o].name);
    else rc = put_output_attrs(w, w->ds[o], &outs[o], err);
  }
  for (int o = 0; o < w->n; o++)
    if (w->ds[o] >= 0) H5Dclose(w->ds[o]);
  herr_t h = H5Fclose(w->file);
  if (h < 0 && rc == SL_OK) rc = sl_fail(err, SL_ERR_IO, "cannot finish writing %s", w->path);
  free_waiting(w);
  free(w->ds);
  free(w);
  return rc;
}

void sl_h5_writer_abandon(sl_h5_writer *w) {
  if (!w) return;
  for (int o = 0; o < w->n; o++)
    if (w->ds[o] >= 0) H5Dclose(w->ds[o]);
  H5Fclose(w->file);
  free_waiting(w);
  free(w->ds);
  free(w);
}

sl_code sl_h5_read_output(const char *path, const sl_output_data *out, void *data, sl_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return sl_fail(err, SL_ERR_IO, "cannot open %s", path);
  hid_t ds = H5Dopen2(f, out->name, H5P_DEFAULT);
  bool own;
  hid_t type = dataset_type(out->desc.dtype, &own);
  herr_t h = ds < 0 ? -1 : H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (own) H5Tclose(type);
  if (ds >= 0) H5Dclose(ds);
  H5Fclose(f);
  if (h < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot read dataset '%s'", path, out->name);
  return SL_OK;
}

sl_code sl_write_results_h5(const char *path, const sl_output_data *outs, int n,
                            const sl_attr *file_attrs, int n_attrs, sl_error *err) {
  sl_h5_writer *w;
  sl_code rc = sl_h5_writer_open(path, file_attrs, n_attrs, n, &w, err);
  for (int o = 0; o < n && rc == SL_OK; o++) rc = sl_h5_writer_whole(w, o, &outs[o], err);
  if (rc != SL_OK) {
    sl_h5_writer_abandon(w);
    return rc;
  }
  return sl_h5_writer_finish(w, outs, err);
}
