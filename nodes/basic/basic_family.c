/* The basic family: elementary nodes that let the engine be tested and
 * measured without scientific nodes. One line per node: the descriptor lives
 * in nodes/basic/<node>.c, declared here where it is listed. */
#include "engine/graph/node.h"

#define BASIC_NODES(X) \
  X(affine)            \
  X(clip)              \
  X(constant)          \
  X(ramp)              \
  X(subtract)          \
  X(sum)

#define BASIC_DECLARE(name) extern const sl_node_desc sl_node_##name;
#define BASIC_ENTRY(name) &sl_node_##name,
BASIC_NODES(BASIC_DECLARE)
static const sl_node_desc *const k_nodes[] = {BASIC_NODES(BASIC_ENTRY)};

const sl_node_family sl_family_basic = {"basic", k_nodes, SL_COUNT_OF(k_nodes)};
