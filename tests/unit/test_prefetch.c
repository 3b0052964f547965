/* The executor's prefetch stage (engine/exec/prefetch.h) on a mock
 * asynchronous device backend (mock_async_backend.h: host memory as device
 * memory, a copy queue that lands each copy after a random delay, events as
 * counters), through whole runs:
 * - hdf5_source's produce (pinned windows, the chunk reader reading ahead)
 *   on a Dectris-style acquisition (test_h5_index.c's fixtures), overlapped
 *   and in order (source_overlap=false), against the CPU backend bit for
 *   bit, over chunkings that split stored chunks and span files;
 * - a test node "tick" whose produce rewrites two pieces of its own memory
 *   every other chunk and emits each chunk in several ranges: its frames
 *   against their closed form, and their sum, on both backends;
 * - a lent output (the CPU kernel's own memory, no buffer in the plan):
 *   the closed form, and the mock device's bytes;
 * - copies slower than produce: produce's waits for them reported apart
 *   (node_copy_wait_seconds), not in the node's seconds;
 * - a produce error at chunk k: reported with the node and chunk k, earlier
 *   chunks ran, nothing hangs, every event destroyed;
 * - cancel while the helper runs ahead: SL_ERR_INTERRUPTED, and the helper
 *   stopped within the ring's two chunks ahead;
 * - the run's writer nodes (write_h5) on the mock device: a streamed output's
 *   writer runs one chunk behind the device from two pinned buffers (exec.c's
 *   sink_lag), and results.h5 holds every frame's closed form, also with
 *   the run split into 2 and 3 shards writing into one results.h5;
 * - a lent output that only writers read (tick's, hdf5_source's stored
 *   chunks as repack.yaml writes them): lent on the host as on the CPU, no
 *   device buffer, ring or staging, results.h5 the closed form or the CPU
 *   run's stored chunks byte for byte.
 * A missing wait (the compute queue on `uploaded`, the copy queue on
 * `consumed`, the node on its piece) shows as frames that differ. */
#define SL_H5_FIXTURES_ONLY
#include "engine/core/settings.h"
#include "test_h5_index.c"

#include <signal.h>

#include "engine/exec/run.h"
#include "engine/exec/sinks.h"
#include "engine/graph/node_params.h"
#include "nodes/registry.h"
#include "tests/unit/mock_async_backend.h"
#include "tests/unit/test_support.h"

/* ---- the test node: tick ---------------------------------------------------------- */

/* Frames of 16 x 24 u32; element e of position p holds p * 7919 + e * 13 + 5
 * (mod 2^32): a closed form the test checks every byte against. */
#define TICK_H 16
#define TICK_W 24
#define TICK_ITEM (TICK_H * TICK_W)

static uint32_t tick_value(int64_t p, int64_t e) { return (uint32_t)(p * 7919 + e * 13 + 5); }

#define TICK_PARAMS(P)                                                                   \
  P(INT, positions, "60", "scan positions", NULL)                                        \
  P(INT, fail_at, "-1", "chunk whose produce fails, -1: none", NULL)                      \
  P(INT, cancel_at, "-1", "chunk whose produce raises the cancel flag, -1: none", NULL)       \
  P(INT, pieces, "2", "pieces of its memory it takes turns with (1: each chunk rewrites the last one's)", NULL) \
  P(INT, lend, "0", "1: on the CPU its frames are lent from its own memory (sl_node_desc.lends_output)", NULL)
SL_NODE_PARAMS(tick_params, TICK_PARAMS)

static volatile sig_atomic_t g_cancel;
static int64_t g_produced_max; /* the last chunk produce was called for */

static sl_code tick_infer(sl_node *n, sl_error *err) {
  const tick_params *p = tick_params_of(n);
  if (p->positions < 1) return sl_fail(err, SL_ERR_PIPELINE, "positions must be positive");
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  d->dtype = SL_U32;
  d->rank = 3;
  d->stream_rank = 1;
  d->dims[0] = p->positions;
  d->dims[1] = TICK_H;
  d->dims[2] = TICK_W;
  return SL_OK;
}

static void tick_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_written = positions * sl_desc_item_bytes(&n->out[0]);
}

/* Two pieces of host memory, each one chunk of frames, from the backend's
 * host_alloc; rewritten every other chunk. */
typedef struct tick_state {
  sl_backend *backend;
  uint32_t *piece[2];
  size_t piece_bytes;
  uint32_t *lent[2]; /* the CPU kernel's lent frames, malloc'd */
  size_t lent_bytes;
} tick_state;

static sl_code tick_prepare(sl_node *n, sl_error *err) {
  n->state = calloc(1, sizeof(tick_state));
  return n->state ? SL_OK : sl_fail_nomem(err, "tick's state");
}

