/* The planner (see plan.h). Pure: it reads the graph, the node descriptors'
 * cost functions and what the caller passes (for until-loops, their last
 * run's iteration counts) and allocates only its own tables. */
#include "engine/plan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/shard_range.h"
#include "engine/core/util.h"

int64_t sl_size_class(int64_t bytes) {
  return bytes <= 64 ? 64 : (bytes + 63) & ~(int64_t)63;
}

void sl_plan_free(sl_plan *p) {
  if (!p) return;
  for (int l = 0; l < p->n_levels; l++) free(p->levels[l].nodes);
  free(p->levels);
  free(p->buffers);
  free(p->slots);
  free(p->exec_level);
  if (p->nodes)
    for (int i = 0; i < p->graph->n_nodes; i++) sl_plan_free(p->nodes[i].body);
  free(p->nodes);
  free(p);
}

/* Node n's first streamed port (an output, else a connected input) on
 * stream `want`, or NULL. */
static const sl_tensor_desc *node_stream_on(const sl_node *n, const char *want) {
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k].stream_rank && !strcmp(sl_desc_axis_name(&n->out[k]), want)) return &n->out[k];
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k].stream_rank && n->in_src[k].node != SL_SRC_NONE && !strcmp(sl_desc_axis_name(&n->in[k]), want))
      return &n->in[k];
  return NULL;
}

/* The first streamed port on stream `axis` (NULL: the scan), or NULL. */
static const sl_tensor_desc *stream_desc_on(const sl_graph *g, const char *axis) {
  const char *want = axis ? axis : "scan";
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_tensor_desc *d = node_stream_on(&g->nodes[i], want);
    if (d) return d;
  }
  return NULL;
}

/* The stream the plan's headline chunking describes: the scan, else the
 * stream of the first pass that streams. */
static const char *main_axis(const sl_graph *g) {
  if (stream_desc_on(g, NULL)) return NULL;
  for (int pass = 0; pass < g->n_passes; pass++)
    if (g->pass_axis[pass]) return g->pass_axis[pass];
  return NULL;
}

const sl_plan_pass *sl_plan_node_pass(const sl_plan *p, int node) {
  int pass = p->graph->nodes[node].pass;
  return &p->passes[pass < p->n_passes ? pass : 0];
}

/* Traffic and work of a whole run are totals over chunks, passes and
 * iterations: they saturate at INT64_MAX instead of wrapping (a plan that
 * large is refused by its time estimate, not by undefined arithmetic). */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (a <= 0 || b <= 0) return 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* Bytes a worker partial of output d takes in a worker's block: whole,
 * rounded up to 64. */
static int64_t worker_partial_bytes(const sl_tensor_desc *d) { return sat_add(sl_desc_bytes(d), 63) / 64 * 64; }

int64_t sl_plan_worker_layout(const sl_node *n, int64_t per_worker_bytes, bool partials, unsigned apart,
                              int64_t offset[SL_MAX_PORTS]) {
  int64_t at = sat_add(per_worker_bytes, 63) / 64 * 64;
  for (int k = 0; k < SL_MAX_PORTS; k++) offset[k] = -1;
  for (int k = 0; partials && k < n->n_out; k++)
    if (sl_node_worker_partial(n, k) && !sl_node_out_omitted(n, k) && !(apart >> k & 1u)) {
      offset[k] = at;
      at = sat_add(at, worker_partial_bytes(&n->out[k]));
    }
  return at;
}

static void add_cost(sl_node_cost *a, const sl_node_cost *b, int64_t times) {
  a->bytes_read = sat_add(a->bytes_read, sat_mul(b->bytes_read, times));
  a->bytes_written = sat_add(a->bytes_written, sat_mul(b->bytes_written, times));
  a->ops = sat_add(a->ops, sat_mul(b->ops, times));
  if (b->workspace_bytes > a->workspace_bytes) a->workspace_bytes = b->workspace_bytes;
  if (b->per_worker_bytes > a->per_worker_bytes) a->per_worker_bytes = b->per_worker_bytes;
  if (b->state_bytes > a->state_bytes) a->state_bytes = b->state_bytes;
  if (b->device_state_bytes > a->device_state_bytes) a->device_state_bytes = b->device_state_bytes;
  if (b->host_fallback_bytes > a->host_fallback_bytes) a->host_fallback_bytes = b->host_fallback_bytes;
  if (b->device_host_bytes > a->device_host_bytes) a->device_host_bytes = b->device_host_bytes;
  if (b->library_bytes > a->library_bytes) a->library_bytes = b->library_bytes;
  if (b->device_library_bytes > a->device_library_bytes) a->device_library_bytes = b->device_library_bytes;
  if (b->decided_ops_most > a->decided_ops_most)
    a->decided_ops_most = b->decided_ops_most, a->decided_variant = b->decided_variant;
  if (b->decided_state_bytes > a->decided_state_bytes) a->decided_state_bytes = b->decided_state_bytes;
  if (b->device_decided_state_bytes > a->device_decided_state_bytes)
    a->device_decided_state_bytes = b->device_decided_state_bytes;
}

void sl_plan_loop_carry_cost(const sl_node *n, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t carry = 0;
  for (int q = 0; q < n->n_carry; q++) carry = sat_add(carry, sl_desc_bytes(&n->in[n->carry_in[q]]));
  c->bytes_read = c->bytes_written = sat_mul(carry, n->times);
}

/* Levels: each (pass, phase) block gets consecutive global levels; a stream
 * node appears in the stream block of every pass it runs in. Fills
 * exec_level, passes, levels and the first pass's stream range. */
static sl_code plan_levels(sl_plan *p, const sl_graph *g, sl_error *err) {
  int np = p->n_passes, nn = g->n_nodes;
  p->exec_level = sl_calloc((size_t)(nn ? nn : 1) * (size_t)np, sizeof *p->exec_level);
  int *local = sl_calloc((size_t)(nn ? nn : 1), sizeof *local);
  if (!p->exec_level || !local) {
    free(local);
    return sl_fail_nomem(err, "the levels of the plan");
  }
  int offset = 0;
  for (int pass = 0; pass < np; pass++) {
    for (int ph = 0; ph < 3; ph++) {
      int count = 0;
      for (int i = 0; i < nn; i++) {
        const sl_node *n = &g->nodes[i];
        bool member = ph == SL_PHASE_STREAM ? (n->pass_mask >> pass) & 1u
                                            : ((int)n->phase == ph && n->pass == pass);
        local[i] = -1;
        if (!member) continue;
        int lv = 0;
        for (int k = 0; k < n->n_in; k++) {
          int src = n->in_src[k].node;
          if (src >= 0 && local[src] >= 0 && local[src] + 1 > lv) lv = local[src] + 1;
        }
        local[i] = lv;
        if (lv + 1 > count) count = lv + 1;
        p->exec_level[i * np + pass] = offset + lv;
      }
      int first = offset, last = offset + count - 1;
      sl_plan_pass *pp = &p->passes[pass];
      if (ph == SL_PHASE_PROLOGUE) pp->prologue_first = first, pp->prologue_last = last;
      if (ph == SL_PHASE_STREAM) pp->stream_first = first, pp->stream_last = last;
      if (ph == SL_PHASE_EPILOGUE) pp->epilogue_first = first, pp->epilogue_last = last;
      offset += count;
    }
  }
  free(local);
  /* Nodes that do not run in a pass were never given a level there. */
  for (int i = 0; i < nn; i++)
    for (int pass = 0; pass < np; pass++) {
      const sl_node *n = &g->nodes[i];
      bool runs = n->phase == SL_PHASE_STREAM ? (n->pass_mask >> pass) & 1u : n->pass == pass;
      if (!runs) p->exec_level[i * np + pass] = -1;
    }
  p->levels = sl_calloc((size_t)(offset ? offset : 1), sizeof *p->levels);
  if (!p->levels) return sl_fail_nomem(err, "the levels of the plan");
  p->n_levels = offset;
  for (int pass = 0; pass < np; pass++)
    for (int i = 0; i < nn; i++) {
      int l = p->exec_level[i * np + pass];
      if (l < 0) continue;
      sl_plan_level *lv = &p->levels[l];
      lv->phase = g->nodes[i].phase;
      lv->pass = pass;
      if (!sl_resize(&lv->nodes, (size_t)lv->n_nodes + 1, sizeof *lv->nodes))
        return sl_fail_nomem(err, "the levels of the plan");
      lv->nodes[lv->n_nodes++] = i;
    }
  p->stream_first_level = p->passes[0].stream_first <= p->passes[0].stream_last ? p->passes[0].stream_first : -1;
  p->stream_last_level = p->stream_first_level >= 0 ? p->passes[0].stream_last : -1;
  return SL_OK;
}

