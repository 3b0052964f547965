/* gather on CUDA (gather.cu): a chunk's items copied to their place in the
 * whole output, device to device on the node's queue. */
#ifndef SL_CUDA_GATHER_H
#define SL_CUDA_GATHER_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_gather_params {
  int64_t item_bytes; /* bytes of one scan position's item */
} sl_cuda_gather_params;

/* out[0][0 .. pos_count) = in[0][0 .. pos_count), item by item: out[0] is the
 * chunk's place in the whole output (the executor's concat). */
sl_code sl_cuda_gather(const sl_cuda_gather_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
