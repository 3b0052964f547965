/* iteration: the index of the loop iteration being run (0, 1, ...), as a
 * one-element tensor, so that a loop body can depend on it (a schedule, a
 * step size, the tree being grown). Outside a loop it is 0. The executor
 * passes the index to every kernel (sl_kernel_args.iteration); this node
 * makes it data. */
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define ITERATION_PARAMS(P) \
  P(ENUM, dtype, "f64", "element type", SL_BASIC_FLOAT_DTYPE_CHOICES)
SL_NODE_PARAMS(iteration_params, ITERATION_PARAMS)

static sl_code iteration_infer(sl_node *n, sl_error *err) {
  (void)err;
  int64_t one = 1;
  sl_tensor_desc *d = sl_basic_float_output(&n->out[0], iteration_params_of(n)->dtype);
  *d = sl_desc_make(d->dtype, 1, &one, 0);
  return SL_OK;
}

static void iteration_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)positions;
  memset(c, 0, sizeof *c);
  c->bytes_written = sl_desc_bytes(&n->out[0]);
  c->ops = 1;
}

static sl_code iteration_cpu(sl_kernel_args *a) {
  if (a->node->out[0].dtype == SL_F32)
    *(float *)a->out[0] = (float)a->iteration;
  else
    *(double *)a->out[0] = (double)a->iteration;
  return SL_OK;
}

static const sl_port_def iteration_out[] = {
    {"index", "the iteration being run (0 first; 0 outside a loop)", NULL, false}};

const sl_node_desc sl_node_iteration = {
    .type = "iteration",
    .doc = "The index of the loop iteration being run, as a one-element tensor.",
    SL_PARAMS_DESC(iteration_params),
    .outputs = iteration_out, .n_outputs = SL_COUNT_OF(iteration_out),
    .infer = iteration_infer, .cost = iteration_cost,
    .kernel = {[SL_BACKEND_CPU] = iteration_cpu},
    .host = true,
    .cpu_serial = true,
};
