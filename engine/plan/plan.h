/* The planner: levels, buffer lifetimes, pooled slots, peak memory, bytes
 * moved, work and an estimated time — computed from the graph alone. Planning
 * allocates no data buffers; `sluice plan` stops here.
 *
 * Levels are numbered globally across phases: prologue levels first, then the
 * per-chunk stream levels, then the epilogue. A buffer's lifetime is
 * [first level, last level]: from the level of its producer to the level of its
 * last consumer. Streamed buffers hold one chunk and live inside the stream
 * levels; whole buffers feeding the stream, reduction outputs and graph
 * outputs live across all chunks. Buffers whose lifetimes do not overlap share
 * a pooled slot, assigned best fit by size (a slot is as large as its largest
 * occupant). An output that a node may write in place over its input
 * (sl_node_desc.in_place_outputs) shares the input's slot when nothing else
 * reads that input. An output nobody reads whose node promises to leave it
 * alone then (sl_node_desc.omit_unread_outputs) has no buffer at all. */
#ifndef SL_PLAN_H
#define SL_PLAN_H

#include <stdio.h>

#include "engine/core/device_caps.h"
#include "engine/core/json.h"
#include "engine/graph/graph.h"
#include "engine/plan/cost_profile.h"

typedef struct sl_plan_buffer {
  int node, port;
  int64_t bytes;     /* per chunk for streamed buffers, whole otherwise */
  int first_level, last_level;
  int slot;
  bool streamed;
  bool reduction;    /* whole output of a stream-phase node: accumulates */
  bool graph_output; /* a graph output: unless a sink node writes it, assembled
                        on the host (streamed) or read at the end (whole) */
  /* An in-place output (sl_node_desc.in_place_outputs): the index of the
   * buffer whose slot it shares (the first of a chain of in-place outputs,
   * whose lifetime is stretched to cover the whole chain), or -1. */
  int in_place_of;
  /* A reduction's declared combine (engine/core/combine.h), or NONE. */
  sl_combine combine;
  /* A variable-size port (sl_node_desc.out_bound): bytes is its bound (a
   * CONCAT reduction: the sum of every chunk's bound). */
  bool variable;
  /* The per-chunk partial the executor lends the kernel for a declared
   * reduction (element-wise combines: the whole output; a variable-size
   * concat: one chunk's bound; a fixed-size concat writes in place: 0). */
  int64_t partial_bytes;
  /* A window of the node's whole input of the same index
   * (sl_node_desc.view_outputs): no bytes and no slot (-1) of its own. */
  bool view;
  /* Lent by its node from its own memory (sl_node_desc.lends_output, where
   * the node runs on the host: sl_plan_node.host): no bytes and no slot
   * (-1); the executor passes the kernel's pointer on. */
  bool lent;
  /* An output nobody reads whose node leaves it alone then
   * (sl_node_out_omitted): no bytes, no slot (-1), no partial, not staged;
   * the kernels get out == NULL. */
  bool unread;
  /* A streamed output its node makes on the host ahead of the kernels
   * (sl_node_desc.produce) on a device backend: the second device buffer of
   * the executor's ring (the first is `slot`), a slot of its own; both live
   * through every stream level of the passes the node runs in. -1 else. */
  int ring_slot;
} sl_plan_buffer;

typedef struct sl_plan_slot {
  int64_t bytes; /* its largest occupant's, rounded up to 64 */
} sl_plan_slot;

typedef struct sl_plan_level {
  sl_phase phase;
  int pass;
  int n_nodes;
  int *nodes;
  double est_seconds; /* for the whole run (all chunks) */
} sl_plan_level;

