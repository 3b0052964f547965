/* detector_preview: the mean diffraction pattern of the first frames of an
 * acquisition, read before the scan streams (a prologue, host node), so that
 * geometry that defaults to "from the data" (the bright-field disk, through
 * disk_fit) is known before the first chunk. It reads only the stored chunks
 * that hold those frames, with the same reader and decoders as hdf5_source,
 * and never the rest of the file.
 *
 * Bad pixels do not bias the pattern: pixels the optional `mask` input flags
 * (the detector's pixel mask) and pixels at the dtype's maximum in a frame
 * (the detector's flag value) count as 0 in that frame. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/codec/bslz4.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/positions_sum.h"
#include "nodes/hdf5/chunk_reader.h"
#include "nodes/hdf5/h5_index.h"
#include "nodes/hdf5/h5_index_cache.h"

#define DETECTOR_PREVIEW_PARAMS(P)                                                         \
  P(PATH, path, NULL, "detector master file (as hdf5_source)", NULL)                       \
  P(STRING, dataset, "", "frame dataset (as hdf5_source)", NULL)                           \
  P(INT, frames, "256", "how many of the first frames to average (fewer if the file has " \
                        "fewer); >= 1", NULL)
SL_NODE_PARAMS(detector_preview_params, DETECTOR_PREVIEW_PARAMS)

/* What infer learns that cost needs (after the params in the node's typed
 * params block; the descriptor sizes the block for both). */
typedef struct preview_params_and_facts {
  detector_preview_params params; /* first: detector_preview_params_of reads it */
  int64_t stored_chunk_bytes;     /* what one stored chunk decodes to */
  int64_t stored_chunk_elems;     /* ... in pixels (its flag bitmap's bits) */
  int64_t window_bytes;           /* the stored bytes of the chunks read: exact when the
                                     index is listed, else their bound */
  int64_t chunks;                 /* how many stored chunks hold the frames */
} preview_params_and_facts;

static const preview_params_and_facts *facts_of(const sl_node *n) { return sl_node_typed_params(n); }

/* The acquisition's index: described (infer needs the frame shape only), or
 * listed (the kernel reads the first chunks; hdf5_source's prepare has
 * usually listed it by then). */
static sl_code open_index(const sl_node *n, bool listed, const sl_h5_index **ix, sl_error *err) {
  const detector_preview_params *p = detector_preview_params_of(n);
  if (!p->path || !p->path[0])
    return sl_fail(err, SL_ERR_PIPELINE, "param 'path' is empty: give the detector master file");
  const char *dataset = p->dataset && p->dataset[0] ? p->dataset : NULL;
  return listed ? sl_h5_index_get_listed(p->path, dataset, ix, err) : sl_h5_index_get(p->path, dataset, ix, err);
}

/* How many stored chunks, from the first, hold the first `want` frames of a
 * listed index. */
static int64_t chunks_holding(const sl_h5_index *ix, int64_t want) {
  int64_t count = 0;
  for (int64_t frames = 0; count < ix->n_chunks && frames < want; count++) frames += ix->chunks[count].n_frames;
  return count;
}

static sl_code preview_infer(sl_node *n, sl_error *err) {
  if (detector_preview_params_of(n)->frames < 1)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'frames' must be >= 1, got %lld",
                   (long long)detector_preview_params_of(n)->frames);
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(n, false, &ix, err);
  if (rc != SL_OK) return rc;
  if (ix->is_signed || (ix->elem_size != 1 && ix->elem_size != 2 && ix->elem_size != 4))
    rc = sl_fail(err, SL_ERR_FORMAT, "%s: detector data must be u8, u16 or u32", ix->source);
  int64_t dims[2] = {ix->frame_rows, ix->frame_cols};
  n->out[0] = sl_desc_make(SL_F64, 2, dims, 0);
  const sl_tensor_desc *m = &n->in[0];
  if (rc == SL_OK && m->dtype != SL_DT_INVALID &&
      (m->stream_rank || m->rank != 2 || m->dims[0] != dims[0] || m->dims[1] != dims[1]))
    rc = sl_input_refuse(err, "mask", "a whole [H, W] mask of the detector's shape", m);
  if (rc == SL_OK) {
    sl_node_reads_file(n, ix->source);
    preview_params_and_facts *f = (preview_params_and_facts *)n->typed_params;
    int64_t want = f->params.frames < ix->n_frames ? f->params.frames : ix->n_frames, count = 0;
    int64_t per = ix->frames_per_chunk > 0 ? ix->frames_per_chunk : 1;
    f->stored_chunk_bytes = per * ix->frame_bytes;
    f->stored_chunk_elems = per * ix->frame_rows * ix->frame_cols;
    if (ix->listed) {
      count = chunks_holding(ix, want);
      f->window_bytes = (int64_t)sl_h5_window_bytes(ix, 0, count);
    } else { /* each of the first chunks holds at least one of the frames */
      count = want < ix->n_chunks ? want : ix->n_chunks;
      f->window_bytes = count * (int64_t)sl_h5_index_chunk_bound(ix);
    }
    f->chunks = count;
  }
  sl_h5_index_put(ix);
  return rc;
}

