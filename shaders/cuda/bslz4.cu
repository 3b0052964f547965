/* bslz4_decode on CUDA: stored chunks (bitshuffle-LZ4, bitshuffle, raw) of a
 * packed device buffer to frames, bit for bit the CPU decoder's output
 * (nodes/detector/bslz4.c, bslz4_decode.c).
 *
 * Two kernels per call, no host read of the packed buffer:
 *
 *  1. sl_k_bslz4_index: one thread per packed entry, over a fixed upper bound
 *     of entries (threads at or beyond the header's n exit). It checks the
 *     entry and the chunk header exactly like the CPU, walks the block length
 *     prefixes (each offset depends on the previous length) into a block
 *     table (entry, block) -> (offset, compressed length), checks the
 *     trailing bytes and copies the (n % 8) trailing elements.
 *
 *  2. sl_k_bslz4_decode<S>: one warp per (entry, block slot). The warp stages
 *     the compressed block at the end of its shared-memory buffer (16-byte
 *     loads) and decodes the LZ4 sequences in place into the buffer's start
 *     (every lane parses the same sequence, broadcast reads, no shuffles; a
 *     sequence's literals and match are written in one pass by the 32 lanes,
 *     overlapping matches as a periodic pattern; a block that would overwrite
 *     input it has not read is decoded from global memory), then un-transposes the block from
 *     shared memory straight into the frames (one lane per group of 8
 *     elements: 8*S byte loads, S 8x8 bit transposes, one 8*S-byte store).
 *     Stored-raw chunks (filter_mask bit 0, or raw encoding) are copied by the
 *     warps of their entry; uncompressed bitshuffle blocks are staged and
 *     un-transposed the same way.
 *
 * A chunk of the scan that starts or ends inside a stored chunk writes only
 * its window of that chunk's decoded bytes (every block is still decoded and
 * checked, as on the CPU): no scratch.
 *
 * Errors: the first failing check (atomicCAS on a device record owned by the
 * node's dev_state) stores the entry, the check, the block and byte position
 * and the entry's provenance; the launcher turns it into SL_ERR_FORMAT with
 * the CPU's message. The record is copied to pinned host memory after every
 * call (cudaMemcpyAsync). Default ("deferred") mode: a call looks at the
 * pinned copy of the previous calls before it launches (no sync unless it is
 * set) and the last chunk of the scan synchronizes once and checks, so an
 * error surfaces at the next call (normally the next chunk) or at the end of
 * the pass, never silently. SLUICE_CUDA_BSLZ4_CHECK=sync synchronizes after
 * every call (one 80-byte copy and a stream sync per chunk of the scan).
 *
 * Limits (documented deviations, both reported as errors, never silently):
 *  - block buffers are sized from the dataset's block size (cd_values[3], or
 *    the default): a chunk whose header block size is larger than
 *    max(that, 8 KiB), or that has more blocks than that size implies, is
 *    refused with a message saying so (the CPU backend decodes it);
 *  - the LZ4 checks are those of the block format (every length and offset
 *    against input, output and block size; the block must decode to exactly
 *    its size and end with a literal run that consumes the input); liblz4 has
 *    a few extra end-of-block rules for crafted streams that this does not
 *    replicate, so some malformed blocks get another message than on the CPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
}
#include "shaders/cuda/sl_cuda.h"
#include "nodes/codec/bit_transpose.h"

namespace {

enum { BZ_NONE = 0, BZ_LZ4 = 1, BZ_BITSHUF = 2, BZ_COPY = 3 };
enum { BZ_WARPS_PER_CTA = 2, BZ_INDEX_THREADS = 128 };
#define BZ_MAX_BLOCK_BYTES (1u << 20) /* SL_BSLZ4_MAX_BLOCK_BYTES */

/* Error codes of the device record. */
enum bz_code {
  E_OK = 0,
  E_COUNT,        /* v1 = n, v2 = bound */
  E_RANGE,        /* v1 = offset, v2 = size, v3 = buffer bytes */
  E_NOFRAME,
  E_RAW_SHORT,    /* v1 = size, v2 = needed */
  E_BS_MULT,      /* v1 = size */
  E_BS_CAP,       /* v1 = size, v2 = full */
  E_HDR_TRUNC,    /* v1 = size */
  E_TOTAL_MULT,   /* v1 = T */
  E_TOTAL_CAP,    /* v1 = T, v2 = full */
  E_BLOCK_ZERO,
  E_BLOCK_MULT,   /* v1 = B */
  E_BLOCK_MAX,    /* v1 = B */
  E_GPU_BLOCK,    /* v1 = B, v2 = slot bytes */
  E_GPU_NBLOCKS,  /* v1 = blocks, v2 = slots, v3 = B */
  E_LEN_TRUNC,    /* block, pos, v1 = remain */
  E_LEN_PAST,     /* block, pos, v1 = clen, v2 = remain */
  E_LEN_ZERO,     /* block, pos */
  E_LZ4_CORRUPT,  /* block, pos, v1 = clen, v2 = expected */
  E_LZ4_SIZE,     /* block, pos, v1 = decoded, v2 = expected */
  E_TAIL_TRUNC,   /* pos, v1 = elems, v2 = bytes, v3 = remain */
  E_TAIL_GARBAGE, /* pos, v1 = extra, v2 = tail bytes */
  E_SHORT         /* v1 = decoded, v2 = full */
};

