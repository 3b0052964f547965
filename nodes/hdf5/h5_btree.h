/* Linear-time chunk listing for HDF5 chunked datasets whose chunk index is a
 * version-1 B-tree (data layout message version 3, class 2: what HDF5
 * 1.8/1.10 and h5py write with the default format bounds, and what Dectris
 * writers produce). HDF5 1.10 offers only H5Dget_chunk_info[_by_coord],
 * each call of which walks the index from its start (quadratic listing);
 * this parser reads the object header and the B-tree nodes itself, once.
 *
 * Every byte goes through a bounded-read callback (a file descriptor in
 * h5_chunk_list.c, a byte buffer in tests/fuzz/fuzz_h5_btree.c), and nothing read
 * is trusted: reads are bounded by the file size, signatures, versions, node
 * types, levels, entry counts, chunk coordinates (multiples of the chunk
 * dims, inside the extent, each listed once), addresses and sizes are
 * checked. See docs/formats/dectris-hdf5.md. */
#ifndef SL_HDF5_H5_BTREE_H
#define SL_HDF5_H5_BTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#define SL_H5_BTREE_MAX_RANK 32 /* dataset rank; the layout's dimensionality is rank + 1 */

/* Reads n bytes at absolute byte offset `off` of the file into buf; returns
 * 0 on success, nonzero on any failure (short read included). The parser
 * never asks for bytes past `file_size`. */
typedef int (*sl_h5_btree_read_fn)(void *ctx, uint64_t off, void *buf, size_t n);

typedef struct sl_h5_btree_io {
  sl_h5_btree_read_fn read;
  void *ctx;
  const char *name;      /* file name for messages */
  uint64_t file_size;    /* bytes in the file */
  uint64_t base;         /* base address (user block): HDF5 addresses are relative to it */
  unsigned sizeof_addr;  /* size of offsets, from the superblock: 2, 4 or 8 */
  unsigned sizeof_size;  /* size of lengths: 2, 4 or 8 */
} sl_h5_btree_io;

/* A chunked data layout (version 3) found in an object header. */
typedef struct sl_h5_btree_layout {
  int ndims;                          /* dataset rank + 1 (the last dim is the element size) */
  uint64_t btree_addr;                /* relative address of the B-tree root; UINT64_MAX when undefined */
  uint32_t dims[SL_H5_BTREE_MAX_RANK + 1];
} sl_h5_btree_layout;

/* One chunk of the grid. Index = row-major position of the chunk in the
 * grid of ceil(extent[d] / chunk[d]) chunks. */
typedef struct sl_h5_btree_chunk {
  uint64_t addr;   /* relative to the base address (as H5Dget_chunk_info reports it) */
  uint64_t size;   /* stored bytes */
  uint32_t mask;   /* filter mask */
  bool found;
} sl_h5_btree_chunk;

/* Finds the data layout message of the object header at relative address
 * `ohdr_addr` (object header version 1 or 2, continuation blocks followed).
 * Returns SL_OK with *handled = true and *out filled for layout version 3,
 * class 2; SL_OK with *handled = false (and `why` set) for anything else
 * that is well formed (other layout versions, classes); SL_ERR_FORMAT for a
 * malformed header (the message names the file and the address). */
sl_code sl_h5_btree_find_layout(const sl_h5_btree_io *io, uint64_t ohdr_addr, sl_h5_btree_layout *out, bool *handled,
                            char *why, size_t why_len, sl_error *err);

/* Walks the B-tree of `lay` once (depth first) and fills chunks[0..n_grid)
 * (zeroed by the caller). `rank` and `extent` are the dataset's current
 * dimensions; `rank` must be lay->ndims - 1 and n_grid the product of
 * ceil(extent[d] / lay->dims[d]) (else SL_ERR_FORMAT). Chunks absent from the
 * tree stay found = false. Errors: SL_ERR_FORMAT (malformed tree, naming the
 * file and the node address), SL_ERR_NOMEM. */
sl_code sl_h5_btree_list(const sl_h5_btree_io *io, const sl_h5_btree_layout *lay, int rank, const uint64_t *extent,
                     sl_h5_btree_chunk *chunks, int64_t n_grid, sl_error *err);

/* Number of chunks in the grid of `lay` over `extent` (rank = lay->ndims - 1),
 * or -1 when a chunk dim is 0 or the count exceeds `max`. */
int64_t sl_h5_btree_grid_size(const sl_h5_btree_layout *lay, int rank, const uint64_t *extent, int64_t max);

#endif
