/* TEMPORARY (issue 10, phase 1): node files not yet converted include this
 * path; the declarations are in nodes/cuda_glue_legacy.h. Removed in phase 2
 * (node files include shaders/cuda/<family>/<node>.h instead). */
#ifndef SL_SL_CUDA_DETECTOR_SHIM_H
#define SL_SL_CUDA_DETECTOR_SHIM_H
#include "nodes/cuda_glue_legacy.h"
#endif