struct bz_err {
  unsigned int claimed, code;
  unsigned long long entry, block, pos, v1, v2, v3;
  long long stored_chunk, first_position, n_positions;
  unsigned long long where; /* the entry's host pointer, as bits */
};

/* What the index kernel found for one entry. */
struct bz_entry {
  unsigned long long src;  /* offset of the stored bytes in the packed buffer */
  long long dst;           /* out offset of decoded byte 0 of the stored chunk */
  unsigned long long lo, hi; /* decoded bytes [lo, hi) of the stored chunk are written */
  unsigned long long nel;  /* elements of the stored chunk */
  unsigned int kind, nblocks, bs, pad; /* bs: elements per block */
};

struct bz_params {
  const uint8_t *buf;
  uint8_t *out;
  bz_entry *ents;
  uint2 *blocks; /* (offset of the LZ4 data in the chunk, compressed length) */
  bz_err *err;
  unsigned long long buf_bytes, full, frame_bytes;
  long long pos_start, pos_count;
  unsigned int bound, cap;       /* entries launched; block slots per entry */
  unsigned int slot_bytes; /* shared bytes per warp for the decoded block */
  unsigned int stride;                /* shared bytes per warp */
  unsigned int elem, enc, raw_bs; /* raw_bs: block elements of uncompressed bitshuffle */
};

__device__ __forceinline__ uint32_t rd_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
__device__ __forceinline__ uint64_t rd_be64(const uint8_t *p) {
  return ((uint64_t)rd_be32(p) << 32) | rd_be32(p + 4);
}

__device__ void bz_fail(const bz_params &p, const sl_packed_entry *pe, unsigned long long entry,
                        unsigned code, unsigned long long block, unsigned long long pos,
                        unsigned long long v1, unsigned long long v2, unsigned long long v3) {
  bz_err *e = p.err;
  if (atomicCAS(&e->claimed, 0u, 1u) != 0u) return;
  e->code = code;
  e->entry = entry;
  e->block = block;
  e->pos = pos;
  e->v1 = v1;
  e->v2 = v2;
  e->v3 = v3;
  if (pe) {
    e->stored_chunk = pe->stored_chunk;
    e->first_position = pe->first_position;
    e->n_positions = pe->n_positions;
    e->where = (unsigned long long)(uintptr_t)pe->where;
  } else {
    e->stored_chunk = -1;
    e->first_position = -1;
    e->n_positions = 0;
    e->where = 0;
  }
  __threadfence();
}

/* ------------------------------------------------------------ index --- */

