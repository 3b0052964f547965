/* Bitshuffle-LZ4 chunk decoding: header and block walk with every length
 * checked; the bit un-transposition kernels live in bitshuffle_simd.c. */
#include "nodes/codec/bslz4.h"

#include <limits.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

static uint64_t read_be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

static uint32_t read_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

size_t sl_bshuf_default_block_elems(size_t elem_size) {
  size_t bs = elem_size ? 8192 / elem_size : 0;
  bs -= bs % 8;
  return bs < 128 ? 128 : bs;
}

size_t sl_bslz4_scratch_size(size_t block_bytes) {
  return block_bytes <= SL_BSLZ4_STACK_BLOCK_BYTES ? 0 : block_bytes;
}

static sl_code check_elem_size(size_t elem_size, sl_error *err) {
  if (elem_size < 1 || elem_size > SL_BSHUF_MAX_ELEM_SIZE)
    return sl_fail(err, SL_ERR_USAGE, "bitshuffle: element size %zu is not in 1..%d", elem_size,
                   SL_BSHUF_MAX_ELEM_SIZE);
  return SL_OK;
}

sl_code sl_bslz4_read_header(const uint8_t *src, size_t src_size, size_t elem_size,
                             sl_bslz4_header *hdr, sl_error *err) {
  sl_code rc = check_elem_size(elem_size, err);
  if (rc) return rc;
  if (!src || src_size < SL_BSLZ4_HEADER_BYTES)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: truncated header: chunk has %zu bytes, the header needs %d",
                   src ? src_size : (size_t)0, SL_BSLZ4_HEADER_BYTES);
  uint64_t total = read_be64(src);
  uint32_t block = read_be32(src + 8);
  if (total % elem_size)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: header at byte 0: total size %llu bytes is not a multiple of "
                   "the element size %zu",
                   (unsigned long long)total, elem_size);
  if (block == 0)
    return sl_fail(err, SL_ERR_FORMAT, "bitshuffle-lz4: header at byte 8: block size is 0");
  if (block % (8 * elem_size))
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: header at byte 8: block size %u bytes is not a multiple of "
                   "8 * element size (%zu)",
                   block, 8 * elem_size);
  if (block > SL_BSLZ4_MAX_BLOCK_BYTES)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: header at byte 8: block size %u bytes exceeds the limit of "
                   "%zu bytes",
                   block, (size_t)SL_BSLZ4_MAX_BLOCK_BYTES);
  hdr->total_bytes = total;
  hdr->block_bytes = block;
  return SL_OK;
}

sl_code sl_bslz4_decode(const uint8_t *src, size_t src_size, size_t elem_size, uint8_t *dst,
                        size_t dst_capacity, size_t *decoded_bytes, sl_error *err) {
  return sl_bslz4_decode_opts(src, src_size, elem_size, dst, dst_capacity, decoded_bytes, NULL,
                              err);
}

/* Decodes one LZ4 block at src[*pos] of exactly `want` bytes into buf (cap
 * bytes, cap > want when possible so that an oversized block is told apart
 * from corrupt data), advancing *pos. */
static sl_code lz4_block(const uint8_t *src, size_t src_size, size_t *pos, size_t block_index,
                         uint8_t *buf, size_t cap, size_t want, sl_error *err) {
  size_t at = *pos;
  if (src_size - at < 4)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: truncated at byte %zu: block %zu needs a 4-byte length, "
                   "%zu bytes remain",
                   at, block_index, src_size - at);
  uint32_t clen = read_be32(src + at);
  size_t remain = src_size - at - 4;
  if (clen > remain)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: block %zu at byte %zu: compressed length %u runs past the "
                   "end of the chunk (%zu bytes remain)",
                   block_index, at, clen, remain);
  if (clen > (uint32_t)INT_MAX)
    return sl_fail(err, SL_ERR_FORMAT, "bitshuffle-lz4: block %zu at byte %zu: length too large",
                   block_index, at);
  if (cap > (size_t)INT_MAX) cap = (size_t)INT_MAX; /* LZ4 takes int sizes; want <= 1 MiB */
  if (clen == 0)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: block %zu at byte %zu: compressed length is 0", block_index,
                   at);
  int got = LZ4_decompress_safe((const char *)(src + at + 4), (char *)buf, (int)clen, (int)cap);
  if (got < 0)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: block %zu at byte %zu: corrupt LZ4 data (%u compressed "
                   "bytes, expected %zu decoded bytes)",
                   block_index, at, clen, want);
  if ((size_t)got != want)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: block %zu at byte %zu: LZ4 data decodes to %d bytes, "
                   "expected %zu",
                   block_index, at, got, want);
  *pos = at + 4 + clen;
  return SL_OK;
}

