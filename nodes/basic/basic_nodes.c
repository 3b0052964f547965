/* Elementary nodes: a constant tensor, a streamed ramp source, an affine map
 * and a sum over scan positions. They let the engine be tested and measured
 * (planner lifetimes, iteration, overhead) without scientific nodes. */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "shaders/cuda/sl_cuda.h"

/* ---- shared helpers ---------------------------------------------------- */

static sl_code shape_from_param(const sl_node *n, const char *name, int first_axis,
                                sl_tensor_desc *d, sl_error *err) {
  const sl_param_value *v = sl_param(n, name);
  if (v->n == 0 || (int)v->n + first_axis > SL_MAX_RANK)
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' needs 1 to %d axes, got %zu", name,
                   SL_MAX_RANK - first_axis, v->n);
  for (size_t i = 0; i < v->n; i++) {
    if (v->ints[i] <= 0)
      return sl_fail(err, SL_ERR_PIPELINE, "param '%s': axis %zu must be positive, got %lld",
                     name, i, (long long)v->ints[i]);
    d->dims[first_axis + (int)i] = v->ints[i];
  }
  d->rank = first_axis + (int)v->n;
  return SL_OK;
}

static sl_code float_dtype_param(const sl_node *n, sl_dtype *out, sl_error *err) {
  const char *s = sl_param_str(n, "dtype");
  sl_dtype t = sl_dtype_parse(s);
  if (t != SL_F32 && t != SL_F64)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'dtype' must be f32 or f64, got '%s'", s);
  *out = t;
  return SL_OK;
}

/* Elements this kernel call covers on a port (a chunk or the whole tensor). */
static int64_t call_elems(const sl_kernel_args *a, const sl_tensor_desc *d) {
  return d->stream_rank ? a->pos_count * sl_desc_item_elems(d) : sl_desc_elems(d);
}

/* ---- constant ------------------------------------------------------------ */

static sl_code constant_infer(sl_node *n, sl_error *err) {
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  sl_code rc = float_dtype_param(n, &d->dtype, err);
  if (rc == SL_OK) rc = shape_from_param(n, "shape", 0, d, err);
  return rc;
}

static void constant_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->ops = sl_desc_elems(&n->out[0]);
}

static sl_code constant_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *d = &a->node->out[0];
  double v = sl_param_float(a->node, "value");
  int64_t n = sl_desc_elems(d);
  if (d->dtype == SL_F32) {
    float *y = a->out[0];
    for (int64_t i = 0; i < n; i++) y[i] = (float)v;
  } else {
    double *y = a->out[0];
    for (int64_t i = 0; i < n; i++) y[i] = v;
  }
  return SL_OK;
}

static const sl_param_def constant_params[] = {
    {"shape", SL_PT_SHAPE, NULL, "shape of the tensor"},
    {"value", SL_PT_FLOAT, "0", "value of every element"},
    {"dtype", SL_PT_STRING, "f64", "element type: f32 or f64"},
};
static const sl_port_def constant_out[] = {{"out", "the constant tensor (whole)", NULL, false}};

const sl_node_desc sl_node_constant = {
    .type = "constant",
    .doc = "A whole tensor with every element set to one value.",
    .params = constant_params, .n_params = 3,
    .outputs = constant_out, .n_outputs = 1,
    .infer = constant_infer, .cost = constant_cost,
    .kernel = {[SL_BACKEND_CPU] = constant_cpu},
    .host = true,
};

/* ---- ramp ------------------------------------------------------------------ */

