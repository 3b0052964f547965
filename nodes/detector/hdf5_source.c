/* hdf5_source: detector frames from an HDF5 acquisition (a Dectris/Arina
 * master with external data files, or one 3-D dataset), without the HDF5
 * filter pipeline. Planning reads the acquisition's metadata (and lists its
 * chunks only when they are few: sl_h5_index_get_for_plan); the chunk index
 * is listed once, by prepare at the latest, after the budget check that
 * counted it. Raw chunk bytes are read with positioned reads on a reader
 * thread that fetches the next window while the current one is decoded.
 * Compressed acquisitions leave as an encoded stream of stored chunks for
 * bslz4_decode; uncompressed ones as frames.
 *
 * Windows, read-ahead and the output layout are shared by the CPU kernel and
 * the produce hook (source_window.c). The CPU kernel copies a window into
 * the output. On a device backend the executor calls produce instead, on a
 * helper thread (engine/exec/prefetch.h): the windows are the backend's
 * pinned host memory, and produce hands the executor the call's ranges of
 * them (the packed stored chunks, or runs of frames), which it copies
 * asynchronously into its ring of device buffers: no host copy of the
 * bytes, and the parallel reader keeps reading ahead. Before the reader
 * rewrites a window, produce waits for the copies out of it (piece_wait). */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node_params.h"
#include "nodes/hdf5/h5_index.h"
#include "nodes/hdf5/h5_index_cache.h"
#include "nodes/hdf5/source_window.h"

#define HDF5_SOURCE_PARAMS(P)                                                                  \
  P(PATH, path, NULL, "detector master file (or any HDF5 file with a 3-D frame dataset)", NULL) \
  P(STRING, dataset, "", "dataset path (default: the Dectris layout or /entry/data/data)", NULL) \
  P(SHAPE, scan_shape, "[]", "scan rows and cols (default: a square frame count)", NULL)
SL_NODE_PARAMS(hdf5_source_params, HDF5_SOURCE_PARAMS)

/* What infer learns that cost needs and the output descriptor does not
 * carry. It lives in the node's typed params block, after the params (the
 * descriptor sizes the block for both; the graph frees it with the node). */
typedef struct source_params_and_facts {
  hdf5_source_params params; /* first: hdf5_source_params_of reads it */
  int64_t index_bytes;       /* host bytes of the chunk index (sl_h5_index_host_bytes) */
  /* The run's state while prepared, else NULL: the encoded output's
   * describe_origin reads it (sl_src_describe_origin), through a pointer
   * that stays put while the graph moves its nodes. */
  sl_src_state *run;
} source_params_and_facts;

static const source_params_and_facts *facts_of(const sl_node *n) { return sl_node_typed_params(n); }

/* The dataset param, NULL for the default layout. */
static const char *dataset_param(const sl_node *n) {
  const char *d = hdf5_source_params_of(n)->dataset;
  return d && d[0] ? d : NULL;
}

/* The acquisition's index: as planning reads it (sl_h5_index_get_for_plan),
 * or listed. */
static sl_code open_index(const sl_node *n, bool listed, const sl_h5_index **ix, sl_error *err) {
  const char *path = hdf5_source_params_of(n)->path;
  if (!path || !path[0])
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'path' is empty: give the detector master file (e.g. --set input=scan_master.h5)");
  return listed ? sl_h5_index_get_listed(path, dataset_param(n), ix, err)
                : sl_h5_index_get_for_plan(path, dataset_param(n), ix, err);
}

/* The scan shape: the param, else a square frame count, else an error that
 * says how to give it. Never guessed otherwise. */
