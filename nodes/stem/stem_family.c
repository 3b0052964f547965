/* The stem family: 4D-STEM products from detector frames. One line per node:
 * the descriptor lives in nodes/stem/<node>.c, declared here where it is
 * listed. */
#include "engine/graph/node.h"

#define STEM_NODES(X)   \
  X(bf_segments)        \
  X(com)                \
  X(disk_fit)           \
  X(dpc)                \
  X(idpc)               \
  X(moments)            \
  X(synthetic_4dstem)   \
  X(virtual_detectors)  \
  X(virtual_image)

SL_NODE_FAMILY(stem, STEM_NODES)