static void tick_release(sl_node *n) {
  tick_state *s = n->state;
  for (int k = 0; s && k < 2; k++) {
    if (s->piece[k]) s->backend->ops->host_free(s->backend, s->piece[k], s->piece_bytes);
    free(s->lent[k]);
  }
  free(s);
  n->state = NULL;
}

static void tick_fill(uint32_t *y, int64_t pos_start, int64_t pos_count) {
  for (int64_t p = 0; p < pos_count; p++)
    for (int64_t e = 0; e < TICK_ITEM; e++) y[p * TICK_ITEM + e] = tick_value(pos_start + p, e);
}

/* Lent (out[0] == NULL): the frames in one of two buffers of its own, the
 * other one overwritten with 0xab bytes, so that a reader of the chunk
 * before (whose bytes needed to last only until this call) sees garbage. */
static sl_code tick_cpu(sl_kernel_args *a) {
  if (a->out[0]) {
    tick_fill(a->out[0], a->pos_start, a->pos_count);
    return SL_OK;
  }
  tick_state *s = a->state;
  size_t bytes = (size_t)a->pos_count * TICK_ITEM * sizeof(uint32_t);
  if (!s->lent[0]) {
    s->lent_bytes = bytes; /* the first chunk is the largest */
    for (int k = 0; k < 2; k++)
      if (!(s->lent[k] = malloc(bytes))) return sl_fail_nomem(a->err, "tick's lent frames");
  }
  uint32_t *y = s->lent[a->chunk % 2];
  memset(s->lent[(a->chunk + 1) % 2], 0xab, s->lent_bytes);
  tick_fill(y, a->pos_start, a->pos_count);
  a->out[0] = y;
  a->out_bytes[0] = (int64_t)bytes;
  return SL_OK;
}

static bool tick_lends(const sl_node *n, int port) { return port == 0 && tick_params_of(n)->lend; }

static sl_code tick_produce(sl_produce_args *a) {
  tick_state *s = a->state;
  const tick_params *p = tick_params_of(a->node);
  if (a->chunk > g_produced_max) g_produced_max = a->chunk;
  if (a->chunk == p->cancel_at) g_cancel = 1;
  if (a->chunk == p->fail_at)
    return sl_fail(a->err, SL_ERR_IO, "tick: the detector went away at chunk %lld", (long long)a->chunk);
  size_t bytes = (size_t)a->out_capacity;
  if (!s->piece[0]) {
    s->backend = a->backend;
    s->piece_bytes = bytes; /* the first chunk is the largest */
    for (int k = 0; k < 2; k++) {
      sl_code rc = a->backend->ops->host_alloc(a->backend, bytes, (void **)&s->piece[k], a->err);
      if (rc != SL_OK) return rc;
    }
  }
  int k = (int)(a->chunk % (p->pieces == 1 ? 1 : 2));
  sl_code rc = a->piece_wait(a, k, a->err); /* the copies out of it (chunk - 2, or - 1) are done */
  if (rc != SL_OK) return rc;
  tick_fill(s->piece[k], a->pos_start, a->pos_count);
  /* In three ranges, the last first: offsets must land where they say. */
  uint64_t total = (uint64_t)a->pos_count * TICK_ITEM * 4, third = total / 3 / 4 * 4;
  const uint8_t *src = (const uint8_t *)s->piece[k];
  rc = a->emit(a, k, 2 * third, src + 2 * third, total - 2 * third, a->err);
  if (rc == SL_OK) rc = a->emit(a, k, 0, src, third, a->err);
  if (rc == SL_OK) rc = a->emit(a, k, third, src + third, third, a->err);
  a->out_bytes = (int64_t)total;
  return rc;
}

static const sl_port_def tick_out[] = {{"frames", "the closed form's frames", NULL, false}};

static const sl_node_desc sl_node_tick = {
    .type = "tick",
    .doc = "Test node: frames of a closed form, made on the host by produce.",
    SL_PARAMS_DESC(tick_params),
    .outputs = tick_out, .n_outputs = SL_COUNT_OF(tick_out),
    .infer = tick_infer, .cost = tick_cost,
    .prepare = tick_prepare, .release = tick_release,
    .kernel = {[SL_BACKEND_CPU] = tick_cpu},
    .produce = tick_produce,
    .lends_output = tick_lends,
};

/* The built-in families and a test family holding tick. */
static const sl_node_desc *const k_test_nodes[] = {&sl_node_tick};
static const sl_node_family k_test_family = {"test", k_test_nodes, 1};
static const sl_node_family *g_families[32];
static sl_node_registry g_registry;

static const sl_node_registry *registry(void) {
  const sl_node_registry *builtin = sl_nodes_registry();
  assert_true(builtin->n_families < 31);
  for (int f = 0; f < builtin->n_families; f++) g_families[f] = builtin->families[f];
  g_families[builtin->n_families] = &k_test_family;
  g_registry = (sl_node_registry){g_families, builtin->n_families + 1};
  return &g_registry;
}

