/* The executor (see exec.h). */
#include "engine/exec/exec.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/progress.h"
#include "engine/core/settings.h"
#include "engine/core/util.h"
#include "engine/exec/pool.h"
#include "engine/exec/prefetch.h"
#include "engine/exec/shard.h"

/* One node's call in a batch: the kernel args first, so the backend's pointer
 * to the args is also a pointer to the call, which times the kernel. */
typedef struct exec_call {
  sl_kernel_args a;
  sl_kernel_fn fn;
  double *seconds;
  int64_t *calls;
  unsigned pass_partials; /* worker partials kept for the pass: not per call */
} exec_call;

/* A call's partials per worker (sl_kernel_args.worker_partial, host
 * memory): before the kernel each starts from the combine's identity; after
 * it (`merge`) they are merged into out[k], worker 0, 1, ... in order. Done
 * around the kernel itself, in the batch, because they lie in the workers'
 * scratch, which the next call in the batch may use. One pass over the
 * elements per port does every worker (range by range, workers in order,
 * so the bits do not depend on the split): on the CPU backend spread by its
 * parallel_for, for a host node on a device backend on this thread. */
typedef struct partials_job {
  const sl_kernel_args *a;
  int k, workers;
  sl_combine cb;
  sl_dtype t;
  bool merge;
} partials_job;

static void partials_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const partials_job *j = ctx;
  for (int w = 0; w < j->workers; w++) {
    void *part = sl_worker_partial(j->a, j->k, w);
    if (j->merge) sl_combine_merge_host(j->cb, j->t, j->a->out[j->k], part, begin, end);
    else sl_combine_identity_host(j->cb, j->t, part, begin, end);
  }
}

static sl_code worker_partials(const sl_kernel_args *a, bool merge) {
  const sl_node *n = a->node;
  sl_backend *b = a->backend;
  int workers = b->ops->workers(b);
  const unsigned pass = ((const exec_call *)a)->pass_partials;
  for (int k = 0; k < n->n_out; k++) {
    if (!a->worker_partial[k] || (pass >> k & 1u)) continue;
    partials_job j = {a, k, workers > 0 ? workers : 1, sl_node_out_combine(n, k), n->out[k].dtype, merge};
    int64_t elems = sl_desc_elems(&n->out[k]);
    if (b->caps.device_memory) partials_range(&j, 0, elems, 0);
    else b->ops->parallel_for(b, elems, 4096, partials_range, &j);
  }
  return SL_OK;
}

static sl_code timed_kernel(sl_kernel_args *a) {
  exec_call *c = (exec_call *)a;
  double t0 = sl_now();
  sl_code rc = worker_partials(a, false);
  if (rc == SL_OK) rc = c->fn(a);
  if (rc == SL_OK) rc = worker_partials(a, true);
  *c->seconds += sl_now() - t0;
  (*c->calls)++;
  return rc;
}

typedef struct run_ctx {
  const sl_plan *p;
  sl_backend *b;
  sl_pool *pool;
  void **slot_ptr;      /* per plan slot */
  int *buf_of;          /* port_at(node, port) -> plan buffer index */
  const void **inputs;  /* graph inputs (iterate bodies) */
  void *workspace;
  /* The workers' host scratch (sl_plan.worker_scratch_*): from the pool on
   * the CPU backend, from the host heap on a device backend (host nodes'
   * kernels only). */
  void *worker_scratch;
  void *host_workspace; /* device backends: host nodes' workspace */
  void **device_table; /* per node: its lent device table, or NULL */
  /* Per node: its prefetch stage during a pass (a node with produce on a
   * device backend; engine/exec/prefetch.h), else NULL; per plan buffer:
   * the ring buffer that holds the running chunk of such a node's output. */
  sl_prefetch **prefetch;
  void **produced;
  /* Per plan buffer: a declared reduction's partial (or NULL), and the
   * bytes a variable-size buffer holds now (a concat: appended so far). */
  void **partial;
  int64_t *actual;
  /* Per plan buffer of a variable-size concat: each chunk's bytes, in order
   * (n_chunks entries), for the run's output. */
  int64_t **concat_chunks;
  double *node_seconds;
  double *node_device_seconds;
  double *node_copy_wait_seconds;
  int64_t *node_calls;
  double *level_seconds;
  exec_call *calls; /* per node, reused by every batch */
  /* Host staging of host nodes on a device backend: [port_at(node, port)]. */
  void **stage_in, **stage_out;
  size_t *stage_in_bytes, *stage_out_bytes;
  /* Per node: a streamed host sink's call one chunk behind (sink_lag). */
  struct sink_lag **lag;
  sl_error kernel_err;
  sl_error *err;
  int64_t iteration; /* of the innermost loop running this graph; 0 outside */
  int64_t pos_start; /* first position of the chunk running now (views) */
  /* Top level only: where streamed graph outputs go, chunk by chunk (their
   * place in memory, unless a sink node writes them), and the progress bar
   * and cancel flag; NULL in iterate bodies. */
  sl_output_data *outputs;
  sl_progress *progress;
  sl_progress_shared *shared_progress; /* a split run's one bar (instead of progress) */
  int64_t frames_done;
  const volatile sig_atomic_t *cancel;
  /* Top level only: when each pass ended, seconds after t_start (NULL in
   * iterate bodies). */
  double *pass_end;
  double *outside; /* [pass * SL_PASS_OUTSIDE_N + part], or NULL */
  double t_start;
  /* Top level of a run split into shards (shard.h), else NULL: the
   * shard's place, and the host buffer its merges gather into (grown to
   * the largest, at most the plan's shard_exchange_bytes). */
  const sl_exec_shard *shard;
  void *gathered;
  int64_t gathered_bytes;
  /* On a device backend: the host copy of the accumulator being merged. */
  void *staged;
  int64_t staged_bytes;
  /* A concat's own positions, packed for the all-gather. */
  void *piece;
  int64_t piece_bytes;
} run_ctx;

const char *const sl_pass_outside_names[SL_PASS_OUTSIDE_N] = {"stage_start", "stage_wait", "stage_end",
                                                               "sync", "identity", "shard_merge"};

/* Adds the seconds since t0 to part `part` of pass `pass` (top level). */
static void outside_add(run_ctx *c, int pass, int part, double t0) {
  if (c->outside) c->outside[pass * SL_PASS_OUTSIDE_N + part] += sl_now() - t0;
}

/* A port's entry in the per-port tables (buf_of, the staging): node by
 * node, SL_MAX_PORTS entries each. */
static inline int port_at(int node, int port) { return node * SL_MAX_PORTS + port; }
/* The plan buffer of a node's output port. */
static inline int buf_index(const run_ctx *c, int node, int port) { return c->buf_of[port_at(node, port)]; }

static const void *input_ptr(const run_ctx *c, sl_edge_src s);

/* A buffer's data now: its slot, or for a view (the stream node) the
 * running chunk's positions of the whole input it windows; NULL for an
 * unread output (sl_plan_buffer.unread), which has none. */
static void *buffer_ptr(const run_ctx *c, int node, int port) {
  const sl_plan_buffer *bf = &c->p->buffers[buf_index(c, node, port)];
  if (bf->unread) return NULL;
  if (c->produced[buf_index(c, node, port)]) return c->produced[buf_index(c, node, port)];
  if (!bf->view) return c->slot_ptr[bf->slot];
  const sl_node *n = &c->p->graph->nodes[node];
  return (char *)input_ptr(c, n->in_src[port]) + c->pos_start * sl_desc_item_bytes(&n->out[port]);
}

static const void *input_ptr(const run_ctx *c, sl_edge_src s) {
  if (s.node >= 0) return buffer_ptr(c, s.node, s.port);
  if (s.node == SL_SRC_INPUT) return c->inputs[s.port];
  return NULL;
}

/* Whether node i's CPU kernel runs on the host of a device backend (a host
 * node, or one that lends its outputs to host nodes alone: the plan's
 * sl_plan_node.host). */
static bool on_host(const run_ctx *c, int i) { return c->b->caps.device_memory && c->p->nodes[i].host; }

/* Whether node i's input k is a lent buffer: host memory its producer
 * holds (sl_plan_buffer.lent), read where it is. */
static bool input_lent(const run_ctx *c, int i, int k) {
  sl_edge_src s = c->p->graph->nodes[i].in_src[k];
  return s.node >= 0 && c->p->buffers[buf_index(c, s.node, s.port)].lent;
}

/* Bytes of node i's device table: what its cost declared as device state,
 * on a device backend for a node that runs there. */
static int64_t device_table_bytes(const run_ctx *c, int i) {
  const sl_node *n = &c->p->graph->nodes[i];
  if (!c->b->caps.device_memory || !n->desc || on_host(c, i)) return 0;
  return c->p->nodes[i].cost.device_state_bytes;
}

/* Every node's device table, from the pool for the whole run and zeroed,
 * so that the pool's peak (the report's measured device peak) holds them. */
static sl_code lend_device_tables(run_ctx *c, sl_error *err) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    int64_t bytes = device_table_bytes(c, i);
    if (bytes <= 0) continue;
    sl_code rc = sl_pool_acquire(c->pool, bytes, &c->device_table[i], err);
    if (rc == SL_OK) rc = c->b->ops->zero(c->b, c->device_table[i], (size_t)bytes, err);
    if (rc != SL_OK) {
      sl_error_node(err, c->p->graph->nodes[i].id);
      return rc;
    }
  }
  return SL_OK;
}

/* Host memory for the whole run: the pool's when the backend's buffers are
 * host memory (counted with them), else 64-byte aligned from the heap. */
static sl_code host_acquire(run_ctx *c, int64_t bytes, void **ptr, const char *what, sl_error *err) {
  if (!c->b->caps.device_memory) return sl_pool_acquire(c->pool, bytes, ptr, err);
  if (posix_memalign(ptr, 64, (size_t)bytes) != 0) {
    *ptr = NULL;
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld bytes of %s", (long long)bytes, what);
  }
  return SL_OK;
}

static void host_release(run_ctx *c, void *ptr) {
  if (ptr && c->b->caps.device_memory) free(ptr);
  else if (ptr) sl_pool_release(c->pool, ptr);
}

/* One stride of host scratch per worker of parallel_for, for the whole run
 * (the plan counted stride x its host workers; a backend never has more
 * workers than it reported). */
static sl_code worker_scratch_acquire(run_ctx *c, sl_error *err) {
  int workers = c->b->ops->workers(c->b);
  int planned = sl_caps_host_workers(&c->p->caps);
  if (planned > 0 && workers > planned)
    return sl_fail(err, SL_ERR_INTERNAL, "the backend has %d workers but the plan counted %d", workers,
                   planned);
  return host_acquire(c, c->p->worker_scratch_stride * (workers > 0 ? workers : 1), &c->worker_scratch,
                      "the workers' host scratch", err);
}

/* A streamed host sink (a writer node) on a device backend runs one chunk
 * behind the device: at chunk j its input is copied asynchronously, in
 * order with the kernels, into one of two pinned buffers and an event is
 * recorded; then the call for chunk j - 1 waits for its own event and runs.
 * So the host never drains the device to write a chunk's rows: while it
 * waits for chunk j - 1, chunk j is already queued and the source reads
 * ahead (a full sync per chunk serialised reading with decoding). A sink has
 * no outputs, so nothing in the chunk waits for it; the last call of a pass
 * runs when the pass's chunks are done (sink_lags_flush), before anything
 * that follows the scan. */
