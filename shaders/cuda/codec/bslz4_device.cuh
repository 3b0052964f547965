/* The bitshuffle-LZ4 block decoder on the device (.cu files only): one warp
 * decodes one LZ4 block and un-transposes it (bitshuffle) into frames, with
 * liblz4's checks on every length and offset. Used by bslz4_decode
 * (shaders/cuda/detector/bslz4_decode.cu), which plans the blocks.
 *
 * The 8x8 bit transpose is the CPU decoder's (engine/core/bit_transpose.h),
 * so that both un-transpose with the same operations. */
#ifndef SL_CUDA_BSLZ4_DEVICE_CUH
#define SL_CUDA_BSLZ4_DEVICE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "engine/core/bit_transpose.h"

__device__ __forceinline__ uint32_t rd_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
__device__ __forceinline__ uint64_t rd_be64(const uint8_t *p) {
  return ((uint64_t)rd_be32(p) << 32) | rd_be32(p + 4);
}

/* The warp copies len bytes, src and dst agreeing mod sizeof(V): bytes up to
 * dst's V alignment, then V-sized accesses, then the tail bytes. */
template <typename V>
static __device__ __forceinline__ void warp_copy_aligned(uint8_t *dst, const uint8_t *src,
                                                         unsigned long long len, unsigned lane) {
  const unsigned long long w = sizeof(V);
  const unsigned long long head = (w - ((uintptr_t)dst & (w - 1))) & (w - 1);
  for (unsigned long long k = lane; k < head; k += 32) dst[k] = src[k];
  const unsigned long long nv = (len - head) / w;
  V *dv = (V *)(dst + head);
  const V *sv = (const V *)(src + head);
  for (unsigned long long k = lane; k < nv; k += 32) dv[k] = sv[k];
  for (unsigned long long k = head + nv * w + lane; k < len; k += 32) dst[k] = src[k];
}

/* The warp copies len bytes; 16-byte accesses where src and dst agree mod 16. */
static __device__ void warp_copy(uint8_t *dst, const uint8_t *src, unsigned long long len, unsigned lane) {
  const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (((d ^ s) & 15) == 0 && len >= 64) {
    warp_copy_aligned<uint4>(dst, src, len, lane);
  } else if (((d ^ s) & 3) == 0 && len >= 16) {
    warp_copy_aligned<uint32_t>(dst, src, len, lane);
  } else {
    for (unsigned long long k = lane; k < len; k += 32) dst[k] = src[k];
  }
}

/* One LZ4 block, in[0..ilen) -> out[0..olen), by the whole warp, with
 * liblz4's checks: every lane parses the sequence (broadcast reads), then the
 * sequence's literals and match are written in one pass without a barrier
 * between them: a match byte that lies in this sequence's literal run is read
 * from the input, the others from output written by earlier sequences (one
 * __syncwarp per sequence). Returns 0, 1 (corrupt), 2 (well formed, *produced
 * < olen bytes) or 3 (in place would overwrite unread input: see below).
 *
 * In place: the compressed block sits at out + gap, behind the
 * block's decoded bytes. A sequence whose writes end at or before its literal
 * run in the input takes the one-pass copy; otherwise, as long as the writes
 * stay behind the read position (liblz4's in-place rule: literals are moved
 * forward 32 bytes at a time, then the match is copied), the two-pass copy;
 * otherwise the function returns 3 and the caller decodes the block again
 * from global memory. Inputs are never overwritten before they are read, so
 * every verdict is the one of the out-of-place decode. Not in place:
 * gap = LZ4_OUT_OF_PLACE. */
#define LZ4_OUT_OF_PLACE 0x40000000u
__device__ __forceinline__ uint32_t mod_small(uint32_t x, uint32_t d, float inv) {
  /* x mod d for x <= 32: a float quotient, then one correction either way */
  uint32_t r = x - d * __float2uint_rz(((float)x + 0.5f) * inv);
  if ((int)r < 0) r += d;
  if (r >= d) r -= d;
  return r;
}

