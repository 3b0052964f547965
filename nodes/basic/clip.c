/* clip: clamps every element of a tensor to [lo, hi]. Any numeric dtype, the
 * output has the input's dtype and shape, streamed or whole. NaN stays NaN
 * (it compares neither below lo nor above hi).
 *
 * Integer data is clamped to the integers of [lo, hi] that the dtype holds
 * (lo rounded up, hi rounded down, both cut to the dtype's range), so the
 * result is exact; when no such integer exists the graph is refused. Float
 * data is clamped to lo and hi rounded to the dtype. */
#include <math.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define CLIP_PARAMS(P)                                       \
  P(FLOAT, lo, NULL, "lower bound (inclusive)", NULL)         \
  P(FLOAT, hi, NULL, "upper bound (inclusive), >= lo", NULL)
SL_NODE_PARAMS(clip_params, CLIP_PARAMS)

/* The bounds in the input's dtype: one pair per kind of element. */
typedef struct clip_bounds {
  uint64_t lo_u, hi_u; /* u8, u16, u32, u64 */
  int64_t lo_i, hi_i;  /* i32, i64 */
  double lo_f, hi_f;   /* f32 (rounded when used), f64 */
} clip_bounds;

static bool is_unsigned(sl_dtype t) {
  return t == SL_U8 || t == SL_U16 || t == SL_U32 || t == SL_U64;
}

static uint64_t unsigned_max(sl_dtype t) {
  switch (t) {
    case SL_U8: return UINT8_MAX;
    case SL_U16: return UINT16_MAX;
    case SL_U32: return UINT32_MAX;
    default: return UINT64_MAX;
  }
}

/* v (an integer value held in a double) cut to [0, max]. (double)UINT64_MAX
 * is 2^64, so every v below it converts exactly. */
static uint64_t unsigned_bound(double v, uint64_t max) {
  if (v <= 0) return 0;
  if (v >= (double)max) return max;
  return (uint64_t)v;
}

/* v cut to [min, max] of a signed dtype; (double)INT64_MAX is 2^63. */
static int64_t signed_bound(double v, int64_t min, int64_t max) {
  if (v <= (double)min) return min;
  if (v >= (double)max) return max;
  return (int64_t)v;
}

/* The bounds of p in dtype t. Fails when lo > hi, or when an integer dtype
 * holds no value of [lo, hi] (the clamp's result would not be representable). */
static sl_code clip_bounds_for(const clip_params *p, sl_dtype t, clip_bounds *b, sl_error *err) {
  memset(b, 0, sizeof *b);
  if (p->lo > p->hi)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'lo' (%g) must not exceed param 'hi' (%g)", p->lo,
                   p->hi);
  b->lo_f = p->lo, b->hi_f = p->hi;
  if (t == SL_F32 || t == SL_F64) return SL_OK;
  double lo = ceil(p->lo), hi = floor(p->hi);
  bool empty = lo > hi;
  if (is_unsigned(t)) {
    uint64_t max = unsigned_max(t);
    empty = empty || hi < 0 || lo > (double)max;
    b->lo_u = unsigned_bound(lo, max), b->hi_u = unsigned_bound(hi, max);
  } else {
    int64_t min = t == SL_I32 ? INT32_MIN : INT64_MIN, max = t == SL_I32 ? INT32_MAX : INT64_MAX;
    empty = empty || hi < (double)min || lo > (double)max;
    b->lo_i = signed_bound(lo, min, max), b->hi_i = signed_bound(hi, min, max);
  }
  if (empty)
    return sl_fail(err, SL_ERR_PIPELINE, "no %s value lies in [lo, hi] = [%g, %g]",
                   sl_dtype_name(t), p->lo, p->hi);
  return SL_OK;
}

static sl_code clip_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  bool numeric = x->dtype != SL_C64 && x->dtype != SL_DT_INVALID;
  if (!numeric || x->encoding != SL_ENC_NONE)
    return sl_basic_input_error(err, "x", "plain real numbers", x);
  clip_bounds b;
  sl_code rc = clip_bounds_for(clip_params_of(n), x->dtype, &b, err);
  if (rc != SL_OK) return rc;
  n->out[0] = *x;
  return SL_OK;
}

/* Two compares per element. */
static void clip_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  sl_basic_elementwise_cost(&n->in[0], positions, 2, c);
}

typedef struct clip_job {
  const sl_kernel_args *a;
  sl_dtype dtype;
  clip_bounds b;
} clip_job;

/* Written as two compares so that NaN (false for both) passes through and the
 * loop vectorises to min/max-like selects. */
#define CLIP_LOOP(T, LO, HI)                                           \
  {                                                                    \
    const T *restrict x = j->a->in[0];                                 \
    T *restrict y = j->a->out[0];                                      \
    const T lo = (T)(LO), hi = (T)(HI);                                \
    for (int64_t i = begin; i < end; i++) {                            \
      T v = x[i];                                                      \
      y[i] = v < lo ? lo : (v > hi ? hi : v);                          \
    }                                                                  \
    break;                                                             \
  }

static void clip_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const clip_job *j = ctx;
  switch (j->dtype) {
    case SL_U8: CLIP_LOOP(uint8_t, j->b.lo_u, j->b.hi_u)
    case SL_U16: CLIP_LOOP(uint16_t, j->b.lo_u, j->b.hi_u)
    case SL_U32: CLIP_LOOP(uint32_t, j->b.lo_u, j->b.hi_u)
    case SL_U64: CLIP_LOOP(uint64_t, j->b.lo_u, j->b.hi_u)
    case SL_I32: CLIP_LOOP(int32_t, j->b.lo_i, j->b.hi_i)
    case SL_I64: CLIP_LOOP(int64_t, j->b.lo_i, j->b.hi_i)
    case SL_F32: CLIP_LOOP(float, j->b.lo_f, j->b.hi_f)
    case SL_F64: CLIP_LOOP(double, j->b.lo_f, j->b.hi_f)
    default: break; /* refused by infer */
  }
}
#undef CLIP_LOOP

static sl_code clip_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  clip_job j = {.a = a, .dtype = x->dtype};
  sl_code rc = clip_bounds_for(clip_params_of(a->node), x->dtype, &j.b, a->err);
  if (rc != SL_OK) return rc;
  a->backend->ops->parallel_for(a->backend, sl_basic_elems_for(x, a->pos_count), 1 << 16,
                                clip_range, &j);
  return SL_OK;
}

static const sl_port_def clip_in[] = {
    {"x", "tensor of any real dtype (u8..u64, i32, i64, f32, f64), streamed or whole", NULL,
     false}};
static const sl_port_def clip_out[] = {
    {"y", "x clamped to [lo, hi]; the dtype and shape of x; NaN stays NaN", NULL, false}};

const sl_node_desc sl_node_clip = {
    .type = "clip",
    .doc = "Clamps every element to [lo, hi], keeping the dtype; NaN stays NaN.",
    SL_PARAMS_DESC(clip_params),
    .inputs = clip_in, .n_inputs = SL_COUNT_OF(clip_in),
    .outputs = clip_out, .n_outputs = SL_COUNT_OF(clip_out),
    .infer = clip_infer, .cost = clip_cost,
    .kernel = {[SL_BACKEND_CPU] = clip_cpu},
    .host = true,
};
