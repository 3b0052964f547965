/* The results.h5 writer (see sinks.h): one dataset per output, streamed
 * outputs written as their chunks complete through a bounded write-behind
 * buffer, attributes once the run has ended. */
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/alloc.h"
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

/* One dataset of results.h5, and a streamed output's positions waiting to be
 * written: consecutive positions from `start` (chunks first_chunk to
 * last_chunk) in a buffer of sl_h5_write_behind_bytes, written when the next
 * positions do not follow or do not fit, before the dataset is read, and
 * when the file is finished. A buffer that holds the whole output (`whole`:
 * an image of up to SL_H5_IMAGE_BEHIND_BYTES, or any output that small)
 * keeps every position at its own place instead, and [start, start + count)
 * spans those written since the last flush: the shards of a split run
 * write their ranges in turn, which would otherwise flush it at every
 * chunk (an HDF5 write of a few positions each). */
typedef struct dataset {
  char *name;
  sl_tensor_desc desc;
  hid_t id;
  unsigned char *data;
  size_t cap, bytes;
  bool whole;
  int64_t start, count, first_chunk, last_chunk;
  /* A streamed image's finite range over the positions passed so far
   * (`ranged` of them), so that its PNG needs no read back for it. */
  double lo, hi;
  int64_t ranged;
  /* An encoded output's dataset (sl_h5_writer_stored): positions x item,
   * in HDF5 chunks of the stored blocks, which it copies as they are. */
  bool stored;
  /* A ragged output's group (`id` is the group's) and what waits to be
   * appended to its datasets; NULL for any other output. */
  struct ragged *rg;
} dataset;

/* Every call from outside takes `lock`: the writer nodes of a run split
 * into shards (threads of this process) share one writer. */
struct sl_h5_writer {
  pthread_mutex_t lock;
  char path[4352];
  hid_t file;
  int n, cap;
  dataset *sets;
  bool chunked_ready; /* sl_h5_writer_expect_chunked done */
  bool plugin;       /* ... and HDF5 found the bitshuffle plugin */
};

int64_t sl_h5_write_behind_bytes(const sl_tensor_desc *d) {
  int64_t whole = sl_desc_bytes(d);
  if (sl_output_is_image(d) && whole <= SL_H5_IMAGE_BEHIND_BYTES) return whole;
  return whole < SL_H5_WRITE_BEHIND_BYTES ? whole : SL_H5_WRITE_BEHIND_BYTES;
}

void sl_h5_writer_process_init(void) { H5dont_atexit(); }

bool sl_h5_threadsafe(char *version, size_t len) {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  snprintf(version, len, "%u.%u.%u", maj, min, rel);
  hbool_t ts = 0;
  return H5is_library_threadsafe(&ts) >= 0 && ts;
}

sl_code sl_h5_writer_open(const char *path, const sl_attr *file_attrs, int n_attrs, sl_h5_writer **out,
                          sl_error *err) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are reported by us, with context */
  *out = NULL;
  sl_h5_writer *w = calloc(1, sizeof *w);
  if (!w) return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for the writer", path);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    free(w);
    return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  }
  for (int a = 0; a < n_attrs; a++)
    if (put_str_attr(f, file_attrs[a].key, file_attrs[a].value) < 0) {
      H5Fclose(f);
      free(w);
      return sl_fail(err, SL_ERR_IO, "%s: cannot write attribute '%s'", path, file_attrs[a].key);
    }
  snprintf(w->path, sizeof w->path, "%s", path);
  w->file = f;
  pthread_mutex_init(&w->lock, NULL);
  *out = w;
  return SL_OK;
}

static dataset *find(sl_h5_writer *w, const char *name) {
  for (int k = 0; k < w->n; k++)
    if (!strcmp(w->sets[k].name, name)) return &w->sets[k];
  return NULL;
}

/* The bitshuffle HDF5 filter (docs/formats/bitshuffle-lz4.md). Its chunks
 * are read with the stored values [2] element size, [3] block size in
 * elements (0: the default), [4] compression (2: LZ4, 0: none); [0] and [1]
 * are the plugin's version, which readers ignore. */
#define BITSHUFFLE_FILTER 32008

/* The creation properties of an encoded output's dataset: chunks of the
 * stored blocks' positions (`dims` the dataset's: positions x item) and the
 * encoding's filter, optional so that the dataset can be made where the
 * plugin is not installed (sluice writes the stored bytes, never through
 * the filter); -1 for an encoding with no HDF5 layout. */
