/* The basic family: elementary nodes that let the engine be tested and
 * measured without scientific nodes. One line per node: the descriptor lives
 * in nodes/basic/<node>.c, declared here where it is listed. */
#include "engine/graph/node.h"

#define BASIC_NODES(X) \
  X(affine)            \
  X(clip)              \
  X(constant)          \
  X(converged)         \
  X(gather)            \
  X(iteration)         \
  X(ramp)              \
  X(stream)            \
  X(subtract)          \
  X(sum)               \
  X(transpose_scan)    \
  X(variance)

SL_NODE_FAMILY(basic, BASIC_NODES)
