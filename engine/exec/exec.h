/* The executor: binds a plan to a backend, preallocates the plan's slots from
 * a pool, streams chunks through the levels (one batch per level per chunk),
 * accumulates reductions across chunks, runs iterate bodies, and returns the
 * graph outputs as whole host tensors (but those a sink node writes) with
 * timings and the measured peak. */
#ifndef SL_EXEC_H
#define SL_EXEC_H

#include <signal.h>

#include "engine/backend/backend.h"
#include "engine/exec/shard.h"
#include "engine/plan/plan.h"

typedef struct sl_output_data {
  const char *name;    /* graph output name (owned by the graph) */
  const char *node_id; /* producing node */
  const char *port;
  const char *unit;    /* or NULL */
  int scan_axes;       /* leading axes that index scan positions */
  sl_tensor_desc desc; /* whole tensor; stream axes kept as leading axes */
  void *data;          /* host memory, owned by the result */
  char *provenance;    /* upstream nodes, params and notes; owned */
  /* A variable-size concat (desc.dims[0] is the bytes written): what each
   * chunk of the scan appended, in scan order; owned. NULL otherwise. */
  int64_t *chunk_bytes;
  int64_t n_chunk_bytes;
  /* A sink node of the graph writes the output (sl_node_desc.sink, e.g.
   * the run's write_h5, chunk by chunk as it streams): it is never
   * assembled in host memory (data is NULL). */
  bool written;
} sl_output_data;

/* The parts of a pass outside its levels (sl_exec_result.pass_outside_seconds). */
enum {
  SL_PASS_OUTSIDE_STAGE_START, /* prefetch stages started (threads, windows) */
  SL_PASS_OUTSIDE_STAGE_WAIT,  /* waits for a stage's chunks (its reads not hidden) */
  SL_PASS_OUTSIDE_STAGE_END,   /* the lagged sinks' last calls, the stages stopped */
  SL_PASS_OUTSIDE_SYNC,        /* the pass's wait for its batches (a device's queue), then
                                  the workers' partials kept for the pass merged */
  SL_PASS_OUTSIDE_IDENTITY,    /* reductions set to their identity */
  SL_PASS_OUTSIDE_SHARD_MERGE, /* a split run: the reductions merged across the shards */
  SL_PASS_OUTSIDE_N
};
extern const char *const sl_pass_outside_names[SL_PASS_OUTSIDE_N];