static sl_code scan_shape(sl_node *n, const sl_h5_index *ix, int64_t *rows, int64_t *cols,
                          sl_error *err) {
  const sl_param_value *v = hdf5_source_params_of(n)->scan_shape;
  if (v->n) {
    if (v->n != 2 || v->ints[0] <= 0 || v->ints[1] <= 0)
      return sl_fail(err, SL_ERR_PIPELINE, "param 'scan_shape' needs two positive axes [rows, cols]");
    int64_t positions = 0;
    if (!sl_size_mul(v->ints[0], v->ints[1], &positions))
      return sl_fail(err, SL_ERR_PIPELINE, "param 'scan_shape' [%lld, %lld] is too large (%s has %lld frames)",
                     (long long)v->ints[0], (long long)v->ints[1], ix->source, (long long)ix->n_frames);
    if (positions != ix->n_frames)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "param 'scan_shape' [%lld, %lld] holds %lld positions but %s has %lld frames",
                     (long long)v->ints[0], (long long)v->ints[1], (long long)positions, ix->source,
                     (long long)ix->n_frames);
    *rows = v->ints[0];
    *cols = v->ints[1];
    sl_node_note(n, "scan_shape", "[%lld, %lld] (from the param)", (long long)*rows, (long long)*cols);
    return SL_OK;
  }
  /* a file that stores the scan's shape with its frames (sluice's repack) */
  int64_t r = 0, c = 0;
  if (sl_h5_index_scan_shape(ix, &r, &c)) {
    int64_t positions = 0;
    if (!sl_size_mul(r, c, &positions) || positions != ix->n_frames)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "%s: the frames' scan_shape attribute [%lld, %lld] does not hold its %lld frames: give the "
                     "scan shape with param 'scan_shape'",
                     ix->source, (long long)r, (long long)c, (long long)ix->n_frames);
    *rows = r;
    *cols = c;
    sl_node_note(n, "scan_shape", "[%lld, %lld] (the frames' scan_shape attribute)", (long long)r, (long long)c);
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
  const char *kind = ix->filter == SL_H5_FILTER_BITSHUFFLE ? "bitshuffle (filter 32008)"
                     : (ix->contiguous ? "contiguous" : "chunked, no filter");
  if (sl_h5_index_planned_from_listing(ix))
    sl_node_note(n, "storage", "%s, %lld frame%s per stored chunk, %d stored chunks, largest %llu bytes", kind,
                 (long long)ix->frames_per_chunk, ix->frames_per_chunk == 1 ? "" : "s", ix->n_chunks,
                 (unsigned long long)ix->max_chunk_size);
  else
    sl_node_note(n, "storage",
                 "%s, %lld frame%s per stored chunk, %d stored chunks, at most %llu bytes each (planned "
                 "from the metadata: more than %lld stored chunks are listed when the run starts)",
                 kind, (long long)ix->frames_per_chunk, ix->frames_per_chunk == 1 ? "" : "s", ix->n_chunks,
                 (unsigned long long)sl_h5_index_chunk_bound(ix), (long long)sl_h5_plan_list_limit());
  if (m->has_saturation_value)
    sl_node_note(n, "saturation_value", "%llu (%s)", (unsigned long long)m->saturation_value,
                 m->saturation_source ? m->saturation_source : "detector metadata");
  if (m->has_pixel_mask) sl_node_note(n, "pixel_mask", "%lld bad pixels", (long long)m->n_bad_pixels);
  if (m->has_nimages) sl_node_note(n, "nimages", "%lld", (long long)m->nimages);
  if (m->has_ntrigger) sl_node_note(n, "ntrigger", "%lld", (long long)m->ntrigger);
  if (m->has_count_time) sl_node_note(n, "count_time", "%g s", m->count_time);
  if (m->has_frame_time) sl_node_note(n, "frame_time", "%g s", m->frame_time);
}

