/* TEMPORARY (issue 10, phase 1): see cuda_glue_legacy.h. Each adapter reads
 * its node (descriptors, params by name, the tables its prepare() built),
 * fills the launcher's plain parameter struct and calls the launcher. */
#define SL_CUDA_GLUE_LEGACY_IMPL
#include "nodes/cuda_glue_legacy.h"

#ifdef SLUICE_HAVE_CUDA

#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "shaders/cuda/basic/sum.h"
#include "shaders/cuda/detector/bin_detector.h"
#include "shaders/cuda/detector/bslz4_decode.h"
#include "shaders/cuda/detector/mask_correct.h"
#include "shaders/cuda/stem/com.h"
#include "shaders/cuda/stem/moments.h"
#include "shaders/cuda/stem/virtual_detectors.h"
#include "shaders/cuda/stem/virtual_image.h"

/* The node's device-state slot (only this node's device state changes). */
static sl_cuda_state_holder device_state_of(const sl_kernel_args *a) {
  sl_node *n = (sl_node *)a->node;
  return (sl_cuda_state_holder){.state = &n->dev_state, .release = &n->dev_state_free};
}

/* dtype and the last two axes of a frames port (zeros for an unconnected one). */
static sl_cuda_frame_shape frame_shape(const sl_tensor_desc *x) {
  sl_cuda_frame_shape f = {.dtype = x->dtype, .height = 0, .width = 0};
  if (x->rank >= 2) {
    f.height = x->dims[x->rank - 2];
    f.width = x->dims[x->rank - 1];
  }
  return f;
}

/* Input k is connected and described (an optional input left open is not). */
static bool input_present(const sl_node *n, int k) { return n->n_in > k && n->in[k].dtype != SL_DT_INVALID; }

/* ---- basic ---- */

sl_code sl_cuda_legacy_sum(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  const sl_cuda_sum_params p = {.dtype = x->dtype, .item_elems = sl_desc_item_elems(x)};
  return sl_cuda_sum(&p, a);
}

/* ---- detector ---- */

sl_code sl_cuda_legacy_bslz4_decode(sl_kernel_args *a) {
  const char *mode = getenv("SLUICE_CUDA_BSLZ4_CHECK");
  const sl_cuda_bslz4_decode_params p = {.chunks = a->node->in[0],
                                         .check_every_call = mode && !strcmp(mode, "sync"),
                                         .device_state = device_state_of(a)};
  return sl_cuda_bslz4_decode(&p, a);
}

sl_code sl_cuda_legacy_mask_correct(sl_kernel_args *a) {
  const sl_node *n = a->node;
  const char *policy = sl_param_str(n, "policy");
  sl_cuda_mask_correct_params p = {
      .frames = frame_shape(&n->in[0]),
      .policy = !strcmp(policy, "median") ? SL_CUDA_MASK_MEDIAN
                : !strcmp(policy, "none") ? SL_CUDA_MASK_NONE
                                          : SL_CUDA_MASK_ZERO,
      .flagged = sl_param_bool(n, "flagged"),
      .has_mask = n->n_in > 1 && n->in_src[1].node != SL_SRC_NONE && n->in[1].dtype != SL_DT_INVALID,
      .mask_dtype = n->n_in > 1 ? n->in[1].dtype : SL_DT_INVALID,
      .file_mask = sl_mask_correct_file_mask(n),
      .device_state = device_state_of(a)};
  return sl_cuda_mask_correct(&p, a);
}

static sl_cuda_bin_detector_params bin_detector_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *x = &n->in[0];
  sl_cuda_bin_detector_params p = {.frames = frame_shape(x),
                                   .binned = frame_shape(&n->out[0]),
                                   .factor = (int)sl_param_int(n, "factor"),
                                   .max_value = sl_param_int(n, "max_value"),
                                   .scan_rank = x->stream_rank,
                                   .device_state = device_state_of(a)};
  for (int k = 0; k < x->stream_rank && k < SL_MAX_RANK; k++) p.scan_dims[k] = x->dims[k];
  return p;
}

sl_code sl_cuda_legacy_bin_detector(sl_kernel_args *a) {
  const sl_cuda_bin_detector_params p = bin_detector_params(a);
  return sl_cuda_bin_detector(&p, a);
}

