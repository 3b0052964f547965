/* Declared reductions and variable-size outputs, through the whole engine
 * (graph, plan, executor) on the CPU backend: test nodes defined here
 * declare sum/min/max/concat combines and variable-size ports, and every
 * result is checked against a reference computed here from the ramp's closed
 * form (element e of position p is (p * item + e) mod 1024), over chunk
 * sizes and thread counts. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>
#include <hdf5.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/exec/sinks.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

#define NPOS 37
#define ITEM 6

/* ---- extremes: per element, the sum, least and largest over the scan. The
 * kernel only folds its chunk into out[]; the executor merges. */
static sl_code extremes_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  int64_t item = sl_desc_item_elems(x);
  for (int k = 0; k < 3; k++) n->out[k] = sl_desc_make(SL_F64, 1, &item, 0);
  return SL_OK;
}

static void no_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c);
}

static sl_code extremes_cpu(sl_kernel_args *a) {
  int64_t item = sl_desc_item_elems(&a->node->in[0]);
  const double *x = a->in[0];
  double *sum = a->out[0], *lo = a->out[1], *hi = a->out[2];
  for (int64_t p = 0; p < a->pos_count; p++)
    for (int64_t e = 0; e < item; e++) {
      double v = x[p * item + e];
      sum[e] += v;
      if (v < lo[e]) lo[e] = v;
      if (v > hi[e]) hi[e] = v;
    }
  return SL_OK;
}

static const sl_port_def x_in[] = {{"x", "streamed values", NULL, false}};
static const sl_port_def extremes_out[] = {
    {"sum", "sum over the scan", NULL, false}, {"lo", "least", NULL, false}, {"hi", "largest", NULL, false}};

static const sl_node_desc extremes = {
    .type = "t_extremes", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = extremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = extremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}};

/* t_extremes' kernel folds into out[]: declared so (fold_outputs), it is
 * handed the run's accumulators instead of chunk partials. */
static const sl_node_desc fold = {
    .type = "t_fold", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = extremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = extremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}, .fold_outputs = 7u};

/* ---- encoded: position p emits (v mod 5) bytes v, v+1, ... where v is its
 * element 0: a variable number of bytes per position, at most 4. As a whole
 * concat (t_encode) or as a stream of variable-size chunks (t_spill) that
 * t_join concatenates. t_liar claims more than its bound. */
static int64_t emit(int64_t v, uint8_t *out) {
  int64_t n = v % 5;
  for (int64_t j = 0; j < n; j++) out[j] = (uint8_t)(v + j);
  return n;
}

static int64_t four_per_position(const sl_node *n, int port, int64_t positions) {
  (void)n, (void)port;
  return 4 * positions;
}

static sl_code encode_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  int64_t bound = 4 * sl_desc_positions(&n->in[0]);
  n->out[0] = sl_desc_make(SL_U8, 1, &bound, 0);
  return SL_OK;
}

static sl_code encode_cpu(sl_kernel_args *a) {
  int64_t item = sl_desc_item_elems(&a->node->in[0]), w = 0;
  const double *x = a->in[0];
  for (int64_t p = 0; p < a->pos_count; p++) w += emit((int64_t)x[p * item], (uint8_t *)a->out[0] + w);
  a->out_bytes[0] = w;
  return SL_OK;
}

static sl_code liar_cpu(sl_kernel_args *a) {
  a->out_bytes[0] = a->out_bytes[0] + 1;
  return SL_OK;
}

static const sl_port_def bytes_out[] = {{"bytes", "variable-size bytes", NULL, false}};

static const sl_node_desc encode = {
    .type = "t_encode", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = encode_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = encode_cpu}, .combine = {SL_COMBINE_CONCAT},
    .out_bound = four_per_position};

static const sl_node_desc liar = {
    .type = "t_liar", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = encode_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = liar_cpu}, .combine = {SL_COMBINE_CONCAT},
    .out_bound = four_per_position};

static sl_code spill_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  int64_t dims[SL_MAX_RANK];
  for (int i = 0; i < x->stream_rank; i++) dims[i] = x->dims[i];
  dims[x->stream_rank] = 4;
  n->out[0] = sl_desc_make(SL_U8, x->stream_rank + 1, dims, x->stream_rank);
  return SL_OK;
}

static const sl_node_desc spill = {
    .type = "t_spill", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = spill_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = encode_cpu}, .out_bound = four_per_position};

static sl_code join_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "bytes: streamed");
  int64_t bound = 4 * sl_desc_positions(&n->in[0]);
  n->out[0] = sl_desc_make(SL_U8, 1, &bound, 0);
  return SL_OK;
}

/* Copies exactly what the producer wrote: in_bytes, not the buffer's size. */
static sl_code join_cpu(sl_kernel_args *a) {
  if (a->in_bytes[0] > a->out_bytes[0])
    return sl_fail(a->err, SL_ERR_INTERNAL, "in %lld > bound %lld", (long long)a->in_bytes[0],
                   (long long)a->out_bytes[0]);
  memcpy(a->out[0], a->in[0], (size_t)a->in_bytes[0]);
  a->out_bytes[0] = a->in_bytes[0];
  return SL_OK;
}

static const sl_port_def bytes_in[] = {{"bytes", "variable-size stream", NULL, false}};

static const sl_node_desc join = {
    .type = "t_join", .doc = "test", .inputs = bytes_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = join_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = join_cpu}, .combine = {SL_COMBINE_CONCAT},
    .out_bound = four_per_position};

/* ---- packed: the same bytes, one item per position in the packed layout
 * (sl_packed_items: header, entries, items), each entry's origin a number of
 * the producer's own (origin_of). As a whole concat (t_pack: each chunk's
 * packed buffer appended) or as a stream (t_packstream) that t_packjoin
 * checks (sl_packed_check on what the producer wrote) and concatenates. */
static uint64_t origin_of(int64_t p) { return (uint64_t)p * 7u + 3u; }

static int64_t packed_per_position(const sl_node *n, int port, int64_t positions) {
  (void)n, (void)port;
  return sl_packed_bound(positions, 4);
}

static sl_code pack_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  int64_t bound = packed_per_position(n, 0, sl_desc_positions(&n->in[0]));
  n->out[0] = sl_desc_make(SL_U8, 1, &bound, 0);
  return SL_OK;
}

static sl_code pack_cpu(sl_kernel_args *a) {
  int64_t item = sl_desc_item_elems(&a->node->in[0]);
  const double *x = a->in[0];
  sl_packed_items *pk = a->out[0];
  pk->n = (uint64_t)a->pos_count;
  pk->reserved = 0;
  uint64_t w = sizeof *pk + pk->n * sizeof(sl_packed_entry);
  for (int64_t p = 0; p < a->pos_count; p++) {
    int64_t size = emit((int64_t)x[p * item], (uint8_t *)a->out[0] + w);
    pk->entries[p] = (sl_packed_entry){.offset = w, .size = (uint64_t)size, .first_position = a->pos_start + p,
                                       .n_positions = 1, .origin = origin_of(a->pos_start + p)};
    w += (uint64_t)size;
  }
  a->out_bytes[0] = (int64_t)w;
  return SL_OK;
}

static sl_code packstream_infer(sl_node *n, sl_error *err) {
  sl_code rc = spill_infer(n, err);
  if (rc == SL_OK) n->out[0].dims[n->out[0].stream_rank] = packed_per_position(n, 0, 1);
  return rc;
}

/* Copies exactly what the producer wrote, once its entries check out. */
static sl_code packjoin_cpu(sl_kernel_args *a) {
  sl_code rc = sl_packed_check(a->in[0], a->in_bytes[0], a->err);
  return rc == SL_OK ? join_cpu(a) : rc;
}

static sl_code packjoin_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "packed: streamed");
  int64_t bound = packed_per_position(n, 0, sl_desc_positions(&n->in[0]));
  n->out[0] = sl_desc_make(SL_U8, 1, &bound, 0);
  return SL_OK;
}

static const sl_node_desc pack = {
    .type = "t_pack", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = pack_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = pack_cpu}, .combine = {SL_COMBINE_CONCAT},
    .out_bound = packed_per_position};

static const sl_node_desc packstream = {
    .type = "t_packstream", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = packstream_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = pack_cpu}, .out_bound = packed_per_position};

static const sl_node_desc packjoin = {
    .type = "t_packjoin", .doc = "test", .inputs = bytes_in, .n_inputs = 1, .outputs = bytes_out,
    .n_outputs = 1, .infer = packjoin_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = packjoin_cpu}, .combine = {SL_COMBINE_CONCAT},
    .out_bound = packed_per_position};

/* ---- per-worker partials. t_ints turns the ramp into u64 values spread
 * over the whole range (sums wrap many times, so a partial merged twice,
 * missed, or not reset to the identity shows). t_wextremes folds them into
 * a sum, least and largest per element, each worker into its own partial
 * (positions split among the workers); t_wfloat asks the same of f64. */
#define WRAP_BASE 0xFFFFFFFFFFFFF000ull
#define WRAP_STEP 0x9E3779B97F4A7C15ull

static uint64_t wrap_value(int64_t p, int64_t e) { return WRAP_BASE + (uint64_t)ramp_expected(p, ITEM, e) * WRAP_STEP; }

static sl_code ints_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank || n->in[0].dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  n->out[0] = n->in[0];
  n->out[0].dtype = SL_U64;
  return SL_OK;
}

static sl_code ints_cpu(sl_kernel_args *a) {
  const double *x = a->in[0];
  uint64_t *y = a->out[0];
  for (int64_t i = 0; i < a->pos_count * sl_desc_item_elems(&a->node->in[0]); i++)
    y[i] = WRAP_BASE + (uint64_t)x[i] * WRAP_STEP;
  return SL_OK;
}

static const sl_port_def y_out[] = {{"y", "u64 values", NULL, false}};

static const sl_node_desc ints = {
    .type = "t_ints", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = y_out, .n_outputs = 1,
    .infer = ints_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = ints_cpu}};

static sl_code wextremes_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  int64_t item = sl_desc_item_elems(x);
  for (int k = 0; k < 3; k++) n->out[k] = sl_desc_make(x->dtype, 1, &item, 0);
  return SL_OK;
}

typedef struct wfold {
  const sl_kernel_args *a;
  int64_t item;
  bool lent; /* every worker found its partials */
} wfold;

/* A worker's positions, into its own partials (u64 sum, min, max). */
static void wfold_range(void *ctx, int64_t begin, int64_t end, int worker) {
  wfold *j = ctx;
  uint64_t *sum = sl_worker_partial(j->a, 0, worker), *lo = sl_worker_partial(j->a, 1, worker),
           *hi = sl_worker_partial(j->a, 2, worker);
  if (!sum || !lo || !hi) {
    j->lent = false;
    return;
  }
  const uint64_t *x = j->a->in[0];
  for (int64_t p = begin; p < end; p++)
    for (int64_t e = 0; e < j->item; e++) {
      uint64_t v = x[p * j->item + e];
      sum[e] += v;
      if (v < lo[e]) lo[e] = v;
      if (v > hi[e]) hi[e] = v;
    }
}