__global__ void __launch_bounds__(BZ_INDEX_THREADS) sl_k_bslz4_index(bz_params p) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.bound) return;
  const sl_packed_chunks *pk = (const sl_packed_chunks *)p.buf;
  bz_entry ent;
  memset(&ent, 0, sizeof ent);
  ent.kind = BZ_NONE;
  unsigned long long n = pk->n;
  if (i == 0 && n > p.bound)
    bz_fail(p, NULL, 0, E_COUNT, 0, 0, n, p.bound, 0);
  if (i >= n) {
    p.ents[i] = ent;
    return;
  }
  const sl_packed_entry *pe = &pk->entries[i];
  if (sizeof(sl_packed_chunks) + (unsigned long long)(i + 1) * sizeof(sl_packed_entry) > p.buf_bytes) {
    bz_fail(p, NULL, i, E_RANGE, 0, 0, 0, 0, p.buf_bytes);
    p.ents[i] = ent;
    return;
  }
  const unsigned long long off = pe->offset, size = pe->size;
  const uint32_t mask = pe->filter_mask;
  const long long first = pe->first_position, npos = pe->n_positions;
  const unsigned long long s = p.elem, full = p.full, fb = p.frame_bytes;
  long long lo = first > p.pos_start ? first : p.pos_start;
  long long hi = first + npos;
  if (hi > p.pos_start + p.pos_count) hi = p.pos_start + p.pos_count;
  if (hi <= lo) {
    bz_fail(p, pe, i, E_NOFRAME, 0, 0, 0, 0, 0);
    p.ents[i] = ent;
    return;
  }
  if (off > p.buf_bytes || size > p.buf_bytes - off) {
    bz_fail(p, pe, i, E_RANGE, 0, 0, off, size, p.buf_bytes);
    p.ents[i] = ent;
    return;
  }
  const unsigned long long skip = (unsigned long long)(lo - first) * fb;
  const unsigned long long want = (unsigned long long)(hi - lo) * fb;
  ent.src = off;
  ent.dst = (long long)((unsigned long long)(lo - p.pos_start) * fb) - (long long)skip;
  ent.lo = skip;
  ent.hi = skip + want;
  const uint8_t *src = p.buf + off;

  if ((mask & 1u) || p.enc == SL_ENC_RAW) {
    if (size < skip + want) {
      bz_fail(p, pe, i, E_RAW_SHORT, 0, 0, size, skip + want, 0);
    } else {
      ent.kind = BZ_COPY;
      ent.nblocks = p.cap;
    }
    p.ents[i] = ent;
    return;
  }

  unsigned long long nel, bs, pos, tail;
  if (p.enc == SL_ENC_BITSHUFFLE) {
    if (size % s) {
      bz_fail(p, pe, i, E_BS_MULT, 0, 0, size, 0, 0);
      p.ents[i] = ent;
      return;
    }
    if (size > full) {
      bz_fail(p, pe, i, E_BS_CAP, 0, 0, size, full, 0);
      p.ents[i] = ent;
      return;
    }
    if (size != full) {
      bz_fail(p, pe, i, E_SHORT, 0, 0, size, full, 0);
      p.ents[i] = ent;
      return;
    }
    nel = full / s;
    bs = p.raw_bs;
    unsigned long long nb = nel / bs + (((nel % bs) & ~7ull) ? 1 : 0);
    if (nb > p.cap) { /* cannot happen: the launcher sized cap from the same numbers */
      bz_fail(p, pe, i, E_GPU_NBLOCKS, 0, 0, nb, p.cap, bs * s);
      p.ents[i] = ent;
      return;
    }
    ent.nblocks = (unsigned int)nb;
    pos = (nel - nel % 8) * s; /* the tail sits where it decodes */
    tail = (nel % 8) * s;
  } else { /* SL_ENC_BSLZ4 */
    if (size < 12) {
      bz_fail(p, pe, i, E_HDR_TRUNC, 0, 0, size, 0, 0);
      p.ents[i] = ent;
      return;
    }
    const unsigned long long T = rd_be64(src);
    const unsigned long long B = rd_be32(src + 8);
    unsigned code = E_OK;
    if (T % s) code = E_TOTAL_MULT;
    else if (B == 0) code = E_BLOCK_ZERO;
    else if (B % (8 * s)) code = E_BLOCK_MULT;
    else if (B > BZ_MAX_BLOCK_BYTES) code = E_BLOCK_MAX;
    else if (T > full) code = E_TOTAL_CAP;
    else if (B > p.slot_bytes) code = E_GPU_BLOCK;
    if (code != E_OK) {
      bz_fail(p, pe, i, code, 0, code == E_TOTAL_MULT || code == E_TOTAL_CAP ? 0 : 8,
              code == E_TOTAL_MULT || code == E_TOTAL_CAP ? T : B,
              code == E_TOTAL_CAP ? full : code == E_GPU_BLOCK ? p.slot_bytes : 0, 0);
      p.ents[i] = ent;
      return;
    }
    nel = T / s;
    bs = B / s;
    const unsigned long long nfull = nel / bs, last = (nel % bs) & ~7ull;
    const unsigned long long nb = nfull + (last ? 1 : 0);
    if (nb > p.cap) {
      bz_fail(p, pe, i, E_GPU_NBLOCKS, 0, 8, nb, p.cap, B);
      p.ents[i] = ent;
      return;
    }
    pos = 12;
    uint2 *bt = p.blocks + (unsigned long long)i * p.cap;
    for (unsigned long long k = 0; k < nb; k++) {
      if (size - pos < 4) {
        bz_fail(p, pe, i, E_LEN_TRUNC, k, pos, size - pos, 0, 0);
        p.ents[i] = ent;
        return;
      }
      const unsigned long long clen = rd_be32(src + pos);
      const unsigned long long remain = size - pos - 4;
      if (clen > remain) {
        bz_fail(p, pe, i, E_LEN_PAST, k, pos, clen, remain, 0);
        p.ents[i] = ent;
        return;
      }
      if (clen == 0) {
        bz_fail(p, pe, i, E_LEN_ZERO, k, pos, 0, 0, 0);
        p.ents[i] = ent;
        return;
      }
      bt[k] = make_uint2((unsigned int)(pos + 4), (unsigned int)clen);
      pos += 4 + clen;
    }
    tail = (nel - nfull * bs - last) * s;
    const unsigned long long remain = size - pos;
    if (remain < tail) {
      bz_fail(p, pe, i, E_TAIL_TRUNC, 0, pos, nel % 8, tail, remain);
      p.ents[i] = ent;
      return;
    }
    if (remain > tail) {
      bz_fail(p, pe, i, E_TAIL_GARBAGE, 0, pos + tail, remain - tail, tail, 0);
      p.ents[i] = ent;
      return;
    }
    if (T != full) { /* the CPU's "decodes to T bytes, expected full" */
      bz_fail(p, pe, i, E_SHORT, 0, 0, T, full, 0);
      p.ents[i] = ent;
      return;
    }
    ent.nblocks = (unsigned int)nb;
  }
  /* The trailing (n % 8) elements, verbatim, inside the window. */
  const unsigned long long t0 = nel * s - tail;
  for (unsigned long long x = 0; x < tail; x++) {
    unsigned long long d = t0 + x;
    if (d >= ent.lo && d < ent.hi) p.out[ent.dst + (long long)d] = src[pos + x];
  }
  ent.nel = nel;
  ent.bs = (unsigned int)bs;
  ent.kind = p.enc == SL_ENC_BITSHUFFLE ? BZ_BITSHUF : BZ_LZ4;
  p.ents[i] = ent;
}

