/* Exact first moments of one detector frame in one sweep, shared by the
 * moments and com nodes: S = sum I, Sr = sum r*I, Sc = sum c*I over pixel
 * indices (r, c) from 0, in u64.
 *
 * Two sweeps, chosen per chunk by the node's `simd` param (sl_simd_resolve):
 *  - u16 frames 16 to 32768 pixels wide on the AVX2 path: per 16 pixels one
 *    vpmaddwd against ones (S) and one against the column indices (Sc), int32
 *    accumulators spilled to int64 before they can overflow (madd_u16.h);
 *    Sr from the row sums: within a block of rows the running total T is
 *    added into P once per row, and sum_r r*S_r = (r0 + n) * T - P.
 *  - otherwise (u8, u32, other widths, the portable path): every pixel is
 *    added into its column's sum and its row's sum (u32 for u8/u16 frames
 *    where that cannot overflow, u64 otherwise), then Sr = sum_r r * row_r
 *    and Sc = sum_c c * col_c: two widening adds per pixel and no
 *    multiplications in the inner loop, which the compiler vectorises.
 * Both give the same u64 values. */
#ifndef SL_FRAME_MOMENTS_H
#define SL_FRAME_MOMENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/simd.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/graph/node.h"

/* Whether S, Sr and Sc of an H x W frame of `t` provably fit in u64 (every
 * pixel at the dtype max). */
bool sl_frame_moments_fit(sl_dtype t, int64_t h, int64_t w);

/* Bytes of scratch one worker needs for an H x W frame (column sums, or the
 * AVX2 sweep's column weights). */
int64_t sl_frame_moments_scratch(int64_t w);

/* Receives the moments m = {S, Sr, Sc} of frame p of the chunk (0-based). */
typedef void (*sl_frame_moments_emit)(const sl_kernel_args *a, void *ctx, int64_t p,
                                      const uint64_t m[3]);

/* The AVX2 sweep's weights (u16 frames 16 to 32768 columns wide), in the
 * worker's scratch: the column index of every column of the full vectors
 * (W/16 of them), then for the last vector, loaded at column W - 16, 16
 * ones and 16 column indices with 0 in the lanes that the full vectors
 * already counted (all 0 when 16 divides W): W + 32 int16. Shared with
 * virtual_detectors' fused sweep, which reads Sc's weights from the same
 * table. Defined in x86-64 builds, the only ones with the AVX2 sweeps. */
void sl_frame_moments_madd_weights(int16_t *wt, int64_t w);
/* The AVX-512 sweep's weights (sl_madd_avx512_used): the column index of
 * every column of the (W + 31) / 32 vectors of 32, 0 past W. */
void sl_frame_moments_madd512_weights(int16_t *cw, int64_t w);

/* Computes the moments of every frame of the chunk (input 0 of a->node,
 * H x W frames) in parallel over the positions, each worker with its own
 * scratch, and hands each to `emit`. `simd` is the node's `simd` param
 * (resolved here by sl_simd_resolve), each worker sweeping in its lent
 * scratch (sl_worker_scratch: the node declares sl_frame_moments_scratch(W)
 * as its per_worker_bytes). Fails (a->err) on an unusable SIMD choice or
 * without that scratch. */
sl_code sl_frame_moments_chunk(const sl_kernel_args *a, sl_simd simd, sl_frame_moments_emit emit,
                               void *ctx);

#endif
