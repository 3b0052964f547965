/* TEMPORARY (issue 10, phase 1): see cuda_glue_legacy.h. Each adapter reads
 * its node (descriptors, params by name, the tables its prepare() built),
 * fills the launcher's plain parameter struct and calls the launcher. */
#define SL_CUDA_GLUE_LEGACY_IMPL
#include "nodes/cuda_glue_legacy.h"

#ifdef SLUICE_HAVE_CUDA

#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "shaders/cuda/detector/bin_detector.h"
#include "shaders/cuda/detector/bslz4_decode.h"
#include "shaders/cuda/detector/mask_correct.h"

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

#endif