static sl_code ramp_infer(sl_node *n, sl_error *err) {
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  sl_code rc = float_dtype_param(n, &d->dtype, err);
  if (rc != SL_OK) return rc;
  if ((rc = shape_from_param(n, "positions", 0, d, err)) != SL_OK) return rc;
  d->stream_rank = d->rank;
  sl_tensor_desc item = {0};
  if ((rc = shape_from_param(n, "item_shape", 0, &item, err)) != SL_OK) return rc;
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

typedef struct range_job {
  const sl_kernel_args *a;
  int64_t item; /* elements per position */
} range_job;

/* Element e of position p holds (p * item + e) mod 1024: exact in f32. The
 * value fits 32 bits: converting from int32 vectorises (int64 does not on AVX2). */
static void ramp_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const range_job *j = ctx;
  const sl_tensor_desc *d = &j->a->node->out[0];
  int64_t base = j->a->pos_start * j->item;
  if (d->dtype == SL_F32) {
    float *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (float)(int32_t)((base + i) & 1023);
  } else {
    double *y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = (double)(int32_t)((base + i) & 1023);
  }
}

static sl_code ramp_cpu(sl_kernel_args *a) {
  range_job j = {a, sl_desc_item_elems(&a->node->out[0])};
  a->backend->ops->parallel_for(a->backend, a->pos_count * j.item, 1 << 16, ramp_range, &j);
  return SL_OK;
}

static const sl_param_def ramp_params[] = {
    {"positions", SL_PT_SHAPE, "[1024]", "scan axes (streamed)"},
    {"item_shape", SL_PT_SHAPE, "[256]", "axes of each position's item"},
    {"dtype", SL_PT_STRING, "f32", "element type: f32 or f64"},
};
static const sl_port_def ramp_out[] = {
    {"out", "streamed ramp: element e of position p is (p*item+e) mod 1024", NULL, false}};

const sl_node_desc sl_node_ramp = {
    .type = "ramp",
    .doc = "A streamed source of known values, for tests and benchmarks.",
    .params = ramp_params, .n_params = 3,
    .outputs = ramp_out, .n_outputs = 1,
    .infer = ramp_infer, .cost = ramp_cost,
    .kernel = {[SL_BACKEND_CPU] = ramp_cpu},
    .host = true,
};

/* ---- affine ------------------------------------------------------------------ */

static sl_code affine_infer(sl_node *n, sl_error *err) {
  if (n->in[0].dtype != SL_F32 && n->in[0].dtype != SL_F64) {
    char buf[128];
    sl_desc_format(&n->in[0], buf, sizeof buf);
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' expects f32 or f64, got %s", buf);
  }
  n->out[0] = n->in[0];
  return SL_OK;
}

static void affine_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->in[0];
  int64_t elems = d->stream_rank ? positions * sl_desc_item_elems(d) : sl_desc_elems(d);
  c->bytes_read = c->bytes_written = elems * (int64_t)sl_dtype_size(d->dtype);
  c->ops = 2 * elems;
}

typedef struct affine_job {
  const sl_kernel_args *a;
  double scale, offset;
} affine_job;

static void affine_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const affine_job *j = ctx;
  if (j->a->node->in[0].dtype == SL_F32) {
    const float *restrict x = j->a->in[0];
    float *restrict y = j->a->out[0];
    float s = (float)j->scale, o = (float)j->offset;
    for (int64_t i = begin; i < end; i++) y[i] = s * x[i] + o;
  } else {
    const double *restrict x = j->a->in[0];
    double *restrict y = j->a->out[0];
    for (int64_t i = begin; i < end; i++) y[i] = j->scale * x[i] + j->offset;
  }
}

static sl_code affine_cpu(sl_kernel_args *a) {
  affine_job j = {a, sl_param_float(a->node, "scale"), sl_param_float(a->node, "offset")};
  a->backend->ops->parallel_for(a->backend, call_elems(a, &a->node->in[0]), 1 << 16,
                                affine_range, &j);
  return SL_OK;
}

static const sl_param_def affine_params[] = {
    {"scale", SL_PT_FLOAT, "1", "multiplier a in y = a*x + b"},
    {"offset", SL_PT_FLOAT, "0", "offset b in y = a*x + b"},
};
static const sl_port_def affine_in[] = {{"x", "f32 or f64 tensor, streamed or whole", NULL, false}};
static const sl_port_def affine_out[] = {{"y", "a*x + b, same type and shape as x", NULL, false}};

