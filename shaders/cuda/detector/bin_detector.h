/* bin_detector on CUDA (bin_detector.cu): factor x factor pixel sums, in the
 * output dtype as the CPU (exact), and with a max_value below the input
 * dtype's maximum the audit that every input value is <= max_value; the
 * first value above it is reported by a later call or by finalize with the
 * CPU's message (chunk, frame, scan position, pixel). */
#ifndef SL_CUDA_BIN_DETECTOR_H
#define SL_CUDA_BIN_DETECTOR_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_bin_detector_params {
  sl_cuda_frame_shape frames; /* input 0 */
  sl_cuda_frame_shape binned; /* output 0 (u8, u16, u32 or u64) */
  int factor;
  int64_t max_value; /* 0: no audit */
  /* The scan axes of the frames (for the error's scan position). */
  int scan_rank;
  int64_t scan_dims[SL_MAX_RANK];
  sl_cuda_state_holder device_state;
} sl_cuda_bin_detector_params;

/* Bytes of the node's device table (cost().device_state_bytes): the error
 * and audit words when it audits (max_value below the input's maximum), else 0. */
int64_t sl_cuda_bin_detector_table_bytes(bool audit);

/* out[0] = the binned frames of the chunk. */
sl_code sl_cuda_bin_detector(const sl_cuda_bin_detector_params *p, sl_kernel_args *a);
/* After the last chunk: waits once and reports an audit failure. */
sl_code sl_cuda_bin_detector_finalize(const sl_cuda_bin_detector_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