/* ---- runs --------------------------------------------------------------------------- */

static sl_backend_ops g_mock_ops;

/* backend: "cpu", "mock" (overlapped) or "mock-inorder" (source_overlap=false). */
/* The request for `backend`, with its settings made (sl_settings_init(NULL,
 * ...) undoes them). */
static sl_run_request request_for(const char *file, const char *backend, int64_t chunk, sl_output_target *outputs,
                                  sl_error *err) {
  const char *settings[] = {strcmp(backend, "mock-inorder") ? "source_overlap=true" : "source_overlap=false"};
  assert_int_equal(sl_settings_init(settings, 1, err), SL_OK);
  g_mock_ops = mock_async_ops();
  g_cancel = 0;
  g_produced_max = -1;
  sl_error_clear(err);
  return (sl_run_request){.file = file, .registry = registry(), .backend = SL_BACKEND_CPU,
                          .chunk_positions = chunk, .threads = 2, .cancel = &g_cancel,
                          .ops_override = strcmp(backend, "cpu") ? &g_mock_ops : NULL, .outputs = outputs};
}

static sl_code run_to(const char *file, const char *backend, int64_t chunk, sl_output_target *outputs, sl_run *r,
                      sl_error *err) {
  sl_run_request req = request_for(file, backend, chunk, outputs, err);
  memset(r, 0, sizeof *r);
  sl_code rc = sl_run_pipeline(&req, r, err);
  sl_error ignored;
  (void)sl_settings_init(NULL, 0, &ignored);
  return rc;
}

static sl_code run(const char *file, const char *backend, int64_t chunk, sl_run *r, sl_error *err) {
  return run_to(file, backend, chunk, NULL, r, err);
}

static void expect_same(const sl_run *ref, const sl_run *got, const char *what) {
  assert_int_equal(ref->result.n_outputs, got->result.n_outputs);
  for (int o = 0; o < ref->result.n_outputs; o++) {
    const sl_output_data *a = &ref->result.outputs[o], *b = &got->result.outputs[o];
    int64_t bytes = sl_desc_bytes(&a->desc);
    assert_int_equal(bytes, sl_desc_bytes(&b->desc));
    if (memcmp(a->data, b->data, (size_t)bytes) != 0)
      fail_msg("%s: output '%s' differs from the CPU backend's", what, a->name);
  }
}

/* The plan of a mock run gave node `id`'s output a ring, its produce ran
 * once per chunk of each pass it streams in, and no event outlived the run. */
static void expect_prefetched(const sl_run *r, const char *id, int64_t passes, const char *what) {
  int i = sl_graph_find(r->graph, id);
  assert_true(i >= 0);
  const sl_plan_buffer *bf = &r->plan->buffers[sl_plan_buffer_index(r->plan, i, 0)];
  if (bf->ring_slot < 0) fail_msg("%s: no ring for %s", what, id);
  int64_t calls = r->result.node_calls[i], want = passes * sl_plan_node_pass(r->plan, i)->n_chunks;
  if (calls != want) fail_msg("%s: %s produced %lld chunks, not %lld", what, id, (long long)calls, (long long)want);
  assert_int_equal(g_mock.events_alive, 0);
}

static const char *const k_mock_modes[] = {"mock", "mock-inorder"};

/* ---- hdf5_source ---------------------------------------------------------------------- */

static char g_master[512];
static bool g_compressed;