/* ------------------------------------------------------------ decode --- */

/* The warp copies len bytes; 16-byte accesses where src and dst agree mod 16. */
__device__ void warp_copy(uint8_t *dst, const uint8_t *src, unsigned long long len, unsigned lane) {
  const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (((d ^ s) & 15) == 0 && len >= 64) {
    const unsigned long long head = (16 - (d & 15)) & 15;
    for (unsigned long long k = lane; k < head; k += 32) dst[k] = src[k];
    const unsigned long long nv = (len - head) >> 4;
    uint4 *d4 = (uint4 *)(dst + head);
    const uint4 *s4 = (const uint4 *)(src + head);
    for (unsigned long long k = lane; k < nv; k += 32) d4[k] = s4[k];
    for (unsigned long long k = head + (nv << 4) + lane; k < len; k += 32) dst[k] = src[k];
  } else if (((d ^ s) & 3) == 0 && len >= 16) {
    const unsigned long long head = (4 - (d & 3)) & 3;
    for (unsigned long long k = lane; k < head; k += 32) dst[k] = src[k];
    const unsigned long long nv = (len - head) >> 2;
    uint32_t *d4 = (uint32_t *)(dst + head);
    const uint32_t *s4 = (const uint32_t *)(src + head);
    for (unsigned long long k = lane; k < nv; k += 32) d4[k] = s4[k];
    for (unsigned long long k = head + (nv << 2) + lane; k < len; k += 32) dst[k] = src[k];
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
 * gap = BZ_FAR. */
#define BZ_FAR 0x40000000u
__device__ __forceinline__ uint32_t bz_mod_small(uint32_t x, uint32_t d, float inv) {
  /* x mod d for x <= 32: a float quotient, then one correction either way */
  uint32_t r = x - d * __float2uint_rz(((float)x + 0.5f) * inv);
  if ((int)r < 0) r += d;
  if (r >= d) r -= d;
  return r;
}

__device__ __forceinline__ int lz4_warp_fast(const uint8_t *in, uint32_t ilen, uint8_t *out, uint32_t olen,
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
        uint32_t r = bz_mod_small(lane, off, inv);
        const uint32_t step = bz_mod_small(32, off, inv);
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
        uint32_t r = bz_mod_small(lane, off, inv);
        const uint32_t step = bz_mod_small(32, off, inv);
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


/* Un-transposes a block of m elements (m a multiple of 8) from shared memory
 * into out: decoded byte d of the stored chunk goes to out[dst + d] when
 * lo <= d < hi; the block starts at decoded byte b0. */
template <int S>
__device__ void unshuffle_store(const uint8_t *in, uint32_t m, uint8_t *out, long long dst,
                                unsigned long long b0, unsigned long long lo,
                                unsigned long long hi, unsigned lane) {
  const uint32_t nb = m >> 3;
  for (uint32_t g = lane; g < nb; g += 32) {
    uint32_t w[2 * S]; /* the 8 elements, 8*S bytes, as little-endian words */
#pragma unroll
    for (int q = 0; q < 2 * S; q++) w[q] = 0;
#pragma unroll
    for (int j = 0; j < S; j++) {
      const uint8_t *rows = in + 8u * j * nb + g;
      uint64_t x = 0;
#pragma unroll
      for (int k = 0; k < 8; k++) x |= (uint64_t)rows[k * nb] << (8 * k);
      x = sl_tr8(x);
#pragma unroll
      for (int t = 0; t < 8; t++) { /* byte j of element t is output byte t*S + j */
        const int ob = t * S + j;
        w[ob >> 2] |= (uint32_t)((x >> (8 * t)) & 0xFF) << (8 * (ob & 3));
      }
    }
    const unsigned long long d0 = b0 + (unsigned long long)g * 8 * S;
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

/* One warp per LZ4 block: the compressed block is copied to the end of the
 * warp's shared-memory buffer and decoded in place into its start (~8.4 KB of
 * shared memory per warp, 13 CTAs per SM), then unshuffled from shared memory
 * (docs/optimisation-notes.md: 309 GB/s on the H200, against 271 and 251 GB/s
 * for two layouts that staged the compressed block beside the decoded one). */
template <int S>
__global__ void __launch_bounds__(BZ_WARPS_PER_CTA * 32, 13) sl_k_bslz4_decode(bz_params p) {
  extern __shared__ uint4 bz_smem[];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int gw = blockIdx.x * BZ_WARPS_PER_CTA + warp; /* < 2^32: the launcher checks */
  const unsigned int entry = gw / p.cap;
  const unsigned int j = gw - entry * p.cap;
  if (entry >= p.bound) return;
  const bz_entry e = p.ents[entry];
  if (e.kind == BZ_NONE || j >= e.nblocks) return;
  const uint8_t *src = p.buf + e.src;

  if (e.kind == BZ_COPY) { /* the entry's warps split its window */
    const unsigned long long want = e.hi - e.lo;
    unsigned long long piece = (want + p.cap - 1) / p.cap;
    piece = (piece + 15) & ~15ull;
    const unsigned long long a = (unsigned long long)j * piece;
    if (a >= want) return;
    const unsigned long long len = want - a < piece ? want - a : piece;
    warp_copy(p.out + e.dst + (long long)(e.lo + a), src + e.lo + a, len, lane);
    return;
  }

  uint8_t *blk = (uint8_t *)bz_smem + (size_t)warp * p.stride;
  const uint32_t nel = (uint32_t)e.nel; /* a stored chunk is < 4 GiB (HDF5) */
  const uint32_t nfull = nel / e.bs;
  const uint32_t m = j < nfull ? e.bs : ((nel - nfull * e.bs) & ~7u);
  const uint32_t want = m * S;
  const unsigned long long b0 = (unsigned long long)j * e.bs * S;

  if (e.kind == BZ_BITSHUF) {
    warp_copy(blk, src + b0, want, lane);
    __syncwarp();
  } else {
    const uint2 bt = p.blocks[(unsigned long long)entry * p.cap + j];
    const uint8_t *cin = src + bt.x;
    uint32_t got = 0;
    int r = 3;
    if (bt.y + 15 <= p.stride) { /* in place: at the end of the warp's buffer, 16-byte congruent */
      uint32_t gap = p.stride - bt.y;
      gap -= (uint32_t)(((uintptr_t)(blk + gap) - (uintptr_t)cin) & 15);
      warp_copy(blk + gap, cin, bt.y, lane);
      __syncwarp();
      r = lz4_warp_fast(blk + gap, bt.y, blk, want, lane, &got, gap);
    }
    if (r == 3) { /* too large to stage, or in place would overwrite unread input: from global memory */
      __syncwarp();
      r = lz4_warp_fast(cin, bt.y, blk, want, lane, &got, BZ_FAR);
    }
    if (r != 0) {
      if (lane == 0) {
        const sl_packed_entry *pe = &((const sl_packed_chunks *)p.buf)->entries[entry];
        bz_fail(p, pe, entry, r == 1 ? E_LZ4_CORRUPT : E_LZ4_SIZE, j, bt.x - 4,
                r == 1 ? bt.y : got, want, 0);
      }
      return;
    }
  }
  unshuffle_store<S>(blk, m, p.out, e.dst, b0, e.lo, e.hi, lane);
}

/* ------------------------------------------------------------ host --- */

struct bz_state {
  bz_err *d_err;
  bz_err *h_err; /* pinned */
  bz_entry *ents;
  uint2 *blocks;
  size_t ents_cap, blocks_cap; /* counts */
  int sync_mode;
  size_t smem_attr[3]; /* dynamic shared memory limit set per instance */
};

void bz_state_free(void *v) {
  bz_state *st = (bz_state *)v;
  if (!st) return;
  cudaFree(st->d_err);
  cudaFreeHost(st->h_err);
  cudaFree(st->ents);
  cudaFree(st->blocks);
  free(st);
}

sl_code cuda_fail(sl_kernel_args *a, cudaError_t e, const char *what) {
  return sl_fail(a->err, SL_ERR_BACKEND, "bslz4_decode (CUDA): %s: %s", what, cudaGetErrorString(e));
}

size_t default_block_elems(size_t s) {
  size_t bs = 8192 / s;
  bs -= bs % 8;
  return bs < 128 ? 128 : bs;
}

/* The CPU decoder's message for a device error record. */
void describe(const bz_err *r, const sl_tensor_desc *in, unsigned long long slot_bytes, char *m,
              size_t n) {
  const unsigned long long s = sl_dtype_size(in->dtype);
  const unsigned long long b = r->block, at = r->pos, v1 = r->v1, v2 = r->v2, v3 = r->v3;
  switch (r->code) {
  case E_COUNT:
    snprintf(m, n, "packed buffer holds %llu stored chunks, more than the %llu this chunk of the scan can hold",
             v1, v2);
    break;
  case E_RANGE:
    snprintf(m, n, "packed entry out of range (offset %llu, %llu bytes, buffer of %llu bytes)", v1, v2, v3);
    break;
  case E_NOFRAME: snprintf(m, n, "stored chunk holds no frame of this chunk of the scan"); break;
  case E_RAW_SHORT:
    snprintf(m, n, "stored raw (filter skipped) with %llu bytes, needs %llu", v1, v2);
    break;
  case E_BS_MULT:
    snprintf(m, n, "bitshuffle: chunk of %llu bytes is not a multiple of the element size %llu", v1, s);
    break;
  case E_BS_CAP:
    snprintf(m, n, "bitshuffle: chunk of %llu bytes exceeds the destination capacity of %llu bytes", v1, v2);
    break;
  case E_HDR_TRUNC:
    snprintf(m, n, "bitshuffle-lz4: truncated header: chunk has %llu bytes, the header needs 12", v1);
    break;
  case E_TOTAL_MULT:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 0: total size %llu bytes is not a multiple of the element size %llu",
             v1, s);
    break;
  case E_TOTAL_CAP:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 0: total size %llu bytes exceeds the destination capacity of %llu bytes",
             v1, v2);
    break;
  case E_BLOCK_ZERO: snprintf(m, n, "bitshuffle-lz4: header at byte 8: block size is 0"); break;
  case E_BLOCK_MULT:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes is not a multiple of 8 * element size (%llu)",
             v1, 8 * s);
    break;
  case E_BLOCK_MAX:
    snprintf(m, n, "bitshuffle-lz4: header at byte 8: block size %llu bytes exceeds the limit of %u bytes", v1,
             BZ_MAX_BLOCK_BYTES);
    break;
  case E_GPU_BLOCK:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes exceeds the CUDA decoder's block buffer of "
             "%llu bytes, sized from the dataset's block size (%lld elements in cd_values[3]); decode this file "
             "with --backend cpu",
             v1, slot_bytes, (long long)in->encoded_block_elems);
    break;
  case E_GPU_NBLOCKS:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes gives %llu blocks, more than the %llu the "
             "CUDA decoder planned from the dataset's block size (%lld elements in cd_values[3]); decode this "
             "file with --backend cpu",
             v3, v1, v2, (long long)in->encoded_block_elems);
    break;
  case E_LEN_TRUNC:
    snprintf(m, n, "bitshuffle-lz4: truncated at byte %llu: block %llu needs a 4-byte length, %llu bytes remain",
             at, b, v1);
    break;
  case E_LEN_PAST:
    snprintf(m, n,
             "bitshuffle-lz4: block %llu at byte %llu: compressed length %llu runs past the end of the chunk "
             "(%llu bytes remain)",
             b, at, v1, v2);
    break;
  case E_LEN_ZERO:
    snprintf(m, n, "bitshuffle-lz4: block %llu at byte %llu: compressed length is 0", b, at);
    break;
  case E_LZ4_CORRUPT:
    snprintf(m, n,
             "bitshuffle-lz4: block %llu at byte %llu: corrupt LZ4 data (%llu compressed bytes, expected %llu "
             "decoded bytes)",
             b, at, v1, v2);
    break;
  case E_LZ4_SIZE:
    snprintf(m, n, "bitshuffle-lz4: block %llu at byte %llu: LZ4 data decodes to %llu bytes, expected %llu", b,
             at, v1, v2);
    break;
  case E_TAIL_TRUNC:
    snprintf(m, n,
             "bitshuffle-lz4: truncated at byte %llu: the %llu trailing elements need %llu bytes, %llu remain",
             at, v1, v2, v3);
    break;
  case E_TAIL_GARBAGE:
    snprintf(m, n,
             "bitshuffle-lz4: trailing garbage: %llu extra bytes at byte %llu after the last block and %llu "
             "trailing bytes",
             v1, at, v2);
    break;
  case E_SHORT: {
    long long per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
    snprintf(m, n, "decodes to %llu bytes, expected %llu (%lld frames of %lld bytes)", v1, v2, per,
             (long long)sl_desc_item_bytes(in));
    break;
  }
  default: snprintf(m, n, "unknown device error %u", r->code); break;
  }
}