const sl_node_desc sl_node_affine = {
    .type = "affine",
    .doc = "Element-wise y = scale * x + offset.",
    .params = affine_params, .n_params = 2,
    .inputs = affine_in, .n_inputs = 1,
    .outputs = affine_out, .n_outputs = 1,
    .infer = affine_infer, .cost = affine_cost,
    .kernel = {[SL_BACKEND_CPU] = affine_cpu},
    .host = true,
};

/* ---- sum ---------------------------------------------------------------------- */

static sl_code sum_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: sum adds over scan positions");
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  switch (x->dtype) {
    case SL_U8: case SL_U16: case SL_U32: case SL_U64: d->dtype = SL_U64; break;
    case SL_F32: case SL_F64: d->dtype = SL_F64; break;
    default: {
      char buf[128];
      sl_desc_format(x, buf, sizeof buf);
      return sl_fail(err, SL_ERR_PIPELINE, "input 'x' expects unsigned or float data, got %s", buf);
    }
  }
  d->rank = x->rank - x->stream_rank;
  for (int i = 0; i < d->rank; i++) d->dims[i] = x->dims[x->stream_rank + i];
  if (d->rank == 0) d->rank = 1, d->dims[0] = 1;
  return SL_OK;
}

static void sum_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]);
  c->ops = positions * sl_desc_item_elems(&n->in[0]);
}

typedef struct sum_job {
  const sl_kernel_args *a;
  int64_t item;
} sum_job;

/* Ranges split the item's elements, so each output element is owned by one
 * worker and the sum over positions needs no atomics. Integers sum in u64. */
static void sum_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  int64_t npos = j->a->pos_count, item = j->item;
  switch (j->a->node->in[0].dtype) {
/* The range is cut into blocks whose accumulators (y) stay in L1; each block
 * streams its slice of every position, four positions per sweep of y so y is
 * loaded and stored a quarter as often. x is read sequentially in runs of up
 * to SUM_BLOCK elements, and each element still adds its positions in order
 * (floats stay bit-identical to a plain loop). */
#define SUM_BLOCK 1024
#define SUM_CASE(T, ACC, OUT)                                                   \
  {                                                                             \
    const T *restrict x = j->a->in[0];                                          \
    OUT *restrict y = j->a->out[0];                                             \
    for (int64_t e0 = begin; e0 < end; e0 += SUM_BLOCK) {                       \
      int64_t n = end - e0 < SUM_BLOCK ? end - e0 : SUM_BLOCK;                  \
      OUT *restrict yb = y + e0;                                                \
      int64_t p = 0;                                                            \
      for (; p + 4 <= npos; p += 4) {                                           \
        const T *restrict q0 = x + p * item + e0, *restrict q1 = q0 + item;     \
        const T *restrict q2 = q1 + item, *restrict q3 = q2 + item;             \
        for (int64_t e = 0; e < n; e++)                                         \
          yb[e] = (((yb[e] + (ACC)q0[e]) + (ACC)q1[e]) + (ACC)q2[e]) + (ACC)q3[e]; \
      }                                                                         \
      for (; p < npos; p++) {                                                   \
        const T *restrict q = x + p * item + e0;                                \
        for (int64_t e = 0; e < n; e++) yb[e] += (ACC)q[e];                     \
      }                                                                         \
    }                                                                           \
    break;                                                                      \
  }
    case SL_U8: SUM_CASE(uint8_t, uint64_t, uint64_t)
    case SL_U16: SUM_CASE(uint16_t, uint64_t, uint64_t)
    case SL_U32: SUM_CASE(uint32_t, uint64_t, uint64_t)
    case SL_U64: SUM_CASE(uint64_t, uint64_t, uint64_t)
    case SL_F32: SUM_CASE(float, double, double)
    case SL_F64: SUM_CASE(double, double, double)
#undef SUM_CASE
    default: break;
  }
}

static sl_code sum_cpu(sl_kernel_args *a) {
  sum_job j = {a, sl_desc_item_elems(&a->node->in[0])};
  a->backend->ops->parallel_for(a->backend, j.item, 4096, sum_range, &j);
  return SL_OK;
}

