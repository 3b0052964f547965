/* detector_mask: the detector's own pixel mask from an HDF5 acquisition
 * (/entry/instrument/detector/detectorSpecific/pixel_mask, > 0 = bad), as a
 * whole u8 [rows, cols] tensor (1 = bad) for mask_correct. A file without a
 * pixel mask gives an all-good mask, and says so in the provenance. */
#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node_params.h"
#include "nodes/hdf5/h5_index.h"
#include "nodes/hdf5/h5_index_cache.h"

#define DETECTOR_MASK_PARAMS(P)                                   \
  P(PATH, path, NULL, "detector master file", NULL)               \
  P(STRING, dataset, "", "frame dataset (as hdf5_source)", NULL)
SL_NODE_PARAMS(detector_mask_params, DETECTOR_MASK_PARAMS)

static sl_code open_index(const sl_node *n, const sl_h5_index **ix, sl_error *err) {
  const detector_mask_params *p = detector_mask_params_of(n);
  if (!p->path || !p->path[0])
    return sl_fail(err, SL_ERR_PIPELINE, "param 'path' is empty: give the detector master file");
  return sl_h5_index_get(p->path, p->dataset && p->dataset[0] ? p->dataset : NULL, ix, err);
}

static sl_code mask_infer(sl_node *n, sl_error *err) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(n, &ix, err);
  if (rc != SL_OK) return rc;
  sl_node_reads_file(n, ix->source);
  int64_t dims[2] = {ix->frame_rows, ix->frame_cols};
  n->out[0] = sl_desc_make(SL_U8, 2, dims, 0);
  /* The bad pixels are known now: consumers plan for them, not for every
   * pixel (mask_correct's lists). The kernel writes exactly these. */
  n->out[0].nonzero_known = true;
  n->out[0].nonzero_bound = ix->meta.pixel_mask ? ix->meta.n_bad_pixels : 0;
  if (ix->meta.has_pixel_mask)
    sl_node_note(n, "pixel_mask", "%lld bad pixels from %s", (long long)ix->meta.n_bad_pixels, ix->source);
  else
    sl_node_note(n, "pixel_mask", "none in %s: every pixel is taken as good", ix->source);
  sl_h5_index_put(ix);
  return SL_OK;
}

static void mask_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = 4 * sl_desc_elems(&n->out[0]);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->ops = sl_desc_elems(&n->out[0]);
}

static sl_code mask_cpu(sl_kernel_args *a) {
  const sl_h5_index *ix = NULL;
  sl_code rc = open_index(a->node, &ix, a->err);
  if (rc != SL_OK) return rc;
  const sl_tensor_desc *d = &a->node->out[0];
  uint8_t *out = a->out[0];
  int64_t n = sl_desc_elems(d);
  int64_t bad = ix->meta.pixel_mask ? ix->meta.n_bad_pixels : 0;
  if (ix->frame_rows != d->dims[0] || ix->frame_cols != d->dims[1] || bad != d->nonzero_bound) {
    rc = sl_fail(a->err, SL_ERR_IO, "%s changed since the pipeline was planned", ix->source);
  } else if (ix->meta.pixel_mask) {
    for (int64_t i = 0; i < n; i++) out[i] = ix->meta.pixel_mask[i] > 0;
  } else {
    memset(out, 0, (size_t)n);
  }
  sl_h5_index_put(ix);
  return rc;
}

static const sl_port_def mask_out[] = {{"mask", "u8 [det rows, det cols]: 1 = bad pixel", "flag (1 = bad)", false}};

const sl_node_desc sl_node_detector_mask = {
    .type = "detector_mask",
    .doc = "The detector's pixel mask from an HDF5 acquisition (1 = bad).",
    SL_PARAMS_DESC(detector_mask_params),
    .outputs = mask_out, .n_outputs = SL_COUNT_OF(mask_out),
    .infer = mask_infer, .cost = mask_cost,
    .kernel = {[SL_BACKEND_CPU] = mask_cpu},
    .host = true,
    .cpu_serial = true,
};
