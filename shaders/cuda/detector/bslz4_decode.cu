/* bslz4_decode on CUDA: stored chunks (bitshuffle-LZ4, bitshuffle, raw) of a
 * packed device buffer to frames, bit for bit the CPU decoder's output
 * (nodes/codec/bslz4.c, nodes/detector/bslz4_decode.c).
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
 *     input it has not read is decoded from global memory), then
 *     un-transposes the block from shared memory straight into the frames (one lane per group of 8
 *     elements: 8*S byte loads, S 8x8 bit transposes, one 8*S-byte store).
 *     Stored-raw chunks (SL_PACKED_STORED_RAW, or raw encoding) are copied by the
 *     warps of their entry; uncompressed bitshuffle blocks are staged and
 *     un-transposed the same way.
 *
 * A chunk of the scan that starts or ends inside a stored chunk writes only
 * its window of that chunk's decoded bytes (every block is still decoded and
 * checked, as on the CPU): no scratch.
 *
 * Flag counts (output 1, when read; nodes/detector/flag_counts.h): zeroed
 * per call, then each lane ANDs the row bytes it loads for its 8 elements
 * (the CPU takes the same AND of the rows) and counts an element with every
 * bit set by an atomicAdd to its frame's group; trailing elements (index
 * kernel), raw copies (their warps) and plain frames (a kernel over the
 * output) are counted by value.
 *
 * Errors: the first failing check (atomicCAS on a device record in the
 * node's device table) stores the entry, the check, the block and byte position
 * and the entry's provenance; the launcher turns it into SL_ERR_FORMAT with
 * the CPU's message. The record is copied to pinned host memory after every
 * call (cudaMemcpyAsync). Default ("deferred") mode: a call looks at the
 * pinned copy of the previous calls before it launches (no sync unless it is
 * set) and the last chunk of the scan synchronizes once and checks, so an
 * error surfaces at the next call (normally the next chunk) or at the end of
 * the pass, never silently. With check_every_call (the node's param
 * check_each_call) every call synchronizes and checks (one
 * 88-byte copy and a queue sync per chunk of the scan).
 *
 * The LZ4 block decoder and un-transpose are in shaders/cuda/codec/
 * (bslz4_device.cuh), the error codes and the CPU's messages beside them
 * (bslz4_errors.cuh).
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
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/codec/bslz4_device.cuh"
#include "shaders/cuda/codec/bslz4_errors.cuh"
#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/detector/bslz4_decode.h"
#include "shaders/cuda/detector/flag_groups.h"

namespace {

/* What an entry is decoded as. */
enum { ENTRY_NONE = 0, ENTRY_LZ4 = 1, ENTRY_BITSHUFFLE = 2, ENTRY_COPY = 3 };
enum { DECODE_WARPS_PER_CTA = 2, INDEX_THREADS = 128 };

/* What the index kernel found for one entry. */
struct chunk_entry {
  unsigned long long src;  /* offset of the stored bytes in the packed buffer */
  long long dst;           /* out offset of decoded byte 0 of the stored chunk */
  unsigned long long lo, hi; /* decoded bytes [lo, hi) of the stored chunk are written */
  unsigned long long nel;  /* elements of the stored chunk */
  unsigned int kind, nblocks, bs, pad; /* bs: elements per block */
};

/* The kernels' arguments (by value). */
struct decode_args {
  const uint8_t *buf;
  uint8_t *out;
  chunk_entry *ents;
  uint2 *blocks; /* (offset of the LZ4 data in the chunk, compressed length) */
  bslz4_error_record *err;
  unsigned long long buf_bytes, full, frame_bytes;
  long long pos_start, pos_count;
  unsigned int bound, cap;       /* entries launched; block slots per entry */
  unsigned int slot_bytes; /* shared bytes per warp for the decoded block */
  unsigned int stride;                /* shared bytes per warp */
  unsigned int elem, enc, raw_bs; /* raw_bs: block elements of uncompressed bitshuffle */
  flag_sink flags;                /* flags.counts NULL: flag counts not read */
};

/* The first failing check of the call wins (atomicCAS on `claimed`). */
__device__ void record_error(const decode_args &p, const sl_packed_entry *pe, unsigned long long entry,
                             unsigned code, unsigned long long block, unsigned long long pos,
                             unsigned long long v1, unsigned long long v2, unsigned long long v3) {
  bslz4_error_record *e = p.err;
  if (atomicCAS(&e->claimed, 0u, 1u) != 0u) return;
  e->code = code;
  e->entry = entry;
  e->block = block;
  e->pos = pos;
  e->v1 = v1;
  e->v2 = v2;
  e->v3 = v3;
  if (pe) {
    e->has_entry = 1u;
    e->origin = pe->origin;
    e->first_position = pe->first_position;
    e->n_positions = pe->n_positions;
  } else {
    e->has_entry = 0u;
    e->origin = 0;
    e->first_position = -1;
    e->n_positions = 0;
  }
  __threadfence();
}