/* fx_two_file_acquisition (test_h5_index.c). */
static int setup(void **state) {
  (void)state;
  g_compressed = fx_two_file_acquisition("prefetch", g_master, sizeof g_master);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

static void t_hdf5_source_against_cpu(void **state) {
  (void)state;
  char path[512], text[2048];
  if (g_compressed)
    snprintf(text, sizeof text,
             "pipeline: p\nnodes:\n"
             "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
             "  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}\n"
             "  total: {type: sum, inputs: {x: dec.frames}}\n"
             "outputs: {frames: dec.frames, total: total.total}\n",
             g_master);
  else
    snprintf(text, sizeof text,
             "pipeline: p\nnodes:\n"
             "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
             "  total: {type: sum, inputs: {x: src.frames}}\n"
             "outputs: {frames: src.frames, total: total.total}\n",
             g_master);
  write_temp_file(path, sizeof path, "prefetch_src.yaml", text);
  sl_error err;
  sl_run ref;
  if (run(path, "cpu", 100, &ref, &err) != SL_OK) fail_msg("cpu: %s", err.msg);
  static const int64_t chunks[] = {1, 4, 8, 12, 28, 100};
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
    for (int m = 0; m < 2; m++) {
      char what[96];
      snprintf(what, sizeof what, "%s, chunks of %lld", k_mock_modes[m], (long long)chunks[c]);
      sl_run got;
      if (run(path, k_mock_modes[m], chunks[c], &got, &err) != SL_OK) fail_msg("%s: %s", what, err.msg);
      expect_same(&ref, &got, what);
      expect_prefetched(&got, "src", 1, what);
      assert_int_equal(got.plan->nodes[sl_graph_find(got.graph, "src")].cost.device_state_bytes, 0);
      sl_run_free(&got);
    }
  sl_run_free(&ref);
}

/* A source beside a prologue (the pixel mask, read before the scan): with
 * overlap its stage starts before the prologue and its copies wait for it
 * (one more wait on the copy queue, besides each chunk's wait for its ring
 * buffer two chunks back); in order, nothing changes. Outputs equal the
 * CPU's either way. */
static void t_source_before_the_prologue(void **state) {
  (void)state;
  char path[512], text[2048];
  snprintf(text, sizeof text,
           "pipeline: p\nnodes:\n"
           "  pm: {type: detector_mask, params: {path: \"%s\"}}\n"
           "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
           "%s"
           "  fixed: {type: mask_correct, inputs: {frames: %s, mask: pm.mask}}\n"
           "  total: {type: sum, inputs: {x: fixed.frames}}\n"
           "outputs: {frames: fixed.frames, total: total.total}\n",
           g_master, g_master, g_compressed ? "  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}\n" : "",
           g_compressed ? "dec.frames" : "src.frames");
  write_temp_file(path, sizeof path, "prefetch_prologue.yaml", text);
  sl_error err;
  sl_run ref;
  if (run(path, "cpu", 100, &ref, &err) != SL_OK) fail_msg("cpu: %s", err.msg);
  static const int64_t chunks[] = {1, 5, 12, 100};
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
    for (int m = 0; m < 2; m++) {
      char what[96];
      snprintf(what, sizeof what, "%s, chunks of %lld", k_mock_modes[m], (long long)chunks[c]);
      int64_t waits = g_mock.waits_on_copy_queue;
      sl_run got;
      if (run(path, k_mock_modes[m], chunks[c], &got, &err) != SL_OK) fail_msg("%s: %s", what, err.msg);
      expect_same(&ref, &got, what);
      expect_prefetched(&got, "src", 1, what);
      int64_t n = sl_plan_node_pass(got.plan, sl_graph_find(got.graph, "src"))->n_chunks;
      int64_t want = m == 0 ? (n > 2 ? n - 2 : 0) + 1 : 0;
      if (g_mock.waits_on_copy_queue - waits != want)
        fail_msg("%s: %lld waits on the copy queue, not %lld", what, (long long)(g_mock.waits_on_copy_queue - waits),
                 (long long)want);
      sl_run_free(&got);
    }
  sl_run_free(&ref);
}

/* ---- tick ----------------------------------------------------------------------------- */

static void write_tick(char *path, size_t n, const char *params) {
  char text[1024];
  snprintf(text, sizeof text,
           "pipeline: t\nnodes:\n"
           "  tick: {type: tick, params: {%s}}\n"
           "  total: {type: sum, inputs: {x: tick.frames}}\n"
           "outputs: {frames: tick.frames, total: total.total}\n",
           params);
  write_temp_file(path, n, "prefetch_tick.yaml", text);
}

static void expect_closed_form(const sl_run *r, int64_t positions, const char *what) {
  const sl_output_data *f = &r->result.outputs[0];
  assert_string_equal(f->name, "frames");
  const uint32_t *y = f->data;
  for (int64_t p = 0; p < positions; p++)
    for (int64_t e = 0; e < TICK_ITEM; e++)
      if (y[p * TICK_ITEM + e] != tick_value(p, e))
        fail_msg("%s: frame %lld element %lld is %u, not %u", what, (long long)p, (long long)e,
                 y[p * TICK_ITEM + e], tick_value(p, e));
}

/* The tick pipeline of 61 positions at `path`, and its CPU run. */
static void tick_reference(char *path, size_t n, sl_run *ref) {
  write_tick(path, n, "positions: 61");
  sl_error err;
  if (run(path, "cpu", 61, ref, &err) != SL_OK) fail_msg("cpu: %s", err.msg);
  expect_closed_form(ref, 61, "cpu");
}

static void t_tick_closed_form(void **state) {
  (void)state;
  char path[512];
  sl_error err;
  sl_run ref;
  tick_reference(path, sizeof path, &ref);
  static const int64_t chunks[] = {1, 2, 5, 7, 61};
  for (int rep = 0; rep < 3; rep++) /* other random delays each time */
    for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
      for (int m = 0; m < 2; m++) {
        char what[96];
        snprintf(what, sizeof what, "%s, chunks of %lld", k_mock_modes[m], (long long)chunks[c]);
        sl_run got;
        if (run(path, k_mock_modes[m], chunks[c], &got, &err) != SL_OK) fail_msg("%s: %s", what, err.msg);
        expect_closed_form(&got, 61, what);
        expect_same(&ref, &got, what);
        expect_prefetched(&got, "tick", 1, what);
        sl_run_free(&got);
      }
  sl_run_free(&ref);
}

/* The split run of req in `count` shards into runs (the settings set
 * again after it, as every run here leaves them); fails the test with
 * `what` when it fails. */
static void run_split(sl_run_request *req, int count, sl_run *runs, const char *what) {
  sl_error err;
  req->threads = count;
  sl_code rc = sl_run_pipeline_shards(req, count, runs, &err);
  sl_error ignored;
  (void)sl_settings_init(NULL, 0, &ignored);
  if (rc != SL_OK) fail_msg("%s: %s", what, err.msg);
}

/* Each shard called node `name` once for each chunk of its range. */
static void expect_shard_calls(const sl_run *runs, int count, const char *name, const char *what) {
  for (int sh = 0; sh < count; sh++) {
    const int i = sl_graph_find(runs[sh].graph, name);
    assert_true(i >= 0);
    int64_t first, end;
    sl_shard_chunks(sl_plan_node_pass(runs[sh].plan, i)->n_chunks, sh, count, &first, &end);
    if (runs[sh].result.node_calls[i] != end - first)
      fail_msg("%s: shard %d called %s %lld times, not %lld", what, sh, name,
               (long long)runs[sh].result.node_calls[i], (long long)(end - first));
  }
}

/* A run split into shards on the mock device (engine/exec/shard.h): each
 * shard's stage produces its own chunks only, in order from its first
 * (their produce calls are the shard's range, adding up to the pass's
 * chunks), the sums are merged through the host, and shard 0 holds the
 * frames whole: the CPU run's outputs, bit for bit. */
static void t_shards(void **state) {
  (void)state;
  char path[512];
  sl_error err;
  sl_run ref;
  tick_reference(path, sizeof path, &ref);
  static const int64_t chunks[] = {1, 5, 7, 61};
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
    for (int count = 2; count <= 3; count++)
      for (int m = 0; m < 2; m++) {
        char what[128];
        snprintf(what, sizeof what, "%s, chunks of %lld, %d shards", k_mock_modes[m], (long long)chunks[c], count);
        sl_run_request req = request_for(path, k_mock_modes[m], chunks[c], NULL, &err);
        sl_run runs[3];
        run_split(&req, count, runs, what);
        expect_same(&ref, &runs[0], what);
        expect_shard_calls(runs, count, "tick", what);
        for (int sh = 0; sh < count; sh++) {
          assert_true(runs[sh].result.measured_peak_bytes <= runs[sh].result.planned_peak_bytes);
          assert_true(runs[sh].result.measured_host_bytes <= runs[sh].result.planned_host_bytes);
        }
        for (int sh = 0; sh < count; sh++) sl_run_free(&runs[sh]);
        assert_int_equal(g_mock.events_alive, 0);
      }
  sl_run_free(&ref);
}

/* Copies slower than produce (a 3 ms floor each, three a chunk) and one
 * piece of memory: produce of chunk j waits for the copies out of it from
 * chunk j - 1 (the executor has not waited for them yet). Those waits
 * are reported apart (node_copy_wait_seconds) and left out of the node's
 * seconds, which keep produce's own work (filling 3 positions of 16 x 24):
 * at least one chunk's copies were waited for, and the node's seconds are
 * below the waits. The frames are still the closed form's. */
static void t_copy_waits_apart(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 30, pieces: 1");
  sl_error err;
  sl_run got;
  mock_copy_floor(3000);
  sl_code rc = run(path, "mock", 3, &got, &err);
  mock_copy_floor(0);
  if (rc != SL_OK) fail_msg("mock: %s", err.msg);
  expect_closed_form(&got, 30, "slow copies");
  expect_prefetched(&got, "tick", 1, "slow copies");
  int i = sl_graph_find(got.graph, "tick");
  double waited = got.result.node_copy_wait_seconds[i], own = got.result.node_seconds[i];
  if (!(waited >= 0.009)) fail_msg("produce waited %.6f s for its copies: at least one chunk's 9 ms expected", waited);
  if (!(own < waited)) fail_msg("the node's seconds %.6f include its waits for the copies (%.6f s)", own, waited);
  sl_run_free(&got);
}

/* A lent output (lends_output) on the CPU: no buffer in the plan (lent, no
 * slot), the frames and their sum from the node's own memory equal to the
 * closed form at every chunking; on the mock device the same node's output
 * is not lent (a ring, from produce) and gives the same bytes. */
static void t_lent_output(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 61, lend: 1");
  static const int64_t chunks[] = {1, 4, 7, 61};
  sl_error err;
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++) {
    char what[64];
    snprintf(what, sizeof what, "lent, chunks of %lld", (long long)chunks[c]);
    sl_run got, dev;
    if (run(path, "cpu", chunks[c], &got, &err) != SL_OK) fail_msg("%s: %s", what, err.msg);
    const sl_plan_buffer *bf = &got.plan->buffers[sl_plan_buffer_index(got.plan, sl_graph_find(got.graph, "tick"), 0)];
    if (!bf->lent || bf->slot != -1 || bf->bytes != 0) fail_msg("%s: the plan gave the lent frames a buffer", what);
    expect_closed_form(&got, 61, what);
    if (run(path, "mock", chunks[c], &dev, &err) != SL_OK) fail_msg("%s on the mock: %s", what, err.msg);
    bf = &dev.plan->buffers[sl_plan_buffer_index(dev.plan, sl_graph_find(dev.graph, "tick"), 0)];
    if (bf->lent) fail_msg("%s: lent on a device backend", what);
    expect_same(&got, &dev, what);
    sl_run_free(&dev);
    sl_run_free(&got);
  }
}

