/* Fuzz target: the object header / version-1 chunk B-tree parser of
 * nodes/hdf5/h5_btree.c, fed through its bounded-read callback from a
 * byte buffer. Input: a 10-byte configuration, then the "file":
 *   byte 0: bits 0-1 sizeof offsets (2, 4, 8, 8), bits 2-3 sizeof lengths
 *           (2, 4, 8, 8), bit 4: base address 512 (a user block; 0 if the
 *           file is shorter)
 *   bytes 1-4: object header address (u32 LE, relative to the base)
 *   byte 5: dataset rank - 1 (mod 3: ranks 1..3)
 *   bytes 6-7: extent of dim 0 (u16 LE); bytes 8, 9: extents of dims 1, 2.
 * Seeds (tests/fuzz/corpus/fuzz_h5_btree/) are real HDF5 files written by
 * the library (object header v1 and v2, continuations, one and two B-tree
 * levels, a user block, 4-byte offsets, layout v4) with the matching
 * configuration. The read callback aborts on any read outside the buffer;
 * every chunk reported must lie inside the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nodes/hdf5/h5_btree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct buf {
  const uint8_t *p;
  size_t n;
} buf;

static int read_cb(void *ctx, uint64_t off, void *out, size_t n) {
  const buf *b = ctx;
  if (off > b->n || n > b->n - off) abort(); /* the parser must bound every read */
  memcpy(out, b->p + off, n);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 10 || size > (4u << 20)) return 0;
  static const unsigned widths[4] = {2, 4, 8, 8};
  buf b = {data + 10, size - 10};
  sl_h5_btree_io io = {.read = read_cb,
                   .ctx = &b,
                   .name = "fuzz.h5",
                   .file_size = b.n,
                   .base = (data[0] & 0x10) && b.n >= 512 ? 512 : 0,
                   .sizeof_addr = widths[data[0] & 3],
                   .sizeof_size = widths[(data[0] >> 2) & 3]};
  uint64_t ohdr = (uint64_t)data[1] | (uint64_t)data[2] << 8 | (uint64_t)data[3] << 16 | (uint64_t)data[4] << 24;
  int rank = data[5] % 3 + 1;
  uint64_t extent[3] = {(uint64_t)data[6] | (uint64_t)data[7] << 8, data[8], data[9]};

  sl_h5_btree_layout lay;
  bool handled = false;
  char why[96];
  sl_error err;
  sl_error_clear(&err);
  sl_code rc = sl_h5_btree_find_layout(&io, ohdr, &lay, &handled, why, sizeof why, &err);
  if (rc != SL_OK) {
    if (rc != SL_ERR_FORMAT || handled) abort();
    return 0;
  }
  if (!handled) return 0;
  if (lay.ndims < 2 || lay.ndims > SL_H5_BTREE_MAX_RANK + 1) abort();
  int64_t n = sl_h5_btree_grid_size(&lay, rank, extent, 1 << 16);
  if (n < 0) return 0;
  sl_h5_btree_chunk *ch = calloc((size_t)n + 1, sizeof *ch);
  if (!ch) abort();
  rc = sl_h5_btree_list(&io, &lay, rank, extent, ch, n, &err);
  if (rc != SL_OK && rc != SL_ERR_FORMAT) abort();
  if (rc == SL_OK) {
    uint64_t avail = io.file_size - io.base;
    for (int64_t i = 0; i < n; i++)
      if (ch[i].found && (ch[i].size == 0 || ch[i].addr > avail || ch[i].size > avail - ch[i].addr)) abort();
  }
  free(ch);
  return 0;
}