static const sl_port_def sum_in[] = {{"x", "streamed tensor", NULL, false}};
static const sl_port_def sum_out[] = {
    {"total", "sum over all scan positions, item-shaped (u64 for integers, f64 for floats)", NULL,
     false}};

const sl_node_desc sl_node_sum = {
    .type = "sum",
    .doc = "Sum over scan positions: a reduction that accumulates across chunks.",
    .inputs = sum_in, .n_inputs = 1,
    .outputs = sum_out, .n_outputs = 1,
    .infer = sum_infer, .cost = sum_cost,
    .kernel = {[SL_BACKEND_CPU] = sum_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_sum)},
};

/* ---- subtract ------------------------------------------------------------------ */

/* x - y, with y (whole, the shape of one item of x) subtracted from every
 * position: e.g. removing the mean pattern. When y is a result made after a
 * pass (a reduction), the planner streams x again in a second pass. */
static sl_code subtract_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0], *y = &n->in[1];
  char a[128], b[128];
  sl_desc_format(x, a, sizeof a);
  sl_desc_format(y, b, sizeof b);
  if (x->dtype != SL_F32 && x->dtype != SL_F64)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' expects f32 or f64, got %s", a);
  if (y->dtype != SL_F64 || y->stream_rank)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'y' expects a whole f64 tensor, got %s", b);
  int item_rank = x->rank - x->stream_rank;
  bool same = sl_desc_item_elems(x) == sl_desc_elems(y) &&
              (item_rank == y->rank || (item_rank == 0 && y->rank == 1 && y->dims[0] == 1));
  for (int i = 0; same && i < item_rank; i++) same = x->dims[x->stream_rank + i] == y->dims[i];
  if (!same)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'y' (%s) must have the shape of one item of 'x' (%s)",
                   b, a);
  n->out[0] = *x;
  return SL_OK;
}

static void subtract_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->in[0];
  int64_t elems = d->stream_rank ? positions * sl_desc_item_elems(d) : sl_desc_elems(d);
  c->bytes_read = elems * (int64_t)sl_dtype_size(d->dtype) + sl_desc_bytes(&n->in[1]);
  c->bytes_written = elems * (int64_t)sl_dtype_size(d->dtype);
  c->ops = elems;
}

typedef struct subtract_job {
  const sl_kernel_args *a;
  int64_t item;
} subtract_job;

static void subtract_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const subtract_job *j = ctx;
  const double *y = j->a->in[1];
  for (int64_t p = begin; p < end; p++) {
    if (j->a->node->in[0].dtype == SL_F32) {
      const float *x = (const float *)j->a->in[0] + p * j->item;
      float *o = (float *)j->a->out[0] + p * j->item;
      for (int64_t e = 0; e < j->item; e++) o[e] = (float)((double)x[e] - y[e]);
    } else {
      const double *x = (const double *)j->a->in[0] + p * j->item;
      double *o = (double *)j->a->out[0] + p * j->item;
      for (int64_t e = 0; e < j->item; e++) o[e] = x[e] - y[e];
    }
  }
}

static sl_code subtract_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  subtract_job j = {a, sl_desc_item_elems(x)};
  int64_t positions = x->stream_rank ? a->pos_count : 1;
  a->backend->ops->parallel_for(a->backend, positions, 1, subtract_range, &j);
  return SL_OK;
}

static const sl_port_def subtract_in[] = {
    {"x", "f32 or f64 tensor, streamed or whole", NULL, false},
    {"y", "whole f64 tensor with the shape of one item of x", NULL, false}};
static const sl_port_def subtract_out[] = {{"out", "x - y, the type and shape of x", NULL, false}};

const sl_node_desc sl_node_subtract = {
    .type = "subtract",
    .doc = "x - y with y subtracted from every scan position (e.g. the mean pattern).",
    .inputs = subtract_in, .n_inputs = 2,
    .outputs = subtract_out, .n_outputs = 1,
    .infer = subtract_infer, .cost = subtract_cost,
    .kernel = {[SL_BACKEND_CPU] = subtract_cpu},
    .host = true,
};
