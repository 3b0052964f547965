/* com on CUDA. See com.h. The per-frame CoM comes from the shared moments
 * kernel (common/frame_moments.cuh); this file holds the CoM of moments
 * another node computed and the descan removal of finalize. */
#include <math_constants.h>
#include <stdlib.h>

#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/frame_moments.cuh"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/stem/com.h"

static const char k_node[] = "com";

/* The descan sums run over blocks of positions: = COM_DESCAN_BLOCK in
 * nodes/stem/com.c (the CPU sums in the same blocks). */
#define DESCAN_BLOCK 256

/* The node's device state: the descan results and block sums of finalize
 * (in the node's device table). Which positions count (S > 0) the outputs
 * say themselves: NaN where S = 0. */
typedef struct com_device_state {
  double *fin; /* per output {flag, my, mr, mc, b, c}, then block sums */
  int64_t npos;
} com_device_state;

static long long descan_blocks(long long npos) {
  long long nb = (npos + DESCAN_BLOCK - 1) / DESCAN_BLOCK;
  return nb < 1 ? 1 : nb;
}

/* The device table of a scan of npos positions: fin. */
static void com_layout(sl_table *t, int64_t npos, com_device_state *o) {
  o->fin = (double *)sl_table_take(t, (16 + 16 * (int64_t)descan_blocks(npos)) * (int64_t)sizeof(double));
  o->npos = npos;
}

extern "C" int64_t sl_cuda_com_table_bytes(int64_t positions) {
  sl_table t = sl_table_counter();
  com_device_state o;
  com_layout(&t, positions, &o);
  return t.used;
}

/* ---- kernels --------------------------------------------------------------------- */

/* com from moments another node computed (inputs s, sr, sc): the same
 * division of the same u64 values as the frames kernel and the CPU, at the
 * chunk's place (the executor's concat); NaN where S = 0. */
__global__ void sl_k_com_from_moments(const unsigned long long *__restrict__ s,
                                      const unsigned long long *__restrict__ sr,
                                      const unsigned long long *__restrict__ sc, long long n,
                                      double *__restrict__ ocr, double *__restrict__ occ) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    if (s[i] > 0) {
      ocr[i] = __ddiv_rn((double)sr[i], (double)s[i]);
      occ[i] = __ddiv_rn((double)sc[i], (double)s[i]);
    } else {
      ocr[i] = CUDART_NAN, occ[i] = CUDART_NAN;
    }
  }
}

/* remove_descan (com.c) exactly: the same two-level sums (blocks of
 * DESCAN_BLOCK positions summed in position order from 0, then the block
 * sums in block order from 0), the same expressions, no contraction (__d*_rn),
 * so the doubles equal the CPU's. A position counts where its value is not
 * NaN (S > 0).
 *  sl_k_descan_blocks<0>: one thread per (block, output): n, sy, sr, sc of the block;
 *  sl_k_descan_reduce<0>: one thread per output: the totals, then my, mr, mc;
 *  sl_k_descan_blocks<1>, sl_k_descan_reduce<1> (plane): rr, cc, rc, ry, cy, then b, c;
 *  sl_k_descan_apply: every position in parallel.
 * fin: per output k, fin[8k..8k+5] = {no valid position, my, mr, mc, b, c};
 * block sums at fin[16 + (k * nb + block) * 8 + j]. */
