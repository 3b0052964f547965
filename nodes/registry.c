/* The node registry: every node type the engine knows, in one table. A new
 * node family adds its descriptors here. */
#include <string.h>

#include "../engine/graph/node.h"

extern const sl_node_desc sl_node_synthetic_4dstem;
extern const sl_node_desc sl_node_virtual_image;
extern const sl_node_desc sl_node_constant;
extern const sl_node_desc sl_node_affine;
extern const sl_node_desc sl_node_ramp;
extern const sl_node_desc sl_node_sum;
extern const sl_node_desc sl_node_subtract;
extern const sl_node_desc sl_node_hdf5_source;
extern const sl_node_desc sl_node_detector_mask;
extern const sl_node_desc sl_node_bslz4_decode;
extern const sl_node_desc sl_node_mask_correct;
extern const sl_node_desc sl_node_bin_detector;
extern const sl_node_desc sl_node_dpc;
extern const sl_node_desc sl_node_idpc;
extern const sl_node_desc sl_node_disk_fit;
extern const sl_node_desc sl_node_virtual_detectors;
extern const sl_node_desc sl_node_moments;
extern const sl_node_desc sl_node_com;

/* Sorted by type name. */
static const sl_node_desc *const k_nodes[] = {
    &sl_node_affine,       &sl_node_bin_detector, &sl_node_bslz4_decode,
    &sl_node_com,          &sl_node_constant,     &sl_node_detector_mask,
    &sl_node_disk_fit,     &sl_node_dpc,          &sl_node_hdf5_source,
    &sl_node_idpc,         &sl_node_mask_correct, &sl_node_moments,
    &sl_node_ramp,         &sl_node_subtract,
    &sl_node_sum,          &sl_node_synthetic_4dstem, &sl_node_virtual_detectors,
    &sl_node_virtual_image,
};

const sl_node_desc *sl_node_find(const char *type) {
  for (size_t i = 0; i < sizeof k_nodes / sizeof k_nodes[0]; i++)
    if (!strcmp(k_nodes[i]->type, type)) return k_nodes[i];
  return NULL;
}

const sl_node_desc *const *sl_node_all(int *count) {
  *count = (int)(sizeof k_nodes / sizeof k_nodes[0]);
  return k_nodes;
}