typedef struct sl_plan_node {
  sl_node_cost cost; /* for the whole run */
  /* Its kernel runs on the host: every node on a backend without device
   * memory; on one with, a host node (sl_node_desc.host), and a node that
   * lends each streamed output it makes to host nodes alone
   * (sl_node_desc.lends_output): hdf5_source's stored chunks to write_h5
   * go nowhere near the device. */
  bool host;
  int64_t calls;     /* kernel calls in the whole run (iterate: iterations
                        estimated: times, or an until-loop's last run, else
                        its expect:) */
  bool calls_from_history; /* an until-loop estimated by its last run
                              (engine/plan/loop_history.h) */
  bool calls_expected;     /* ... by its expect: (it never ran) */
  double est_seconds; /* sl_cost_estimate of cost and calls, plus the
                         wait below */
  double est_once_seconds; /* of est_seconds, its rate's setup once per run
                              (sl_cost_estimate_once) */
  /* A device library's load its first call waits for (sl_cost_warm_up_wait;
   * 0: none left or none waited for). */
  double warm_up_wait_seconds;
  /* The rate's first_call_seconds when this node is the first of its rate
   * in the run (a fresh process's kernel loading; part of est_seconds). */
  double first_call_seconds;
  /* On a device backend, the host memory this node is the first to write
   * (the workers' scratch beyond what earlier host nodes touched, the host
   * nodes' workspace likewise) faulted in: first_touch_bytes x the profile's
   * host_first_touch_seconds_per_byte (part of est_seconds). */
  double first_touch_seconds;
  int64_t first_touch_bytes; /* those bytes on the node's critical path: a worker's
                                stride (the workers fault theirs in side by side)
                                and the workspace (device backends, whatever the
                                profile's rate) */
  /* The most the work the node may decide on from the data takes
   * (sl_node_cost.decided_ops_most; not in est_seconds). */
  double decided_seconds_most;
  /* The profile's rate that estimates it (in the plan's own profile), or
   * NULL: the bandwidth model. */
  const sl_cost_rate *rate;
  struct sl_plan *body; /* iterate nodes: the body's plan, made once */
  /* Per output port: where in each worker's block of worker scratch the
   * port's partial per worker lies (sl_plan_worker_layout), or -1. */
  int64_t worker_partial_offset[SL_MAX_PORTS];
  /* Bit k: output k's worker partials are kept for the pass
   * (SL_WORKER_PARTIALS_PASS, granted where the node's CPU kernel streams
   * on the CPU backend): they lie after every node's per-call block, at
   * worker_partial_offset[k], for the whole run. */
  unsigned pass_partials;
} sl_plan_node;

/* The levels of one pass over the data: prologue, stream (run once per
 * chunk), epilogue; an empty range has first > last. */
typedef struct sl_plan_pass {
  int prologue_first, prologue_last;
  int stream_first, stream_last;
  int epilogue_first, epilogue_last;
  /* The stream the pass goes over (NULL: the acquisition's scan; see
   * sl_tensor_desc.stream_axis) and its chunking; 0 positions when the
   * pass streams nothing. */
  const char *axis;
  int64_t positions, chunk_positions, n_chunks;
} sl_plan_pass;

typedef struct sl_plan_opts {
  sl_backend_caps caps;      /* throughput profile and memory */
  int64_t chunk_positions;   /* 0 = choose from target_chunk_bytes */
  int64_t target_chunk_bytes; /* 0 = sl_plan_chunk_bytes_per_worker per worker, for the largest streamed buffer */
  uint64_t memory_limit;     /* 0 = caps.memory_bytes; the budget */
  /* An iterate body's plan: the process's own memory is its parent's. */
  bool body;
  /* The cost model's numbers (sl_cost_profile_for); NULL: the built-in
   * guesses for caps. */
  const sl_cost_profile *profile;
  /* Per top-level node: the iterations its until-loop ran the last time
   * this pipeline ran (sl_loop_history_read), -1 where unknown; NULL: every
   * until-loop is estimated by its bound. The planner reads no files. */
  const int64_t *loop_iterations;
  /* A run split into this many shards (engine/exec/shard.h; 0 or 1: not
   * split): each shard plans the same way, and its host peak counts the
   * merge's all-gather (shard_exchange_bytes). */
  int shards;
} sl_plan_opts;

