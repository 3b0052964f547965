/* Flag counts: the small side output with which bslz4_decode tells
 * mask_correct where flagged pixels are, so that the correction never reads
 * a whole frame again (issue 12). For each frame, a u32 per group of
 * SL_FLAG_GROUP_PIXELS consecutive pixels (raster order; the last group may
 * be shorter): how many of the group's pixels hold the dtype's maximum (every
 * bit set: 0xFF, 0xFFFF, 0xFFFFFFFF, the detector's flag value). The decoder
 * gets them from the AND of each block's bit-rows while the block is in
 * cache (sl_bslz4_opts.ones); mask_correct compares a group's count with the
 * static bad pixels at the flag value in it and walks the group only when a
 * pixel outside the static mask is flagged. The CUDA kernels use the same
 * layout (shaders/cuda/detector/). */
#ifndef SL_FLAG_COUNTS_H
#define SL_FLAG_COUNTS_H

#include <stdint.h>

#include "engine/core/tensor.h"
#include "shaders/cuda/detector/flag_groups.h" /* SL_FLAG_GROUP_PIXELS, sl_flag_groups */

/* counts[0 .. sl_flag_groups(pixels)) of one frame whose ones bitmap starts
 * at bit `first` of `ones` (bit b in byte b / 8, LSB first; set = every bit
 * of the pixel set). */
void sl_flag_counts_from_bitmap(const uint8_t *ones, uint64_t first, int64_t pixels,
                                uint32_t *counts);

/* counts[0 .. sl_flag_groups(pixels)) of one u8, u16 or u32 frame, by value
 * (frames that were not bit-transposed: raw or plain data). */
void sl_flag_counts_of_frame(const void *frame, sl_dtype t, int64_t pixels, uint32_t *counts);

#endif