/* ------------------------------------------------------------ index --- */

/* Uncompressed bitshuffle (the whole chunk stored transposed by blocks):
 * false after recording why the entry cannot be decoded. */
__device__ bool index_bitshuffle(const decode_args &p, const sl_packed_entry *pe, unsigned int i,
                                 unsigned long long size, chunk_entry &ent, unsigned long long &nel,
                                 unsigned long long &bs, unsigned long long &pos, unsigned long long &tail) {
  const unsigned long long s = p.elem, full = p.full;
  if (size % s) {
    record_error(p, pe, i, BSLZ4_E_BS_MULT, 0, 0, size, 0, 0);
    return false;
  }
  if (size > full) {
    record_error(p, pe, i, BSLZ4_E_BS_CAP, 0, 0, size, full, 0);
    return false;
  }
  if (size != full) {
    record_error(p, pe, i, BSLZ4_E_SHORT, 0, 0, size, full, 0);
    return false;
  }
  nel = full / s;
  bs = p.raw_bs;
  unsigned long long nb = nel / bs + (((nel % bs) & ~7ull) ? 1 : 0);
  if (nb > p.cap) { /* cannot happen: the launcher sized cap from the same numbers */
    record_error(p, pe, i, BSLZ4_E_GPU_NBLOCKS, 0, 0, nb, p.cap, bs * s);
    return false;
  }
  ent.nblocks = (unsigned int)nb;
  pos = (nel - nel % 8) * s; /* the tail sits where it decodes */
  tail = (nel % 8) * s;
  return true;
}

/* Bitshuffle-LZ4: the header, then the block length prefixes (each offset
 * depends on the previous length) into the block table, then the trailing
 * bytes; false after recording the first check that failed. */
__device__ bool index_bslz4(const decode_args &p, const sl_packed_entry *pe, unsigned int i, const uint8_t *src,
                            unsigned long long size, chunk_entry &ent, unsigned long long &nel,
                            unsigned long long &bs, unsigned long long &pos, unsigned long long &tail) {
  const unsigned long long s = p.elem, full = p.full;
  if (size < 12) {
    record_error(p, pe, i, BSLZ4_E_HDR_TRUNC, 0, 0, size, 0, 0);
    return false;
  }
  const unsigned long long T = rd_be64(src);
  const unsigned long long B = rd_be32(src + 8);
  unsigned code = BSLZ4_E_OK;
  if (T % s) code = BSLZ4_E_TOTAL_MULT;
  else if (B == 0) code = BSLZ4_E_BLOCK_ZERO;
  else if (B % (8 * s)) code = BSLZ4_E_BLOCK_MULT;
  else if (B > BSLZ4_MAX_BLOCK_BYTES) code = BSLZ4_E_BLOCK_MAX;
  else if (T > full) code = BSLZ4_E_TOTAL_CAP;
  else if (B > p.slot_bytes) code = BSLZ4_E_GPU_BLOCK;
  if (code != BSLZ4_E_OK) {
    const bool total = code == BSLZ4_E_TOTAL_MULT || code == BSLZ4_E_TOTAL_CAP;
    record_error(p, pe, i, code, 0, total ? 0 : 8, total ? T : B,
                 code == BSLZ4_E_TOTAL_CAP ? full : code == BSLZ4_E_GPU_BLOCK ? p.slot_bytes : 0, 0);
    return false;
  }
  nel = T / s;
  bs = B / s;
  const unsigned long long nfull = nel / bs, last = (nel % bs) & ~7ull;
  const unsigned long long nb = nfull + (last ? 1 : 0);
  if (nb > p.cap) {
    record_error(p, pe, i, BSLZ4_E_GPU_NBLOCKS, 0, 8, nb, p.cap, B);
    return false;
  }
  pos = 12;
  uint2 *bt = p.blocks + (unsigned long long)i * p.cap;
  for (unsigned long long k = 0; k < nb; k++) {
    if (size - pos < 4) {
      record_error(p, pe, i, BSLZ4_E_LEN_TRUNC, k, pos, size - pos, 0, 0);
      return false;
    }
    const unsigned long long clen = rd_be32(src + pos);
    const unsigned long long remain = size - pos - 4;
    if (clen > remain) {
      record_error(p, pe, i, BSLZ4_E_LEN_PAST, k, pos, clen, remain, 0);
      return false;
    }
    if (clen == 0) {
      record_error(p, pe, i, BSLZ4_E_LEN_ZERO, k, pos, 0, 0, 0);
      return false;
    }
    bt[k] = make_uint2((unsigned int)(pos + 4), (unsigned int)clen);
    pos += 4 + clen;
  }
  tail = (nel - nfull * bs - last) * s;
  const unsigned long long remain = size - pos;
  if (remain < tail) {
    record_error(p, pe, i, BSLZ4_E_TAIL_TRUNC, 0, pos, nel % 8, tail, remain);
    return false;
  }
  if (remain > tail) {
    record_error(p, pe, i, BSLZ4_E_TAIL_GARBAGE, 0, pos + tail, remain - tail, tail, 0);
    return false;
  }
  if (T != full) { /* the CPU's "decodes to T bytes, expected full" */
    record_error(p, pe, i, BSLZ4_E_SHORT, 0, 0, T, full, 0);
    return false;
  }
  ent.nblocks = (unsigned int)nb;
  return true;
}