/* A run that must fail with `want`: its error into err; no helper thread
 * or event outlives it. */
static void expect_failed_run(const char *path, const char *mode, int64_t chunk, sl_code want, sl_error *err) {
  sl_run got;
  sl_code rc = run(path, mode, chunk, &got, err);
  if (rc != want) fail_msg("%s: got %d (%s), not %d", mode, rc, err->msg, want);
  assert_int_equal(g_mock.events_alive, 0);
  assert_false(g_mock.running);
  sl_run_free(&got);
}

/* A produce error at chunk 4 of 10: the run fails with the node's error,
 * naming the node and chunk 4, after chunks 0-3 ran; no thread or event is
 * left (events_alive), and a run after it works. */
static void t_produce_error(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 30, fail_at: 4");
  for (int m = 0; m < 2; m++) {
    sl_error err;
    expect_failed_run(path, k_mock_modes[m], 3, SL_ERR_IO, &err);
    assert_non_null(strstr(err.msg, "went away at chunk 4"));
    assert_string_equal(err.node, "tick");
    assert_int_equal(err.chunk, 4);
  }
  write_tick(path, sizeof path, "positions: 30");
  sl_error err;
  sl_run got;
  if (run(path, "mock", 3, &got, &err) != SL_OK) fail_msg("after the error: %s", err.msg);
  expect_closed_form(&got, 30, "after the error");
  sl_run_free(&got);
}