static sl_code source_infer(sl_node *n, sl_error *err) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(n, false, &ix, err);
  if (rc != SL_OK) return rc;
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  if (ix->is_signed || (ix->elem_size != 1 && ix->elem_size != 2 && ix->elem_size != 4)) {
    rc = sl_fail(err, SL_ERR_FORMAT, "%s: detector data must be u8, u16 or u32, found %s%d-byte integers",
                 ix->source, ix->is_signed ? "signed " : "", ix->elem_size);
    goto done;
  }
  d->dtype = sl_h5_index_dtype(ix);
  int64_t rows = 0, cols = 0;
  if ((rc = scan_shape(n, ix, &rows, &cols, err)) != SL_OK) goto done;
  d->rank = 4;
  d->stream_rank = 2;
  d->dims[0] = rows;
  d->dims[1] = cols;
  d->dims[2] = ix->frame_rows;
  d->dims[3] = ix->frame_cols;
  if ((rc = sl_h5_index_encoding(ix, &d->encoding, &d->encoded_block_elems, err)) != SL_OK) goto done;
  if (d->encoding != SL_ENC_NONE) {
    /* entries name their stored chunk in the acquisition; errors of
     * consumers say which file and chunk of that file it is */
    d->describe_origin = sl_src_describe_origin;
    d->origin_ctx = &((source_params_and_facts *)n->typed_params)->run;
    d->positions_per_stored_chunk = ix->frames_per_chunk;
    d->min_positions_per_stored_chunk = ix->min_chunk_frames; /* a file's last chunk */
    /* The largest real chunk when planning listed them, else the most one
     * can hold; prepare checks the listing against it. */
    d->max_stored_chunk_bytes =
        (int64_t)(sl_h5_index_planned_from_listing(ix) ? ix->max_chunk_size : sl_h5_index_chunk_bound(ix));
  }
  ((source_params_and_facts *)n->typed_params)->index_bytes = (int64_t)sl_h5_index_host_bytes(ix);
  record_metadata(n, ix);
  sl_node_reads_file(n, ix->source);
  for (int f = 0; f < ix->n_files; f++) sl_node_reads_file(n, ix->files[f]);
done:
  sl_h5_index_put(ix);
  return rc;
}

static void source_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->out[0];
  int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
  int64_t stored = d->encoding != SL_ENC_NONE ? (positions + per - 1) / per * d->max_stored_chunk_bytes
                                              : positions * sl_desc_item_bytes(d);
  c->bytes_read = stored; /* from the file (page cache or disk) */
  c->bytes_written = stored;
  c->ops = stored / 8;
  /* SL_SRC_WINDOWS read-ahead windows; on the CPU each spans as many calls as fit in
   * SL_SRC_WINDOW_BYTES, or one call when a call's stored bytes are more
   * (source_window.c), with the packed header in front and up to a frame
   * of alignment slack; and the chunk index, listed by prepare (entries
   * for every stored chunk) */
  int64_t window = stored > (int64_t)SL_SRC_WINDOW_BYTES ? stored : (int64_t)SL_SRC_WINDOW_BYTES;
  int64_t calls = stored > 0 && stored < (int64_t)SL_SRC_WINDOW_BYTES ? (int64_t)SL_SRC_WINDOW_BYTES / stored : 1;
  int64_t header = (int64_t)sizeof(sl_packed_items) +
                   (calls * ((positions + per - 1) / per) + 1) * (int64_t)sizeof(sl_packed_entry) + 64;
  c->state_bytes = SL_SRC_WINDOWS * (window + header + per * sl_desc_item_bytes(d)) + facts_of(n)->index_bytes;
  /* on a device backend the executor's ring of two output buffers, which the
   * plan holds as slots (sl_plan_buffer.ring_slot), not node state */
}

/* An encoded stream is a variable-size output: header, entries and the
 * largest stored chunks a call can touch. Plain frames are fixed-size. */
static int64_t source_out_bound(const sl_node *n, int port, int64_t positions) {
  const sl_tensor_desc *d = &n->out[port];
  return d->encoding != SL_ENC_NONE ? sl_desc_encoded_bound(d, positions) : -1;
}

