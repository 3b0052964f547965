/* The stem family: 4D-STEM products from detector frames. One line per node:
 * the descriptor lives in nodes/stem/<node>.c, declared here where it is
 * listed. */
#include "engine/graph/node.h"

#define STEM_NODES(X)   \
  X(com)                \
  X(disk_fit)           \
  X(dpc)                \
  X(idpc)               \
  X(moments)            \
  X(synthetic_4dstem)   \
  X(virtual_detectors)  \
  X(virtual_image)

#define STEM_DECLARE(name) extern const sl_node_desc sl_node_##name;
#define STEM_ENTRY(name) &sl_node_##name,
STEM_NODES(STEM_DECLARE)
static const sl_node_desc *const k_nodes[] = {STEM_NODES(STEM_ENTRY)};

const sl_node_family sl_family_stem = {"stem", k_nodes, SL_COUNT_OF(k_nodes)};