static sl_code wextremes_cpu(sl_kernel_args *a) {
  wfold j = {a, sl_desc_item_elems(&a->node->in[0]), true};
  a->backend->ops->parallel_for(a->backend, a->pos_count, 1, wfold_range, &j);
  return j.lent ? SL_OK : sl_fail(a->err, SL_ERR_INTERNAL, "a worker found no partial");
}

static const sl_node_desc wextremes = {
    .type = "t_wextremes", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = wextremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = wextremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}, .worker_partial_outputs = 7u};

static const sl_node_desc wfloat = {
    .type = "t_wfloat", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = wextremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = wextremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}, .worker_partial_outputs = 2u};

/* t_wextremes folded: its workers' partials are merged into the run's
 * accumulators, not into chunk partials. */
static const sl_node_desc wfold_node = {
    .type = "t_wfold", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = wextremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = wextremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}, .worker_partial_outputs = 7u,
    .fold_outputs = 7u};

/* t_wfold with its workers' partials kept for the pass
 * (SL_WORKER_PARTIALS_PASS): each worker's gathers its ranges of every
 * chunk, merged into the accumulators once after the last. */
static sl_worker_partials pfold_partials(const sl_node *n, int port) {
  (void)n, (void)port;
  return SL_WORKER_PARTIALS_PASS;
}

static const sl_node_desc pfold_node = {
    .type = "t_pfold", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 3, .infer = wextremes_infer, .cost = no_cost,
    .kernel = {[SL_BACKEND_CPU] = wextremes_cpu},
    .combine = {SL_COMBINE_SUM, SL_COMBINE_MIN, SL_COMBINE_MAX}, .worker_partials_of = pfold_partials,
    .fold_outputs = 7u};

/* ---- merged by the node (SL_COMBINE_MERGE). t_span's partial is i64
 * (first position + 1, last position + 1, positions): its kernel fails
 * unless the partial starts at zero bytes, and its merge fails unless the
 * partial follows the accumulator in scan order, so the test sees the
 * identity and the order. t_chan keeps per element a count, a mean and the
 * sum of squared deviations of the chunk's values (f64 [3, item]), merged by
 * Chan's formula: what no element-wise combine gives. */
static sl_code span_infer(sl_node *n, sl_error *err) {
  if (!n->in[0].stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  int64_t three = 3;
  n->out[0] = sl_desc_make(SL_I64, 1, &three, 0);
  return SL_OK;
}

static sl_code span_cpu(sl_kernel_args *a) {
  int64_t *s = a->out[0];
  if (s[0] || s[1] || s[2]) return sl_fail(a->err, SL_ERR_INTERNAL, "partial not at the identity");
  s[0] = a->pos_start + 1, s[1] = a->pos_start + a->pos_count, s[2] = a->pos_count;
  return SL_OK;
}

static sl_code span_merge(sl_kernel_args *a) {
  int64_t *acc = a->out[0];
  const int64_t *p = a->in[0];
  if (a->in_bytes[0] != 24 || a->out_bytes[0] != 24 || p[0] != a->pos_start + 1)
    return sl_fail(a->err, SL_ERR_INTERNAL, "merge given chunk %lld's args wrong", (long long)a->chunk);
  if (acc[2] && p[0] != acc[1] + 1) /* (a shard's first partial starts where its chunks do) */
    return sl_fail(a->err, SL_ERR_INTERNAL, "partial from %lld merged after %lld", (long long)p[0], (long long)acc[1]);
  if (!acc[0]) acc[0] = p[0];
  acc[1] = p[1], acc[2] += p[2];
  return SL_OK;
}

static const sl_port_def span_out[] = {{"span", "first + 1, last + 1, positions", NULL, false}};

static const sl_node_desc span = {
    .type = "t_span", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = span_out, .n_outputs = 1,
    .infer = span_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = span_cpu},
    .combine = {SL_COMBINE_MERGE}, .merge = {[SL_BACKEND_CPU] = span_merge}};

/* The same without a merge kernel, and folded: both refused. */
static const sl_node_desc span_unmerged = {
    .type = "t_span_unmerged", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = span_out,
    .n_outputs = 1, .infer = span_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = span_cpu},
    .combine = {SL_COMBINE_MERGE}};
static const sl_node_desc span_folded = {
    .type = "t_span_folded", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = span_out,
    .n_outputs = 1, .infer = span_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = span_cpu},
    .combine = {SL_COMBINE_MERGE}, .merge = {[SL_BACKEND_CPU] = span_merge}, .fold_outputs = 1u};

static sl_code chan_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  int64_t dims[2] = {3, sl_desc_item_elems(x)};
  n->out[0] = sl_desc_make(SL_F64, 2, dims, 0);
  return SL_OK;
}

/* The chunk's count, mean and squared deviations, two passes. */
static sl_code chan_cpu(sl_kernel_args *a) {
  int64_t item = sl_desc_item_elems(&a->node->in[0]);
  const double *x = a->in[0];
  double *cnt = a->out[0], *mean = cnt + item, *m2 = mean + item;
  for (int64_t e = 0; e < item; e++) {
    double s = 0, q = 0;
    for (int64_t p = 0; p < a->pos_count; p++) s += x[p * item + e];
    double mu = s / (double)a->pos_count;
    for (int64_t p = 0; p < a->pos_count; p++) q += (x[p * item + e] - mu) * (x[p * item + e] - mu);
    cnt[e] = (double)a->pos_count, mean[e] = mu, m2[e] = q;
  }
  return SL_OK;
}

static sl_code chan_merge(sl_kernel_args *a) {
  int64_t item = a->out_bytes[0] / 24;
  double *n = a->out[0], *mean = n + item, *m2 = mean + item;
  const double *pn = a->in[0], *pmean = pn + item, *pm2 = pmean + item;
  for (int64_t e = 0; e < item; e++) {
    double total = n[e] + pn[e], d = pmean[e] - mean[e];
    if (total == 0) continue;
    mean[e] += d * pn[e] / total;
    m2[e] += pm2[e] + d * d * n[e] * pn[e] / total;
    n[e] = total;
  }
  return SL_OK;
}

static const sl_port_def chan_out[] = {{"moments", "count, mean, squared deviations", NULL, false}};

static const sl_node_desc chan = {
    .type = "t_chan", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = chan_out, .n_outputs = 1,
    .infer = chan_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = chan_cpu},
    .combine = {SL_COMBINE_MERGE}, .merge = {[SL_BACKEND_CPU] = chan_merge}};

/* ---- wide: 20 outputs (more than the 8 ports nodes once had), output k
 * the sum over the scan of (k + 1) x, each merged by the executor; t_toowide
 * declares 33, one more than a node may have. */
#define WIDE 20
static sl_code wide_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  int64_t item = sl_desc_item_elems(x);
  for (int k = 0; k < n->n_out; k++) n->out[k] = sl_desc_make(SL_F64, 1, &item, 0);
  return SL_OK;
}

static sl_code wide_cpu(sl_kernel_args *a) {
  int64_t item = sl_desc_item_elems(&a->node->in[0]);
  const double *x = a->in[0];
  for (int k = 0; k < a->node->n_out; k++)
    for (int64_t p = 0; p < a->pos_count; p++)
      for (int64_t e = 0; e < item; e++) ((double *)a->out[k])[e] += (k + 1) * x[p * item + e];
  return SL_OK;
}

static const sl_port_def wide_out[33] = {
    {"w0", "", NULL, false},  {"w1", "", NULL, false},  {"w2", "", NULL, false},  {"w3", "", NULL, false},
    {"w4", "", NULL, false},  {"w5", "", NULL, false},  {"w6", "", NULL, false},  {"w7", "", NULL, false},
    {"w8", "", NULL, false},  {"w9", "", NULL, false},  {"w10", "", NULL, false}, {"w11", "", NULL, false},
    {"w12", "", NULL, false}, {"w13", "", NULL, false}, {"w14", "", NULL, false}, {"w15", "", NULL, false},
    {"w16", "", NULL, false}, {"w17", "", NULL, false}, {"w18", "", NULL, false}, {"w19", "", NULL, false},
    {"w20", "", NULL, false}, {"w21", "", NULL, false}, {"w22", "", NULL, false}, {"w23", "", NULL, false},
    {"w24", "", NULL, false}, {"w25", "", NULL, false}, {"w26", "", NULL, false}, {"w27", "", NULL, false},
    {"w28", "", NULL, false}, {"w29", "", NULL, false}, {"w30", "", NULL, false}, {"w31", "", NULL, false},
    {"w32", "", NULL, false}};

#define SUM4 SL_COMBINE_SUM, SL_COMBINE_SUM, SL_COMBINE_SUM, SL_COMBINE_SUM
static const sl_node_desc wide = {
    .type = "t_wide", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = wide_out, .n_outputs = WIDE,
    .infer = wide_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = wide_cpu},
    .combine = {SUM4, SUM4, SUM4, SUM4, SUM4}};
static const sl_node_desc toowide = {
    .type = "t_toowide", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = wide_out, .n_outputs = 33,
    .infer = wide_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = wide_cpu}};
#undef SUM4

/* ---- scan axes last: t_pixmajor writes its f64 input pixel-major, [item..,
 * scan..] (a declared concat_scan_last): each chunk its own column block,
 * at the place the executor points out[0] at, rows a scan apart. It checks
 * the executor's side: out_bytes[0] spans from the chunk's first element
 * to the whole output's end. t_pixmajor_bad declares the same for an
 * output whose last axis is not the scan's; t_undeclared accumulates into
 * a whole output it declares nothing for; t_finals writes its mean at
 * finalize alone (finalize_outputs) from its folded sum, and checks that
 * no chunk's call sees it; t_finals_nofin and t_finals_combined break
 * that contract. */
static sl_code pixmajor_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->dtype != SL_F64) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed f64");
  int64_t dims[SL_MAX_RANK];
  int item_rank = x->rank - x->stream_rank;
  for (int i = 0; i < item_rank; i++) dims[i] = x->dims[x->stream_rank + i];
  for (int i = 0; i < x->stream_rank; i++) dims[item_rank + i] = x->dims[i];
  n->out[0] = sl_desc_make(SL_F64, x->rank, dims, 0);
  return SL_OK;
}

static sl_code pixmajor_cpu(sl_kernel_args *a) {
  const int64_t item = sl_desc_item_elems(&a->node->in[0]), npos = sl_desc_positions(&a->node->in[0]);
  if (a->out_bytes[0] != (item * npos - a->pos_start) * 8)
    return sl_fail(a->err, SL_ERR_INTERNAL, "out_bytes %lld at position %lld", (long long)a->out_bytes[0],
                   (long long)a->pos_start);
  const double *x = a->in[0];
  double *y = a->out[0];
  for (int64_t p = 0; p < a->pos_count; p++)
    for (int64_t e = 0; e < item; e++) y[e * npos + p] = x[p * item + e];
  return SL_OK;
}