#define PREVIEW_PIECE_BYTES (256 << 10)

/* A worker decodes stored chunks one after another into a group of at
 * most this many bytes (at least one stored chunk), then adds the group's
 * frames into its partial sum in one sl_positions_sum: the 295 KB u64
 * partial of a 192 x 192 frame is read and written once a group of seven
 * frames rather than once a frame (4,096 frames through the preview at 1
 * thread: 62-72 ms before, 61-66 after; the add is now 0.7 us of a
 * frame's ~15, the rest decoding). A quarter of a core's L2 on the dev VM,
 * with the partial beside it. */
#define PREVIEW_GROUP_BYTES (512 << 10)

/* A worker's scratch: its group of decoded stored chunks (group_bytes, a
 * whole number of stored chunks), its u64 partial sum and a stored chunk's
 * flag bitmap (sl_bslz4_opts.ones), each 64-byte aligned; the bitmap has 8
 * bytes to spare, so that its last pixels are read a 64-bit word at a
 * time. */
typedef struct worker_scratch_layout {
  int64_t group_bytes, partial_at, ones_at, bytes;
} worker_scratch_layout;

static worker_scratch_layout worker_layout(int64_t stored_bytes, int64_t stored_elems, int64_t npix) {
  worker_scratch_layout l;
  const int64_t per_group =
      stored_bytes > 0 && stored_bytes < PREVIEW_GROUP_BYTES ? PREVIEW_GROUP_BYTES / stored_bytes : 1;
  l.group_bytes = per_group * stored_bytes;
  l.partial_at = (l.group_bytes + 63) / 64 * 64;
  l.ones_at = l.partial_at + (npix * (int64_t)sizeof(uint64_t) + 63) / 64 * 64;
  l.bytes = l.ones_at + (int64_t)sl_ones_bitmap_bytes((size_t)stored_elems) + 8;
  return l;
}

static void preview_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t frames = detector_preview_params_of(n)->frames, item = sl_desc_elems(&n->out[0]);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->bytes_read = frames * item * 2; /* about: the stored frames, u16 */
  c->ops = frames * item;
  /* While it runs: the stored bytes of the chunks read; each worker
   * decodes a group of stored chunks into its scratch, each with the bitmap
   * of its pixels at the flag value, and adds the group into its own u64
   * partial sum (worker_layout). */
  const preview_params_and_facts *f = facts_of(n);
  c->workspace_bytes = f->window_bytes;
  c->per_worker_bytes = worker_layout(f->stored_chunk_bytes, f->stored_chunk_elems, item).bytes;
}

/* The first frames' decoding and sum, spread over the backend's workers by
 * stored chunk: a worker decodes a group of chunks into its scratch and
 * adds their frames into its own u64 partial sum (sl_worker_scratch), which
 * the call then adds up. The sums are of integers below 2^53 (at most 2^32 - 1
 * times the frames), so the mean has the same bits at any worker count and
 * in any order, and the decoded frames never all sit in memory at once. */
