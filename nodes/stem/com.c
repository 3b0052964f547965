/* com: centre of mass of every frame (REFERENCE.md section 4), fused: one
 * sweep computes S, Sr, Sc exactly in u64 (frame_moments.c: vpmaddwd on u16
 * frames where the CPU has AVX2, param 'simd') and each chunk
 * writes CoM = (Sr/S, Sc/S) (float64 division, detector pixels from pixel
 * (0, 0)) for its positions into the whole outputs com_row and com_col;
 * frames with S = 0 give 0. finalize() then removes the descan:
 *  - descan none (default): the mean over the positions with S > 0;
 *  - descan plane: the least-squares plane a + b*row + c*col over those
 *    positions (row, col = scan indices; with one scan axis a line a + b*i).
 * Positions with S = 0 stay 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/graph/graph.h"
#include "../../engine/graph/node.h"
#include "frame_moments.h"
#include "stem_ports.h"
#include "shaders/cuda/sl_cuda.h"

typedef enum com_descan { COM_NONE, COM_PLANE } com_descan;

typedef struct com_state {
  int64_t npos;
  uint8_t *valid; /* per scan position: S > 0 */
} com_state;

static sl_code com_descan_param(const sl_node *n, com_descan *d, sl_error *err) {
  const char *s = sl_param_str(n, "descan");
  if (!strcmp(s, "none")) *d = COM_NONE;
  else if (!strcmp(s, "plane")) *d = COM_PLANE;
  else
    return sl_fail(err, SL_ERR_PIPELINE, "param 'descan' must be none or plane, got '%s'", s);
  return SL_OK;
}

static sl_code com_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check(x, err);
  if (rc) return rc;
  com_descan dm = COM_NONE;
  if ((rc = com_descan_param(n, &dm, err))) return rc;
  sl_simd want;
  if ((rc = sl_stem_simd_param(n, &want, err))) return rc;
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  if (!sl_frame_moments_fit(x->dtype, h, w))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "%s frames of %lldx%lld pixels: sum r*I may exceed u64 (2^64 - 1); the centre "
                   "of mass is computed only where the moments provably fit",
                   sl_dtype_name(x->dtype), (long long)h, (long long)w);
  for (int k = 0; k < 2; k++) n->out[k] = sl_desc_make(SL_F64, x->stream_rank, x->dims, 0);
  return SL_OK;
}

static void com_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *x = &n->in[0];
  c->bytes_read = positions * sl_desc_item_bytes(x);
  c->bytes_written = positions * 2 * 8;
  c->ops = positions * 2 * sl_desc_item_elems(x);
  c->per_worker_bytes = sl_frame_moments_scratch(x->dims[x->rank - 1]);
  c->state_bytes = sl_desc_positions(x);
}

static void com_release(sl_node *n) {
  com_state *s = n->state;
  if (!s) return;
  free(s->valid);
  free(s);
  n->state = NULL;
}

static sl_code com_prepare(sl_node *n, sl_error *err) {
  com_state *s = calloc(1, sizeof *s);
  int64_t npos = sl_desc_positions(&n->in[0]);
  if (s) s->valid = calloc((size_t)(npos ? npos : 1), 1);
  if (!s || !s->valid) {
    free(s);
    return sl_fail(err, SL_ERR_NOMEM, "com: out of memory for %lld positions", (long long)npos);
  }
  s->npos = npos;
  n->state = s;
  return SL_OK;
}

/* CoM of frame p of the chunk into the whole outputs; S = 0 gives 0. */
static void com_emit(const sl_kernel_args *a, void *ctx, int64_t p, const uint64_t m[3]) {
  com_state *s = ctx;
  double *cr = a->out[0], *cc = a->out[1];
  int64_t gp = a->pos_start + p;
  if (m[0] > 0) {
    cr[gp] = (double)m[1] / (double)m[0];
    cc[gp] = (double)m[2] / (double)m[0];
    s->valid[gp] = 1;
  } else {
    cr[gp] = cc[gp] = 0;
    s->valid[gp] = 0;
  }
}

static sl_code com_cpu(sl_kernel_args *a) {
  com_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "com: kernel called before prepare");
  if (a->pos_start < 0 || a->pos_start + a->pos_count > s->npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count),
                   (long long)s->npos);
  return sl_frame_moments_chunk(a, com_emit, s);
}

/* Removes the mean (or the least-squares plane) of v over the valid positions;
 * invalid positions are set to 0. `cols` is the length of the last scan axis
 * (position i sits at row i / cols, col i % cols).
 *
 * Every sum runs in a fixed two-level order that the CUDA finalize
 * (shaders/cuda/detector.cu, k_descan_blocks / k_descan_reduce) repeats
 * operation for operation, so that both give the same doubles: positions are
 * cut in blocks of COM_DESCAN_BLOCK, each block is summed in position order
 * from 0, and the block sums are added in block order from 0. */
#define COM_DESCAN_BLOCK 256 /* = DD_DESCAN_BLOCK in shaders/cuda/detector.cu */

static void remove_descan(double *v, const uint8_t *valid, int64_t npos, int64_t cols,
                          com_descan mode) {
  double n = 0, sy = 0, sr = 0, sc = 0;
  for (int64_t b0 = 0; b0 < npos; b0 += COM_DESCAN_BLOCK) {
    const int64_t b1 = npos - b0 < COM_DESCAN_BLOCK ? npos : b0 + COM_DESCAN_BLOCK;
    double pn = 0, py = 0, pr = 0, pc = 0;
    for (int64_t i = b0; i < b1; i++)
      if (valid[i]) {
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
        if (valid[i]) {
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
    v[i] = valid[i] ? v[i] - my - b * ((double)(i / cols) - mr) - c * ((double)(i % cols) - mc)
                    : 0;
}

static sl_code com_finalize(sl_kernel_args *a) {
  const com_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "com: finalize called before prepare");
  com_descan mode = COM_NONE;
  sl_code rc = com_descan_param(a->node, &mode, a->err);
  if (rc) return rc;
  const sl_tensor_desc *x = &a->node->in[0];
  int64_t cols = x->dims[x->stream_rank - 1]; /* one scan axis: row 0, col i */
  for (int k = 0; k < 2; k++) remove_descan(a->out[k], s->valid, s->npos, cols, mode);
  return SL_OK;
}

static const sl_param_def com_params[] = {
    {"descan", SL_PT_STRING, "none",
     "none: remove the scan mean; plane: remove a least-squares plane a + b*row + c*col over "
     "the scan"},
    SL_STEM_SIMD_PARAM,
};
static const sl_port_def com_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false}};
static const sl_port_def com_out[] = {
    {"com_row", "whole f64 [scan...]: Sr/S minus the descan (mean or plane); 0 where S = 0",
     "pixels", false},
    {"com_col", "whole f64 [scan...]: Sc/S minus the descan (mean or plane); 0 where S = 0",
     "pixels", false},
};

const sl_node_desc sl_node_com = {
    .type = "com",
    .doc = "Centre of mass of each frame from exact u64 moments (one sweep), descan removed "
           "(scan mean or least-squares plane).",
    .params = com_params, .n_params = 2,
    .inputs = com_in, .n_inputs = 1,
    .outputs = com_out, .n_outputs = 2,
    .infer = com_infer, .cost = com_cost,
    .prepare = com_prepare, .release = com_release,
    .kernel = {[SL_BACKEND_CPU] = com_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_com)},
    .finalize = {[SL_BACKEND_CPU] = com_finalize,
                 [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_com_finalize)},
};