static void source_release(sl_node *n) {
  sl_src_state *s = n->state;
  if (!s) return;
  ((source_params_and_facts *)n->typed_params)->run = NULL;
  sl_src_windows_free(&s->win); /* pinned: through the backend, which outlives the nodes' release */
  sl_h5_index_put(s->ix);
  free(s->where);
  free(s);
  n->state = NULL;
}

/* The listed index must be what the plan was made for: the file may have
 * changed since, and a plan made from the metadata reserved the most a
 * stored chunk can hold, which a chunk written otherwise (e.g. with smaller
 * bitshuffle blocks) could exceed. */
static sl_code check_planned(const sl_node *n, const sl_h5_index *ix, sl_error *err) {
  const sl_tensor_desc *d = &n->out[0];
  if (ix->n_frames != sl_desc_positions(d) || ix->frame_rows != d->dims[2] || ix->frame_cols != d->dims[3])
    return sl_fail(err, SL_ERR_IO, "%s changed since the pipeline was planned", ix->source);
  if (d->encoding == SL_ENC_NONE || ix->max_chunk_size <= (uint64_t)d->max_stored_chunk_bytes) return SL_OK;
  int64_t c = 0;
  while (ix->chunks[c].size != ix->max_chunk_size) c++;
  const sl_h5_chunk *ch = &ix->chunks[c];
  return sl_fail_in(err, SL_ERR_FORMAT, ix->files[ch->file],
                    "stored chunk %lld (frames %lld-%lld) has %llu bytes, more than the %lld bytes per stored "
                    "chunk the plan reserved (%s)",
                    (long long)c, (long long)ch->first_frame, (long long)(ch->first_frame + ch->n_frames - 1),
                    (unsigned long long)ch->size, (long long)d->max_stored_chunk_bytes,
                    sl_h5_index_planned_from_listing(ix)
                        ? "the largest chunk when it was planned: the file changed since?"
                        : "bitshuffle-LZ4's worst case for the dataset's block size, from the metadata: "
                          "written with smaller bitshuffle blocks?");
}

static sl_code source_prepare(sl_node *n, sl_error *err) {
  sl_src_state *s = sl_calloc(1, sizeof *s);
  if (!s) return sl_fail_nomem(err, "the source's state");
  n->state = s;
  sl_code rc = open_index(n, true, &s->ix, err);
  if (rc == SL_OK) rc = check_planned(n, s->ix, err);
  if (rc != SL_OK) {
    source_release(n);
    return rc;
  }
  s->win.ix = s->ix;
  s->where = sl_calloc((size_t)s->ix->n_files, sizeof *s->where);
  const char *ds = dataset_param(n);
  for (int f = 0; s->where && f < s->ix->n_files; f++) {
    char buf[4200];
    snprintf(buf, sizeof buf, "%s:%s", s->ix->files[f], ds ? ds : "/entry/data/data");
    if (!(s->where[f] = sl_intern(buf))) break;
  }
  if (!s->where || (s->ix->n_files > 0 && !s->where[s->ix->n_files - 1])) {
    source_release(n);
    return sl_fail_nomem(err, "the names of the source's data files");
  }
  ((source_params_and_facts *)n->typed_params)->run = s;
  return SL_OK;
}

/* After the call that ends a pass: where the reading went, for report.json
 * (what bounds the source: the reader's windows, or the waits for the
 * copies out of them). Summed over the run's passes so far. */
