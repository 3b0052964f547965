/* Which part of a stream each shard of a split run streams (engine/exec/
 * shard.h): pure arithmetic, so that the planner sizes the merges with the
 * executor's own split. */
#ifndef SL_SHARD_RANGE_H
#define SL_SHARD_RANGE_H

#include <stdint.h>

/* The chunks [*first, *end) of n_chunks that shard `index` of `count`
 * streams: contiguous, in shard order, their sizes differing by at most
 * one (empty when there are more shards than chunks). */
static inline void sl_shard_chunks(int64_t n_chunks, int index, int count, int64_t *first, int64_t *end) {
  *first = n_chunks * index / count;
  *end = n_chunks * (index + 1) / count;
}

/* The positions [*p0, *p1) those chunks hold, of a stream of `positions`
 * in chunks of `chunk_positions`. */
static inline void sl_shard_positions(int64_t positions, int64_t chunk_positions, int64_t n_chunks, int index,
                                      int count, int64_t *p0, int64_t *p1) {
  int64_t first, end;
  sl_shard_chunks(n_chunks, index, count, &first, &end);
  *p0 = first * chunk_positions < positions ? first * chunk_positions : positions;
  *p1 = end * chunk_positions < positions ? end * chunk_positions : positions;
}

/* The most positions any of the `count` shards streams (a concat's packed
 * piece holds that many: the planner sizes it, the executor sends it). */
static inline int64_t sl_shard_most_positions(int64_t positions, int64_t chunk_positions, int64_t n_chunks,
                                              int count) {
  int64_t most = 0;
  for (int s = 0; s < count; s++) {
    int64_t p0, p1;
    sl_shard_positions(positions, chunk_positions, n_chunks, s, count, &p0, &p1);
    if (p1 - p0 > most) most = p1 - p0;
  }
  return most;
}

#endif
