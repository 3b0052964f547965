/* Bitshuffle and bitshuffle-LZ4 chunk decoding (HDF5 filter 32008, the format
 * Dectris detectors write). Decode side only. The format, the checks and the
 * error messages are described in docs/formats/bitshuffle-lz4.md.
 *
 * Every length, offset and count read from the input is checked; a malformed
 * chunk returns SL_ERR_FORMAT with a message that says what was wrong and at
 * which byte offset / block. Nothing is allocated for the default block size
 * (8 KiB): blocks are LZ4-decoded into a buffer on the stack and bit
 * un-transposed from there into the destination. */
#ifndef SL_BSLZ4_H
#define SL_BSLZ4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/simd.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"

/* HDF5 filter id of bitshuffle. */
#define SL_BSHUF_FILTER_ID 32008
/* Bytes of the header of an LZ4-compressed chunk: u64 BE total bytes, u32 BE block bytes. */
#define SL_BSLZ4_HEADER_BYTES 12
/* Largest block (in bytes) this decoder accepts; larger ones are rejected as
 * malformed (the reference writer's default is 8 KiB). */
#define SL_BSLZ4_MAX_BLOCK_BYTES ((size_t)1 << 20)
/* Blocks up to this many bytes are decoded through a stack buffer; larger ones
 * use the caller's scratch (sl_bslz4_opts) or one heap buffer per call. */
#define SL_BSLZ4_STACK_BLOCK_BYTES ((size_t)16384)
/* Largest element size accepted (bitshuffle works on any; sluice reads 1/2/4/8). */
#define SL_BSHUF_MAX_ELEM_SIZE 64

typedef struct sl_bslz4_opts {
  sl_simd simd;       /* SL_SIMD_AUTO for the default */
  uint8_t *scratch;   /* optional: block buffer used for blocks > SL_BSLZ4_STACK_BLOCK_BYTES */
  size_t scratch_size; /* bytes at scratch; needs sl_bslz4_scratch_size(block_bytes) */
  /* Optional: a bitmap of the decoded elements that have every bit set (the
   * flag value of an unsigned detector dtype), bit i (of byte i / 8, LSB
   * first) for element i; sl_ones_bitmap_bytes(n) bytes for n elements, all
   * written on success. Taken from the bit-rows while a block is in cache:
   * an element is all ones exactly when its bit is set in each of its 8*s
   * rows, so the bitmap is the AND of the rows (no pass over the output).
   * The bits past element n in the last byte are cleared. */
  uint8_t *ones;
} sl_bslz4_opts;

/* Bytes of an sl_bslz4_opts.ones bitmap for n elements. */
static inline size_t sl_ones_bitmap_bytes(size_t n) { return (n + 7) / 8; }

/* The 12-byte header of an LZ4 chunk, checked on its own (size >= 12, total a
 * multiple of elem_size, block size nonzero, a multiple of 8 * elem_size and
 * at most SL_BSLZ4_MAX_BLOCK_BYTES). */
typedef struct sl_bslz4_header {
  uint64_t total_bytes; /* uncompressed bytes of the chunk */
  uint32_t block_bytes; /* block size in bytes */
} sl_bslz4_header;
sl_code sl_bslz4_read_header(const uint8_t *src, size_t src_size, size_t elem_size,
                             sl_bslz4_header *hdr, sl_error *err);

/* Scratch bytes a decode of a chunk with this block size needs when the caller
 * provides it (0 when the stack buffer suffices). */
size_t sl_bslz4_scratch_size(size_t block_bytes);

/* Decodes one HDF5 chunk written by the bitshuffle filter with LZ4 compression
 * (cd_values[4] == 2): 12-byte big-endian header (u64 total uncompressed bytes,
 * u32 block size in BYTES), then per block a u32 BE compressed length and a raw
 * LZ4 block; the trailing (n % 8) elements are copied verbatim. elem_size is
 * 1..SL_BSHUF_MAX_ELEM_SIZE (SIMD kernels for 1, 2, 4, 8). dst_capacity bytes
 * are available at dst; *decoded_bytes is set to the header's total on
 * success. The caller checks that total against the chunk size it expects. */