typedef struct sink_lag {
  void *ring[SL_MAX_PORTS][2];
  size_t ring_bytes[SL_MAX_PORTS][2];
  sl_event *ev[2];
  bool pending;
  int slot; /* the ring slot of the pending call */
  int64_t chunk, pos_start, pos_count, in_bytes[SL_MAX_PORTS];
} sink_lag;

static void sink_lag_free(run_ctx *c, sink_lag *l) {
  if (!l) return;
  sl_error ignored;
  sl_error_clear(&ignored);
  for (int s = 0; s < 2; s++)
    if (l->ev[s]) {
      (void)c->b->ops->event_wait(c->b, l->ev[s], &ignored);
      c->b->ops->event_destroy(c->b, l->ev[s]);
    }
  for (int k = 0; k < SL_MAX_PORTS; k++)
    for (int s = 0; s < 2; s++)
      if (l->ring[k][s]) c->b->ops->host_free(c->b, l->ring[k][s], l->ring_bytes[k][s]);
  free(l);
}

/* Whether ctx_begin made every table of the context (ctx_end frees any that
 * were made). */
static bool ctx_tables_made(const run_ctx *c) {
  return c->slot_ptr && c->buf_of && c->node_seconds && c->node_device_seconds && c->node_copy_wait_seconds &&
         c->node_calls && c->level_seconds && c->calls && c->device_table && c->partial && c->actual &&
         c->concat_chunks && c->stage_in && c->stage_out && c->stage_in_bytes && c->stage_out_bytes &&
         c->prefetch && c->produced && c->lag;
}

static sl_code ctx_begin(run_ctx *c, const sl_plan *p, sl_backend *b, sl_pool *pool,
                         const void **inputs, sl_error *err) {
  memset(c, 0, sizeof *c);
  c->p = p;
  c->b = b;
  c->pool = pool;
  c->inputs = inputs;
  c->err = err;
  int n = p->graph->n_nodes ? p->graph->n_nodes : 1;
  c->slot_ptr = sl_calloc((size_t)(p->n_slots ? p->n_slots : 1), sizeof *c->slot_ptr);
  c->buf_of = sl_calloc((size_t)n * SL_MAX_PORTS, sizeof *c->buf_of);
  c->node_seconds = sl_calloc((size_t)n, sizeof *c->node_seconds);
  c->node_device_seconds = sl_calloc((size_t)n, sizeof *c->node_device_seconds);
  c->node_copy_wait_seconds = sl_calloc((size_t)n, sizeof *c->node_copy_wait_seconds);
  c->node_calls = sl_calloc((size_t)n, sizeof *c->node_calls);
  c->level_seconds = sl_calloc((size_t)(p->n_levels ? p->n_levels : 1), sizeof *c->level_seconds);
  c->calls = sl_calloc((size_t)n, sizeof *c->calls);
  c->device_table = sl_calloc((size_t)n, sizeof *c->device_table);
  int nb = p->n_buffers ? p->n_buffers : 1;
  c->partial = sl_calloc((size_t)nb, sizeof *c->partial);
  c->actual = sl_calloc((size_t)nb, sizeof *c->actual);
  c->concat_chunks = sl_calloc((size_t)nb, sizeof *c->concat_chunks);
  c->prefetch = sl_calloc((size_t)n, sizeof *c->prefetch);
  c->produced = sl_calloc((size_t)nb, sizeof *c->produced);
  c->stage_in = sl_calloc((size_t)n * SL_MAX_PORTS, sizeof *c->stage_in);
  c->stage_out = sl_calloc((size_t)n * SL_MAX_PORTS, sizeof *c->stage_out);
  c->stage_in_bytes = sl_calloc((size_t)n * SL_MAX_PORTS, sizeof *c->stage_in_bytes);
  c->stage_out_bytes = sl_calloc((size_t)n * SL_MAX_PORTS, sizeof *c->stage_out_bytes);
  c->lag = sl_calloc((size_t)n, sizeof *c->lag);
  if (!ctx_tables_made(c)) return sl_fail_nomem(err, "the executor's tables"); /* ctx_end frees */
  for (int i = 0; i < p->n_buffers; i++) c->buf_of[port_at(p->buffers[i].node, p->buffers[i].port)] = i;
  for (int s = 0; s < p->n_slots; s++) {
    sl_code rc = sl_pool_acquire(pool, p->slots[s].bytes, &c->slot_ptr[s], err);
    if (rc != SL_OK) return rc;
  }
  if (p->lent_workspace_bytes > 0) {
    sl_code rc = sl_pool_acquire(pool, p->lent_workspace_bytes, &c->workspace, err);
    if (rc != SL_OK) return rc;
  }
  if (p->worker_scratch_stride > 0) {
    sl_code rc = worker_scratch_acquire(c, err);
    if (rc != SL_OK) return rc;
  }
  if (p->host_workspace_bytes > 0) {
    sl_code rc = host_acquire(c, p->host_workspace_bytes, &c->host_workspace, "host nodes' workspace", err);
    if (rc != SL_OK) return rc;
  }
  for (int i = 0; i < p->n_buffers; i++) {
    const sl_plan_buffer *bf = &p->buffers[i];
    if (bf->variable && bf->combine == SL_COMBINE_CONCAT)
      if (!(c->concat_chunks[i] = sl_calloc((size_t)(sl_plan_node_pass(p, bf->node)->n_chunks + 1),
                                            sizeof **c->concat_chunks))) {
        sl_fail_nomem(err, "the chunk sizes of a variable-size output");
        sl_error_node(err, p->graph->nodes[bf->node].id);
        return SL_ERR_NOMEM;
      }
    if (bf->partial_bytes <= 0) continue;
    sl_code rc = sl_pool_acquire(pool, bf->partial_bytes, &c->partial[i], err);
    if (rc != SL_OK) return rc;
  }
  return lend_device_tables(c, err);
}

static void prefetch_end_all(run_ctx *c);

static void ctx_end(run_ctx *c) {
  /* A prefetch thread stops and its copies finish first (run_passes ended
   * the stages already unless it failed on its way); then kernels still
   * timed into this context's arrays (a run that failed may have left some
   * enqueued); their errors were reported already. */
  if (c->prefetch && c->produced) prefetch_end_all(c);
  sl_error ignored;
  sl_error_clear(&ignored);
  (void)c->b->ops->sync(c->b, &ignored);
  for (int s = 0; c->slot_ptr && s < c->p->n_slots; s++)
    if (c->slot_ptr[s]) sl_pool_release(c->pool, c->slot_ptr[s]);
  if (c->workspace) sl_pool_release(c->pool, c->workspace);
  host_release(c, c->worker_scratch);
  host_release(c, c->host_workspace);
  int n = c->p->graph->n_nodes;
  /* A launcher's device state points into its node's device table: it ends
   * with the table (a later context lends a new table, and the launcher
   * builds its state again on its first call there). */
  for (int i = 0; i < n; i++) {
    sl_node *node = (sl_node *)&c->p->graph->nodes[i]; /* the graph's own node */
    if (node->dev_state && node->dev_state_free) node->dev_state_free(node->dev_state);
    node->dev_state = NULL;
  }
  for (int i = 0; c->device_table && i < n; i++)
    if (c->device_table[i]) sl_pool_release(c->pool, c->device_table[i]);
  free(c->device_table);
  for (int i = 0; c->partial && i < c->p->n_buffers; i++)
    if (c->partial[i]) sl_pool_release(c->pool, c->partial[i]);
  for (int i = 0; c->concat_chunks && i < c->p->n_buffers; i++) free(c->concat_chunks[i]);
  free(c->partial);
  free(c->actual);
  free(c->concat_chunks);
  free(c->prefetch);
  free(c->produced);
  for (int i = 0; c->stage_in && c->stage_in_bytes && i < n * SL_MAX_PORTS; i++)
    if (c->stage_in[i]) c->b->ops->host_free(c->b, c->stage_in[i], c->stage_in_bytes[i]);
  for (int i = 0; c->stage_out && c->stage_out_bytes && i < n * SL_MAX_PORTS; i++)
    if (c->stage_out[i]) c->b->ops->host_free(c->b, c->stage_out[i], c->stage_out_bytes[i]);
  for (int i = 0; c->lag && i < n; i++) sink_lag_free(c, c->lag[i]);
  free(c->lag);
  free(c->stage_in);
  free(c->stage_out);
  free(c->stage_in_bytes);
  free(c->stage_out_bytes);
  free(c->slot_ptr);
  free(c->buf_of);
  free(c->node_seconds);
  free(c->node_device_seconds);
  free(c->node_copy_wait_seconds);
  free(c->node_calls);
  free(c->level_seconds);
  free(c->calls);
}

static const sl_plan_buffer *plan_buffer(const run_ctx *c, int node, int port) {
  return &c->p->buffers[buf_index(c, node, port)];
}

/* Bytes of one scan position's share of a fixed-size concat's whole output. */
static int64_t concat_item_bytes(const run_ctx *c, const sl_node *n, int k) {
  int64_t positions = sl_plan_node_pass(c->p, (int)(n - c->p->graph->nodes))->positions;
  return positions > 0 ? sl_desc_bytes(&n->out[k]) / positions : 0;
}

/* Bytes from a concat_scan_last output's start to a call's first element,
 * (0, .., 0, pos_start). */
static int64_t scan_last_offset(const sl_node *n, int k, int64_t pos_start) {
  return pos_start * (int64_t)sl_dtype_size(n->out[k].dtype);
}

/* Where output k of node i is written in a call: a declared reduction's
 * partial, or for a fixed-size concat the chunk's place in the whole
 * output; its buffer otherwise (and in a finalize call, which reads and
 * completes the accumulated result); nowhere (NULL) for an unread output,
 * and for a lent one, which the kernel points at its own bytes. */
static void *out_ptr(const run_ctx *c, int i, int k, int64_t pos_start, bool finalize) {
  const sl_plan_buffer *bf = plan_buffer(c, i, k);
  if (bf->unread || bf->lent || (!finalize && sl_node_out_finalize_only(&c->p->graph->nodes[i], k))) return NULL;
  void *whole = buffer_ptr(c, i, k);
  if (finalize) return whole;
  if (c->partial[buf_index(c, i, k)]) return c->partial[buf_index(c, i, k)];
  if (bf->combine == SL_COMBINE_CONCAT)
    return (char *)whole + pos_start * concat_item_bytes(c, &c->p->graph->nodes[i], k);
  if (bf->combine == SL_COMBINE_CONCAT_SCAN_LAST)
    return (char *)whole + scan_last_offset(&c->p->graph->nodes[i], k, pos_start);
  return whole;
}

/* Bytes of output k's data in a call over the positions [pos_start,
 * pos_start + pos_count): a variable port's bound, an element-wise partial's
 * whole size, a fixed concat's chunk (scan axes last: from the chunk's
 * first element to the whole's end, the span its rows reach), a streamed
 * chunk or a whole tensor; 0 for an unread output. */
