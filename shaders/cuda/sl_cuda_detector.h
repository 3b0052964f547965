/* Detector/STEM CUDA kernels (shaders/cuda/detector.cu): the extra finalize
 * launchers that report device-side errors (the bin_detector max_value audit,
 * a bad `disk` input) after the last chunk, and the small accessors through
 * which the kernels read tables the CPU nodes prepared (plain C; the node files
 * define the accessors, detector.cu calls them). */
#ifndef SL_CUDA_DETECTOR_H
#define SL_CUDA_DETECTOR_H

#include <stdint.h>

#include "engine/graph/node.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finalize launchers: wait for the node's kernels (one stream sync per run)
 * and report an error a kernel recorded in the node's device error word. */
sl_code sl_cuda_bin_detector_finalize(sl_kernel_args *a);
sl_code sl_cuda_virtual_image_finalize(sl_kernel_args *a);
sl_code sl_cuda_virtual_detectors_finalize(sl_kernel_args *a);

/* virtual_image: the row spans prepare() built ({offset, length} int64 pairs,
 * 2 * n_spans values), or NULL when they are built at run time (disk input). */
const int64_t *sl_virtual_image_spans(const struct sl_node *n, int64_t *n_spans);
/* virtual_detectors: the class runs prepare() built ({len, cls} u32 pairs),
 * or NULL when they are built at run time (disk input). */
const uint32_t *sl_virtual_detectors_runs(const struct sl_node *n, int64_t *n_runs);
/* com: the input that carries the scan (frames, or input 's' when the node
 * reads the moments s, sr, sc instead). */
const sl_tensor_desc *sl_com_scan_desc(const struct sl_node *n);
/* mask_correct: the H*W 0/1 mask read from param 'mask_file', or NULL. */
const uint8_t *sl_mask_correct_file_mask(const struct sl_node *n);

#ifdef __cplusplus
}
#endif

#endif
