/* subtract: x - y, with y (whole, the shape of one item of x) subtracted from
 * every position: e.g. removing the mean pattern. When y is a result made
 * after a pass (a reduction), the planner streams x again in a second pass. */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

static sl_code subtract_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0], *y = &n->in[1];
  if (x->dtype != SL_F32 && x->dtype != SL_F64)
    return sl_basic_input_error(err, "x", "f32 or f64", x);
  if (y->dtype != SL_F64 || y->stream_rank)
    return sl_basic_input_error(err, "y", "a whole f64 tensor", y);
  int item_rank = x->rank - x->stream_rank;
  bool same = sl_desc_item_elems(x) == sl_desc_elems(y) &&
              (item_rank == y->rank || (item_rank == 0 && y->rank == 1 && y->dims[0] == 1));
  for (int i = 0; same && i < item_rank; i++) same = x->dims[x->stream_rank + i] == y->dims[i];
  if (!same) {
    char a[128], b[128];
    sl_desc_format(x, a, sizeof a);
    sl_desc_format(y, b, sizeof b);
    return sl_fail(err, SL_ERR_PIPELINE, "input 'y' (%s) must have the shape of one item of 'x' (%s)",
                   b, a);
  }
  n->out[0] = *x;
  return SL_OK;
}

/* One subtraction per element of x; y is read whole once per call. */
static void subtract_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  sl_basic_elementwise_cost(&n->in[0], positions, 1, c);
  c->bytes_read += sl_desc_bytes(&n->in[1]);
}

typedef struct subtract_job {
  const sl_kernel_args *a;
  int64_t item;
} subtract_job;

/* f32 data is subtracted in f64 and rounded once. */
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
    .inputs = subtract_in, .n_inputs = SL_COUNT_OF(subtract_in),
    .outputs = subtract_out, .n_outputs = SL_COUNT_OF(subtract_out),
    .infer = subtract_infer, .cost = subtract_cost,
    .kernel = {[SL_BACKEND_CPU] = subtract_cpu},
    .host = true,
};