static sl_code plan_with_chunk(const sl_graph *g, const sl_plan_opts *opts, int64_t chunk,
                               sl_plan **out, sl_error *err);

/* Whether node i's kernel runs on the host (sl_plan_node.host, set by
 * plan_hosts before anything else asks). */
static bool runs_on_host(const sl_plan *p, int i) { return p->nodes[i].host; }

/* Whether node i, on a device backend, lends every streamed output it makes
 * to host nodes alone: a copy to the device would only come back to the
 * host's staging (repack on CUDA: the stored chunks up and down again, 245
 * MiB of staging for a 512 x 512 scan). Its CPU kernel then runs on the
 * host as on the CPU backend, and its readers read its bytes where it holds
 * them. An output assembled for a caller (no sink writes it) keeps its
 * buffer. */
static bool lends_to_host(const sl_backend_caps *caps, const sl_graph *g, int i) {
  const sl_node *n = &g->nodes[i];
  if (!caps->device_memory || n->body || !n->desc || n->desc->host || !n->desc->lends_output ||
      !n->desc->kernel[SL_BACKEND_CPU])
    return false;
  bool lends = false;
  for (int k = 0; k < n->n_out; k++) {
    if (sl_node_out_omitted(n, k)) continue;
    if (n->out[k].stream_rank <= 0 || ((n->desc->view_outputs >> k) & 1u) || !n->desc->lends_output(n, k))
      return false;
    for (int o = 0; o < g->n_outputs; o++)
      if (g->outputs[o].node == i && g->outputs[o].port == k && !sl_graph_output_written(g, o)) return false;
    for (int j = 0; j < g->n_nodes; j++)
      for (int q = 0; q < g->nodes[j].n_in; q++)
        if (g->nodes[j].in_src[q].node == i && g->nodes[j].in_src[q].port == k &&
            !(g->nodes[j].desc && g->nodes[j].desc->host))
          return false;
    lends = true;
  }
  return lends;
}

static void plan_hosts(sl_plan *p, const sl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    p->nodes[i].host = !p->caps.device_memory || (n->desc && n->desc->host) || lends_to_host(&p->caps, g, i);
  }
}

/* Whether every node that makes or reads a stream on `axis` runs on the
 * host of a device backend (repack on CUDA: the source lends its stored
 * chunks to write_h5). Its automatic chunk is then sized for the host's
 * workers, not the device's multiprocessors: sized for 132 SMs, repack's
 * read windows made the CUDA host plan 4.2x the CPU's. */
static bool axis_streams_on_host(const sl_graph *g, const sl_backend_caps *caps, const char *axis) {
  if (!caps->device_memory) return false;
  bool any = false;
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    if (!node_stream_on(n, axis)) continue;
    if (!((n->desc && n->desc->host) || lends_to_host(caps, g, i))) return false;
    any = true;
  }
  return any;
}

/* A call's cost of node n on the plan's backend: the decided state only
 * its device path makes is decided state where its device kernel runs. */
static void node_cost(const sl_plan *p, int i, int64_t positions, sl_node_cost *c) {
  const sl_node *n = &p->graph->nodes[i];
  n->desc->cost(n, positions, c);
  if (!runs_on_host(p, i)) c->decided_state_bytes += c->device_decided_state_bytes;
}

/* The cost of node i for the whole run: an iterate body planned once and
 * run `times` times, a stream node per chunk (the last one holds last_chunk
 * positions) in every pass it runs in, a whole node once. */
static sl_code plan_node_cost(sl_plan *p, const sl_graph *g, int i, const sl_plan_opts *opts,
                              sl_error *err) {
  const sl_node *n = &g->nodes[i];
  const sl_plan_pass *own = sl_plan_node_pass(p, i);
  int64_t chunk = own->chunk_positions, n_chunks = own->n_chunks;
  int64_t last_chunk = own->positions - (n_chunks - 1) * chunk;
  sl_plan_node *pn = &p->nodes[i];
  sl_node_cost c;
  if (n->body) {
    /* A body that streams chunks its own scan automatically (--chunk is
     * the top-level scan's). */
    sl_plan_opts body_opts = *opts;
    body_opts.chunk_positions = 0;
    body_opts.body = true;
    sl_code rc = sl_plan_build(n->body, &body_opts, &pn->body, err);
    if (rc != SL_OK) return rc;
    /* An until-loop runs at most `times` iterations: estimated by what it
     * ran the last time this pipeline ran, when known, else by its
     * `expect:` (the pipeline's author's), else at the most. */
    int64_t iters = n->times;
    if (n->until_out >= 0 && n->expect > 0) iters = n->expect, pn->calls_expected = true;
    if (n->until_out >= 0 && !opts->body) {
      int64_t last = opts->loop_iterations ? opts->loop_iterations[i] : -1;
      if (last >= 1 && last <= n->times) iters = last, pn->calls_from_history = true, pn->calls_expected = false;
    }
    pn->cost.bytes_read = sat_mul(pn->body->bytes_read, iters);
    pn->cost.bytes_written = sat_mul(pn->body->bytes_written, iters);
    pn->cost.ops = sat_mul(pn->body->ops, iters);
    /* Each iteration runs the body's levels as batches (the body's own
     * run overhead is the loop's per-iteration call). */
    pn->calls = iters;
    sl_node_cost loop;
    sl_plan_loop_carry_cost(n, &loop);
    pn->est_seconds = sl_plan_loop_seconds(pn->body, iters) + sl_cost_estimate(&p->profile, "iterate", &loop, iters, false);
    int64_t carry = 0;
    for (int k = 0; k < n->n_in; k++) carry = sat_add(carry, sl_desc_bytes(&n->in[k]));
    int64_t need = sat_add(sat_add(pn->body->peak_host_bytes_most, pn->body->peak_device_bytes), carry);
    if (need > p->body_bytes) p->body_bytes = need;
    int64_t lib = pn->body->library_bytes > pn->body->body_library_bytes ? pn->body->library_bytes
                                                                          : pn->body->body_library_bytes;
    if (lib > p->body_library_bytes) p->body_library_bytes = lib;
  } else if (n->phase == SL_PHASE_STREAM) {
    int runs = __builtin_popcount(n->pass_mask);
    node_cost(p, i, chunk, &c);
    add_cost(&pn->cost, &c, (n_chunks - 1) * runs);
    node_cost(p, i, last_chunk, &c);
    add_cost(&pn->cost, &c, runs);
    pn->calls = n_chunks * runs;
  } else {
    node_cost(p, i, 1, &c);
    add_cost(&pn->cost, &c, 1);
    pn->calls = 1;
  }
  if (!n->body) {
    char key[96];
    sl_cost_rate_key(n, key, sizeof key);
    pn->rate = sl_cost_rate_for(&p->profile, key);
    pn->est_seconds = sl_cost_estimate(&p->profile, key, &pn->cost, pn->calls, !runs_on_host(p, i));
    pn->est_once_seconds = sl_cost_estimate_once(&p->profile, key, &pn->cost, pn->calls, !runs_on_host(p, i));
    pn->decided_seconds_most =
        sl_cost_decided_seconds(&p->profile, n, pn->cost.decided_variant, pn->cost.decided_ops_most,
                                &pn->cost, true, !runs_on_host(p, i));
  }
  return SL_OK;
}

/* The estimated seconds from the start of execution to the first call of
 * node i at level l (the executor's order: each pass's prologue, its
 * stream levels chunk by chunk, its epilogue; a level's nodes in turn). */
static double plan_started_seconds(const sl_plan *p, int i, int l) {
  double t = 0;
  for (int pass = 0; pass <= p->levels[l].pass; pass++) {
    const sl_plan_pass *pp = &p->passes[pass];
    for (int k = pp->prologue_first; k <= pp->prologue_last && k < l; k++) t += p->levels[k].est_seconds;
    double chunks = pp->n_chunks > 0 ? (double)pp->n_chunks : 1;
    /* a node of a stream level first runs in the first chunk */
    for (int k = pp->stream_first; k <= pp->stream_last && k < l; k++)
      t += p->levels[l].phase == SL_PHASE_STREAM && pass == p->levels[l].pass ? p->levels[k].est_seconds / chunks
                                                                                : p->levels[k].est_seconds;
    for (int k = pp->epilogue_first; k <= pp->epilogue_last && k < l; k++) t += p->levels[k].est_seconds;
  }
  const sl_plan_level *lv = &p->levels[l];
  for (int k = 0; k < lv->n_nodes && lv->nodes[k] != i; k++) {
    const sl_plan_node *pn = &p->nodes[lv->nodes[k]];
    t += pn->calls > 0 && lv->phase == SL_PHASE_STREAM ? pn->est_seconds / (double)pn->calls : pn->est_seconds;
  }
  return t;
}