static void note_reading(const sl_node *n, sl_src_state *s, int64_t pos_end, int64_t total) {
  if (pos_end < total) return;
  sl_chunk_reader_stats st;
  sl_src_windows_stats(&s->win, &st);
  sl_node_note((sl_node *)n, "reading",
               "%llu windows, %.3f GB in %.4f s of windows (%.1f GB/s), pread %.4f s summed over %d %s "
               "(%llu reads, %llu pieces); calls waited %.4f s for the reader and %.4f s for copies out of a window, "
               "allocated windows in %.4f s, handed copies over in %.4f s; sized windows and opened the reader "
               "(pinned windows made meanwhile) in %.4f s; %.4f s in all getting windows",
               (unsigned long long)st.requests, (double)st.bytes / 1e9, st.window_seconds,
               st.window_seconds > 0 ? (double)st.bytes / 1e9 / st.window_seconds : 0.0, st.read_seconds, st.threads,
               s->win.wait_opts.run ? "workers, in the calls' waits"
               : s->win.one_window  ? "thread, the call's own (one window)"
                                    : "reader threads",
               (unsigned long long)st.reads, (unsigned long long)st.pieces, s->win.wait_read_seconds,
               s->win.wait_reuse_seconds, s->win.alloc_seconds, s->emit_seconds, s->win.sizing_seconds,
               s->win.get_seconds);
}

static sl_code copy_host(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  (void)err;
  memcpy((uint8_t *)ctx + dst_offset, src, bytes);
  return SL_OK;
}

static sl_code source_cpu(sl_kernel_args *a) {
  sl_src_state *s = a->state;
  const sl_tensor_desc *d = &a->node->out[0];
  if (!s->win.reader) /* the reader is opened with the first window */
    sl_chunk_reader_read_on_workers(&s->win.wait_opts, a->backend);
  sl_src_window win;
  sl_code rc = sl_src_windows_get(&s->win, a->pos_start, a->pos_count, sl_desc_positions(d), &win, a->err);
  if (rc != SL_OK) return rc;
  note_reading(a->node, s, a->pos_start + a->pos_count, sl_desc_positions(d));
  if (d->encoding == SL_ENC_NONE)
    return sl_src_plain(&win, s->ix, s->where, a->pos_start, a->pos_count, sl_desc_item_bytes(d), copy_host,
                        a->out[0], a->err);
  /* Lent (source_lends): the packed chunks where the reader put them, no
   * copy; else into the buffer of the port's bound (source_out_bound). What
   * the output holds goes back in out_bytes. */
  uint64_t written = 0;
  if (!a->out[0]) {
    const uint8_t *packed = NULL;
    rc = sl_src_lend(&s->win, &win, s->ix, (uint64_t)a->out_bytes[0], &packed, &written, a->err);
    a->out[0] = (void *)packed; /* its readers only read it */
  } else {
    rc = sl_src_pack_to(&win, s->ix, (uint64_t)a->out_bytes[0], a->out[0], &written, a->err);
  }
  if (rc == SL_OK) a->out_bytes[0] = (int64_t)written;
  return rc;
}

/* The encoded stream is lent from the read-ahead window on the CPU, each
 * call's header written in front of its bytes. They stay as they are until
 * the next call, which writes its own header over the end of them when it
 * reads the same window; the reader rewrites a window only two windows on
 * (three, the next one being read ahead). On the dev VM (2 CPUs, 128 x 128
 * scan) the copy it saves was most of the source's own time. Plain frames
 * are copied (a file's last stored chunk may be padded, so a call's frames
 * are not one range). */
static bool source_lends(const sl_node *n, int port) { return n->out[port].encoding != SL_ENC_NONE; }

/* ---- produce (device backends): windows in the backend's pinned host memory ---- */

static sl_code win_alloc(void *ctx, size_t bytes, void **ptr, sl_error *err) {
  sl_backend *b = ((sl_src_state *)ctx)->host_backend;
  return b->ops->host_alloc(b, bytes, ptr, err);
}

static void win_free(void *ctx, void *ptr, size_t bytes) {
  sl_backend *b = ((sl_src_state *)ctx)->host_backend;
  b->ops->host_free(b, ptr, bytes);
}

/* Window w is about to be rewritten: the executor's copies out of it (the
 * window is piece w of the node's memory) must be done. Between produce
 * calls there are none (the executor's stage ended, and waited for them). */
static sl_code win_reuse(void *ctx, int w, sl_error *err) {
  sl_produce_args *a = ((sl_src_state *)ctx)->producing;
  return a ? a->piece_wait(a, w, err) : SL_OK;
}