typedef struct preview_job {
  const sl_h5_index *ix;
  const sl_kernel_args *a;
  sl_encoding enc;
  int64_t block, want, npix;
  const uint8_t *raw;
  const uint64_t *offsets;
  const int64_t *first; /* frame index of chunk k's first frame */
  size_t stored;        /* bytes a stored chunk decodes to */
  worker_scratch_layout scratch; /* where a worker's group, partial sum and bitmap are */
  sl_dtype t;                    /* the pixels' */
  /* The failed chunk of the lowest index in the window and its error (a
   * window's chunks run in parallel; the lowest is the one a serial run
   * meets first), under `lock`: one error, not one per chunk (256 of 1.7
   * kB each were a workspace to fault in on every run). */
  pthread_mutex_t *lock;
  int64_t *bad_chunk; /* INT64_MAX: none */
  sl_error *bad;
  const uint8_t *mask;
  int64_t window_first; /* the chunk of the window being decoded that a range's 0 is */
  bool *used;           /* per worker: its partial sum zeroed and added into */
} preview_job;

/* A stored chunk's pixels at the dtype's maximum (the detector's flag
 * value; `ones`, one bit a pixel of its n frames, LSB first) taken back out
 * of the worker's u64 partial sum, before or after its frames are added:
 * such a pixel counts as 0. The sums wrap in u64 and come back exact.
 * Masked pixels are zeroed when the partial sums are merged. */
static void take_out_flagged(uint64_t *sum, const uint8_t *ones, int64_t n, int64_t npix, uint64_t flag) {
  for (int64_t f = 0; f < n; f++) {
    const int64_t e0 = f * npix, e1 = e0 + npix;
    for (int64_t w = e0 / 64; w * 64 < e1; w++) {
      uint64_t bits;
      memcpy(&bits, ones + 8 * w, sizeof bits); /* little-endian: bit e of byte e / 8 */
      if (w * 64 < e0) bits &= ~(uint64_t)0 << (e0 - w * 64);
      if (e1 < w * 64 + 64) bits &= ~(~(uint64_t)0 << (e1 - w * 64));
      for (; bits; bits &= bits - 1) sum[w * 64 + __builtin_ctzll(bits) - e0] -= flag;
    }
  }
}

/* Chunks [begin, end) of the window that starts at chunk j->window_first,
 * decoded into the worker's group (each chunk's frames right after the
 * previous chunk's: a stored chunk decodes whole, so a file's last one,
 * which may be padded past its n_frames, has its padding overwritten by the
 * next) and added whenever the next chunk might not fit, and at the end. A
 * chunk stored as it is (not encoded) is added from the window itself. */
