/* What the CUDA glue of a node file needs to fill its launcher's plain
 * parameter struct (shaders/cuda/<family>/<node>.h): the node's device-state
 * slot, the frame shape of a port, and whether an optional input is
 * connected. Header-only; the glue itself is a few lines in each node file,
 * compiled when the CUDA backend is. */
#ifndef SL_NODES_CUDA_GLUE_H
#define SL_NODES_CUDA_GLUE_H

#include <stdbool.h>

#include "engine/graph/graph.h"
#include "shaders/cuda/common/launcher.h"

/* The slot where a launcher keeps its state between the calls of one run
 * (pointers into the node's device table; the executor frees it with
 * dev_state_free when it takes the table back). Only this node's device
 * state changes, hence the cast. */
static inline sl_cuda_state_holder sl_glue_device_state(const sl_kernel_args *a) {
  sl_node *n = (sl_node *)a->node;
  return (sl_cuda_state_holder){.state = &n->dev_state, .release = &n->dev_state_free};
}

/* dtype and the last two axes of a frames port (zeros for an unconnected one). */
static inline sl_cuda_frame_shape sl_glue_frame_shape(const sl_tensor_desc *x) {
  sl_cuda_frame_shape f = {.dtype = x->dtype, .height = 0, .width = 0};
  if (x->rank >= 2) {
    f.height = x->dims[x->rank - 2];
    f.width = x->dims[x->rank - 1];
  }
  return f;
}

/* Input k is connected and described (an optional input left open is not). */
static inline bool sl_glue_input_present(const sl_node *n, int k) {
  return n->n_in > k && n->in[k].dtype != SL_DT_INVALID;
}

#endif
