/* transpose_scan: a streamed tensor made whole and pixel-major. The input
 * streams over the scan ([scan..|item..], e.g. frames); the output holds the
 * same elements with the item's axes first and the scan's last
 * ([item.., scan..]), so that everything one detector pixel saw over the
 * scan is contiguous. With the stream node after it, the data streams again
 * over the pixels (SSB's FFT over the scan for each detector pixel): the
 * planned transpose region of the engine. The output is a declared
 * concat_scan_last: each chunk writes its own column block, at the place
 * the executor points out[0] at (another device's or rank's block would be
 * placed the same way). The whole output is counted in the
 * plan like any buffer; the plan is refused before reading when it does not
 * fit. Transposing twice gives the input back bit for bit. */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "shaders/cuda/basic/transpose_scan.h"

static sl_code transpose_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: transpose_scan reorders a stream");
  if (x->encoding != SL_ENC_NONE)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' is encoded (%s): decode it first",
                   sl_encoding_name(x->encoding));
  if (x->rank == x->stream_rank)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' has no item axes to put first");
  int item_rank = x->rank - x->stream_rank;
  int64_t dims[SL_MAX_RANK];
  for (int i = 0; i < item_rank; i++) dims[i] = x->dims[x->stream_rank + i];
  for (int i = 0; i < x->stream_rank; i++) dims[item_rank + i] = x->dims[i];
  n->out[0] = sl_desc_make(x->dtype, x->rank, dims, 0);
  return SL_OK;
}

static void transpose_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]);
  c->bytes_written = c->bytes_read;
}

typedef struct transpose_job {
  const sl_kernel_args *a;
  int64_t item, scan;  /* elements per position, positions of the scan */
  size_t es;
} transpose_job;

/* Tiles of TILE positions x TILE elements: the chunk is read a tile of rows
 * at a time and each output row gets TILE consecutive positions, so both
 * sides move whole cache lines. Ranges split the item's elements: each output
 * row is written by one worker. */
#define TILE 64
#define TRANSPOSE_TILE(T)                                                                   \
  {                                                                                         \
    const T *x = j->a->in[0];                                                               \
    T *y = j->a->out[0];                                                                    \
    for (int64_t e0 = begin; e0 < end; e0 += TILE)                                          \
      for (int64_t p0 = 0; p0 < npos; p0 += TILE) {                                         \
        int64_t e1 = e0 + TILE < end ? e0 + TILE : end, p1 = p0 + TILE < npos ? p0 + TILE : npos; \
        for (int64_t e = e0; e < e1; e++)                                                   \
          for (int64_t p = p0; p < p1; p++) y[e * j->scan + p] = x[p * j->item + e];         \
      }                                                                                     \
    break;                                                                                  \
  }

static void transpose_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const transpose_job *j = ctx;
  const int64_t npos = j->a->pos_count;
  (void)worker;
  switch (j->es) {
    case 1: TRANSPOSE_TILE(uint8_t)
    case 2: TRANSPOSE_TILE(uint16_t)
    case 4: TRANSPOSE_TILE(uint32_t)
    case 8: TRANSPOSE_TILE(uint64_t)
    default: break;
  }
}
#undef TRANSPOSE_TILE

static sl_code transpose_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  transpose_job j = {a, sl_desc_item_elems(x), sl_desc_positions(x), sl_dtype_size(x->dtype)};
  a->backend->ops->parallel_for(a->backend, j.item, TILE, transpose_range, &j);
  return SL_OK;
}

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code transpose_cuda(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  const sl_cuda_transpose_scan_params p = {.elem_bytes = (int)sl_dtype_size(x->dtype),
                                           .item_elems = sl_desc_item_elems(x),
                                           .scan_positions = sl_desc_positions(x)};
  return sl_cuda_transpose_scan(&p, a);
}
#endif

static const sl_port_def transpose_in[] = {{"x", "streamed tensor (not encoded)", NULL, false}};
static const sl_port_def transpose_out[] = {
    {"pixel_major", "x whole with its item axes first and its scan axes last", SL_UNIT_OF_INPUT, false}};

const sl_node_desc sl_node_transpose_scan = {
    .type = "transpose_scan",
    .doc = "A streamed tensor made whole and pixel-major (item axes first, scan axes last), e.g. to "
           "stream it again over detector pixels.",
    .inputs = transpose_in, .n_inputs = SL_COUNT_OF(transpose_in),
    .outputs = transpose_out, .n_outputs = SL_COUNT_OF(transpose_out),
    .infer = transpose_infer, .cost = transpose_cost,
    .kernel = {[SL_BACKEND_CPU] = transpose_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(transpose_cuda)},
    .combine = {SL_COMBINE_CONCAT_SCAN_LAST},
};