/* Cancel raised while chunk 3's produce runs (on the helper thread): the
 * run stops with SL_ERR_INTERRUPTED at the next chunk; the helper, at most
 * two chunks ahead of the executor, produced no chunk past 5. */
static void t_cancel(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 40, cancel_at: 3");
  for (int m = 0; m < 2; m++) {
    sl_error err;
    expect_failed_run(path, k_mock_modes[m], 2, SL_ERR_INTERRUPTED, &err);
    if (g_produced_max > 5) fail_msg("%s: produce ran up to chunk %lld", k_mock_modes[m], (long long)g_produced_max);
  }
}

/* ---- the run's writers on a device backend ---------------------------------------- */

/* A run of `path` on `mode` whose graph outputs go to results.h5 in a
 * fresh temp dir (dir, for the caller to check and remove). */
static void run_into_results(const char *path, const char *mode, int64_t chunk, const char *what, char *dir,
                             size_t dir_len, sl_run *got) {
  sl_output_target t;
  memset(&t, 0, sizeof t);
  assert_int_equal(temp_dir_make(dir, dir_len, "/tmp/sluice-prefetch-out-XXXXXX"), 0);
  snprintf(t.dir, sizeof t.dir, "%s", dir);
  char h5[300];
  snprintf(h5, sizeof h5, "%s/results.h5", dir);
  sl_error err;
  assert_int_equal(sl_h5_writer_open(h5, NULL, 0, &t.results, &err), SL_OK);
  if (run_to(path, mode, chunk, &t, got, &err) != SL_OK) fail_msg("%s: %s", what, err.msg);
  assert_int_equal(sl_h5_writer_finish(t.results, got->result.outputs, got->result.n_outputs, &err), SL_OK);
}