template <int PASS>
__global__ void sl_k_descan_blocks(const double *v0, const double *v1, long long npos, long long cols, double *fin,
                                   long long nb) {
  const long long blk = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (blk >= nb) return;
  const int k = blockIdx.y;
  const double *v = k ? v1 : v0;
  const long long b0 = blk * DESCAN_BLOCK;
  const long long b1 = npos - b0 < DESCAN_BLOCK ? npos : b0 + DESCAN_BLOCK;
  long long r = b0 / cols, c = b0 - r * cols; /* row and column of position i, kept up to date */
  double *out = fin + 16 + (k * nb + blk) * 8;
  if (PASS == 0) {
    double pn = 0, py = 0, pr = 0, pc = 0;
    for (long long i = b0; i < b1; i++) {
      if (!isnan(v[i])) {
        pn = __dadd_rn(pn, 1.0);
        py = __dadd_rn(py, v[i]);
        pr = __dadd_rn(pr, (double)r);
        pc = __dadd_rn(pc, (double)c);
      }
      if (++c == cols) c = 0, r++;
    }
    out[0] = pn, out[1] = py, out[2] = pr, out[3] = pc;
  } else {
    const double *o = fin + 8 * k;
    if (o[0] != 0) return; /* no valid position */
    const double my = o[1], mr = o[2], mc = o[3];
    double prr = 0, pcc = 0, prc = 0, pry = 0, pcy = 0;
    for (long long i = b0; i < b1; i++) {
      if (!isnan(v[i])) {
        const double dr = __dsub_rn((double)r, mr), dc = __dsub_rn((double)c, mc), dy = __dsub_rn(v[i], my);
        prr = __dadd_rn(prr, __dmul_rn(dr, dr));
        pcc = __dadd_rn(pcc, __dmul_rn(dc, dc));
        prc = __dadd_rn(prc, __dmul_rn(dr, dc));
        pry = __dadd_rn(pry, __dmul_rn(dr, dy));
        pcy = __dadd_rn(pcy, __dmul_rn(dc, dy));
      }
      if (++c == cols) c = 0, r++;
    }
    out[0] = prr, out[1] = pcc, out[2] = prc, out[3] = pry, out[4] = pcy;
  }
}

/* sum[f] = field f (f < N) of the nb partial records at part (8 doubles
 * each), added in record order (fixed, so the result is deterministic). */
template <int N>
__device__ void sum_partials(const double *part, long long nb, double *sum) {
  for (int f = 0; f < N; f++) sum[f] = 0;
  for (long long b = 0; b < nb; b++)
    for (int f = 0; f < N; f++) sum[f] = __dadd_rn(sum[f], part[b * 8 + f]);
}

template <int PASS>
__global__ void sl_k_descan_reduce(double *fin, long long nb) {
  if (threadIdx.x != 0) return;
  const int k = blockIdx.x;
  double *o = fin + 8 * k;
  const double *part = fin + 16 + k * nb * 8;
  if (PASS == 0) {
    double t[4];
    sum_partials<4>(part, nb, t);
    const double n = t[0], sy = t[1], sr = t[2], sc = t[3];
    if (n == 0) {
      o[0] = 1; /* "no valid position": zero everything */
      return;
    }
    o[0] = 0, o[1] = __ddiv_rn(sy, n), o[2] = __ddiv_rn(sr, n), o[3] = __ddiv_rn(sc, n), o[4] = 0, o[5] = 0;
  } else {
    if (o[0] != 0) return;
    double t[5], b = 0, c = 0;
    sum_partials<5>(part, nb, t);
    const double rr = t[0], cc = t[1], rc = t[2], ry = t[3], cy = t[4];
    double det = __dsub_rn(__dmul_rn(rr, cc), __dmul_rn(rc, rc));
    if (rr > 0 && cc > 0 && det > __dmul_rn(__dmul_rn(1e-12, rr), cc)) {
      b = __ddiv_rn(__dsub_rn(__dmul_rn(ry, cc), __dmul_rn(cy, rc)), det);
      c = __ddiv_rn(__dsub_rn(__dmul_rn(cy, rr), __dmul_rn(ry, rc)), det);
    } else if (rr > 0) {
      b = __ddiv_rn(ry, rr);
    } else if (cc > 0) {
      c = __ddiv_rn(cy, cc);
    }
    o[4] = b, o[5] = c;
  }
}

