/* A whole run in one call: load, build, plan, check the budget (before any
 * allocation), bind the backend, prepare, execute, release. The CLI, tests
 * and benchmarks all run pipelines through this. */
#ifndef SL_RUN_H
#define SL_RUN_H

#include <pthread.h>

#include "engine/exec/exec.h"
#include "engine/exec/sinks.h"

typedef struct sl_run_request {
  const char *file;
  const sl_node_registry *registry; /* the node types the pipeline may use */
  const sl_setting *sets;
  size_t n_sets;
  int backend;              /* sl_backend_kind or SL_BACKEND_AUTO */
  uint64_t memory_limit;    /* 0 = the backend's memory */
  int64_t chunk_positions;  /* 0 = automatic */
  int threads;              /* 0 = all */
  bool progress;
  struct sl_progress_shared *shared_progress; /* see sl_exec_opts (set by sl_run_pipeline_shards) */
  const volatile sig_atomic_t *cancel; /* see sl_exec_opts */
  /* Called after planning, before anything is allocated (e.g. to say which
   * backend auto chose, or to refuse an existing output directory). */
  sl_code (*before_alloc)(void *ctx, const sl_plan *plan, sl_error *err);
  void *ctx;
  /* Optional: where the outputs are written. The run then appends a writer
   * node for each output (sl_graph_add_writers: results.h5 chunk by chunk,
   * PNGs), plans them like any node, and binds them to this target before
   * the nodes are prepared (before_alloc may open it); the result holds
   * none of the outputs' data. */
  sl_output_target *outputs;
  /* The cost model's profile (calibrate measures with one it builds);
   * NULL: sl_cost_profile_for. */
  const sl_cost_profile *cost_profile;
  /* One shard of a run split into shards (engine/exec/shard.h), or NULL;
   * sl_run_pipeline_shards sets it for each of its own. */
  const sl_exec_shard *shard;
  /* Optional: held around everything but the execution (loading, chunk
   * listing, planning, preparing, releasing). The shards of one process
   * run side by side, and what those steps use is not all thread-safe
   * (the HDF5 library, the chunk-index cache). */
  pthread_mutex_t *setup_lock;
  /* Tests: use this backend table instead of the selected one. */
  const sl_backend_ops *ops_override;
} sl_run_request;

typedef struct sl_run {
  sl_spec *spec;
  sl_graph *graph;
  sl_plan *plan;
  sl_exec_result result;
  bool executed;
  /* Why the cost profile in the cache was not used (corrupt, foreign), or
   * "" (the plan's profile says which one was). */
  char cost_warning[1200];
} sl_run;

/* The capabilities a run plans with: the backend's probe, with the CPU
 * profile scaled to `threads` (0 = all) workers. */
sl_code sl_run_caps(const sl_backend_ops *ops, int threads, sl_backend_caps *caps, sl_error *err);

/* On failure everything is released, and `out` holds what was built before
 * the failure (spec, graph, plan may be NULL); call sl_run_free either way. */
sl_code sl_run_pipeline(const sl_run_request *req, sl_run *out, sl_error *err);
void sl_run_free(sl_run *r);

/* The pipeline split into `count` shards of this process (shard_local.h),
 * each run by sl_run_pipeline on a thread of its own, with the request's
 * threads shared out (at least one each) and its budget too (the memory
 * limit, else the backend's memory); before_alloc is called once, by shard
 * 0. runs[0 .. count) hold each shard's run (call sl_run_free on each,
 * either way). On success runs[0] holds the whole result: its streamed
 * graph outputs completed with every other shard's positions, its memory
 * figures the sums over the shards. The first shard that failed says why
 * (the others stop at their next merge). No outputs target
 * (sl_exec_opts.shard). Every shard uses the request's backend; where it
 * has devices (sl_backend_ops.create_on), shard s runs on device
 * s % sl_shard_devices(req), and the shards on one device share it. */
sl_code sl_run_pipeline_shards(const sl_run_request *req, int count, sl_run *runs, sl_error *err);

/* Each shard's workers: `threads` (0: the CPUs this process may use) shared
 * out, at least one. */
int sl_shard_threads(int threads, int count);
/* The devices the shards are put on in turn: those of the backend the
 * request selects, 0 for a backend without devices (the CPU). */
int sl_shard_devices(const sl_run_request *req);
/* Each shard's budget: the request's memory limit shared out among the
 * shards, else the memory of the backend it selects (with threads_each
 * workers; on a device, the first device's) shared among the shards on
 * one device; 0 when neither is known (each shard's own default). */
uint64_t sl_shard_budget(const sl_run_request *req, int threads_each, int count);

#endif
