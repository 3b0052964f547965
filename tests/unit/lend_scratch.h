/* What the executor lends a kernel call, for tests that call kernels
 * directly: the node's workspace, its workers' scratch and worker partials.
 * Include after <stdlib.h> and <string.h>. */
#ifndef SL_TEST_LEND_SCRATCH_H
#define SL_TEST_LEND_SCRATCH_H

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/plan/plan.h"

/* Lends a kernel call what the executor lends for `positions`: the node's
 * cost().workspace_bytes, and for each worker of b its per_worker_bytes and
 * its partials per worker, laid out as the plan lays them out
 * (sl_plan_worker_layout; a stream node's only), filled with 0xA5; returns
 * the block for the caller to free (NULL when none was declared). */
static inline void *lend_scratch(const sl_node *n, sl_backend *b, int64_t positions, sl_kernel_args *a) {
  sl_node_cost c;
  memset(&c, 0, sizeof c);
  if (n->desc->cost) n->desc->cost(n, positions, &c);
  int64_t ws = (c.workspace_bytes + 63) / 64 * 64, offset[SL_MAX_PORTS];
  a->worker_scratch_stride = sl_plan_worker_layout(n, c.per_worker_bytes, true, 0u, offset);
  int64_t bytes = ws + a->worker_scratch_stride * b->ops->workers(b);
  char *block = bytes ? aligned_alloc(64, (size_t)bytes) : NULL;
  /* not zero, as the executor's reused scratch need not be: a kernel that
   * reads what it did not write fails its test */
  if (block) memset(block, 0xA5, (size_t)bytes);
  a->workspace = ws ? block : NULL;
  a->worker_scratch = a->worker_scratch_stride ? block + ws : NULL;
  for (int k = 0; k < SL_MAX_PORTS; k++) a->worker_partial[k] = offset[k] >= 0 ? block + ws + offset[k] : NULL;
  return block;
}

#endif