static sl_code scanfirst_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed");
  n->out[0] = sl_desc_make(SL_F64, x->rank, x->dims, 0); /* scan axes first */
  return SL_OK;
}

static const sl_port_def pixmajor_out[] = {{"pixel_major", "x, item axes first", NULL, false}};
static const sl_node_desc pixmajor = {
    .type = "t_pixmajor", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = pixmajor_out,
    .n_outputs = 1, .infer = pixmajor_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = pixmajor_cpu},
    .combine = {SL_COMBINE_CONCAT_SCAN_LAST}};
static const sl_node_desc pixmajor_bad = {
    .type = "t_pixmajor_bad", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = pixmajor_out,
    .n_outputs = 1, .infer = scanfirst_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = pixmajor_cpu},
    .combine = {SL_COMBINE_CONCAT_SCAN_LAST}};
static const sl_node_desc undeclared = {
    .type = "t_undeclared", .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = extremes_out,
    .n_outputs = 1, .infer = extremes_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = extremes_cpu}};

static sl_code finals_infer(sl_node *n, sl_error *err) {
  sl_code rc = extremes_infer(n, err);
  if (rc == SL_OK) n->out[1] = n->out[0];
  return rc;
}

static sl_code finals_cpu(sl_kernel_args *a) {
  if (a->out[1] || a->out_bytes[1])
    return sl_fail(a->err, SL_ERR_INTERNAL, "the mean reached chunk %lld", (long long)a->chunk);
  const int64_t item = sl_desc_item_elems(&a->node->in[0]);
  const double *x = a->in[0];
  double *sum = a->out[0];
  for (int64_t p = 0; p < a->pos_count; p++)
    for (int64_t e = 0; e < item; e++) sum[e] += x[p * item + e];
  return SL_OK;
}

static sl_code finals_finalize(sl_kernel_args *a) {
  const int64_t item = sl_desc_item_elems(&a->node->in[0]), npos = sl_desc_positions(&a->node->in[0]);
  const double *sum = a->out[0];
  double *mean = a->out[1];
  if (!mean) return sl_fail(a->err, SL_ERR_INTERNAL, "finalize got no mean");
  for (int64_t e = 0; e < item; e++) mean[e] = sum[e] / (double)npos;
  return SL_OK;
}

static const sl_port_def finals_out[] = {{"sum", "sum over the scan", NULL, false},
                                         {"mean", "sum / positions, at finalize", NULL, false}};
#define FINALS(NAME, FIN, COMBINE1)                                                                   \
  static const sl_node_desc NAME = {                                                                  \
      .type = #NAME, .doc = "test", .inputs = x_in, .n_inputs = 1, .outputs = finals_out,             \
      .n_outputs = 2, .infer = finals_infer, .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = finals_cpu}, \
      .finalize = {[SL_BACKEND_CPU] = FIN}, .combine = {SL_COMBINE_SUM, COMBINE1}, .fold_outputs = 1u,  \
      .finalize_outputs = 2u};
FINALS(t_finals, finals_finalize, SL_COMBINE_NONE)
FINALS(t_finals_nofin, NULL, SL_COMBINE_NONE)
FINALS(t_finals_combined, finals_finalize, SL_COMBINE_MAX)
#undef FINALS

/* The project's node families and this test's. */
static const sl_node_desc *const test_nodes[] = {&extremes,   &fold,     &encode, &liar,      &spill,
                                                 &join,       &pack,     &packstream, &packjoin, &ints,
                                                 &wextremes, &wfloat, &wfold_node, &pfold_node,
                                                 &span,      &span_unmerged, &span_folded, &chan,
                                                 &wide,      &toowide,   &pixmajor, &pixmajor_bad,
                                                 &undeclared, &t_finals, &t_finals_nofin, &t_finals_combined};
static const sl_node_family test_family = {"test", test_nodes, SL_COUNT_OF(test_nodes)};

static const sl_node_registry *registry(void) { return registry_with(&test_family); }

/* The run of a pipeline; with `target`, its outputs written by the run's
 * writer nodes there. */
static sl_code run_text_into(const char *name, const char *text, int64_t chunk, int threads,
                             sl_output_target *target, sl_run *run, sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, name, text);
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU,
                        .chunk_positions = chunk, .threads = threads, .outputs = target};
  sl_error_clear(err);
  return sl_run_pipeline(&req, run, err);
}

static sl_code run_text(const char *name, const char *text, int64_t chunk, int threads, sl_run *run,
                        sl_error *err) {
  return run_text_into(name, text, chunk, threads, NULL, run, err);
}

#define RAMP_NODE "  src: {type: ramp, params: {positions: [37], item_shape: [6], dtype: f64}}\n"

static const int64_t k_chunks[] = {1, 3, 7, 36, NPOS};

/* Checks one run of each_chunking's pipeline. */
typedef void (*run_check)(const sl_run *run, int64_t chunk, int threads, const void *ctx);

/* The pipeline at every chunking of k_chunks with 1 .. max_threads workers,
 * each run checked by `check`. */
static void each_chunking(const char *name, const char *text, int max_threads, run_check check, const void *ctx) {
  for (size_t c = 0; c < SL_COUNT_OF(k_chunks); c++)
    for (int threads = 1; threads <= max_threads; threads++) {
      sl_run run;
      sl_error err;
      if (run_text(name, text, k_chunks[c], threads, &run, &err) != SL_OK)
        fail_msg("%s, chunk %lld, %d threads: %s", name, (long long)k_chunks[c], threads, err.msg);
      check(&run, k_chunks[c], threads, ctx);
      sl_run_free(&run);
    }
}

typedef struct float_extremes {
  double sum[ITEM], lo[ITEM], hi[ITEM];
} float_extremes;

static void check_extremes(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)chunk, (void)threads;
  const float_extremes *x = ctx;
  const double *s = output(run, "sum")->data, *l = output(run, "lo")->data, *h = output(run, "hi")->data;
  for (int e = 0; e < ITEM; e++) {
    assert_true(s[e] == x->sum[e]);
    assert_true(l[e] == x->lo[e]);
    assert_true(h[e] == x->hi[e]);
  }
  /* The plan lends one partial per element-wise output, whole-sized. */
  int partials = 0;
  for (int b = 0; b < run->plan->n_buffers; b++)
    if (run->plan->buffers[b].partial_bytes) {
      partials++;
      assert_int_equal(run->plan->buffers[b].partial_bytes, ITEM * 8);
    }
  assert_int_equal(partials, 3);
  assert_true(run->plan->partial_bytes >= 3 * ITEM * 8);
}

static void test_sum_min_max_merged_by_executor(void **state) {
  (void)state;
  float_extremes x;
  memset(&x, 0, sizeof x);
  for (int e = 0; e < ITEM; e++) x.lo[e] = INFINITY, x.hi[e] = -INFINITY;
  for (int64_t p = 0; p < NPOS; p++)
    for (int e = 0; e < ITEM; e++) {
      double v = ramp_expected(p, ITEM, e);
      x.sum[e] += v; /* integers below 2^53: exact in any order */
      x.lo[e] = fmin(x.lo[e], v);
      x.hi[e] = fmax(x.hi[e], v);
    }
  each_chunking("extremes.yaml",
                "pipeline: extremes\nnodes:\n" RAMP_NODE
                "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                "outputs: {sum: r.sum, lo: r.lo, hi: r.hi}\n",
                2, check_extremes, &x);
}

typedef struct wrapped {
  uint64_t sum[ITEM], lo[ITEM], hi[ITEM];
} wrapped;

/* The wrapping u64 sums, least and largest values of t_ints' output, from
 * the closed form. */
static void wrapped_expected(wrapped *x) {
  memset(x, 0, sizeof *x);
  for (int e = 0; e < ITEM; e++) x->lo[e] = UINT64_MAX, x->hi[e] = 0;
  for (int64_t p = 0; p < NPOS; p++)
    for (int e = 0; e < ITEM; e++) {
      uint64_t v = wrap_value(p, e);
      x->sum[e] += v;
      x->lo[e] = v < x->lo[e] ? v : x->lo[e];
      x->hi[e] = v > x->hi[e] ? v : x->hi[e];
    }
}

static void check_worker_partials(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  const wrapped *x = ctx;
  const uint64_t *t = output(run, "total")->data, *s = output(run, "sum")->data, *l = output(run, "lo")->data,
                 *h = output(run, "hi")->data, *s2 = output(run, "sum2")->data;
  const double *ft = output(run, "ftotal")->data;
  for (int e = 0; e < ITEM; e++) {
    if (t[e] != x->sum[e] || s[e] != x->sum[e] || s2[e] != x->sum[e] || l[e] != x->lo[e] || h[e] != x->hi[e])
      fail_msg("chunk %lld, %d threads, element %d", (long long)chunk, threads, e);
    double want = 0;
    for (int64_t p = 0; p < NPOS; p++) want += ramp_expected(p, ITEM, e);
    assert_true(ft[e] == want);
  }
  /* Planned: t_wextremes's three partials of 6 u64 each (64 bytes
   * apiece) per worker, the largest per-call block; after it the integer
   * sum's partial per worker, kept for the pass (a worker adds its own
   * positions; no chunk partial: it folds). */
  const sl_plan *p = run->plan;
  assert_int_equal(p->worker_scratch_stride, 4 * 64);
  assert_int_equal(p->worker_scratch_bytes, 4 * 64 * threads);
  for (int i = 0; i < p->graph->n_nodes; i++) {
    const sl_node *n = &p->graph->nodes[i];
    const int64_t *off = p->nodes[i].worker_partial_offset;
    assert_int_equal(p->nodes[i].pass_partials, !strcmp(n->id, "s") ? 1u : 0u);
    if (!strcmp(n->id, "s")) assert_true(off[0] == 3 * 64);
    else if (!strcmp(n->id, "w") || !strcmp(n->id, "v")) assert_true(off[0] == 0 && off[1] == 64 && off[2] == 128);
    else assert_true(off[0] == -1);
    if (!strcmp(n->id, "f")) assert_int_equal(sl_node_out_combine(n, 0), SL_COMBINE_SUM);
    if (!strcmp(n->id, "s")) assert_int_equal(sl_node_out_combine(n, 0), SL_COMBINE_SUM);
  }
  for (int b = 0; b < p->n_buffers; b++) {
    const char *id = p->graph->nodes[p->buffers[b].node].id;
    if (!strcmp(id, "s")) assert_int_equal(p->buffers[b].partial_bytes, 0);
    if (!strcmp(id, "w")) assert_int_equal(p->buffers[b].partial_bytes, ITEM * 8);
  }
}

/* Folded reductions (fold_outputs) against the same closed forms: t_fold's
 * kernel into the accumulators itself, t_wfold's workers' partials merged
 * into them, with t_extremes (chunk partials) beside them; over chunk
 * sizes and 1-3 workers. Planned: no chunk partial for the folded nodes.
 * An executor that handed the folded kernels a fresh buffer at each chunk
 * (or merged nothing) would leave the last chunk's values. */
