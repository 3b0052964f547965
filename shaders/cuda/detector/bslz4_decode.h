/* bslz4_decode on CUDA (bslz4_decode.cu): the stored chunks of a packed
 * device buffer (bitshuffle-LZ4, bitshuffle or raw; sl_packed_items) to
 * frames, bit for bit the CPU decoder's output; a malformed chunk fails with
 * SL_ERR_FORMAT and the CPU's message, at the call that finds it, the next
 * one, or the last chunk of the scan at the latest. */
#ifndef SL_CUDA_BSLZ4_DECODE_H
#define SL_CUDA_BSLZ4_DECODE_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_bslz4_decode_params {
  /* Input 0: the encoded frames (dtype and dims once decoded, the encoding,
   * frames per stored chunk, the dataset's block size). */
  sl_tensor_desc chunks;
  /* Wait and check after every call (one 80-byte copy and a queue sync per
   * chunk of the scan) instead of one call later. */
  bool check_every_call;
  /* Output 1 (flag_counts) is read: a->out[1] receives the flag counts of
   * the decoded frames (nodes/detector/flag_counts.h). */
  bool flag_counts;
  sl_cuda_state_holder device_state;
} sl_cuda_bslz4_decode_params;

/* Bytes of the node's device table (cost().device_state_bytes) for calls of
 * up to `positions` positions of input `in`: the error record, and the entry
 * and block tables of the largest call (0 for plain frames). */
int64_t sl_cuda_bslz4_decode_table_bytes(const sl_tensor_desc *in, int64_t positions);

/* out[0] = the decoded frames of positions [pos_start, pos_start + pos_count);
 * with p->flag_counts, out[1] = their flag counts. */
sl_code sl_cuda_bslz4_decode(const sl_cuda_bslz4_decode_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