/* The level of node i's first call (the first pass that runs it), or -1. */
static int first_exec_level(const sl_plan *p, int i) {
  int first = -1;
  for (int pass = 0; pass < p->n_passes && first < 0; pass++) first = p->exec_level[i * p->n_passes + pass];
  return first;
}

/* Seconds of node i spent once, at its first call: added to its estimate,
 * that level's and the run's. */
static void add_once(sl_plan *p, int i, int level, double seconds) {
  p->nodes[i].est_seconds += seconds;
  p->levels[level].est_seconds += seconds;
  p->est_seconds += seconds;
}

/* On a device backend, a node whose first call joins the background load
 * of a device library (sl_node_desc.device_warm_up_wait: cuFFT) waits for
 * what is left of the profile's library_load_seconds when it is reached,
 * and then does its own work (its estimate, whose setup calibrate measured
 * with the library loaded): the wait is added to the node's, its level's
 * and the run's estimates. In execution order, so that a later node sees
 * the load already done. Iterate bodies are not looked into. */
static void plan_warm_up_waits(sl_plan *p, const sl_graph *g, double load_seconds) {
  if (p->caps.kind == SL_BACKEND_CPU || !(load_seconds > 0)) return;
  for (int l = 0; l < p->n_levels; l++)
    for (int k = 0; k < p->levels[l].n_nodes; k++) {
      int i = p->levels[l].nodes[k];
      const sl_node_desc *d = g->nodes[i].desc;
      if (!d || d->host || !d->device_warm_up_wait || p->nodes[i].calls <= 0 || first_exec_level(p, i) != l)
        continue;
      double wait = sl_cost_warm_up_wait(load_seconds, plan_started_seconds(p, i, l));
      p->nodes[i].warm_up_wait_seconds = wait;
      add_once(p, i, l, wait);
    }
}

void sl_plan_refresh_warm_up_waits(sl_plan *p, double since_backend_seconds) {
  const sl_graph *g = p->graph;
  bool done = true; /* every library the waits are for has loaded */
  for (int i = 0; i < g->n_nodes; i++) {
    if (!(p->nodes[i].warm_up_wait_seconds > 0)) continue;
    const sl_node_desc *d = g->nodes[i].desc;
    done = done && d->device_warm_up_done && d->device_warm_up_done();
    add_once(p, i, first_exec_level(p, i), -p->nodes[i].warm_up_wait_seconds);
    p->nodes[i].warm_up_wait_seconds = 0;
  }
  if (!done) plan_warm_up_waits(p, g, p->profile.library_load_seconds - since_backend_seconds);
}

/* The first node of each rate (execution order) pays its type's
 * once-per-process first call (sl_cost_first_call_seconds: a constant and a
 * part that grows with the bytes the node moves in a call; device
 * kernels loaded on their first launch, the HDF5 library's start, code paged
 * in), added like the wait above; later nodes of the same type find those
 * done. A run is one process; iterate bodies are not looked into (their
 * loop's first iteration is the body's first call, inside the loop's own
 * estimate). */
static void plan_first_calls(sl_plan *p, const sl_graph *g) {
  for (int l = 0; l < p->n_levels; l++)
    for (int k = 0; k < p->levels[l].n_nodes; k++) {
      int i = p->levels[l].nodes[k];
      sl_plan_node *pn = &p->nodes[i];
      const sl_cost_rate *r = pn->rate;
      const double extra = r ? sl_cost_first_call_seconds(r, &pn->cost, runs_on_host(p, i)) : 0;
      if (pn->calls <= 0 || g->nodes[i].body || !(extra > 0) || first_exec_level(p, i) != l) continue;
      /* paid already by an earlier node of the rate (the payers so far are
       * the nodes with a first call set), or, where the rate is the bare
       * type's (no rate of the node's dtype: its first call fitted over
       * every dtype's, most of it the type's start in the process), by an
       * earlier node of the type: iterate_until's second writer of
       * results.h5 (u8) was priced at 72 us for the 16 it took, the
       * HDF5 library's start paid by the first (f64) */
      const bool bare = !strchr(r->type, '/');
      bool paid = false;
      for (int q = 0; q < g->n_nodes && !paid; q++) {
        const sl_cost_rate *rq = p->nodes[q].rate;
        paid = p->nodes[q].first_call_seconds > 0 && (rq == r || (bare && sl_cost_key_of_type(rq->type, r->type)));
      }
      if (paid) continue;
      pn->first_call_seconds = extra;
      add_once(p, i, l, pn->first_call_seconds);
    }
}

/* On a device backend the executor takes the host nodes' memory, the
 * workers' scratch (a stride per worker, the largest node's) and the host
 * nodes' workspace, from the host allocator for the run (exec.c's
 * host_acquire): a fresh process faults it in as its host nodes first write
 * it. In execution order each host node pays for the bytes beyond what
 * earlier ones touched: of the scratch one worker's stride, for each
 * worker faults in its own stride side by side with the others (priced as
 * 16 strides one after the other, the H200's 256 x 256 preview was
 * estimated at 4.3-4.9 ms against 2.7-3.2 measured, 3.1 ms of it first
 * touch), and the workspace whole. Calibrate's warm process reuses that memory
 * from run to run, so the rates lack it and a node type's first call held
 * it: 2.5 ms of the H200's preview of 192 x 192 frames, 16 workers' u64
 * sums of a frame, that a preview of 48 x 40 frames does not pay
 * (calibrate now takes this term out of its first-call samples). */
static void plan_host_first_touch(sl_plan *p, const sl_graph *g) {
  const double ft = p->profile.host_first_touch_seconds_per_byte;
  if (!p->caps.device_memory) return;
  int64_t stride_touched = 0, workspace_touched = 0;
  for (int l = 0; l < p->n_levels; l++)
    for (int k = 0; k < p->levels[l].n_nodes; k++) {
      const int i = p->levels[l].nodes[k];
      const sl_node *n = &g->nodes[i];
      sl_plan_node *pn = &p->nodes[i];
      if (pn->calls <= 0 || n->body || first_exec_level(p, i) != l || !runs_on_host(p, i)) continue;
      int64_t offsets[SL_MAX_PORTS];
      const int64_t stride = sl_plan_worker_layout(n, pn->cost.per_worker_bytes, true, pn->pass_partials, offsets);
      int64_t fresh = 0;
      if (stride > stride_touched) fresh += stride - stride_touched, stride_touched = stride;
      const int64_t ws = pn->host ? pn->cost.workspace_bytes : 0;
      if (ws > workspace_touched) fresh += ws - workspace_touched, workspace_touched = ws;
      if (fresh <= 0) continue;
      pn->first_touch_bytes = fresh;
      pn->first_touch_seconds = (double)fresh * ft;
      if (pn->first_touch_seconds > 0) add_once(p, i, l, pn->first_touch_seconds);
    }
}

/* A node that reads a whole buffer larger than a cache (the resident
 * acquisition streamed again: views of it, sl_node_desc.view_outputs)
 * reads it from memory, not from the cache where a chunk just made sits and
 * where its rate was calibrated: its estimate is at least its bytes read at
 * the profile's copy bandwidth (resident_products' virtual_detectors: 13.7
 * ms measured against 2.4 estimated at 64 x 64 on the dev VM; 302 MB at
 * 20 GB/s is 15 ms). Added to the node, its first level and the run. */
#define SL_PLAN_COLD_BYTES ((int64_t)64 << 20)

/* The bytes of the whole buffer behind input edge s (through views), or 0
 * when it is a streamed chunk. */
static int64_t whole_bytes_behind(const sl_plan *p, const sl_graph *g, sl_edge_src s) {
  for (int hops = 0; s.node >= 0 && hops < g->n_nodes; hops++) {
    int b = sl_plan_buffer_index(p, s.node, s.port);
    if (b < 0) return 0;
    const sl_plan_buffer *bf = &p->buffers[b];
    if (!bf->view) return bf->streamed ? 0 : bf->bytes;
    s = g->nodes[s.node].in_src[s.port]; /* a view windows its input of the same index */
  }
  return 0;
}

