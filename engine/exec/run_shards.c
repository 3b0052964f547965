/* A run split into shards of this process (run.h's sl_run_pipeline_shards):
 * one thread per shard, the merge through shard_local.h's group. With an
 * outputs target every shard's writer nodes write into it (its results.h5
 * takes them in turn): each shard its own positions of the streamed
 * outputs, shard 0 what all compute alike. Without one the outputs are
 * held in memory, and shard 0's are completed with the others' positions. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/alloc.h"
#include "engine/core/cpus.h"
#include "engine/core/progress.h"
#include "engine/core/util.h"
#include "engine/exec/run.h"
#include "engine/exec/shard_local.h"
#include "engine/exec/sinks.h"

typedef struct shard_job {
  sl_run_request req;
  sl_exec_shard shard;
  sl_shard_group *group;
  sl_run *run;
  sl_error err;
  sl_code rc;
} shard_job;

static void *shard_thread(void *arg) {
  shard_job *j = arg;
  j->req.shard = &j->shard;
  sl_error_clear(&j->err);
  j->rc = sl_run_pipeline(&j->req, j->run, &j->err);
  if (j->rc != SL_OK) sl_shard_group_abort(j->group, j->shard.index);
  return NULL;
}

int sl_shard_threads(int threads, int count) {
  const int all = threads > 0 ? threads : sl_usable_cpus();
  return all / count > 0 ? all / count : 1;
}

/* The backend table the run will select (NULL when none can be). */
static const sl_backend_ops *shard_ops(const sl_run_request *req) {
  if (req->ops_override) return req->ops_override;
  sl_backend_kind kind;
  sl_error ignored;
  return sl_backend_select(req->backend, &kind, &ignored) == SL_OK ? sl_backend_ops_for(kind) : NULL;
}

int sl_shard_devices(const sl_run_request *req) {
  const sl_backend_ops *ops = shard_ops(req);
  return ops && ops->device_count && ops->create_on ? ops->device_count() : 0;
}

uint64_t sl_shard_budget(const sl_run_request *req, int threads_each, int count) {
  if (req->memory_limit) return req->memory_limit / (uint64_t)count;
  const sl_backend_ops *ops = shard_ops(req);
  sl_backend_caps caps;
  sl_error ignored;
  if (!ops || sl_run_caps(ops, threads_each, &caps, &ignored) != SL_OK) return 0;
  /* a device's memory is shared by the shards on it (the first device's
   * free memory stands for every device's: the shards plan alike) */
  const int devices = sl_shard_devices(req);
  const int sharing = devices > 0 ? (count + devices - 1) / devices : count;
  return caps.memory_bytes / (uint64_t)sharing;
}

/* runs[0]'s memory made the whole process's: every shard's planned and
 * measured bytes added (each shard's plan counts the process's own memory
 * too, so the planned total errs high). */
static void sum_memory(sl_run *runs, int count) {
  sl_exec_result *r = &runs[0].result;
  for (int s = 1; s < count; s++) {
    const sl_exec_result *o = &runs[s].result;
    r->planned_peak_bytes += o->planned_peak_bytes;
    r->planned_host_bytes += o->planned_host_bytes;
    r->planned_most_host_bytes += o->planned_most_host_bytes;
    r->planned_decided_host_bytes += o->planned_decided_host_bytes;
    r->measured_peak_bytes += o->measured_peak_bytes;
    r->measured_host_bytes += o->measured_host_bytes;
    r->measured_exchange_bytes += o->measured_exchange_bytes;
  }
}

/* runs[0]'s streamed graph outputs completed with shard s's positions. */
static void gather_streamed(sl_run *runs, int count) {
  const sl_plan *p = runs[0].plan;
  const sl_graph *g = p->graph;
  for (int o = 0; o < g->n_outputs; o++) {
    sl_output_data *whole = &runs[0].result.outputs[o];
    if (!whole->data || !g->nodes[g->outputs[o].node].out[g->outputs[o].port].stream_rank) continue;
    const sl_plan_pass *pp = sl_plan_node_pass(p, g->outputs[o].node);
    const int64_t item = sl_desc_item_bytes(&g->nodes[g->outputs[o].node].out[g->outputs[o].port]);
    for (int s = 1; s < count; s++) {
      int64_t p0, p1;
      sl_shard_positions(pp->positions, pp->chunk_positions, pp->n_chunks, s, count, &p0, &p1);
      if (p1 > p0)
        memcpy((char *)whole->data + p0 * item, (const char *)runs[s].result.outputs[o].data + p0 * item,
               (size_t)((p1 - p0) * item));
    }
  }
}

