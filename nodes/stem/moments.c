/* moments: exact first moments of every detector frame, in one sweep:
 * S = sum I, Sr = sum r*I, Sc = sum c*I (u64; r, c pixel indices from 0).
 * Parallel over scan positions; the per-frame sweep is in frame_moments.c
 * (vpmaddwd on u16 frames where the CPU has AVX2, param 'simd'). */
#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/frame_moments.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/stem/moments.h"

#define MOMENTS_PARAMS(P) P(ENUM, simd, "auto", SL_SIMD_PARAM_DOC, SL_SIMD_CHOICES)
SL_NODE_PARAMS(moments_params, MOMENTS_PARAMS)

static const sl_port_def moments_outputs[] = {
    {"s", "streamed u64 [scan... |]: S = sum of the frame's pixels", "counts", false},
    {"sr", "streamed u64 [scan... |]: Sr = sum of row index * pixel", "counts*pixels", false},
    {"sc", "streamed u64 [scan... |]: Sc = sum of column index * pixel", "counts*pixels", false},
};

static sl_code moments_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check(x, err);
  if (rc) return rc;
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  if (!sl_frame_moments_fit(x->dtype, h, w))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "%s frames of %lldx%lld pixels: sum r*I may exceed u64 (2^64 - 1); moments "
                   "are exact only where they provably fit",
                   sl_dtype_name(x->dtype), (long long)h, (long long)w);
  for (int k = 0; k < SL_COUNT_OF(moments_outputs); k++)
    n->out[k] = sl_desc_make(SL_U64, x->stream_rank, x->dims, x->stream_rank);
  return SL_OK;
}

static void moments_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *x = &n->in[0];
  c->bytes_read = positions * sl_desc_item_bytes(x);
  c->bytes_written = positions * 3 * 8;
  c->ops = positions * 2 * sl_desc_item_elems(x);
  c->per_worker_bytes = sl_frame_moments_scratch(x->dims[x->rank - 1]);
}

static void moments_emit(const sl_kernel_args *a, void *ctx, int64_t p, const uint64_t m[3]) {
  (void)ctx;
  uint64_t *s = a->out[0], *sr = a->out[1], *sc = a->out[2];
  s[p] = m[0], sr[p] = m[1], sc[p] = m[2];
}

static sl_code moments_cpu(sl_kernel_args *a) {
  return sl_frame_moments_chunk(a, (sl_simd)moments_params_of(a->node)->simd, moments_emit, NULL);
}

static const sl_port_def moments_inputs[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code moments_cuda(sl_kernel_args *a) {
  const sl_cuda_moments_params p = {.frames = sl_glue_frame_shape(&a->node->in[0])};
  return sl_cuda_moments(&p, a);
}
#endif

const sl_node_desc sl_node_moments = {
    .type = "moments",
    .doc = "Exact u64 first moments of each frame (S, Sr, Sc) in one sweep; CoM = (Sr/S, Sc/S).",
    SL_PARAMS_DESC(moments_params),
    .inputs = moments_inputs, .n_inputs = SL_COUNT_OF(moments_inputs),
    .outputs = moments_outputs, .n_outputs = SL_COUNT_OF(moments_outputs),
    .infer = moments_infer, .cost = moments_cost,
    .kernel = {[SL_BACKEND_CPU] = moments_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(moments_cuda)},
};