typedef struct sl_exec_result {
  int n_outputs;
  sl_output_data *outputs;
  double *node_seconds;  /* per graph node (iterate: whole loop); on a device
                            backend, the host time of the node's launchers */
  double *node_device_seconds; /* device backends: the node's kernels' device time */
  /* A producer's (sl_node_desc.produce) waits for the executor's copies out
   * of its memory before rewriting it, left out of node_seconds: the copies
   * queue behind the consumers of the chunk two back, so this is their pace,
   * not the producer's work (on the H200, 17 ms of mean_pattern's 27 ms
   * source on a 256 x 256 scan, none in virtual_image's). */
  double *node_copy_wait_seconds;
  int64_t *node_calls;   /* kernel invocations per node */
  double *level_seconds; /* per plan level, summed over chunks */
  /* Per pass: seconds from the start of execution to the pass's end (its
   * epilogue and every wait included: the level seconds leave out the
   * waits for a prefetch stage's reads). */
  double *pass_end_seconds;
  /* Per pass, what the executor spent outside every level
   * (SL_PASS_OUTSIDE_* of pass k at [k * SL_PASS_OUTSIDE_N + i]): where
   * a run's time outside its nodes goes (report.json's passes). */
  double *pass_outside_seconds;
  /* Outside every pass: from the start of execution to the first pass
   * (outputs, the pool's blocks, tables, scratch) and from the last pass's
   * end to the result (the final sync, outputs down, the blocks given
   * back); and how many allocations the pool made (its arena one). */
  double setup_seconds, finish_seconds;
  int pool_allocations;
  int n_passes;
  /* The budgeted memory (device memory on a device backend, host memory
   * otherwise): measured is the pool's peak (plus the host outputs on the
   * CPU), planned the plan's peak; measured never exceeds planned. */
  int64_t measured_peak_bytes;
  int64_t planned_peak_bytes;
  /* Device backends: host memory measured (outputs, staging) and planned. */
  int64_t measured_host_bytes;
  /* A split run's merge buffers (all-gathered copies, a concat's packed
   * positions, a device accumulator's host copy) as grown: within the
   * plan's shard_exchange_bytes. 0 unsplit. */
  int64_t measured_exchange_bytes;
  int64_t planned_host_bytes;
  /* Of the planned host bytes, the decided state nodes made (the plan's
   * peak covers the path the data took; sl_plan_decided_host_bytes), and
   * the plan's host peak with every decided state (what the budget held). */
  int64_t planned_decided_host_bytes;
  int64_t planned_most_host_bytes;
  /* The process as the OS sees it (everything: code, libraries, file
   * indexes, allocator slack): resident bytes when the run started and the
   * high-water mark at its end. */
  int64_t process_rss_start_bytes;
  int64_t process_rss_peak_bytes;
  /* Set by sl_run_pipeline: resident bytes before the pipeline was loaded
   * (before chunk listing and node state), 0 when not known; the run's own
   * growth is the peak minus this. */
  int64_t process_rss_before_load_bytes;
  /* Set by sl_run_pipeline: where a run's wall time went outside execution
   * (seconds): loading and building the graph (with chunk listing), planning
   * (the budget check and the caller's before_alloc, e.g. reserving the
   * output directory, included), making the backend (a device's start-up
   * not hidden by the warm-up), preparing the nodes, and releasing the nodes
   * and the backend after. */
  double load_seconds, plan_seconds, backend_seconds, prepare_seconds, release_seconds;
  /* Set by sl_run_pipeline: when it began (sl_now()). */
  double began_at;
  /* Set by sl_run_pipeline_shards on shard 0's result: every shard's
   * timing, in shard order (n_shard_timings of them; freed with it). */
  struct sl_shard_timing *shard_timings;
  int n_shard_timings;
  int64_t chunks;
  double seconds;
} sl_exec_result;

/* One shard of a split run as it went (sl_run_pipeline_shards): the
 * device it ran on (-1: none), when its sl_run_pipeline began, after the
 * split run's start (a shard's setup waits for the others': they share one
 * lock), its phases, and of its execution the time in its merges (waiting
 * for the slowest shard included). */
typedef struct sl_shard_timing {
  int device;
  double began_after_seconds;
  double load_seconds, plan_seconds, backend_seconds, prepare_seconds, execute_seconds, release_seconds;
  double merge_seconds;
} sl_shard_timing;

typedef struct sl_exec_opts {
  bool progress; /* draw a progress bar (when stderr is a terminal) */
  /* A split run's one bar, which this shard adds to instead of drawing
   * its own (progress is then ignored); NULL otherwise. */
  struct sl_progress_shared *shared_progress;
  /* When set and it becomes non-zero (a signal handler's flag), the run
   * stops at the next chunk or level with SL_ERR_INTERRUPTED. */
  const volatile sig_atomic_t *cancel;
  /* A run split into shards (shard.h; planned with sl_plan_opts.shards =
   * count), or NULL. This shard streams its own chunks of each pass, and
   * each streamed graph output holds its own positions. On a device
   * backend the merge goes through host memory. No sink nodes (each
   * shard's outputs are its caller's to write): refused. */
  const sl_exec_shard *shard;
} sl_exec_opts;

/* Calls every node's prepare (recursively into iterate bodies); on failure
 * releases what was prepared. */
sl_code sl_graph_prepare(sl_graph *g, sl_error *err);
void sl_graph_release(sl_graph *g);

sl_code sl_execute(const sl_plan *p, sl_backend *b, const sl_exec_opts *opts,
                   sl_exec_result *res, sl_error *err);
void sl_exec_result_free(sl_exec_result *r);

#endif