static int64_t out_call_bytes(const run_ctx *c, int i, int k, int64_t pos_start, int64_t pos_count,
                              bool finalize) {
  const sl_node *n = &c->p->graph->nodes[i];
  const sl_plan_buffer *bf = plan_buffer(c, i, k);
  if (bf->unread || (!finalize && sl_node_out_finalize_only(n, k))) return 0;
  if (finalize) return bf->bytes;
  if (bf->variable) return sl_node_out_bound(n, k, pos_count);
  if (bf->combine == SL_COMBINE_CONCAT) return pos_count * concat_item_bytes(c, n, k);
  if (bf->combine == SL_COMBINE_CONCAT_SCAN_LAST) return bf->bytes - scan_last_offset(n, k, pos_start);
  return n->out[k].stream_rank ? sl_desc_buffer_bytes(&n->out[k], pos_count) : sl_desc_bytes(&n->out[k]);
}

/* Bytes of input k's data: what a variable-size producer wrote, else the
 * port's bytes for the call. */
static int64_t in_call_bytes(const run_ctx *c, const sl_node *n, int k, int64_t pos_count) {
  sl_edge_src s = n->in_src[k];
  if (s.node >= 0 && plan_buffer(c, s.node, s.port)->variable) return c->actual[buf_index(c, s.node, s.port)];
  return n->in[k].stream_rank ? sl_desc_buffer_bytes(&n->in[k], pos_count) : sl_desc_bytes(&n->in[k]);
}

static void fill_args(run_ctx *c, int i, int64_t chunk, int64_t pos_start, int64_t pos_count,
                      bool finalize) {
  const sl_node *n = &c->p->graph->nodes[i];
  exec_call *call = &c->calls[i];
  memset(call, 0, sizeof *call);
  sl_kernel_args *a = &call->a;
  a->backend = c->b;
  a->node = n;
  a->node_id = n->id;
  a->state = n->state;
  a->chunk = chunk;
  a->n_chunks = n->phase == SL_PHASE_STREAM ? sl_plan_node_pass(c->p, i)->n_chunks : 1;
  a->pos_start = pos_start;
  a->pos_count = pos_count;
  a->iteration = c->iteration;
  for (int k = 0; k < n->n_in; k++) {
    a->in[k] = input_ptr(c, n->in_src[k]);
    a->in_bytes[k] = a->in[k] ? in_call_bytes(c, n, k, pos_count) : 0;
  }
  for (int k = 0; k < n->n_out; k++) {
    a->out[k] = out_ptr(c, i, k, pos_start, finalize);
    a->out_bytes[k] = out_call_bytes(c, i, k, pos_start, pos_count, finalize);
  }
  a->workspace = c->workspace;
  a->worker_scratch = c->worker_scratch;
  a->worker_scratch_stride = c->p->worker_scratch_stride;
  for (int k = 0; k < n->n_out && !finalize && c->worker_scratch; k++) {
    int64_t at = c->p->nodes[i].worker_partial_offset[k];
    a->worker_partial[k] = at >= 0 ? (char *)c->worker_scratch + at : NULL;
  }
  call->pass_partials = c->p->nodes[i].pass_partials;
  a->device_table = c->device_table[i];
  a->device_table_bytes = c->device_table[i] ? device_table_bytes(c, i) : 0;
  a->err = &c->kernel_err;
  call->seconds = &c->node_seconds[i];
  a->device_seconds = c->b->caps.device_memory ? &c->node_device_seconds[i] : NULL;
  call->calls = &c->node_calls[i];
}

static sl_code run_iterate(run_ctx *c, int i);

/* A staging buffer of at least `bytes`, zeroed when first made. */
static sl_code stage(run_ctx *c, void **slot, size_t *have, size_t bytes, sl_error *err) {
  if (*slot && *have >= bytes) return SL_OK;
  if (*slot) c->b->ops->host_free(c->b, *slot, *have);
  *slot = NULL;
  sl_code rc = c->b->ops->host_alloc(c->b, bytes ? bytes : 1, slot, err);
  if (rc != SL_OK) return rc;
  memset(*slot, 0, bytes);
  *have = bytes;
  return SL_OK;
}


/* Host node i's CPU kernel with the args filled in c->calls[i]; its error
 * named with the node and chunk. */
static sl_code host_kernel(run_ctx *c, int i, int64_t chunk) {
  sl_error_clear(&c->kernel_err);
  sl_code rc = timed_kernel(&c->calls[i].a);
  if (rc != SL_OK) {
    *c->err = c->kernel_err;
    if (c->err->code == SL_OK) sl_fail(c->err, rc, "kernel failed");
    sl_error_node(c->err, c->p->graph->nodes[i].id);
    sl_error_chunk(c->err, chunk);
  }
  return rc;
}

/* A host node on a device backend: its inputs come down to host staging, its
 * CPU kernel runs there, its outputs go up to their device buffers. Staged
 * reduction outputs keep accumulating on the host across chunks. */
static sl_code run_host_node(run_ctx *c, int i, int64_t chunk, int64_t pos_start,
                             int64_t pos_count, bool finalize) {
  const sl_node *n = &c->p->graph->nodes[i];
  sl_backend *b = c->b;
  sl_kernel_fn fn = finalize ? n->desc->finalize[SL_BACKEND_CPU] : n->desc->kernel[SL_BACKEND_CPU];
  if (!fn) return SL_OK;
  fill_args(c, i, chunk, pos_start, pos_count, finalize);
  sl_kernel_args *a = &c->calls[i].a;
  c->calls[i].fn = fn;
  a->workspace = c->host_workspace;
  /* The host is about to rewrite this node's staging: the uploads out of it
   * from the previous call (asynchronous, from pinned memory) must be done. */
  sl_code rc = b->ops->sync(b, c->err);
  for (int k = 0; k < n->n_in && rc == SL_OK; k++) {
    if (!a->in[k] || input_lent(c, i, k)) continue; /* a lent input is host memory already */
    size_t bytes = (size_t)a->in_bytes[k];
    rc = stage(c, &c->stage_in[port_at(i, k)], &c->stage_in_bytes[port_at(i, k)], bytes, c->err);
    if (rc == SL_OK) rc = b->ops->download(b, c->stage_in[port_at(i, k)], a->in[k], bytes, c->err);
    a->in[k] = c->stage_in[port_at(i, k)];
  }
  void *device_out[SL_MAX_PORTS];
  for (int k = 0; k < n->n_out && rc == SL_OK; k++) {
    device_out[k] = a->out[k];
    const sl_plan_buffer *bf = &c->p->buffers[buf_index(c, i, k)];
    /* no buffer on either side, or written at finalize alone: out[k] stays NULL */
    if (bf->unread || bf->lent || !device_out[k]) continue;
    rc = stage(c, &c->stage_out[port_at(i, k)], &c->stage_out_bytes[port_at(i, k)], (size_t)bf->bytes, c->err);
    a->out[k] = c->stage_out[port_at(i, k)];
    const bool partial = c->partial[buf_index(c, i, k)] != NULL;
    const bool elementwise = sl_combine_elementwise(bf->combine);
    /* finalize reads and completes the accumulated result; a kernel that
     * folds into the accumulator (no partial) folds into its copy; a
     * concat with the scan axes last writes rows a scan apart into a span
     * that holds other chunks' columns between them, which go back up with
     * it as they were. */
    size_t down = finalize || (elementwise && !partial) ? (size_t)bf->bytes
                  : bf->combine == SL_COMBINE_CONCAT_SCAN_LAST ? (size_t)a->out_bytes[k]
                                                                : 0;
    if (rc == SL_OK && down) rc = b->ops->download(b, a->out[k], device_out[k], down, c->err);
    /* A declared element-wise reduction's partial starts from its identity. */
    if (rc == SL_OK && !finalize && partial && elementwise)
      sl_combine_identity_host(bf->combine, n->out[k].dtype, a->out[k], 0, sl_desc_elems(&n->out[k]));
  }
  if (rc == SL_OK) rc = host_kernel(c, i, chunk);
  for (int k = 0; k < n->n_out && rc == SL_OK; k++)
    if (device_out[k]) rc = b->ops->upload(b, device_out[k], a->out[k], (size_t)a->out_bytes[k], c->err);
  return rc;
}

/* Whether node i's call runs one chunk behind (sink_lag): a sink whose
 * inputs come from the device. One reading a lent input reads it where its
 * producer holds it until the producer's next call: now. */
static bool lagged(const run_ctx *c, int i, bool finalize) {
  const sl_node *n = &c->p->graph->nodes[i];
  const sl_backend_ops *o = c->b->ops;
  if (finalize || !on_host(c, i) || !n->desc->sink || !n->desc->kernel[SL_BACKEND_CPU] ||
      n->phase != SL_PHASE_STREAM || !o->copy_async || !o->event_create || !o->event_record || !o->event_wait)
    return false;
  for (int k = 0; k < n->n_in; k++)
    if (input_lent(c, i, k)) return false;
  return true;
}

/* The pending call of sink i: waits for its input's copy, then runs it. */
static sl_code sink_lag_run(run_ctx *c, int i) {
  const sl_node *n = &c->p->graph->nodes[i];
  sink_lag *l = c->lag[i];
  l->pending = false;
  sl_code rc = c->b->ops->event_wait(c->b, l->ev[l->slot], c->err);
  if (rc != SL_OK) {
    sl_error_node(c->err, n->id);
    sl_error_chunk(c->err, l->chunk);
    return rc;
  }
  fill_args(c, i, l->chunk, l->pos_start, l->pos_count, false);
  sl_kernel_args *a = &c->calls[i].a;
  c->calls[i].fn = n->desc->kernel[SL_BACKEND_CPU];
  a->workspace = c->host_workspace;
  for (int k = 0; k < n->n_in; k++)
    if (a->in[k]) {
      a->in[k] = l->ring[k][l->slot];
      a->in_bytes[k] = l->in_bytes[k];
    }
  return host_kernel(c, i, l->chunk);
}

/* Sink i's call for this chunk: its input starts down to the host, and
 * the previous chunk's call runs. */
static sl_code run_lagged_sink(run_ctx *c, int i, int64_t chunk, int64_t pos_start, int64_t pos_count) {
  const sl_node *n = &c->p->graph->nodes[i];
  sl_backend *b = c->b;
  sl_code rc = SL_OK;
  if (!c->lag[i]) {
    if (!(c->lag[i] = sl_calloc(1, sizeof *c->lag[i]))) return sl_fail_nomem(c->err, "a writer's staging");
    for (int s = 0; s < 2 && rc == SL_OK; s++) rc = b->ops->event_create(b, &c->lag[i]->ev[s], c->err);
    if (rc != SL_OK) return rc;
  }
  sink_lag *l = c->lag[i];
  int s = l->pending ? 1 - l->slot : 0;
  const void *in[SL_MAX_PORTS] = {0};
  int64_t in_bytes[SL_MAX_PORTS] = {0};
  for (int k = 0; k < n->n_in; k++) { /* what fill_args would pass this chunk's call */
    in[k] = input_ptr(c, n->in_src[k]);
    in_bytes[k] = in[k] ? in_call_bytes(c, n, k, pos_count) : 0;
  }
  for (int k = 0; k < n->n_in && rc == SL_OK; k++) {
    if (!in[k]) continue;
    rc = stage(c, &l->ring[k][s], &l->ring_bytes[k][s], (size_t)in_bytes[k], c->err);
    if (rc == SL_OK)
      rc = b->ops->copy_async(b, SL_QUEUE_COMPUTE, l->ring[k][s], in[k], (size_t)in_bytes[k], c->err);
  }
  if (rc == SL_OK) rc = b->ops->event_record(b, l->ev[s], SL_QUEUE_COMPUTE, c->err);
  if (rc == SL_OK && l->pending) rc = sink_lag_run(c, i);
  if (rc != SL_OK) {
    l->pending = false;
    return rc;
  }
  l->pending = true;
  l->slot = s;
  l->chunk = chunk;
  l->pos_start = pos_start;
  l->pos_count = pos_count;
  memcpy(l->in_bytes, in_bytes, sizeof in_bytes);
  return SL_OK;
}