typedef struct folded {
  float_extremes f;
  wrapped w;
} folded;

static void check_folded(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  const folded *x = ctx;
  const double *s = output(run, "sum")->data, *l = output(run, "lo")->data, *h = output(run, "hi")->data,
               *s0 = output(run, "sum0")->data;
  const uint64_t *ws = output(run, "wsum")->data, *wl = output(run, "wlo")->data, *wh = output(run, "whi")->data;
  const uint64_t *ps = output(run, "psum")->data, *pl = output(run, "plo")->data, *ph = output(run, "phi")->data;
  for (int e = 0; e < ITEM; e++)
    if (s[e] != x->f.sum[e] || l[e] != x->f.lo[e] || h[e] != x->f.hi[e] || s0[e] != x->f.sum[e] ||
        ws[e] != x->w.sum[e] || wl[e] != x->w.lo[e] || wh[e] != x->w.hi[e] || ps[e] != x->w.sum[e] ||
        pl[e] != x->w.lo[e] || ph[e] != x->w.hi[e])
      fail_msg("chunk %lld, %d threads, element %d", (long long)chunk, threads, e);
  const sl_plan *p = run->plan;
  /* t_pfold's three partials per worker lie after the per-call block
   * (t_wfold's three), each worker's for the whole run. */
  assert_int_equal(p->worker_scratch_stride, 6 * 64);
  for (int i = 0; i < p->graph->n_nodes; i++) {
    const bool pf = !strcmp(p->graph->nodes[i].id, "p");
    assert_int_equal(p->nodes[i].pass_partials, pf ? 7u : 0u);
    for (int k = 0; pf && k < 3; k++) assert_int_equal(p->nodes[i].worker_partial_offset[k], (3 + k) * 64);
  }
  for (int b = 0; b < p->n_buffers; b++) {
    const char *id = p->graph->nodes[p->buffers[b].node].id;
    if (!strcmp(id, "r") || !strcmp(id, "w")) assert_int_equal(p->buffers[b].partial_bytes, 0);
    if (!strcmp(id, "e")) assert_int_equal(p->buffers[b].partial_bytes, ITEM * 8);
  }
}

static void test_folded_reductions(void **state) {
  (void)state;
  folded x;
  memset(&x, 0, sizeof x);
  for (int e = 0; e < ITEM; e++)
    x.f.lo[e] = INFINITY, x.f.hi[e] = -INFINITY, x.w.lo[e] = UINT64_MAX, x.w.hi[e] = 0;
  for (int64_t p = 0; p < NPOS; p++)
    for (int e = 0; e < ITEM; e++) {
      double v = ramp_expected(p, ITEM, e);
      x.f.sum[e] += v;
      x.f.lo[e] = fmin(x.f.lo[e], v);
      x.f.hi[e] = fmax(x.f.hi[e], v);
      uint64_t u = wrap_value(p, e);
      x.w.sum[e] += u;
      x.w.lo[e] = u < x.w.lo[e] ? u : x.w.lo[e];
      x.w.hi[e] = u > x.w.hi[e] ? u : x.w.hi[e];
    }
  each_chunking("folded.yaml",
                "pipeline: folded\nnodes:\n" RAMP_NODE
                "  ints: {type: t_ints, inputs: {x: src.out}}\n"
                "  r: {type: t_fold, inputs: {x: src.out}}\n"
                "  e: {type: t_extremes, inputs: {x: src.out}}\n"
                "  w: {type: t_wfold, inputs: {x: ints.y}}\n"
                "  p: {type: t_pfold, inputs: {x: ints.y}}\n"
                "outputs: {sum: r.sum, lo: r.lo, hi: r.hi, sum0: e.sum, wsum: w.sum, wlo: w.lo, whi: w.hi, "
                "psum: p.sum, plo: p.lo, phi: p.hi}\n",
                3, check_folded, &x);
}

/* Partials kept for the pass in a loop's streaming body, run 1, 2 and 5
 * times: every iteration's pass starts them from the identity again, so
 * the last iteration's sums, least and largest values (t_pfold, and the
 * integer sum node's) are one pass's. An executor that left them as the
 * previous iteration did would give k times the sums; one that did not
 * merge them would give the identities. */
static void test_pass_partials_in_a_loop(void **state) {
  (void)state;
  wrapped x;
  wrapped_expected(&x);
  char body[512];
  write_temp_file(body, sizeof body, "pbody.yaml",
                  "pipeline: pbody\ninputs: [c]\nnodes:\n" RAMP_NODE
                  "  ints: {type: t_ints, inputs: {x: src.out}}\n"
                  "  p: {type: t_pfold, inputs: {x: ints.y}}\n"
                  "  s: {type: sum, inputs: {x: ints.y}}\n"
                  "  next: {type: affine, inputs: {x: inputs.c}}\n"
                  "outputs: {c: next.y, psum: p.sum, plo: p.lo, phi: p.hi, total: s.total}\n");
  const int times[] = {1, 2, 5};
  for (size_t t = 0; t < SL_COUNT_OF(times); t++)
    for (int threads = 1; threads <= 3; threads++) {
      char text[512];
      snprintf(text, sizeof text,
               "pipeline: ploop\nnodes:\n"
               "  c0: {type: constant, params: {shape: [1], value: 0}}\n"
               "  loop: {iterate: pbody.yaml, times: %d, inputs: {c: c0.out}, carry: [c]}\n"
               "outputs: {psum: loop.psum, plo: loop.plo, phi: loop.phi, total: loop.total}\n",
               times[t]);
      sl_run run;
      sl_error err;
      if (run_text("ploop.yaml", text, 7, threads, &run, &err) != SL_OK)
        fail_msg("%d times, %d threads: %s", times[t], threads, err.msg);
      const uint64_t *ps = output(&run, "psum")->data, *pl = output(&run, "plo")->data,
                     *ph = output(&run, "phi")->data, *tot = output(&run, "total")->data;
      for (int e = 0; e < ITEM; e++)
        if (ps[e] != x.sum[e] || pl[e] != x.lo[e] || ph[e] != x.hi[e] || tot[e] != x.sum[e])
          fail_msg("%d times, %d threads, element %d: sum %llu (want %llu), total %llu", times[t], threads, e,
                   (unsigned long long)ps[e], (unsigned long long)x.sum[e], (unsigned long long)tot[e]);
      sl_run_free(&run);
    }
}

/* Partials per worker, through the whole engine with 1, 2 and 3 workers and
 * several chunk sizes: the sum node's integer case and t_wextremes (twice)
 * all in one level, so their partials share the workers' scratch one call
 * after another; against wrapping u64 sums, least and largest values worked
 * out here from the closed form. The plan counts the partials in the
 * workers' scratch, and the float sum keeps no declared combine. */
static void test_worker_partials_merged_by_executor(void **state) {
  (void)state;
  wrapped x;
  wrapped_expected(&x);
  each_chunking("wpartials.yaml",
                "pipeline: wpartials\nnodes:\n" RAMP_NODE
                "  ints: {type: t_ints, inputs: {x: src.out}}\n"
                "  s: {type: sum, inputs: {x: ints.y}}\n"
                "  f: {type: sum, inputs: {x: src.out}}\n"
                "  w: {type: t_wextremes, inputs: {x: ints.y}}\n"
                "  v: {type: t_wextremes, inputs: {x: ints.y}}\n"
                "outputs: {total: s.total, ftotal: f.total, sum: w.sum, lo: w.lo, hi: w.hi, "
                "sum2: v.sum}\n",
                3, check_worker_partials, &x);
}

/* The bytes position p emits, and how many, from the ramp's closed form. */
static int64_t expected_stream(uint8_t *out, int64_t from, int64_t to) {
  int64_t w = 0;
  for (int64_t p = from; p < to; p++) {
    int64_t v = (int64_t)ramp_expected(p, ITEM, 0), n = v % 5;
    for (int64_t j = 0; j < n; j++) out[w + j] = (uint8_t)(v + j);
    w += n;
  }
  return w;
}

static void check_concat(const sl_run *run, const char *name, int64_t chunk) {
  uint8_t want[4 * NPOS];
  int64_t total = expected_stream(want, 0, NPOS);
  const sl_output_data *o = output(run, name);
  assert_int_equal(o->desc.rank, 1);
  assert_int_equal(o->desc.dims[0], total);
  assert_memory_equal(o->data, want, (size_t)total);
  int64_t n_chunks = (NPOS + chunk - 1) / chunk;
  assert_int_equal(o->n_chunk_bytes, n_chunks);
  for (int64_t c = 0; c < n_chunks; c++) {
    uint8_t scratch[4 * NPOS];
    int64_t to = (c + 1) * chunk < NPOS ? (c + 1) * chunk : NPOS;
    assert_int_equal(o->chunk_bytes[c], expected_stream(scratch, c * chunk, to));
  }
}

/* A variable-size concat written by write_h5: the dataset holds what the
 * chunks wrote (not the bound), with each chunk's share in its chunk_bytes
 * attribute; the run's result holds none of it. */
static void test_variable_size_concat_written(void **state) {
  (void)state;
  const int64_t chunks[] = {3, 7};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) {
    char dir[] = "/tmp/sl-writers-XXXXXX", h5[600];
    assert_non_null(mkdtemp(dir));
    snprintf(h5, sizeof h5, "%s/results.h5", dir);
    sl_output_target target = {.results = NULL};
    snprintf(target.dir, sizeof target.dir, "%s", dir);
    sl_error err;
    sl_error_clear(&err);
    assert_int_equal(sl_h5_writer_open(h5, NULL, 0, &target.results, &err), SL_OK);
    sl_run run;
    sl_code rc = run_text_into("encode_w.yaml",
                               "pipeline: encode\nnodes:\n" RAMP_NODE
                               "  e: {type: t_encode, inputs: {x: src.out}}\n"
                               "outputs: {direct: e.bytes}\n",
                               chunks[c], 1, &target, &run, &err);
    if (rc != SL_OK) fail_msg("chunk %lld: %s", (long long)chunks[c], err.msg);
    const sl_output_data *o = output(&run, "direct");
    assert_true(o->written);
    assert_null(o->data);
    assert_int_equal(sl_h5_writer_finish(target.results, run.result.outputs, run.result.n_outputs, &err), SL_OK);
    uint8_t want[4 * NPOS], got[4 * NPOS];
    int64_t total = expected_stream(want, 0, NPOS);
    hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "direct", H5P_DEFAULT);
    hid_t space = H5Dget_space(ds);
    hsize_t dims[1] = {0};
    assert_int_equal(H5Sget_simple_extent_ndims(space), 1);
    H5Sget_simple_extent_dims(space, dims, NULL);
    assert_int_equal((int64_t)dims[0], total);
    assert_true(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    assert_memory_equal(got, want, (size_t)total);
    int64_t n_chunks = (NPOS + chunks[c] - 1) / chunks[c], shares[NPOS];
    hid_t attr = H5Aopen(ds, "chunk_bytes", H5P_DEFAULT);
    assert_true(attr >= 0 && H5Aread(attr, H5T_NATIVE_INT64, shares) >= 0);
    for (int64_t k = 0; k < n_chunks; k++) {
      uint8_t scratch[4 * NPOS];
      int64_t to = (k + 1) * chunks[c] < NPOS ? (k + 1) * chunks[c] : NPOS;
      assert_int_equal(shares[k], expected_stream(scratch, k * chunks[c], to));
    }
    H5Aclose(attr);
    H5Sclose(space);
    H5Dclose(ds);
    H5Fclose(f);
    remove(h5);
    rmdir(dir);
    sl_run_free(&run);
  }
}