/* The first produce call takes its windows from the backend; windows made
 * otherwise (by the CPU kernel, or for another backend) cannot be used. */
static sl_code produce_windows(sl_src_state *s, sl_backend *b, sl_error *err) {
  if (s->host_backend == b) return SL_OK;
  bool made = s->win.reader != NULL;
  for (int k = 0; k < SL_SRC_WINDOWS; k++) made |= s->win.base[k] != NULL;
  if (s->host_backend || made)
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: the windows were made for another backend");
  s->host_backend = b;
  s->win.al = (sl_src_alloc){.alloc = win_alloc, .free = win_free, .reuse = win_reuse, .ctx = s};
  s->win.read_threads = sl_chunk_reader_device_threads();
  return SL_OK;
}

typedef struct emit_ctx {
  sl_produce_args *a;
  int piece;
} emit_ctx;

static sl_code emit_run(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  emit_ctx *e = ctx;
  double t0 = sl_now();
  sl_code rc = e->a->emit(e->a, e->piece, dst_offset, src, bytes, err);
  ((sl_src_state *)e->a->state)->emit_seconds += sl_now() - t0;
  return rc;
}

static sl_code produce_window(sl_produce_args *a) {
  sl_src_state *s = a->state;
  const sl_tensor_desc *d = &a->node->out[0];
  sl_src_window win;
  sl_code rc = sl_src_windows_get(&s->win, a->pos_start, a->pos_count, sl_desc_positions(d), &win, a->err);
  if (rc != SL_OK) return rc;
  note_reading(a->node, s, a->pos_start + a->pos_count, sl_desc_positions(d));
  emit_ctx e = {a, win.buffer};
  if (d->encoding == SL_ENC_NONE) {
    a->out_bytes = a->pos_count * sl_desc_item_bytes(d);
    return sl_src_plain(&win, s->ix, s->where, a->pos_start, a->pos_count, sl_desc_item_bytes(d), emit_run, &e,
                        a->err);
  }
  const uint8_t *packed;
  uint64_t bytes = 0;
  rc = sl_src_pack(&win, s->ix, (uint64_t)a->out_capacity, &packed, &bytes, a->err);
  if (rc == SL_OK) rc = emit_run(&e, 0, packed, bytes, a->err);
  a->out_bytes = (int64_t)bytes; /* the consumer reads the packed header's sizes */
  return rc;
}

static sl_code source_produce(sl_produce_args *a) {
  sl_src_state *s = a->state;
  sl_code rc = produce_windows(s, a->backend, a->err);
  if (rc != SL_OK) return rc;
  s->producing = a;
  rc = produce_window(a);
  s->producing = NULL;
  return rc;
}

static const sl_port_def source_out[] = {
    {"frames", "detector frames [scan rows, scan cols | det rows, det cols]; an encoded stream of "
               "stored chunks when the file is compressed", "counts", false}};

const sl_node_desc sl_node_hdf5_source = {
    .type = "hdf5_source",
    .doc = "Detector frames from an HDF5 acquisition, read chunk by chunk without the HDF5 filters.",
    /* the params, and room after them for what infer learns */
    .params = hdf5_source_params_defs, .n_params = SL_COUNT_OF(hdf5_source_params_defs),
    .params_size = sizeof(source_params_and_facts), .params_bind = hdf5_source_params_bind,
    .outputs = source_out, .n_outputs = SL_COUNT_OF(source_out),
    .infer = source_infer, .cost = source_cost,
    .prepare = source_prepare, .release = source_release, .out_bound = source_out_bound,
    .lends_output = source_lends,
    /* On a device backend the executor copies what produce hands it (no
     * staging, no host copy of the bytes). */
    .kernel = {[SL_BACKEND_CPU] = source_cpu},
    .produce = source_produce,
    .cpu_serial = true,
};
