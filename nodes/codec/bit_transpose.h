/* The 8x8 bit transpose at the heart of bitshuffle, shared by the CPU
 * decoder (bitshuffle_simd.c) and the CUDA kernel (shaders/cuda/bslz4.cu),
 * so that both un-transpose with the same operations. */
#ifndef SL_CODEC_BIT_TRANSPOSE_H
#define SL_CODEC_BIT_TRANSPOSE_H

#include <stdint.h>

#ifdef __CUDACC__
#define SL_BIT_TRANSPOSE_FN static __host__ __device__ __forceinline__
#else
#define SL_BIT_TRANSPOSE_FN static inline
#endif

/* 8x8 bit transpose of a 64-bit word: bit t of byte k -> bit k of byte t. */
SL_BIT_TRANSPOSE_FN uint64_t sl_tr8(uint64_t x) {
  uint64_t t;
  t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
  x ^= t ^ (t << 28);
  return x;
}

#endif
