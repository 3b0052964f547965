/* com: centre of mass of every frame (REFERENCE.md section 4), fused: one
 * sweep computes S, Sr, Sc exactly in u64 (frame_moments.c: vpmaddwd on u16
 * frames where the CPU has AVX2, param 'simd') and each chunk
 * writes CoM = (Sr/S, Sc/S) (float64 division, detector pixels from pixel
 * (0, 0)) for its positions into the whole outputs com_row and com_col, a
 * declared concat (each chunk writes its own positions, in place; the
 * executor would place another device's or rank's). A frame with S = 0
 * writes NaN, which no frame with S > 0 can give (u64 moments over a
 * positive count): the outputs themselves say which positions count, so the
 * node keeps no state beside them. finalize() then removes the descan:
 *  - descan none (default): the mean over the positions with S > 0;
 *  - descan plane: the least-squares plane a + b*row + c*col over those
 *    positions (row, col = scan indices; with one scan axis a line a + b*i).
 * Positions with S = 0 stay 0.
 *
 * Instead of frames the node can read the moments S, Sr, Sc (inputs s, sr,
 * sc: streamed u64, e.g. virtual_detectors' or the moments node's outputs),
 * so that a pipeline that also needs virtual images sweeps each frame once:
 * the CoM from the same u64 values is the same double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/frame_moments.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/stem/com.h"

/* Param 'descan', in the order of its choices. */
typedef enum com_descan { COM_NONE, COM_PLANE } com_descan;

#define COM_PARAMS(P)                                                                         \
  P(ENUM, descan, "none",                                                                     \
    "none: remove the scan mean; plane: remove a least-squares plane a + b*row + c*col over " \
    "the scan",                                                                               \
    "none|plane")                                                                             \
  P(ENUM, simd, "auto", SL_SIMD_PARAM_DOC, SL_SIMD_CHOICES)
SL_NODE_PARAMS(com_params, COM_PARAMS)

/* The input that carries the scan: frames, or (moments inputs) s. */
static const sl_tensor_desc *scan_desc(const sl_node *n) {
  return n->in[0].dtype != SL_DT_INVALID ? &n->in[0] : &n->in[1];
}

/* Frames, or all three moments of one scan shape; not both. */
static sl_code com_inputs_check(sl_node *n, sl_error *err) {
  bool frames = n->in[0].dtype != SL_DT_INVALID;
  int moments = 0;
  for (int k = 1; k < 4; k++) moments += n->in[k].dtype != SL_DT_INVALID;
  if (frames && moments)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "connect either input 'frames' or inputs 's', 'sr' and 'sc', not both");
  if (!frames && moments != 3)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "needs input 'frames', or all of inputs 's', 'sr' and 'sc' (the moments)");
  if (frames) return sl_frames_check(&n->in[0], err);
  static const char *names[] = {"", "s", "sr", "sc"};
  for (int k = 1; k < 4; k++) {
    const sl_tensor_desc *m = &n->in[k];
    bool same = m->dtype == SL_U64 && m->stream_rank > 0 && m->rank == m->stream_rank &&
                m->rank == n->in[1].rank;
    for (int i = 0; same && i < m->rank; i++) same = m->dims[i] == n->in[1].dims[i];
    if (!same)
      return sl_input_refuse(err, names[k],
                             "streamed u64 [scan... |] with the scan shape of 's'", m);
  }
  return SL_OK;
}

static sl_code com_infer(sl_node *n, sl_error *err) {
  sl_code rc = com_inputs_check(n, err);
  if (rc) return rc;
  const sl_tensor_desc *x = scan_desc(n);
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  if (x == &n->in[0] && !sl_frame_moments_fit(x->dtype, h, w))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "%s frames of %lldx%lld pixels: sum r*I may exceed u64 (2^64 - 1); the centre "
                   "of mass is computed only where the moments provably fit",
                   sl_dtype_name(x->dtype), (long long)h, (long long)w);
  for (int k = 0; k < 2; k++) n->out[k] = sl_desc_make(SL_F64, x->stream_rank, x->dims, 0);
  return SL_OK;
}

