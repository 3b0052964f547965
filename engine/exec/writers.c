/* The run's writer nodes (see sinks.h): what `sluice run` leaves on disk is
 * written by sink nodes in the graph, appended here for each graph output and
 * then planned, bound and run like any node. Their types come from the
 * graph's registry by name, as a pipeline's do (nodes/io). */
#include <stdio.h>

#include "engine/exec/sinks.h"

/* Appends a node of `type` with id "OUTPUT.suffix" reading output o. */
static sl_code add_writer(sl_graph *g, const char *type, const char *suffix, int o, sl_error *err) {
  const sl_node_desc *d = g->registry ? sl_registry_find(g->registry, type) : NULL;
  if (!d || !d->sink)
    return sl_fail(err, SL_ERR_INTERNAL, "the node registry has no sink node '%s' to write outputs with", type);
  char id[512];
  snprintf(id, sizeof id, "%s.%s", g->outputs[o].name, suffix);
  return sl_graph_add_output_reader(g, d, id, o, err);
}

sl_code sl_graph_add_writers(sl_graph *g, sl_error *err) {
  sl_code rc = SL_OK;
  for (int o = 0; o < g->n_outputs && rc == SL_OK; o++) {
    if (g->outputs[o].node < 0) continue;
    rc = add_writer(g, "write_h5", "h5", o, err);
    /* the output's descriptor, found again: adding a node reorders them */
    const sl_graph_output *go = &g->outputs[o];
    if (rc == SL_OK && sl_output_is_image(&g->nodes[go->node].out[go->port]))
      rc = add_writer(g, "write_png", "png", o, err);
  }
  return rc;
}

void sl_graph_bind_writers(sl_graph *g, sl_output_target *t) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].desc && g->nodes[i].desc->sink) g->nodes[i].state = t;
}
