/* A run split into shards: devices of one host, or MPI ranks. Each shard
 * runs the whole graph with its own node state, slots and accumulators,
 * but streams only its own contiguous range of every top-level pass's
 * chunks (sl_shard_chunks). After a pass's chunks, the executor merges the
 * pass's declared reductions across the shards through one collective,
 * an all-gather, and every shard then finalizes and runs the epilogue on
 * the whole scan's values (the same bits on every shard: the merge is in
 * shard order everywhere).
 *
 * How each combine merges (engine/core/combine.h): sum, min and max element
 * by element, shard 0, 1, ... from the identity (exact for integers; a
 * float sum regrouped per shard rounds as that grouping does); concat and
 * concat_scan_last gather only each shard's own positions (a column block,
 * row by row), packed; a variable-size concat each shard's bytes one
 * after another with its chunks' sizes; merge runs the node's merge kernel
 * with each shard's accumulator as the partial, from zero bytes. A
 * streamed graph output holds, on each shard, its own positions.
 *
 * The transport is the caller's: an in-process group of threads
 * (shard_local.h, for several devices or for tests) or MPI_Allgather. */
#ifndef SL_SHARD_H
#define SL_SHARD_H

#include <stdint.h>

#include "engine/core/shard_range.h"
#include "engine/core/status.h"

/* Every shard's `bytes` from `mine` into `all` (count * bytes, in shard
 * order). Every shard makes the same sequence of calls with the same
 * `bytes`; a call blocks until all shards made it. An error (another shard
 * failed) fails the run. */
typedef sl_code (*sl_shard_allgather_fn)(void *ctx, const void *mine, void *all, int64_t bytes,
                                         sl_error *err);

typedef struct sl_exec_shard {
  int index, count; /* 0 <= index < count */
  sl_shard_allgather_fn allgather;
  void *ctx;
  /* The device this shard's backend is made on (sl_backend_ops.create_on,
   * where the backend has devices); -1: the backend's own choice. */
  int device;
} sl_exec_shard;

#endif
