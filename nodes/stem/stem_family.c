/* The stem family: 4D-STEM products from detector frames. One line per node. */
#include "engine/graph/node.h"

extern const sl_node_desc sl_node_com, sl_node_disk_fit, sl_node_dpc, sl_node_idpc,
    sl_node_moments, sl_node_synthetic_4dstem, sl_node_virtual_detectors, sl_node_virtual_image;

static const sl_node_desc *const stem_nodes[] = {
    &sl_node_com,     &sl_node_disk_fit,         &sl_node_dpc,
    &sl_node_idpc,    &sl_node_moments,          &sl_node_synthetic_4dstem,
    &sl_node_virtual_detectors, &sl_node_virtual_image,
};

const sl_node_family sl_family_stem = {"stem", stem_nodes, SL_COUNT_OF(stem_nodes)};
