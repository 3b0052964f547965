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
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/codec/bslz4.h"
#include "nodes/common/frame_ports.h"
#include "nodes/hdf5/chunk_reader.h"
#include "nodes/hdf5/h5_index.h"
#include "nodes/hdf5/h5_index_cache.h"

#define DETECTOR_PREVIEW_PARAMS(P)                                                         \
  P(PATH, path, NULL, "detector master file (as hdf5_source)", NULL)                       \
  P(STRING, dataset, "", "frame dataset (as hdf5_source)", NULL)                           \
  P(INT, frames, "256", "how many of the first frames to average (fewer if the file has " \
                        "fewer); >= 1", NULL)
SL_NODE_PARAMS(detector_preview_params, DETECTOR_PREVIEW_PARAMS)

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
  if (rc == SL_OK) sl_node_reads_file(n, ix->source);
  sl_h5_index_put(ix);
  return rc;
}

static void preview_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t frames = detector_preview_params_of(n)->frames, item = sl_desc_elems(&n->out[0]);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->bytes_read = frames * item * 2; /* about: the stored frames, u16 */
  c->ops = frames * item;
  /* held while it runs: the first frames decoded (u16 about) */
  c->state_bytes = frames * item * 2;
}

/* The first frames' decoding, spread over the backend's workers: stored
 * chunk k decodes into its own place in `frames` (so chunks decode in any
 * order), then each worker sums a range of pixels over the frames in their
 * order, so the mean has the same bits at any worker count. */
typedef struct preview_job {
  const sl_h5_index *ix;
  sl_encoding enc;
  int64_t block, want;
  const uint8_t *raw;
  const uint64_t *offsets;
  const int64_t *first; /* frame index of chunk k's first frame in `frames` */
  uint8_t *frames;      /* want frames, decoded */
  size_t stored;        /* bytes a stored chunk decodes to */
  sl_code *status;      /* per chunk */
  sl_error *errs;       /* per chunk */
  const uint8_t *mask;
  double *sum;
} preview_job;

static void decode_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const preview_job *j = ctx;
  const sl_h5_index *ix = j->ix;
  (void)worker;
  uint8_t *scratch = NULL;
  for (int64_t k = begin; k < end; k++) {
    const sl_h5_chunk *c = &ix->chunks[k];
    const uint8_t *src = j->raw + j->offsets[k];
    int64_t n = c->n_frames < j->want - j->first[k] ? c->n_frames : j->want - j->first[k];
    size_t bytes = (size_t)n * ix->frame_bytes;
    uint8_t *dst = j->frames + (size_t)j->first[k] * ix->frame_bytes;
    sl_error *err = &j->errs[k];
    sl_code rc = SL_OK;
    if (j->enc == SL_ENC_NONE || (c->filter_mask & 1u)) { /* stored as they are */
      if (c->size < (uint64_t)c->n_frames * ix->frame_bytes)
        rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk holds %llu bytes, fewer than its frames need",
                     ix->files[c->file], (unsigned long long)c->size);
      else
        memcpy(dst, src, bytes);
    } else {
      /* A stored chunk decodes whole (a file's last one may be padded past
       * its n_frames): straight into place when it all belongs there. */
      bool whole = bytes == j->stored;
      if (!whole && !scratch) scratch = malloc(j->stored ? j->stored : 1);
      size_t got = 0;
      rc = !whole && !scratch ? sl_fail(err, SL_ERR_NOMEM, "detector_preview: out of memory")
                              : sl_encoded_chunk_decode(src, c->size, j->enc, (size_t)ix->elem_size,
                                                        (size_t)j->block, SL_SIMD_AUTO, whole ? dst : scratch,
                                                        j->stored, &got, err);
      if (rc == SL_OK && got != j->stored)
        rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk decodes to %zu bytes, expected %zu",
                     ix->files[c->file], got, j->stored);
      if (rc == SL_OK && !whole) memcpy(dst, scratch, bytes);
    }
    j->status[k] = rc;
  }
  free(scratch);
}

/* Pixels [begin, end): the sum over frames in order, skipping masked pixels
 * and pixels at the dtype's maximum (the detector's flag value). A skipped
 * value adds +0.0, which leaves a sum of non-negative counts as it is, so the
 * loop over pixels has no branch and vectorises; each pixel still adds its
 * frames in order (the same bits as adding only the kept values). */
#define PREVIEW_SUM(T, FLAG)                                                            \
  {                                                                                     \
    for (int64_t f = 0; f < j->want; f++) {                                             \
      const T *restrict x = (const T *)(j->frames + (size_t)f * ix->frame_bytes);       \
      for (int64_t i = begin; i < end; i++) {                                           \
        T v = x[i];                                                                     \
        sum[i] += (v != (T)(FLAG) && !(mask && mask[i])) ? (double)v : 0.0;             \
      }                                                                                 \
    }                                                                                   \
    break;                                                                              \
  }

