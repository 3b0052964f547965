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
}

/* Adds frame f into sum, skipping masked pixels and pixels at the dtype's
 * maximum (the detector's flag value). */
static void add_frame(const void *f, sl_dtype t, uint64_t flag, const uint8_t *mask, int64_t npix,
                      double *sum) {
  for (int64_t i = 0; i < npix; i++) {
    uint64_t v = sl_frame_value_at(f, t, i);
    if (!(mask && mask[i]) && v != flag) sum[i] += (double)v;
  }
}

/* The stored chunks [0, count) that hold the first frames, read with the
 * project's chunk reader (one window) and decoded one by one into `frames`
 * (the bytes of one stored chunk), each added into sum. */
static sl_code add_first_frames(const sl_h5_index *ix, int64_t want, const uint8_t *mask, double *sum,
                                int64_t *done, sl_error *err) {
  sl_encoding enc;
  int64_t block;
  sl_code rc = sl_h5_index_encoding(ix, &enc, &block, err);
  if (rc != SL_OK) return rc;
  int64_t count = 0;
  for (int64_t frames = 0; count < ix->n_chunks && frames < want; count++) frames += ix->chunks[count].n_frames;
  uint64_t *offsets = malloc((size_t)(count + 1) * sizeof *offsets);
  uint64_t window = sl_h5_window_bytes(ix, 0, count);
  uint8_t *raw = malloc(window ? window : 1);
  /* A stored chunk holds frames_per_chunk frames (a file's last one may be
   * padded past its n_frames). */
  size_t stored = (size_t)ix->frames_per_chunk * ix->frame_bytes;
  uint8_t *frames = malloc(stored ? stored : 1);
  sl_chunk_reader *reader = NULL;
  if (!offsets || !raw || !frames) rc = sl_fail(err, SL_ERR_NOMEM, "detector_preview: out of memory");
  if (rc == SL_OK) rc = sl_chunk_reader_open(ix, count, &reader, err);
  if (rc == SL_OK) rc = sl_chunk_reader_request(reader, 0, count, raw, window, err);
  if (rc == SL_OK) rc = sl_chunk_reader_wait(reader, err);
  if (rc == SL_OK) sl_h5_window_offsets(ix, 0, count, offsets);
  sl_dtype t = ix->elem_size == 1 ? SL_U8 : ix->elem_size == 2 ? SL_U16 : SL_U32;
  uint64_t flag = ix->elem_size == 1 ? 0xFFu : ix->elem_size == 2 ? 0xFFFFu : 0xFFFFFFFFu;
  int64_t npix = ix->frame_rows * ix->frame_cols;
  for (int64_t k = 0; k < count && *done < want && rc == SL_OK; k++) {
    const sl_h5_chunk *c = &ix->chunks[k];
    const uint8_t *src = raw + offsets[k];
    if (enc == SL_ENC_NONE || (c->filter_mask & 1u)) { /* stored as they are */
      if (c->size < (uint64_t)c->n_frames * ix->frame_bytes)
        rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk holds %llu bytes, fewer than its frames need",
                     ix->files[c->file], (unsigned long long)c->size);
    } else {
      size_t got = 0;
      rc = sl_encoded_chunk_decode(src, c->size, enc, (size_t)ix->elem_size, (size_t)block, SL_SIMD_AUTO,
                                   frames, stored, &got, err);
      if (rc == SL_OK && got != stored)
        rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk decodes to %zu bytes, expected %zu",
                     ix->files[c->file], got, stored);
      src = frames;
    }
    for (int64_t f = 0; f < c->n_frames && *done < want && rc == SL_OK; f++, (*done)++)
      add_frame(src + (size_t)f * ix->frame_bytes, t, flag, mask, npix, sum);
  }
  sl_chunk_reader_close(reader);
  free(offsets);
  free(raw);
  free(frames);
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
  rc = add_first_frames(ix, want, a->in[0], sum, &done, a->err);
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
