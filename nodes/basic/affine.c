/* affine: element-wise y = scale * x + offset on f32 or f64 data, streamed
 * or whole. In f32 the multiply-add is done in f32 (scale and offset rounded
 * to f32 first), in f64 in f64. */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define AFFINE_PARAMS(P)                                         \
  P(FLOAT, scale, "1", "multiplier a in y = a*x + b", NULL)       \
  P(FLOAT, offset, "0", "offset b in y = a*x + b", NULL)
SL_NODE_PARAMS(affine_params, AFFINE_PARAMS)

static sl_code affine_infer(sl_node *n, sl_error *err) {
  if (n->in[0].dtype != SL_F32 && n->in[0].dtype != SL_F64)
    return sl_basic_input_error(err, "x", "f32 or f64", &n->in[0]);
  n->out[0] = n->in[0];
  return SL_OK;
}

/* One multiply and one add per element. */
static void affine_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  sl_basic_elementwise_cost(&n->in[0], positions, 2, c);
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
  const affine_params *p = affine_params_of(a->node);
  affine_job j = {a, p->scale, p->offset};
  a->backend->ops->parallel_for(a->backend, sl_basic_elems_for(&a->node->in[0], a->pos_count), 1 << 16,
                                affine_range, &j);
  return SL_OK;
}

static const sl_port_def affine_in[] = {{"x", "f32 or f64 tensor, streamed or whole", NULL, false}};
static const sl_port_def affine_out[] = {{"y", "a*x + b, same type and shape as x", NULL, false}};

const sl_node_desc sl_node_affine = {
    .type = "affine",
    .doc = "Element-wise y = scale * x + offset.",
    SL_PARAMS_DESC(affine_params),
    .inputs = affine_in, .n_inputs = SL_COUNT_OF(affine_in),
    .outputs = affine_out, .n_outputs = SL_COUNT_OF(affine_out),
    .infer = affine_infer, .cost = affine_cost,
    .kernel = {[SL_BACKEND_CPU] = affine_cpu},
    .host = true,
};
