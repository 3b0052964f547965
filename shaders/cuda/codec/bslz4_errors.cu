/* See bslz4_errors.cuh. */
#include <stdio.h>

#include "shaders/cuda/codec/bslz4_errors.cuh"

/* The CPU decoder's message for a device error record. */
void bslz4_describe(const bslz4_error_record *r, const sl_tensor_desc *in, unsigned long long slot_bytes, char *m,
                    size_t n) {
  const unsigned long long s = sl_dtype_size(in->dtype);
  const unsigned long long b = r->block, at = r->pos, v1 = r->v1, v2 = r->v2, v3 = r->v3;
  switch (r->code) {
  case BSLZ4_E_COUNT:
    snprintf(m, n, "packed buffer holds %llu stored chunks, more than the %llu this chunk of the scan can hold",
             v1, v2);
    break;
  case BSLZ4_E_RANGE:
    snprintf(m, n, "packed entry out of range (offset %llu, %llu bytes, buffer of %llu bytes)", v1, v2, v3);
    break;
  case BSLZ4_E_NOFRAME: snprintf(m, n, "stored chunk holds no frame of this chunk of the scan"); break;
  case BSLZ4_E_RAW_SHORT:
    snprintf(m, n, "stored raw (filter skipped) with %llu bytes, needs %llu", v1, v2);
    break;
  case BSLZ4_E_BS_MULT:
    snprintf(m, n, "bitshuffle: chunk of %llu bytes is not a multiple of the element size %llu", v1, s);
    break;
  case BSLZ4_E_BS_CAP:
    snprintf(m, n, "bitshuffle: chunk of %llu bytes exceeds the destination capacity of %llu bytes", v1, v2);
    break;
  case BSLZ4_E_HDR_TRUNC:
    snprintf(m, n, "bitshuffle-lz4: truncated header: chunk has %llu bytes, the header needs 12", v1);
    break;
  case BSLZ4_E_TOTAL_MULT:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 0: total size %llu bytes is not a multiple of the element size %llu",
             v1, s);
    break;
  case BSLZ4_E_TOTAL_CAP:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 0: total size %llu bytes exceeds the destination capacity of %llu bytes",
             v1, v2);
    break;
  case BSLZ4_E_BLOCK_ZERO: snprintf(m, n, "bitshuffle-lz4: header at byte 8: block size is 0"); break;
  case BSLZ4_E_BLOCK_MULT:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes is not a multiple of 8 * element size (%llu)",
             v1, 8 * s);
    break;
  case BSLZ4_E_BLOCK_MAX:
    snprintf(m, n, "bitshuffle-lz4: header at byte 8: block size %llu bytes exceeds the limit of %u bytes", v1,
             BSLZ4_MAX_BLOCK_BYTES);
    break;
  case BSLZ4_E_GPU_BLOCK:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes exceeds the CUDA decoder's block buffer of "
             "%llu bytes, sized from the dataset's block size (%lld elements in cd_values[3]); decode this file "
             "with --backend cpu",
             v1, slot_bytes, (long long)in->encoded_block_elems);
    break;
  case BSLZ4_E_GPU_NBLOCKS:
    snprintf(m, n,
             "bitshuffle-lz4: header at byte 8: block size %llu bytes gives %llu blocks, more than the %llu the "
             "CUDA decoder planned from the dataset's block size (%lld elements in cd_values[3]); decode this "
             "file with --backend cpu",
             v3, v1, v2, (long long)in->encoded_block_elems);
    break;
  case BSLZ4_E_LEN_TRUNC:
    snprintf(m, n, "bitshuffle-lz4: truncated at byte %llu: block %llu needs a 4-byte length, %llu bytes remain",
             at, b, v1);
    break;
  case BSLZ4_E_LEN_PAST:
    snprintf(m, n,
             "bitshuffle-lz4: block %llu at byte %llu: compressed length %llu runs past the end of the chunk "
             "(%llu bytes remain)",
             b, at, v1, v2);
    break;
  case BSLZ4_E_LEN_ZERO:
    snprintf(m, n, "bitshuffle-lz4: block %llu at byte %llu: compressed length is 0", b, at);
    break;
  case BSLZ4_E_LZ4_CORRUPT:
    snprintf(m, n,
             "bitshuffle-lz4: block %llu at byte %llu: corrupt LZ4 data (%llu compressed bytes, expected %llu "
             "decoded bytes)",
             b, at, v1, v2);
    break;
  case BSLZ4_E_LZ4_SIZE:
    snprintf(m, n, "bitshuffle-lz4: block %llu at byte %llu: LZ4 data decodes to %llu bytes, expected %llu", b,
             at, v1, v2);
    break;
  case BSLZ4_E_TAIL_TRUNC:
    snprintf(m, n,
             "bitshuffle-lz4: truncated at byte %llu: the %llu trailing elements need %llu bytes, %llu remain",
             at, v1, v2, v3);
    break;
  case BSLZ4_E_TAIL_GARBAGE:
    snprintf(m, n,
             "bitshuffle-lz4: trailing garbage: %llu extra bytes at byte %llu after the last block and %llu "
             "trailing bytes",
             v1, at, v2);
    break;
  case BSLZ4_E_SHORT: {
    long long per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
    snprintf(m, n, "decodes to %llu bytes, expected %llu (%lld frames of %lld bytes)", v1, v2, per,
             (long long)sl_desc_item_bytes(in));
    break;
  }
  default: snprintf(m, n, "unknown device error %u", r->code); break;
  }
}