sl_code sl_cuda_legacy_bin_detector_finalize(sl_kernel_args *a) {
  const sl_cuda_bin_detector_params p = bin_detector_params(a);
  return sl_cuda_bin_detector_finalize(&p, a);
}

/* ---- stem ---- */

static sl_cuda_virtual_image_params virtual_image_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const char *kind = sl_param_str(n, "kind");
  sl_cuda_virtual_image_params p = {
      .frames = frame_shape(&n->in[0]),
      .use_disk = input_present(n, 1),
      .kind = !strcmp(kind, "bf")    ? SL_CUDA_VIRTUAL_IMAGE_BF
              : !strcmp(kind, "adf") ? SL_CUDA_VIRTUAL_IMAGE_ADF
              : !strcmp(kind, "df")  ? SL_CUDA_VIRTUAL_IMAGE_DF
                                     : SL_CUDA_VIRTUAL_IMAGE_ANNULUS,
      .ring_in_radii = !strcmp(sl_param_str(n, "units"), "radii"),
      .inner = sl_param_float(n, "inner"),
      .outer = sl_param_float(n, "outer"),
      .device_state = device_state_of(a)};
  p.spans = sl_virtual_image_spans(n, &p.n_spans);
  return p;
}

sl_code sl_cuda_legacy_virtual_image(sl_kernel_args *a) {
  const sl_cuda_virtual_image_params p = virtual_image_params(a);
  return sl_cuda_virtual_image(&p, a);
}

sl_code sl_cuda_legacy_virtual_image_finalize(sl_kernel_args *a) {
  const sl_cuda_virtual_image_params p = virtual_image_params(a);
  return sl_cuda_virtual_image_finalize(&p, a);
}

static sl_cuda_virtual_detectors_params virtual_detectors_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  sl_cuda_virtual_detectors_params p = {.frames = frame_shape(&n->in[0]),
                                        .use_disk = input_present(n, 1),
                                        .ring_in_radii = !strcmp(sl_param_str(n, "units"), "radii"),
                                        .inner = sl_param_float(n, "inner"),
                                        .outer = sl_param_float(n, "outer"),
                                        .moments_read = (n->out_used & (7u << 3)) != 0,
                                        .device_state = device_state_of(a)};
  p.runs = sl_virtual_detectors_runs(n, &p.n_runs);
  return p;
}

sl_code sl_cuda_legacy_virtual_detectors(sl_kernel_args *a) {
  const sl_cuda_virtual_detectors_params p = virtual_detectors_params(a);
  return sl_cuda_virtual_detectors(&p, a);
}

sl_code sl_cuda_legacy_virtual_detectors_finalize(sl_kernel_args *a) {
  const sl_cuda_virtual_detectors_params p = virtual_detectors_params(a);
  return sl_cuda_virtual_detectors_finalize(&p, a);
}

sl_code sl_cuda_legacy_moments(sl_kernel_args *a) {
  const sl_cuda_moments_params p = {.frames = frame_shape(&a->node->in[0])};
  return sl_cuda_moments(&p, a);
}

/* descan: -1 when the param holds neither value. */
static sl_cuda_com_params com_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *scan = sl_com_scan_desc(n);
  const char *descan = sl_param_str(n, "descan");
  return (sl_cuda_com_params){.from_frames = n->in[0].dtype != SL_DT_INVALID,
                              .frames = frame_shape(&n->in[0]),
                              .positions = sl_desc_positions(scan),
                              .scan_cols = scan->stream_rank > 0 ? scan->dims[scan->stream_rank - 1] : 1,
                              .descan = !strcmp(descan, "none")    ? SL_CUDA_COM_DESCAN_NONE
                                        : !strcmp(descan, "plane") ? SL_CUDA_COM_DESCAN_PLANE
                                                                   : -1,
                              .device_state = device_state_of(a)};
}

sl_code sl_cuda_legacy_com(sl_kernel_args *a) {
  const sl_cuda_com_params p = com_params(a);
  return sl_cuda_com(&p, a);
}

sl_code sl_cuda_legacy_com_finalize(sl_kernel_args *a) {
  const sl_cuda_com_params p = com_params(a);
  if (p.descan < 0)
    return sl_fail(a->err, SL_ERR_PIPELINE, "param 'descan' must be none or plane, got '%s'",
                   sl_param_str(a->node, "descan"));
  return sl_cuda_com_finalize(&p, a);
}

#endif