static void com_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *x = scan_desc(n);
  c->bytes_written = positions * 2 * 8;
#ifdef SLUICE_HAVE_CUDA
  c->device_state_bytes = sl_cuda_com_table_bytes(sl_desc_positions(x)); /* CUDA: descan sums */
#endif
  if (x != &n->in[0]) { /* the moments: three u64 per position */
    c->bytes_read = positions * 3 * 8;
    c->ops = positions * 2;
    return;
  }
  c->bytes_read = positions * sl_desc_item_bytes(x);
  c->ops = positions * 2 * sl_desc_item_elems(x);
  c->per_worker_bytes = sl_frame_moments_scratch(x->dims[x->rank - 1]);
}

/* CoM of frame p of the chunk at its place (out[] points at the chunk's
 * first position: the executor's concat); S = 0 gives NaN. */
static void com_emit(const sl_kernel_args *a, void *ctx, int64_t p, const uint64_t m[3]) {
  (void)ctx;
  double *cr = a->out[0], *cc = a->out[1];
  if (m[0] > 0) {
    cr[p] = (double)m[1] / (double)m[0];
    cc[p] = (double)m[2] / (double)m[0];
  } else {
    cr[p] = cc[p] = NAN;
  }
}

static sl_code com_cpu(sl_kernel_args *a) {
  const int64_t npos = sl_desc_positions(scan_desc(a->node));
  if (a->pos_start < 0 || a->pos_start + a->pos_count > npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count), (long long)npos);
  if (a->node->in[0].dtype != SL_DT_INVALID)
    return sl_frame_moments_chunk(a, (sl_simd)com_params_of(a->node)->simd, com_emit, NULL);
  const uint64_t *ms = a->in[1], *msr = a->in[2], *msc = a->in[3];
  for (int64_t p = 0; p < a->pos_count; p++)
    com_emit(a, NULL, p, (const uint64_t[3]){ms[p], msr[p], msc[p]});
  return SL_OK;
}

/* Removes the mean (or the least-squares plane) of v over the valid positions
 * (those not NaN: S > 0); invalid positions are set to 0. `cols` is the
 * length of the last scan axis
 * (position i sits at row i / cols, col i % cols).
 *
 * Every sum runs in a fixed two-level order that the CUDA finalize
 * (shaders/cuda/detector.cu, k_descan_blocks / k_descan_reduce) repeats
 * operation for operation, so that both give the same doubles: positions are
 * cut in blocks of COM_DESCAN_BLOCK, each block is summed in position order
 * from 0, and the block sums are added in block order from 0. */
#define COM_DESCAN_BLOCK 256 /* = DD_DESCAN_BLOCK in shaders/cuda/detector.cu */

static void remove_descan(double *v, int64_t npos, int64_t cols, com_descan mode) {
  double n = 0, sy = 0, sr = 0, sc = 0;
  for (int64_t b0 = 0; b0 < npos; b0 += COM_DESCAN_BLOCK) {
    const int64_t b1 = npos - b0 < COM_DESCAN_BLOCK ? npos : b0 + COM_DESCAN_BLOCK;
    double pn = 0, py = 0, pr = 0, pc = 0;
    for (int64_t i = b0; i < b1; i++)
      if (!isnan(v[i])) {
        pn += 1;
        py += v[i];
        pr += (double)(i / cols);
        pc += (double)(i % cols);
      }
    n += pn, sy += py, sr += pr, sc += pc;
  }
  if (n == 0) {
    for (int64_t i = 0; i < npos; i++) v[i] = 0;
    return;
  }
  double my = sy / n, mr = sr / n, mc = sc / n, b = 0, c = 0;
  if (mode == COM_PLANE) {
    double rr = 0, cc = 0, rc = 0, ry = 0, cy = 0;
    for (int64_t b0 = 0; b0 < npos; b0 += COM_DESCAN_BLOCK) {
      const int64_t b1 = npos - b0 < COM_DESCAN_BLOCK ? npos : b0 + COM_DESCAN_BLOCK;
      double prr = 0, pcc = 0, prc = 0, pry = 0, pcy = 0;
      for (int64_t i = b0; i < b1; i++)
        if (!isnan(v[i])) {
          double dr = (double)(i / cols) - mr, dc = (double)(i % cols) - mc, dy = v[i] - my;
          prr += dr * dr, pcc += dc * dc, prc += dr * dc, pry += dr * dy, pcy += dc * dy;
        }
      rr += prr, cc += pcc, rc += prc, ry += pry, cy += pcy;
    }
    double det = rr * cc - rc * rc;
    if (rr > 0 && cc > 0 && det > 1e-12 * rr * cc) {
      b = (ry * cc - cy * rc) / det;
      c = (cy * rr - ry * rc) / det;
    } else if (rr > 0) {
      b = ry / rr;
    } else if (cc > 0) {
      c = cy / cc;
    }
  }
  for (int64_t i = 0; i < npos; i++)
    v[i] = !isnan(v[i]) ? v[i] - my - b * ((double)(i / cols) - mr) - c * ((double)(i % cols) - mc)
                    : 0;
}