static void sum_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const preview_job *j = ctx;
  const sl_h5_index *ix = j->ix;
  double *restrict sum = j->sum;
  const uint8_t *restrict mask = j->mask;
  (void)worker;
  switch (ix->elem_size) {
    case 1: PREVIEW_SUM(uint8_t, 0xFFu)
    case 2: PREVIEW_SUM(uint16_t, 0xFFFFu)
    default: PREVIEW_SUM(uint32_t, 0xFFFFFFFFu)
  }
}
#undef PREVIEW_SUM

/* The stored chunks that hold the first `want` frames, read with the
 * project's chunk reader (one window), decoded in parallel and added into
 * sum. */
static sl_code add_first_frames(sl_backend *b, const sl_h5_index *ix, int64_t want, const uint8_t *mask,
                                double *sum, sl_error *err) {
  preview_job j = {.ix = ix, .want = want, .mask = mask, .sum = sum};
  sl_code rc = sl_h5_index_encoding(ix, &j.enc, &j.block, err);
  if (rc != SL_OK) return rc;
  int64_t count = 0;
  for (int64_t frames = 0; count < ix->n_chunks && frames < want; count++) frames += ix->chunks[count].n_frames;
  uint64_t *offsets = malloc((size_t)(count + 1) * sizeof *offsets);
  int64_t *first = malloc((size_t)(count + 1) * sizeof *first);
  uint64_t window = sl_h5_window_bytes(ix, 0, count);
  uint8_t *raw = malloc(window ? window : 1);
  j.stored = (size_t)ix->frames_per_chunk * ix->frame_bytes;
  uint8_t *frames = malloc((size_t)want * ix->frame_bytes + 1);
  sl_code *status = calloc((size_t)(count + 1), sizeof *status);
  sl_error *errs = calloc((size_t)(count + 1), sizeof *errs);
  sl_chunk_reader *reader = NULL;
  if (!offsets || !first || !raw || !frames || !status || !errs)
    rc = sl_fail(err, SL_ERR_NOMEM, "detector_preview: out of memory");
  if (rc == SL_OK) rc = sl_chunk_reader_open(ix, count, &reader, err);
  if (rc == SL_OK) rc = sl_chunk_reader_request(reader, 0, count, raw, window, err);
  if (rc == SL_OK) rc = sl_chunk_reader_wait(reader, err);
  if (rc == SL_OK) {
    sl_h5_window_offsets(ix, 0, count, offsets);
    for (int64_t k = 0, f = 0; k < count; f += ix->chunks[k].n_frames, k++) first[k] = f;
    j.raw = raw, j.offsets = offsets, j.first = first, j.frames = frames, j.status = status, j.errs = errs;
    b->ops->parallel_for(b, count, 1, decode_range, &j);
    for (int64_t k = 0; k < count && rc == SL_OK; k++)
      if (status[k] != SL_OK) *err = errs[k], rc = status[k];
  }
  if (rc == SL_OK) b->ops->parallel_for(b, ix->frame_rows * ix->frame_cols, 1024, sum_range, &j);
  sl_chunk_reader_close(reader);
  free(offsets);
  free(first);
  free(raw);
  free(frames);
  free(status);
  free(errs);
  return rc;
}

static sl_code preview_cpu(sl_kernel_args *a) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(a->node, true, &ix, a->err);
  if (rc != SL_OK) return rc;
  int64_t npix = ix->frame_rows * ix->frame_cols, done = 0;
  int64_t want = detector_preview_params_of(a->node)->frames;
  if (want > ix->n_frames) want = ix->n_frames;
  double *sum = a->out[0];
  memset(sum, 0, (size_t)npix * sizeof *sum);
  rc = add_first_frames(a->backend, ix, want, a->in[0], sum, a->err);
  done = want;
  for (int64_t i = 0; i < npix && rc == SL_OK; i++) sum[i] /= (double)(done ? done : 1);
  if (rc == SL_OK)
    sl_node_note((sl_node *)a->node, "preview", "mean of the first %lld frames of %s", (long long)done,
                 ix->source);
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
    SL_PARAMS_DESC(detector_preview_params),
    .inputs = preview_inputs, .n_inputs = SL_COUNT_OF(preview_inputs),
    .outputs = preview_outputs, .n_outputs = SL_COUNT_OF(preview_outputs),
    .infer = preview_infer, .cost = preview_cost,
    .kernel = {[SL_BACKEND_CPU] = preview_cpu},
    .host = true,
};
