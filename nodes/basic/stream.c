/* stream: a whole tensor streamed again, in chunks of its leading axes, as
 * a stream of its own (named by `name`; "scan" joins the acquisition's scan).
 * After transpose_scan it streams detector pixels, each carrying its values
 * over the scan. The chunks are windows of the whole tensor: the executor
 * points the output there (a view, no copy and no buffer of its own), and
 * a pass over the new stream runs after the pass that made the tensor. */
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"

#define STREAM_PARAMS(P)                                                                     \
  P(INT, axes, "1", "how many leading axes become stream axes", NULL)                         \
  P(STRING, name, "pixels", "the stream's name (\"scan\": the acquisition's scan)", NULL)

SL_NODE_PARAMS(stream_params, STREAM_PARAMS)

static sl_code stream_infer(sl_node *n, sl_error *err) {
  const stream_params *p = stream_params_of(n);
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' is already streamed (over %s); stream takes a whole tensor",
                   sl_desc_axis_name(x));
  if (p->axes < 1 || p->axes >= x->rank)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'axes' (%lld) must leave at least one item axis: between 1 and %d for %d axes",
                   (long long)p->axes, x->rank - 1, x->rank);
  if (!p->name[0]) return sl_fail(err, SL_ERR_PIPELINE, "param 'name' must not be empty");
  n->out[0] = sl_desc_make(x->dtype, x->rank, x->dims, (int)p->axes);
  n->out[0].stream_axis = strcmp(p->name, "scan") ? p->name : NULL;
  return SL_OK;
}

static void stream_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c); /* a view: nothing moves */
}

/* The output is a view the executor made; nothing to do on any backend. */
static sl_code stream_nothing(sl_kernel_args *a) {
  (void)a;
  return SL_OK;
}

static const sl_port_def stream_in[] = {{"x", "whole tensor", NULL, false}};
static const sl_port_def stream_out[] = {
    {"out", "x streamed over its leading `axes` axes", SL_UNIT_OF_INPUT, false}};

const sl_node_desc sl_node_stream = {
    .type = "stream",
    .doc = "A whole tensor streamed again over its leading axes, as a stream of its own (a view: no copy).",
    SL_PARAMS_DESC(stream_params),
    .inputs = stream_in, .n_inputs = SL_COUNT_OF(stream_in),
    .outputs = stream_out, .n_outputs = SL_COUNT_OF(stream_out),
    .infer = stream_infer, .cost = stream_cost,
    .kernel = {[SL_BACKEND_CPU] = stream_nothing, [SL_BACKEND_CUDA] = stream_nothing},
    .view_outputs = 0x1u,
};