/* The pass's chunks are done: the sinks' last calls run (after an error
 * they are dropped: the run fails and its outputs are not published). */
static sl_code sink_lags_flush(run_ctx *c, sl_code rc) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    sink_lag *l = c->lag[i];
    if (!l || !l->pending) continue;
    if (rc == SL_OK) rc = sink_lag_run(c, i);
    l->pending = false;
  }
  return rc;
}

/* Before a node's call in a chunk: its declared partials are filled with
 * the combine's identity (in order with the kernels). */
static sl_code start_partials(run_ctx *c, int i) {
  const sl_node *n = &c->p->graph->nodes[i];
  for (int k = 0; k < n->n_out; k++) {
    int bi = buf_index(c, i, k);
    const sl_plan_buffer *bf = &c->p->buffers[bi];
    if (!c->partial[bi]) continue;
    sl_code rc = SL_OK;
    if (sl_combine_elementwise(bf->combine))
      rc = c->b->ops->combine_identity(c->b, bf->combine, n->out[k].dtype, c->partial[bi],
                                       sl_desc_elems(&n->out[k]), c->err);
    else if (bf->combine == SL_COMBINE_MERGE) /* the node's merge: zero bytes are its identity */
      rc = c->b->ops->zero(c->b, c->partial[bi], (size_t)bf->bytes, c->err);
    if (rc != SL_OK) return rc;
  }
  return SL_OK;
}

/* The node's merge kernel (sl_node_desc.merge) for the outputs in `ports`:
 * each gets src[k] (a partial) in in[k] and the run's accumulator in
 * out[k], in a batch of its own, timed as the node's. The args are those
 * of the node's last call (positions, state, table, iteration). */
static sl_code merge_call(run_ctx *c, int i, int64_t chunk, unsigned ports, void *const *src) {
  const sl_node *n = &c->p->graph->nodes[i];
  sl_backend *b = c->b;
  exec_call m = c->calls[i];
  int64_t merges = 0;
  m.fn = n->desc->merge[b->caps.kind];
  m.calls = &merges; /* a merge is not one of the node's calls */
  m.pass_partials = 0;
  memset(m.a.in, 0, sizeof m.a.in);
  memset(m.a.out, 0, sizeof m.a.out);
  memset(m.a.in_bytes, 0, sizeof m.a.in_bytes);
  memset(m.a.out_bytes, 0, sizeof m.a.out_bytes);
  memset(m.a.worker_partial, 0, sizeof m.a.worker_partial);
  for (int k = 0; k < n->n_out; k++) {
    if (!(ports >> k & 1u)) continue;
    m.a.in[k] = src[k];
    m.a.out[k] = buffer_ptr(c, i, k);
    m.a.in_bytes[k] = m.a.out_bytes[k] = plan_buffer(c, i, k)->bytes;
  }
  if (!m.fn) return sl_fail(c->err, SL_ERR_INTERNAL, "node '%s' declares a merge it has no kernel for", n->id);
  sl_error_clear(&c->kernel_err);
  sl_code rc = b->ops->batch_begin(b, c->err);
  if (rc == SL_OK) rc = b->ops->batch_encode(b, timed_kernel, &m.a, c->err);
  if (rc == SL_OK) rc = b->ops->batch_commit(b, c->err);
  sl_code wrc = b->ops->batch_wait(b, c->err);
  if (rc == SL_OK) rc = wrc;
  if (rc != SL_OK) {
    if (c->kernel_err.code != SL_OK && c->err->code == SL_OK) *c->err = c->kernel_err;
    if (c->err->code == SL_OK) sl_fail(c->err, rc, "node '%s': its merge failed", n->id);
    sl_error_node(c->err, n->id);
    sl_error_chunk(c->err, chunk);
  }
  return rc;
}

/* The node's merge after chunk `chunk`'s call: each output combined by
 * MERGE gets its partial merged into the run's accumulator. */
static sl_code node_merge(run_ctx *c, int i, int64_t chunk) {
  const sl_node *n = &c->p->graph->nodes[i];
  unsigned merged = 0; /* the ports to merge: most nodes have none, and return here */
  void *src[SL_MAX_PORTS] = {0};
  for (int k = 0; k < n->n_out; k++) {
    int bi = buf_index(c, i, k);
    if (c->partial[bi] && c->p->buffers[bi].combine == SL_COMBINE_MERGE) {
      merged |= 1u << k;
      src[k] = c->partial[bi];
    }
  }
  return merged ? merge_call(c, i, chunk, merged, src) : SL_OK;
}

/* After a node's call in a chunk: a lent output's pointer goes to its
 * readers; what its variable-size outputs wrote is
 * checked against their bound and recorded; declared partials are merged
 * into the run's result (element-wise, appended for a variable-size
 * concat, or by the node's merge kernel). The executor merges; the kernel
 * only wrote its chunk's share. */
static sl_code finish_partials(run_ctx *c, int i, int64_t chunk) {
  const sl_node *n = &c->p->graph->nodes[i];
  const sl_kernel_args *a = &c->calls[i].a;
  sl_backend *b = c->b;
  for (int k = 0; k < n->n_out; k++) {
    int bi = buf_index(c, i, k);
    const sl_plan_buffer *bf = &c->p->buffers[bi];
    sl_code rc = SL_OK;
    if (bf->lent) {
      if (!a->out[k]) {
        sl_fail(c->err, SL_ERR_INTERNAL, "node '%s' lent no bytes for '%s'", n->id, n->out_names[k]);
        sl_error_node(c->err, n->id);
        sl_error_chunk(c->err, chunk);
        return SL_ERR_INTERNAL;
      }
      c->produced[bi] = a->out[k]; /* until the node's next call */
    }
    if (bf->variable) {
      int64_t bound = sl_node_out_bound(n, k, a->pos_count);
      if (a->out_bytes[k] < 0 || a->out_bytes[k] > bound) {
        sl_fail(c->err, SL_ERR_INTERNAL, "node '%s' says it wrote %lld bytes to '%s', outside its bound %lld",
                n->id, (long long)a->out_bytes[k], n->out_names[k], (long long)bound);
        sl_error_node(c->err, n->id);
        sl_error_chunk(c->err, chunk);
        return SL_ERR_INTERNAL;
      }
      if (bf->streamed) c->actual[bi] = a->out_bytes[k];
    }
    if (!c->partial[bi]) continue;
    if (sl_combine_elementwise(bf->combine)) {
      rc = b->ops->combine_merge(b, bf->combine, n->out[k].dtype, buffer_ptr(c, i, k), c->partial[bi],
                                 sl_desc_elems(&n->out[k]), c->err);
    } else if (bf->combine == SL_COMBINE_CONCAT) {
      rc = b->ops->copy(b, (char *)buffer_ptr(c, i, k) + c->actual[bi], c->partial[bi],
                        (size_t)a->out_bytes[k], c->err);
      c->actual[bi] += a->out_bytes[k];
      if (chunk >= 0 && chunk < sl_plan_node_pass(c->p, i)->n_chunks) c->concat_chunks[bi][chunk] = a->out_bytes[k];
    }
    if (rc != SL_OK) return rc;
  }
  return node_merge(c, i, chunk);
}

/* In a run split into shards, what every shard computes alike (a whole
 * output, a streamed image's PNG drawn by finalize) is written once, by
 * shard 0: the other shards' sink nodes make only their stream calls, each
 * writing its own positions into the shared results.h5. */
static bool left_to_shard_zero(const run_ctx *c, int i, sl_phase phase, bool finalize) {
  const sl_node *n = &c->p->graph->nodes[i];
  return c->shard && c->shard->index > 0 && n->desc && n->desc->sink && (finalize || phase != SL_PHASE_STREAM);
}

/* One level: its kernels as one batch; iterate nodes run their bodies after. */
static sl_code run_level(run_ctx *c, int level, int64_t chunk, int64_t pos_start,
                         int64_t pos_count, bool finalize) {
  const sl_plan_level *lv = &c->p->levels[level];
  const sl_graph *g = c->p->graph;
  sl_backend *b = c->b;
  double t0 = sl_now();
  sl_error_clear(&c->kernel_err);
  sl_code rc = b->ops->batch_begin(b, c->err);
  if (rc != SL_OK) return rc;
  int encoded = 0;
  for (int k = 0; k < lv->n_nodes && rc == SL_OK; k++)
    if (on_host(c, lv->nodes[k]) && !(g->nodes[lv->nodes[k]].chunks_idle && !finalize) &&
        !left_to_shard_zero(c, lv->nodes[k], lv->phase, finalize))
      rc = lagged(c, lv->nodes[k], finalize)
               ? run_lagged_sink(c, lv->nodes[k], chunk, pos_start, pos_count)
               : run_host_node(c, lv->nodes[k], chunk, pos_start, pos_count, finalize);
  for (int k = 0; k < lv->n_nodes && rc == SL_OK; k++) {
    int i = lv->nodes[k];
    const sl_node *n = &g->nodes[i];
    if (n->body || on_host(c, i) || (c->prefetch[i] && !finalize)) continue; /* produce ran */
    if ((n->chunks_idle && !finalize) || left_to_shard_zero(c, i, lv->phase, finalize)) continue;
    sl_kernel_fn fn = finalize ? n->desc->finalize[b->caps.kind] : n->desc->kernel[b->caps.kind];
    if (!fn) continue;
    fill_args(c, i, chunk, pos_start, pos_count, finalize);
    if (!finalize) rc = start_partials(c, i);
    c->calls[i].fn = fn;
    if (rc == SL_OK) rc = b->ops->batch_encode(b, timed_kernel, &c->calls[i].a, c->err);
    encoded++;
  }
  if (rc == SL_OK) rc = b->ops->batch_commit(b, c->err);
  sl_code wrc = b->ops->batch_wait(b, c->err);
  if (rc == SL_OK) rc = wrc;
  if (rc != SL_OK && c->err->code == SL_OK) sl_fail(c->err, rc, "batch failed");
  for (int k = 0; k < lv->n_nodes && rc == SL_OK && !finalize && lv->phase == SL_PHASE_STREAM; k++) {
    const sl_node *n = &g->nodes[lv->nodes[k]];
    if (!n->body && !c->prefetch[lv->nodes[k]] && !n->chunks_idle &&
        (on_host(c, lv->nodes[k]) ? n->desc->kernel[SL_BACKEND_CPU] : n->desc->kernel[b->caps.kind]))
      rc = finish_partials(c, lv->nodes[k], chunk);
  }
  for (int k = 0; k < lv->n_nodes && rc == SL_OK && !finalize; k++)
    if (g->nodes[lv->nodes[k]].body) rc = run_iterate(c, lv->nodes[k]);
  c->level_seconds[level] += sl_now() - t0;
  (void)encoded;
  return rc;
}