__device__ __forceinline__ int lz4_decode_warp(const uint8_t *in, uint32_t ilen, uint8_t *out, uint32_t olen,
                                               unsigned lane, uint32_t *produced, uint32_t gap) {
  uint32_t ip = 0, op = 0;
  for (;;) {
    if (ip >= ilen) return 1;
    const uint32_t token = in[ip++];
    uint32_t lit = token >> 4;
    if (lit == 15) {
      uint32_t b;
      do {
        if (ip >= ilen) return 1;
        b = in[ip++];
        lit += b;
      } while (b == 255);
    }
    if (lit > ilen - ip || lit > olen - op) return 1;
    const uint32_t il = ip;
    ip += lit;
    uint32_t off = 1, ml = 0;
    const bool last = ip == ilen; /* the last sequence: literals only */
    if (!last) {
      if (ilen - ip < 8) return 1; /* liblz4: a literal run ending in the last 8 bytes is the last */
      off = (uint32_t)in[ip] | ((uint32_t)in[ip + 1] << 8);
      ip += 2;
      if (off == 0 || off > op + lit) return 1;
      ml = token & 15;
      if (ml == 15) {
        uint32_t b;
        do {
          if (ip >= ilen) return 1;
          b = in[ip++];
          ml += b;
        } while (b == 255);
      }
      ml += 4;
      if (ml > olen - op - lit) return 1;
    }
    const uint32_t n = lit + ml;
    const uint8_t *ls = in + il;
    uint8_t *o = out + op;
    __syncwarp(); /* earlier sequences' bytes are visible to every lane */
    if (op + n <= gap + il) {
      if (off >= ml) {
        for (uint32_t t = lane; t < n; t += 32) {
          const int q = t < lit ? (int)t : (int)t - (int)off; /* q < lit */
          o[t] = q >= 0 ? ls[q] : o[q];
        }
      } else { /* overlap: a pattern of period off that starts at lit - off */
        for (uint32_t t = lane; t < lit; t += 32) o[t] = ls[t];
        const float inv = __fdividef(1.0f, (float)off);
        uint32_t r = mod_small(lane, off, inv);
        const uint32_t step = mod_small(32, off, inv);
        for (uint32_t k = lane; k < ml; k += 32) {
          const int q = (int)(lit - off + r);
          o[lit + k] = q >= 0 ? ls[q] : o[q];
          r += step;
          if (r >= off) r -= off;
        }
      }
    } else if (op <= gap + il && op + n <= gap + ip) {
      for (uint32_t t0 = 0; t0 < lit; t0 += 32) { /* forward move, 32 bytes at a time */
        const uint32_t t = t0 + lane;
        const uint8_t v = t < lit ? ls[t] : 0;
        __syncwarp();
        if (t < lit) o[t] = v;
        __syncwarp();
      }
      const uint8_t *m = o + lit - off;
      if (off >= ml) {
        for (uint32_t k = lane; k < ml; k += 32) o[lit + k] = m[k];
      } else {
        const float inv = __fdividef(1.0f, (float)off);
        uint32_t r = mod_small(lane, off, inv);
        const uint32_t step = mod_small(32, off, inv);
        for (uint32_t k = lane; k < ml; k += 32) {
          o[lit + k] = m[r];
          r += step;
          if (r >= off) r -= off;
        }
      }
    } else {
      return 3;
    }
    op += n;
    if (last) break;
  }
  __syncwarp();
  *produced = op;
  return op == olen ? 0 : 2;
}

/* Where the flag counts of the decoded frames go (nodes/detector/
 * flag_counts.h): decoded element q of the call's output (byte q * S) is
 * pixel q % item of frame q / item; counts[frame * groups + pixel / group]
 * counts the pixels with every bit set. counts NULL: not asked for. */
struct flag_sink {
  unsigned int *counts;
  unsigned long long item;
  unsigned int groups, group;
};

/* One more flagged element at output byte offset `byte` (a multiple of S). */
template <int S>
__device__ __forceinline__ void flag_count_at(const flag_sink &fs, unsigned long long byte) {
  const unsigned long long q = byte / S, f = q / fs.item, px = q - f * fs.item;
  atomicAdd(&fs.counts[f * fs.groups + px / fs.group], 1u);
}

/* Counts the flagged elements among the len bytes (whole elements) that were
 * copied verbatim to output byte offset `byte` from src, one lane per element. */