static hid_t stored_dcpl(const sl_tensor_desc *d, int rank, const hsize_t *dims, bool plugin) {
  hsize_t chunk[SL_MAX_RANK];
  for (int k = 0; k < rank; k++) chunk[k] = dims[k];
  chunk[0] = (hsize_t)(d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1);
  unsigned compression;
  switch (d->encoding) {
    case SL_ENC_BSLZ4: compression = 2; break;
    case SL_ENC_BITSHUFFLE: compression = 0; break;
    case SL_ENC_RAW: compression = ~0u; break;
    default: return -1;
  }
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  herr_t h = dcpl < 0 ? -1 : H5Pset_chunk(dcpl, rank, chunk);
  if (h >= 0 && compression != ~0u) {
    /* Where HDF5 finds the plugin, its set_local prepends {version, element
     * size} to what it is given when the dataset is made; elsewhere the
     * values are stored as they are given, so they must be whole. */
    const unsigned cd[5] = {0, 0, (unsigned)sl_dtype_size(d->dtype), (unsigned)d->encoded_block_elems, compression};
    h = H5Pset_filter(dcpl, BITSHUFFLE_FILTER, H5Z_FLAG_OPTIONAL, plugin ? 2 : 5, plugin ? cd + 3 : cd);
  }
  if (h < 0 && dcpl >= 0) H5Pclose(dcpl);
  return h < 0 ? -1 : dcpl;
}

/* The attributes of an encoded output's dataset known when it is made: its
 * scan's shape (the dataset has one axis of positions, as an acquisition's
 * frames do) and the encoding of its chunks. */
static herr_t put_stored_attrs(hid_t ds, const sl_tensor_desc *d) {
  herr_t h = put_str_attr(ds, "encoding", sl_encoding_name(d->encoding));
  if (h >= 0) h = put_int_array_attr(ds, "scan_shape", d->dims, d->stream_rank);
  return h;
}

/* Before the first dataset of stored chunks (or group of ragged items):
 * such a dataset has a chunk per stored block, as many as the acquisition
 * (262,144 for a 512 x 512 scan in chunks of a frame), and what HDF5 keeps
 * of them in memory must not grow with them (a ragged output's datasets
 * grow chunk by chunk, likewise). So objects made from here on take HDF5 1.10's format, whose
 * fixed-array chunk index pages its entries (HDF5's default v1 B-tree took
 * 7 MiB for 65,536 chunks), the file's metadata cache is held at
 * SL_H5_METADATA_CACHE_BYTES (it grows to 32 MiB by default), and HDF5's
 * free lists, which keep what it frees for reuse, at SL_H5_FREE_LIST_BYTES
 * for each kind and a quarter of that for one list. write_h5 plans what is
 * left as its library_bytes. Readers need HDF5 1.10 or later (h5py,
 * LiberTEM, Debian 12's HDF5). Also notes whether HDF5 finds the bitshuffle
 * plugin (stored_dcpl). */
