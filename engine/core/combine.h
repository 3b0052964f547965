/* Declared reductions: how partial results of a reduction output are merged.
 *
 * A node's whole output that accumulates over the chunks of a stream declares
 * its combine on its port (sl_port_def.combine). The kernel then writes only
 * this chunk's partial into the buffer it is given, which the executor filled
 * with the combine's identity; the executor, not the kernel, merges the
 * partial into the run's accumulator. The same merge combines the shards of
 * a split run (engine/exec/shard.h: devices, MPI ranks), so a reduction is
 * declared once and merged the same way everywhere.
 *
 *   SUM, MIN, MAX  element-wise over the whole output (its dtype's arithmetic;
 *                  integer sums wrap like the kernels' own, floats follow IEEE)
 *   CONCAT         the chunks' partials one after another in scan order: a
 *                  fixed-size partial is the chunk's positions of the output
 *                  (written in place, nothing to merge); a variable-size one
 *                  (sl_node_desc.out_bound) is appended at the running size.
 *   CONCAT_SCAN_LAST  a fixed-size whole output whose last axes are the
 *                  scan's ([item.., scan..]: pixel-major, segment-major):
 *                  the chunk's positions are a column block of it, written
 *                  in place. out[k] points at element (0, .., 0, pos_start),
 *                  and element (i, p) of the chunk is out[k][i * positions +
 *                  p], `positions` being the whole scan's. Nothing to merge
 *                  within one device; across devices or ranks a partial is
 *                  such a block, copied row by row.
 *   MERGE          the node's own merge (sl_node_desc.merge, one per backend
 *                  it has a kernel for): partials that are not element-wise
 *                  (a count, mean and sum of squared deviations merged by
 *                  Chan's formula; a top-k list). Its identity is all-zero
 *                  bytes: a node that declares MERGE makes zero mean "nothing
 *                  seen yet". Partials are merged one chunk at a time in scan
 *                  order, then a split run's shards in shard order, never
 *                  per worker (nothing says the merge is exact in any
 *                  grouping).
 */
#ifndef SL_COMBINE_H
#define SL_COMBINE_H

#include <stdint.h>

#include "engine/core/tensor.h"

typedef enum sl_combine {
  SL_COMBINE_NONE = 0, /* not declared: the kernel accumulates into the whole output itself */
  SL_COMBINE_SUM,
  SL_COMBINE_MIN,
  SL_COMBINE_MAX,
  SL_COMBINE_CONCAT,
  SL_COMBINE_MERGE, /* the node's own merge kernel */
  SL_COMBINE_CONCAT_SCAN_LAST,
  SL_COMBINE_COUNT
} sl_combine;

/* "none", "sum", "min", "max", "concat", "merge", "concat_scan_last". */
const char *sl_combine_name(sl_combine c);

/* SUM, MIN and MAX merge elements; NONE, the concats and MERGE do not. */
static inline int sl_combine_elementwise(sl_combine c) {
  return c == SL_COMBINE_SUM || c == SL_COMBINE_MIN || c == SL_COMBINE_MAX;
}

/* CONCAT and CONCAT_SCAN_LAST: each chunk writes its own positions. */
static inline int sl_combine_concat(sl_combine c) {
  return c == SL_COMBINE_CONCAT || c == SL_COMBINE_CONCAT_SCAN_LAST;
}

/* Whether merging partials of combine c over dtype t gives the same bits in
 * any grouping and order: the element-wise combines of integers (wrapping
 * sums, min, max). Float sums round differently when regrouped, and even a
 * float min or max can tell -0 from +0 or one NaN from another, so partials
 * of floats are merged only where their grouping is fixed (per chunk, in
 * scan order), never per worker of parallel_for, whose split varies. */
static inline int sl_combine_exact(sl_combine c, sl_dtype t) {
  return sl_combine_elementwise(c) && t >= SL_U8 && t <= SL_I64;
}

/* Host memory: elements [begin, end) of dst set to the combine's identity
 * (0 for SUM, the dtype's largest value for MIN, its smallest for MAX; 0 for
 * NONE, the concats and MERGE), and acc[i] = acc[i] op partial[i] for [begin,
 * end) (nothing for NONE, the concats and MERGE: the executor runs a node's
 * merge).
 * SL_C64 sums its f32 pairs; MIN/MAX of complex values are refused by the
 * graph (sl_combine_check). */
void sl_combine_identity_host(sl_combine c, sl_dtype t, void *dst, int64_t begin, int64_t end);
void sl_combine_merge_host(sl_combine c, sl_dtype t, void *acc, const void *partial, int64_t begin,
                           int64_t end);

/* Whether a port may declare combine c for dtype t: SL_ERR_PIPELINE naming
 * both otherwise. */
sl_code sl_combine_check(sl_combine c, sl_dtype t, sl_error *err);

#endif