template <int S>
__device__ void flag_count_copied(const flag_sink &fs, const uint8_t *src, unsigned long long byte,
                                  unsigned long long len, unsigned lane) {
  for (unsigned long long k = (unsigned long long)lane * S; k + S <= len; k += 32ull * S) {
    bool all = true;
#pragma unroll
    for (int b = 0; b < S; b++) all &= src[k + b] == 0xFF;
    if (all) flag_count_at<S>(fs, byte + k);
  }
}

/* Un-transposes a block of m elements (m a multiple of 8) from shared memory
 * into out: decoded byte d of the stored chunk goes to out[dst + d] when
 * lo <= d < hi; the block starts at decoded byte b0. With fs.counts, an
 * element whose bit is set in all of its 8*S rows (the AND of the row bytes
 * the lane loads anyway) has every bit set and is counted. */
template <int S>
__device__ void unshuffle_store(const uint8_t *in, uint32_t m, uint8_t *out, long long dst,
                                unsigned long long b0, unsigned long long lo,
                                unsigned long long hi, unsigned lane, const flag_sink &fs) {
  const uint32_t nb = m >> 3;
  for (uint32_t g = lane; g < nb; g += 32) {
    uint32_t w[2 * S]; /* the 8 elements, 8*S bytes, as little-endian words */
    uint32_t ones = 0xFFu; /* bit t: element t of the group has every bit set */
#pragma unroll
    for (int q = 0; q < 2 * S; q++) w[q] = 0;
#pragma unroll
    for (int j = 0; j < S; j++) {
      const uint8_t *rows = in + 8u * j * nb + g;
      uint64_t x = 0;
#pragma unroll
      for (int k = 0; k < 8; k++) {
        const uint8_t r = rows[k * nb];
        ones &= r;
        x |= (uint64_t)r << (8 * k);
      }
      if (x == 0) continue; /* an all-0 plane of the group (the high byte of small counts) */
      x = sl_tr8(x);
#pragma unroll
      for (int t = 0; t < 8; t++) { /* byte j of element t is output byte t*S + j */
        const int ob = t * S + j;
        w[ob >> 2] |= (uint32_t)((x >> (8 * t)) & 0xFF) << (8 * (ob & 3));
      }
    }
    const unsigned long long d0 = b0 + (unsigned long long)g * 8 * S;
    if (fs.counts && ones) /* rare: flagged pixels */
      for (int t = 0; t < 8; t++) {
        const unsigned long long d = d0 + (unsigned long long)t * S;
        if (((ones >> t) & 1u) && d >= lo && d < hi) flag_count_at<S>(fs, (unsigned long long)(dst + (long long)d));
      }
    if (d0 >= lo && d0 + 8 * S <= hi) {
      uint8_t *dp = out + dst + (long long)d0;
      const uintptr_t a = (uintptr_t)dp;
      bool done = false;
      if constexpr (S >= 2) {
        if ((a & 15) == 0) {
#pragma unroll
          for (int q = 0; q < 2 * S; q += 4)
            *(uint4 *)(dp + 4 * q) = make_uint4(w[q], w[q + 1], w[q + 2], w[q + 3]);
          done = true;
        }
      }
      if (done) {
      } else if ((a & 7) == 0) {
#pragma unroll
        for (int q = 0; q < 2 * S; q += 2) *(uint2 *)(dp + 4 * q) = make_uint2(w[q], w[q + 1]);
      } else if ((a & 3) == 0) {
#pragma unroll
        for (int q = 0; q < 2 * S; q++) *(uint32_t *)(dp + 4 * q) = w[q];
      } else if ((a & 1) == 0) {
#pragma unroll
        for (int q = 0; q < 2 * S; q++) {
          *(uint16_t *)(dp + 4 * q) = (uint16_t)w[q];
          *(uint16_t *)(dp + 4 * q + 2) = (uint16_t)(w[q] >> 16);
        }
      } else {
#pragma unroll
        for (int b = 0; b < 8 * S; b++) dp[b] = (uint8_t)(w[b >> 2] >> (8 * (b & 3)));
      }
    } else {
#pragma unroll
      for (int b = 0; b < 8 * S; b++) {
        const unsigned long long d = d0 + b;
        if (d >= lo && d < hi) out[dst + (long long)d] = (uint8_t)(w[b >> 2] >> (8 * (b & 3)));
      }
    }
  }
}

#endif