static sl_code run_levels(run_ctx *c, int from, int to, int64_t chunk, int64_t pos_start,
                          int64_t pos_count) {
  for (int l = from; l <= to; l++) {
    sl_code rc = run_level(c, l, chunk, pos_start, pos_count, false);
    if (rc != SL_OK) return rc;
  }
  return SL_OK;
}

/* Pointer to a body graph output after a run of the body. */
static const void *body_output(const run_ctx *bc, int k) {
  const sl_graph_output *o = &bc->p->graph->outputs[k];
  return o->node == SL_SRC_INPUT ? bc->inputs[o->port] : buffer_ptr(bc, o->node, o->port);
}

static sl_code run_passes(run_ctx *c);

/* The loop's stop flag (a one-element u8 body output): a byte read back. */
static sl_code until_holds(run_ctx *bc, const sl_node *n, bool *stop) {
  uint8_t flag = 0;
  sl_code rc = bc->b->ops->download(bc->b, &flag, body_output(bc, n->until_out), 1, bc->err);
  *stop = rc == SL_OK && flag != 0;
  return rc;
}

/* Records how many iterations ran, and warns when `until` never held. */
static void note_iterations(const sl_node *n, int64_t ran, bool stopped) {
  sl_node *w = (sl_node *)n; /* the executor's node is the graph's own */
  if (n->until_out < 0) {
    sl_node_note(w, "iterations", "%lld", (long long)ran);
    return;
  }
  const char *flag = n->out_names[n->until_out];
  if (stopped) {
    sl_node_note(w, "iterations", "%lld of at most %lld: '%s' held after iteration %lld",
                 (long long)ran, (long long)n->times, flag, (long long)ran);
  } else {
    sl_node_note(w, "iterations", "%lld: the most allowed (times), '%s' never held", (long long)ran,
                 flag);
    sl_node_note(w, "warning", "loop '%s' stopped after times: %lld iterations without '%s' holding",
                 n->id, (long long)n->times, flag);
  }
}

/* An iterate node: the body's plan was made once; its slots are taken once
 * and every iteration runs the body's passes (its levels as batches, and
 * its chunks when the body streams), with the iteration index in the
 * kernels' args. Carried values go back into the body's inputs between
 * iterations; with until, the loop stops after the iteration whose flag is
 * nonzero (one byte read back per iteration). */
static sl_code run_iterate(run_ctx *c, int i) {
  const sl_node *n = &c->p->graph->nodes[i];
  const sl_plan *bp = c->p->nodes[i].body;
  sl_backend *b = c->b;
  double t0 = sl_now();
  void *carried[SL_MAX_PORTS] = {0};
  const void *inputs[SL_MAX_PORTS] = {0};
  sl_code rc = SL_OK;
  for (int k = 0; k < n->n_in && rc == SL_OK; k++) {
    int64_t bytes = sl_desc_bytes(&n->in[k]);
    rc = sl_pool_acquire(c->pool, bytes, &carried[k], c->err);
    if (rc == SL_OK) rc = b->ops->copy(b, carried[k], input_ptr(c, n->in_src[k]), (size_t)bytes, c->err);
    inputs[k] = carried[k];
  }
  run_ctx bc;
  bool began = false;
  if (rc == SL_OK) {
    rc = ctx_begin(&bc, bp, b, c->pool, inputs, c->err);
    began = true; /* ctx_end frees what ctx_begin made, whatever failed */
    bc.cancel = c->cancel;
  }
  int64_t ran = 0;
  bool stopped = false;
  for (int64_t it = 0; it < n->times && rc == SL_OK && !stopped; it++) {
    bc.iteration = it;
    rc = run_passes(&bc);
    for (int q = 0; q < n->n_carry && rc == SL_OK; q++) {
      int ci = n->carry_in[q], co = n->carry_out[q];
      rc = b->ops->copy(b, carried[ci], body_output(&bc, co), (size_t)sl_desc_bytes(&n->in[ci]), c->err);
    }
    if (rc == SL_OK) ran++;
    if (rc == SL_OK && n->until_out >= 0) rc = until_holds(&bc, n, &stopped);
  }
  for (int k = 0; k < n->n_out && rc == SL_OK; k++) {
    size_t bytes = (size_t)sl_desc_bytes(&n->out[k]);
    const void *src = NULL;
    if (ran > 0) {
      src = body_output(&bc, k);
    } else {
      for (int q = 0; q < n->n_carry; q++)
        if (n->carry_out[q] == k) src = carried[n->carry_in[q]];
    }
    rc = src ? b->ops->copy(b, buffer_ptr(c, i, k), src, bytes, c->err)
             : b->ops->zero(b, buffer_ptr(c, i, k), bytes, c->err);
  }
  if (began) ctx_end(&bc);
  for (int k = 0; k < n->n_in; k++)
    if (carried[k]) sl_pool_release(c->pool, carried[k]);
  if (rc != SL_OK) sl_error_node(c->err, n->id);
  else note_iterations(n, ran, stopped);
  c->node_seconds[i] += sl_now() - t0;
  c->node_calls[i] += ran;
  return rc;
}

/* The buffer of node i's output that its produce fills through a ring (the
 * plan gave it one: a device backend), or -1. */
static int ring_buffer(const run_ctx *c, int i) {
  const sl_node *n = &c->p->graph->nodes[i];
  if (!n->desc || !n->desc->produce || n->n_out < 1) return -1;
  int bi = buf_index(c, i, 0);
  return c->p->buffers[bi].ring_slot >= 0 ? bi : -1;
}

/* Whether node i reads no other node's output (a source). */
static bool reads_nothing(const sl_node *n) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in_src[k].node != SL_SRC_NONE) return false;
  return true;
}

/* Whether the pass's stages may start before its prologue (gated): copies
 * overlap kernels, and every node with a ring the pass streams reads nothing
 * (so none waits for a prologue result). */
static bool prefetch_early(const run_ctx *c, int pass) {
  const sl_plan *p = c->p;
  const sl_plan_pass *pp = &p->passes[pass];
  if (pp->stream_first > pp->stream_last || pp->prologue_first > pp->prologue_last ||
      !sl_setting_bool(SL_SET_SOURCE_OVERLAP))
    return false;
  bool any = false;
  for (int i = 0; i < p->graph->n_nodes; i++) {
    int bi = ring_buffer(c, i), l = p->exec_level[i * p->n_passes + pass];
    if (bi < 0 || l < pp->stream_first || l > pp->stream_last) continue;
    if (!reads_nothing(&p->graph->nodes[i])) return false;
    any = true;
  }
  return any;
}

/* A prefetch stage for each node with a ring that pass streams; gated: they
 * start before the prologue (prefetch_early). */
static sl_code prefetch_begin(run_ctx *c, int pass, bool gated) {
  const sl_plan *p = c->p;
  const sl_plan_pass *pp = &p->passes[pass];
  for (int i = 0; i < p->graph->n_nodes; i++) {
    int bi = ring_buffer(c, i), l = p->exec_level[i * p->n_passes + pass];
    if (bi < 0 || l < pp->stream_first || l > pp->stream_last || c->prefetch[i]) continue;
    const sl_plan_buffer *bf = &p->buffers[bi];
    sl_prefetch_setup s = {.backend = c->b, .node = &p->graph->nodes[i],
                           .ring = {c->slot_ptr[bf->slot], c->slot_ptr[bf->ring_slot]}, .ring_bytes = bf->bytes,
                           .positions = pp->positions, .chunk_positions = pp->chunk_positions,
                           .n_chunks = pp->n_chunks, .first_chunk = 0, .end_chunk = pp->n_chunks,
                           .overlap = sl_setting_bool(SL_SET_SOURCE_OVERLAP), .gated = gated};
    if (c->shard) sl_shard_chunks(pp->n_chunks, c->shard->index, c->shard->count, &s.first_chunk, &s.end_chunk);
    sl_code rc = sl_prefetch_begin(&s, &c->prefetch[i], c->err);
    if (rc != SL_OK) {
      sl_error_node(c->err, p->graph->nodes[i].id);
      return rc;
    }
  }
  return SL_OK;
}

/* The prologue is enqueued: the gated stages' copies may follow it. */
static sl_code prefetch_open_gates(run_ctx *c) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    sl_code rc = sl_prefetch_open_gate(c->prefetch[i], c->err);
    if (rc != SL_OK) {
      sl_error_node(c->err, c->p->graph->nodes[i].id);
      return rc;
    }
  }
  return SL_OK;
}

/* Chunk ch of each stage: its ring buffer becomes the output's buffer (a
 * produce error at ch comes back here, with its node). */
static sl_code prefetch_take(run_ctx *c, int64_t ch) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    if (!c->prefetch[i]) continue;
    int bi = ring_buffer(c, i);
    int64_t bytes = 0;
    sl_code rc = sl_prefetch_take(c->prefetch[i], ch, &c->produced[bi], &bytes, c->err);
    if (rc != SL_OK) {
      sl_error_node(c->err, c->p->graph->nodes[i].id);
      return rc;
    }
    if (c->p->buffers[bi].variable) c->actual[bi] = bytes;
  }
  return SL_OK;
}

/* Chunk ch's levels are enqueued: its ring buffers may be refilled after them. */
static sl_code prefetch_give_back(run_ctx *c, int64_t ch) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    if (!c->prefetch[i]) continue;
    sl_code rc = sl_prefetch_give_back(c->prefetch[i], ch, c->err);
    if (rc != SL_OK) {
      sl_error_node(c->err, c->p->graph->nodes[i].id);
      return rc;
    }
  }
  return SL_OK;
}

/* Stops every stage (its copies done); the node's time is produce's. */
static void prefetch_end_all(run_ctx *c) {
  for (int i = 0; i < c->p->graph->n_nodes; i++) {
    if (!c->prefetch[i]) continue;
    sl_prefetch_end(c->prefetch[i], &c->node_seconds[i], &c->node_calls[i], &c->node_copy_wait_seconds[i]);
    c->prefetch[i] = NULL;
    c->produced[ring_buffer(c, i)] = NULL;
  }
}

/* The worker partials kept for the pass (sl_plan_node.pass_partials) of
 * the nodes that stream in `pass`: at its start (!merge) each worker's is
 * set to the combine's identity; after its last chunk they are merged into
 * the run's result, worker 0, 1, ... in order. Host memory on the CPU
 * backend, the only one that grants them. */
static void pass_partials(run_ctx *c, int pass, bool merge) {
  const sl_plan *p = c->p;
  const int workers = c->b->ops->workers(c->b) > 0 ? c->b->ops->workers(c->b) : 1;
  for (int i = 0; i < p->graph->n_nodes; i++) {
    const sl_node *n = &p->graph->nodes[i];
    if (!p->nodes[i].pass_partials || p->exec_level[i * p->n_passes + pass] < 0) continue;
    for (int k = 0; k < n->n_out; k++) {
      if (!(p->nodes[i].pass_partials >> k & 1u)) continue;
      const sl_combine cb = sl_node_out_combine(n, k);
      const int64_t elems = sl_desc_elems(&n->out[k]);
      for (int w = 0; w < workers; w++) {
        void *part = (char *)c->worker_scratch + p->nodes[i].worker_partial_offset[k] +
                     (int64_t)w * p->worker_scratch_stride;
        if (merge) sl_combine_merge_host(cb, n->out[k].dtype, buffer_ptr(c, i, k), part, 0, elems);
        else sl_combine_identity_host(cb, n->out[k].dtype, part, 0, elems);
      }
    }
  }
}

