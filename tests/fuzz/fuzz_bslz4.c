/* Fuzz target: bitshuffle-LZ4 chunk decoding. The first byte picks the
 * element size (bits 0-1: 1, 2, 4, 8), the destination capacity (bits 2-4)
 * and the SIMD path (bits 5-6); the rest is the chunk. The destination is
 * allocated with exactly the chosen capacity so that ASan sees any overrun.
 * A chunk that decodes must decode identically on the scalar path, its ones
 * bitmap (exactly sized: ASan sees an overrun) must match the decoded values,
 * and the uncompressed decoder runs on the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodes/codec/bslz4.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  const uint8_t sel = data[0];
  const uint8_t *src = data + 1;
  const size_t n = size - 1;
  static const size_t elems[4] = {1, 2, 4, 8};
  const size_t elem = elems[sel & 3];
  size_t cap;
  switch ((sel >> 2) & 7) {
  case 0: cap = 0; break;
  case 1: cap = 64; break;
  case 2: cap = 3034; break;
  case 3: cap = 65536; break;
  case 4: cap = 1u << 20; break;
  default: { /* exactly the header's total when it is sane */
    sl_bslz4_header h;
    sl_error e;
    sl_error_clear(&e);
    cap = (sl_bslz4_read_header(src, n, elem, &h, &e) == SL_OK && h.total_bytes <= (4u << 20))
              ? (size_t)h.total_bytes
              : 4096;
  }
  }
  static const sl_simd paths[4] = {SL_SIMD_AUTO, SL_SIMD_SCALAR, SL_SIMD_SSE2, SL_SIMD_AVX2};
  sl_simd path = paths[(sel >> 5) & 3];
  if (path != SL_SIMD_AUTO && !sl_simd_supported(path)) path = SL_SIMD_SCALAR;

  uint8_t *dst = malloc(cap ? cap : 1);
  uint8_t *ref = malloc(cap ? cap : 1);
  if (!dst || !ref) abort();
  sl_error err;
  sl_error_clear(&err);
  size_t got = 0;
  sl_bslz4_opts opts = {.simd = path};
  sl_code rc = sl_bslz4_decode_opts(src, n, elem, dst, cap, &got, &opts, &err);
  if (rc != SL_OK && rc != SL_ERR_FORMAT && rc != SL_ERR_NOMEM) {
    fprintf(stderr, "unexpected status %s: %s\n", sl_code_name(rc), err.msg);
    abort();
  }
  if (rc != SL_OK && err.msg[0] == 0) abort(); /* every failure says why */
  if (rc == SL_OK) {
    if (got > cap) abort();
    sl_bslz4_opts sc = {.simd = SL_SIMD_SCALAR};
    size_t got2 = 0;
    if (sl_bslz4_decode_opts(src, n, elem, ref, cap, &got2, &sc, &err) != SL_OK) abort();
    if (got2 != got || memcmp(dst, ref, got) != 0) abort();
    /* the ones bitmap, on the chosen path, against the values */
    const size_t nel = got / elem;
    uint8_t *ones = malloc(sl_ones_bitmap_bytes(nel) ? sl_ones_bitmap_bytes(nel) : 1);
    if (!ones) abort();
    sl_bslz4_opts wo = {.simd = path, .ones = ones};
    if (sl_bslz4_decode_opts(src, n, elem, ref, cap, &got2, &wo, &err) != SL_OK) abort();
    if (memcmp(dst, ref, got) != 0) abort();
    for (size_t i = 0; i < nel; i++) {
      size_t b = 0;
      while (b < elem && dst[i * elem + b] == 0xFF) b++;
      if (((ones[i / 8] >> (i % 8)) & 1u) != (b == elem)) abort();
    }
    if (nel % 8 && (ones[nel / 8] >> (nel % 8)) != 0) abort(); /* padding bits clear */
    free(ones);
  }
  rc = sl_bitshuffle_decode_raw(src, n, elem, (size_t)(sel & 0x80 ? 64 : 0), dst, cap, &got,
                                path, &err);
  if (rc != SL_OK && rc != SL_ERR_FORMAT) abort();
  free(dst);
  free(ref);
  return 0;
}