/* SL_OK, or the error of the record (after the stream drained). */
sl_code check_record(sl_kernel_args *a, bz_state *st, cudaStream_t s, unsigned long long slot_bytes) {
  volatile unsigned int *flag = &st->h_err->claimed;
  if (*flag == 0) return SL_OK;
  (void)s;
  sl_code sc = sl_cuda_sync(a); /* the copy is complete: read it whole */
  if (sc != SL_OK) return sc;
  bz_err r = *st->h_err;
  if (!r.claimed) return SL_OK;
  char what[768];
  describe(&r, &a->node->in[0], slot_bytes, what, sizeof what);
  const char *where = r.where ? (const char *)(uintptr_t)r.where : "?";
  if (r.stored_chunk >= 0)
    sl_fail(a->err, SL_ERR_FORMAT, "%s, stored chunk %lld (frames %lld-%lld): %s", where, r.stored_chunk,
            r.first_position, r.first_position + r.n_positions - 1, what);
  else
    sl_fail(a->err, r.code == E_COUNT || r.code == E_RANGE ? SL_ERR_INTERNAL : SL_ERR_FORMAT,
            "packed entry %llu: %s", r.entry, what);
  return a->err->code;
}

template <int S>
cudaError_t launch_decode(const bz_params &p, unsigned long long warps, size_t smem, bz_state *st,
                          cudaStream_t s) {
  const int idx = S == 1 ? 0 : S == 2 ? 1 : 2;
  if (smem > 48 * 1024 && st->smem_attr[idx] < smem) {
    cudaError_t e =
        cudaFuncSetAttribute(sl_k_bslz4_decode<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    st->smem_attr[idx] = smem;
  }
  unsigned long long ctas = (warps + BZ_WARPS_PER_CTA - 1) / BZ_WARPS_PER_CTA;
  if (ctas > 0x7fffffffull || warps > 0xffffffffull) return cudaErrorInvalidConfiguration;
  sl_k_bslz4_decode<S><<<(unsigned)ctas, BZ_WARPS_PER_CTA * 32, smem, s>>>(p);
  return cudaSuccess;
}

}  // namespace