/* ---- A run split into shards (shard.h): the merge after each pass ---- */

/* The positions [*p0, *p1) of pass pp that shard `s` streams. */
static void shard_positions(const run_ctx *c, const sl_plan_pass *pp, int s, int64_t *p0, int64_t *p1) {
  sl_shard_positions(pp->positions, pp->chunk_positions, pp->n_chunks, s, c->shard->count, p0, p1);
}

/* A merge's host buffer *buf (of *have bytes) grown to `need`, every page
 * written once now: its first touches would otherwise fall in the merge's
 * copies, each a fault that, in a process of many threads, also flushes
 * the other CPUs' TLBs. */
static sl_code shard_grow(run_ctx *c, void **buf, int64_t *have, int64_t need) {
  if (need <= *have) return SL_OK;
  void *g = realloc(*buf, (size_t)need);
  if (!g) return sl_fail_nomem(c->err, "the shards' merge");
  memset(g, 0, (size_t)need);
  *buf = g;
  *have = need;
  return SL_OK;
}

/* Every shard's `bytes` from `mine`, in shard order, into c->gathered. */
static sl_code shard_gather(run_ctx *c, const void *mine, int64_t bytes, char **all) {
  sl_code rc = shard_grow(c, &c->gathered, &c->gathered_bytes, bytes * c->shard->count);
  if (rc != SL_OK) return rc;
  *all = c->gathered;
  return c->shard->allgather(c->shard->ctx, mine, c->gathered, bytes, c->err);
}

/* The host memory a merge works in: the accumulator itself on a host-memory
 * backend; on a device backend c->staged (grown to `bytes`), holding the
 * accumulator's first `down` bytes. */
static sl_code shard_host_acc(run_ctx *c, int bi, int64_t bytes, int64_t down, char **acc) {
  char *whole = buffer_ptr(c, c->p->buffers[bi].node, c->p->buffers[bi].port);
  if (!c->b->caps.device_memory) {
    *acc = whole;
    return SL_OK;
  }
  sl_code rc = shard_grow(c, &c->staged, &c->staged_bytes, bytes);
  if (rc != SL_OK) return rc;
  *acc = c->staged;
  return down > 0 ? c->b->ops->download(c->b, *acc, whole, (size_t)down, c->err) : SL_OK;
}

/* The merged accumulator back where it lives (a device backend's memory). */
static sl_code shard_put_acc(run_ctx *c, int bi, const char *acc, int64_t bytes) {
  char *whole = buffer_ptr(c, c->p->buffers[bi].node, c->p->buffers[bi].port);
  if (!c->b->caps.device_memory || bytes <= 0) return SL_OK;
  return c->b->ops->upload(c->b, whole, acc, (size_t)bytes, c->err);
}

/* A variable-size concat: each shard's bytes one after another, in shard
 * order, and each shard's chunks' sizes. */
static sl_code shard_merge_appended(run_ctx *c, const sl_plan_pass *pp, int bi) {
  const int count = c->shard->count;
  int64_t *sizes = sl_calloc((size_t)count, sizeof *sizes);
  if (!sizes) return sl_fail_nomem(c->err, "the shards' merge");
  char *all = NULL, *acc = NULL;
  sl_code rc = shard_gather(c, &c->actual[bi], sizeof(int64_t), &all);
  int64_t most = 0, total = 0;
  if (rc == SL_OK) memcpy(sizes, all, (size_t)count * sizeof *sizes);
  for (int s = 0; s < count; s++) {
    most = sizes[s] > most ? sizes[s] : most;
    total += sizes[s];
  }
  if (rc == SL_OK && total > c->p->buffers[bi].bytes)
    rc = sl_fail(c->err, SL_ERR_INTERNAL, "the shards wrote %lld bytes, over the bound %lld", (long long)total,
                 (long long)c->p->buffers[bi].bytes);
  /* (a shard gathers `most` bytes from its own, which it may not fill) */
  if (rc == SL_OK) rc = shard_host_acc(c, bi, total, c->actual[bi], &acc);
  if (rc == SL_OK) rc = shard_gather(c, acc, most, &all);
  int64_t at = 0;
  for (int s = 0; s < count && rc == SL_OK; at += sizes[s], s++)
    memcpy(acc + at, all + (int64_t)s * most, (size_t)sizes[s]);
  if (rc == SL_OK) rc = shard_put_acc(c, bi, acc, total);
  c->actual[bi] = total;
  int64_t *chunk_bytes = c->concat_chunks[bi];
  if (rc == SL_OK) rc = shard_gather(c, chunk_bytes, pp->n_chunks * (int64_t)sizeof(int64_t), &all);
  for (int s = 0; s < count && rc == SL_OK; s++) {
    int64_t first, end;
    sl_shard_chunks(pp->n_chunks, s, count, &first, &end);
    const int64_t *theirs = (const int64_t *)(all + (int64_t)s * pp->n_chunks * (int64_t)sizeof(int64_t));
    for (int64_t ch = first; ch < end; ch++) chunk_bytes[ch] = theirs[ch];
  }
  free(sizes);
  return rc;
}

/* A node's merge (SL_COMBINE_MERGE): from zero bytes, each shard's
 * accumulator merged in shard order by the node's merge kernel, over that
 * shard's positions. On a device backend each copy goes up into the port's
 * per-chunk partial first, where the kernel reads partials. */
static sl_code shard_merge_node(run_ctx *c, const sl_plan_pass *pp, int bi, const char *all) {
  const sl_plan_buffer *bf = &c->p->buffers[bi];
  const int i = bf->node, k = bf->port;
  const bool device = c->b->caps.device_memory;
  if (device && !c->partial[bi])
    return sl_fail(c->err, SL_ERR_INTERNAL, "output '%s' merges without a partial", c->p->graph->nodes[i].out_names[k]);
  sl_code rc = c->b->ops->zero(c->b, buffer_ptr(c, i, k), (size_t)bf->bytes, c->err); /* the merge's identity */
  void *src[SL_MAX_PORTS] = {0};
  for (int s = 0; s < c->shard->count && rc == SL_OK; s++) {
    int64_t p0, p1; /* the merge's positions: those of shard s's partial */
    shard_positions(c, pp, s, &p0, &p1);
    if (p1 == p0) continue; /* no chunk: nothing to merge (a chunk is never empty either) */
    src[k] = (char *)all + s * bf->bytes;
    if (device) {
      rc = c->b->ops->upload(c->b, c->partial[bi], src[k], (size_t)bf->bytes, c->err);
      src[k] = c->partial[bi];
    }
    fill_args(c, i, pp->n_chunks - 1, p0, p1 - p0, false);
    if (rc == SL_OK) rc = merge_call(c, i, pp->n_chunks - 1, 1u << k, src);
  }
  return rc;
}

/* A concat (one row of [positions, item]) or a scan-last concat (rows of
 * [positions] elements, a column block per shard): each shard sends only
 * its own positions, packed (the most any shard has), and takes every
 * other shard's from what it gathers. Gathering whole accumulators moved
 * count times the bytes, most of them positions the receiver had or that
 * nobody had written (whose reading, then writing, cost a page fault each). */
static sl_code shard_merge_concat(run_ctx *c, const sl_plan_pass *pp, int bi, char *acc) {
  const sl_plan_buffer *bf = &c->p->buffers[bi];
  const sl_node *n = &c->p->graph->nodes[bf->node];
  const int count = c->shard->count, me = c->shard->index;
  const bool scan_last = bf->combine == SL_COMBINE_CONCAT_SCAN_LAST;
  const int64_t item = scan_last ? (int64_t)sl_dtype_size(n->out[bf->port].dtype) : concat_item_bytes(c, n, bf->port);
  const int64_t row = scan_last ? pp->positions * item : bf->bytes, rows = bf->bytes / row;
  const int64_t most = sl_shard_most_positions(pp->positions, pp->chunk_positions, pp->n_chunks, count) * item * rows;
  int64_t p0, p1;
  shard_positions(c, pp, me, &p0, &p1);
  sl_code rc = shard_grow(c, &c->piece, &c->piece_bytes, most > 0 ? most : 1);
  char *piece = c->piece, *all = NULL;
  for (int64_t r = 0; r < rows && rc == SL_OK; r++)
    memcpy(piece + r * (p1 - p0) * item, acc + r * row + p0 * item, (size_t)((p1 - p0) * item));
  if (rc == SL_OK) rc = shard_gather(c, piece, most, &all);
  for (int s = 0; s < count && rc == SL_OK; s++) {
    shard_positions(c, pp, s, &p0, &p1);
    if (s == me || p1 == p0) continue;
    const char *theirs = all + s * most;
    for (int64_t r = 0; r < rows; r++)
      memcpy(acc + r * row + p0 * item, theirs + r * (p1 - p0) * item, (size_t)((p1 - p0) * item));
  }
  return rc;
}

/* One reduction of pass pp merged across the shards by its combine. */
static sl_code shard_merge_buffer(run_ctx *c, const sl_plan_pass *pp, int bi) {
  const sl_plan_buffer *bf = &c->p->buffers[bi];
  const int i = bf->node, k = bf->port, count = c->shard->count;
  const sl_node *n = &c->p->graph->nodes[i];
  const int64_t bytes = bf->bytes, elems = sl_desc_elems(&n->out[k]);
  if (bf->variable) return shard_merge_appended(c, pp, bi);
  if (bf->combine == SL_COMBINE_NONE) return SL_OK; /* finalize alone writes it (graph.c) */
  char *all = NULL, *acc = NULL;
  sl_code rc = shard_host_acc(c, bi, bytes, bytes, &acc);
  if (rc == SL_OK && sl_combine_concat(bf->combine)) {
    rc = shard_merge_concat(c, pp, bi, acc);
    return rc == SL_OK ? shard_put_acc(c, bi, acc, bytes) : rc;
  }
  if (rc == SL_OK) rc = shard_gather(c, acc, bytes, &all);
  if (rc != SL_OK) return rc;
  if (bf->combine == SL_COMBINE_MERGE) return shard_merge_node(c, pp, bi, all);
  sl_combine_identity_host(bf->combine, n->out[k].dtype, acc, 0, elems);
  for (int s = 0; s < count; s++) sl_combine_merge_host(bf->combine, n->out[k].dtype, acc, all + s * bytes, 0, elems);
  return shard_put_acc(c, bi, acc, bytes);
}

/* After pass `pass`'s chunks (and its workers' partials): every reduction
 * it accumulated, in the plan's buffer order (the same on every shard),
 * merged across the shards, so that its finalize and epilogue see the
 * whole scan. */