/* Checks entry i exactly like the CPU and fills ent; its kind stays
 * ENTRY_NONE when a check failed (the decode kernel skips it). Copies the
 * (n % 8) trailing elements, which are stored verbatim. */
__device__ void index_entry(const decode_args &p, unsigned int i, chunk_entry &ent) {
  const sl_packed_items *pk = (const sl_packed_items *)p.buf;
  unsigned long long n = pk->n;
  if (i == 0 && n > p.bound) record_error(p, NULL, 0, BSLZ4_E_COUNT, 0, 0, n, p.bound, 0);
  if (i >= n) return;
  const sl_packed_entry *pe = &pk->entries[i];
  if (sizeof(sl_packed_items) + (unsigned long long)(i + 1) * sizeof(sl_packed_entry) > p.buf_bytes) {
    record_error(p, NULL, i, BSLZ4_E_RANGE, 0, 0, 0, 0, p.buf_bytes);
    return;
  }
  const unsigned long long off = pe->offset, size = pe->size;
  const uint32_t stored_raw = pe->flags & SL_PACKED_STORED_RAW;
  const long long first = pe->first_position, npos = pe->n_positions;
  const unsigned long long s = p.elem, fb = p.frame_bytes;
  long long lo = first > p.pos_start ? first : p.pos_start;
  long long hi = first + npos;
  if (hi > p.pos_start + p.pos_count) hi = p.pos_start + p.pos_count;
  if (hi <= lo) {
    record_error(p, pe, i, BSLZ4_E_NOFRAME, 0, 0, 0, 0, 0);
    return;
  }
  if (off > p.buf_bytes || size > p.buf_bytes - off) {
    record_error(p, pe, i, BSLZ4_E_RANGE, 0, 0, off, size, p.buf_bytes);
    return;
  }
  const unsigned long long skip = (unsigned long long)(lo - first) * fb;
  const unsigned long long want = (unsigned long long)(hi - lo) * fb;
  ent.src = off;
  ent.dst = (long long)((unsigned long long)(lo - p.pos_start) * fb) - (long long)skip;
  ent.lo = skip;
  ent.hi = skip + want;
  const uint8_t *src = p.buf + off;

  if (stored_raw || p.enc == SL_ENC_RAW) {
    if (size < skip + want) {
      record_error(p, pe, i, BSLZ4_E_RAW_SHORT, 0, 0, size, skip + want, 0);
    } else {
      ent.kind = ENTRY_COPY;
      ent.nblocks = p.cap;
    }
    return;
  }

  unsigned long long nel, bs, pos, tail;
  const bool ok = p.enc == SL_ENC_BITSHUFFLE ? index_bitshuffle(p, pe, i, size, ent, nel, bs, pos, tail)
                                             : index_bslz4(p, pe, i, src, size, ent, nel, bs, pos, tail);
  if (!ok) return;
  /* The trailing (n % 8) elements, verbatim, inside the window. */
  const unsigned long long t0 = nel * s - tail;
  for (unsigned long long x = 0; x < tail; x++) {
    unsigned long long d = t0 + x;
    if (d >= ent.lo && d < ent.hi) p.out[ent.dst + (long long)d] = src[pos + x];
  }
  if (p.flags.counts) /* the trailing elements' flags, by value */
    for (unsigned long long x = 0; x < tail; x += s) {
      const unsigned long long d = t0 + x;
      bool all = d >= ent.lo && d < ent.hi;
      for (unsigned long long b = 0; b < s; b++) all = all && src[pos + x + b] == 0xFF;
      if (all) {
        const unsigned long long q = (unsigned long long)(ent.dst + (long long)d) / s, f = q / p.flags.item;
        atomicAdd(&p.flags.counts[f * p.flags.groups + (q - f * p.flags.item) / p.flags.group], 1u);
      }
    }
  ent.nel = nel;
  ent.bs = (unsigned int)bs;
  ent.kind = p.enc == SL_ENC_BITSHUFFLE ? ENTRY_BITSHUFFLE : ENTRY_LZ4;
}