static void decode_add_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const preview_job *j = ctx;
  const sl_h5_index *ix = j->ix;
  uint8_t *scratch = sl_worker_scratch(j->a, worker), *ones = scratch + j->scratch.ones_at;
  uint64_t *sum = (uint64_t *)(void *)(scratch + j->scratch.partial_at);
  const size_t fb = ix->frame_bytes;
  const uint64_t flag = sl_frame_max(j->t);
  int64_t grouped = 0; /* frames decoded into the group, not added yet */
  /* A worker zeroes its own partial sum when it first takes chunks, in
   * parallel with the others; one that never does is neither zeroed nor
   * merged (16 workers' frames of 192 x 192 were 2.4 MB zeroed and read
   * back on one thread on the H200's host, whatever the frames). */
  if (!j->used[worker]) memset(sum, 0, (size_t)j->npix * sizeof *sum), j->used[worker] = true;
  for (int64_t k = j->window_first + begin; k < j->window_first + end; k++) {
    const sl_h5_chunk *c = &ix->chunks[k];
    const uint8_t *src = j->raw + j->offsets[k];
    int64_t n = c->n_frames < j->want - j->first[k] ? c->n_frames : j->want - j->first[k];
    sl_error why_here, *err = &why_here;
    sl_error_clear(err);
    sl_code rc = SL_OK;
    const bool as_stored = j->enc == SL_ENC_NONE || (c->filter_mask & 1u);
    if ((int64_t)(grouped * fb + j->stored) > j->scratch.group_bytes || (as_stored && grouped)) {
      sl_positions_sum(j->t, scratch, j->npix, sum, 0, grouped);
      grouped = 0;
    }
    if (as_stored) {
      if (c->size < (uint64_t)c->n_frames * ix->frame_bytes)
        rc = sl_fail(err, SL_ERR_FORMAT, "it holds %llu bytes, fewer than its frames need",
                     (unsigned long long)c->size);
      else
        sl_ones_bitmap_of_elements(src, (size_t)(n * j->npix), (size_t)ix->elem_size, ones, 0);
    } else {
      /* its flag bitmap taken while each block is in cache */
      size_t got = 0;
      const sl_bslz4_opts opts = {.simd = SL_SIMD_AUTO, .ones = ones};
      rc = sl_encoded_chunk_decode_opts(src, c->size, j->enc, (size_t)ix->elem_size, (size_t)j->block,
                                        scratch + grouped * fb, j->stored, &got, &opts, err);
      if (rc == SL_OK && got != j->stored)
        rc = sl_fail(err, SL_ERR_FORMAT, "it decodes to %zu bytes, expected %zu", got, j->stored);
    }
    if (rc != SL_OK) { /* where: the data file, the stored chunk, its frames */
      char why[sizeof err->msg];
      snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, err->msg);
      sl_fail(err, rc, "the stored chunk of frames %lld-%lld, at byte %llu: %s",
              (long long)j->first[k], (long long)(j->first[k] + c->n_frames - 1),
              (unsigned long long)c->file_offset, why);
      sl_error_at(err, ix->files[c->file], 0, 0);
      sl_error_chunk(err, k);
      pthread_mutex_lock(j->lock);
      if (k < *j->bad_chunk) *j->bad_chunk = k, *j->bad = *err;
      pthread_mutex_unlock(j->lock);
      continue;
    }
    /* the bits past the frames added, read with the last word, cleared */
    memset(ones + sl_ones_bitmap_bytes((size_t)(n * j->npix)), 0, 8);
    take_out_flagged(sum, ones, n, j->npix, flag);
    if (as_stored) sl_positions_sum(j->t, src, j->npix, sum, 0, n);
    else grouped += n;
  }
  if (grouped) sl_positions_sum(j->t, scratch, j->npix, sum, 0, grouped);
}

/* The workers' partial sums that were added into, merged over a range of
 * pixels (integers: the same sum in any order). */
typedef struct merge_job {
  const preview_job *j;
  const int *workers; /* the workers that added into their partial sums */
  int n_workers;
  double *sum;
} merge_job;

static void merge_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const merge_job *m = ctx;
  const preview_job *j = m->j;
  for (int64_t i = begin; i < end; i++) {
    uint64_t t = 0;
    for (int k = 0; k < m->n_workers; k++) {
      const uint8_t *scratch = sl_worker_scratch(j->a, m->workers[k]);
      t += ((const uint64_t *)(const void *)(scratch + j->scratch.partial_at))[i];
    }
    m->sum[i] = j->mask && j->mask[i] ? 0.0 : (double)t; /* a masked pixel counts as 0 in every frame */
  }
}

/* Where a preview's time went (report.json's notes: it runs before the
 * scan, on the critical path of every run that fits its geometry). */
typedef struct preview_times {
  double read, decode, merge;
  int64_t bytes, chunks;
  int workers, readers;
} preview_times;

/* How many of `count` chunks the window that starts at chunk c0 holds. */
static int64_t window_chunks(int64_t count, int64_t per_window, int64_t c0) {
  return count - c0 < per_window ? count - c0 : per_window;
}

/* The stored chunks that hold the first `want` frames, read with the
 * project's chunk reader (into the lent workspace, a few windows in
 * flight), decoded and summed in parallel into sum, each window as it
 * arrives. */