__global__ void sl_k_descan_apply(double *v0, double *v1, long long npos, long long cols, const double *fin) {
  const double *o = fin + 8 * blockIdx.y;
  double *v = blockIdx.y ? v1 : v0;
  const bool none = o[0] != 0;
  const double my = o[1], mr = o[2], mc = o[3], b = o[4], c = o[5];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npos;
       i += (long long)gridDim.x * blockDim.x) {
    if (none || isnan(v[i])) {
      v[i] = 0;
      continue;
    }
    double t = __dsub_rn(v[i], my);
    t = __dsub_rn(t, __dmul_rn(b, __dsub_rn((double)(i / cols), mr)));
    t = __dsub_rn(t, __dmul_rn(c, __dsub_rn((double)(i % cols), mc)));
    v[i] = t;
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel com_kernels[] = {
    ENTRY("com_from_moments", sl_k_com_from_moments),
    ENTRY("com_descan_blocks_mean", sl_k_descan_blocks<0>),
    ENTRY("com_descan_reduce_mean", sl_k_descan_reduce<0>),
    ENTRY("com_descan_blocks_plane", sl_k_descan_blocks<1>),
    ENTRY("com_descan_reduce_plane", sl_k_descan_reduce<1>),
    ENTRY("com_descan_apply", sl_k_descan_apply),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(com_kernels, "com")

/* ---- launchers ------------------------------------------------------------------- */

static void com_state_release(void *p) { free(p); }

/* The node's state, its pieces of the device table taken on the first call. */
static sl_code com_state_get(const sl_cuda_com_params *p, sl_kernel_args *a, com_device_state **out) {
  com_device_state *s = (com_device_state *)*p->device_state.state;
  if (!s) {
    const int64_t npos = p->positions;
    sl_table t = sl_table_lent(a);
    com_device_state pieces;
    com_layout(&t, npos, &pieces);
    sl_code rc = sl_table_check(&t, a, k_node);
    if (rc != SL_OK) return rc;
    s = (com_device_state *)calloc(1, sizeof *s);
    if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
    *s = pieces;
    *p->device_state.state = s;
    *p->device_state.release = com_state_release;
  }
  *out = s;
  return SL_OK;
}

extern "C" sl_code sl_cuda_com(const sl_cuda_com_params *p, sl_kernel_args *a) {
  com_device_state *s = NULL;
  sl_code rc = com_state_get(p, a, &s);
  if (rc) return rc;
  if (a->pos_start < 0 || a->pos_start + a->pos_count > s->npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count), (long long)s->npos);
  if (p->from_frames) return sl_cuda_frame_centre_of_mass(a, &p->frames);
  const long long n = a->pos_count;
  if (n <= 0) return SL_OK;
  const long long blocks = (n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535;
  sl_k_com_from_moments<<<(unsigned)blocks, 256, 0, sl_cuda_queue(a)>>>(
      (const unsigned long long *)a->in[1], (const unsigned long long *)a->in[2],
      (const unsigned long long *)a->in[3], n, (double *)a->out[0], (double *)a->out[1]);
  return sl_cuda_check_launch(a, "sl_k_com_from_moments");
}

extern "C" sl_code sl_cuda_com_finalize(const sl_cuda_com_params *p, sl_kernel_args *a) {
  const int64_t npos = p->positions, cols = p->scan_cols;
  if (p->descan != SL_CUDA_COM_DESCAN_NONE && p->descan != SL_CUDA_COM_DESCAN_PLANE)
    return sl_fail(a->err, SL_ERR_PIPELINE, "param 'descan' must be none or plane (mode %d)", p->descan);
  const bool plane = p->descan == SL_CUDA_COM_DESCAN_PLANE;
  cudaStream_t st = sl_cuda_queue(a);
  com_device_state *s = NULL; /* taken here when no chunk ran */
  sl_code rc = com_state_get(p, a, &s);
  if (rc) return rc;
  if (npos != s->npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com finalize: %lld positions, the state has %lld", (long long)npos,
                   (long long)s->npos);
  double *v0 = (double *)a->out[0], *v1 = (double *)a->out[1];
  const long long nb = descan_blocks(npos);
  const dim3 bg((unsigned)((nb + 127) / 128), 2);
  sl_k_descan_blocks<0><<<bg, 128, 0, st>>>(v0, v1, npos, cols, s->fin, nb);
  rc = sl_cuda_check_launch(a, "sl_k_descan_blocks");
  if (rc) return rc;
  sl_k_descan_reduce<0><<<2, 32, 0, st>>>(s->fin, nb);
  if ((rc = sl_cuda_check_launch(a, "sl_k_descan_reduce"))) return rc;
  if (plane) {
    sl_k_descan_blocks<1><<<bg, 128, 0, st>>>(v0, v1, npos, cols, s->fin, nb);
    if ((rc = sl_cuda_check_launch(a, "sl_k_descan_blocks"))) return rc;
    sl_k_descan_reduce<1><<<2, 32, 0, st>>>(s->fin, nb);
    if ((rc = sl_cuda_check_launch(a, "sl_k_descan_reduce"))) return rc;
  }
  int64_t g = (npos + 255) / 256;
  if (g > 4096) g = 4096;
  if (g < 1) g = 1;
  sl_k_descan_apply<<<dim3((unsigned)g, 2), 256, 0, st>>>(v0, v1, npos, cols, s->fin);
  return sl_cuda_check_launch(a, "sl_k_descan_apply");
}
