/* Per-frame moments S, Sr, Sc of detector frames, one warp per frame (.cu
 * files only): for moments, virtual_detectors (its outputs s, sr, sc) and com
 * (which divides them). Integer sums in u64, any order: equal to the CPU bit
 * for bit; the CoM is the f64 division of the same u64 values (identical
 * doubles). */
#ifndef SL_CUDA_FRAME_MOMENTS_CUH
#define SL_CUDA_FRAME_MOMENTS_CUH

#include <stdint.h>

#include "shaders/cuda/common/launcher.h"

/* S, Sr, Sc of a->pos_count frames of a->in[0] into a->out[first_out],
 * a->out[first_out + 1], a->out[first_out + 2]. */
sl_code sl_cuda_frame_moments(sl_kernel_args *a, const sl_cuda_frame_shape *f, int first_out);
/* The centre of mass of each frame: Sr/S into a->out[0], Sc/S into
 * a->out[1], frame p of the chunk at element p (the executor points out[]
 * at the chunk's place: com's outputs are a declared concat); NaN and NaN
 * where S = 0. */
sl_code sl_cuda_frame_centre_of_mass(sl_kernel_args *a, const sl_cuda_frame_shape *f);

#endif