typedef struct sl_plan {
  const sl_graph *graph;
  sl_backend_caps caps;
  /* The acquisition's scan (else the first stream): positions, positions
   * per chunk, chunks. Passes over other streams have their own. */
  int64_t positions;
  int64_t chunk_positions;
  int64_t n_chunks;
  int n_levels;
  sl_plan_level *levels;
  int stream_first_level, stream_last_level; /* of the first pass; -1 when no stream */
  int n_passes;
  sl_plan_pass passes[SL_MAX_PASSES];
  int *exec_level; /* [node * n_passes + pass]: the level a node runs at, or -1 */
  int n_buffers;
  sl_plan_buffer *buffers;
  int n_slots;
  sl_plan_slot *slots;
  sl_plan_node *nodes; /* per graph node */
  int64_t slot_bytes;      /* sum of slot sizes: preallocated */
  int64_t workspace_bytes; /* largest node workspace (one at a time) */
  /* Per-worker host scratch (sl_kernel_args.worker_scratch): the largest
   * node's block (sl_plan_worker_layout: its cost().per_worker_bytes and its
   * reductions' partials per worker, each rounded to 64 bytes), and that
   * times the host workers, lent by the executor for the whole run. */
  int64_t worker_scratch_stride;
  int64_t worker_scratch_bytes;
  int64_t state_bytes;     /* node state held for the whole run (sum) */
  int64_t device_state_bytes; /* node state in device memory (sum; device backends only) */
  int64_t lent_workspace_bytes; /* the executor's workspace buffer */
  int64_t host_workspace_bytes; /* device backends: the host nodes' workspace
                                   (host memory; 0 on the CPU backend) */
  int64_t staging_bytes;   /* host staging of host nodes on a device backend */
  int64_t body_bytes;      /* largest iterate body peak */
  int64_t output_bytes;    /* graph outputs assembled in host memory (none
                              of those a sink node writes) */
  int64_t partial_bytes;   /* reductions' per-chunk partials (sum) */
  /* A run split into shards (sl_plan_opts.shards): the host memory of the
   * merge's all-gather, every shard's copy of the largest reduction merged
   * after a pass (one at a time), held while it merges; 0 unsplit. */
  int shards;
  int64_t shard_exchange_bytes;
  int64_t live_peak_bytes; /* max over levels of live buffer bytes (lower bound) */
  int64_t process_bytes;   /* the process's own host memory beyond the plan
                              (profile.process_bytes; 0 in iterate bodies) */
  int64_t library_bytes;   /* the largest node library start-up (FFTW), once */
  int64_t body_library_bytes; /* the same of the iterate bodies */
  int64_t peak_host_bytes; /* without decided_state_bytes */
  int64_t peak_device_bytes;
  /* Host state kernels make only where the data decide (their costs'
   * decided_state_bytes, sum; an iterate body's in body_bytes already):
   * peak_host_bytes_most = peak_host_bytes + that is what the budget
   * holds, so that no decision can overrun it; a run's planned peak counts
   * what its nodes made (sl_plan_decided_host_bytes). */
  int64_t decided_state_bytes;
  int64_t peak_host_bytes_most;
  int64_t bytes_read, bytes_written, ops;
  int64_t batches;    /* level batches in the whole run (iterate bodies' included) */
  /* nodes + batches x batch_seconds + run_seconds (cost_profile.h) */
  double est_seconds;
  /* of est_seconds, the nodes' setups once per run (est_once_seconds) */
  double est_once_seconds;
  uint64_t memory_limit;
  sl_cost_profile profile; /* the estimate's numbers */
} sl_plan;

/* Bytes of the largest streamed buffer per worker in an automatic chunk. */
int64_t sl_plan_chunk_bytes_per_worker(const sl_backend_caps *caps);
sl_code sl_plan_build(const sl_graph *g, const sl_plan_opts *opts, sl_plan **out, sl_error *err);
void sl_plan_free(sl_plan *p);
/* A node's block of worker scratch, the same for every worker: its
 * per_worker_bytes of scratch at 0, then, when `partials` (the node runs
 * its CPU kernel on the host), each output port lent a partial per worker
 * (sl_node_worker_partial) but those in `apart` (laid out for the pass,
 * sl_plan_node.pass_partials), whole-sized, at offset[port] (-1 for the
 * others); each part rounded up to 64 bytes. Returns the block's bytes. */
