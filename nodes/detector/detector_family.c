/* The detector family: reading detector files and correcting their frames.
 * One line per node. */
#include "engine/graph/node.h"

extern const sl_node_desc sl_node_bin_detector, sl_node_bslz4_decode, sl_node_detector_mask,
    sl_node_hdf5_source, sl_node_mask_correct;

static const sl_node_desc *const k_nodes[] = {
    &sl_node_bin_detector, &sl_node_bslz4_decode, &sl_node_detector_mask,
    &sl_node_hdf5_source,  &sl_node_mask_correct,
};

const sl_node_family sl_family_detector = {"detector", k_nodes, SL_COUNT_OF(k_nodes)};