/* results.h5's frames in dir against tick's closed form. */
static void expect_closed_form_written(const char *dir, const char *what) {
  char h5[300];
  snprintf(h5, sizeof h5, "%s/results.h5", dir);
  uint32_t *y = malloc(61 * TICK_ITEM * sizeof *y);
  assert_non_null(y);
  hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "frames", H5P_DEFAULT);
  assert_true(d >= 0);
  assert_true(H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  for (int64_t p = 0; p < 61; p++)
    for (int64_t e = 0; e < TICK_ITEM; e++)
      if (y[p * TICK_ITEM + e] != tick_value(p, e))
        fail_msg("%s: results.h5 frame %lld element %lld is %u, not %u", what, (long long)p, (long long)e,
                 y[p * TICK_ITEM + e], tick_value(p, e));
  free(y);
}

/* tick's frames written by write_h5 on the mock device, chunk by chunk one
 * chunk behind the kernels: results.h5 holds the closed form, for chunkings
 * with a short last chunk and with one chunk (the flush at the pass's end
 * is then the only call). */
static void t_writer_lags_on_device(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 61");
  static const int64_t chunks[] = {1, 7, 61};
  for (int rep = 0; rep < 2; rep++)
    for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
      for (int m = 0; m < 2; m++) {
        char what[96], dir[256];
        snprintf(what, sizeof what, "%s, chunks of %lld", k_mock_modes[m], (long long)chunks[c]);
        sl_run got;
        run_into_results(path, k_mock_modes[m], chunks[c], what, dir, sizeof dir, &got);
        int w = sl_graph_find(got.graph, "frames.h5");
        assert_true(w >= 0);
        assert_int_equal(got.result.node_calls[w], sl_plan_node_pass(got.plan, w)->n_chunks);
        expect_closed_form_written(dir, what);
        assert_int_equal(g_mock.events_alive, 0);
        sl_run_free(&got);
        assert_int_equal(temp_dir_remove(dir), 0);
      }
}

/* The same split into 2 and 3 shards on the mock device, every shard's
 * write_h5 a chunk behind its kernels and all writing into one results.h5:
 * each shard writes its own chunks (its lag flushed at its pass's end), and
 * the file holds the closed form. */
static void t_shards_write_lagging(void **state) {
  (void)state;
  char path[512];
  write_tick(path, sizeof path, "positions: 61");
  static const int64_t chunks[] = {1, 7, 61};
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++)
    for (int count = 2; count <= 3; count++)
      for (int m = 0; m < 2; m++) {
        char what[128], dir[256], h5[300];
        snprintf(what, sizeof what, "%s, chunks of %lld, %d shards", k_mock_modes[m], (long long)chunks[c], count);
        sl_output_target t;
        memset(&t, 0, sizeof t);
        assert_int_equal(temp_dir_make(dir, sizeof dir, "/tmp/sluice-prefetch-out-XXXXXX"), 0);
        snprintf(t.dir, sizeof t.dir, "%s", dir);
        snprintf(h5, sizeof h5, "%s/results.h5", dir);
        sl_error err;
        assert_int_equal(sl_h5_writer_open(h5, NULL, 0, &t.results, &err), SL_OK);
        sl_run_request req = request_for(path, k_mock_modes[m], chunks[c], &t, &err);
        sl_run runs[3];
        run_split(&req, count, runs, what);
        expect_shard_calls(runs, count, "frames.h5", what);
        assert_int_equal(sl_h5_writer_finish(t.results, runs[0].result.outputs, runs[0].result.n_outputs, &err),
                         SL_OK);
        expect_closed_form_written(dir, what);
        for (int sh = 0; sh < count; sh++) sl_run_free(&runs[sh]);
        assert_int_equal(g_mock.events_alive, 0);
        assert_int_equal(temp_dir_remove(dir), 0);
      }
}

/* A lent output read by host nodes alone on a device backend: its node runs
 * on the host and lends it there, as on the CPU; nothing goes to the device
 * (no buffer, no ring, no staging) and the writer reads each chunk before
 * the node's next call poisons it (tick fills its other buffer with 0xab). */
static void t_lent_to_a_writer_on_device(void **state) {
  (void)state;
  char path[512];
  write_temp_file(path, sizeof path, "prefetch_tick_alone.yaml",
                  "pipeline: t\nnodes:\n"
                  "  tick: {type: tick, params: {positions: 61, lend: 1}}\n"
                  "outputs: {frames: tick.frames}\n");
  static const int64_t chunks[] = {1, 7, 61};
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++) {
    char what[96], dir[256];
    snprintf(what, sizeof what, "lent to the writer, chunks of %lld", (long long)chunks[c]);
    sl_run got;
    run_into_results(path, "mock", chunks[c], what, dir, sizeof dir, &got);
    int i = sl_graph_find(got.graph, "tick");
    const sl_plan_buffer *bf = &got.plan->buffers[sl_plan_buffer_index(got.plan, i, 0)];
    if (!got.plan->nodes[i].host || !bf->lent || bf->slot != -1 || bf->ring_slot != -1 || bf->bytes != 0)
      fail_msg("%s: not lent on the host (host %d lent %d slot %d ring %d bytes %lld)", what,
               got.plan->nodes[i].host, bf->lent, bf->slot, bf->ring_slot, (long long)bf->bytes);
    assert_int_equal(got.plan->staging_bytes, 0);
    assert_int_equal(got.plan->slot_bytes, 0);
    assert_int_equal(got.result.node_calls[i], sl_plan_node_pass(got.plan, i)->n_chunks);
    assert_int_equal(g_produced_max, -1); /* its CPU kernel ran, not produce */
    expect_closed_form_written(dir, what);
    assert_int_equal(g_mock.events_alive, 0);
    sl_run_free(&got);
    assert_int_equal(temp_dir_remove(dir), 0);
  }
}