int64_t sl_plan_worker_layout(const sl_node *n, int64_t per_worker_bytes, bool partials, unsigned apart,
                              int64_t offset[SL_MAX_PORTS]);
/* The index in p->buffers of output `port` of node `node`, or -1. */
int sl_plan_buffer_index(const sl_plan *p, int node, int port);
/* The pass a stream node's chunks follow (its home pass); its chunking is
 * the same in every pass it runs in. */
const sl_plan_pass *sl_plan_node_pass(const sl_plan *p, int node);
/* Bytes the run takes from the backend's pool for its whole execution:
 * slots, lent workspace, reductions' partials (the cost model's pool and
 * first-touch terms are per byte of these). */
int64_t sl_plan_pooled_bytes(const sl_plan *p);
/* On a device backend, the arena the executor reserves for the run's pooled
 * blocks (slots, lent workspace, partials and the nodes' device tables,
 * each carved SL_PLAN_ARENA_ALIGN bytes apart: engine/exec/pool.h), whose
 * padding the planned device peak includes; 0 on the CPU. */
int64_t sl_plan_arena_bytes(const sl_plan *p);
/* Carved blocks of the arena start this many bytes apart (cudaMalloc's
 * alignment); a block of `bytes` takes sl_plan_arena_block(bytes) of it
 * (its size class, rounded up to that). */
#define SL_PLAN_ARENA_ALIGN 256
int64_t sl_plan_arena_block(int64_t bytes);
/* What an iterate node's loop itself moves over all its iterations: the
 * carried values copied back each iteration (the cost model's "iterate"
 * work; its bodies are estimated from their own plans). */
void sl_plan_loop_carry_cost(const sl_node *n, sl_node_cost *c);
/* A loop's `iters` runs of its body's plan: each iteration runs the body's
 * levels as batches (not a run: the run's own overhead is left out, the
 * loop's iterations are its calls) and its nodes' kernels; the nodes'
 * setups once per run (est_once_seconds) are paid once, in the first
 * iteration: the body's nodes are prepared once for the whole loop. */
double sl_plan_loop_seconds(const sl_plan *body, int64_t iters);
/* SL_ERR_BUDGET with a typed estimate (what needs how much) when the planned
 * peak exceeds the plan's memory limit. */
sl_code sl_plan_check_budget(const sl_plan *p, sl_error *err);
/* The decided state (sl_node_cost.decided_state_bytes) the plan's nodes
 * held (sl_node.decided_state_bytes, each at most its cost's): a run adds
 * it to its planned host peak (peak_host_bytes), which then covers the
 * path the data took. */
int64_t sl_plan_decided_host_bytes(const sl_plan *p);
/* The waits for the device libraries' background load estimated again
 * when execution is about to start (sl_plan_build assumes it starts as the
 * backend comes up, with the profile's library_load_seconds left): none
 * where the loads have finished (sl_node_desc.device_warm_up_done), else
 * what is left after since_backend_seconds (the backend's creation to
 * now: the nodes' prepare). The node's, its level's and the run's
 * estimates follow. */
void sl_plan_refresh_warm_up_waits(sl_plan *p, double since_backend_seconds);
void sl_plan_print(FILE *f, const sl_plan *p);
/* The plan's tree of schedule regions (plan_regions.c): whole and stream
 * regions of each pass, loops holding their bodies' regions. */
void sl_plan_print_regions(FILE *f, const sl_plan *p);
void sl_plan_regions_json(sl_json *j, const sl_plan *p);
void sl_plan_json(sl_json *j, const sl_plan *p);
/* The keys that name level l in JSON (level, phase, pass), written into the
 * caller's open object: the plan's levels and the run report's measured
 * levels say them the same way. */
void sl_plan_level_json_keys(sl_json *j, const sl_plan *p, int l);
/* The bytes a slot or pooled block of `bytes` takes: rounded up to 64 (a
 * cache line, for aligned vector loads), at least 64. */
int64_t sl_size_class(int64_t bytes);

#endif