sl_code sl_bslz4_decode_opts(const uint8_t *src, size_t src_size, size_t elem_size, uint8_t *dst,
                             size_t dst_capacity, size_t *decoded_bytes,
                             const sl_bslz4_opts *opts, sl_error *err) {
  if (decoded_bytes) *decoded_bytes = 0;
  sl_simd path;
  sl_code rc = sl_simd_resolve(opts ? opts->simd : SL_SIMD_AUTO, &path, err);
  if (rc) return rc;
  sl_bslz4_header h;
  rc = sl_bslz4_read_header(src, src_size, elem_size, &h, err);
  if (rc) return rc;
  if (h.total_bytes > (uint64_t)dst_capacity)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle-lz4: header at byte 0: total size %llu bytes exceeds the "
                   "destination capacity of %zu bytes",
                   (unsigned long long)h.total_bytes, dst_capacity);
  if (h.total_bytes && !dst)
    return sl_fail(err, SL_ERR_USAGE, "bitshuffle-lz4: no destination buffer");

  const size_t s = elem_size;
  const size_t n = (size_t)h.total_bytes / s;
  const size_t bs = h.block_bytes / s; /* elements per block, a multiple of 8 */
  const size_t block_bytes = h.block_bytes;

  /* Block buffer: stack for the default size; caller scratch or heap above. The
   * buffer is one 8*s-byte row larger than a block whenever possible so that
   * an LZ4 block decoding to too many bytes reads as "decodes to N bytes". */
  uint8_t stack_buf[SL_BSLZ4_STACK_BLOCK_BYTES + 64] __attribute__((aligned(32)));
  uint8_t *buf = stack_buf, *heap = NULL;
  size_t cap = sizeof stack_buf;
  size_t first_block = n >= bs ? bs : (n % bs) - (n % bs) % 8;
  size_t need = first_block * s; /* largest block this chunk actually has */
  if (need + 64 > cap) {
    if (opts && opts->scratch && opts->scratch_size >= need) {
      buf = opts->scratch;
      cap = opts->scratch_size;
    } else {
      heap = malloc(need + 64);
      if (!heap)
        return sl_fail(err, SL_ERR_NOMEM, "bitshuffle-lz4: cannot allocate a %zu-byte block buffer",
                       need + 64);
      buf = heap;
      cap = need + 64;
    }
  }

  uint8_t *ones = opts ? opts->ones : NULL; /* block b's bitmap at ones + b * bs / 8 */
  size_t pos = SL_BSLZ4_HEADER_BYTES;
  size_t nfull = n / bs, block_index = 0;
  for (; block_index < nfull; block_index++) {
    rc = lz4_block(src, src_size, &pos, block_index, buf, cap, block_bytes, err);
    if (rc) goto done;
    sl_bitunshuffle_block(buf, dst + block_index * block_bytes, bs, s, path,
                          ones ? ones + block_index * (bs / 8) : NULL);
  }
  size_t done_elems = nfull * bs;
  size_t last = n - done_elems;
  last -= last % 8;
  if (last) {
    rc = lz4_block(src, src_size, &pos, block_index, buf, cap, last * s, err);
    if (rc) goto done;
    sl_bitunshuffle_block(buf, dst + done_elems * s, last, s, path,
                          ones ? ones + done_elems / 8 : NULL);
    done_elems += last;
  }
  size_t tail = (n - done_elems) * s; /* (n % 8) elements, verbatim */
  size_t remain = src_size - pos;
  if (remain < tail) {
    rc = sl_fail(err, SL_ERR_FORMAT,
                 "bitshuffle-lz4: truncated at byte %zu: the %zu trailing elements need %zu "
                 "bytes, %zu remain",
                 pos, n - done_elems, tail, remain);
    goto done;
  }
  if (remain > tail) {
    rc = sl_fail(err, SL_ERR_FORMAT,
                 "bitshuffle-lz4: trailing garbage: %zu extra bytes at byte %zu after the last "
                 "block and %zu trailing bytes",
                 remain - tail, pos + tail, tail);
    goto done;
  }
  if (tail) memcpy(dst + done_elems * s, src + pos, tail);
  if (ones && tail) sl_ones_bitmap_of_elements(src + pos, n - done_elems, s, ones, done_elems);
  if (decoded_bytes) *decoded_bytes = (size_t)h.total_bytes;
  rc = SL_OK;