sl_code sl_bslz4_decode(const uint8_t *src, size_t src_size, size_t elem_size, uint8_t *dst,
                        size_t dst_capacity, size_t *decoded_bytes, sl_error *err);
/* Same with options (forced kernel, caller scratch); opts may be NULL. */
sl_code sl_bslz4_decode_opts(const uint8_t *src, size_t src_size, size_t elem_size, uint8_t *dst,
                             size_t dst_capacity, size_t *decoded_bytes,
                             const sl_bslz4_opts *opts, sl_error *err);

/* Bitshuffle without compression (cd_values[4] == 0): no header; src_size
 * bytes decode to src_size bytes. block_elems is the block size in elements
 * (cd_values[3]); 0 means the default for elem_size. Needs no scratch.
 * simd: SL_SIMD_AUTO for the default. */
sl_code sl_bitshuffle_decode_raw(const uint8_t *src, size_t src_size, size_t elem_size,
                                 size_t block_elems, uint8_t *dst, size_t dst_capacity,
                                 size_t *decoded_bytes, sl_simd simd, sl_error *err);
/* Same with options (the kernel, the ones bitmap; no scratch is used); opts may be NULL. */
sl_code sl_bitshuffle_decode_raw_opts(const uint8_t *src, size_t src_size, size_t elem_size,
                                      size_t block_elems, uint8_t *dst, size_t dst_capacity,
                                      size_t *decoded_bytes, const sl_bslz4_opts *opts,
                                      sl_error *err);

/* One stored chunk encoded as `enc` (SL_ENC_BSLZ4 or SL_ENC_BITSHUFFLE, block
 * size block_elems for the latter, 0 = default) decoded into dst (capacity
 * bytes); *decoded_bytes is what it decoded to (the caller checks it). */
sl_code sl_encoded_chunk_decode(const uint8_t *src, size_t src_size, sl_encoding enc, size_t elem_size,
                                size_t block_elems, sl_simd simd, uint8_t *dst, size_t capacity,
                                size_t *decoded_bytes, sl_error *err);
/* Same with options (opts->simd, opts->ones; opts may be NULL). */
sl_code sl_encoded_chunk_decode_opts(const uint8_t *src, size_t src_size, sl_encoding enc,
                                     size_t elem_size, size_t block_elems, uint8_t *dst,
                                     size_t capacity, size_t *decoded_bytes,
                                     const sl_bslz4_opts *opts, sl_error *err);

/* Writes bytes [first / 8, (first + n + 7) / 8) of `ones` (first a multiple
 * of 8): bit first + i set when element i of the n elements of s bytes at src
 * has every bit set, the bits past the last element clear. The bitmap of
 * elements copied verbatim (a chunk's trailing elements). */
void sl_ones_bitmap_of_elements(const uint8_t *src, size_t n, size_t s, uint8_t *ones,
                                size_t first);

/* Default block size in elements: 8192 / elem_size rounded down to a multiple
 * of 8, at least 128 (the reference writer's rule). */
size_t sl_bshuf_default_block_elems(size_t elem_size);

/* --- kernels (nodes/codec/bitshuffle_simd.c; the path from sl_simd_resolve) --- */

/* Bit un-transposition of one block of m elements (m a multiple of 8) of
 * elem_size bytes: in holds 8*elem_size bit-rows of m/8 bytes; out receives
 * m*elem_size bytes. in and out must not overlap. path must be resolved (not AUTO)
 * and supported. ones (m/8 bytes) or NULL: receives the AND of the block's
 * rows, the bitmap of its elements with every bit set (sl_bslz4_opts.ones). */
void sl_bitunshuffle_block(const uint8_t *in, uint8_t *out, size_t m, size_t elem_size,
                           sl_simd path, uint8_t *ones);

/* The AVX2 path does its 8x8 bit transposes with GFNI (one instruction
 * instead of three shift rounds; the same bytes) when the CPU has it. Tests
 * and bench_bslz4 turn it off (false) or back on (true: used when the CPU
 * has it); process-wide, not for use while decodes run. */
void sl_bitshuffle_allow_gfni(bool allow);
/* Whether the AVX2 path uses GFNI now. */
bool sl_bitshuffle_gfni_used(void);

#endif
