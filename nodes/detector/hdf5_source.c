/* hdf5_source: detector frames from an HDF5 acquisition (a Dectris/Arina
 * master with external data files, or one 3-D dataset), without the HDF5
 * filter pipeline. The chunk index is listed once; raw chunk bytes are read
 * with positioned reads on a reader thread that fetches the next window while
 * the current one is decoded. Compressed acquisitions leave as an encoded
 * stream of stored chunks for bslz4_decode; uncompressed ones as frames. */
#include <stdlib.h>
#include <string.h>

#include "../../engine/core/util.h"
#include "../../engine/graph/graph.h"
#include "chunk_reader.h"
#include "h5_index.h"
#include "h5_index_cache.h"

typedef struct src_state {
  const sl_h5_index *ix;
  sl_chunk_reader *reader;
  uint8_t *window[2];
  size_t window_capacity;
  int64_t window_chunks;
  /* The read-ahead in flight, if any. */
  bool pending;
  int64_t pending_first, pending_count;
  int pending_buffer;
  const char **where; /* interned "file:dataset" per data file */
  uint64_t *offsets;  /* window_chunks + 1 */
} src_state;

static const char *dataset_param(const sl_node *n) {
  const char *d = sl_param_str(n, "dataset");
  return d && d[0] ? d : NULL;
}

static sl_code open_index(const sl_node *n, const sl_h5_index **ix, sl_error *err) {
  const char *path = sl_param_str(n, "path");
  if (!path || !path[0])
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'path' is empty: give the detector master file (e.g. --set input=scan_master.h5)");
  return sl_h5_index_get(path, dataset_param(n), ix, err);
}

/* The scan shape: the param, else a square frame count, else an error that
 * says how to give it. Never guessed otherwise. */
static sl_code scan_shape(sl_node *n, const sl_h5_index *ix, int64_t *rows, int64_t *cols,
                          sl_error *err) {
  const sl_param_value *v = sl_param(n, "scan_shape");
  if (v->n) {
    if (v->n != 2 || v->ints[0] <= 0 || v->ints[1] <= 0)
      return sl_fail(err, SL_ERR_PIPELINE, "param 'scan_shape' needs two positive axes [rows, cols]");
    if (v->ints[0] * v->ints[1] != ix->n_frames)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "param 'scan_shape' [%lld, %lld] holds %lld positions but %s has %lld frames",
                     (long long)v->ints[0], (long long)v->ints[1],
                     (long long)(v->ints[0] * v->ints[1]), ix->source, (long long)ix->n_frames);
    *rows = v->ints[0];
    *cols = v->ints[1];
    sl_node_note(n, "scan_shape", "[%lld, %lld] (from the param)", (long long)*rows, (long long)*cols);
    return SL_OK;
  }
  int64_t s = 0;
  while ((s + 1) * (s + 1) <= ix->n_frames) s++;
  if (s * s != ix->n_frames)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "%s has %lld frames, not a square number, and the file does not store the scan "
                   "shape: give it with param 'scan_shape' (e.g. --set scan_shape=[rows,cols])",
                   ix->source, (long long)ix->n_frames);
  *rows = *cols = s;
  sl_node_note(n, "scan_shape", "[%lld, %lld] (square frame count; the file does not store it)",
               (long long)s, (long long)s);
  return SL_OK;
}

static void record_metadata(sl_node *n, const sl_h5_index *ix) {
  const sl_h5_detector_meta *m = &ix->meta;
  sl_node_note(n, "source", "%s (%s, %d data file%s, %lld frames of %lldx%lld, %d-byte elements)",
               ix->source, ix->layout, ix->n_files, ix->n_files == 1 ? "" : "s",
               (long long)ix->n_frames, (long long)ix->frame_rows, (long long)ix->frame_cols,
               ix->elem_size);
  sl_node_note(n, "storage", "%s, %lld frame%s per stored chunk, %d stored chunks, largest %llu bytes",
               ix->filter == SL_H5_FILTER_BITSHUFFLE ? "bitshuffle (filter 32008)"
                                                     : (ix->contiguous ? "contiguous" : "chunked, no filter"),
               (long long)ix->frames_per_chunk, ix->frames_per_chunk == 1 ? "" : "s", ix->n_chunks,
               (unsigned long long)ix->max_chunk_size);
  if (m->has_saturation_value)
    sl_node_note(n, "saturation_value", "%llu (%s)", (unsigned long long)m->saturation_value,
                 m->saturation_source ? m->saturation_source : "detector metadata");
  if (m->has_pixel_mask) sl_node_note(n, "pixel_mask", "%lld bad pixels", (long long)m->n_bad_pixels);
  if (m->has_nimages) sl_node_note(n, "nimages", "%lld", (long long)m->nimages);
  if (m->has_ntrigger) sl_node_note(n, "ntrigger", "%lld", (long long)m->ntrigger);
  if (m->has_count_time) sl_node_note(n, "count_time", "%g s", m->count_time);
  if (m->has_frame_time) sl_node_note(n, "frame_time", "%g s", m->frame_time);
}

