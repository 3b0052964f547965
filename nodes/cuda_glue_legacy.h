/* TEMPORARY (issue 10, phase 1): the CUDA entry points the node descriptors
 * name today, while the node files are converted to typed params elsewhere.
 * The launchers in shaders/cuda/<family>/<node>.cu take plain parameter
 * structs; cuda_glue_legacy.c fills them from the node and calls them. In
 * phase 2 each adapter moves into its node file and this file goes away.
 *
 * The descriptors name sl_cuda_<node>, which is now the launcher's own name
 * (with a params argument): the macros below send the descriptors' names to
 * the adapters instead. A file that includes a launcher header must not
 * include this one. */
#ifndef SL_CUDA_GLUE_LEGACY_H
#define SL_CUDA_GLUE_LEGACY_H

#include <stdint.h>

#include "engine/graph/node.h"
#include "shaders/cuda/common/launcher.h" /* SL_CUDA_KERNEL */

#ifndef SL_CUDA_GLUE_LEGACY_IMPL
#define sl_cuda_bslz4_decode sl_cuda_legacy_bslz4_decode
#define sl_cuda_mask_correct sl_cuda_legacy_mask_correct
#define sl_cuda_bin_detector sl_cuda_legacy_bin_detector
#define sl_cuda_bin_detector_finalize sl_cuda_legacy_bin_detector_finalize
#endif

/* The adapters: each has its node's CPU semantics exactly (integer results
 * equal the CPU backend's bit for bit). */
sl_code sl_cuda_legacy_bslz4_decode(sl_kernel_args *a);
sl_code sl_cuda_legacy_mask_correct(sl_kernel_args *a);
sl_code sl_cuda_legacy_bin_detector(sl_kernel_args *a);
sl_code sl_cuda_legacy_bin_detector_finalize(sl_kernel_args *a);

/* Defined by the node files (tables their prepare() built). */
/* mask_correct: the H*W 0/1 mask read from param 'mask_file', or NULL. */
const uint8_t *sl_mask_correct_file_mask(const struct sl_node *n);

#endif
