/* sum on CUDA (sum.cu): the element-wise sum over the scan into a whole
 * output that accumulates over chunks: u64 for integers (any order: exact),
 * f64 for floats, adding positions in order as the CPU does (identical
 * doubles). */
#ifndef SL_CUDA_SUM_H
#define SL_CUDA_SUM_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_sum_params {
  sl_dtype dtype;     /* of input 0: u8, u16, u32, u64, f32 or f64 */
  int64_t item_elems; /* elements per scan position */
} sl_cuda_sum_params;

/* out[0][e] += the sum over the chunk's positions of in[0][p][e]: out[0] is
 * the run's accumulator (the node declares SUM and folds: the executor sets
 * it to 0 at the pass's start, sl_combine); floats keep adding positions
 * in scan order. */
sl_code sl_cuda_sum(const sl_cuda_sum_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
