#include "engine/exec/run.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/plan/loop_history.h"

sl_code sl_run_caps(const sl_backend_ops *ops, int threads, sl_backend_caps *caps, sl_error *err) {
  sl_code rc = ops->probe(caps, err);
  if (rc == SL_OK && ops->kind == SL_BACKEND_CPU && threads > 0) {
    double share = (double)threads / (double)(caps->compute_units ? caps->compute_units : 1);
    caps->bytes_per_second *= share;
    caps->ops_per_second *= share;
    caps->compute_units = threads;
  }
  /* the host workers whose scratch the plan counts: a device backend's
   * host helpers are CPU threads too */
  if (rc == SL_OK && threads > 0) caps->host_workers = threads;
  return rc;
}

/* The nodes' device warm-ups (sl_node_desc.device_warm_up_begin), in
 * iterate bodies too: begin or wait. */
static void node_warm_ups(const sl_graph *g, bool begin) {
  for (int i = 0; g && i < g->n_nodes; i++) {
    const sl_node_desc *d = g->nodes[i].desc;
    if (d && begin && d->device_warm_up_begin) d->device_warm_up_begin();
    if (d && !begin && d->device_warm_up_wait) d->device_warm_up_wait();
    node_warm_ups(g->nodes[i].body, begin);
  }
}

/* The node types of the graph and its iterate bodies, each once, into
 * types (at most max); returns how many. */
static int node_types(const sl_graph *g, const char **types, int n, int max) {
  for (int i = 0; g && i < g->n_nodes; i++) {
    const sl_node_desc *d = g->nodes[i].desc;
    bool seen = !d || !d->type;
    for (int t = 0; t < n && !seen; t++) seen = !strcmp(types[t], d->type);
    if (!seen && n < max) types[n++] = d->type;
    n = node_types(g->nodes[i].body, types, n, max);
  }
  return n;
}

/* A split run's writer nodes share results.h5, which appends a stream of
 * variable-size items in stream order only: the shards would interleave
 * theirs. */
static sl_code shards_can_write(const sl_graph *g, sl_error *err) {
  for (int o = 0; o < g->n_outputs; o++) {
    const sl_graph_output *go = &g->outputs[o];
    if (go->node >= 0 && sl_graph_output_written(g, o) && sl_desc_is_ragged(&g->nodes[go->node].out[go->port]))
      return sl_fail(err, SL_ERR_PIPELINE,
                     "output '%s' is a stream of variable-size items, which results.h5 appends in stream order: "
                     "a run split into shards cannot write it; run this one unsplit",
                     go->name);
  }
  return SL_OK;
}

