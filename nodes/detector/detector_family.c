/* The detector family: reading detector files and correcting their frames.
 * One line per node: the descriptor lives in nodes/detector/<node>.c,
 * declared here where it is listed. */
#include "engine/graph/node.h"

#define DETECTOR_NODES(X) \
  X(bin_detector)         \
  X(bslz4_decode)         \
  X(detector_mask)        \
  X(detector_preview)     \
  X(hdf5_source)          \
  X(mask_correct)

SL_NODE_FAMILY(detector, DETECTOR_NODES)