static sl_code shard_merge(run_ctx *c, int pass) {
  const sl_plan *p = c->p;
  for (int bi = 0; bi < p->n_buffers; bi++) {
    const sl_plan_buffer *bf = &p->buffers[bi];
    if (!bf->reduction || bf->unread || p->exec_level[bf->node * p->n_passes + pass] < 0 ||
        sl_node_out_finalize_only(&p->graph->nodes[bf->node], bf->port))
      continue;
    sl_code rc = shard_merge_buffer(c, &p->passes[pass], bi);
    if (rc != SL_OK) {
      sl_error_node(c->err, p->graph->nodes[bf->node].id);
      return rc;
    }
  }
  /* Every shard has written its positions of the pass's streamed outputs
   * once all are here (their sinks' stream calls are done), whatever the
   * pass merged: shard 0's finalize may draw a PNG from all of them. */
  const char here = 1;
  char *all;
  return shard_gather(c, &here, 1, &all);
}

/* One chunk of a pass: its stream levels, then (top level) the chunk's
 * items of streamed graph outputs go to their place. */
static sl_code run_chunk(run_ctx *c, const sl_plan_pass *pp, int pass, int64_t ch) {
  const sl_plan *p = c->p;
  const sl_graph *g = p->graph;
  int64_t start = ch * pp->chunk_positions;
  int64_t count = pp->positions - start < pp->chunk_positions ? pp->positions - start : pp->chunk_positions;
  c->pos_start = start;
  if (c->cancel && *c->cancel)
    return sl_fail(c->err, SL_ERR_INTERRUPTED, "interrupted at chunk %lld of %lld", (long long)ch,
                   (long long)pp->n_chunks);
  double t0 = sl_now();
  sl_code rc = prefetch_take(c, ch);
  outside_add(c, pass, SL_PASS_OUTSIDE_STAGE_WAIT, t0);
  if (rc == SL_OK) rc = run_levels(c, pp->stream_first, pp->stream_last, ch, start, count);
  for (int o = 0; c->outputs && o < g->n_outputs && rc == SL_OK; o++) {
    const sl_graph_output *go = &g->outputs[o];
    const sl_tensor_desc *d = &g->nodes[go->node].out[go->port];
    if (!d->stream_rank || g->nodes[go->node].pass != pass || c->outputs[o].written) continue;
    int64_t item = sl_desc_item_bytes(d);
    rc = c->b->ops->download(c->b, (char *)c->outputs[o].data + start * item,
                             buffer_ptr(c, go->node, go->port), (size_t)(count * item), c->err);
  }
  if (rc == SL_OK) rc = prefetch_give_back(c, ch);
  if (rc != SL_OK) sl_error_chunk(c->err, ch);
  c->frames_done += count;
  if (c->shared_progress) sl_progress_shared_add(c->shared_progress, count);
  else if (c->progress) sl_progress_update(c->progress, c->frames_done);
  return rc;
}

/* Every pass over the data of the context's graph: each runs its prologue,
 * streams every chunk through its stream levels, finalizes, and runs its
 * epilogue. The top level and iterate bodies run the same way. */
static sl_code run_passes(run_ctx *c) {
  const sl_plan *p = c->p;
  sl_backend *b = c->b;
  sl_code rc = SL_OK;
  for (int pass = 0; pass < p->n_passes && rc == SL_OK; pass++) {
    const sl_plan_pass *pp = &p->passes[pass];
    /* A source's setup and first reads overlap the prologue (e.g. the
     * preview and disk fit before virtual detectors); its copies wait for it. */
    bool early = prefetch_early(c, pass);
    double t0 = sl_now();
    if (early) rc = prefetch_begin(c, pass, true);
    outside_add(c, pass, SL_PASS_OUTSIDE_STAGE_START, t0);
    if (rc == SL_OK) rc = run_levels(c, pp->prologue_first, pp->prologue_last, 0, 0, 1);
    if (early && rc == SL_OK) rc = prefetch_open_gates(c);
    if (rc != SL_OK && early) prefetch_end_all(c);
    if (rc != SL_OK || pp->stream_first > pp->stream_last) {
      if (rc == SL_OK) rc = run_levels(c, pp->epilogue_first, pp->epilogue_last, 0, 0, 1);
      if (c->pass_end) c->pass_end[pass] = sl_now() - c->t_start;
      continue;
    }
    /* Reductions of the nodes this pass streams start from their identity
     * (zero when none is declared: a node without a kernel of its own). A
     * concat starts empty: its chunks write every byte of it that is output
     * (a fixed size is all of it, a variable size what the chunks wrote), so
     * it is not filled first (the resident acquisition: 18 GiB that would be
     * zeroed to be overwritten); nor is an output finalize alone writes. */
    t0 = sl_now();
    for (int i = 0; i < p->n_buffers && rc == SL_OK; i++)
      if (p->buffers[i].reduction && !p->buffers[i].unread &&
          p->exec_level[p->buffers[i].node * p->n_passes + pass] >= 0) {
        int slot = port_at(p->buffers[i].node, p->buffers[i].port);
        const sl_tensor_desc *d = &p->graph->nodes[p->buffers[i].node].out[p->buffers[i].port];
        void *acc = buffer_ptr(c, p->buffers[i].node, p->buffers[i].port);
        if (sl_combine_concat(p->buffers[i].combine) ||
            sl_node_out_finalize_only(&p->graph->nodes[p->buffers[i].node], p->buffers[i].port))
          rc = SL_OK;
        else
          rc = sl_combine_elementwise(p->buffers[i].combine)
                   ? b->ops->combine_identity(b, p->buffers[i].combine, d->dtype, acc, sl_desc_elems(d), c->err)
                   : b->ops->zero(b, acc, (size_t)p->buffers[i].bytes, c->err);
        c->actual[i] = 0;
        if (c->stage_out[slot]) memset(c->stage_out[slot], 0, c->stage_out_bytes[slot]);
      }
    if (rc == SL_OK) pass_partials(c, pass, false);
    outside_add(c, pass, SL_PASS_OUTSIDE_IDENTITY, t0);
    t0 = sl_now();
    if (rc == SL_OK) rc = prefetch_begin(c, pass, false); /* those not started before the prologue */
    outside_add(c, pass, SL_PASS_OUTSIDE_STAGE_START, t0);
    int64_t first = 0, end = pp->n_chunks; /* a shard streams its own range */
    if (c->shard) sl_shard_chunks(pp->n_chunks, c->shard->index, c->shard->count, &first, &end);
    for (int64_t ch = first; ch < end && rc == SL_OK; ch++) rc = run_chunk(c, pp, pass, ch);
    t0 = sl_now();
    rc = sink_lags_flush(c, rc);
    prefetch_end_all(c); /* also after an error or a cancel */
    outside_add(c, pass, SL_PASS_OUTSIDE_STAGE_END, t0);
    /* Phase boundary: the pass's batches ran ahead of the host; a device
     * error in any of them is reported here with its batch. */
    t0 = sl_now();
    if (rc == SL_OK) rc = b->ops->sync(b, c->err);
    if (rc == SL_OK) pass_partials(c, pass, true);
    outside_add(c, pass, SL_PASS_OUTSIDE_SYNC, t0);
    t0 = sl_now();
    if (rc == SL_OK && c->shard) rc = shard_merge(c, pass);
    outside_add(c, pass, SL_PASS_OUTSIDE_SHARD_MERGE, t0);
    for (int l = pp->stream_first; l <= pp->stream_last && rc == SL_OK; l++)
      rc = run_level(c, l, pp->n_chunks - 1, 0, 0, true);
    if (rc == SL_OK && pp->epilogue_first <= pp->epilogue_last) {
      if (c->shared_progress) sl_progress_shared_stage(c->shared_progress, "running what follows the scan");
      else if (c->progress) sl_progress_stage(c->progress, "running what follows the scan");
    }
    if (rc == SL_OK) rc = run_levels(c, pp->epilogue_first, pp->epilogue_last, 0, 0, 1);
    /* The pass's levels waited for their batches: its results are usable
     * now (the resident acquisition's "first usable" is pass 0's end). */
    if (c->pass_end) c->pass_end[pass] = sl_now() - c->t_start;
  }
  return rc;
}

/* A note lost by a kernel during the run (out of memory) fails the run. */
static sl_code graph_records_check(const sl_graph *g, sl_error *err) {
  for (int i = 0; i < g->n_nodes; i++) {
    sl_code rc = g->nodes[i].body ? graph_records_check(g->nodes[i].body, err)
                                  : sl_node_records_check(&g->nodes[i], err);
    if (rc == SL_OK && g->nodes[i].body) rc = sl_node_records_check(&g->nodes[i], err);
    if (rc != SL_OK) return rc;
  }
  return SL_OK;
}

sl_code sl_graph_prepare(sl_graph *g, sl_error *err) {
  for (int i = 0; i < g->n_nodes; i++) {
    sl_node *n = &g->nodes[i];
    sl_code rc = SL_OK;
    if (n->body)
      rc = sl_graph_prepare(n->body, err);
    else if (n->desc->prepare)
      rc = n->desc->prepare(n, err);
    if (rc == SL_OK) rc = sl_node_records_check(n, err);
    if (rc != SL_OK) {
      sl_error_node(err, n->id);
      sl_error_at(err, n->loc.file, n->loc.line, n->loc.col);
      for (int j = 0; j < i; j++) {
        sl_node *m = &g->nodes[j];
        if (m->body) sl_graph_release(m->body);
        else if (m->desc->release) m->desc->release(m);
        m->state = NULL;
      }
      return rc;
    }
  }
  return SL_OK;
}

void sl_graph_release(sl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    sl_node *n = &g->nodes[i];
    if (n->dev_state && n->dev_state_free) n->dev_state_free(n->dev_state);
    n->dev_state = NULL;
    if (n->body) sl_graph_release(n->body);
    else if (n->desc->release) n->desc->release(n);
    n->state = NULL;
  }
}

void sl_exec_result_free(sl_exec_result *r) {
  if (!r) return;
  for (int i = 0; i < r->n_outputs; i++) {
    free(r->outputs[i].data);
    free(r->outputs[i].provenance);
    free(r->outputs[i].chunk_bytes);
  }
  free(r->outputs);
  free(r->shard_timings);
  free(r->node_seconds);
  free(r->node_device_seconds);
  free(r->node_copy_wait_seconds);
  free(r->node_calls);
  free(r->level_seconds);
  free(r->pass_end_seconds);
  free(r->pass_outside_seconds);
  memset(r, 0, sizeof *r);
}

/* A split run: what this shard can run, and the same chunking of every
 * pass and the same buffers on every shard (their merges pair up by it).
 * Its all-gather is the shards' first meeting: none streams (nor writes
 * into the results.h5 shard 0's setup opens) before every shard is here. */
static sl_code shard_check(const sl_plan *p, const sl_backend *b, const sl_exec_shard *sh, sl_error *err) {
  if (sh->count < 1 || sh->index < 0 || sh->index >= sh->count || !sh->allgather)
    return sl_fail(err, SL_ERR_INTERNAL, "shard %d of %d", sh->index, sh->count);
  if (p->shards != sh->count)
    return sl_fail(err, SL_ERR_INTERNAL, "the plan counts %d shards, the run %d", p->shards, sh->count);
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the chunking and the buffers */
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
  MIX(p->n_passes);
  for (int k = 0; k < p->n_passes; k++) MIX(p->passes[k].positions), MIX(p->passes[k].chunk_positions), MIX(p->passes[k].n_chunks);
  MIX(p->n_buffers);
  for (int k = 0; k < p->n_buffers; k++) MIX(p->buffers[k].bytes), MIX(p->buffers[k].combine), MIX(p->buffers[k].node);
#undef MIX
  uint64_t *all = sl_calloc((size_t)sh->count, sizeof *all);
  if (!all) return sl_fail_nomem(err, "the shards' plans");
  sl_code rc = sh->allgather(sh->ctx, &h, all, sizeof h, err);
  for (int s = 0; s < sh->count && rc == SL_OK; s++)
    if (all[s] != h)
      rc = sl_fail(err, SL_ERR_INTERNAL,
                   "shard %d planned differently from shard %d (chunks or buffers): shards must plan alike", s,
                   sh->index);
  free(all);
  return rc;
}