/* What a node reading a large buffer from memory moves per second: what
 * calibrate measured the workers read side by side (the profile's
 * read_bytes_per_second). A profile without it (built-in, or measured before
 * it was): the copy bandwidth, which on a device is the device's, times the
 * CPU's workers (16 threads read the resident acquisition at 84 GB/s on the
 * H200's host, against 18 GB/s copied by one; but the dev VM's two read
 * 12-15 GB/s, against 19 copied by one). */
static double cold_read_bandwidth(const sl_plan *p) {
  if (p->profile.read_bytes_per_second > 0) return p->profile.read_bytes_per_second;
  double workers = p->caps.device_memory || p->caps.compute_units < 1 ? 1 : (double)p->caps.compute_units;
  return p->profile.bytes_per_second * workers;
}

static void plan_cold_reads(sl_plan *p, const sl_graph *g) {
  if (!(p->profile.bytes_per_second > 0)) return;
  for (int i = 0; i < g->n_nodes; i++) {
    sl_plan_node *pn = &p->nodes[i];
    const sl_node *n = &g->nodes[i];
    if (pn->calls <= 0 || n->body) continue;
    bool cold = false;
    for (int k = 0; k < n->n_in && !cold; k++) cold = whole_bytes_behind(p, g, n->in_src[k]) >= SL_PLAN_COLD_BYTES;
    double floor = (double)pn->cost.bytes_read / cold_read_bandwidth(p);
    int first = first_exec_level(p, i);
    if (cold && floor > pn->est_seconds && first >= 0) add_once(p, i, first, floor - pn->est_seconds);
  }
}

/* The run's pooled buffers taken from the backend and given back (outside
 * any node and level: the executor's start and end), and their first touch,
 * once the slots are sized: on the run, and on the node that first writes
 * each slot's pages (execution order; a later occupant finds the slot's
 * first bytes touched), in its first call's level. A streamed buffer
 * touches its slot in its node's first call: on a small run, whose few
 * chunks are the whole stream, that is most of the node's time (the dev
 * VM's decode of 480 frames of 48 x 40 in two chunks: 0.5-1.4 ms, 0.9 ms
 * of it first touch of its 1.8 MB of slots, against 0.2 ms estimated
 * without). The rest (workspace, partials) is counted on the run only. */
int64_t sl_plan_pooled_bytes(const sl_plan *p) {
  return sat_add(sat_add(p->slot_bytes, p->lent_workspace_bytes), p->partial_bytes);
}

int64_t sl_plan_arena_block(int64_t bytes) {
  return (sl_size_class(bytes) + SL_PLAN_ARENA_ALIGN - 1) / SL_PLAN_ARENA_ALIGN * SL_PLAN_ARENA_ALIGN;
}

/* What the executor acquires for the whole run, in ctx_begin's order: every
 * slot, the lent workspace, each reduction's partial, each device table of a
 * node that runs on the device. */
int64_t sl_plan_arena_bytes(const sl_plan *p) {
  if (!p->caps.device_memory) return 0;
  int64_t a = 0;
  for (int s = 0; s < p->n_slots; s++) a = sat_add(a, sl_plan_arena_block(p->slots[s].bytes));
  if (p->lent_workspace_bytes > 0) a = sat_add(a, sl_plan_arena_block(p->lent_workspace_bytes));
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].partial_bytes > 0) a = sat_add(a, sl_plan_arena_block(p->buffers[b].partial_bytes));
  for (int i = 0; i < p->graph->n_nodes; i++)
    if (!runs_on_host(p, i) && p->nodes[i].cost.device_state_bytes > 0)
      a = sat_add(a, sl_plan_arena_block(p->nodes[i].cost.device_state_bytes));
  return a;
}

static sl_code plan_pool_estimate(sl_plan *p, sl_error *err) {
  const double ft = p->profile.first_touch_seconds_per_byte;
  double pooled = (double)sl_plan_pooled_bytes(p);
  p->est_seconds += pooled * (p->profile.pool_seconds_per_byte + ft);
  if (!(ft > 0) || p->n_slots <= 0) return SL_OK;
  int64_t *touched = sl_calloc((size_t)p->n_slots, sizeof *touched); /* bytes of each slot touched */
  if (!touched) return sl_fail_nomem(err, "the plan's first touch of its slots");
  for (int l = 0; l < p->n_levels; l++)
    for (int k = 0; k < p->levels[l].n_nodes; k++) {
      const int i = p->levels[l].nodes[k];
      if (first_exec_level(p, i) != l) continue;
      for (int b = 0; b < p->n_buffers; b++) {
        const sl_plan_buffer *bf = &p->buffers[b];
        if (bf->node != i || bf->view || bf->lent || bf->slot < 0 || bf->slot >= p->n_slots) continue;
        const int64_t fresh = bf->bytes - touched[bf->slot];
        if (fresh <= 0) continue;
        touched[bf->slot] = bf->bytes;
        p->nodes[i].est_seconds += (double)fresh * ft;
        p->levels[l].est_seconds += (double)fresh * ft;
      }
    }
  free(touched);
  return SL_OK;
}

/* The outputs of node n whose worker partials are kept for the pass: asked
 * for (SL_WORKER_PARTIALS_PASS), in a stream on the CPU backend (a device
 * backend's host node, and a node called once, get them per call). */
static unsigned pass_partials_granted(const sl_plan *p, const sl_node *n) {
  unsigned bits = 0;
  if (p->caps.device_memory || n->phase != SL_PHASE_STREAM || n->body) return 0u;
  for (int k = 0; k < n->n_out; k++)
    if (sl_node_pass_partial(n, k) && !sl_node_out_omitted(n, k)) bits |= 1u << k;
  return bits;
}

/* The pass's partials of every node after the largest per-call block, one
 * after another: every node's lie in each worker's scratch for the whole
 * run (the per-call blocks of the nodes overlap, as only one node's call
 * uses them at a time). */
static void place_pass_partials(sl_plan *p, const sl_graph *g) {
  int64_t at = p->worker_scratch_stride;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (p->nodes[i].pass_partials >> k & 1u) {
        p->nodes[i].worker_partial_offset[k] = at;
        at = sat_add(at, worker_partial_bytes(&g->nodes[i].out[k]));
      }
  p->worker_scratch_stride = at;
}

/* Costs and estimates of every node, added up into the plan's totals and
 * its levels' estimates. */
static sl_code plan_costs(sl_plan *p, const sl_graph *g, const sl_plan_opts *opts, sl_error *err) {
  int np = p->n_passes;
  p->nodes = sl_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *p->nodes);
  if (!p->nodes) return sl_fail_nomem(err, "the nodes of the plan");
  plan_hosts(p, g);
  for (int i = 0; i < g->n_nodes; i++) {
    sl_code rc = plan_node_cost(p, g, i, opts, err);
    if (rc != SL_OK) return rc;
    const sl_plan_node *pn = &p->nodes[i];
    /* A host node's workspace is host memory; on a device backend the pooled
     * workspace is the device's, so host nodes get a host one of their own. */
    bool host_ws = p->caps.device_memory && pn->host;
    int64_t *ws = host_ws ? &p->host_workspace_bytes : &p->lent_workspace_bytes;
    if (pn->cost.workspace_bytes > *ws) *ws = pn->cost.workspace_bytes;
    if (!host_ws && pn->cost.workspace_bytes > p->workspace_bytes) p->workspace_bytes = pn->cost.workspace_bytes;
    bool host_kernel = runs_on_host(p, i);
    p->nodes[i].pass_partials = host_kernel ? pass_partials_granted(p, &g->nodes[i]) : 0u;
    int64_t stride = sl_plan_worker_layout(&g->nodes[i], pn->cost.per_worker_bytes, host_kernel,
                                           p->nodes[i].pass_partials, p->nodes[i].worker_partial_offset);
    if (stride > p->worker_scratch_stride) p->worker_scratch_stride = stride;
    /* a node whose device kernel runs makes no state of its host path,
     * and one whose host kernel runs none of its device path */
    p->state_bytes = sat_add(p->state_bytes, sat_add(pn->cost.state_bytes, host_kernel ? 0
                                                                                       : pn->cost.device_host_bytes -
                                                                                             pn->cost.host_fallback_bytes));
    p->decided_state_bytes = sat_add(p->decided_state_bytes, pn->cost.decided_state_bytes);
    /* a node whose device kernel runs loads its device library instead */
    int64_t lib = p->caps.device_memory && pn->cost.device_library_bytes ? pn->cost.device_library_bytes
                                                                          : pn->cost.library_bytes;
    if (lib > p->library_bytes) p->library_bytes = lib;
    if (p->caps.device_memory) p->device_state_bytes = sat_add(p->device_state_bytes, pn->cost.device_state_bytes);
    p->bytes_read = sat_add(p->bytes_read, pn->cost.bytes_read);
    p->bytes_written = sat_add(p->bytes_written, pn->cost.bytes_written);
    p->ops = sat_add(p->ops, pn->cost.ops);
    p->est_seconds += pn->est_seconds;
    p->est_once_seconds += pn->est_once_seconds;
    int runs = 0;
    for (int pass = 0; pass < np; pass++) runs += p->exec_level[i * np + pass] >= 0;
    for (int pass = 0; pass < np; pass++)
      if (p->exec_level[i * np + pass] >= 0)
        p->levels[p->exec_level[i * np + pass]].est_seconds += pn->est_seconds / runs;
    if (pn->body) p->batches = sat_add(p->batches, sat_mul(pn->body->batches, pn->calls));
  }
  place_pass_partials(p, g);
  int workers = sl_caps_host_workers(&p->caps);
  p->worker_scratch_bytes = sat_mul(p->worker_scratch_stride, workers > 0 ? workers : 1);
  /* Each level is one batch, per chunk in a stream block. */
  for (int l = 0; l < p->n_levels; l++) {
    const sl_plan_pass *pp = &p->passes[p->levels[l].pass];
    int64_t runs = p->levels[l].phase == SL_PHASE_STREAM && pp->n_chunks > 0 ? pp->n_chunks : 1;
    p->batches = sat_add(p->batches, runs);
    p->levels[l].est_seconds += (double)runs * p->profile.batch_seconds;
    p->est_seconds += (double)runs * p->profile.batch_seconds;
  }
  if (!opts->body) {
    plan_warm_up_waits(p, g, p->profile.library_load_seconds);
    plan_first_calls(p, g);
    plan_host_first_touch(p, g);
  }
  p->est_seconds += p->profile.run_seconds;
  return SL_OK;
}

