/* The prefetch stage: copy/compute overlap for a stream source on a device
 * backend, generic over nodes (sl_node_desc.produce) and backends (the
 * asynchronous copies and events of backend.h; no native objects).
 *
 * For one pass, a helper thread (bound to the backend's device first) runs
 * the node's produce for chunks 0, 1, ... in order; produce hands back
 * ranges of its own host memory (pinned: the backend's host_alloc), which
 * the stage copies with copy_async on the copy queue into a ring of two
 * device buffers (the plan's slots of the node's output: sl_plan_buffer.slot
 * and ring_slot), then records `uploaded`. At chunk j the executor takes
 * ring[j % 2]: the compute queue waits for `uploaded`, and the consumers'
 * port points at that buffer (no device-to-device copy, no slot of its own).
 * Once chunk j's levels are enqueued the executor gives it back: `consumed`
 * is recorded on the compute queue, and the copies of chunk j + 2 into that
 * buffer wait for it on the copy queue.
 *
 * The node's memory: each copy names the piece it reads (a read-ahead
 * window); after each chunk the stage records an event per piece it read,
 * and the node's piece_wait waits for it before the piece is rewritten.
 *
 * A produce error is kept with its chunk and returned when the executor
 * takes that chunk (earlier chunks run normally). The thread stops at the
 * end of the pass, on an error, on cancel and when the run context ends;
 * sl_prefetch_end then waits for every copy the stage enqueued.
 *
 * Without overlap (the setting source_overlap=false, kept for comparison)
 * the same produce runs when the chunk is taken, on the executor's thread,
 * and its copies go on the compute queue, in order with the kernels. */
#ifndef SL_PREFETCH_H
#define SL_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"

typedef struct sl_prefetch sl_prefetch;

typedef struct sl_prefetch_setup {
  sl_backend *backend;
  const sl_node *node;          /* its desc has produce */
  void *ring[2];                /* device buffers of ring_bytes each */
  int64_t ring_bytes;
  int64_t positions, chunk_positions, n_chunks; /* the pass's chunking */
  /* The chunks it produces, in order: [first_chunk, end_chunk) (every
   * chunk, or a shard's range: engine/exec/shard.h). */
  int64_t first_chunk, end_chunk;
  bool overlap;                 /* a helper thread and the copy queue */
  /* With overlap: the stage starts before the pass's prologue (its node
   * reads no other node's output), so that produce's setup and first reads
   * overlap the prologue; its first copy waits, on the host and then on the
   * copy queue, for sl_prefetch_open_gate (ring buffers may share device
   * memory with prologue buffers that are dead once it ran). */
  bool gated;
} sl_prefetch_setup;

/* Makes the stage's events and starts its thread (overlap). On failure
 * nothing is left behind. Errors name no node: the caller adds it. */
sl_code sl_prefetch_begin(const sl_prefetch_setup *s, sl_prefetch **out, sl_error *err);
/* A gated stage (sl_prefetch_setup.gated): the prologue's levels are all
 * enqueued on the compute queue; the stage's copies may follow them. A no-op
 * on a stage that is not gated. */
sl_code sl_prefetch_open_gate(sl_prefetch *p, sl_error *err);
/* Chunk j (the next one: first_chunk, first_chunk + 1, ... in order): returns when its copies are
 * enqueued, with the compute queue made to wait for them; *data is the ring
 * buffer that holds it and *bytes what produce said it holds. A produce
 * error at chunk j comes back here, as produce reported it. */
sl_code sl_prefetch_take(sl_prefetch *p, int64_t j, void **data, int64_t *bytes, sl_error *err);
/* After chunk j's levels were enqueued: its ring buffer may be refilled
 * once they have run. */
sl_code sl_prefetch_give_back(sl_prefetch *p, int64_t j, sl_error *err);
/* Stops the thread, waits for every copy the stage enqueued, adds the time
 * produce took (less its waits for the copies out of its memory) and its
 * calls, and those waits, and frees the stage. NULL is a no-op (and so is a
 * NULL out-pointer). */
void sl_prefetch_end(sl_prefetch *p, double *seconds, int64_t *calls, double *copy_wait_seconds);

#endif
