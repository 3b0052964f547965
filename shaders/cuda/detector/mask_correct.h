/* mask_correct on CUDA (mask_correct.cu): bad pixels (the mask input, the
 * mask file, and with `flagged` pixels at the dtype maximum) replaced by the
 * median of their valid 3x3 neighbours, or zero, or the frames copied;
 * equal to the CPU bit for bit. */
#ifndef SL_CUDA_MASK_CORRECT_H
#define SL_CUDA_MASK_CORRECT_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The node's `policy` (same order as its choices). */
typedef enum sl_cuda_mask_policy {
  SL_CUDA_MASK_MEDIAN = 0,
  SL_CUDA_MASK_ZERO = 1,
  SL_CUDA_MASK_NONE = 2 /* copy */
} sl_cuda_mask_policy;

typedef struct sl_cuda_mask_correct_params {
  sl_cuda_frame_shape frames; /* input 0 */
  int policy;                 /* sl_cuda_mask_policy */
  bool flagged;               /* pixels at the dtype maximum are bad in their frame */
  /* Input 1 (whole [H, W], > 0 = bad) is connected: a->in[1] on the device. */
  bool has_mask;
  sl_dtype mask_dtype; /* SL_U8, SL_U16 or SL_U32 */
  /* The H*W 0/1 mask read from the node's mask file (host memory, read on the
   * first call), or NULL. */
  const uint8_t *file_mask;
  /* Input 2 is connected: a->in[2] holds bslz4_decode's flag counts of these
   * frames on the device (u32 per frame and group of SL_FLAG_GROUP_PIXELS,
   * nodes/detector/flag_counts.h); with `flagged`, groups whose count is
   * that of their static bad pixels at the flag value are not scanned. */
  bool has_counts;
  sl_cuda_state_holder device_state;
} sl_cuda_mask_correct_params;

/* Bytes of the node's device table (cost().device_state_bytes) for calls of
 * up to `positions` frames and at most `n_bad` static bad pixels: the static
 * map and list, and per frame the static corrections and, with `flagged`, a
 * shadow frame and a bit per pixel for the flagged ones, and with the flag
 * counts, a u32 per group for the static bad pixels at the flag value. */
int64_t sl_cuda_mask_correct_table_bytes(const sl_cuda_frame_shape *frames, bool flagged, bool has_counts,
                                         int64_t positions, int64_t n_bad);

/* out[0] = the corrected frames of the chunk. */
sl_code sl_cuda_mask_correct(const sl_cuda_mask_correct_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
