/* Loads of detector frames in "units" (.cu files only).
 *
 * A frame is cut into units of V consecutive pixels: V = 16 / sizeof(T) (one
 * 16-byte load) when rows are a multiple of 16 bytes and the chunk is 16-byte
 * aligned (the pool's buffers are), else V = 1 (scalar loads; odd detector
 * sizes). Per-pixel class bytes (an H*W u8 table in device memory, read
 * through L1) are loaded unit by unit beside the pixels.
 *
 * Frame kernels that reduce run one WARP per frame (grid-stride over frames):
 * each lane accumulates its units in registers (u32 per unit where provably
 * exact: at most 16 u8 or 8 u16 values; u64 per lane), then a shuffle
 * reduction gives the frame's u64 result: no shared-memory barriers and no
 * global atomics. Several loads are in flight per lane (unrolled loop) and
 * 64 warps per SM keep HBM busy. When a call has too few frames for that,
 * a kernel whose sums allow it splits each frame over a few warps
 * (frame_split, frame_part), which add their parts atomically. */
#ifndef SL_CUDA_FRAME_UNITS_CUH
#define SL_CUDA_FRAME_UNITS_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define SL_FRAME_WARPS 8 /* warps per block of the warp-per-frame kernels */

/* Unit loads: V elements of T (16 bytes, or one element), V class bytes. */
template <typename T, int V>
__device__ __forceinline__ void load_unit(const T *__restrict__ p, T (&e)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    uint4 q = __ldcs(reinterpret_cast<const uint4 *>(p)); /* streamed once: evict first */
    memcpy(e, &q, 16);
  } else {
    e[0] = p[0];
  }
}
template <int V>
__device__ __forceinline__ void load_cls(const uint8_t *__restrict__ p, uint8_t (&c)[V]) {
  if constexpr (V == 16) {
    uint4 q = __ldg(reinterpret_cast<const uint4 *>(p));
    memcpy(c, &q, 16);
  } else if constexpr (V == 8) {
    uint2 q = __ldg(reinterpret_cast<const uint2 *>(p));
    memcpy(c, &q, 8);
  } else if constexpr (V == 4) {
    unsigned q = __ldg(reinterpret_cast<const unsigned *>(p));
    memcpy(c, &q, 4);
  } else {
    c[0] = __ldg(p);
  }
}

/* The per-unit partial sum type: u32 holds 16 u8 or 8 u16 values exactly. */
template <typename T> struct unit_sum_type { typedef uint32_t t; };
template <> struct unit_sum_type<uint32_t> { typedef unsigned long long t; };

/* Pixels per unit for frames at `frames` with rows of w elements of es bytes:
 * 16-byte units when every row starts 16-byte aligned, else 1. */
static inline int frame_unit_width(const void *frames, int64_t w, size_t es) {
  int v = (int)(16 / es);
  if (((uintptr_t)frames & 15) == 0 && ((size_t)w * es) % 16 == 0) return v;
  return 1;
}

/* Blocks for a warp-per-frame kernel over `frames` frames: one warp per
 * frame, at most 8 blocks per multiprocessor (grid-stride covers the rest). */
static inline unsigned frame_grid(int64_t frames, int multiprocessors) {
  int64_t g = (frames + SL_FRAME_WARPS - 1) / SL_FRAME_WARPS, cap = (int64_t)multiprocessors * 8;
  if (g > cap) g = cap;
  return (unsigned)(g < 1 ? 1 : g);
}

/* Warps per frame for a kernel that may split its frames (sums of integers:
 * the parts add up in any order): one while the frames alone give every
 * multiprocessor 48 warps (three quarters of its 64), else as many as reach
 * that, at most 8. A chunk of 1877 frames on the H200's 132 multiprocessors
 * gave 14 warps each, and its sweep ran at half the bandwidth of a resident
 * acquisition's. */
static inline int frame_split(int64_t frames, int multiprocessors) {
  const int64_t want = (int64_t)multiprocessors * 48;
  if (frames <= 0 || frames >= want) return 1;
  int64_t s = (want + frames - 1) / frames;
  return (int)(s > 8 ? 8 : s);
}

/* Warp task t of a frame kernel split `split` ways: its frame f and its part
 * [i0, i1) of the frame's n units (pieces of whole multiples of 32, so that
 * lane l's units stay l + 32 k). */
__device__ __forceinline__ void frame_part(long long t, int split, uint32_t n, long long *f, uint32_t *i0,
                                           uint32_t *i1) {
  *f = t / split;
  const uint32_t part = (uint32_t)(t - *f * split);
  const uint32_t per = ((n + (uint32_t)split - 1) / (uint32_t)split + 31u) & ~31u;
  *i0 = part * per < n ? part * per : n;
  *i1 = *i0 + per < n ? *i0 + per : n;
}

#endif
