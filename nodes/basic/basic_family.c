/* The basic family: elementary nodes that let the engine be tested and
 * measured without scientific nodes. One line per node. */
#include "engine/graph/node.h"

extern const sl_node_desc sl_node_affine, sl_node_constant, sl_node_ramp, sl_node_subtract,
    sl_node_sum;

static const sl_node_desc *const k_nodes[] = {
    &sl_node_affine, &sl_node_constant, &sl_node_ramp, &sl_node_subtract, &sl_node_sum,
};

const sl_node_family sl_family_basic = {"basic", k_nodes, SL_COUNT_OF(k_nodes)};
