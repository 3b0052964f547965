/* transpose_scan on CUDA (transpose_scan.cu): a chunk of a scan-major stream
 * written into the whole pixel-major output, through shared-memory tiles so
 * that reads and writes are both coalesced. */
#ifndef SL_CUDA_TRANSPOSE_SCAN_H
#define SL_CUDA_TRANSPOSE_SCAN_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_transpose_scan_params {
  int elem_bytes;         /* 1, 2, 4 or 8 */
  int64_t item_elems;     /* elements per scan position */
  int64_t scan_positions; /* positions of the whole scan: the output's row length */
} sl_cuda_transpose_scan_params;

/* out[0][e * scan_positions + p] = in[0][p * item_elems + e]: out[0] points
 * at the chunk's first position (the executor's concat_scan_last). */
sl_code sl_cuda_transpose_scan(const sl_cuda_transpose_scan_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