/* One thread per packed entry, over a fixed upper bound of entries. */
__global__ void __launch_bounds__(INDEX_THREADS) sl_k_bslz4_index(decode_args p) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.bound) return;
  chunk_entry ent;
  memset(&ent, 0, sizeof ent);
  ent.kind = ENTRY_NONE;
  index_entry(p, i, ent);
  p.ents[i] = ent;
}

/* ------------------------------------------------------------ decode --- */

/* One warp per LZ4 block: the compressed block is copied to the end of the
 * warp's shared-memory buffer and decoded in place into its start (~8.4 KB of
 * shared memory per warp, 13 CTAs per SM), then unshuffled from shared memory
 * (docs/optimisation-notes.md: 309 GB/s on the H200, against 271 and 251 GB/s
 * for two layouts that staged the compressed block beside the decoded one). */
template <int S>
__global__ void __launch_bounds__(DECODE_WARPS_PER_CTA * 32, 13) sl_k_bslz4_decode(decode_args p) {
  extern __shared__ uint4 decode_smem[];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int gw = blockIdx.x * DECODE_WARPS_PER_CTA + warp; /* < 2^32: the launcher checks */
  const unsigned int entry = gw / p.cap;
  const unsigned int j = gw - entry * p.cap;
  if (entry >= p.bound) return;
  const chunk_entry e = p.ents[entry];
  if (e.kind == ENTRY_NONE || j >= e.nblocks) return;
  const uint8_t *src = p.buf + e.src;

  if (e.kind == ENTRY_COPY) { /* the entry's warps split its window */
    const unsigned long long want = e.hi - e.lo;
    unsigned long long piece = (want + p.cap - 1) / p.cap;
    piece = (piece + 15) & ~15ull;
    const unsigned long long a = (unsigned long long)j * piece;
    if (a >= want) return;
    const unsigned long long len = want - a < piece ? want - a : piece;
    warp_copy(p.out + e.dst + (long long)(e.lo + a), src + e.lo + a, len, lane);
    if (p.flags.counts) /* pieces are whole elements: 16-byte multiples from a frame's start */
      flag_count_copied<S>(p.flags, src + e.lo + a, (unsigned long long)(e.dst + (long long)(e.lo + a)), len, lane);
    return;
  }

  uint8_t *blk = (uint8_t *)decode_smem + (size_t)warp * p.stride;
  const uint32_t nel = (uint32_t)e.nel; /* a stored chunk is < 4 GiB (HDF5) */
  const uint32_t nfull = nel / e.bs;
  const uint32_t m = j < nfull ? e.bs : ((nel - nfull * e.bs) & ~7u);
  const uint32_t want = m * S;
  const unsigned long long b0 = (unsigned long long)j * e.bs * S;

  if (e.kind == ENTRY_BITSHUFFLE) {
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
      r = lz4_decode_warp(blk + gap, bt.y, blk, want, lane, &got, gap);
    }
    if (r == 3) { /* too large to stage, or in place would overwrite unread input: from global memory */
      __syncwarp();
      r = lz4_decode_warp(cin, bt.y, blk, want, lane, &got, LZ4_OUT_OF_PLACE);
    }
    if (r != 0) {
      if (lane == 0) {
        const sl_packed_entry *pe = &((const sl_packed_items *)p.buf)->entries[entry];
        record_error(p, pe, entry, r == 1 ? BSLZ4_E_LZ4_CORRUPT : BSLZ4_E_LZ4_SIZE, j, bt.x - 4,
                     r == 1 ? bt.y : got, want, 0);
      }
      return;
    }
  }
  unshuffle_store<S>(blk, m, p.out, e.dst, b0, e.lo, e.hi, lane, p.flags);
}

/* Plain frames (encoding none) copied to out: their flag counts by value,
 * one thread per element. */
template <int S>
__global__ void sl_k_flag_count_plain(const uint8_t *out, unsigned long long elems, flag_sink fs) {
  for (unsigned long long q = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; q < elems;
       q += (unsigned long long)gridDim.x * blockDim.x) {
    bool all = true;
#pragma unroll
    for (int b = 0; b < S; b++) all &= out[q * S + b] == 0xFF;
    if (all) flag_count_at<S>(fs, q * S);
  }
}

