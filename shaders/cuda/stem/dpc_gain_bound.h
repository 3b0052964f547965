/* The gain bound's sums on the device (dpc_gain_bound.cu): dpc without the
 * probe's params bounds the parallax's gain over the fit's window of the
 * BF segments (nodes/stem/dpc_parallax.h, sl_dpc_parallax_gain_bound) before
 * it fits the axis. The host's formula needs only integer sums of that
 * window: per segment the sum of its counts and of their squares, and per
 * position the sum over the segments. Integer sums are exact in any order,
 * so the device's are the host's (sl_dpc_parallax_gain_sums) to the bit,
 * and the host makes the bound from them as from its own: the node reads
 * back (3 n + wr wc) x 8 bytes (130 KB) instead of the window (2.75 MB at
 * 21 segments, 2-3 ms on the H200) or the band (11 MB at 256 x 256, 9-10 ms). */
#ifndef SL_CUDA_DPC_GAIN_BOUND_H
#define SL_CUDA_DPC_GAIN_BOUND_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per segment: the sum of its counts, and the sum of their squares as a
 * 128-bit integer (low, high 64 bits). */
#define SL_DPC_GAIN_SEGMENT_SUMS 3

/* Bytes of the device scratch for n segments and a wr x wc window. */
int64_t sl_cuda_dpc_gain_sums_bytes(int n, int64_t wr, int64_t wc);

/* The sums of sl_dpc_parallax_gain_sums (same layout, same bits) from n
 * segments on the device: the window's first element at `window`, rows
 * row_stride apart, segments segment_stride apart; offsets (device) [n][3],
 * a segment used where offsets[3 u + 2] > 0. scratch: device memory of
 * sl_cuda_dpc_gain_sums_bytes. segment_sums [n][SL_DPC_GAIN_SEGMENT_SUMS]
 * and position_sums [wr wc] are host memory, read back; waits for the
 * device. */
sl_code sl_cuda_dpc_gain_sums(sl_kernel_args *a, const uint64_t *window, int64_t row_stride, int64_t segment_stride,
                              int n, int64_t wr, int64_t wc, const double *offsets, uint64_t *scratch,
                              uint64_t *segment_sums, uint64_t *position_sums);

#ifdef __cplusplus
}
#endif

#endif
