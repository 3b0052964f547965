/* The io family: the sink nodes that write a run's outputs (results.h5 and
 * PNGs), appended by the run for each graph output and planned like any
 * node. One line per node: the descriptor lives in nodes/io/<node>.c. */
#include "engine/graph/node.h"

#define IO_NODES(X) \
  X(write_h5)       \
  X(write_png)

SL_NODE_FAMILY(io, IO_NODES)