static sl_code src_infer(sl_node *n, sl_error *err) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(n, &ix, err);
  if (rc != SL_OK) return rc;
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  if (ix->is_signed || (ix->elem_size != 1 && ix->elem_size != 2 && ix->elem_size != 4)) {
    rc = sl_fail(err, SL_ERR_FORMAT, "%s: detector data must be u8, u16 or u32, found %s%d-byte integers",
                 ix->source, ix->is_signed ? "signed " : "", ix->elem_size);
    goto done;
  }
  d->dtype = ix->elem_size == 1 ? SL_U8 : (ix->elem_size == 2 ? SL_U16 : SL_U32);
  int64_t rows = 0, cols = 0;
  if ((rc = scan_shape(n, ix, &rows, &cols, err)) != SL_OK) goto done;
  d->rank = 4;
  d->stream_rank = 2;
  d->dims[0] = rows;
  d->dims[1] = cols;
  d->dims[2] = ix->frame_rows;
  d->dims[3] = ix->frame_cols;
  if (ix->filter == SL_H5_FILTER_BITSHUFFLE) {
    unsigned compression = ix->n_cd_values > 4 ? ix->bs_cd_values[4] : 0;
    if (compression == 2) d->encoding = SL_ENC_BSLZ4;
    else if (compression == 0) d->encoding = SL_ENC_BITSHUFFLE;
    else {
      rc = sl_fail(err, SL_ERR_FORMAT, "%s: bitshuffle compression %u is not supported (2 = LZ4, 0 = none)",
                   ix->source, compression);
      goto done;
    }
    d->encoded_block_elems = ix->n_cd_values > 3 ? ix->bs_cd_values[3] : 0;
    d->positions_per_stored_chunk = ix->frames_per_chunk;
    d->min_positions_per_stored_chunk = ix->frames_per_chunk;
    for (int c = 0; c < ix->n_chunks; c++)
      if (ix->chunks[c].n_frames < d->min_positions_per_stored_chunk)
        d->min_positions_per_stored_chunk = ix->chunks[c].n_frames;
    d->max_stored_chunk_bytes = (int64_t)ix->max_chunk_size;
  }
  record_metadata(n, ix);
done:
  sl_h5_index_put(ix);
  return rc;
}

static void src_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->out[0];
  int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
  int64_t stored = d->encoding != SL_ENC_NONE ? (positions + per - 1) / per * d->max_stored_chunk_bytes
                                              : positions * sl_desc_item_bytes(d);
  c->bytes_read = stored; /* from the file (page cache or disk) */
  c->bytes_written = stored;
  c->ops = stored / 8;
  /* two read-ahead windows of the largest chunk window */
  c->state_bytes = 2 * (stored + per * sl_desc_item_bytes(d));
}

static void src_release(sl_node *n) {
  src_state *s = n->state;
  if (!s) return;
  sl_chunk_reader_close(s->reader);
  sl_h5_index_put(s->ix);
  free(s->window[0]);
  free(s->window[1]);
  free(s->where);
  free(s->offsets);
  free(s);
  n->state = NULL;
}