done:
  free(heap);
  return rc;
}

sl_code sl_bitshuffle_decode_raw(const uint8_t *src, size_t src_size, size_t elem_size,
                                 size_t block_elems, uint8_t *dst, size_t dst_capacity,
                                 size_t *decoded_bytes, sl_simd simd, sl_error *err) {
  const sl_bslz4_opts o = {.simd = simd};
  return sl_bitshuffle_decode_raw_opts(src, src_size, elem_size, block_elems, dst, dst_capacity,
                                       decoded_bytes, &o, err);
}

sl_code sl_bitshuffle_decode_raw_opts(const uint8_t *src, size_t src_size, size_t elem_size,
                                      size_t block_elems, uint8_t *dst, size_t dst_capacity,
                                      size_t *decoded_bytes, const sl_bslz4_opts *opts,
                                      sl_error *err) {
  if (decoded_bytes) *decoded_bytes = 0;
  sl_simd path;
  sl_code rc = sl_simd_resolve(opts ? opts->simd : SL_SIMD_AUTO, &path, err);
  if (rc) return rc;
  rc = check_elem_size(elem_size, err);
  if (rc) return rc;
  const size_t s = elem_size;
  if (src_size % s)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle: chunk of %zu bytes is not a multiple of the element size %zu",
                   src_size, s);
  if (src_size > dst_capacity)
    return sl_fail(err, SL_ERR_FORMAT,
                   "bitshuffle: chunk of %zu bytes exceeds the destination capacity of %zu bytes",
                   src_size, dst_capacity);
  size_t bs = block_elems ? block_elems : sl_bshuf_default_block_elems(s);
  if (bs % 8)
    return sl_fail(err, SL_ERR_USAGE,
                   "bitshuffle: block size %zu elements is not a multiple of 8", bs);
  if (bs > SL_BSLZ4_MAX_BLOCK_BYTES / s)
    return sl_fail(err, SL_ERR_USAGE,
                   "bitshuffle: block size %zu elements exceeds the limit of %zu bytes", bs,
                   (size_t)SL_BSLZ4_MAX_BLOCK_BYTES);
  if (src_size && (!src || !dst))
    return sl_fail(err, SL_ERR_USAGE, "bitshuffle: missing source or destination buffer");
  const size_t n = src_size / s;
  uint8_t *ones = opts ? opts->ones : NULL;
  size_t e = 0;
  for (; e + bs <= n; e += bs)
    sl_bitunshuffle_block(src + e * s, dst + e * s, bs, s, path, ones ? ones + e / 8 : NULL);
  size_t last = (n - e) - (n - e) % 8;
  if (last)
    sl_bitunshuffle_block(src + e * s, dst + e * s, last, s, path, ones ? ones + e / 8 : NULL);
  e += last;
  if (n > e) memcpy(dst + e * s, src + e * s, (n - e) * s);
  if (ones && n > e) sl_ones_bitmap_of_elements(src + e * s, n - e, s, ones, e);
  if (decoded_bytes) *decoded_bytes = src_size;
  return SL_OK;
}

sl_code sl_encoded_chunk_decode(const uint8_t *src, size_t src_size, sl_encoding enc, size_t elem_size,
                                size_t block_elems, sl_simd simd, uint8_t *dst, size_t capacity,
                                size_t *decoded_bytes, sl_error *err) {
  const sl_bslz4_opts o = {.simd = simd};
  return sl_encoded_chunk_decode_opts(src, src_size, enc, elem_size, block_elems, dst, capacity,
                                      decoded_bytes, &o, err);
}

sl_code sl_encoded_chunk_decode_opts(const uint8_t *src, size_t src_size, sl_encoding enc,
                                     size_t elem_size, size_t block_elems, uint8_t *dst,
                                     size_t capacity, size_t *decoded_bytes,
                                     const sl_bslz4_opts *opts, sl_error *err) {
  if (enc == SL_ENC_BSLZ4)
    return sl_bslz4_decode_opts(src, src_size, elem_size, dst, capacity, decoded_bytes, opts, err);
  return sl_bitshuffle_decode_raw_opts(src, src_size, elem_size, block_elems, dst, capacity,
                                       decoded_bytes, opts, err);
}