/* Every stored chunk of results.h5's `frames` in dir: its bytes, filter
 * mask and offset, in order, as one string of bytes for comparison. */
static size_t stored_chunks(const char *dir, uint8_t *buf, size_t cap) {
  char h5[300];
  snprintf(h5, sizeof h5, "%s/results.h5", dir);
  hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "frames", H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t sp = H5Dget_space(d);
  hsize_t n = 0;
  assert_true(H5Dget_num_chunks(d, sp, &n) >= 0);
  assert_true(n > 0);
  size_t at = 0;
  for (hsize_t k = 0; k < n; k++) {
    hsize_t off[3];
    unsigned mask;
    haddr_t addr;
    hsize_t size;
    assert_true(H5Dget_chunk_info(d, sp, k, off, &mask, &addr, &size) >= 0);
    assert_true(at + sizeof off + sizeof mask + size <= cap);
    memcpy(buf + at, off, sizeof off), at += sizeof off;
    memcpy(buf + at, &mask, sizeof mask), at += sizeof mask;
    uint32_t got_mask = 0;
    assert_true(H5Dread_chunk(d, H5P_DEFAULT, off, &got_mask, buf + at) >= 0);
    at += size;
  }
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

/* hdf5_source's stored chunks repacked on the mock device (repack.yaml's
 * shape): lent on the host, and results.h5's stored chunks are the CPU
 * run's, byte for byte, over chunkings that split stored chunks and span
 * files. */
static void t_source_lent_to_a_writer_on_device(void **state) {
  (void)state;
  if (!g_compressed) skip(); /* stored chunks need the bitshuffle plugin's dataset */
  char path[512], text[1024];
  snprintf(text, sizeof text,
           "pipeline: p\nnodes:\n"
           "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
           "outputs: {frames: src.frames}\n",
           g_master);
  write_temp_file(path, sizeof path, "prefetch_repack.yaml", text);
  static const int64_t chunks[] = {4, 8, 12, 100};
  size_t cap = 4 << 20;
  uint8_t *want = malloc(cap), *have = malloc(cap);
  assert_non_null(want);
  assert_non_null(have);
  for (int c = 0; c < (int)SL_COUNT_OF(chunks); c++) {
    char what[96], dir[256];
    sl_run ref, got;
    snprintf(what, sizeof what, "repacked, chunks of %lld", (long long)chunks[c]);
    run_into_results(path, "cpu", chunks[c], what, dir, sizeof dir, &ref);
    size_t n_want = stored_chunks(dir, want, cap);
    assert_int_equal(temp_dir_remove(dir), 0);
    run_into_results(path, "mock", chunks[c], what, dir, sizeof dir, &got);
    int i = sl_graph_find(got.graph, "src");
    if (!got.plan->nodes[i].host || !got.plan->buffers[sl_plan_buffer_index(got.plan, i, 0)].lent)
      fail_msg("%s: the source's stored chunks are not lent on the host", what);
    assert_int_equal(got.plan->staging_bytes, 0);
    size_t n_have = stored_chunks(dir, have, cap);
    if (n_have != n_want || memcmp(want, have, n_want) != 0)
      fail_msg("%s: results.h5's stored chunks differ from the CPU run's", what);
    assert_int_equal(g_mock.events_alive, 0);
    sl_run_free(&got);
    sl_run_free(&ref);
    assert_int_equal(temp_dir_remove(dir), 0);
  }
  free(want);
  free(have);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_hdf5_source_against_cpu),
      cmocka_unit_test(t_writer_lags_on_device),
      cmocka_unit_test(t_shards_write_lagging),
      cmocka_unit_test(t_lent_to_a_writer_on_device),
      cmocka_unit_test(t_source_lent_to_a_writer_on_device),
      cmocka_unit_test(t_source_before_the_prologue),
      cmocka_unit_test(t_tick_closed_form),
      cmocka_unit_test(t_shards),
      cmocka_unit_test(t_copy_waits_apart),
      cmocka_unit_test(t_lent_output),
      cmocka_unit_test(t_produce_error),
      cmocka_unit_test(t_cancel),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