static sl_code src_prepare(sl_node *n, sl_error *err) {
  src_state *s = sl_xcalloc(1, sizeof *s);
  n->state = s;
  sl_code rc = open_index(n, &s->ix, err);
  if (rc != SL_OK) {
    src_release(n);
    return rc;
  }
  /* The file may have changed since planning: the frame count must hold. */
  const sl_tensor_desc *d = &n->out[0];
  if (s->ix->n_frames != sl_desc_positions(d) || s->ix->frame_rows != d->dims[2] ||
      s->ix->frame_cols != d->dims[3]) {
    rc = sl_fail(err, SL_ERR_IO, "%s changed since the pipeline was planned", s->ix->source);
    src_release(n);
    return rc;
  }
  s->where = sl_xcalloc((size_t)s->ix->n_files, sizeof *s->where);
  const char *ds = dataset_param(n);
  for (int f = 0; f < s->ix->n_files; f++) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s:%s", s->ix->files[f], ds ? ds : "/entry/data/data");
    s->where[f] = sl_intern(buf);
  }
  return SL_OK;
}

/* Stored chunks [first, first + count) that hold positions [start, start + n). */
static void window_of(const sl_h5_index *ix, int64_t start, int64_t n, int64_t *first, int64_t *count) {
  *first = sl_h5_index_chunk_of_frame(ix, start);
  int64_t last = sl_h5_index_chunk_of_frame(ix, start + n - 1);
  *count = last - *first + 1;
}

/* Sizes the two read-ahead windows for chunks of up to `positions` positions:
 * the most stored chunks such a chunk can touch, each as large as the
 * largest. Done on the first call (the first chunk is the largest), so a
 * window is never reallocated while it holds data. */
static sl_code ensure_windows(src_state *s, int64_t positions, sl_error *err) {
  /* The most stored chunks any `positions` consecutive frames touch (short
   * chunks at file ends included): a sliding window over the index. */
  const sl_h5_index *ix = s->ix;
  int64_t chunks = 1, frames = 0;
  for (int64_t i = 0, j = 0; i < ix->n_chunks; i++) {
    while (j < ix->n_chunks && frames < positions + (ix->chunks[i].n_frames - 1)) frames += ix->chunks[j++].n_frames;
    if (j - i > chunks) chunks = j - i;
    frames -= ix->chunks[i].n_frames;
  }
  if (chunks <= s->window_chunks) return SL_OK;
  sl_chunk_reader_close(s->reader);
  s->reader = NULL;
  s->pending = false;
  free(s->window[0]);
  free(s->window[1]);
  free(s->offsets);
  s->window_chunks = chunks;
  s->window_capacity = (size_t)chunks * (size_t)s->ix->max_chunk_size;
  s->window[0] = malloc(s->window_capacity ? s->window_capacity : 1);
  s->window[1] = malloc(s->window_capacity ? s->window_capacity : 1);
  s->offsets = sl_xcalloc((size_t)chunks + 1, sizeof *s->offsets);
  if (!s->window[0] || !s->window[1])
    return sl_fail(err, SL_ERR_NOMEM, "cannot allocate read-ahead windows of %zu bytes", s->window_capacity);
  return sl_chunk_reader_open(s->ix, s->window_chunks, &s->reader, err);
}

/* Starts reading a window into buffer b. */
static sl_code start_read(src_state *s, int64_t first, int64_t count, int b, sl_error *err) {
  sl_code rc = sl_chunk_reader_request(s->reader, first, count, s->window[b], s->window_capacity, err);
  if (rc != SL_OK) return rc;
  s->pending = true;
  s->pending_first = first;
  s->pending_count = count;
  s->pending_buffer = b;
  return SL_OK;
}