sl_code sl_execute(const sl_plan *p, sl_backend *b, const sl_exec_opts *opts,
                   sl_exec_result *res, sl_error *err) {
  const sl_graph *g = p->graph;
  double t_start = sl_now();
  memset(res, 0, sizeof *res);
  res->process_rss_start_bytes = (int64_t)sl_process_rss();
  res->outputs = sl_calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *res->outputs);
  if (!res->outputs) return sl_fail_nomem(err, "the outputs of the run");
  res->n_outputs = g->n_outputs;
  res->planned_peak_bytes = p->caps.device_memory ? p->peak_device_bytes : p->peak_host_bytes;
  int64_t host_bytes = 0;
  const sl_exec_shard *shard = opts && opts->shard && opts->shard->count > 1 ? opts->shard : NULL;
  sl_code rc = shard ? shard_check(p, b, shard, err) : SL_OK;
  for (int o = 0; o < g->n_outputs && rc == SL_OK; o++) {
    const sl_graph_output *go = &g->outputs[o];
    const sl_node *n = &g->nodes[go->node];
    sl_output_data *od = &res->outputs[o];
    od->name = go->name;
    od->node_id = n->id;
    od->port = n->out_names[go->port];
    od->unit = sl_graph_output_unit(g, go->node, go->port);
    od->scan_axes = sl_graph_output_scan_axes(g, go->node, go->port);
    od->desc = n->out[go->port];
    int64_t bytes = sl_desc_bytes(&od->desc);
    const sl_plan_buffer *bf = &p->buffers[sl_plan_buffer_index(p, go->node, go->port)];
    if (bf->variable) bytes = bf->bytes; /* the bound */
    od->written = sl_graph_output_written(g, o);
    if (od->written) continue; /* never whole in host memory */
    /* (a split run holds every output in memory: sinks are not allowed there) */
    const char *split = shard ? " A run split into shards holds its outputs in memory: run this one unsplit." : "";
    if (od->desc.encoding != SL_ENC_NONE) {
      rc = sl_fail(err, SL_ERR_PIPELINE,
                   "output '%s' is an encoded stream (%s): only a sink node writes it, as it streams (sluice "
                   "run's results.h5); it is never assembled in memory.%s",
                   go->name, sl_encoding_name(od->desc.encoding), split);
      break;
    }
    if (sl_desc_is_ragged(&od->desc)) {
      rc = sl_fail(err, SL_ERR_PIPELINE,
                   "output '%s' is a stream of variable-size items: only a sink node writes it, as it streams "
                   "(sluice run's results.h5, as ragged items); it is never assembled in memory.%s",
                   go->name, split);
      break;
    }
    od->data = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!od->data) {
      char h[32];
      sl_format_bytes((uint64_t)bytes, h, sizeof h);
      rc = sl_fail(err, SL_ERR_NOMEM, "cannot allocate %s for output '%s'", h, go->name);
    }
    host_bytes += bytes;
  }
  sl_pool pool;
  sl_pool_init(&pool, b);
  run_ctx c;
  bool began = false;
  /* the run's blocks in one allocation (a device's cost a block: pool.h) */
  const int64_t arena = sl_plan_arena_bytes(p);
  if (rc == SL_OK && arena > 0) rc = sl_pool_reserve(&pool, arena, err);
  if (rc == SL_OK) {
    rc = ctx_begin(&c, p, b, &pool, NULL, err);
    began = true;
    if (!ctx_tables_made(&c)) { /* what was made is freed here */
      ctx_end(&c);
      began = false;
    }
  }
  int stream_passes = 0;
  int64_t total = 0;
  bool other_streams = false;
  for (int pass = 0; pass < p->n_passes; pass++)
    if (p->passes[pass].stream_first <= p->passes[pass].stream_last) {
      stream_passes++;
      total += p->passes[pass].positions;
      other_streams |= p->passes[pass].axis != NULL;
    }
  sl_progress progress;
  /* Frames (scan positions) are what a user counts; with several passes the
   * total counts each pass's frames, and a pass over another stream (e.g.
   * pixels after a transpose) counts its positions. */
  const char *unit = other_streams ? "positions (all passes)" : stream_passes > 1 ? "frames (all passes)" : "frames";
  sl_progress_shared *shared = opts && opts->shard && opts->shard->count > 1 ? opts->shared_progress : NULL;
  sl_progress_begin(&progress, total, unit, opts && opts->progress && !shared);
  if (shared) sl_progress_shared_begin(shared, total, unit); /* every shard's total is the run's */
  if (rc == SL_OK) {
    c.outputs = res->outputs;
    c.progress = &progress;
    c.shared_progress = shared;
    c.cancel = opts ? opts->cancel : NULL;
    c.t_start = t_start;
    c.shard = shard;
    c.pass_end = res->pass_end_seconds = sl_calloc((size_t)(p->n_passes ? p->n_passes : 1), sizeof(double));
    c.outside = res->pass_outside_seconds =
        sl_calloc((size_t)(p->n_passes ? p->n_passes : 1) * SL_PASS_OUTSIDE_N, sizeof(double));
    res->n_passes = p->n_passes;
    if (!c.pass_end || !c.outside) rc = sl_fail_nomem(err, "the run's timings");
    res->setup_seconds = sl_now() - t_start;
    if (rc == SL_OK) rc = run_passes(&c);
  }
  const double t_passes_end = sl_now();
  sl_progress_end(&progress);
  if (rc == SL_OK) rc = b->ops->sync(b, err);
  for (int o = 0; o < g->n_outputs && rc == SL_OK; o++) {
    const sl_graph_output *go = &g->outputs[o];
    const sl_tensor_desc *d = &g->nodes[go->node].out[go->port];
    if (d->stream_rank) continue;
    int bi = buf_index(&c, go->node, go->port);
    int64_t bytes = sl_desc_bytes(d);
    if (p->buffers[bi].variable) { /* what the chunks wrote, and each one's share */
      bytes = c.actual[bi];
      res->outputs[o].desc.dims[0] = bytes;
      int64_t nc = sl_plan_node_pass(p, go->node)->n_chunks;
      res->outputs[o].n_chunk_bytes = nc;
      res->outputs[o].chunk_bytes = sl_calloc((size_t)(nc ? nc : 1), sizeof(int64_t));
      if (!res->outputs[o].chunk_bytes) {
        rc = sl_fail_nomem(err, "the chunk sizes of an output");
        break;
      }
      memcpy(res->outputs[o].chunk_bytes, c.concat_chunks[bi], (size_t)nc * sizeof(int64_t));
    }
    if (!res->outputs[o].written)
      rc = b->ops->download(b, res->outputs[o].data, buffer_ptr(&c, go->node, go->port), (size_t)bytes, err);
  }
  /* Provenance after the run: kernels may have recorded what they found. */
  if (rc == SL_OK) rc = graph_records_check(g, err);
  for (int o = 0; o < g->n_outputs && rc == SL_OK; o++)
    if (!(res->outputs[o].provenance = sl_graph_provenance(g, g->outputs[o].node)))
      rc = sl_fail_nomem(err, "the provenance of an output");
  int64_t c_staging_bytes = 0;
  for (int i = 0; began && i < g->n_nodes * SL_MAX_PORTS; i++)
    c_staging_bytes += (int64_t)(c.stage_in_bytes[i] + c.stage_out_bytes[i]);
  for (int i = 0; began && i < g->n_nodes; i++)
    for (int k = 0; c.lag[i] && k < SL_MAX_PORTS; k++) c_staging_bytes += (int64_t)(c.lag[i]->ring_bytes[k][0] + c.lag[i]->ring_bytes[k][1]);
  if (began) {
    int n = g->n_nodes ? g->n_nodes : 1;
    res->node_seconds = sl_calloc((size_t)n, sizeof *res->node_seconds);
    res->node_calls = sl_calloc((size_t)n, sizeof *res->node_calls);
    res->level_seconds = sl_calloc((size_t)(p->n_levels ? p->n_levels : 1), sizeof *res->level_seconds);
    res->node_device_seconds = sl_calloc((size_t)n, sizeof *res->node_device_seconds);
    res->node_copy_wait_seconds = sl_calloc((size_t)n, sizeof *res->node_copy_wait_seconds);
    sl_error ignored; /* device times are added once the kernels completed */
    sl_error_clear(&ignored);
    (void)b->ops->sync(b, &ignored);
    if (!res->node_seconds || !res->node_calls || !res->level_seconds || !res->node_device_seconds ||
        !res->node_copy_wait_seconds) {
      if (rc == SL_OK) rc = sl_fail_nomem(err, "the run's timings");
    } else {
      memcpy(res->node_device_seconds, c.node_device_seconds, (size_t)g->n_nodes * sizeof *res->node_device_seconds);
      memcpy(res->node_seconds, c.node_seconds, (size_t)g->n_nodes * sizeof *res->node_seconds);
      memcpy(res->node_copy_wait_seconds, c.node_copy_wait_seconds,
             (size_t)g->n_nodes * sizeof *res->node_copy_wait_seconds);
      memcpy(res->node_calls, c.node_calls, (size_t)g->n_nodes * sizeof *res->node_calls);
      memcpy(res->level_seconds, c.level_seconds, (size_t)p->n_levels * sizeof *res->level_seconds);
    }
    ctx_end(&c);
  }
  /* the planned host peak of the path the data took: with the decided
   * state the nodes made */
  res->planned_decided_host_bytes = sl_plan_decided_host_bytes(p);
  res->planned_host_bytes = p->peak_host_bytes + res->planned_decided_host_bytes;
  res->planned_most_host_bytes = p->peak_host_bytes_most;
  if (!p->caps.device_memory) res->planned_peak_bytes = res->planned_host_bytes;
  if (began) { /* a split run's merges held these too */
    res->measured_exchange_bytes = c.gathered_bytes + c.staged_bytes + c.piece_bytes;
    host_bytes += res->measured_exchange_bytes;
    free(c.gathered);
    free(c.staged);
    free(c.piece);
  }
  res->measured_host_bytes = host_bytes + c_staging_bytes;
  res->measured_peak_bytes = p->caps.device_memory ? pool.peak_bytes : pool.peak_bytes + host_bytes;
  res->chunks = p->n_chunks;
  res->process_rss_peak_bytes = (int64_t)sl_process_peak_rss();
  res->pool_allocations = sl_pool_allocations(&pool);
  sl_pool_destroy(&pool);
  res->seconds = sl_now() - t_start;
  res->finish_seconds = sl_now() - t_passes_end;
  if (rc != SL_OK) sl_exec_result_free(res);
  return rc;
}