/* Every shard's timing into runs[0] (sl_exec_result.shard_timings); none
 * when there is no memory for it. */
static void keep_timings(sl_run *runs, const shard_job *jobs, int count, double began_at) {
  sl_shard_timing *t = sl_calloc((size_t)count, sizeof *t);
  if (!t) return;
  for (int s = 0; s < count; s++) {
    const sl_exec_result *r = &runs[s].result;
    double merge = 0;
    for (int pass = 0; r->pass_outside_seconds && pass < runs[s].plan->n_passes; pass++)
      merge += r->pass_outside_seconds[pass * SL_PASS_OUTSIDE_N + SL_PASS_OUTSIDE_SHARD_MERGE];
    t[s] = (sl_shard_timing){.device = jobs[s].shard.device, .began_after_seconds = r->began_at - began_at,
                             .load_seconds = r->load_seconds, .plan_seconds = r->plan_seconds,
                             .backend_seconds = r->backend_seconds, .prepare_seconds = r->prepare_seconds,
                             .execute_seconds = r->seconds, .release_seconds = r->release_seconds,
                             .merge_seconds = merge};
  }
  runs[0].result.shard_timings = t;
  runs[0].result.n_shard_timings = count;
}

sl_code sl_run_pipeline_shards(const sl_run_request *req, int count, sl_run *runs, sl_error *err) {
  for (int s = 0; s < count; s++) memset(&runs[s], 0, sizeof runs[s]);
  if (count < 1) return sl_fail(err, SL_ERR_USAGE, "a run splits into at least one shard, not %d", count);
  char h5[32];
  if (count > 1 && !sl_h5_threadsafe(h5, sizeof h5))
    return sl_fail(err, SL_ERR_USAGE,
                   "a run split into shards calls HDF5 from several threads, and this HDF5 library (%s) was "
                   "built without thread safety: run it unsplit, or link sluice with a thread-safe HDF5",
                   h5);
  sl_shard_group *group = sl_shard_group_new(count);
  shard_job *jobs = sl_calloc((size_t)count, sizeof *jobs);
  pthread_t *threads = sl_calloc((size_t)count, sizeof *threads);
  if (!group || !jobs || !threads) {
    sl_shard_group_free(group), free(jobs), free(threads);
    return sl_fail_nomem(err, "the shards of a run");
  }
  /* Every shard plans alike (the merge pairs their buffers): the same
   * workers each, so the same automatic chunk. */
  const int threads_each = sl_shard_threads(req->threads, count);
  const uint64_t budget = sl_shard_budget(req, threads_each, count);
  const int devices = sl_shard_devices(req);
  pthread_mutex_t setup = PTHREAD_MUTEX_INITIALIZER;
  sl_progress_shared progress;
  sl_progress_shared_init(&progress, req->progress);
  const double began_at = sl_now();
  int started = 0;
  sl_code rc = SL_OK;
  for (int s = 0; s < count; s++) {
    jobs[s].req = *req;
    jobs[s].req.threads = threads_each;
    jobs[s].req.progress = false; /* the shards add to one bar */
    jobs[s].req.shared_progress = &progress;
    jobs[s].req.memory_limit = budget;
    jobs[s].req.setup_lock = &setup;
    if (s > 0) jobs[s].req.before_alloc = NULL; /* once, for the run (e.g. its output directory) */
    jobs[s].shard = sl_shard_group_member(group, s);
    jobs[s].shard.device = devices > 0 ? s % devices : -1; /* the devices in turn */
    jobs[s].group = group;
    jobs[s].run = &runs[s];
    if (pthread_create(&threads[s], NULL, shard_thread, &jobs[s]) != 0) {
      sl_shard_group_abort(group, s);
      rc = sl_fail(err, SL_ERR_INTERNAL, "cannot start the thread of shard %d", s);
      break;
    }
    started++;
  }
  for (int s = 0; s < started; s++) pthread_join(threads[s], NULL);
  /* The cause: the shard that failed first, not one that stopped at a
   * merge because of it. */
  int cause = sl_shard_group_failed(group);
  if (rc == SL_OK && cause >= 0) {
    *err = jobs[cause].err;
    rc = jobs[cause].rc;
  }
  pthread_mutex_destroy(&setup);
  sl_progress_shared_end(&progress);
  if (rc == SL_OK) {
    gather_streamed(runs, count);
    sum_memory(runs, count);
    keep_timings(runs, jobs, count, began_at);
  }
  sl_shard_group_free(group);
  free(jobs);
  free(threads);
  return rc;
}
