/* sum: the sum over scan positions of a streamed tensor, item-shaped: a
 * reduction that accumulates across chunks. Unsigned integers sum exactly in
 * u64, floats in f64, each element adding its positions in scan order. */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"
#include "shaders/cuda/basic/sum.h"

static sl_code sum_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: sum adds over scan positions");
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  switch (x->dtype) {
    case SL_U8: case SL_U16: case SL_U32: case SL_U64: d->dtype = SL_U64; break;
    case SL_F32: case SL_F64: d->dtype = SL_F64; break;
    default: return sl_basic_input_error(err, "x", "unsigned or float data", x);
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
    {"total", "sum over all scan positions, item-shaped (u64 for integers, f64 for floats)",
     SL_UNIT_OF_INPUT, false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code sum_cuda(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  const sl_cuda_sum_params p = {.dtype = x->dtype, .item_elems = sl_desc_item_elems(x)};
  return sl_cuda_sum(&p, a);
}
#endif

const sl_node_desc sl_node_sum = {
    .type = "sum",
    .doc = "Sum over scan positions: a reduction that accumulates across chunks.",
    .inputs = sum_in, .n_inputs = SL_COUNT_OF(sum_in),
    .outputs = sum_out, .n_outputs = SL_COUNT_OF(sum_out),
    .infer = sum_infer, .cost = sum_cost,
    .kernel = {[SL_BACKEND_CPU] = sum_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sum_cuda)},
};