static sl_code com_finalize(sl_kernel_args *a) {
  const com_descan mode = (com_descan)com_params_of(a->node)->descan;
  const sl_tensor_desc *x = scan_desc(a->node);
  int64_t cols = x->dims[x->stream_rank - 1]; /* one scan axis: row 0, col i */
  const int64_t npos = sl_desc_positions(x);
  for (int k = 0; k < 2; k++) remove_descan(a->out[k], npos, cols, mode);
  return SL_OK;
}

static const sl_port_def com_inputs[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W] (or the moments below)",
     "counts", true},
    {"s", "streamed u64 [scan... |]: S of each frame, instead of frames (e.g. virtual_detectors.s)",
     "counts", true},
    {"sr", "streamed u64 [scan... |]: Sr of each frame, with s", "counts*pixels", true},
    {"sc", "streamed u64 [scan... |]: Sc of each frame, with s", "counts*pixels", true},
};
static const sl_port_def com_outputs[] = {
    {"com_row", "whole f64 [scan...]: Sr/S minus the descan (mean or plane); 0 where S = 0",
     "pixels", false},
    {"com_col", "whole f64 [scan...]: Sc/S minus the descan (mean or plane); 0 where S = 0",
     "pixels", false},
};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_cuda_com_params com_cuda_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *scan = scan_desc(n);
  return (sl_cuda_com_params){
      .from_frames = n->in[0].dtype != SL_DT_INVALID,
      .frames = sl_glue_frame_shape(&n->in[0]),
      .positions = sl_desc_positions(scan),
      .scan_cols = scan->stream_rank > 0 ? scan->dims[scan->stream_rank - 1] : 1,
      .descan = com_params_of(n)->descan == COM_PLANE ? SL_CUDA_COM_DESCAN_PLANE
                                                      : SL_CUDA_COM_DESCAN_NONE,
      .device_state = sl_glue_device_state(a)};
}

static sl_code com_cuda(sl_kernel_args *a) {
  const sl_cuda_com_params p = com_cuda_params(a);
  return sl_cuda_com(&p, a);
}

static sl_code com_cuda_finalize(sl_kernel_args *a) {
  const sl_cuda_com_params p = com_cuda_params(a);
  return sl_cuda_com_finalize(&p, a);
}
#endif

const sl_node_desc sl_node_com = {
    .type = "com",
    .doc = "Centre of mass of each frame from exact u64 moments (one sweep), descan removed "
           "(scan mean or least-squares plane).",
    SL_PARAMS_DESC(com_params),
    .inputs = com_inputs, .n_inputs = SL_COUNT_OF(com_inputs),
    .outputs = com_outputs, .n_outputs = SL_COUNT_OF(com_outputs),
    .infer = com_infer, .cost = com_cost,
    .kernel = {[SL_BACKEND_CPU] = com_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(com_cuda)},
    .finalize = {[SL_BACKEND_CPU] = com_finalize,
                 [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(com_cuda_finalize)},
    .combine = {SL_COMBINE_CONCAT, SL_COMBINE_CONCAT},
    .scan_image_outputs = 0x3u /* com_row, com_col */,
};
