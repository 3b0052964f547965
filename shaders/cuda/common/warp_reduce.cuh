/* Warp-wide reductions by shuffles (.cu files only). */
#ifndef SL_CUDA_WARP_REDUCE_CUH
#define SL_CUDA_WARP_REDUCE_CUH

#include <cuda_runtime.h>

/* The sum of v over the warp, in lane 0 (all 32 lanes take part). */
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}

/* The minimum of v over the warp, in lane 0 (all 32 lanes take part). */
__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    unsigned long long t = __shfl_down_sync(0xFFFFFFFFu, v, o);
    v = t < v ? t : v;
  }
  return v;
}

#endif
