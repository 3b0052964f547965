/* Nodes the device benchmarks build by hand (bench_cuda_idpc.c,
 * bench_cuda_products.c), outside a graph: what releasing one takes. */
#ifndef SL_BENCH_NODE_H
#define SL_BENCH_NODE_H

#include <stdlib.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"

/* Its device state, node state, params and notes. */
static inline void node_free(sl_node *n) {
  if (n->dev_state && n->dev_state_free) n->dev_state_free(n->dev_state);
  if (n->desc->release && n->state) n->desc->release(n);
  for (int i = 0; i < n->desc->n_params; i++) sl_param_value_free(&n->params[i]);
  free(n->params);
  free(n->typed_params);
  for (int i = 0; i < n->n_notes; i++) free(n->notes[i]);
  free(n->notes);
}

#endif