extern "C" {
extern const sl_device_kernel sl_cuda_kernels_bslz4[] = {
    {"sl_k_bslz4_index", (const void *)sl_k_bslz4_index, SL_KERNEL_ABI_VERSION},
    {"sl_k_bslz4_decode<1>", (const void *)sl_k_bslz4_decode<1>, SL_KERNEL_ABI_VERSION},
    {"sl_k_bslz4_decode<2>", (const void *)sl_k_bslz4_decode<2>, SL_KERNEL_ABI_VERSION},
    {"sl_k_bslz4_decode<4>", (const void *)sl_k_bslz4_decode<4>, SL_KERNEL_ABI_VERSION},
};
extern const int sl_cuda_kernels_bslz4_count = (int)(sizeof sl_cuda_kernels_bslz4 / sizeof sl_cuda_kernels_bslz4[0]);
}

extern "C" sl_code sl_cuda_bslz4_decode(sl_kernel_args *a) {
  const sl_tensor_desc *in = &a->node->in[0];
  cudaStream_t stream = (cudaStream_t)sl_cuda_stream(a->backend);
  const long long fb = sl_desc_item_bytes(in);
  if (a->pos_count <= 0) return SL_OK;
  if (in->encoding == SL_ENC_NONE) { /* plain frames pass through */
    cudaError_t e = cudaMemcpyAsync(a->out[0], a->in[0], (size_t)(a->pos_count * fb), cudaMemcpyDeviceToDevice,
                                    stream);
    if (e != cudaSuccess) return cuda_fail(a, e, "copy of plain frames");
    return SL_OK;
  }
  const unsigned long long s = sl_dtype_size(in->dtype);
  if (s != 1 && s != 2 && s != 4)
    return sl_fail(a->err, SL_ERR_PIPELINE, "bslz4_decode (CUDA): element size %llu is not 1, 2 or 4", s);
  const long long per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
  const long long minper = in->min_positions_per_stored_chunk > 0 ? in->min_positions_per_stored_chunk : per;
  const unsigned long long full = (unsigned long long)per * (unsigned long long)fb;
  const unsigned long long nel = full / s;
  if (full >= (1ull << 32))
    return sl_fail(a->err, SL_ERR_FORMAT, "bslz4_decode (CUDA): stored chunks of %llu bytes (4 GiB or more)", full);

  /* Entries: each holds at least one frame of this chunk of the scan, and the
   * buffer was sized for this many (sl_desc_buffer_bytes). */
  long long bound = (a->pos_count + minper - 1) / minper + (minper > 1 ? 1 : 0);
  if (bound > a->pos_count) bound = a->pos_count;
  if (bound < 1) bound = 1;
  const unsigned long long buf_bytes = (unsigned long long)sl_desc_buffer_bytes(in, a->pos_count);

  /* Block plan from the dataset's block size. */
  unsigned long long cap = 1, slot = 0, raw_bs = 0;
  if (in->encoding == SL_ENC_BSLZ4 || in->encoding == SL_ENC_BITSHUFFLE) {
    unsigned long long bs_exp = in->encoded_block_elems > 0 ? (unsigned long long)in->encoded_block_elems
                                                            : default_block_elems(s);
    if (in->encoding == SL_ENC_BITSHUFFLE) {
      if (bs_exp % 8)
        return sl_fail(a->err, SL_ERR_USAGE, "bitshuffle: block size %llu elements is not a multiple of 8", bs_exp);
      if (bs_exp > BZ_MAX_BLOCK_BYTES / s)
        return sl_fail(a->err, SL_ERR_USAGE, "bitshuffle: block size %llu elements exceeds the limit of %u bytes",
                       bs_exp, BZ_MAX_BLOCK_BYTES);
      raw_bs = bs_exp;
      cap = nel / bs_exp + (((nel % bs_exp) & ~7ull) ? 1 : 0);
      slot = bs_exp * s;
    } else {
      if (bs_exp % 8 || bs_exp * s > BZ_MAX_BLOCK_BYTES) bs_exp = default_block_elems(s); /* header decides */
      unsigned long long bs_min = bs_exp < default_block_elems(s) ? bs_exp : default_block_elems(s);
      cap = nel / bs_min + (((nel % bs_min) & ~7ull) ? 1 : 0);
      slot = bs_exp * s > 8192 ? bs_exp * s : 8192;
    }
    slot = (slot + 15) & ~15ull;
    if (cap < 1) cap = 1;
  } else { /* SL_ENC_RAW: warps per entry for the copy */
    cap = (full + 16383) / 16384;
    if (cap < 1) cap = 1;
  }
  /* Shared memory per warp: the decoded block plus, for LZ4, the in-place
   * margin for the compressed block at its end (liblz4's in-place margin is
   * 32 + slot / 256; this leaves more). */
  size_t per_warp = slot ? (size_t)slot + (in->encoding == SL_ENC_BSLZ4 ? (size_t)(((slot >> 6) + 64 + 15) & ~15ull) : 16)
                         : 0;
  const size_t smem = per_warp * BZ_WARPS_PER_CTA;
  size_t smem_max = sl_cuda_shared_memory_per_block(a->backend);
  if (smem_max == 0) smem_max = 48 * 1024;
  if (smem > smem_max)
    return sl_fail(a->err, SL_ERR_BACKEND,
                   "bslz4_decode (CUDA): blocks of %llu bytes need %zu bytes of shared memory per CTA, the device "
                   "allows %zu; decode this file with --backend cpu",
                   slot, smem, smem_max);

  /* Device state: error record, entry and block tables. */
  sl_node *node = (sl_node *)a->node;
  bz_state *st = (bz_state *)node->dev_state;
  cudaError_t ce;
  if (!st) {
    st = (bz_state *)calloc(1, sizeof *st);
    if (!st) return sl_fail(a->err, SL_ERR_NOMEM, "bslz4_decode (CUDA): no memory for its state");
    const char *mode = getenv("SLUICE_CUDA_BSLZ4_CHECK");
    st->sync_mode = mode && !strcmp(mode, "sync");
    if ((ce = cudaMalloc((void **)&st->d_err, sizeof(bz_err))) != cudaSuccess ||
        (ce = cudaHostAlloc((void **)&st->h_err, sizeof(bz_err), cudaHostAllocDefault)) != cudaSuccess) {
      bz_state_free(st);
      return cuda_fail(a, ce, "allocating the error record");
    }
    memset(st->h_err, 0, sizeof(bz_err));
    for (int k = 1; k < sl_cuda_kernels_bslz4_count; k++) /* the decode kernels, after the index kernel */
      cudaFuncSetAttribute((const void *)sl_cuda_kernels_bslz4[k].func, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
    node->dev_state = st;
    node->dev_state_free = bz_state_free;
  }
  if (a->chunk == 0) { /* a new pass: the previous one was checked at its last chunk */
    ce = cudaMemsetAsync(st->d_err, 0, sizeof(bz_err), stream);
    if (ce != cudaSuccess) return cuda_fail(a, ce, "clearing the error record");
    st->h_err->claimed = 0;
  } else {
    sl_code rc = check_record(a, st, stream, slot); /* an earlier chunk's error, if already copied back */
    if (rc != SL_OK) return rc;
  }
  if ((size_t)bound > st->ents_cap) {
    cudaFree(st->ents);
    st->ents = NULL;
    st->ents_cap = 0;
    if ((ce = cudaMalloc((void **)&st->ents, (size_t)bound * sizeof(bz_entry))) != cudaSuccess)
      return cuda_fail(a, ce, "allocating the entry table");
    st->ents_cap = (size_t)bound;
  }
  const size_t nblk = in->encoding == SL_ENC_BSLZ4 ? (size_t)bound * (size_t)cap : 1;
  if (nblk > st->blocks_cap) {
    cudaFree(st->blocks);
    st->blocks = NULL;
    st->blocks_cap = 0;
    if ((ce = cudaMalloc((void **)&st->blocks, nblk * sizeof(uint2))) != cudaSuccess)
      return cuda_fail(a, ce, "allocating the block table");
    st->blocks_cap = nblk;
  }

  bz_params p;
  memset(&p, 0, sizeof p);
  p.buf = (const uint8_t *)a->in[0];
  p.out = (uint8_t *)a->out[0];
  p.ents = st->ents;
  p.blocks = st->blocks;
  p.err = st->d_err;
  p.buf_bytes = buf_bytes;
  p.full = full;
  p.frame_bytes = (unsigned long long)fb;
  p.pos_start = a->pos_start;
  p.pos_count = a->pos_count;
  p.bound = (unsigned int)bound;
  p.cap = (unsigned int)cap;
  p.slot_bytes = (unsigned int)slot;
  p.stride = (unsigned int)per_warp;
  p.elem = (unsigned int)s;
  p.enc = (unsigned int)in->encoding;
  p.raw_bs = (unsigned int)raw_bs;

  sl_k_bslz4_index<<<(unsigned)((bound + BZ_INDEX_THREADS - 1) / BZ_INDEX_THREADS), BZ_INDEX_THREADS, 0,
                     stream>>>(p);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_bslz4_index");
  if (rc != SL_OK) return rc;
  const unsigned long long warps = (unsigned long long)bound * cap;
  ce = s == 1 ? launch_decode<1>(p, warps, smem, st, stream)
       : s == 2 ? launch_decode<2>(p, warps, smem, st, stream)
                : launch_decode<4>(p, warps, smem, st, stream);
  if (ce != cudaSuccess) return cuda_fail(a, ce, "launching sl_k_bslz4_decode");
  rc = sl_cuda_check_launch(a, "sl_k_bslz4_decode");
  if (rc != SL_OK) return rc;

  ce = cudaMemcpyAsync(st->h_err, st->d_err, sizeof(bz_err), cudaMemcpyDeviceToHost, stream);
  if (ce != cudaSuccess) return cuda_fail(a, ce, "copying the error record");
  if (st->sync_mode || a->n_chunks <= 0 || a->chunk >= a->n_chunks - 1) {
    rc = sl_cuda_sync(a);
    if (rc != SL_OK) return rc;
    return check_record(a, st, stream, slot);
  }
  return SL_OK;
}
