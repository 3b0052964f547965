/* The layout of the flag counts that bslz4_decode emits and mask_correct
 * reads (nodes/detector/flag_counts.h), shared by the CPU nodes and the CUDA
 * kernels (which may include nothing from nodes/): per frame, a u32 per group
 * of SL_FLAG_GROUP_PIXELS consecutive pixels in raster order, the last group
 * possibly shorter. Plain C. */
#ifndef SL_FLAG_GROUPS_H
#define SL_FLAG_GROUPS_H

#include <stdint.h>

/* Pixels per group: small enough that a group holding a truly flagged pixel
 * is cheap to walk, large enough that the counts are ~0.1% of a u16 frame.
 * A multiple of 16, so that the CUDA scan's 16-byte units and the CPU's
 * bitmap bytes never straddle two groups. */
#define SL_FLAG_GROUP_PIXELS 1024

/* Groups of a frame of `pixels` pixels. */
static inline int64_t sl_flag_groups(int64_t pixels) {
  return (pixels + SL_FLAG_GROUP_PIXELS - 1) / SL_FLAG_GROUP_PIXELS;
}

#endif
