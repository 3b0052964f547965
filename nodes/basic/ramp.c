/* ramp: a streamed source of known values, for tests and benchmarks.
 * Element e of position p holds (p * item + e) mod 1024, where item is the
 * number of elements of one position; with `values: hash`, a 10-bit hash of
 * that index instead (0..1023, no pattern that compresses: calibrate draws
 * it as a PNG to time zlib on noise-like products, not on a sawtooth). */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define RAMP_PARAMS(P)                                                            \
  P(SHAPE, positions, "[1024]", "scan axes (streamed)", NULL)                      \
  P(SHAPE, item_shape, "[256]", "axes of each position's item", NULL)              \
  P(ENUM, dtype, "f32", "element type", SL_BASIC_FLOAT_DTYPE_CHOICES)            \
  P(ENUM, values, "ramp", "ramp: (index mod 1024); hash: a 10-bit hash of the index", "ramp|hash")
SL_NODE_PARAMS(ramp_params, RAMP_PARAMS)

enum { RAMP_VALUES_RAMP, RAMP_VALUES_HASH };

/* The top 10 bits of MurmurHash3's 64-bit finaliser of the index (a
 * multiplicative hash alone keeps a stride between neighbours that zlib
 * finds). */
static inline int32_t ramp_hash(int64_t i) {
  uint64_t h = (uint64_t)i;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
  return (int32_t)(h >> 54);
}

static sl_code ramp_infer(sl_node *n, sl_error *err) {
  const ramp_params *p = ramp_params_of(n);
  sl_tensor_desc *d = sl_basic_float_output(&n->out[0], p->dtype);
  sl_code rc = sl_basic_shape_from_param(p->positions, "positions", d, err);
  if (rc != SL_OK) return rc;
  d->stream_rank = d->rank;
  sl_tensor_desc item = {0};
  if ((rc = sl_basic_shape_from_param(p->item_shape, "item_shape", &item, err)) != SL_OK)
    return rc;
  if (d->rank + item.rank > SL_MAX_RANK)
    return sl_fail(err, SL_ERR_PIPELINE, "positions and item_shape have more than %d axes",
                   SL_MAX_RANK);
  for (int i = 0; i < item.rank; i++) d->dims[d->rank + i] = item.dims[i];
  d->rank += item.rank;
  return SL_OK;
}

static void ramp_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_written = positions * sl_desc_item_bytes(&n->out[0]);
  c->ops = positions * sl_desc_item_elems(&n->out[0]);
}

typedef struct ramp_job {
  const sl_kernel_args *a;
  int64_t item; /* elements per position */
  bool hash;
} ramp_job;

/* The value fits 32 bits: converting from int32 vectorises (int64 does not on
 * AVX2), and every value is exact in f32. */
static void ramp_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const ramp_job *j = ctx;
  const sl_tensor_desc *d = &j->a->node->out[0];
  int64_t base = j->a->pos_start * j->item;
  if (j->hash && d->dtype == SL_F32) {
    float *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (float)ramp_hash(base + i);
  } else if (j->hash) {
    double *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (double)ramp_hash(base + i);
  } else if (d->dtype == SL_F32) {
    float *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (float)(int32_t)((base + i) & 1023);
  } else {
    double *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (double)(int32_t)((base + i) & 1023);
  }
}

static sl_code ramp_cpu(sl_kernel_args *a) {
  ramp_job j = {a, sl_desc_item_elems(&a->node->out[0]), ramp_params_of(a->node)->values == RAMP_VALUES_HASH};
  a->backend->ops->parallel_for(a->backend, a->pos_count * j.item, 1 << 16, ramp_range, &j);
  return SL_OK;
}

static const sl_port_def ramp_out[] = {
    {"out", "streamed ramp: element e of position p is (p*item+e) mod 1024 (or its hash)", NULL, false}};

const sl_node_desc sl_node_ramp = {
    .type = "ramp",
    .doc = "A streamed source of known values, for tests and benchmarks.",
    SL_PARAMS_DESC(ramp_params),
    .outputs = ramp_out, .n_outputs = SL_COUNT_OF(ramp_out),
    .infer = ramp_infer, .cost = ramp_cost,
    .kernel = {[SL_BACKEND_CPU] = ramp_cpu},
    .host = true,
};
