/* constant: a whole tensor with every element set to one value (f32 or f64).
 * Iteration seeds and tests start from it. */
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define CONSTANT_PARAMS(P)                                                        \
  P(SHAPE, shape, NULL, "shape of the tensor", NULL)                               \
  P(FLOAT, value, "0", "value of every element", NULL)                             \
  P(ENUM, dtype, "f64", "element type", SL_BASIC_FLOAT_DTYPE_CHOICES)
SL_NODE_PARAMS(constant_params, CONSTANT_PARAMS)

static sl_code constant_infer(sl_node *n, sl_error *err) {
  const constant_params *p = constant_params_of(n);
  sl_tensor_desc *d = sl_basic_float_output(&n->out[0], p->dtype);
  return sl_basic_shape_from_param(p->shape, "shape", d, err);
}

static void constant_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->ops = sl_desc_elems(&n->out[0]);
}

static sl_code constant_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *d = &a->node->out[0];
  double v = constant_params_of(a->node)->value;
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

static const sl_port_def constant_out[] = {{"out", "the constant tensor (whole)", NULL, false}};

const sl_node_desc sl_node_constant = {
    .type = "constant",
    .doc = "A whole tensor with every element set to one value.",
    SL_PARAMS_DESC(constant_params),
    .outputs = constant_out, .n_outputs = SL_COUNT_OF(constant_out),
    .infer = constant_infer, .cost = constant_cost,
    .kernel = {[SL_BACKEND_CPU] = constant_cpu},
    .host = true,
    .cpu_serial = true,
};