static const sl_device_kernel bslz4_decode_kernels[] = {
    SL_CUDA_KERNEL_ENTRY("sl_k_bslz4_index", sl_k_bslz4_index),
    SL_CUDA_KERNEL_ENTRY("sl_k_bslz4_decode<1>", sl_k_bslz4_decode<1>),
    SL_CUDA_KERNEL_ENTRY("sl_k_bslz4_decode<2>", sl_k_bslz4_decode<2>),
    SL_CUDA_KERNEL_ENTRY("sl_k_bslz4_decode<4>", sl_k_bslz4_decode<4>),
    SL_CUDA_KERNEL_ENTRY("sl_k_flag_count_plain<1>", sl_k_flag_count_plain<1>),
    SL_CUDA_KERNEL_ENTRY("sl_k_flag_count_plain<2>", sl_k_flag_count_plain<2>),
    SL_CUDA_KERNEL_ENTRY("sl_k_flag_count_plain<4>", sl_k_flag_count_plain<4>),
};
/* Entries [1, DECODE_KERNELS) are the decode kernels (their shared memory carveout). */
enum { DECODE_KERNELS = 4 };
SL_CUDA_REGISTER_KERNELS(bslz4_decode_kernels, "bslz4_decode")

/* ------------------------------------------------------------ host --- */

/* The node's device state: the pinned copy of the error record (its device
 * side, the entry and block tables are pieces of the node's device table). */
struct decode_state {
  bslz4_error_record *h_err; /* pinned */
  size_t smem_attr[3]; /* dynamic shared memory limit set per instance */
};