static sl_code expect_chunked(sl_h5_writer *w, const char *name, sl_error *err) {
  if (w->chunked_ready) return SL_OK;
  H5AC_cache_config_t mdc;
  memset(&mdc, 0, sizeof mdc);
  mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  herr_t h = H5Fset_libver_bounds(w->file, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  if (h >= 0) h = H5Fget_mdc_config(w->file, &mdc);
  if (h >= 0) {
    mdc.set_initial_size = 1;
    mdc.initial_size = mdc.min_size = mdc.max_size = SL_H5_METADATA_CACHE_BYTES;
    mdc.incr_mode = H5C_incr__off;
    mdc.flash_incr_mode = H5C_flash_incr__off;
    mdc.decr_mode = H5C_decr__off;
    h = H5Fset_mdc_config(w->file, &mdc);
  }
  const int fl = (int)SL_H5_FREE_LIST_BYTES, each = fl / 4;
  if (h >= 0) h = H5set_free_list_limits(fl, each, fl, each, fl, each);
  if (h < 0)
    return sl_fail(err, SL_ERR_IO, "%s: cannot set up HDF5 for the stored chunks of output '%s'", w->path, name);
  w->plugin = H5Zfilter_avail(BITSHUFFLE_FILTER) > 0;
  w->chunked_ready = true;
  return SL_OK;
}

int64_t sl_h5_stored_library_bytes(int64_t chunks) {
  const int64_t most = (int64_t)7 << 19, grown = ((int64_t)1 << 19) + 48 * (chunks > 0 ? chunks : 0);
  return grown < most ? grown : most;
}

static sl_code ragged_create(sl_h5_writer *w, dataset *s, sl_error *err);

/* Dataset `name` with d's dtype and full shape (an encoded output: its
 * positions in one axis, then the item's axes; a ragged output: its group,
 * ragged_create): the one made before, or a new one. */
static sl_code get_dataset(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, dataset **out,
                           sl_error *err) {
  if ((*out = find(w, name))) return SL_OK;
  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 8;
    if (!sl_resize(&w->sets, (size_t)cap, sizeof *w->sets))
      return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for dataset '%s'", w->path, name);
    w->cap = cap;
  }
  if (d->encoding != SL_ENC_NONE || sl_desc_is_ragged(d)) {
    sl_code rc = expect_chunked(w, name, err);
    if (rc != SL_OK) return rc;
  }
  dataset *s = &w->sets[w->n];
  memset(s, 0, sizeof *s);
  if (!(s->name = sl_strdup(name))) return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for dataset '%s'", w->path, name);
  s->desc = *d;
  if (sl_desc_is_ragged(d)) {
    sl_code rc = ragged_create(w, s, err);
    if (rc != SL_OK) {
      free(s->name);
      return rc;
    }
    w->n++;
    *out = s;
    return SL_OK;
  }
  s->lo = INFINITY, s->hi = -INFINITY;
  s->stored = d->encoding != SL_ENC_NONE;
  hsize_t dims[SL_MAX_RANK];
  int rank = d->rank;
  for (int k = 0; k < d->rank; k++) dims[k] = (hsize_t)d->dims[k];
  if (s->stored) { /* positions x item */
    rank = 1 + d->rank - d->stream_rank;
    dims[0] = (hsize_t)sl_desc_positions(d);
    for (int k = 1; k < rank; k++) dims[k] = (hsize_t)d->dims[d->stream_rank + k - 1];
  }
  hid_t dcpl = s->stored ? stored_dcpl(d, rank, dims, w->plugin) : H5P_DEFAULT;
  bool own;
  hid_t type = dataset_type(d->dtype, &own);
  hid_t space = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
  s->id = dcpl < 0 ? -1 : H5Dcreate2(w->file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Sclose(space);
  if (own) H5Tclose(type);
  if (s->stored && dcpl >= 0) H5Pclose(dcpl);
  if (s->id >= 0 && s->stored && put_stored_attrs(s->id, d) < 0) {
    H5Dclose(s->id);
    s->id = -1;
  }
  if (s->id < 0) {
    free(s->name);
    return sl_fail(err, SL_ERR_IO, "%s: cannot create dataset '%s'%s", w->path, name,
                   s->stored ? " for the stored chunks of an encoded output" : "");
  }
  w->n++;
  *out = s;
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

/* Positions [start, start + count) of chunks first..last into the file. */
static sl_code write_positions(sl_h5_writer *w, dataset *s, int64_t first, int64_t last, int64_t start,
                               int64_t count, const void *data, sl_error *err) {
  if (count <= 0) return SL_OK;
  int rank = s->desc.rank, scan_rank = s->desc.stream_rank;
  hsize_t dims[SL_MAX_RANK];
  for (int k = 0; k < rank; k++) dims[k] = (hsize_t)s->desc.dims[k];
  hid_t file_space = H5Dget_space(s->id);
  hsize_t mem_n = (hsize_t)(count * sl_desc_item_elems(&s->desc));
  hid_t mem_space = H5Screate_simple(1, &mem_n, NULL);
  bool own;
  hid_t type = dataset_type(s->desc.dtype, &own);
  herr_t h = select_positions(file_space, rank, dims, scan_rank, (hsize_t)start, (hsize_t)count);
  if (h >= 0) h = H5Dwrite(s->id, type, mem_space, file_space, H5P_DEFAULT, data);
  H5Sclose(mem_space);
  H5Sclose(file_space);
  if (own) H5Tclose(type);
  if (h >= 0) return SL_OK;
  if (first == last)
    return sl_fail(err, SL_ERR_IO, "%s: cannot write chunk %lld (positions %lld-%lld) of output '%s'", w->path,
                   (long long)first, (long long)start, (long long)(start + count - 1), s->name);
  return sl_fail(err, SL_ERR_IO, "%s: cannot write chunks %lld-%lld (positions %lld-%lld) of output '%s'",
                 w->path, (long long)first, (long long)last, (long long)start, (long long)(start + count - 1),
                 s->name);
}

static sl_code ragged_flush(sl_h5_writer *w, dataset *s, sl_error *err);

/* Writes the dataset's waiting positions (a ragged output's: its items). */
static sl_code flush(sl_h5_writer *w, dataset *s, sl_error *err) {
  if (s->rg) return ragged_flush(w, s, err);
  if (!s->count) return SL_OK;
  const unsigned char *from = s->whole ? s->data + s->start * sl_desc_item_bytes(&s->desc) : s->data;
  sl_code rc = write_positions(w, s, s->first_chunk, s->last_chunk, s->start, s->count, from, err);
  s->count = 0, s->bytes = 0;
  return rc;
}

/* The write-behind buffer write_h5 declared (sl_h5_write_behind_bytes),
 * made once, every page touched; s->data stays NULL when there is no
 * memory for it (the chunks are then written as they come). */
static void behind_buffer(dataset *s, const sl_tensor_desc *d) {
  if (s->data) return;
  s->cap = (size_t)sl_h5_write_behind_bytes(d);
  s->data = malloc(s->cap ? s->cap : 1);
  if (s->data) memset(s->data, 0, s->cap);
  s->whole = s->data && (int64_t)s->cap >= sl_desc_bytes(d);
}

static sl_code reserve(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, sl_error *err) {
  dataset *s;
  sl_code rc = get_dataset(w, name, d, &s, err);
  if (rc == SL_OK && !s->stored && !sl_desc_is_ragged(d) && d->stream_rank) behind_buffer(s, d);
  return rc;
}

static sl_code positions(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                         int64_t start, int64_t count, const void *data, sl_error *err) {
  if (count <= 0) return SL_OK;
  dataset *s;
  sl_code rc = get_dataset(w, name, d, &s, err);
  if (rc != SL_OK) return rc;
  size_t bytes = (size_t)(count * sl_desc_item_bytes(d));
  if (sl_output_is_image(d)) { /* the data is in cache now; the PNG would read it back */
    sl_values_range(d->dtype, data, count * sl_desc_item_elems(d), &s->lo, &s->hi);
    s->ranged += count;
  }
  behind_buffer(s, d);
  if (s->whole) { /* each position at its place; the span grows over what was written since a flush */
    const int64_t item = sl_desc_item_bytes(d);
    memcpy(s->data + start * item, data, bytes);
    const int64_t lo = s->count && s->start < start ? s->start : start;
    const int64_t hi = s->count && s->start + s->count > start + count ? s->start + s->count : start + count;
    if (!s->count || chunk < s->first_chunk) s->first_chunk = chunk;
    if (!s->count || chunk > s->last_chunk) s->last_chunk = chunk;
    s->start = lo, s->count = hi - lo, s->bytes = (size_t)(s->count * item);
    return SL_OK;
  }
  bool follows = s->count && s->start + s->count == start;
  if (s->count && (!follows || s->bytes + bytes > s->cap) && (rc = flush(w, s, err)) != SL_OK) return rc;
  if (!s->data || bytes > s->cap) return write_positions(w, s, chunk, chunk, start, count, data, err);
  if (!s->count) s->start = start, s->first_chunk = chunk;
  memcpy(s->data + s->bytes, data, bytes);
  s->bytes += bytes;
  s->count += count;
  s->last_chunk = chunk;
  return SL_OK;
}

/* Bytes the stored block `bytes` (n of them) decodes to: bitshuffle-LZ4's
 * header says (docs/formats/bitshuffle-lz4.md); stored without the codec,
 * or bitshuffled without compression, it is as long as what it holds. */
static uint64_t stored_decoded_bytes(sl_encoding e, uint32_t flags, const unsigned char *bytes, uint64_t n) {
  if (e != SL_ENC_BSLZ4 || (flags & SL_PACKED_STORED_RAW)) return n;
  if (n < 12) return 0;
  uint64_t t = 0;
  for (int k = 0; k < 8; k++) t = t << 8 | bytes[k];
  return t;
}

static sl_code stored(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                      int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err) {
  sl_code rc = sl_packed_check(packed, bytes, err);
  if (rc != SL_OK) return rc;
  dataset *s;
  if ((rc = get_dataset(w, name, d, &s, err)) != SL_OK) return rc;
  const sl_packed_items *pk = packed;
  const int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
  const int64_t total = sl_desc_positions(d);
  const uint64_t full = (uint64_t)(per * sl_desc_item_bytes(d));
  for (uint64_t i = 0; i < pk->n; i++) {
    const sl_packed_entry *e = &pk->entries[i];
    /* a block that began in an earlier call of the scan was written there */
    if (e->first_position < start || e->first_position >= start + count) continue;
    const unsigned char *at = (const unsigned char *)packed + e->offset;
    /* A block is one HDF5 chunk of the dataset when it starts on the
     * dataset's grid of `per` positions and holds a whole chunk's bytes
     * (the last chunk of a dataset is stored whole, as HDF5 does). A data
     * file's last block of fewer positions, in the middle of the scan, is
     * neither: it would need decoding and encoding again. */
    bool on_grid = e->first_position % per == 0 &&
                   (e->n_positions == per || e->first_position + e->n_positions == total);
    if (!on_grid || stored_decoded_bytes(d->encoding, e->flags, at, e->size) != full) {
      char what[512];
      sl_packed_describe(d, e->origin, e->first_position, e->n_positions, what, sizeof what);
      return sl_fail(err, SL_ERR_FORMAT,
                     "output '%s' is written as the acquisition's stored chunks of %lld positions, and %s is "
                     "not one of them (a data file whose frames are not a multiple of its chunks'): write the "
                     "decoded frames instead",
                     name, (long long)per, what);
    }
    hsize_t offset[SL_MAX_RANK] = {(hsize_t)e->first_position};
    uint32_t skipped = (e->flags & SL_PACKED_STORED_RAW) ? 1u : 0u; /* the filter's bit: not applied */
    if (H5Dwrite_chunk(s->id, H5P_DEFAULT, skipped, offset, (size_t)e->size, at) < 0)
      return sl_fail(err, SL_ERR_IO, "%s: cannot write chunk %lld (positions %lld-%lld) of output '%s'", w->path,
                     (long long)chunk, (long long)e->first_position,
                     (long long)(e->first_position + e->n_positions - 1), name);
  }
  return SL_OK;
}

/* ---- Ragged outputs: streams of variable-size items (sl_h5_writer_ragged) */

enum { RG_BYTES, RG_OFFSETS, RG_FIRST, RG_NPOS, RG_SETS };
static const char *const ragged_set_names[RG_SETS] = {"bytes", "offsets", "first_position", "n_positions"};
/* HDF5 chunks of the bytes and of the per-item datasets: HDF5 allocates
 * whole chunks, so a small output's file stays small; a 1 GiB output is
 * 16,384 of them. */
#define RAGGED_BYTES_CHUNK ((int64_t)1 << 16)
#define RAGGED_ITEMS_CHUNK ((int64_t)4096)

typedef struct ragged {
  hid_t sets[RG_SETS];
  /* Items' bytes waiting (held of cap), and the waiting items: each one's
   * end in the bytes dataset, first position and positions (items of icap). */
  unsigned char *data;
  int64_t cap, held;
  uint64_t *ends;
  int64_t *first, *npos;
  int64_t icap, items;
  uint64_t bytes_written; /* in the file */
  int64_t items_written;  /* in the file (offsets holds one more) */
  int64_t next_position;  /* the positions before it are written or waiting */
  int64_t last_first, last_n; /* the last item taken (a call may send it again) */
  int64_t first_chunk, last_chunk; /* of what waits, for errors */
} ragged;

/* A ragged output's write-behind capacities: its items' bytes, at most
 * the whole output's, and its entries, at least one. */
static void ragged_caps(const sl_tensor_desc *d, int64_t *bytes, int64_t *items) {
  const int64_t whole = sl_desc_bytes(d), positions = sl_desc_positions(d);
  *bytes = whole < SL_H5_WRITE_BEHIND_BYTES ? whole : SL_H5_WRITE_BEHIND_BYTES;
  *items = positions < SL_H5_RAGGED_BEHIND_ITEMS ? positions : SL_H5_RAGGED_BEHIND_ITEMS;
  if (*items < 1) *items = 1;
}

int64_t sl_h5_ragged_behind_bytes(const sl_tensor_desc *d) {
  int64_t bytes, items;
  ragged_caps(d, &bytes, &items);
  return bytes + items * (int64_t)(sizeof(uint64_t) + 2 * sizeof(int64_t));
}

int64_t sl_h5_ragged_chunks(const sl_tensor_desc *d) {
  const int64_t items = sl_desc_positions(d) + 1;
  return (sl_desc_bytes(d) + RAGGED_BYTES_CHUNK - 1) / RAGGED_BYTES_CHUNK +
         3 * ((items + RAGGED_ITEMS_CHUNK - 1) / RAGGED_ITEMS_CHUNK);
}

/* One of the group's datasets: 1-D, empty, growing, in chunks of `chunk`
 * elements. Without a chunk cache and without fill values, each write goes
 * straight to the file (the writer's buffers gather the small ones). */
static hid_t ragged_set(hid_t group, const char *name, hid_t type, int64_t chunk) {
  hsize_t zero = 0, most = H5S_UNLIMITED, c = (hsize_t)chunk;
  hid_t space = H5Screate_simple(1, &zero, &most);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dapl = H5Pcreate(H5P_DATASET_ACCESS);
  herr_t h = space < 0 || dcpl < 0 || dapl < 0 ? -1 : H5Pset_chunk(dcpl, 1, &c);
  if (h >= 0) h = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  if (h >= 0) h = H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  hid_t ds = h < 0 ? -1 : H5Dcreate2(group, name, type, space, H5P_DEFAULT, dcpl, dapl);
  if (space >= 0) H5Sclose(space);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (dapl >= 0) H5Pclose(dapl);
  return ds;
}

/* n elements of `type` from data, at element `at` of 1-D dataset ds,
 * which grows to hold them. */
static herr_t ragged_append(hid_t ds, hid_t type, uint64_t at, uint64_t n, const void *data) {
  if (!n) return 0;
  hsize_t end = (hsize_t)(at + n), off = (hsize_t)at, len = (hsize_t)n;
  herr_t h = H5Dset_extent(ds, &end);
  hid_t file_space = h < 0 ? -1 : H5Dget_space(ds);
  hid_t mem_space = H5Screate_simple(1, &len, NULL);
  if (file_space < 0 || mem_space < 0) h = -1;
  if (h >= 0) h = H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &off, NULL, &len, NULL);
  if (h >= 0) h = H5Dwrite(ds, type, mem_space, file_space, H5P_DEFAULT, data);
  if (file_space >= 0) H5Sclose(file_space);
  if (mem_space >= 0) H5Sclose(mem_space);
  return h;
}

static void ragged_close(ragged *r) {
  for (int k = 0; k < RG_SETS; k++)
    if (r->sets[k] >= 0) H5Dclose(r->sets[k]);
  free(r->data);
  free(r->ends);
  free(r->first);
  free(r->npos);
  free(r);
}

/* Output s's group, its datasets (offsets holding its leading 0) and the
 * attributes known now; its write-behind buffers (write_h5's state). */
static sl_code ragged_create(sl_h5_writer *w, dataset *s, sl_error *err) {
  ragged *r = calloc(1, sizeof *r);
  if (!r) return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for output '%s'", w->path, s->name);
  for (int k = 0; k < RG_SETS; k++) r->sets[k] = -1;
  ragged_caps(&s->desc, &r->cap, &r->icap);
  r->data = malloc((size_t)(r->cap > 0 ? r->cap : 1));
  r->ends = malloc((size_t)r->icap * sizeof *r->ends);
  r->first = malloc((size_t)r->icap * sizeof *r->first);
  r->npos = malloc((size_t)r->icap * sizeof *r->npos);
  if (!r->data || !r->ends || !r->first || !r->npos) {
    ragged_close(r);
    return sl_fail(err, SL_ERR_NOMEM, "%s: no memory for the write-behind buffers of output '%s'", w->path,
                   s->name);
  }
  s->id = H5Gcreate2(w->file, s->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t h = s->id < 0 ? -1 : 0;
  const hid_t types[RG_SETS] = {H5T_NATIVE_UINT8, H5T_NATIVE_UINT64, H5T_NATIVE_INT64, H5T_NATIVE_INT64};
  for (int k = 0; k < RG_SETS && h >= 0; k++)
    if ((r->sets[k] = ragged_set(s->id, ragged_set_names[k], types[k],
                                 k == RG_BYTES ? RAGGED_BYTES_CHUNK : RAGGED_ITEMS_CHUNK)) < 0)
      h = -1;
  const uint64_t zero = 0;
  if (h >= 0) h = ragged_append(r->sets[RG_OFFSETS], H5T_NATIVE_UINT64, 0, 1, &zero);
  if (h >= 0) h = put_str_attr(s->id, "layout", "ragged");
  if (h >= 0) h = put_int_array_attr(s->id, "scan_shape", s->desc.dims, s->desc.stream_rank);
  if (h < 0) {
    ragged_close(r);
    if (s->id >= 0) H5Gclose(s->id);
    return sl_fail(err, SL_ERR_IO, "%s: cannot create group '%s' for the variable-size items of an output",
                   w->path, s->name);
  }
  s->rg = r;
  return SL_OK;
}

/* Appends what waits: the items' bytes, then their entries. */
static sl_code ragged_flush(sl_h5_writer *w, dataset *s, sl_error *err) {
  ragged *r = s->rg;
  if (!r->held && !r->items) return SL_OK;
  const uint64_t n = (uint64_t)r->items, at = (uint64_t)r->items_written;
  herr_t h = ragged_append(r->sets[RG_BYTES], H5T_NATIVE_UINT8, r->bytes_written, (uint64_t)r->held, r->data);
  if (h >= 0) h = ragged_append(r->sets[RG_OFFSETS], H5T_NATIVE_UINT64, at + 1, n, r->ends);
  if (h >= 0) h = ragged_append(r->sets[RG_FIRST], H5T_NATIVE_INT64, at, n, r->first);
  if (h >= 0) h = ragged_append(r->sets[RG_NPOS], H5T_NATIVE_INT64, at, n, r->npos);
  if (h < 0)
    return sl_fail(err, SL_ERR_IO, "%s: cannot write the items of chunks %lld-%lld of output '%s'", w->path,
                   (long long)r->first_chunk, (long long)r->last_chunk, s->name);
  r->bytes_written += (uint64_t)r->held;
  r->items_written += r->items;
  r->held = r->items = 0;
  return SL_OK;
}

/* One item (entry e, its bytes at `at`) of chunk `chunk`: into the
 * buffers, or, larger than the bytes' buffer, straight into the file after
 * what waits. */
static sl_code ragged_item(sl_h5_writer *w, dataset *s, int64_t chunk, const sl_packed_entry *e,
                           const unsigned char *at, sl_error *err) {
  ragged *r = s->rg;
  const int64_t size = (int64_t)e->size;
  sl_code rc = SL_OK;
  if (r->items == r->icap || (r->held && r->held + size > r->cap)) rc = ragged_flush(w, s, err);
  if (rc != SL_OK) return rc;
  if (!r->items && !r->held) r->first_chunk = chunk;
  r->last_chunk = chunk;
  if (size > r->cap) {
    if ((rc = ragged_flush(w, s, err)) != SL_OK) return rc;
    if (ragged_append(r->sets[RG_BYTES], H5T_NATIVE_UINT8, r->bytes_written, (uint64_t)size, at) < 0)
      return sl_fail(err, SL_ERR_IO, "%s: cannot write an item of chunk %lld (positions %lld-%lld) of output '%s'",
                     w->path, (long long)chunk, (long long)e->first_position,
                     (long long)(e->first_position + e->n_positions - 1), s->name);
    r->bytes_written += (uint64_t)size;
  } else {
    memcpy(r->data + r->held, at, (size_t)size);
    r->held += size;
  }
  r->ends[r->items] = r->bytes_written + (uint64_t)r->held;
  r->first[r->items] = e->first_position;
  r->npos[r->items] = e->n_positions;
  r->items++;
  r->next_position = e->first_position + e->n_positions;
  r->last_first = e->first_position, r->last_n = e->n_positions;
  return SL_OK;
}

static sl_code ragged_items(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                            int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err) {
  sl_code rc = sl_packed_check(packed, bytes, err);
  if (rc != SL_OK) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return sl_fail(err, SL_ERR_INTERNAL,
                   "output '%s' is a stream of variable-size items, and chunk %lld (positions %lld-%lld) is not "
                   "in the packed layout its writer needs: %s",
                   name, (long long)chunk, (long long)start, (long long)(start + count - 1), why);
  }
  dataset *s;
  if ((rc = get_dataset(w, name, d, &s, err)) != SL_OK) return rc;
  const sl_packed_items *pk = packed;
  const int64_t total = sl_desc_positions(d);
  const ragged *r = s->rg;
  for (uint64_t i = 0; i < pk->n && rc == SL_OK; i++) {
    const sl_packed_entry *e = &pk->entries[i];
    const bool in_stream = e->n_positions >= 1 && e->first_position >= 0 && e->first_position <= total - e->n_positions;
    /* The item that began in the previous call and runs into this one is
     * sent again: it was written there (only the last item taken can). */
    const bool sent_again = in_stream && e->first_position < start && r->items_written + r->items > 0 &&
                            e->first_position == r->last_first && e->n_positions == r->last_n;
    if (sent_again) continue;
    const char *why = !in_stream ? "holds no positions of the stream, or positions outside it"
                      : e->first_position < start
                          ? "begins before the call's positions and is not the item the previous call ended with"
                      : e->first_position >= start + count ? "does not begin in the call's positions"
                      : e->first_position < r->next_position ? "overlaps an item written before it"
                                                             : NULL;
    if (why) {
      char what[512];
      sl_packed_describe(d, e->origin, e->first_position, e->n_positions, what, sizeof what);
      return sl_fail(err, SL_ERR_INTERNAL, "output '%s', chunk %lld (positions %lld-%lld): %s %s", name,
                     (long long)chunk, (long long)start, (long long)(start + count - 1), what, why);
    }
    rc = ragged_item(w, s, chunk, e, (const unsigned char *)packed + e->offset, err);
  }
  return rc;
}

static bool range(sl_h5_writer *w, const char *name, double *lo, double *hi) {
  const dataset *s = find(w, name);
  if (!s || !sl_output_is_image(&s->desc) || !s->desc.stream_rank || s->ranged != sl_desc_positions(&s->desc))
    return false;
  *lo = s->lo, *hi = s->hi;
  return true;
}

static sl_code whole(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, const void *data,
                     sl_error *err) {
  dataset *s;
  sl_code rc = get_dataset(w, name, d, &s, err);
  if (rc != SL_OK) return rc;
  bool own;
  hid_t type = dataset_type(d->dtype, &own);
  herr_t h = H5Dwrite(s->id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (own) H5Tclose(type);
  if (h < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot write output '%s'", w->path, name);
  return SL_OK;
}

static const void *rows_held(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows) {
  const dataset *s = find(w, name);
  if (!s || s->desc.rank != 2 || !s->count) return NULL;
  /* Positions and rows both run in C order: compare element ranges. */
  const int64_t item = sl_desc_item_elems(&s->desc), es = (int64_t)sl_dtype_size(s->desc.dtype);
  const int64_t e0 = row0 * s->desc.dims[1], e1 = (row0 + n_rows) * s->desc.dims[1];
  if (e0 < s->start * item || e1 > (s->start + s->count) * item) return NULL;
  return s->data + (e0 - (s->whole ? 0 : s->start * item)) * es;
}

static sl_code read_rows(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows, void *data,
                         sl_error *err) {
  dataset *s = find(w, name);
  if (!s || s->rg || s->desc.rank != 2)
    return sl_fail(err, SL_ERR_INTERNAL, "%s: no 2-D dataset '%s' to read rows of", w->path, name);
  sl_code rc = flush(w, s, err);
  if (rc != SL_OK) return rc;
  hsize_t off[2] = {(hsize_t)row0, 0}, len[2] = {(hsize_t)n_rows, (hsize_t)s->desc.dims[1]};
  hid_t file_space = H5Dget_space(s->id);
  hid_t mem_space = H5Screate_simple(2, len, NULL);
  bool own;
  hid_t type = dataset_type(s->desc.dtype, &own);
  herr_t h = H5Sselect_hyperslab(file_space, H5S_SELECT_SET, off, NULL, len, NULL);
  if (h >= 0) h = H5Dread(s->id, type, mem_space, file_space, H5P_DEFAULT, data);
  H5Sclose(mem_space);
  H5Sclose(file_space);
  if (own) H5Tclose(type);
  if (h < 0)
    return sl_fail(err, SL_ERR_IO, "%s: cannot read rows %lld-%lld of output '%s' back", w->path, (long long)row0,
                   (long long)(row0 + n_rows - 1), name);
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
  h |= put_int_attr(ds, "scan_axes", o->desc.encoding != SL_ENC_NONE ? 1 : o->scan_axes);
  if (o->provenance) h |= put_str_attr(ds, "provenance", o->provenance);
  if (o->chunk_bytes && o->n_chunk_bytes > 0)
    h |= put_int_array_attr(ds, "chunk_bytes", o->chunk_bytes, o->n_chunk_bytes);
  if (h < 0) return sl_fail(err, SL_ERR_IO, "%s: cannot write attributes of '%s'", w->path, o->name);
  return SL_OK;
}

/* The calls from outside, each under the writer's lock. */
#define LOCKED(w, type, call)     \
  do {                              \
    pthread_mutex_lock(&(w)->lock);   \
    type r_ = call;                 \
    pthread_mutex_unlock(&(w)->lock); \
    return r_;                      \
  } while (0)

sl_code sl_h5_writer_expect_chunked(sl_h5_writer *w, const char *name, sl_error *err) {
  LOCKED(w, sl_code, expect_chunked(w, name, err));
}
sl_code sl_h5_writer_reserve(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, sl_error *err) {
  LOCKED(w, sl_code, reserve(w, name, d, err));
}
sl_code sl_h5_writer_positions(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                               int64_t start, int64_t count, const void *data, sl_error *err) {
  LOCKED(w, sl_code, positions(w, name, d, chunk, start, count, data, err));
}
sl_code sl_h5_writer_stored(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                            int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err) {
  LOCKED(w, sl_code, stored(w, name, d, chunk, start, count, packed, bytes, err));
}
sl_code sl_h5_writer_ragged(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                            int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err) {
  LOCKED(w, sl_code, ragged_items(w, name, d, chunk, start, count, packed, bytes, err));
}
bool sl_h5_writer_range(sl_h5_writer *w, const char *name, double *lo, double *hi) {
  LOCKED(w, bool, range(w, name, lo, hi));
}
sl_code sl_h5_writer_whole(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, const void *data,
                           sl_error *err) {
  LOCKED(w, sl_code, whole(w, name, d, data, err));
}
const void *sl_h5_writer_rows_held(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows) {
  LOCKED(w, const void *, rows_held(w, name, row0, n_rows));
}
sl_code sl_h5_writer_read_rows(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows, void *data,
                               sl_error *err) {
  LOCKED(w, sl_code, read_rows(w, name, row0, n_rows, data, err));
}
#undef LOCKED

/* Closes every dataset and the file; frees w. */
static herr_t close_all(sl_h5_writer *w) {
  for (int k = 0; k < w->n; k++) {
    if (w->sets[k].rg) {
      ragged_close(w->sets[k].rg);
      H5Gclose(w->sets[k].id);
    } else {
      H5Dclose(w->sets[k].id);
    }
    free(w->sets[k].name);
    free(w->sets[k].data);
  }
  herr_t h = H5Fclose(w->file);
  free(w->sets);
  pthread_mutex_destroy(&w->lock);
  free(w);
  return h;
}

sl_code sl_h5_writer_finish(sl_h5_writer *w, const sl_output_data *outs, int n, sl_error *err) {
  sl_code rc = SL_OK;
  for (int k = 0; k < w->n && rc == SL_OK; k++) rc = flush(w, &w->sets[k], err);
  for (int o = 0; o < n && rc == SL_OK; o++) {
    dataset *s = find(w, outs[o].name);
    if (!s) rc = sl_fail(err, SL_ERR_INTERNAL, "%s: output '%s' was never written", w->path, outs[o].name);
    else rc = put_output_attrs(w, s->id, &outs[o], err);
  }
  char path[sizeof w->path];
  snprintf(path, sizeof path, "%s", w->path);
  herr_t h = close_all(w);
  if (h < 0 && rc == SL_OK) rc = sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return rc;
}

void sl_h5_writer_abandon(sl_h5_writer *w) {
  if (w) (void)close_all(w);
}
