/* gather: a streamed tensor made whole, each chunk's items copied to their
 * place in scan order: a declared concat reduction, so the executor hands
 * the kernel the chunk's place in the whole output. A whole-tensor
 * node after the scan can then read what a streamed node made, e.g. dpc
 * reading the ADF image that virtual_detectors streams. The output is an
 * image over the scan (scan axes recorded like a streamed port's). */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "shaders/cuda/basic/gather.h"

static sl_code gather_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: gather makes a streamed tensor whole");
  if (x->encoding != SL_ENC_NONE)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' is encoded (%s): decode it first",
                   sl_encoding_name(x->encoding));
  n->out[0] = sl_desc_make(x->dtype, x->rank, x->dims, 0);
  return sl_desc_check_size(&n->out[0], err);
}

static void gather_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]);
  c->bytes_written = c->bytes_read;
}

/* Through the backend's copy, which spreads a large chunk over the workers:
 * the whole output is fresh memory, and its first touch is most of the
 * copy's time. */
static sl_code gather_cpu(sl_kernel_args *a) {
  const int64_t item = sl_desc_item_bytes(&a->node->in[0]);
  return a->backend->ops->copy(a->backend, a->out[0], a->in[0], (size_t)(a->pos_count * item), a->err);
}

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code gather_cuda(sl_kernel_args *a) {
  const sl_cuda_gather_params p = {.item_bytes = sl_desc_item_bytes(&a->node->in[0])};
  return sl_cuda_gather(&p, a);
}
#endif

static const sl_port_def gather_in[] = {{"x", "streamed tensor (not encoded)", NULL, false}};
static const sl_port_def gather_out[] = {
    {"whole", "x whole: the scan's axes then the item's, in scan order", SL_UNIT_OF_INPUT, false}};

const sl_node_desc sl_node_gather = {
    .type = "gather",
    .doc = "A streamed tensor made whole, chunk by chunk in scan order, for nodes after the scan.",
    .inputs = gather_in, .n_inputs = SL_COUNT_OF(gather_in),
    .outputs = gather_out, .n_outputs = SL_COUNT_OF(gather_out),
    .infer = gather_infer, .cost = gather_cost,
    .kernel = {[SL_BACKEND_CPU] = gather_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(gather_cuda)},
    .scan_image_outputs = 0x1u,
    .combine = {SL_COMBINE_CONCAT},
    .cpu_serial = true,
};
