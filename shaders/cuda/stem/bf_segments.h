/* bf_segments on CUDA (bf_segments.cu): per frame, the u64 sum over each
 * segment of the bright-field disk, equal to the CPU kernel's bit for bit,
 * into the whole output segments [n, scan...] at the call's positions; and
 * the offsets [n, 3] of the segments, the same doubles as the CPU's.
 *
 * Each call builds the segment of every pixel of the extent circle's window
 * on the device (the layout's own rule, bf_segments_layout.h, with d2 as the
 * CPU computes it) from the disk of the params or of the `disk` input, which
 * lies on the device; bad disk values are recorded on the device and
 * reported by a later call or by finalize, with the CPU's message. */
#ifndef SL_CUDA_BF_SEGMENTS_H
#define SL_CUDA_BF_SEGMENTS_H

#include "shaders/cuda/common/launcher.h"
#include "shaders/cuda/stem/bf_segments_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_bf_segments_params {
  sl_cuda_frame_shape frames; /* input 0 */
  int64_t positions;          /* of the whole scan: segment k's image starts at k * positions */
  sl_bf_segment_layout layout;
  /* The disk: (cr, cc, radius) of the params, or with use_disk a->in[1]
   * (f64 centre row, col, radius on the device). */
  bool use_disk;
  double cr, cc, radius;
  sl_cuda_state_holder device_state;
} sl_cuda_bf_segments_params;

/* Bytes of the node's device table (cost().device_state_bytes): the error
 * word, the bounding-box record and a segment byte per pixel. */
int64_t sl_cuda_bf_segments_table_bytes(const sl_cuda_frame_shape *frames);

/* out[0][k * positions + pos_start + p] = frame p's sum over segment k (u64);
 * out[1] = the offsets [n][3]. Either may be NULL (an unread output: the
 * node's omit_unread_outputs), and is then left alone. */
sl_code sl_cuda_bf_segments(const sl_cuda_bf_segments_params *p, sl_kernel_args *a);
/* After the last chunk: waits once and reports a recorded disk error. */
sl_code sl_cuda_bf_segments_finalize(const sl_cuda_bf_segments_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
