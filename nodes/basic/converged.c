/* converged: a one-element u8 flag, 1 when two whole tensors agree within a
 * tolerance (largest absolute difference), else 0. It is what a loop's
 * `until:` reads: the body computes the next value from the carried one,
 * and converged compares them. A NaN difference never counts as agreeing. */
#include <math.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"

#define CONVERGED_PARAMS(P)                                                                  \
  P(FLOAT, tolerance, "1e-9", "largest absolute difference that counts as converged (>= 0)", \
    NULL)
SL_NODE_PARAMS(converged_params, CONVERGED_PARAMS)

static bool is_float(sl_dtype t) { return t == SL_F32 || t == SL_F64; }

static sl_code converged_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *a = &n->in[0], *b = &n->in[1];
  double tol = converged_params_of(n)->tolerance;
  if (!(tol >= 0) || !isfinite(tol))
    return sl_fail(err, SL_ERR_PIPELINE, "param 'tolerance' must be a finite number >= 0, got %g", tol);
  if (!is_float(a->dtype) || a->stream_rank)
    return sl_basic_input_error(err, "a", "a whole f32 or f64 tensor", a);
  if (b->dtype != a->dtype || b->stream_rank || !sl_desc_equal_shape(a, b))
    return sl_basic_input_error(err, "b", "a whole tensor of the type and shape of 'a'", b);
  int64_t one = 1;
  n->out[0] = sl_desc_make(SL_U8, 1, &one, 0);
  return SL_OK;
}

static void converged_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)positions;
  memset(c, 0, sizeof *c);
  c->bytes_read = 2 * sl_desc_bytes(&n->in[0]);
  c->bytes_written = 1;
  c->ops = 2 * sl_desc_elems(&n->in[0]);
}

static sl_code converged_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *d = &a->node->in[0];
  const double tol = converged_params_of(a->node)->tolerance;
  const int64_t n = sl_desc_elems(d);
  bool within = true;
  for (int64_t i = 0; i < n && within; i++) {
    double x, y;
    if (d->dtype == SL_F32)
      x = ((const float *)a->in[0])[i], y = ((const float *)a->in[1])[i];
    else
      x = ((const double *)a->in[0])[i], y = ((const double *)a->in[1])[i];
    within = fabs(x - y) <= tol; /* false for NaN */
  }
  *(uint8_t *)a->out[0] = within ? 1 : 0;
  return SL_OK;
}

static const sl_port_def converged_in[] = {
    {"a", "a whole f32 or f64 tensor (e.g. the value an iteration started from)", NULL, false},
    {"b", "a whole tensor of the same type and shape (e.g. the value it made)", NULL, false}};
static const sl_port_def converged_out[] = {
    {"flag", "u8[1]: 1 when max |a - b| <= tolerance, else 0", NULL, false}};

const sl_node_desc sl_node_converged = {
    .type = "converged",
    .doc = "A u8 flag: 1 when two whole tensors agree within a tolerance; a loop's until: reads it.",
    SL_PARAMS_DESC(converged_params),
    .inputs = converged_in, .n_inputs = SL_COUNT_OF(converged_in),
    .outputs = converged_out, .n_outputs = SL_COUNT_OF(converged_out),
    .infer = converged_infer, .cost = converged_cost,
    .kernel = {[SL_BACKEND_CPU] = converged_cpu},
    .host = true,
    .cpu_serial = true,
};