double sl_plan_loop_seconds(const sl_plan *body, int64_t iters) {
  const double each = body->est_seconds - body->profile.run_seconds - body->est_once_seconds;
  return (each > 0 ? each : 0) * (double)iters + (iters > 0 ? body->est_once_seconds : 0);
}

/* The lifetime of output k of node i, in levels: from its producer's first
 * level (a reduction: the start of its home stream block) to its last
 * consumer's, stretched for graph outputs and for whole data a stream block
 * reads. Adds assembled graph outputs to output_bytes. */
static void plan_buffer_lifetime(sl_plan *p, const sl_graph *g, int i, int k, sl_plan_buffer *b) {
  const sl_node *n = &g->nodes[i];
  int np = p->n_passes, nn = g->n_nodes, final_level = p->n_levels - 1;
  int first_exec = -1, last_exec = -1, first_pass = -1;
  for (int pass = 0; pass < np; pass++) {
    int l = p->exec_level[i * np + pass];
    if (l < 0) continue;
    if (first_exec < 0) first_exec = l, first_pass = pass;
    last_exec = l;
  }
  b->first_level = b->reduction ? p->passes[first_pass].stream_first : first_exec;
  b->last_level = last_exec;
  for (int j = 0; j < nn; j++)
    for (int q = 0; q < g->nodes[j].n_in; q++)
      if (g->nodes[j].in_src[q].node == i && g->nodes[j].in_src[q].port == k)
        for (int pass = 0; pass < np; pass++)
          if (p->exec_level[j * np + pass] > b->last_level) b->last_level = p->exec_level[j * np + pass];
  bool written = false;
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].node == i && g->outputs[o].port == k) {
      b->graph_output = true;
      written |= sl_graph_output_written(g, o);
    }
  if (b->graph_output && !written) {
    /* Streamed outputs are assembled on the host at the end of each chunk
     * of their home pass; whole ones are copied there when the run ends.
     * (An output a sink node writes is read by it like by any consumer.) */
    int home_stream_last = p->passes[n->pass].stream_last;
    b->last_level = b->streamed ? (home_stream_last > b->last_level ? home_stream_last : b->last_level)
                                : final_level;
    p->output_bytes = sat_add(p->output_bytes, b->variable ? b->bytes : sl_desc_bytes(&n->out[k]));
  }
  if (b->reduction && p->passes[first_pass].stream_last > b->last_level)
    b->last_level = p->passes[first_pass].stream_last;
  /* Whole data that a stream block touches must outlive every chunk. */
  for (int pass = 0; pass < np && !b->streamed; pass++) {
    const sl_plan_pass *pp = &p->passes[pass];
    if (pp->stream_first > pp->stream_last) continue;
    if (b->first_level <= pp->stream_last && b->last_level >= pp->stream_first &&
        b->last_level < pp->stream_last)
      b->last_level = pp->stream_last;
  }
}

/* A declared reduction's or variable-size port's sizes: a variable-size
 * buffer holds its bound (a concat: every chunk's, added up); a declared
 * reduction (element-wise or the node's merge) gets a partial per chunk
 * (none for a fixed-size concat, whose chunks are written in place at
 * their positions). */
static void plan_declared(sl_plan *p, const sl_node *n, int k, const sl_plan_pass *pp,
                          sl_plan_buffer *b) {
  int64_t chunk = pp->chunk_positions, last_chunk = pp->positions - (pp->n_chunks - 1) * chunk;
  b->combine = sl_node_out_combine(n, k);
  b->variable = sl_node_out_bound(n, k, 1) >= 0;
  if (b->unread || b->lent) return; /* no buffer (a lent one is the node's memory): no bound, no partial */
  int64_t bound = b->variable ? sl_node_out_bound(n, k, chunk) : 0;
  if (b->variable) {
    int64_t last = sl_node_out_bound(n, k, last_chunk);
    b->bytes = b->streamed ? bound
                           : sat_add(sat_mul(bound, pp->n_chunks - 1 > 0 ? pp->n_chunks - 1 : 0), last);
  }
  /* a kernel that folds into the accumulator needs no chunk partial */
  if ((sl_combine_elementwise(b->combine) || b->combine == SL_COMBINE_MERGE) &&
      !((n->desc->fold_outputs >> k) & 1u))
    b->partial_bytes = b->bytes;
  else if (b->combine == SL_COMBINE_CONCAT && b->variable) b->partial_bytes = bound;
  p->partial_bytes = sat_add(p->partial_bytes, b->partial_bytes ? sl_size_class(b->partial_bytes) : 0);
}

/* One buffer per output port, with its size for a chunk and its lifetime. */
static sl_code plan_buffers(sl_plan *p, const sl_graph *g, sl_error *err) {
  int nb = 0;
  for (int i = 0; i < g->n_nodes; i++) nb += g->nodes[i].n_out;
  p->buffers = sl_calloc((size_t)(nb ? nb : 1), sizeof *p->buffers);
  if (!p->buffers) return sl_fail_nomem(err, "the buffers of the plan");
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_out; k++) {
      sl_plan_buffer *b = &p->buffers[p->n_buffers++];
      b->node = i;
      b->port = k;
      b->streamed = n->out[k].stream_rank > 0;
      b->reduction = !b->streamed && n->phase == SL_PHASE_STREAM;
      const sl_plan_pass *pp = sl_plan_node_pass(p, i);
      b->view = b->streamed && n->desc && ((n->desc->view_outputs >> k) & 1u);
      b->unread = !b->view && sl_node_out_omitted(n, k);
      b->lent = b->streamed && !b->view && !b->unread && p->nodes[i].host && n->desc && n->desc->lends_output &&
                n->desc->lends_output(n, k);
      b->bytes = b->view || b->unread || b->lent ? 0 : sl_desc_buffer_bytes(&n->out[k], pp->chunk_positions);
      b->in_place_of = -1;
      plan_declared(p, n, k, pp, b);
      plan_buffer_lifetime(p, g, i, k, b);
    }
  }
  return SL_OK;
}

int sl_plan_buffer_index(const sl_plan *p, int node, int port) {
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].node == node && p->buffers[b].port == port) return b;
  return -1;
}

/* The buffer that in-place output k of node i may share: the streamed
 * buffer feeding input k, of the same size, read by nothing else and not a
 * graph output; else -1. */
