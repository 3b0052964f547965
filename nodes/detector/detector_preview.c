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
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/codec/bslz4.h"
#include "nodes/common/frame_ports.h"
#include "nodes/hdf5/h5_index.h"
#include "nodes/hdf5/h5_index_cache.h"

#define DETECTOR_PREVIEW_PARAMS(P)                                                         \
  P(PATH, path, NULL, "detector master file (as hdf5_source)", NULL)                       \
  P(STRING, dataset, "", "frame dataset (as hdf5_source)", NULL)                           \
  P(INT, frames, "256", "how many of the first frames to average (fewer if the file has " \
                        "fewer); >= 1", NULL)
SL_NODE_PARAMS(detector_preview_params, DETECTOR_PREVIEW_PARAMS)

static sl_code open_index(const sl_node *n, const sl_h5_index **ix, sl_error *err) {
  const detector_preview_params *p = detector_preview_params_of(n);
  if (!p->path || !p->path[0])
    return sl_fail(err, SL_ERR_PIPELINE, "param 'path' is empty: give the detector master file");
  return sl_h5_index_get(p->path, p->dataset && p->dataset[0] ? p->dataset : NULL, ix, err);
}

static sl_code preview_infer(sl_node *n, sl_error *err) {
  if (detector_preview_params_of(n)->frames < 1)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'frames' must be >= 1, got %lld",
                   (long long)detector_preview_params_of(n)->frames);
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(n, &ix, err);
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

/* Stored chunk c decoded into dst (its frames, frame after frame). */
static sl_code read_chunk(const sl_h5_index *ix, const sl_h5_chunk *c, uint8_t *dst, size_t dst_bytes,
                          sl_error *err) {
  const char *file = ix->files[c->file];
  uint8_t *raw = malloc(c->size ? c->size : 1);
  if (!raw) return sl_fail(err, SL_ERR_NOMEM, "detector_preview: out of memory");
  sl_code rc = SL_OK;
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) rc = sl_fail(err, SL_ERR_IO, "cannot open %s: %s", file, strerror(errno));
  size_t got = 0;
  while (rc == SL_OK && got < c->size) {
    ssize_t r = pread(fd, raw + got, c->size - got, (off_t)(c->file_offset + got));
    if (r <= 0) rc = sl_fail(err, SL_ERR_IO, "%s: cannot read a stored chunk at byte %llu: %s", file,
                             (unsigned long long)c->file_offset, r < 0 ? strerror(errno) : "end of file");
    else got += (size_t)r;
  }
  if (fd >= 0) close(fd);
  size_t decoded = 0;
  unsigned compression = ix->n_cd_values > 4 ? ix->bs_cd_values[4] : 0;
  bool stored_raw = ix->filter != SL_H5_FILTER_BITSHUFFLE || (c->filter_mask & 1u);
  if (rc == SL_OK && stored_raw) {
    if (c->size < dst_bytes)
      rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk holds %llu bytes, fewer than its frames need",
                   file, (unsigned long long)c->size);
    else
      memcpy(dst, raw, dst_bytes);
  } else if (rc == SL_OK && compression == 2) {
    rc = sl_bslz4_decode(raw, c->size, (size_t)ix->elem_size, dst, dst_bytes, &decoded, err);
  } else if (rc == SL_OK) {
    size_t block = ix->n_cd_values > 3 ? ix->bs_cd_values[3] : 0;
    rc = sl_bitshuffle_decode_raw(raw, c->size, (size_t)ix->elem_size, block, dst, dst_bytes, &decoded,
                                  SL_SIMD_AUTO, err);
  }
  if (rc == SL_OK && !stored_raw && decoded != dst_bytes)
    rc = sl_fail(err, SL_ERR_FORMAT, "%s: a stored chunk decodes to %zu bytes, expected %zu", file, decoded,
                 dst_bytes);
  free(raw);
  return rc;
}

/* Adds frame f (elem_size bytes per pixel) into sum, skipping masked pixels
 * and pixels at the dtype's maximum. */
static void add_frame(const uint8_t *f, int elem, const uint8_t *mask, int64_t npix, double *sum) {
  for (int64_t i = 0; i < npix; i++) {
    uint64_t v = elem == 1 ? f[i] : elem == 2 ? ((const uint16_t *)f)[i] : ((const uint32_t *)f)[i];
    uint64_t flag = elem == 1 ? 0xFFu : elem == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    if ((mask && mask[i]) || v == flag) continue;
    sum[i] += (double)v;
  }
}

static sl_code preview_cpu(sl_kernel_args *a) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(a->node, &ix, a->err);
  if (rc != SL_OK) return rc;
  int64_t npix = ix->frame_rows * ix->frame_cols;
  int64_t want = detector_preview_params_of(a->node)->frames;
  if (want > ix->n_frames) want = ix->n_frames;
  double *sum = a->out[0];
  memset(sum, 0, (size_t)npix * sizeof *sum);
  const uint8_t *mask = a->in[0];
  int64_t done = 0;
  for (int k = 0; k < ix->n_chunks && done < want && rc == SL_OK; k++) {
    const sl_h5_chunk *c = &ix->chunks[k];
    /* A stored chunk holds frames_per_chunk frames (the last one of a file
     * may be padded past its n_frames). */
    int64_t stored = ix->frames_per_chunk > c->n_frames ? ix->frames_per_chunk : c->n_frames;
    size_t bytes = (size_t)stored * ix->frame_bytes;
    uint8_t *frames = malloc(bytes ? bytes : 1);
    if (!frames) rc = sl_fail(a->err, SL_ERR_NOMEM, "detector_preview: out of memory");
    if (rc == SL_OK) rc = read_chunk(ix, c, frames, bytes, a->err);
    for (int64_t f = 0; f < c->n_frames && done < want && rc == SL_OK; f++, done++)
      add_frame(frames + (size_t)f * ix->frame_bytes, ix->elem_size, mask, npix, sum);
    free(frames);
  }
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