static void check_variable_concat(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)threads, (void)ctx;
  check_concat(run, "direct", chunk);
  check_concat(run, "joined", chunk);
  /* Planned: the concat's capacity is every chunk's bound; the stream's
   * buffer one chunk's bound. */
  for (int b = 0; b < run->plan->n_buffers; b++) {
    const sl_plan_buffer *bf = &run->plan->buffers[b];
    if (!bf->variable) continue;
    assert_int_equal(bf->bytes, bf->streamed ? 4 * chunk : 4 * NPOS);
    if (!bf->streamed) assert_int_equal(bf->partial_bytes, 4 * chunk);
  }
}

static void test_variable_size_concat(void **state) {
  (void)state;
  each_chunking("encode.yaml",
                "pipeline: encode\nnodes:\n" RAMP_NODE
                "  e: {type: t_encode, inputs: {x: src.out}}\n"
                "  s: {type: t_spill, inputs: {x: src.out}}\n"
                "  j: {type: t_join, inputs: {bytes: s.bytes}}\n"
                "outputs: {direct: e.bytes, joined: j.bytes}\n",
                2, check_variable_concat, NULL);
}

/* A concat of packed buffers, read back chunk by chunk (chunk_bytes): each
 * share is one chunk's header, an entry per position and its bytes, packed
 * tightly, every entry as the closed form says. */
static void check_packed_concat(const sl_run *run, const char *name, int64_t chunk) {
  const sl_output_data *o = output(run, name);
  int64_t n_chunks = (NPOS + chunk - 1) / chunk, at = 0;
  assert_int_equal(o->n_chunk_bytes, n_chunks);
  const uint8_t *base = o->data;
  for (int64_t c = 0; c < n_chunks; c++) {
    int64_t from = c * chunk, to = (c + 1) * chunk < NPOS ? (c + 1) * chunk : NPOS;
    /* a share starts where the previous one ended: read it aligned */
    assert_true(o->chunk_bytes[c] >= 16 && at + o->chunk_bytes[c] <= o->desc.dims[0]);
    sl_packed_items *pk = malloc((size_t)o->chunk_bytes[c]);
    memcpy(pk, base + at, (size_t)o->chunk_bytes[c]);
    assert_int_equal(pk->n, (uint64_t)(to - from));
    uint64_t w = 16 + pk->n * 48; /* the header, then 48-byte entries */
    for (int64_t p = from; p < to; p++) {
      const sl_packed_entry *e = &pk->entries[p - from];
      uint8_t want[4];
      int64_t size = expected_stream(want, p, p + 1);
      assert_int_equal(e->offset, w);
      assert_int_equal(e->size, (uint64_t)size);
      assert_int_equal(e->flags, 0);
      assert_int_equal(e->first_position, p);
      assert_int_equal(e->n_positions, 1);
      assert_int_equal(e->origin, origin_of(p));
      assert_memory_equal((const uint8_t *)pk + e->offset, want, (size_t)size);
      w += (uint64_t)size;
    }
    assert_int_equal(o->chunk_bytes[c], (int64_t)w);
    free(pk);
    at += (int64_t)w;
  }
  assert_int_equal(o->desc.dims[0], at);
}

static void check_packed_concats(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)threads, (void)ctx;
  check_packed_concat(run, "direct", chunk);
  check_packed_concat(run, "joined", chunk);
}

/* Issue 9's concat of variable-size outputs in the packed layout: a node's
 * packed buffer per chunk, concatenated by the executor (t_pack) or by a
 * node reading the stream (t_packjoin), read back entry by entry. */
static void test_packed_concat(void **state) {
  (void)state;
  each_chunking("packed.yaml",
                "pipeline: packed\nnodes:\n" RAMP_NODE
                "  p: {type: t_pack, inputs: {x: src.out}}\n"
                "  s: {type: t_packstream, inputs: {x: src.out}}\n"
                "  j: {type: t_packjoin, inputs: {bytes: s.bytes}}\n"
                "outputs: {direct: p.bytes, joined: j.bytes}\n",
                2, check_packed_concats, NULL);
}

/* The node's merge (t_span, t_chan) against the closed form over every
 * chunking: t_span's kernel and merge check the identity and the scan
 * order themselves; t_chan's count, mean and variance against two passes
 * over all positions in long double. Planned: one whole-sized partial. */
static void check_node_merges(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)ctx;
  const int64_t *sp = output(run, "span")->data;
  if (sp[0] != 1 || sp[1] != NPOS || sp[2] != NPOS)
    fail_msg("chunk %lld, %d threads: span %lld %lld %lld", (long long)chunk, threads, (long long)sp[0],
             (long long)sp[1], (long long)sp[2]);
  const double *m = output(run, "moments")->data;
  for (int e = 0; e < ITEM; e++) {
    long double s = 0, q = 0;
    for (int64_t p = 0; p < NPOS; p++) s += ramp_expected(p, ITEM, e);
    long double mu = s / NPOS;
    for (int64_t p = 0; p < NPOS; p++) q += (ramp_expected(p, ITEM, e) - mu) * (ramp_expected(p, ITEM, e) - mu);
    if (m[e] != NPOS || fabsl(m[ITEM + e] - mu) > 1e-12L * fabsl(mu) || fabsl(m[2 * ITEM + e] - q) > 1e-12L * q)
      fail_msg("chunk %lld, %d threads, element %d: %g %g %g against %d %Lg %Lg", (long long)chunk, threads, e,
               m[e], m[ITEM + e], m[2 * ITEM + e], NPOS, mu, q);
  }
  int partials = 0;
  for (int b = 0; b < run->plan->n_buffers; b++)
    if (run->plan->buffers[b].partial_bytes) {
      partials++;
      assert_int_equal(run->plan->buffers[b].combine, SL_COMBINE_MERGE);
      const sl_tensor_desc *d = &run->plan->graph->nodes[run->plan->buffers[b].node].out[0];
      assert_int_equal(run->plan->buffers[b].partial_bytes, sl_desc_bytes(d));
    }
  assert_int_equal(partials, 2);
}

static void test_node_merge(void **state) {
  (void)state;
  each_chunking("merges.yaml",
                "pipeline: merges\nnodes:\n" RAMP_NODE
                "  s: {type: t_span, inputs: {x: src.out}}\n"
                "  c: {type: t_chan, inputs: {x: src.out}}\n"
                "outputs: {span: s.span, moments: c.moments}\n",
                2, check_node_merges, NULL);
}

/* Twenty outputs, every one merged by the executor and named in the
 * pipeline's outputs, against the closed form. */
static void check_wide(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)ctx;
  for (int k = 0; k < WIDE; k++) {
    char name[8];
    snprintf(name, sizeof name, "w%d", k);
    const double *w = output(run, name)->data;
    for (int e = 0; e < ITEM; e++) {
      double want = 0;
      for (int64_t p = 0; p < NPOS; p++) want += (k + 1) * ramp_expected(p, ITEM, e);
      if (w[e] != want) fail_msg("chunk %lld, %d threads, w%d[%d]: %g, not %g", (long long)chunk, threads, k, e, w[e], want);
    }
  }
}

static void test_twenty_ports(void **state) {
  (void)state;
  char text[2048];
  int at = snprintf(text, sizeof text, "pipeline: wide\nnodes:\n" RAMP_NODE
                    "  w: {type: t_wide, inputs: {x: src.out}}\noutputs: {");
  for (int k = 0; k < WIDE; k++) at += snprintf(text + at, sizeof text - (size_t)at, "%sw%d: w.w%d", k ? ", " : "", k, k);
  snprintf(text + at, sizeof text - (size_t)at, "}\n");
  each_chunking("wide.yaml", text, 2, check_wide, NULL);
}

/* A pipeline of the test nodes that must fail with `code` and `needle` in
 * the message; the error as it came. */
static sl_error run_refused(const char *name, const char *nodes, sl_code code, const char *needle) {
  char text[512];
  snprintf(text, sizeof text, "pipeline: p\nnodes:\n" RAMP_NODE "%s", nodes);
  sl_run run;
  sl_error err;
  sl_code rc = run_text(name, text, 5, 1, &run, &err);
  if (rc != code || !strstr(err.msg, needle))
    fail_msg("%s: expected %d with '%s', got %d '%s'", name, code, needle, rc, err.msg);
  sl_run_free(&run);
  return err;
}

static void test_bound_overrun_is_an_error(void **state) {
  (void)state;
  sl_error err = run_refused("liar.yaml", "  l: {type: t_liar, inputs: {x: src.out}}\noutputs: {b: l.bytes}\n",
                             SL_ERR_INTERNAL, "outside its bound");
  assert_string_equal(err.node, "l");
  assert_int_equal(err.chunk, 0);
}

/* Partials per worker of floats would give bits that follow how
 * parallel_for split the range: the graph refuses them. */
static void test_float_worker_partials_refused(void **state) {
  (void)state;
  sl_error err = run_refused("wfloat.yaml", "  w: {type: t_wfloat, inputs: {x: src.out}}\noutputs: {lo: w.lo}\n",
                             SL_ERR_INTERNAL, "depends on how the range was split");
  assert_string_equal(err.node, "w");
  assert_non_null(strstr(err.msg, "min of f64"));
}

/* A node-supplied merge needs a merge kernel where the node has a kernel,
 * and is never folded by the kernel. */
static void test_node_merge_refused(void **state) {
  (void)state;
  sl_error err = run_refused("unmerged.yaml", "  u: {type: t_span_unmerged, inputs: {x: src.out}}\noutputs: {s: u.span}\n",
                             SL_ERR_INTERNAL, "has no cpu kernel");
  assert_string_equal(err.node, "u");
  run_refused("folded.yaml", "  f: {type: t_span_folded, inputs: {x: src.out}}\noutputs: {s: f.span}\n",
              SL_ERR_INTERNAL, "is folded by the kernel");
}

static void test_too_many_ports_refused(void **state) {
  (void)state;
  sl_error err = run_refused("toowide.yaml", "  t: {type: t_toowide, inputs: {x: src.out}}\noutputs: {w: t.w0}\n",
                             SL_ERR_INTERNAL, "at most 32");
  assert_string_equal(err.node, "t");
}

/* A stream of variable-size chunks as an output with no sink to write it
 * (test_ragged_output.c has the writer's side). */
static void test_variable_stream_output_refused(void **state) {
  (void)state;
  run_refused("spilled.yaml", "  s: {type: t_spill, inputs: {x: src.out}}\noutputs: {b: s.bytes}\n",
              SL_ERR_PIPELINE, "stream of variable-size items");
}