static sl_code add_first_frames(const sl_kernel_args *a, const sl_h5_index *ix, int64_t want, double *sum,
                                preview_times *times, sl_error *err) {
  const preview_params_and_facts *f = facts_of(a->node);
  sl_backend *b = a->backend;
  preview_job j = {.ix = ix, .a = a, .want = want, .npix = ix->frame_rows * ix->frame_cols, .mask = a->in[0]};
  sl_code rc = sl_h5_index_encoding(ix, &j.enc, &j.block, err);
  if (rc != SL_OK) return rc;
  int64_t count = chunks_holding(ix, want);
  uint64_t window = sl_h5_window_bytes(ix, 0, count);
  j.stored = (size_t)ix->frames_per_chunk * ix->frame_bytes;
  /* as planned: the stored chunks are no larger than planned (checked below) */
  const worker_scratch_layout wl = worker_layout(f->stored_chunk_bytes, f->stored_chunk_elems, j.npix);
  j.scratch = wl;
  j.t = sl_h5_index_dtype(ix);
  if (!a->workspace || !a->worker_scratch || count > f->chunks || (int64_t)window > f->window_bytes ||
      (int64_t)j.stored > f->stored_chunk_bytes)
    return sl_fail(err, SL_ERR_IO, "%s changed since the pipeline was planned (or no workspace was lent)",
                   ix->source);
  uint8_t *raw = a->workspace; /* the window */
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  int64_t bad_chunk = INT64_MAX;
  sl_error bad;
  sl_error_clear(&bad);
  j.lock = &lock, j.bad_chunk = &bad_chunk, j.bad = &bad;
  uint64_t *offsets = malloc((size_t)(count + 1) * sizeof *offsets);
  int64_t *first = malloc((size_t)(count + 1) * sizeof *first);
  const int workers = b->ops->workers(b) > 0 ? b->ops->workers(b) : 1;
  j.used = calloc((size_t)workers, sizeof *j.used);
  int *merged = malloc((size_t)workers * sizeof *merged);
  sl_chunk_reader *reader = NULL;
  double t0 = sl_now();
  if (!offsets || !first || !j.used || !merged) rc = sl_fail(err, SL_ERR_NOMEM, "detector_preview: out of memory");
  /* only the files of its chunks are opened (one of an acquisition's
   * hundreds: opening them all took 15-30 ms on the H200's host) */
  sl_chunk_reader_opts ro = {.first_chunk = 0, .chunk_count = count};
  /* where the workers hold every CPU, they read each window as it is
   * waited for (reader threads would take turns with them) */
  sl_chunk_reader_read_on_workers(&ro, b);
  if (rc == SL_OK) rc = sl_chunk_reader_open_opts(ix, count, &ro, &reader, err);
  /* The chunks in up to SL_CHUNK_READER_DEPTH windows, all requested at
   * once, each at its place in `raw` (a window's bytes are its chunks'
   * bytes back to back, so the pieces of the whole window tile it): the
   * first piece is decoded while the reader reads the rest. Read whole and
   * then decoded, the dev VM's 256 frames (1.8 MB) took 2.0 ms to read
   * before the 5.2 ms of decoding could start, at 1 thread. A window of at
   * least PREVIEW_PIECE_BYTES: cut smaller, the handoffs cost more than the
   * overlap gives (the test acquisition's 122 kB preview took 1.3-1.6 ms
   * in four windows against 0.9-1.1 in one). */
  int64_t pieces = (int64_t)(window / PREVIEW_PIECE_BYTES);
  pieces = pieces < 1 ? 1 : pieces > SL_CHUNK_READER_DEPTH ? SL_CHUNK_READER_DEPTH : pieces;
  if (pieces > count) pieces = count;
  const int64_t per_piece = pieces > 0 ? (count + pieces - 1) / pieces : 0;
  if (rc == SL_OK) {
    sl_h5_window_offsets(ix, 0, count, offsets);
    for (int64_t k = 0, fr = 0; k < count; fr += ix->chunks[k].n_frames, k++) first[k] = fr;
  }
  for (int64_t c0 = 0; rc == SL_OK && c0 < count; c0 += per_piece) {
    const int64_t n = window_chunks(count, per_piece, c0);
    rc = sl_chunk_reader_request(reader, c0, n, raw + offsets[c0], (size_t)(offsets[c0 + n] - offsets[c0]), err);
  }
  const double opened = sl_now() - t0; /* the files opened, every window requested */
  if (rc == SL_OK) j.raw = raw, j.offsets = offsets, j.first = first;
  double waited = 0, decoded = 0;
  for (int64_t c0 = 0; rc == SL_OK && c0 < count; c0 += per_piece) {
    const int64_t n = window_chunks(count, per_piece, c0);
    double tw = sl_now();
    rc = sl_chunk_reader_wait(reader, err);
    double td = sl_now();
    waited += td - tw;
    if (rc == SL_OK) {
      j.window_first = c0;
      b->ops->parallel_for(b, n, 1, decode_add_range, &j);
      if (bad_chunk != INT64_MAX) *err = bad, rc = bad.code;
    }
    decoded += sl_now() - td;
  }
  sl_chunk_reader_stats st = {0};
  if (reader) sl_chunk_reader_get_stats(reader, &st);
  *times = (preview_times){.read = opened + waited, .decode = decoded,
                           .bytes = (int64_t)window, .chunks = count, .workers = workers,
                           .readers = st.threads};
  double t2 = sl_now();
  if (rc == SL_OK) {
    merge_job m = {&j, merged, 0, sum};
    for (int w = 0; w < workers; w++)
      if (j.used[w]) merged[m.n_workers++] = w;
    /* ~4k pixels a range: a 48 x 40 frame stays on one thread */
    b->ops->parallel_for(b, j.npix, 4096, merge_range, &m);
  }
  times->merge = sl_now() - t2;
  sl_chunk_reader_close(reader);
  free(offsets);
  free(first);
  free(j.used);
  free(merged);
  return rc;
}

