/* Tensor helpers the basic nodes share: a tensor shape from a SHAPE param,
 * the f32|f64 `dtype` enum of the nodes that make float data, the elements a
 * call or a cost covers, the cost of an element-wise map, and the error for
 * an input of the wrong type. Family-local: only nodes/basic uses it. */
#ifndef SL_BASIC_TENSOR_HELPERS_H
#define SL_BASIC_TENSOR_HELPERS_H

#include <stdint.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/graph/node.h"

/* The `dtype` param of float sources: an ENUM with these choices, whose index
 * is a sl_basic_float_dtype. */
#define SL_BASIC_FLOAT_DTYPE_CHOICES "f32|f64"
typedef enum sl_basic_float_dtype { SL_BASIC_FLOAT_F32, SL_BASIC_FLOAT_F64 } sl_basic_float_dtype;

/* Clears d, the output of a float source, and gives it the dtype of the
 * `dtype` choice; the caller fills the shape. */
static inline sl_tensor_desc *sl_basic_float_output(sl_tensor_desc *d, int dtype_choice) {
  memset(d, 0, sizeof *d);
  d->dtype = dtype_choice == SL_BASIC_FLOAT_F32 ? SL_F32 : SL_F64;
  return d;
}

/* Sets d's rank and dims from the SHAPE param `v` (named `name` in errors):
 * 1 to SL_MAX_RANK axes, each positive. */
static inline sl_code sl_basic_shape_from_param(const sl_param_value *v, const char *name,
                                                sl_tensor_desc *d, sl_error *err) {
  if (v->n == 0 || v->n > SL_MAX_RANK)
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' needs 1 to %d axes, got %zu", name,
                   SL_MAX_RANK, v->n);
  for (size_t i = 0; i < v->n; i++) {
    if (v->ints[i] <= 0)
      return sl_fail(err, SL_ERR_PIPELINE, "param '%s': axis %zu must be positive, got %lld",
                     name, i, (long long)v->ints[i]);
    d->dims[i] = v->ints[i];
  }
  d->rank = (int)v->n;
  return SL_OK;
}

/* Elements of port d that `positions` scan positions cover: that many items
 * of a streamed tensor, the whole tensor otherwise. A kernel passes its
 * chunk's pos_count, a cost function the positions it is asked about. */
static inline int64_t sl_basic_elems_for(const sl_tensor_desc *d, int64_t positions) {
  return d->stream_rank ? positions * sl_desc_item_elems(d) : sl_desc_elems(d);
}

/* The cost of an element-wise map of input x to an output of the same type
 * over `positions`: each element read and written once, ops_per_element
 * operations on it. */
static inline void sl_basic_elementwise_cost(const sl_tensor_desc *x, int64_t positions,
                                             int64_t ops_per_element, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t elems = sl_basic_elems_for(x, positions);
  c->bytes_read = c->bytes_written = elems * (int64_t)sl_dtype_size(x->dtype);
  c->ops = ops_per_element * elems;
}

/* SL_ERR_PIPELINE: "input 'PORT' expects EXPECTED, got <descriptor of d>". */
static inline sl_code sl_basic_input_error(sl_error *err, const char *port, const char *expected,
                                           const sl_tensor_desc *d) {
  char buf[128];
  sl_desc_format(d, buf, sizeof buf);
  return sl_fail(err, SL_ERR_PIPELINE, "input '%s' expects %s, got %s", port, expected, buf);
}

#endif
