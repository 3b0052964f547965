/* Errors of the device bitshuffle-LZ4 decoder (.cu files only): the checks
 * a kernel can fail, the record the first failing one stores on the device
 * (atomicCAS on `claimed`), and the CPU decoder's message for it, so that a
 * malformed chunk fails with the same words on both backends. */
#ifndef SL_CUDA_BSLZ4_ERRORS_CUH
#define SL_CUDA_BSLZ4_ERRORS_CUH

#include <stddef.h>

#include "shaders/cuda/common/launcher.h"

/* The decoder's block size limit: = SL_BSLZ4_MAX_BLOCK_BYTES (nodes/codec/bslz4.h). */
#define BSLZ4_MAX_BLOCK_BYTES (1u << 20)

/* Error codes of the device record. */
enum bslz4_error_code {
  BSLZ4_E_OK = 0,
  BSLZ4_E_COUNT,        /* v1 = n, v2 = bound */
  BSLZ4_E_RANGE,        /* v1 = offset, v2 = size, v3 = buffer bytes */
  BSLZ4_E_NOFRAME,
  BSLZ4_E_RAW_SHORT,    /* v1 = size, v2 = needed */
  BSLZ4_E_BS_MULT,      /* v1 = size */
  BSLZ4_E_BS_CAP,       /* v1 = size, v2 = full */
  BSLZ4_E_HDR_TRUNC,    /* v1 = size */
  BSLZ4_E_TOTAL_MULT,   /* v1 = T */
  BSLZ4_E_TOTAL_CAP,    /* v1 = T, v2 = full */
  BSLZ4_E_BLOCK_ZERO,
  BSLZ4_E_BLOCK_MULT,   /* v1 = B */
  BSLZ4_E_BLOCK_MAX,    /* v1 = B */
  BSLZ4_E_GPU_BLOCK,    /* v1 = B, v2 = slot bytes */
  BSLZ4_E_GPU_NBLOCKS,  /* v1 = blocks, v2 = slots, v3 = B */
  BSLZ4_E_LEN_TRUNC,    /* block, pos, v1 = remain */
  BSLZ4_E_LEN_PAST,     /* block, pos, v1 = clen, v2 = remain */
  BSLZ4_E_LEN_ZERO,     /* block, pos */
  BSLZ4_E_LZ4_CORRUPT,  /* block, pos, v1 = clen, v2 = expected */
  BSLZ4_E_LZ4_SIZE,     /* block, pos, v1 = decoded, v2 = expected */
  BSLZ4_E_TAIL_TRUNC,   /* pos, v1 = elems, v2 = bytes, v3 = remain */
  BSLZ4_E_TAIL_GARBAGE, /* pos, v1 = extra, v2 = tail bytes */
  BSLZ4_E_SHORT         /* v1 = decoded, v2 = full */
};

struct bslz4_error_record {
  unsigned int claimed, code;
  unsigned long long entry, block, pos, v1, v2, v3;
  /* The failing entry's, when has_entry: named on the host by the port's
   * describe_origin (sl_packed_describe). */
  long long first_position, n_positions;
  unsigned long long origin;
  unsigned int has_entry, pad;
};

/* The CPU decoder's message for record r of a chunk of port `in` (the
 * encoded frames), whose CUDA block buffers hold slot_bytes. */
void bslz4_describe(const bslz4_error_record *r, const sl_tensor_desc *in, unsigned long long slot_bytes, char *m,
                    size_t n);

#endif