static sl_code src_cpu(sl_kernel_args *a) {
  src_state *s = a->state;
  const sl_node *n = a->node;
  const sl_tensor_desc *d = &n->out[0];
  sl_error *err = a->err;
  int64_t frame_bytes = sl_desc_item_bytes(d);
  int64_t first, count;
  window_of(s->ix, a->pos_start, a->pos_count, &first, &count);
  /* The window this chunk needs: the read-ahead, or a read now. */
  int b = 0;
  sl_code rc = ensure_windows(s, a->pos_count, err);
  if (rc != SL_OK) return rc;
  if (s->pending && s->pending_first == first && s->pending_count == count) {
    b = s->pending_buffer;
  } else {
    if (s->pending) { /* a read-ahead we no longer need (a new pass) */
      sl_error ignored;
      sl_error_clear(&ignored);
      sl_chunk_reader_wait(s->reader, &ignored);
      s->pending = false;
    }
    rc = start_read(s, first, count, 0, err);
  }
  if (rc == SL_OK) rc = sl_chunk_reader_wait(s->reader, err);
  s->pending = false;
  if (rc != SL_OK) return rc;
  /* Read ahead: the next chunk of the scan into the other window. */
  int64_t next_start = a->pos_start + a->pos_count;
  int64_t next_n = sl_desc_positions(d) - next_start;
  if (next_n > a->pos_count) next_n = a->pos_count;
  if (next_n > 0) {
    int64_t nf, nc;
    window_of(s->ix, next_start, next_n, &nf, &nc);
    rc = start_read(s, nf, nc, 1 - b, err);
    if (rc != SL_OK) return rc;
  }
  const uint8_t *win = s->window[b];
  sl_h5_window_offsets(s->ix, first, count, s->offsets);
  if (d->encoding == SL_ENC_NONE) {
    /* Uncompressed: the frames of this chunk, wherever they sit in the window. */
    uint8_t *out = a->out[0];
    for (int64_t j = 0; j < count; j++) {
      const sl_h5_chunk *ch = &s->ix->chunks[first + j];
      int64_t lo = ch->first_frame > a->pos_start ? ch->first_frame : a->pos_start;
      int64_t hi = ch->first_frame + ch->n_frames;
      if (hi > a->pos_start + a->pos_count) hi = a->pos_start + a->pos_count;
      if (hi <= lo) continue;
      uint64_t skip = (uint64_t)(lo - ch->first_frame) * (uint64_t)frame_bytes;
      uint64_t bytes = (uint64_t)(hi - lo) * (uint64_t)frame_bytes;
      if (skip + bytes > ch->size)
        return sl_fail(err, SL_ERR_FORMAT, "%s: stored chunk %lld holds %llu bytes, fewer than its frames need",
                       s->where[ch->file], (long long)(first + j), (unsigned long long)ch->size);
      memcpy(out + (lo - a->pos_start) * frame_bytes, win + s->offsets[j] + skip, bytes);
    }
    return SL_OK;
  }
  /* Encoded: header, entries, then the stored bytes as read. */
  sl_packed_chunks *pk = a->out[0];
  uint64_t data = sizeof(sl_packed_chunks) + (uint64_t)count * sizeof(sl_packed_entry);
  uint64_t capacity = (uint64_t)sl_desc_buffer_bytes(d, a->pos_count);
  if (data + s->offsets[count] > capacity)
    return sl_fail(err, SL_ERR_INTERNAL, "stored chunks of this scan chunk exceed the planned buffer");
  pk->n = (uint64_t)count;
  for (int64_t j = 0; j < count; j++) {
    const sl_h5_chunk *ch = &s->ix->chunks[first + j];
    sl_packed_entry *e = &pk->entries[j];
    memset(e, 0, sizeof *e);
    e->offset = data + s->offsets[j];
    e->size = ch->size;
    e->filter_mask = ch->filter_mask;
    e->stored_chunk = first + j;
    e->first_position = ch->first_frame;
    e->n_positions = ch->n_frames;
    e->where = s->where[ch->file];
  }
  memcpy((uint8_t *)pk + data, win, s->offsets[count]);
  return SL_OK;
}

static const sl_param_def src_params[] = {
    {"path", SL_PT_PATH, NULL, "detector master file (or any HDF5 file with a 3-D frame dataset)"},
    {"dataset", SL_PT_STRING, "", "dataset path (default: the Dectris layout or /entry/data/data)"},
    {"scan_shape", SL_PT_SHAPE, "[]", "scan rows and cols (default: a square frame count)"},
};
static const sl_port_def src_out[] = {
    {"frames", "detector frames [scan rows, scan cols | det rows, det cols]; an encoded stream of "
               "stored chunks when the file is compressed", "counts", false}};

const sl_node_desc sl_node_hdf5_source = {
    .type = "hdf5_source",
    .doc = "Detector frames from an HDF5 acquisition, read chunk by chunk without the HDF5 filters.",
    .params = src_params, .n_params = 3,
    .outputs = src_out, .n_outputs = 1,
    .infer = src_infer, .cost = src_cost,
    .prepare = src_prepare, .release = src_release,
    .kernel = {[SL_BACKEND_CPU] = src_cpu},
    .host = true,
};