sl_code sl_run_pipeline(const sl_run_request *req, sl_run *out, sl_error *err) {
  memset(out, 0, sizeof *out);
  if (req->setup_lock) pthread_mutex_lock(req->setup_lock);
  int64_t rss_before = (int64_t)sl_process_rss();
  /* Device backends that may be chosen start initialising now, while the
   * host loads and plans (chunk listing can take a while on big
   * acquisitions); create joins them. */
  const sl_backend_ops *warming[SL_BACKEND_COUNT] = {0};
  for (int k = 0; k < SL_BACKEND_COUNT && !req->ops_override; k++) {
    const sl_backend_ops *w = sl_backend_ops_for((sl_backend_kind)k);
    if (w && w->warm_up_begin && (req->backend == SL_BACKEND_AUTO || req->backend == k)) {
      w->warm_up_begin();
      warming[k] = w;
    }
  }
  double t0 = sl_now();
  sl_code rc = sl_spec_load(req->file, req->sets, req->n_sets, &out->spec, err);
  if (rc == SL_OK) rc = sl_graph_build(out->spec, NULL, req->registry, &out->graph, err);
  uint64_t loop_key = 0;
  if (rc == SL_OK) rc = sl_loop_history_key_of(out->spec, out->graph, &loop_key, err);
  if (rc == SL_OK && req->outputs) rc = sl_graph_add_writers(out->graph, err);
  const bool split = req->shard && req->shard->count > 1;
  if (rc == SL_OK && req->outputs && split) rc = shards_can_write(out->graph, err);
  double t_loaded = sl_now();
  sl_backend_kind kind = SL_BACKEND_CPU;
  const sl_backend_ops *ops = req->ops_override;
  if (rc == SL_OK && !ops) {
    rc = sl_backend_select(req->backend, &kind, err);
    if (rc == SL_OK) ops = sl_backend_ops_for(kind);
  }
  if (ops) kind = ops->kind;
  sl_backend_caps caps;
  if (rc == SL_OK) rc = sl_graph_check_backend(out->graph, kind, err);
  if (rc == SL_OK && kind != SL_BACKEND_CPU) node_warm_ups(out->graph, true);
  /* the device code of its nodes, while the host plans (the helper is
   * joined below with the backend's warm-up) */
  if (rc == SL_OK && warming[kind] && warming[kind]->warm_up_nodes) {
    const char *types[SL_WARM_UP_TYPES_MAX];
    warming[kind]->warm_up_nodes(types, node_types(out->graph, types, 0, SL_WARM_UP_TYPES_MAX));
  }
  if (rc == SL_OK) rc = sl_run_caps(ops, req->threads, &caps, err);
  if (rc == SL_OK) {
    sl_plan_opts po;
    memset(&po, 0, sizeof po);
    po.caps = caps;
    /* The cost model's numbers: what calibrate cached for this backend,
     * device and thread count, else the built-in guesses. */
    sl_cost_profile profile;
    if (req->cost_profile) profile = *req->cost_profile;
    else sl_cost_profile_for(&caps, out->graph->registry, &profile, NULL, 0, out->cost_warning, sizeof out->cost_warning);
    po.profile = &profile;
    po.chunk_positions = req->chunk_positions;
    po.memory_limit = req->memory_limit;
    po.shards = req->shard ? req->shard->count : 0;
    int64_t *loops = sl_loop_history_read(loop_key, out->graph);
    po.loop_iterations = loops;
    rc = sl_plan_build(out->graph, &po, &out->plan, err);
    free(loops);
  }
  /* The budget is checked before the backend exists: nothing is allocated
   * for a plan that does not fit. */
  if (rc == SL_OK) rc = sl_plan_check_budget(out->plan, err);
  if (rc == SL_OK && req->before_alloc) rc = req->before_alloc(req->ctx, out->plan, err);
  double t_planned = sl_now();
  sl_backend *b = NULL;
  if (rc == SL_OK) {
    const int device = req->shard && ops->create_on ? req->shard->device : -1;
    rc = device >= 0 ? ops->create_on(device, req->threads, &b, err) : ops->create(req->threads, &b, err);
  }
  double t_created = sl_now();
  if (rc == SL_OK && b) {
    b->ops = ops; /* the table this run selected (tests wrap the CPU one) */
    /* The plan's device description follows the backend actually created. */
    out->plan->caps.compute_units = b->caps.compute_units;
    memcpy(out->plan->caps.device, b->caps.device, sizeof b->caps.device);
  }
  bool prepared = false;
  if (rc == SL_OK) {
    if (req->outputs) sl_graph_bind_writers(out->graph, req->outputs);
    rc = sl_graph_prepare(out->graph, err);
    prepared = rc == SL_OK;
  }
  double t_prepared = sl_now();
  if (rc == SL_OK && kind != SL_BACKEND_CPU) sl_plan_refresh_warm_up_waits(out->plan, t_prepared - t_created);
  if (rc == SL_OK) {
    sl_exec_opts eo = {.progress = req->progress, .cancel = req->cancel, .shard = req->shard,
                       .shared_progress = req->shared_progress};
    if (req->setup_lock) pthread_mutex_unlock(req->setup_lock);
    /* (a split run's shards meet first in sl_execute, comparing their
     * plans: none writes into the results.h5 shard 0's before_alloc opened
     * before it is open) */
    rc = sl_execute(out->plan, b, &eo, &out->result, err);
    if (req->setup_lock) pthread_mutex_lock(req->setup_lock);
    out->executed = rc == SL_OK;
  }
  double t_executed = sl_now();
  if (prepared) sl_graph_release(out->graph);
  if (b) ops->destroy(b);
  if (out->executed) {
    sl_exec_result *r = &out->result;
    sl_loop_history_put(loop_key, out->graph, r->node_calls);
    r->process_rss_before_load_bytes = rss_before;
    r->began_at = t0;
    r->load_seconds = t_loaded - t0;
    r->plan_seconds = t_planned - t_loaded;
    r->backend_seconds = t_created - t_planned;
    r->prepare_seconds = t_prepared - t_created;
    r->release_seconds = sl_now() - t_executed;
  }
  /* A run that stopped before create: the helper must not outlive it. */
  for (int k = 0; k < SL_BACKEND_COUNT; k++)
    if (warming[k]) warming[k]->warm_up_wait();
  node_warm_ups(out->graph, false);
  if (req->setup_lock) pthread_mutex_unlock(req->setup_lock);
  return rc;
}

void sl_run_free(sl_run *r) {
  if (!r) return;
  if (r->executed) sl_exec_result_free(&r->result);
  sl_plan_free(r->plan);
  sl_graph_free(r->graph);
  sl_spec_free(r->spec);
  memset(r, 0, sizeof *r);
}