static int in_place_source(const sl_plan *p, const sl_graph *g, int i, int k) {
  const sl_node *n = &g->nodes[i];
  if (!n->desc || !((n->desc->in_place_outputs >> k) & 1u) || k >= n->n_in) return -1;
  sl_edge_src src = n->in_src[k];
  if (src.node < 0) return -1;
  int s = sl_plan_buffer_index(p, src.node, src.port), b = sl_plan_buffer_index(p, i, k);
  if (s < 0 || b < 0) return -1;
  const sl_plan_buffer *sb = &p->buffers[s];
  if (!sb->streamed || !p->buffers[b].streamed || sb->graph_output || sb->unread || p->buffers[b].unread ||
      sb->lent || sb->bytes != p->buffers[b].bytes)
    return -1;
  int readers = 0;
  for (int j = 0; j < g->n_nodes; j++)
    for (int q = 0; q < g->nodes[j].n_in; q++)
      readers += g->nodes[j].in_src[q].node == src.node && g->nodes[j].in_src[q].port == src.port;
  return readers == 1 ? s : -1;
}

/* In-place outputs: each granted one points at the first buffer of its
 * chain, whose lifetime then covers the whole chain (one slot holds the
 * data from its first writer to its last reader). */
static void plan_in_place(sl_plan *p, const sl_graph *g) {
  for (int b = 0; b < p->n_buffers; b++)
    p->buffers[b].in_place_of = in_place_source(p, g, p->buffers[b].node, p->buffers[b].port);
  for (int b = 0; b < p->n_buffers; b++) {
    int root = p->buffers[b].in_place_of;
    if (root < 0) continue;
    while (p->buffers[root].in_place_of >= 0) root = p->buffers[root].in_place_of;
    p->buffers[b].in_place_of = root;
  }
  for (int b = 0; b < p->n_buffers; b++) {
    const sl_plan_buffer *bf = &p->buffers[b];
    if (bf->in_place_of < 0) continue;
    sl_plan_buffer *r = &p->buffers[bf->in_place_of];
    if (bf->first_level < r->first_level) r->first_level = bf->first_level;
    if (bf->last_level > r->last_level) r->last_level = bf->last_level;
  }
}

/* Whether buffer b is copied from its node's produce into a ring of two
 * device buffers (engine/exec/prefetch.h): a device backend, a node with
 * produce, its streamed output 0, which no output takes in place (the ring
 * turns under it, the in-place slot would not). */
static bool ring_wanted(const sl_plan *p, const sl_graph *g, int b) {
  const sl_plan_buffer *bf = &p->buffers[b];
  const sl_node *n = &g->nodes[bf->node];
  if (!p->caps.device_memory || !n->desc || !n->desc->produce || p->nodes[bf->node].host || bf->port != 0 ||
      !bf->streamed || bf->view || bf->unread)
    return false;
  for (int o = 0; o < p->n_buffers; o++)
    if (p->buffers[o].in_place_of == b) return false;
  return true;
}

/* A ring's buffers are written by the copies of chunk j + 1 while chunk j's
 * levels run: each lives through every stream level of the passes its node
 * runs in (before slots are assigned). */
static void plan_ring_lifetimes(sl_plan *p, const sl_graph *g) {
  int np = p->n_passes;
  for (int b = 0; b < p->n_buffers; b++) {
    sl_plan_buffer *bf = &p->buffers[b];
    bf->ring_slot = -1;
    if (!ring_wanted(p, g, b)) continue;
    for (int pass = 0; pass < np; pass++) {
      const sl_plan_pass *pp = &p->passes[pass];
      if (p->exec_level[bf->node * np + pass] < 0 || pp->stream_first > pp->stream_last) continue;
      if (pp->stream_first < bf->first_level) bf->first_level = pp->stream_first;
      if (pp->stream_last > bf->last_level) bf->last_level = pp->stream_last;
    }
  }
}

/* The ring's second buffer: a slot of its own, the size of the first
 * (after slots are assigned; counted in slot_bytes like any slot). */
static sl_code plan_ring_slots(sl_plan *p, const sl_graph *g, sl_error *err) {
  for (int b = 0; b < p->n_buffers; b++) {
    if (!ring_wanted(p, g, b)) continue;
    if (!sl_resize(&p->slots, (size_t)p->n_slots + 1, sizeof *p->slots))
      return sl_fail_nomem(err, "the slots of the plan");
    int s = p->n_slots++;
    p->slots[s].bytes = sl_size_class(p->buffers[b].bytes);
    p->buffers[b].ring_slot = s;
    p->slot_bytes = sat_add(p->slot_bytes, p->slots[s].bytes);
  }
  return SL_OK;
}

/* Whether buffer b's lifetime overlaps that of any buffer already in slot s. */
static bool slot_busy(const sl_plan *p, int s, const sl_plan_buffer *b) {
  for (int k = 0; k < p->n_buffers; k++) {
    const sl_plan_buffer *o = &p->buffers[k];
    if (o->slot == s && o != b && o->first_level <= b->last_level && b->first_level <= o->last_level)
      return true;
  }
  return false;
}

/* Slots, best fit by size: buffers from the largest down (ties: earlier
 * first), each into the smallest slot whose occupants' lifetimes it does not
 * overlap, else a new slot of its own size (rounded up to 64 bytes). A slot
 * is as large as its largest occupant, so no bytes are lost to size classes.
 * The executor uses exactly this assignment. Also the peak of live buffer
 * bytes. */
