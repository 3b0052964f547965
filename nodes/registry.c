/* The registry of built-in node families. A new node adds one line to its
 * family's table (nodes/<family>/<family>_family.c); a new family adds one
 * line here. */
#include "nodes/registry.h"

static const sl_node_family *const k_families[] = {
    &sl_family_basic,
    &sl_family_detector,
    &sl_family_io,
    &sl_family_stem,
};

static const sl_node_registry k_registry = {k_families, SL_COUNT_OF(k_families)};

const sl_node_registry *sl_nodes_registry(void) { return &k_registry; }
