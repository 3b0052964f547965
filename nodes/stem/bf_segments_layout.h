/* The layout of the bright-field disk's segments: defined once in
 * shaders/cuda/stem/bf_segments_layout.h, where the CUDA kernel of
 * bf_segments can include it too (shaders/ may not include nodes/). */
#ifndef SL_BF_SEGMENTS_LAYOUT_H
#define SL_BF_SEGMENTS_LAYOUT_H

#include "shaders/cuda/stem/bf_segments_layout.h"

#endif