static sl_code plan_slots(sl_plan *p, sl_error *err) {
  int *order = sl_calloc((size_t)(p->n_buffers ? p->n_buffers : 1), sizeof *order);
  p->slots = sl_calloc((size_t)(p->n_buffers ? p->n_buffers : 1), sizeof *p->slots);
  if (!order || !p->slots) {
    free(order);
    return sl_fail_nomem(err, "the slots of the plan");
  }
  int n_own = 0; /* buffers with a slot of their own: in-place outputs come after; views, lent
                    and unread outputs have none */
  for (int b = 0; b < p->n_buffers; b++) {
    p->buffers[b].slot = -1;
    if (p->buffers[b].in_place_of < 0 && !p->buffers[b].view && !p->buffers[b].unread && !p->buffers[b].lent)
      order[n_own++] = b;
  }
  for (int a = 1; a < n_own; a++)
    for (int b = a; b > 0; b--) {
      const sl_plan_buffer *x = &p->buffers[order[b - 1]], *y = &p->buffers[order[b]];
      bool swap = x->bytes < y->bytes || (x->bytes == y->bytes && x->first_level > y->first_level);
      if (!swap) break;
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  for (int oi = 0; oi < n_own; oi++) {
    sl_plan_buffer *b = &p->buffers[order[oi]];
    int s = -1;
    for (int k = 0; k < p->n_slots; k++)
      if (!slot_busy(p, k, b) && (s < 0 || p->slots[k].bytes < p->slots[s].bytes)) s = k;
    if (s < 0) {
      s = p->n_slots++;
      p->slots[s].bytes = sl_size_class(b->bytes);
    }
    b->slot = s;
  }
  free(order);
  for (int b = 0; b < p->n_buffers; b++)
    if (p->buffers[b].in_place_of >= 0) p->buffers[b].slot = p->buffers[p->buffers[b].in_place_of].slot;
  for (int s = 0; s < p->n_slots; s++) p->slot_bytes = sat_add(p->slot_bytes, p->slots[s].bytes);
  for (int l = 0; l < p->n_levels; l++) {
    int64_t live = 0; /* an in-place output's bytes are its chain's first buffer's */
    for (int b = 0; b < p->n_buffers; b++)
      if (p->buffers[b].in_place_of < 0 && p->buffers[b].first_level <= l && l <= p->buffers[b].last_level)
        live = sat_add(live, p->buffers[b].bytes);
    if (live > p->live_peak_bytes) p->live_peak_bytes = live;
  }
  return SL_OK;
}

/* Peak host and device bytes. Host nodes on a device backend stage their
 * inputs and outputs on the host. */
static void plan_peaks(sl_plan *p, const sl_graph *g) {
  if (p->caps.device_memory)
    for (int b = 0; b < p->n_buffers; b++) {
      const sl_plan_buffer *bf = &p->buffers[b];
      bool staged = p->nodes[bf->node].host && !bf->lent, lagged = false;
      for (int j = 0; j < g->n_nodes && !bf->lent; j++)
        for (int q = 0; q < g->nodes[j].n_in; q++)
          if (p->nodes[j].host && g->nodes[j].in_src[q].node == bf->node &&
              g->nodes[j].in_src[q].port == bf->port) {
            staged = true;
            /* a streamed sink runs a chunk behind from two buffers (exec.c's sink_lag) */
            lagged |= g->nodes[j].desc->sink && g->nodes[j].phase == SL_PHASE_STREAM && !g->nodes[j].chunks_idle;
          }
      if (staged) p->staging_bytes = sat_add(p->staging_bytes, bf->bytes);
      if (lagged) p->staging_bytes = sat_add(p->staging_bytes, bf->bytes);
    }
  /* A split run's merge gathers every shard's copy of one reduction at a
   * time, on the host (exec.c's shard_merge), into one buffer grown to the
   * largest; a fixed-size concat sends only its own positions, packed to
   * the most any shard has (a buffer of its own), so it gathers about one
   * accumulator, not one per shard; on a device backend the accumulator's
   * host copy is a third buffer. */
  /* (at least the byte each shard sends where every pass ends: their meeting) */
  int64_t gathered_most = p->shards > 1 ? p->shards : 0, piece_most = 0, staged_most = 0;
  if (p->shards > 1)
    for (int b = 0; b < p->n_buffers; b++)
      if (p->buffers[b].reduction && !p->buffers[b].unread) {
        const sl_plan_pass *pp = sl_plan_node_pass(p, p->buffers[b].node);
        int64_t each = p->buffers[b].bytes; /* a variable size's chunk sizes are gathered too */
        int64_t sizes = p->buffers[b].variable ? sat_mul(pp->n_chunks, 8) : 0;
        if (!p->buffers[b].variable && sl_combine_concat(p->buffers[b].combine) && pp->positions > 0) {
          const int64_t most = sl_shard_most_positions(pp->positions, pp->chunk_positions, pp->n_chunks, p->shards);
          each = sat_mul(most, each / pp->positions);
          if (each > piece_most) piece_most = each;
        }
        int64_t gathered = sat_mul(each > sizes ? each : sizes, p->shards);
        if (gathered > gathered_most) gathered_most = gathered;
        if (p->caps.device_memory && p->buffers[b].bytes > staged_most) staged_most = p->buffers[b].bytes;
      }
  p->shard_exchange_bytes = sat_add(sat_add(gathered_most, piece_most), staged_most);
  /* (sums saturate: a plan of absurd sizes is refused as over budget,
   * never an overflow) */
  int64_t device = sat_add(sat_add(sat_add(p->slot_bytes, p->partial_bytes), p->workspace_bytes), p->body_bytes);
  int64_t engine = sat_add(device, p->state_bytes);
  if (p->caps.device_memory) {
    /* node state lives on the host */
    p->peak_host_bytes = sat_add(sat_add(sat_add(sat_add(p->output_bytes, p->staging_bytes), p->state_bytes),
                                         p->worker_scratch_bytes),
                                 sat_add(p->host_workspace_bytes, p->shard_exchange_bytes));
    p->peak_device_bytes = sat_add(device, p->device_state_bytes);
    /* the arena's padding between its carved blocks (held with it) */
    int64_t counted = sat_add(sat_add(sat_add(p->slot_bytes, p->workspace_bytes), p->partial_bytes),
                              p->device_state_bytes);
    int64_t arena = sl_plan_arena_bytes(p);
    if (arena > counted) p->peak_device_bytes = sat_add(p->peak_device_bytes, arena - counted);
  } else {
    p->peak_host_bytes =
        sat_add(sat_add(sat_add(engine, p->output_bytes), p->worker_scratch_bytes), p->shard_exchange_bytes);
  }
  /* the process's own memory and, once, the largest library start-up (an
   * iterate body's count in its parent: its libraries are the process's) */
  int64_t libs = p->library_bytes > p->body_library_bytes ? p->library_bytes : p->body_library_bytes;
  p->peak_host_bytes = sat_add(p->peak_host_bytes, sat_add(p->process_bytes, p->process_bytes ? libs : 0));
  p->peak_host_bytes_most = sat_add(p->peak_host_bytes, p->decided_state_bytes);
}

int64_t sl_plan_decided_host_bytes(const sl_plan *p) {
  int64_t made = 0;
  for (int i = 0; i < p->graph->n_nodes; i++) {
    const int64_t held = p->graph->nodes[i].decided_state_bytes, most = p->nodes[i].cost.decided_state_bytes;
    made += held < most ? held : most;
  }
  return made;
}

/* Positions of a u64 or f64 per-position output in one 64-byte cache line. */
#define LINE_POSITIONS 8

/* An automatic host chunk rounded to the nearest multiple of LINE_POSITIONS
 * times the workers (when it holds one): the CPU backend's parallel_for
 * gives worker w the w-th equal share of a chunk's positions, so each share
 * then starts on a line of every per-position output (and of a whole
 * output's columns that chunks write at their positions), and no line is
 * written by two workers in the same level. At 2 threads on the dev VM,
 * stem_products' 28-position chunk shared a line of each of virtual_detectors'
 * six outputs and bf_segments' 21 between the two workers: 32 positions
 * (six runs each, alternated) gave 127.8 ms against 129.5, bf_segments 3.6
 * against 3.9 ms; 24 and 40 were slower than 28 (1 thread: 14 and 16 the
 * same, and one worker shares nothing). Stays a multiple of the positions
 * a stored chunk holds, else is left as it was. */
static int64_t line_aligned_chunk(int64_t chunk, int64_t workers, int64_t multiple) {
  const int64_t align = LINE_POSITIONS * workers;
  if (workers < 2 || chunk < align || align % multiple) return chunk;
  return (chunk + align / 2) / align * align;
}

/* The chunk of stream `axis`: `requested` positions (the scan's, from
 * --chunk or the shrinking loop), else as many positions as make the
 * largest streamed buffer on it `target` bytes; encoded streams move whole
 * stored chunks, so the chunk is a multiple of the positions one holds. */
static int64_t axis_chunk(const sl_graph *g, const sl_plan_opts *opts, const char *axis,
                          int64_t requested, int64_t *multiple_out) {
  const sl_tensor_desc *sd = stream_desc_on(g, axis);
  int64_t positions = sd ? sl_desc_positions(sd) : 0, chunk = requested;
  int64_t per_pos = 0, multiple = 1;
  const char *want = axis ? axis : "scan";
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      const sl_tensor_desc *d = &g->nodes[i].out[k];
      if (!d->stream_rank || strcmp(sl_desc_axis_name(d), want)) continue;
      if (sl_desc_item_bytes(d) > per_pos) per_pos = sl_desc_item_bytes(d);
      if (d->positions_per_stored_chunk > multiple) multiple = d->positions_per_stored_chunk;
    }
  if (chunk <= 0) {
    const bool host = axis_streams_on_host(g, &opts->caps, want), cpu_workers = host || !opts->caps.device_memory;
    int64_t workers = host ? sl_caps_host_workers(&opts->caps) : opts->caps.compute_units;
    if (workers < 1) workers = 1;
    /* a device's caps know no host cache: the host's share is the unknown cache's 1 MiB */
    int64_t target = opts->target_chunk_bytes > 0 ? opts->target_chunk_bytes
                     : host ? workers * sl_plan_chunk_bytes_per_worker(&(sl_backend_caps){0})
                            : workers * sl_plan_chunk_bytes_per_worker(&opts->caps);
    chunk = per_pos > 0 ? target / per_pos : positions;
    if (chunk < 1) chunk = 1;
    if (cpu_workers) chunk = line_aligned_chunk(chunk, workers, multiple);
  }
  if (chunk > positions) chunk = positions;
  if (chunk < positions) chunk = chunk < multiple ? multiple : chunk - chunk % multiple;
  if (chunk > positions) chunk = positions;
  if (multiple_out) *multiple_out = multiple;
  return chunk;
}

/* Each pass's stream and chunking: the scan's chunk is `chunk`; another
 * stream's is chosen for it (automatic). The plan's headline chunking is
 * the scan's, else the first stream's. */
static void plan_streams(sl_plan *p, const sl_graph *g, const sl_plan_opts *opts, int64_t chunk) {
  const char *main = main_axis(g);
  const sl_tensor_desc *md = stream_desc_on(g, main);
  for (int pass = 0; pass < p->n_passes; pass++) {
    sl_plan_pass *pp = &p->passes[pass];
    pp->axis = g->pass_axis[pass];
    const sl_tensor_desc *sd = stream_desc_on(g, pp->axis);
    if (!sd || pp->stream_first > pp->stream_last) continue;
    bool is_main = md && !strcmp(sl_desc_axis_name(sd), sl_desc_axis_name(md));
    pp->positions = sl_desc_positions(sd);
    pp->chunk_positions = is_main ? chunk : axis_chunk(g, opts, pp->axis, 0, NULL);
    pp->n_chunks = pp->chunk_positions > 0 ? (pp->positions + pp->chunk_positions - 1) / pp->chunk_positions : 0;
  }
  p->positions = md ? sl_desc_positions(md) : 0;
  p->chunk_positions = md ? chunk : 0;
  p->n_chunks = md && chunk > 0 ? (p->positions + chunk - 1) / chunk : 0;
}

