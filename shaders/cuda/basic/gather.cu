/* gather on CUDA. See gather.h. One asynchronous copy on the node's queue:
 * the chunk's items are contiguous in both buffers, and the executor points
 * out[0] at the chunk's place in the whole output (a concat reduction). */
#include "shaders/cuda/basic/gather.h"
#include "shaders/cuda/common/launch.cuh"

extern "C" sl_code sl_cuda_gather(const sl_cuda_gather_params *p, sl_kernel_args *a) {
  if (a->pos_count <= 0) return SL_OK;
  const size_t bytes = (size_t)a->pos_count * (size_t)p->item_bytes;
  cudaError_t e = cudaMemcpyAsync(a->out[0], a->in[0], bytes, cudaMemcpyDeviceToDevice, sl_cuda_queue(a));
  return sl_cuda_runtime_fail(a, e, a->node_id, "gather copy");
}