static sl_code preview_cpu(sl_kernel_args *a) {
  const sl_h5_index *ix = NULL;
  double t_index = sl_now();
  sl_code rc = open_index(a->node, true, &ix, a->err);
  t_index = sl_now() - t_index;
  if (rc != SL_OK) return rc;
  int64_t npix = ix->frame_rows * ix->frame_cols, done = 0;
  int64_t want = detector_preview_params_of(a->node)->frames;
  if (want > ix->n_frames) want = ix->n_frames;
  double *sum = a->out[0];
  memset(sum, 0, (size_t)npix * sizeof *sum);
  preview_times t = {0};
  rc = add_first_frames(a, ix, want, sum, &t, a->err);
  done = want;
  for (int64_t i = 0; i < npix && rc == SL_OK; i++) sum[i] /= (double)(done ? done : 1);
  if (rc == SL_OK) {
    sl_node_note((sl_node *)a->node, "preview", "mean of the first %lld frames of %s", (long long)done,
                 ix->source);
    sl_node_note((sl_node *)a->node, "preview_seconds",
                 "index %.4f, read %.4f (not hidden behind decoding: opening, and waits for the reader; "
                 "%lld stored chunks, %lld bytes, %d reading threads), decode and add %.4f (%d workers), merge %.4f",
                 t_index, t.read, (long long)t.chunks, (long long)t.bytes, t.readers, t.decode, t.workers, t.merge);
  }
  sl_h5_index_put(ix);
  return rc;
}

static const sl_port_def preview_inputs[] = {
    {"mask", "optional whole u8 [H, W]: 1 = bad pixel (e.g. detector_mask's), counted as 0", NULL,
     true}};
static const sl_port_def preview_outputs[] = {
    {"pattern", "whole f64 [H, W]: mean of the first frames, bad and flagged pixels as 0", "counts",
     false}};

const sl_node_desc sl_node_detector_preview = {
    .type = "detector_preview",
    .doc = "Mean diffraction pattern of the first frames of an HDF5 acquisition, read before the "
           "scan (for geometry from the data, e.g. disk_fit).",
    /* the params, and room after them for what infer learns */
    .params = detector_preview_params_defs, .n_params = SL_COUNT_OF(detector_preview_params_defs),
    .params_size = sizeof(preview_params_and_facts), .params_bind = detector_preview_params_bind,
    .inputs = preview_inputs, .n_inputs = SL_COUNT_OF(preview_inputs),
    .outputs = preview_outputs, .n_outputs = SL_COUNT_OF(preview_outputs),
    .infer = preview_infer, .cost = preview_cost,
    .kernel = {[SL_BACKEND_CPU] = preview_cpu},
    .host = true,
};