/* concat_scan_last through the executor: one scan axis and two, every
 * chunking and 1-3 threads, each element against the ramp's closed form
 * (a block written at the wrong column, or relative to the whole output's
 * start, shows), and nothing planned or merged for it. */
static void check_pixmajor(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)threads;
  const int64_t npos = *(const int64_t *)ctx;
  const sl_output_data *o = output(run, "pm");
  assert_int_equal(o->desc.rank, 1 + (npos == NPOS ? 1 : 2));
  assert_int_equal(o->desc.dims[0], ITEM);
  const double *y = o->data;
  for (int64_t e = 0; e < ITEM; e++)
    for (int64_t p = 0; p < npos; p++)
      if (y[e * npos + p] != ramp_expected(p, ITEM, e))
        fail_msg("chunk %lld: element %lld of position %lld is %g", (long long)chunk, (long long)e, (long long)p,
                 y[e * npos + p]);
  for (int b = 0; b < run->plan->n_buffers; b++)
    if (!strcmp(run->plan->graph->nodes[run->plan->buffers[b].node].id, "t")) {
      assert_int_equal(run->plan->buffers[b].combine, SL_COMBINE_CONCAT_SCAN_LAST);
      assert_int_equal(run->plan->buffers[b].partial_bytes, 0);
    }
}

static void test_concat_scan_last(void **state) {
  (void)state;
  const int64_t one = NPOS, two = 35;
  each_chunking("pixmajor.yaml",
                "pipeline: pm\nnodes:\n" RAMP_NODE "  t: {type: t_pixmajor, inputs: {x: src.out}}\n"
                "outputs: {pm: t.pixel_major}\n",
                3, check_pixmajor, &one);
  each_chunking("pixmajor2.yaml",
                "pipeline: pm\nnodes:\n"
                "  src: {type: ramp, params: {positions: [5, 7], item_shape: [6], dtype: f64}}\n"
                "  t: {type: t_pixmajor, inputs: {x: src.out}}\n"
                "outputs: {pm: t.pixel_major}\n",
                3, check_pixmajor, &two);
  assert_string_equal(sl_combine_name(SL_COMBINE_CONCAT_SCAN_LAST), "concat_scan_last");
}

/* An output written at finalize alone: no chunk's call sees it, finalize
 * has it (and the folded sum), the mean is right at every chunking. */
static void check_finals(const sl_run *run, int64_t chunk, int threads, const void *ctx) {
  (void)chunk, (void)threads, (void)ctx;
  const double *sum = output(run, "sum")->data, *mean = output(run, "mean")->data;
  for (int e = 0; e < ITEM; e++) {
    double want = 0;
    for (int64_t p = 0; p < NPOS; p++) want += ramp_expected(p, ITEM, e);
    assert_true(sum[e] == want);
    assert_true(mean[e] == want / NPOS);
  }
}

static void test_finalize_outputs(void **state) {
  (void)state;
  each_chunking("finals.yaml",
                "pipeline: f\nnodes:\n" RAMP_NODE "  f: {type: t_finals, inputs: {x: src.out}}\n"
                "outputs: {sum: f.sum, mean: f.mean}\n",
                2, check_finals, NULL);
}

/* What accumulates across chunks is the executor's to merge: a whole output
 * of a node that streams with no combine is refused, as are a scan-last
 * concat whose last axes are not the scan's and a finalize-only output
 * without a finalize or with a combine. */
static void test_undeclared_reductions_refused(void **state) {
  (void)state;
  sl_error err = run_refused("undeclared.yaml", "  u: {type: t_undeclared, inputs: {x: src.out}}\noutputs: {s: u.sum}\n",
                             SL_ERR_INTERNAL, "declares no combine");
  assert_string_equal(err.node, "u");
  assert_non_null(strstr(err.msg, "'sum'"));
  run_refused("pmbad.yaml", "  t: {type: t_pixmajor_bad, inputs: {x: src.out}}\noutputs: {p: t.pixel_major}\n",
              SL_ERR_INTERNAL, "last axes are not the scan's");
  run_refused("nofin.yaml", "  f: {type: t_finals_nofin, inputs: {x: src.out}}\noutputs: {m: f.mean}\n",
              SL_ERR_INTERNAL, "written at finalize alone, which has no cpu kernel");
  run_refused("combined.yaml", "  f: {type: t_finals_combined, inputs: {x: src.out}}\noutputs: {m: f.mean}\n",
              SL_ERR_INTERNAL, "written at finalize alone but declares combine max");
}

/* The host merges against values worked out by hand: wrapping integer sums,
 * identities, NaN kept by min/max, complex sums, and the refusal of an
 * ordering of complex values. */
static void test_host_merges(void **state) {
  (void)state;
  uint8_t a8[2] = {250, 1}, b8[2] = {10, 2};
  sl_combine_merge_host(SL_COMBINE_SUM, SL_U8, a8, b8, 0, 2);
  assert_int_equal(a8[0], 4);
  assert_int_equal(a8[1], 3);
  int32_t a32[1] = {INT32_MAX}, b32[1] = {1};
  sl_combine_merge_host(SL_COMBINE_SUM, SL_I32, a32, b32, 0, 1);
  assert_int_equal(a32[0], INT32_MIN);
  int64_t i64[3];
  sl_combine_identity_host(SL_COMBINE_MIN, SL_I64, i64, 0, 3);
  assert_true(i64[2] == INT64_MAX);
  sl_combine_identity_host(SL_COMBINE_MAX, SL_I64, i64, 1, 3);
  assert_true(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == INT64_MIN);
  double d[3] = {1, NAN, 5}, p[3] = {NAN, 2, 3};
  sl_combine_merge_host(SL_COMBINE_MIN, SL_F64, d, p, 0, 3);
  assert_true(isnan(d[0]) && isnan(d[1]) && d[2] == 3);
  float c[4] = {1, 2, 3, 4}, q[4] = {0.5f, -2, 1, 1};
  sl_combine_merge_host(SL_COMBINE_SUM, SL_C64, c, q, 1, 2);
  assert_true(c[0] == 1 && c[1] == 2 && c[2] == 4 && c[3] == 5);
  uint16_t u[2] = {7, 9}, v[2] = {8, 3};
  sl_combine_merge_host(SL_COMBINE_MAX, SL_U16, u, v, 0, 2);
  assert_true(u[0] == 8 && u[1] == 9);
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_combine_check(SL_COMBINE_MAX, SL_C64, &err), SL_ERR_PIPELINE);
  assert_int_equal(sl_combine_check(SL_COMBINE_SUM, SL_C64, &err), SL_OK);
  assert_string_equal(sl_combine_name(SL_COMBINE_CONCAT), "concat");
  assert_string_equal(sl_combine_name(SL_COMBINE_MERGE), "merge");
  double z[2] = {7, 8}, zp[2] = {1, 1};
  sl_combine_identity_host(SL_COMBINE_MERGE, SL_F64, z, 0, 2); /* a node's merge starts from zero bytes */
  assert_true(z[0] == 0 && z[1] == 0);
  sl_combine_merge_host(SL_COMBINE_MERGE, SL_F64, z, zp, 0, 2); /* the node merges, not the host */
  assert_true(z[0] == 0 && z[1] == 0);
}

/* ---- A run split into shards (engine/exec/shard.h): every declared
 * reduction merged across the shards after its pass, each shard streaming
 * its own chunks, gives the outputs of one run: bit for bit, but where a
 * float sum or a node's merge of floats is regrouped per shard (`approx`:
 * within 1e-10 (|expected| + 1)). 2, 3 and 5 shards (more shards than chunks too), each
 * at chunks of 1, 5 and 36 positions. */
static bool approx_output(const char *name, const char *const *approx) {
  for (int i = 0; approx && approx[i]; i++)
    if (!strcmp(name, approx[i])) return true;
  return false;
}

static void expect_same_output(const char *what, const sl_output_data *want, const sl_output_data *got, bool approx) {
  int64_t bytes = sl_desc_bytes(&want->desc);
  if (sl_desc_bytes(&got->desc) != bytes) fail_msg("%s: %lld bytes, expected %lld", what, (long long)sl_desc_bytes(&got->desc), (long long)bytes);
  assert_int_equal(got->n_chunk_bytes, want->n_chunk_bytes);
  for (int64_t c = 0; c < want->n_chunk_bytes; c++)
    if (got->chunk_bytes[c] != want->chunk_bytes[c])
      fail_msg("%s: chunk %lld wrote %lld bytes, expected %lld", what, (long long)c, (long long)got->chunk_bytes[c],
               (long long)want->chunk_bytes[c]);
  if (!approx) {
    if (bytes && memcmp(got->data, want->data, (size_t)bytes)) {
      const uint8_t *g = got->data, *w = want->data;
      int64_t at = 0;
      while (g[at] == w[at]) at++;
      fail_msg("%s: differs first at byte %lld of %lld", what, (long long)at, (long long)bytes);
    }
    return;
  }
  assert_int_equal(want->desc.dtype, SL_F64);
  const double *g = got->data, *w = want->data;
  for (int64_t e = 0; e < bytes / 8; e++)
    if (!(fabs(g[e] - w[e]) <= 1e-10 * (fabs(w[e]) + 1)))
      fail_msg("%s: element %lld is %.17g, expected %.17g", what, (long long)e, g[e], w[e]);
}

/* ops: the shards' backend table (NULL: the CPU's; device_like_ops(): the
 * merge staged through the host, a node's merge through its partial). */
static void expect_shards_match_on(const sl_backend_ops *ops, const char *name, const char *text,
                                   const char *const *approx) {
  char path[512];
  write_temp_file(path, sizeof path, name, text);
  const int64_t chunks[] = {1, 5, 36};
  const int counts[] = {2, 3, 5};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) {
    sl_run one;
    sl_error err;
    sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU,
                          .chunk_positions = chunks[c], .threads = 1};
    if (sl_run_pipeline(&req, &one, &err) != SL_OK) fail_msg("%s, one run: %s", name, err.msg);
    for (size_t k = 0; k < SL_COUNT_OF(counts); k++) {
      sl_run runs[5];
      sl_run_request split = req;
      split.threads = counts[k];
      split.ops_override = ops;
      if (sl_run_pipeline_shards(&split, counts[k], runs, &err) != SL_OK)
        fail_msg("%s, chunk %lld, %d shards: %s", name, (long long)chunks[c], counts[k], err.msg);
      for (int s = 0; s < counts[k]; s++) {
        const sl_run *r = &runs[s];
        assert_int_equal(r->plan->shards, counts[k]);
        assert_true(r->result.measured_peak_bytes <= r->result.planned_peak_bytes);
        /* the merges' host buffers (gathered, packed, staged) within the
         * plan's, and not far below (a variable size's bound may be: it
         * gathers what was written); shard 0's result holds the sums over
         * the shards */
        assert_true(r->result.measured_host_bytes <= r->result.planned_host_bytes);
        const int64_t planned = r->plan->shard_exchange_bytes * (s == 0 ? counts[k] : 1);
        const int64_t grown = r->result.measured_exchange_bytes;
        bool variable = false;
        for (int b = 0; b < r->plan->n_buffers; b++)
          variable |= r->plan->buffers[b].reduction && r->plan->buffers[b].variable;
        if (grown > planned || (!variable && planned > grown * 3 / 2 + 1024))
          fail_msg("%s, chunk %lld, %d shards, shard %d: the merges grew %lld bytes, the plan has %lld", name,
                   (long long)chunks[c], counts[k], s, (long long)grown, (long long)planned);
        for (int o = 0; o < one.result.n_outputs; o++) {
          const sl_output_data *want = &one.result.outputs[o];
          /* shard 0 holds every output whole; the others their own
           * positions of a streamed one */
          if (s > 0 && one.graph->nodes[one.graph->outputs[o].node].out[one.graph->outputs[o].port].stream_rank)
            continue;
          char what[256];
          snprintf(what, sizeof what, "%s%s, chunk %lld, shard %d of %d, output '%s'", name,
                   ops ? " (device-like)" : "", (long long)chunks[c], s, counts[k], want->name);
          expect_same_output(what, want, &r->result.outputs[o], approx_output(want->name, approx));
        }
      }
      for (int s = 0; s < counts[k]; s++) sl_run_free(&runs[s]);
    }
    sl_run_free(&one);
  }
}