/* Builds the plan for a fixed chunk size of the main stream. */
static sl_code plan_with_chunk(const sl_graph *g, const sl_plan_opts *opts, int64_t chunk,
                               sl_plan **out, sl_error *err) {
  sl_plan *p = sl_calloc(1, sizeof *p);
  if (!p) return sl_fail_nomem(err, "a plan");
  p->graph = g;
  p->caps = opts->caps;
  if (opts->profile) p->profile = *opts->profile;
  else sl_cost_profile_builtin(&opts->caps, &p->profile);
  int workers = sl_caps_host_workers(&opts->caps);
  p->process_bytes = opts->body ? 0
                                : (int64_t)p->profile.process_bytes +
                                      (workers > 1 ? (int64_t)(workers - 1) * SL_WORKER_THREAD_BYTES : 0);
  p->memory_limit = opts->memory_limit ? opts->memory_limit : opts->caps.memory_bytes;
  p->shards = opts->body || opts->shards < 1 ? 1 : opts->shards;
  p->n_passes = g->n_passes > 0 ? g->n_passes : 1;
  sl_code rc = plan_levels(p, g, err);
  if (rc == SL_OK) {
    plan_streams(p, g, opts, chunk);
    rc = plan_costs(p, g, opts, err);
  }
  if (rc == SL_OK) rc = plan_buffers(p, g, err);
  if (rc == SL_OK) {
    plan_in_place(p, g);
    plan_ring_lifetimes(p, g);
    rc = plan_slots(p, err);
    if (rc == SL_OK) rc = plan_ring_slots(p, g, err);
  }
  if (rc == SL_OK && !opts->body) rc = plan_pool_estimate(p, err); /* a body's pool is its parent's */
  if (rc == SL_OK) plan_cold_reads(p, g);
  if (rc != SL_OK) {
    sl_plan_free(p);
    return rc;
  }
  plan_peaks(p, g);
  *out = p;
  return SL_OK;
}

/* The budget applies to the memory the backend computes in (device memory
 * on a device backend); a device backend's host side (staging, assembled
 * outputs) must also fit the host's available memory. */
static bool fits(const sl_plan *p) {
  uint64_t need = (uint64_t)(p->caps.device_memory ? p->peak_device_bytes : p->peak_host_bytes_most);
  if (p->memory_limit != 0 && need > p->memory_limit) return false;
  if (p->caps.device_memory) {
    uint64_t host = sl_available_memory();
    if (host && (uint64_t)p->peak_host_bytes_most > host) return false;
  }
  return true;
}

/* Small chunks keep a chunk's data in cache from one level to the next, but
 * every chunk pays fixed costs (the source's read request, a fork/join per
 * level, the writer nodes): a worker's share of the largest buffer is half
 * its core's private cache (L2), at least 512 KiB and at most 4 MiB; 1 MiB
 * where the cache is unknown (devices: per SM). Half rather than a quarter:
 * on a 1 MiB L2 a quarter made 3-frame chunks of 192 x 192 u16 at 1 thread
 * and 7 at 2 (2,341 fork/joins per level), and the products' levels read
 * the decoded frames in place (mask_correct writes into them), so one
 * buffer's share, not two, is what must stay in the cache. At least 512
 * KiB: on a 512 KiB L2 (Zen 3) half gave the same 7-frame chunks at 2
 * threads, and virtual_image took 0.37-0.44 s against 0.32-0.40 s with 14
 * (the frames come from L3 instead, at a fraction of the fork/joins). */
int64_t sl_plan_chunk_bytes_per_worker(const sl_backend_caps *caps) {
  if (caps->cache_bytes <= 0) return 1 << 20;
  int64_t b = caps->cache_bytes / 2;
  return b < (512 << 10) ? 512 << 10 : b > (4 << 20) ? 4 << 20 : b;
}

sl_code sl_plan_build(const sl_graph *g, const sl_plan_opts *opts, sl_plan **out, sl_error *err) {
  const char *main = main_axis(g);
  const sl_tensor_desc *sd = stream_desc_on(g, main);
  int64_t positions = sd ? sl_desc_positions(sd) : 0;
  bool automatic = opts->chunk_positions <= 0;
  int64_t multiple = 1;
  int64_t chunk = sd ? axis_chunk(g, opts, main, opts->chunk_positions, &multiple) : opts->chunk_positions;
  for (int pass = 0; pass < g->n_passes; pass++) {
    const sl_tensor_desc *pd = stream_desc_on(g, g->pass_axis[pass]);
    if (pd && sl_desc_positions(pd) == 0)
      return sl_fail(err, SL_ERR_PIPELINE, "the %s has no positions",
                     g->pass_axis[pass] ? g->pass_axis[pass] : "scan");
  }
  if (sd && positions == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "the scan has no positions");
  for (;;) {
    sl_plan *p = NULL;
    sl_code rc = plan_with_chunk(g, opts, chunk, &p, err);
    if (rc != SL_OK) return rc;
    /* An automatic chunk size shrinks until the plan fits (or is 1 position);
     * the budget check then reports what still does not fit. */
    if (!automatic || !sd || chunk == 1 || fits(p)) {
      *out = p;
      return SL_OK;
    }
    if (chunk <= multiple) {
      *out = p; /* cannot shrink further; the budget check reports it */
      return SL_OK;
    }
    chunk = chunk / 2 < multiple ? multiple : chunk / 2 - (chunk / 2) % multiple;
    sl_plan_free(p);
    continue;
  }
}

sl_code sl_plan_check_budget(const sl_plan *p, sl_error *err) {
  if (fits(p)) return SL_OK;
  if (p->caps.device_memory && (p->memory_limit == 0 || (uint64_t)p->peak_device_bytes <= p->memory_limit)) {
    char host[32], avail[32];
    sl_format_bytes((uint64_t)p->peak_host_bytes_most, host, sizeof host);
    sl_format_bytes(sl_available_memory(), avail, sizeof avail);
    return sl_fail(err, SL_ERR_BUDGET,
                   "the plan fits device memory but needs %s of host memory (assembled outputs, "
                   "staging, node state, and state the data may decide on) and %s is available; "
                   "nothing was allocated",
                   host, avail);
  }
  char need[32], limit[32], slots[32], ws[32], outs[32], body[32], state[32], proc[32], decided[32];
  bool dev = p->caps.device_memory;
  /* On a device the state that counts is the nodes' device state. */
  sl_format_bytes((uint64_t)(dev ? p->device_state_bytes : p->state_bytes), state, sizeof state);
  char decided_part[64] = "";
  if (!dev && p->decided_state_bytes > 0) {
    sl_format_bytes((uint64_t)p->decided_state_bytes, decided, sizeof decided);
    snprintf(decided_part, sizeof decided_part, " (and %s the data may decide on)", decided);
  }
  sl_format_bytes((uint64_t)(dev ? p->peak_device_bytes : p->peak_host_bytes_most), need, sizeof need);
  sl_format_bytes(p->memory_limit, limit, sizeof limit);
  sl_format_bytes((uint64_t)p->slot_bytes, slots, sizeof slots);
  sl_format_bytes((uint64_t)p->workspace_bytes, ws, sizeof ws);
  sl_format_bytes((uint64_t)p->output_bytes, outs, sizeof outs);
  sl_format_bytes((uint64_t)p->body_bytes, body, sizeof body);
  sl_format_bytes((uint64_t)(dev ? 0 : p->process_bytes), proc, sizeof proc);
  return sl_fail(err, SL_ERR_BUDGET,
                 "the plan needs %s of %s memory but the budget is %s: pooled buffers %s "
                 "(%d slots, chunks of %lld positions), node workspace %s, node %sstate %s%s, "
                 "assembled outputs %s, iterate bodies %s, the process itself %s; nothing was "
                 "allocated (raise --memory-limit or shrink the scan or outputs)",
                 need, dev ? "device" : "host", limit, slots, p->n_slots,
                 (long long)p->chunk_positions, ws, dev ? "device " : "", state, decided_part, outs, body, proc);
}