void decode_state_release(void *v) {
  decode_state *st = (decode_state *)v;
  if (!st) return;
  cudaFreeHost(st->h_err);
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

/* How one call decodes: entries, block slots and shared memory, from the
 * dataset's block size. */
struct decode_plan {
  unsigned long long elem, full, bound, buf_bytes;
  unsigned long long cap, slot, raw_bs; /* block slots per entry, bytes per slot */
  size_t per_warp, smem;                /* shared memory per warp, per CTA */
};

/* Block slots per entry and bytes per slot. */
sl_code plan_blocks(const sl_tensor_desc *in, sl_error *err, decode_plan *pl) {
  const unsigned long long s = pl->elem, nel = pl->full / s;
  unsigned long long cap = 1, slot = 0, raw_bs = 0;
  if (in->encoding == SL_ENC_BSLZ4 || in->encoding == SL_ENC_BITSHUFFLE) {
    unsigned long long bs_exp = in->encoded_block_elems > 0 ? (unsigned long long)in->encoded_block_elems
                                                            : default_block_elems(s);
    if (in->encoding == SL_ENC_BITSHUFFLE) {
      if (bs_exp % 8)
        return sl_fail(err, SL_ERR_USAGE, "bitshuffle: block size %llu elements is not a multiple of 8", bs_exp);
      if (bs_exp > BSLZ4_MAX_BLOCK_BYTES / s)
        return sl_fail(err, SL_ERR_USAGE, "bitshuffle: block size %llu elements exceeds the limit of %u bytes",
                       bs_exp, BSLZ4_MAX_BLOCK_BYTES);
      raw_bs = bs_exp;
      cap = nel / bs_exp + (((nel % bs_exp) & ~7ull) ? 1 : 0);
      slot = bs_exp * s;
    } else {
      if (bs_exp % 8 || bs_exp * s > BSLZ4_MAX_BLOCK_BYTES) bs_exp = default_block_elems(s); /* header decides */
      unsigned long long bs_min = bs_exp < default_block_elems(s) ? bs_exp : default_block_elems(s);
      cap = nel / bs_min + (((nel % bs_min) & ~7ull) ? 1 : 0);
      slot = bs_exp * s > 8192 ? bs_exp * s : 8192;
    }
    slot = (slot + 15) & ~15ull;
    if (cap < 1) cap = 1;
  } else { /* SL_ENC_RAW: warps per entry for the copy */
    cap = (pl->full + 16383) / 16384;
    if (cap < 1) cap = 1;
  }
  pl->cap = cap;
  pl->slot = slot;
  pl->raw_bs = raw_bs;
  return SL_OK;
}

/* The plan of a call over a->pos_count positions of an encoded port. */
sl_code plan_call(const sl_tensor_desc *in, sl_kernel_args *a, decode_plan *pl) {
  memset(pl, 0, sizeof *pl);
  const long long fb = sl_desc_item_bytes(in);
  const unsigned long long s = sl_dtype_size(in->dtype);
  if (s != 1 && s != 2 && s != 4)
    return sl_fail(a->err, SL_ERR_PIPELINE, "bslz4_decode (CUDA): element size %llu is not 1, 2 or 4", s);
  const long long per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
  const unsigned long long full = (unsigned long long)per * (unsigned long long)fb;
  if (full >= (1ull << 32))
    return sl_fail(a->err, SL_ERR_FORMAT, "bslz4_decode (CUDA): stored chunks of %llu bytes (4 GiB or more)", full);
  pl->elem = s;
  pl->full = full;
  /* entries: at most what a call over these positions holds (the producer's
   * bound counts as many); bytes: what the producer wrote */
  pl->bound = (unsigned long long)sl_desc_encoded_entries(in, a->pos_count);
  pl->buf_bytes = a->in_bytes[0] > 0 ? (unsigned long long)a->in_bytes[0] : 0;
  sl_code rc = plan_blocks(in, a->err, pl);
  if (rc != SL_OK) return rc;
  /* Shared memory per warp: the decoded block plus, for LZ4, the in-place
   * margin for the compressed block at its end (liblz4's in-place margin is
   * 32 + slot / 256; this leaves more). */
  const unsigned long long slot = pl->slot;
  pl->per_warp = slot ? (size_t)slot + (in->encoding == SL_ENC_BSLZ4 ? (size_t)(((slot >> 6) + 64 + 15) & ~15ull) : 16)
                      : 0;
  pl->smem = pl->per_warp * DECODE_WARPS_PER_CTA;
  size_t smem_max = a->dev->shared_memory_per_block;
  if (smem_max == 0) smem_max = 48 * 1024;
  if (pl->smem > smem_max)
    return sl_fail(a->err, SL_ERR_BACKEND,
                   "bslz4_decode (CUDA): blocks of %llu bytes need %zu bytes of shared memory per CTA, the device "
                   "allows %zu; decode this file with --backend cpu",
                   slot, pl->smem, smem_max);
  return SL_OK;
}

/* The device table of a call: the error record (first: the same place in
 * every call), then the entry and block tables of this call's plan. */
struct decode_pieces {
  bslz4_error_record *err;
  chunk_entry *ents;
  uint2 *blocks;
};

void decode_layout(sl_table *t, const decode_plan *pl, sl_encoding enc, decode_pieces *o) {
  o->err = (bslz4_error_record *)sl_table_take(t, sizeof(bslz4_error_record));
  o->ents = (chunk_entry *)sl_table_take(t, (int64_t)pl->bound * (int64_t)sizeof(chunk_entry));
  const int64_t nblk = enc == SL_ENC_BSLZ4 ? (int64_t)pl->bound * (int64_t)pl->cap : 1;
  o->blocks = (uint2 *)sl_table_take(t, nblk * (int64_t)sizeof(uint2));
}

/* The node's state with the pinned copy of its error record, made on the
 * first call. */
sl_code state_get(const sl_cuda_bslz4_decode_params *p, sl_kernel_args *a, decode_state **out) {
  decode_state *st = (decode_state *)*p->device_state.state;
  if (!st) {
    st = (decode_state *)calloc(1, sizeof *st);
    if (!st) return sl_fail(a->err, SL_ERR_NOMEM, "bslz4_decode (CUDA): no memory for its state");
    cudaError_t ce;
    if ((ce = cudaHostAlloc((void **)&st->h_err, sizeof(bslz4_error_record), cudaHostAllocDefault)) != cudaSuccess) {
      decode_state_release(st);
      return cuda_fail(a, ce, "allocating the error record");
    }
    memset(st->h_err, 0, sizeof(bslz4_error_record));
    for (int k = 1; k < DECODE_KERNELS; k++)
      cudaFuncSetAttribute(bslz4_decode_kernels[k].func, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared); /* the decode kernels, after the index kernel */
    *p->device_state.state = st;
    *p->device_state.release = decode_state_release;
  }
  *out = st;
  return SL_OK;
}

/* SL_OK, or the error of the record (after the queue drained). */
sl_code check_record(sl_kernel_args *a, decode_state *st, const sl_tensor_desc *in, unsigned long long slot_bytes) {
  volatile unsigned int *flag = &st->h_err->claimed;
  if (*flag == 0) return SL_OK;
  sl_code sc = sl_cuda_wait(a); /* the copy is complete: read it whole */
  if (sc != SL_OK) return sc;
  bslz4_error_record r = *st->h_err;
  if (!r.claimed) return SL_OK;
  char what[768];
  bslz4_describe(&r, in, slot_bytes, what, sizeof what);
  if (r.has_entry) {
    char chunk[768];
    sl_packed_describe(in, r.origin, r.first_position, r.n_positions, chunk, sizeof chunk);
    sl_fail(a->err, SL_ERR_FORMAT, "%s: %s", chunk, what);
  }
  else
    sl_fail(a->err, r.code == BSLZ4_E_COUNT || r.code == BSLZ4_E_RANGE ? SL_ERR_INTERNAL : SL_ERR_FORMAT,
            "packed entry %llu: %s", r.entry, what);
  return a->err->code;
}

template <int S>
cudaError_t launch_decode(const decode_args &p, unsigned long long warps, size_t smem, decode_state *st,
                          cudaStream_t s) {
  const int idx = S == 1 ? 0 : S == 2 ? 1 : 2;
  if (smem > 48 * 1024 && st->smem_attr[idx] < smem) {
    cudaError_t e =
        cudaFuncSetAttribute(sl_k_bslz4_decode<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    st->smem_attr[idx] = smem;
  }
  unsigned long long ctas = (warps + DECODE_WARPS_PER_CTA - 1) / DECODE_WARPS_PER_CTA;
  if (ctas > 0x7fffffffull || warps > 0xffffffffull) return cudaErrorInvalidConfiguration;
  sl_k_bslz4_decode<S><<<(unsigned)ctas, DECODE_WARPS_PER_CTA * 32, smem, s>>>(p);
  return cudaSuccess;
}

/* The flag counts' place and layout when they are read (`counted`), else
 * counts NULL. */
flag_sink flag_sink_of(const sl_kernel_args *a, const sl_tensor_desc *in, bool counted) {
  flag_sink fs;
  memset(&fs, 0, sizeof fs);
  const long long item = sl_desc_item_elems(in);
  fs.counts = counted ? (unsigned int *)a->out[1] : NULL;
  fs.item = (unsigned long long)item;
  fs.groups = (unsigned int)sl_flag_groups(item);
  fs.group = SL_FLAG_GROUP_PIXELS;
  return fs;
}

/* Zeroes this call's flag counts (when read) before anything counts into them. */
sl_code flag_counts_clear(const sl_cuda_bslz4_decode_params *params, sl_kernel_args *a, cudaStream_t stream) {
  if (!params->flag_counts) return SL_OK;
  const size_t bytes = (size_t)(a->pos_count * sl_flag_groups(sl_desc_item_elems(&params->chunks))) * sizeof(uint32_t);
  cudaError_t e = cudaMemsetAsync(a->out[1], 0, bytes, stream);
  return e == cudaSuccess ? SL_OK : cuda_fail(a, e, "clearing the flag counts");
}

decode_args make_args(const sl_kernel_args *a, const decode_pieces *dt, const decode_plan *pl,
                      const sl_tensor_desc *in, bool counted) {
  decode_args p;
  memset(&p, 0, sizeof p);
  p.buf = (const uint8_t *)a->in[0];
  p.out = (uint8_t *)a->out[0];
  p.ents = dt->ents;
  p.blocks = dt->blocks;
  p.err = dt->err;
  p.buf_bytes = pl->buf_bytes;
  p.full = pl->full;
  p.frame_bytes = (unsigned long long)sl_desc_item_bytes(in);
  p.pos_start = a->pos_start;
  p.pos_count = a->pos_count;
  p.bound = (unsigned int)pl->bound;
  p.cap = (unsigned int)pl->cap;
  p.slot_bytes = (unsigned int)pl->slot;
  p.stride = (unsigned int)pl->per_warp;
  p.elem = (unsigned int)pl->elem;
  p.enc = (unsigned int)in->encoding;
  p.raw_bs = (unsigned int)pl->raw_bs;
  p.flags = flag_sink_of(a, in, counted);
  return p;
}

}  // namespace

extern "C" int64_t sl_cuda_bslz4_decode_table_bytes(const sl_tensor_desc *in, int64_t positions) {
  if (in->encoding == SL_ENC_NONE || positions <= 0) return 0;
  const unsigned long long s = sl_dtype_size(in->dtype);
  if (s != 1 && s != 2 && s != 4) return 0; /* refused by the launcher */
  decode_plan pl;
  memset(&pl, 0, sizeof pl);
  const long long per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
  pl.elem = s;
  pl.full = (unsigned long long)per * (unsigned long long)sl_desc_item_bytes(in);
  pl.bound = (unsigned long long)sl_desc_encoded_entries(in, positions);
  sl_error ignored; /* a refused block size fails the call, which then takes nothing */
  sl_error_clear(&ignored);
  if (plan_blocks(in, &ignored, &pl) != SL_OK) return 0;
  sl_table t = sl_table_counter();
  decode_pieces o;
  decode_layout(&t, &pl, in->encoding, &o);
  return t.used;
}

extern "C" sl_code sl_cuda_bslz4_decode(const sl_cuda_bslz4_decode_params *params, sl_kernel_args *a) {
  const sl_tensor_desc *in = &params->chunks;
  cudaStream_t stream = sl_cuda_queue(a);
  if (a->pos_count <= 0) return SL_OK;
  if (params->flag_counts && !a->out[1])
    return sl_fail(a->err, SL_ERR_INTERNAL, "bslz4_decode (CUDA): flag_counts is read but has no buffer");
  sl_code rc = flag_counts_clear(params, a, stream);
  if (rc != SL_OK) return rc;
  if (in->encoding == SL_ENC_NONE) { /* plain frames pass through */
    cudaError_t e = cudaMemcpyAsync(a->out[0], a->in[0], (size_t)(a->pos_count * sl_desc_item_bytes(in)),
                                    cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return cuda_fail(a, e, "copy of plain frames");
    if (!params->flag_counts) return SL_OK;
    const flag_sink fs = flag_sink_of(a, in, true);
    const unsigned long long elems = (unsigned long long)a->pos_count * fs.item;
    const size_t s = sl_dtype_size(in->dtype);
    const unsigned grid = (unsigned)((elems + 255) / 256 < 4096 ? (elems + 255) / 256 : 4096);
    const uint8_t *o = (const uint8_t *)a->out[0];
    if (s == 1) sl_k_flag_count_plain<1><<<grid, 256, 0, stream>>>(o, elems, fs);
    else if (s == 2) sl_k_flag_count_plain<2><<<grid, 256, 0, stream>>>(o, elems, fs);
    else sl_k_flag_count_plain<4><<<grid, 256, 0, stream>>>(o, elems, fs);
    return sl_cuda_check_launch(a, "sl_k_flag_count_plain");
  }
  decode_plan pl;
  rc = plan_call(in, a, &pl);
  if (rc != SL_OK) return rc;
  sl_table t = sl_table_lent(a);
  decode_pieces dt;
  decode_layout(&t, &pl, in->encoding, &dt);
  if ((rc = sl_table_check(&t, a, "bslz4_decode (CUDA)")) != SL_OK) return rc;
  decode_state *st = NULL;
  if ((rc = state_get(params, a, &st)) != SL_OK) return rc;
  cudaError_t ce;
  if (a->chunk == 0) { /* a new pass: the previous one was checked at its last chunk */
    ce = cudaMemsetAsync(dt.err, 0, sizeof(bslz4_error_record), stream);
    if (ce != cudaSuccess) return cuda_fail(a, ce, "clearing the error record");
    st->h_err->claimed = 0;
  } else {
    rc = check_record(a, st, in, pl.slot); /* an earlier chunk's error, if already copied back */
    if (rc != SL_OK) return rc;
  }
  decode_args p = make_args(a, &dt, &pl, in, params->flag_counts);

  sl_k_bslz4_index<<<(unsigned)((pl.bound + INDEX_THREADS - 1) / INDEX_THREADS), INDEX_THREADS, 0, stream>>>(p);
  rc = sl_cuda_check_launch(a, "sl_k_bslz4_index");
  if (rc != SL_OK) return rc;
  const unsigned long long warps = pl.bound * pl.cap;
  ce = pl.elem == 1   ? launch_decode<1>(p, warps, pl.smem, st, stream)
       : pl.elem == 2 ? launch_decode<2>(p, warps, pl.smem, st, stream)
                      : launch_decode<4>(p, warps, pl.smem, st, stream);
  if (ce != cudaSuccess) return cuda_fail(a, ce, "launching sl_k_bslz4_decode");
  rc = sl_cuda_check_launch(a, "sl_k_bslz4_decode");
  if (rc != SL_OK) return rc;

  ce = cudaMemcpyAsync(st->h_err, dt.err, sizeof(bslz4_error_record), cudaMemcpyDeviceToHost, stream);
  if (ce != cudaSuccess) return cuda_fail(a, ce, "copying the error record");
  if (params->check_every_call || a->n_chunks <= 0 || a->chunk >= a->n_chunks - 1) {
    rc = sl_cuda_wait(a);
    if (rc != SL_OK) return rc;
    return check_record(a, st, in, pl.slot);
  }
  return SL_OK;
}
