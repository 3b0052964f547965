/* The 8x8 bit transpose at the heart of bitshuffle, shared by the CPU
 * decoder (nodes/codec/bitshuffle_simd.c) and the CUDA decoder
 * (shaders/cuda/codec/bslz4_device.cuh), so that both un-transpose with the
 * same operations. A pure function of a word: it lives in core because both
 * the node layer and the device kernels may include core and nothing of
 * each other. */
#ifndef SL_BIT_TRANSPOSE_H
#define SL_BIT_TRANSPOSE_H

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