/* ops NULL: the CPU backend; else the device-like one (no worker partials
 * there: the CPU's only). */
static void shards_every_combine(const sl_backend_ops *ops) {
  /* sum, min, max (f64 of integers: exact in any grouping), a streamed
   * output, folds with worker partials kept per pass */
  expect_shards_match_on(ops, "sh_extremes.yaml",
                         ops ? "pipeline: extremes\nnodes:\n" RAMP_NODE
                               "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                               "  ints: {type: t_ints, inputs: {x: src.out}}\n"
                               "  f: {type: t_fold, inputs: {x: src.out}}\n"
                               "outputs: {sum: r.sum, lo: r.lo, hi: r.hi, x: src.out, y: ints.y, fsum: f.sum}\n"
                             : "pipeline: extremes\nnodes:\n" RAMP_NODE
                               "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                               "  ints: {type: t_ints, inputs: {x: src.out}}\n"
                               "  f: {type: t_fold, inputs: {x: src.out}}\n"
                               "  w: {type: t_wfold, inputs: {x: ints.y}}\n"
                               "  p: {type: t_pfold, inputs: {x: ints.y}}\n"
                               "outputs: {sum: r.sum, lo: r.lo, hi: r.hi, x: src.out, y: ints.y, fsum: f.sum, "
                               "wsum: w.sum, wlo: w.lo, plo: p.lo, phi: p.hi}\n",
                         NULL);
  /* variable-size concats, written and passed on; packed ones */
  expect_shards_match_on(ops, "sh_encode.yaml",
                         "pipeline: encode\nnodes:\n" RAMP_NODE
                         "  e: {type: t_encode, inputs: {x: src.out}}\n"
                         "  s: {type: t_spill, inputs: {x: src.out}}\n"
                         "  j: {type: t_join, inputs: {bytes: s.bytes}}\n"
                         "  p: {type: t_pack, inputs: {x: src.out}}\n"
                         "outputs: {direct: e.bytes, joined: j.bytes, packed: p.bytes}\n",
                         NULL);
  /* the node's merges (Chan's moments regrouped: approx), scan-last
   * concats, an output finalize alone writes */
  static const char *const moments[] = {"moments", NULL};
  expect_shards_match_on(ops, "sh_merges.yaml",
                         "pipeline: merges\nnodes:\n" RAMP_NODE
                         "  s: {type: t_span, inputs: {x: src.out}}\n"
                         "  c: {type: t_chan, inputs: {x: src.out}}\n"
                         "  t: {type: t_pixmajor, inputs: {x: src.out}}\n"
                         "  f: {type: t_finals, inputs: {x: src.out}}\n"
                         "outputs: {span: s.span, moments: c.moments, pm: t.pixel_major, fsum: f.sum, mean: f.mean}\n",
                         moments);
}

static void test_shards_merge_every_combine(void **state) {
  (void)state;
  shards_every_combine(NULL);
  shards_every_combine(device_like_ops());
}

/* Shipped nodes over several passes and streams: an iterate body that
 * streams a table of its own (run whole on every shard) beside a scan the
 * shards split; the mean subtracted in a second pass; a transpose to
 * pixel-major, a pass over the pixels and back; the detector chain of a
 * synthetic acquisition (bright-field disk fitted from the summed pattern,
 * segments, centre of mass, DPC and iDPC after the scan). */
static void shards_shipped_passes(const sl_backend_ops *ops) {
  expect_shards_match_on(ops, "sh_loop.yaml",
                         "pipeline: loop\nnodes:\n" RAMP_NODE
                         "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                         "  c0: {type: constant, params: {shape: [5], value: 0}}\n"
                         "  loop: {iterate: sh_halfway.yaml, times: 3, inputs: {c: c0.out}, carry: [c]}\n"
                         "outputs: {sum: r.sum, lo: r.lo, c: loop.c}\n",
                         NULL);
  static const char *const residual[] = {"residual", NULL}; /* a float sum of non-integers */
  expect_shards_match_on(ops, "sh_center.yaml",
                         "pipeline: center\nnodes:\n"
                         "  r: {type: ramp, params: {positions: [37], item_shape: [8], dtype: f64}}\n"
                         "  s: {type: sum, inputs: {x: r.out}}\n"
                         "  m: {type: affine, inputs: {x: s.total}, params: {scale: 0.02}}\n"
                         "  d: {type: subtract, inputs: {x: r.out, y: m.y}}\n"
                         "  t: {type: sum, inputs: {x: d.out}}\n"
                         "outputs: {centered: d.out, residual: t.total, mean: m.y}\n",
                         residual);
  static const char *const variance[] = {"moments", "mean", "variance", "normalized", NULL};
  expect_shards_match_on(ops, "sh_regions.yaml",
                         "pipeline: regions\nnodes:\n"
                         "  src: {type: synthetic_4dstem, params: {scan_shape: [6, 7], detector_shape: [24, 24]}}\n"
                         "  tp: {type: transpose_scan, inputs: {x: src.frames}}\n"
                         "  pixels: {type: stream, inputs: {x: tp.pixel_major}, params: {axes: 2, name: pixels}}\n"
                         "  per_position: {type: sum, inputs: {x: pixels.out}}\n"
                         "  back: {type: transpose_scan, inputs: {x: pixels.out}}\n"
                         "  var: {type: variance, inputs: {x: src.frames}, params: {ddof: 1}}\n"
                         "outputs: {pixel_major: tp.pixel_major, per_position: per_position.total, "
                         "back: back.pixel_major,\n"
                         "          pixel_stream: pixels.out, moments: var.moments, mean: var.mean,\n"
                         "          variance: var.variance, normalized: var.normalized}\n",
                         variance);
  expect_shards_match_on(ops, "sh_stem.yaml",
                         "pipeline: stem\nnodes:\n"
                         "  src: {type: synthetic_4dstem, params: {scan_shape: [6, 7], detector_shape: [29, 31],\n"
                         "        disk_radius: 9.5, dose: 20000}}\n"
                         "  pattern: {type: sum, inputs: {x: src.frames}}\n"
                         "  disk: {type: disk_fit, inputs: {pattern: pattern.total}}\n"
                         "  images: {type: virtual_detectors, inputs: {frames: src.frames, disk: disk.disk}}\n"
                         "  segments: {type: bf_segments, inputs: {frames: src.frames, disk: disk.disk},\n"
                         "             params: {grid: 7, extent: 0.5}}\n"
                         "  com: {type: com, inputs: {frames: src.frames}}\n"
                         "  dpc: {type: dpc, inputs: {com_row: com.com_row, com_col: com.com_col}}\n"
                         "  idpc: {type: idpc, inputs: {com_row: dpc.com_row_rot, com_col: dpc.com_col_rot}}\n"
                         "outputs: {pattern: pattern.total, bf: images.bf, adf: images.adf, "
                         "segments: segments.segments,\n"
                         "          offsets: segments.offsets, com_row: com.com_row, phase: idpc.phase, "
                         "truth: src.phase}\n",
                         NULL);
}

static void test_shards_shipped_passes(void **state) {
  (void)state;
  char body[512]; /* sh_loop.yaml's body: c <- c + 0.5 mean(rows - c) */
  write_temp_file(body, sizeof body, "sh_halfway.yaml",
                  "pipeline: halfway\ninputs: [c]\nnodes:\n"
                  "  rows: {type: ramp, params: {positions: [29], item_shape: [5], dtype: f64}}\n"
                  "  dev: {type: subtract, inputs: {x: rows.out, y: inputs.c}}\n"
                  "  total: {type: sum, inputs: {x: dev.out}}\n"
                  "  step: {type: affine, inputs: {x: total.total}, params: {scale: -0.0172413793103448}}\n"
                  "  next: {type: subtract, inputs: {x: inputs.c, y: step.y}}\n"
                  "outputs: {c: next.out}\n");
  shards_shipped_passes(NULL);
  shards_shipped_passes(device_like_ops());
}

/* A shard that fails stops the others at their next merge; the error is
 * the failing shard's. */
static void test_shard_failure_reported(void **state) {
  (void)state;
  char path[512];
  write_temp_file(path, sizeof path, "sh_liar.yaml",
                  "pipeline: liar\nnodes:\n" RAMP_NODE
                  "  l: {type: t_liar, inputs: {x: src.out}}\n"
                  "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                  "outputs: {b: l.bytes, sum: r.sum}\n");
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU, .chunk_positions = 5,
                        .threads = 3};
  sl_run runs[3];
  sl_error err;
  sl_error_clear(&err);
  assert_int_not_equal(sl_run_pipeline_shards(&req, 3, runs, &err), SL_OK);
  if (!strstr(err.msg, "outside its bound") || strstr(err.msg, "stops at its merge"))
    fail_msg("expected the failing shard's error, got '%s'", err.msg);
  for (int s = 0; s < 3; s++) sl_run_free(&runs[s]);
}

/* A device-like backend of three devices that counts the backends made on
 * each (create_on) and those made without one (create). */
enum { FAKE_DEVICES = 3 };
static pthread_mutex_t g_made_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_made_on[FAKE_DEVICES], g_made_plain;

static int fake_device_count(void) { return FAKE_DEVICES; }

static sl_code fake_create_on(int device, int threads, sl_backend **out, sl_error *err) {
  if (device < 0 || device >= FAKE_DEVICES) return sl_fail(err, SL_ERR_BACKEND, "no device %d", device);
  pthread_mutex_lock(&g_made_mu);
  g_made_on[device]++;
  pthread_mutex_unlock(&g_made_mu);
  return device_like_create(threads, out, err);
}

