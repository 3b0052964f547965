/* Every node family built into sluice, as one registry for graph building
 * (the command line and tests hand it to sl_graph_build). */
#ifndef SL_NODES_REGISTRY_H
#define SL_NODES_REGISTRY_H

#include "engine/graph/node.h"

const sl_node_registry *sl_nodes_registry(void);

/* The family tables (nodes/<family>/<family>_family.c). */
extern const sl_node_family sl_family_basic;
extern const sl_node_family sl_family_detector;
extern const sl_node_family sl_family_io;
extern const sl_node_family sl_family_stem;

#endif
