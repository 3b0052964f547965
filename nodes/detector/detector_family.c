/* The detector family: reading detector files and correcting their frames.
 * One line per node: the descriptor lives in nodes/detector/<node>.c,
 * declared here where it is listed. */
#include "engine/graph/node.h"

#define DETECTOR_NODES(X) \
  X(bin_detector)         \
  X(bslz4_decode)         \
  X(detector_mask)        \
  X(hdf5_source)          \
  X(mask_correct)

#define DETECTOR_DECLARE(name) extern const sl_node_desc sl_node_##name;
#define DETECTOR_ENTRY(name) &sl_node_##name,
DETECTOR_NODES(DETECTOR_DECLARE)
static const sl_node_desc *const k_nodes[] = {DETECTOR_NODES(DETECTOR_ENTRY)};

const sl_node_family sl_family_detector = {"detector", k_nodes, SL_COUNT_OF(k_nodes)};