static sl_code fake_create(int threads, sl_backend **out, sl_error *err) {
  pthread_mutex_lock(&g_made_mu);
  g_made_plain++;
  pthread_mutex_unlock(&g_made_mu);
  return device_like_create(threads, out, err);
}

static const sl_backend_ops *three_device_ops(void) {
  static sl_backend_ops ops;
  ops = *device_like_ops();
  ops.create = fake_create, ops.device_count = fake_device_count, ops.create_on = fake_create_on;
  return &ops;
}

/* On a backend with devices, shard s is made on device s mod the devices
 * (5 shards on 3: two, two and one), none on the backend's own choice; the
 * budget is the device's memory shared among the shards on one device (a
 * memory limit among all of them); the outputs are one run's. */
static void test_shards_on_devices(void **state) {
  (void)state;
  const sl_backend_ops *ops = three_device_ops();
  char path[512];
  write_temp_file(path, sizeof path, "sh_devices.yaml",
                  "pipeline: devices\nnodes:\n" RAMP_NODE "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                  "outputs: {sum: r.sum, lo: r.lo}\n");
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU, .chunk_positions = 5,
                        .threads = 5, .ops_override = ops};
  sl_run one, runs[5];
  sl_error err;
  sl_run_request plain = req;
  plain.ops_override = NULL;
  if (sl_run_pipeline(&plain, &one, &err) != SL_OK) fail_msg("one run: %s", err.msg);
  memset(g_made_on, 0, sizeof g_made_on), g_made_plain = 0;
  if (sl_run_pipeline_shards(&req, 5, runs, &err) != SL_OK) fail_msg("5 shards: %s", err.msg);
  assert_int_equal(g_made_on[0], 2);
  assert_int_equal(g_made_on[1], 2);
  assert_int_equal(g_made_on[2], 1);
  assert_int_equal(g_made_plain, 0);
  /* shard 0's result says how each shard went, on which device */
  assert_int_equal(runs[0].result.n_shard_timings, 5);
  for (int s = 0; s < 5; s++) {
    const sl_shard_timing *t = &runs[0].result.shard_timings[s];
    assert_int_equal(t->device, s % FAKE_DEVICES);
    assert_true(t->began_after_seconds >= 0 && t->execute_seconds > 0 && t->merge_seconds >= 0);
    assert_true(t->merge_seconds <= t->execute_seconds);
  }
  for (int o = 0; o < one.result.n_outputs; o++)
    expect_same_output(one.result.outputs[o].name, &one.result.outputs[o], &runs[0].result.outputs[o], false);
  for (int s = 0; s < 5; s++) sl_run_free(&runs[s]);
  sl_run_free(&one);
  assert_int_equal(sl_shard_devices(&req), FAKE_DEVICES);
  sl_backend_caps caps;
  assert_int_equal(sl_run_caps(ops, 1, &caps, &err), SL_OK);
  assert_true(sl_shard_budget(&req, 1, 5) == caps.memory_bytes / 2);
  assert_true(sl_shard_budget(&req, 1, 3) == caps.memory_bytes);
  req.memory_limit = 1000;
  assert_true(sl_shard_budget(&req, 1, 5) == 200);
  assert_int_equal(sl_shard_devices(&plain), 0); /* the CPU: none */
}

/* Every dataset of results.h5 in `h5`, by name, as bytes: n names, each
 * dataset's bytes into got[k] (malloc'ed). */
static void read_datasets(const char *h5, const char *const *names, int n, uint8_t **got, size_t *bytes) {
  hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  for (int k = 0; k < n; k++) {
    hid_t ds = H5Dopen2(f, names[k], H5P_DEFAULT);
    if (ds < 0) fail_msg("%s: no dataset %s", h5, names[k]);
    hid_t type = H5Dget_type(ds);
    hid_t space = H5Dget_space(ds);
    bytes[k] = (size_t)H5Sget_simple_extent_npoints(space) * H5Tget_size(type);
    got[k] = malloc(bytes[k] ? bytes[k] : 1);
    assert_non_null(got[k]);
    assert_true(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, got[k]) >= 0);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(ds);
  }
  H5Fclose(f);
}

/* `text` run into a fresh results.h5 (in 1 or `shards` shards), finished;
 * its path in h5 (dir: the folder, removed by the caller). */
static sl_code run_into_file(const char *text, int64_t chunk, int shards, char *dir, char *h5, size_t h5_len,
                             sl_error *err) {
  char path[512];
  write_temp_file(path, sizeof path, "sh_written.yaml", text);
  assert_int_equal(temp_dir_make(dir, 64, "/tmp/sl-shard-out-XXXXXX"), 0);
  snprintf(h5, h5_len, "%s/results.h5", dir);
  sl_output_target target = {.results = NULL};
  snprintf(target.dir, sizeof target.dir, "%s", dir);
  assert_int_equal(sl_h5_writer_open(h5, NULL, 0, &target.results, err), SL_OK);
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU, .chunk_positions = chunk,
                        .threads = 2, .outputs = &target};
  sl_error_clear(err);
  sl_run runs[4];
  sl_code rc = shards > 1 ? sl_run_pipeline_shards(&req, shards, runs, err) : sl_run_pipeline(&req, &runs[0], err);
  if (rc == SL_OK) {
    for (int o = 0; o < runs[0].result.n_outputs; o++) assert_true(runs[0].result.outputs[o].written);
    /* a whole output's writer runs on shard 0 alone; a streamed one's on every shard */
    for (int s = 0; s < (shards > 1 ? shards : 1); s++) {
      const int whole = sl_graph_find(runs[s].graph, "sum.h5"), streamed = sl_graph_find(runs[s].graph, "frames.h5");
      assert_true(whole >= 0 && streamed >= 0);
      assert_int_equal(runs[s].result.node_calls[whole], s == 0 ? 1 : 0);
      assert_true(runs[s].result.node_calls[streamed] > 0 || shards * 2 > runs[s].plan->n_chunks);
    }
    rc = sl_h5_writer_finish(target.results, runs[0].result.outputs, runs[0].result.n_outputs, err);
  } else {
    sl_h5_writer_abandon(target.results);
  }
  for (int s = 0; s < (shards > 1 ? shards : 1); s++) sl_run_free(&runs[s]);
  return rc;
}

/* A run split into shards writes through its sink nodes into one
 * results.h5, as an unsplit run does: a streamed output (each shard its
 * own positions, into the shared writer in turn), a reduction and a
 * variable-size concat (written once, by shard 0), in 2 and 3 shards at
 * several chunkings, byte for byte the unsplit run's datasets (read back
 * with HDF5). A stream of variable-size items, which results.h5 appends in
 * stream order, is refused in a split run, naming the output. */
static void test_shards_write_through_sinks(void **state) {
  (void)state;
  static const char *text = "pipeline: written\nnodes:\n" RAMP_NODE
                            "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                            "  e: {type: t_encode, inputs: {x: src.out}}\n"
                            "outputs: {frames: src.out, sum: r.sum, direct: e.bytes}\n";
  static const char *const names[] = {"frames", "sum", "direct"};
  enum { N = 3 };
  const int64_t chunks[] = {1, 3, 7};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) {
    char dir[64], h5[128];
    sl_error err;
    uint8_t *want[N], *got[N];
    size_t want_bytes[N], got_bytes[N];
    if (run_into_file(text, chunks[c], 1, dir, h5, sizeof h5, &err) != SL_OK) fail_msg("unsplit: %s", err.msg);
    read_datasets(h5, names, N, want, want_bytes);
    assert_int_equal(temp_dir_remove(dir), 0);
    for (int shards = 2; shards <= 3; shards++) {
      if (run_into_file(text, chunks[c], shards, dir, h5, sizeof h5, &err) != SL_OK)
        fail_msg("%d shards, chunk %lld: %s", shards, (long long)chunks[c], err.msg);
      read_datasets(h5, names, N, got, got_bytes);
      for (int k = 0; k < N; k++) {
        if (got_bytes[k] != want_bytes[k] || memcmp(got[k], want[k], want_bytes[k]) != 0)
          fail_msg("%d shards, chunk %lld: dataset %s differs from the unsplit run's", shards, (long long)chunks[c],
                   names[k]);
        free(got[k]);
      }
      assert_int_equal(temp_dir_remove(dir), 0);
    }
    for (int k = 0; k < N; k++) free(want[k]);
  }
  char dir[64], h5[128];
  sl_error err;
  assert_int_equal(run_into_file("pipeline: spilled\nnodes:\n" RAMP_NODE
                                 "  s: {type: t_spill, inputs: {x: src.out}}\noutputs: {b: s.bytes}\n",
                                 3, 2, dir, h5, sizeof h5, &err),
                   SL_ERR_PIPELINE);
  assert_non_null(strstr(err.msg, "output 'b' is a stream of variable-size items"));
  assert_non_null(strstr(err.msg, "run this one unsplit"));
  assert_int_equal(temp_dir_remove(dir), 0);
}

/* One shard is a plain run. */
static void test_one_shard(void **state) {
  (void)state;
  char path[512];
  write_temp_file(path, sizeof path, "sh_one.yaml",
                  "pipeline: one\nnodes:\n" RAMP_NODE "  r: {type: t_extremes, inputs: {x: src.out}}\n"
                  "outputs: {sum: r.sum}\n");
  sl_run_request req = {.file = path, .registry = registry(), .backend = SL_BACKEND_CPU, .chunk_positions = 5,
                        .threads = 2};
  sl_run runs[1];
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_run_pipeline_shards(&req, 1, runs, &err), SL_OK);
  assert_int_equal(runs[0].plan->shards, 1);
  assert_true(((const double *)output(&runs[0], "sum")->data)[0] > 0);
  sl_run_free(&runs[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_min_max_merged_by_executor),
      cmocka_unit_test(test_worker_partials_merged_by_executor),
      cmocka_unit_test(test_folded_reductions),
      cmocka_unit_test(test_concat_scan_last),
      cmocka_unit_test(test_finalize_outputs),
      cmocka_unit_test(test_undeclared_reductions_refused),
      cmocka_unit_test(test_pass_partials_in_a_loop),
      cmocka_unit_test(test_float_worker_partials_refused),
      cmocka_unit_test(test_variable_size_concat),
      cmocka_unit_test(test_variable_size_concat_written),
      cmocka_unit_test(test_packed_concat),
      cmocka_unit_test(test_bound_overrun_is_an_error),
      cmocka_unit_test(test_variable_stream_output_refused),
      cmocka_unit_test(test_host_merges),
      cmocka_unit_test(test_node_merge),
      cmocka_unit_test(test_node_merge_refused),
      cmocka_unit_test(test_twenty_ports),
      cmocka_unit_test(test_too_many_ports_refused),
      cmocka_unit_test(test_shards_merge_every_combine),
      cmocka_unit_test(test_shards_shipped_passes),
      cmocka_unit_test(test_shard_failure_reported),
      cmocka_unit_test(test_shards_write_through_sinks),
      cmocka_unit_test(test_one_shard),
      cmocka_unit_test(test_shards_on_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
