/* Exact first moments of one detector frame in one sweep, shared by the
 * moments and com nodes: S = sum I, Sr = sum r*I, Sc = sum c*I over pixel
 * indices (r, c) from 0, in u64.
 *
 * The sweep adds every pixel into its column's sum and its row's sum (u32 for
 * u8/u16 frames where that cannot overflow, u64 otherwise), then
 * Sr = sum_r r * row_r and Sc = sum_c c * col_c: two widening adds per pixel
 * and no multiplications in the inner loop, which the compiler vectorises. */
#ifndef SL_STEM_FRAME_MOMENTS_H
#define SL_STEM_FRAME_MOMENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "../../engine/core/status.h"
#include "../../engine/core/tensor.h"
#include "../../engine/graph/node.h"

/* Whether S, Sr and Sc of an H x W frame of `t` provably fit in u64 (every
 * pixel at the dtype max). */
bool sl_frame_moments_fit(sl_dtype t, int64_t h, int64_t w);

/* Bytes of scratch one worker needs for an H x W frame (column sums). */
int64_t sl_frame_moments_scratch(int64_t w);

/* out = {S, Sr, Sc} of the frame `f` (dtype t). `scratch` holds
 * sl_frame_moments_scratch(w) bytes, 8-byte aligned. */
void sl_frame_moments(const void *f, sl_dtype t, int64_t h, int64_t w, void *scratch,
                      uint64_t out[3]);

/* Receives the moments m = {S, Sr, Sc} of frame p of the chunk (0-based). */
typedef void (*sl_frame_moments_emit)(const sl_kernel_args *a, void *ctx, int64_t p,
                                      const uint64_t m[3]);

/* Computes the moments of every frame of the chunk (input 0 of a->node,
 * H x W frames) in parallel over the positions, each worker with its own
 * scratch, and hands each to `emit`. False when a worker could not allocate
 * its scratch (sl_frame_moments_scratch(W) bytes); its frames are then not
 * all emitted. */
bool sl_frame_moments_chunk(const sl_kernel_args *a, sl_frame_moments_emit emit, void *ctx);

#endif
