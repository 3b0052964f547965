/* dpc's parallax fit on the device. See dpc_parallax.h; the host code each
 * step follows is nodes/stem/dpc_parallax.c (its host_* steps) and
 * nodes/stem/dpc_pair_power.c (the objective). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/stem/dpc_parallax.h"
#include "shaders/cuda/stem/fourier_integral.cuh"

static const char k_node[] = "dpc";

/* M_PI of the host's math.h, the same double. */
#define PX_PI 3.14159265358979323846
/* Transforms a cuFFT call: the batched plans' batch. */
#define PX_BATCH 8
/* Values of s a grid call: its best values come back in one piece. */
#define PX_GRID_CHUNK 256
/* Pairs whose objective terms a pattern-search block holds at once. */
#define PX_TERMS_PAIRS 512
/* Block size of every kernel here (sl_cuda_block_sum's). */
#define PX_THREADS SL_INTEGRAL_THREADS

struct sl_cuda_dpc_parallax {
  sl_cufft_api fft;
  int plan[4]; /* the window's forward (PX_BATCH), the pairs' inverse (PX_BATCH), the tcBF's forward
                  (PX_BATCH) and inverse (1) */
  bool have[4];
  int n;
  int64_t rows, cols;
  sl_cuda_parallax_geometry g;
  int64_t pw, npt, lags;
  /* pieces of the device table */
  double2 *wspec;   /* [slots][pw]: the used segments' window spectra (slots: n rounded up to PX_BATCH) */
  double2 *pairbuf; /* [PX_BATCH][pw]: the pairs' products and correlations */
  double *xcorr;    /* [n (n - 1) / 2][lags] */
  double *power;    /* [pw] */
  double *weight;   /* [pw] */
  double *sums;     /* [slots]: counts over the window */
  double *diag;     /* [slots]: mean squares over the window */
  int *index;       /* [n]: the used segments */
  int *pidx;        /* [pairs][2]: the pairs' used indices */
  double *pair;     /* [pairs][2]: their offset differences */
  double *best;     /* [PX_GRID_CHUNK][4] */
  double *scalars;  /* [8]: value, the pattern search's s, p, v, the skewness */
  double *shifts;   /* [n][2] */
  double2 *tspec;   /* [PX_BATCH][npt]: the tcBF window's spectra */
  double2 *acc;     /* [npt]: the tcBF's sum */
  void *work;
  int64_t work_bytes;
  /* the call */
  sl_kernel_args *a;
  const uint64_t *segments;
  int used, pairs;
};

static int64_t slots_of(int n) { return (int64_t)(n + PX_BATCH - 1) / PX_BATCH * PX_BATCH; }

/* The work area the four plans share: as much as the largest batch's data
 * (as idpc's integration reserves; a plan that wants more is not made). */
static int64_t work_bound(const sl_cuda_parallax_geometry *g) {
  const int64_t pw = g->pr * g->pc, npt = g->tr * g->tc;
  return PX_BATCH * (pw > npt ? pw : npt) * (int64_t)sizeof(double2);
}

static void parallax_layout(sl_table *t, int n, const sl_cuda_parallax_geometry *g, sl_cuda_dpc_parallax *o) {
  const int64_t pw = g->pr * g->pc, npt = g->tr * g->tc, slots = slots_of(n);
  const int64_t pairs = (int64_t)n * (n - 1) / 2, lags = (2 * g->lr + 1) * (2 * g->lc + 1), d = sizeof(double);
  o->wspec = (double2 *)sl_table_take(t, slots * pw * (int64_t)sizeof(double2));
  o->pairbuf = (double2 *)sl_table_take(t, PX_BATCH * pw * (int64_t)sizeof(double2));
  o->xcorr = (double *)sl_table_take(t, (pairs ? pairs : 1) * lags * d);
  o->power = (double *)sl_table_take(t, pw * d);
  o->weight = (double *)sl_table_take(t, pw * d);
  o->sums = (double *)sl_table_take(t, slots * d);
  o->diag = (double *)sl_table_take(t, slots * d);
  o->index = (int *)sl_table_take(t, n * (int64_t)sizeof(int));
  o->pidx = (int *)sl_table_take(t, (pairs ? pairs : 1) * 2 * (int64_t)sizeof(int));
  o->pair = (double *)sl_table_take(t, (pairs ? pairs : 1) * 2 * d);
  o->best = (double *)sl_table_take(t, PX_GRID_CHUNK * 4 * d);
  o->scalars = (double *)sl_table_take(t, 8 * d);
  o->shifts = (double *)sl_table_take(t, n * 2 * d);
  o->tspec = (double2 *)sl_table_take(t, PX_BATCH * npt * (int64_t)sizeof(double2));
  o->acc = (double2 *)sl_table_take(t, npt * (int64_t)sizeof(double2));
  o->work_bytes = work_bound(g);
  o->work = sl_table_take(t, o->work_bytes);
}

/* ---- kernels --------------------------------------------------------------------- */

/* numpy.fft.fftfreq (nodes/common/fourier_integral.h, sl_fft_freq). */
__device__ __forceinline__ double px_freq(long long i, long long n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

/* Block u: used segment u's window, its mean removed, zero padded to
 * pr x pc; its count over the window and mean square (the host's
 * spectra_range); slots past the used ones zero. */
__global__ void sl_k_px_window(const unsigned long long *__restrict__ seg, const int *__restrict__ index, int used,
                               long long R, long long C, long long wr, long long wc, long long pc, long long pw,
                               double2 *__restrict__ spec, double *__restrict__ sums, double *__restrict__ diag) {
  const int u = blockIdx.x;
  double2 *out = spec + (long long)u * pw;
  if (u >= used) {
    for (long long k = threadIdx.x; k < pw; k += blockDim.x) out[k] = make_double2(0, 0);
    return;
  }
  const long long r0 = (R - wr) / 2, c0 = (C - wc) / 2, nw = wr * wc;
  const unsigned long long *s = seg + (long long)index[u] * R * C + r0 * C + c0;
  double a = 0;
  for (long long k = threadIdx.x; k < nw; k += blockDim.x) a += (double)s[(k / wc) * C + k % wc];
  const double total = sl_cuda_block_sum(a), mean = total / (double)nw;
  double d = 0;
  for (long long k = threadIdx.x; k < pw; k += blockDim.x) {
    const long long i = k / pc, c = k - i * pc;
    double v = 0;
    if (i < wr && c < wc) {
      v = (double)s[i * C + c] - mean;
      d += v * v / (double)nw;
    }
    out[k] = make_double2(v, 0);
  }
  const double dsum = sl_cuda_block_sum(d);
  if (threadIdx.x == 0) sums[u] = total, diag[u] = dsum;
}

/* Tasks [t0, t0 + nt): task t's two pairs 2t, 2t + 1 as one transform's
 * input, a conj(b) + i c conj(d), weighted (the host's pairs_range). */
__global__ void sl_k_px_products(const double2 *__restrict__ spec, const int *__restrict__ pidx, int pairs,
                                 long long t0, long long nt, long long pw, const double *__restrict__ weight,
                                 double2 *__restrict__ out) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < nt * pw;
       e += (long long)gridDim.x * blockDim.x) {
    const long long tt = e / pw, q = e - tt * pw, k = 2 * (t0 + tt);
    const bool two = k + 1 < pairs;
    const double2 a = spec[pidx[2 * k] * pw + q], b = spec[pidx[2 * k + 1] * pw + q];
    const double2 c = two ? spec[pidx[2 * k + 2] * pw + q] : a, d = two ? spec[pidx[2 * k + 3] * pw + q] : a;
    const double g = weight ? weight[q] : 1;
    const double re1 = a.x * b.x + a.y * b.y, im1 = a.y * b.x - a.x * b.y;
    const double re2 = two ? c.x * d.x + c.y * d.y : 0, im2 = two ? c.y * d.x - c.x * d.y : 0;
    out[e] = make_double2(g * (re1 - im2), g * (im1 + re2));
  }
}

/* The lags of tasks [t0, t0 + nt) from their inverse transforms: the real
 * part pair 2t's, the imaginary part pair 2t + 1's, each divided by the
 * transform's size and the lag's overlap (the host's lags_out). */
__global__ void sl_k_px_lags(const double2 *__restrict__ in, int pairs, long long t0, long long nt, long long pr,
                             long long pc, long long wr, long long wc, long long lr, long long lc,
                             double *__restrict__ xcorr) {
  const long long sc = 2 * lc + 1, lags = (2 * lr + 1) * sc, pw = pr * pc;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < nt * lags;
       e += (long long)gridDim.x * blockDim.x) {
    const long long tt = e / lags, l = e - tt * lags, dr = l / sc - lr, dc = l % sc - lc, k = 2 * (t0 + tt);
    const double2 z = in[tt * pw + (dr < 0 ? dr + pr : dr) * pc + (dc < 0 ? dc + pc : dc)];
    const double overlap = (double)((wr - (dr < 0 ? -dr : dr)) * (wc - (dc < 0 ? -dc : dc)));
    xcorr[k * lags + l] = z.x / ((double)pw * overlap);
    if (k + 1 < pairs) xcorr[(k + 1) * lags + l] = z.y / ((double)pw * overlap);
  }
}

/* The mean power per frequency over the used segments' spectra. */
__global__ void sl_k_px_power(const double2 *__restrict__ spec, int used, long long pw, double *__restrict__ power) {
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < pw; q += (long long)gridDim.x * blockDim.x) {
    double e = 0;
    for (int u = 0; u < used; u++) {
      const double2 x = spec[u * pw + q];
      e += x.x * x.x + x.y * x.y;
    }
    power[q] = e / used;
  }
}

/* The objective (nodes/stem/dpc_pair_power.c, sl_pair_power) with the
 * host's operations in its order, never contracted into a multiply-add:
 * on the same correlations it gives the host's bits. */
#define PX_MUL __dmul_rn
#define PX_ADD __dadd_rn
#define PX_SUB __dsub_rn

__device__ __forceinline__ void px_cubic(double t, double w[4]) {
  w[0] = PX_MUL(PX_SUB(PX_MUL(PX_ADD(PX_MUL(-0.5, t), 1.0), t), 0.5), t);
  w[1] = PX_ADD(PX_MUL(PX_MUL(PX_SUB(PX_MUL(1.5, t), 2.5), t), t), 1.0);
  w[2] = PX_MUL(PX_ADD(PX_MUL(PX_ADD(PX_MUL(-1.5, t), 2.0), t), 0.5), t);
  w[3] = PX_MUL(PX_MUL(PX_SUB(PX_MUL(0.5, t), 0.5), t), t);
}

/* Pair k's four terms wy[i] * (the row's cubic) into term[4], false when
 * its lag is outside the kept ones (the host adds nothing then). */
__device__ __forceinline__ bool px_pair_terms(const double *__restrict__ xcorr, long long lr, long long lc,
                                              const double *__restrict__ pair, int k, const double m[4],
                                              double term[4]) {
  const long long sc = 2 * lc + 1, lags = (2 * lr + 1) * sc;
  const double a = pair[2 * k], b = pair[2 * k + 1];
  const double y = PX_ADD(PX_MUL(m[0], a), PX_MUL(m[1], b)), x = PX_ADD(PX_MUL(m[2], a), PX_MUL(m[3], b));
  const double fy = floor(y), fx = floor(x);
  const long long r0 = (long long)fy + lr - 1, c0 = (long long)fx + lc - 1;
  if (r0 < 0 || c0 < 0 || r0 + 3 > 2 * lr || c0 + 3 > 2 * lc) return false;
  double wy[4], wx[4];
  px_cubic(PX_SUB(y, fy), wy);
  px_cubic(PX_SUB(x, fx), wx);
  const double *xc = xcorr + (long long)k * lags + r0 * sc + c0;
  for (int i = 0; i < 4; i++) {
    const double *row = xc + i * sc;
    double r = PX_ADD(PX_MUL(wx[0], row[0]), PX_MUL(wx[1], row[1]));
    r = PX_ADD(r, PX_MUL(wx[2], row[2]));
    r = PX_ADD(r, PX_MUL(wx[3], row[3]));
    term[i] = PX_MUL(wy[i], r);
  }
  return true;
}

__device__ double px_value(const double *__restrict__ xcorr, long long lr, long long lc,
                           const double *__restrict__ pair, int pairs, const double m[4]) {
  double sum = 0, term[4];
  for (int k = 0; k < pairs; k++)
    if (px_pair_terms(xcorr, lr, lc, pair, k, m, term))
      for (int i = 0; i < 4; i++) sum = PX_ADD(sum, term[i]);
  return sum;
}

/* M = s R(p) T^t (the host's parallax_matrix). */
__device__ __forceinline__ void px_matrix(double s, double p, int t, double m[4]) {
  double sn, c;
  sincos(p, &sn, &c);
  if (!t) m[0] = s * c, m[1] = -s * sn, m[2] = s * sn, m[3] = s * c;
  else m[0] = -s * sn, m[1] = s * c, m[2] = s * c, m[3] = s * sn;
}

/* Block b: s = half (k0 + b + 1); its trials j = t n_p + q (t major, the
 * host's order), one a thread at a time; the block's best the largest
 * value, the smallest j of equal ones (the host keeps the first). */
__global__ void sl_k_px_grid(const double *__restrict__ xcorr, long long lr, long long lc,
                             const double *__restrict__ pair, int pairs, double half, long long k0,
                             double *__restrict__ best) {
  __shared__ double sv[PX_THREADS];
  __shared__ int sj[PX_THREADS];
  const double s = half * (double)(k0 + blockIdx.x + 1);
  const int n_p = (int)ceil(2 * PX_PI * s / half);
  double bv = -INFINITY, m[4];
  int bj = 0x7fffffff;
  for (int j = threadIdx.x; j < 2 * n_p; j += blockDim.x) {
    const int t = j / n_p, q = j - t * n_p;
    px_matrix(s, 2 * PX_PI * q / n_p, t, m);
    const double v = px_value(xcorr, lr, lc, pair, pairs, m);
    if (v > bv) bv = v, bj = j;
  }
  sv[threadIdx.x] = bv, sj[threadIdx.x] = bj;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) {
      const double v = sv[threadIdx.x + o];
      const int j = sj[threadIdx.x + o];
      if (v > sv[threadIdx.x] || (v == sv[threadIdx.x] && j < sj[threadIdx.x])) sv[threadIdx.x] = v, sj[threadIdx.x] = j;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int j = sj[0] == 0x7fffffff ? 0 : sj[0], t = j / n_p, q = j - t * n_p;
    double *b = best + 4 * blockIdx.x;
    b[0] = sv[0], b[1] = s, b[2] = 2 * PX_PI * q / n_p, b[3] = t;
  }
}

/* The objective at one map, out[0]. */
__global__ void sl_k_px_value(const double *__restrict__ xcorr, long long lr, long long lc,
                              const double *__restrict__ pair, int pairs, double m0, double m1, double m2, double m3,
                              double *__restrict__ out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const double m[4] = {m0, m1, m2, m3};
    out[0] = px_value(xcorr, lr, lc, pair, pairs, m);
  }
}

/* The objective at m by the block: the pairs' terms in parallel, then
 * added by thread 0 in the host's order. Every thread gets the value. */
__device__ double px_block_value(const double *__restrict__ xcorr, long long lr, long long lc,
                                 const double *__restrict__ pair, int pairs, const double m[4]) {
  __shared__ double term[PX_TERMS_PAIRS][4];
  __shared__ bool in[PX_TERMS_PAIRS];
  __shared__ double sum;
  if (threadIdx.x == 0) sum = 0;
  for (int k0 = 0; k0 < pairs; k0 += PX_TERMS_PAIRS) {
    const int nk = pairs - k0 < PX_TERMS_PAIRS ? pairs - k0 : PX_TERMS_PAIRS;
    __syncthreads();
    for (int k = threadIdx.x; k < nk; k += blockDim.x) in[k] = px_pair_terms(xcorr, lr, lc, pair, k0 + k, m, term[k]);
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 0; k < nk; k++)
        if (in[k])
          for (int i = 0; i < 4; i++) sum = PX_ADD(sum, term[k][i]);
  }
  __syncthreads();
  const double v = sum;
  __syncthreads();
  return v;
}

/* The pattern search (the host's host_pattern) in one block: out[0..2] =
 * s, p, v. Every thread keeps the search's state in its own registers and
 * makes the same moves (px_block_value gives each the same value): no
 * shared state to hand over between candidates. */
__global__ void sl_k_px_pattern(const double *__restrict__ xcorr, long long lr, long long lc,
                                const double *__restrict__ pair, int pairs, double half, double s0, double p0, int t,
                                double v0, double *__restrict__ out) {
  double bs = s0, bp = p0, bv = v0, ds = half / 2, dp = half / 2 / s0;
  for (int it = 0; it < 400 && ds > 1e-4 * half; it++) {
    bool better = false;
    for (int c = 0; c < 4; c++) {
      const double s = bs + (c == 0 ? ds : c == 1 ? -ds : 0), p = bp + (c == 2 ? dp : c == 3 ? -dp : 0);
      if (s <= 0) continue; /* the same for every thread */
      double m[4];
      px_matrix(s, p, t, m);
      const double v = px_block_value(xcorr, lr, lc, pair, pairs, m);
      if (v > bv) bv = v, bs = s, bp = p, better = true;
    }
    if (!better) ds /= 2, dp /= 2;
  }
  if (threadIdx.x == 0) out[0] = bs, out[1] = bp, out[2] = bv;
}

/* Block u < nb: used segment b0 + u's central tr x tc window, its mean
 * removed (the host's tcbf_groups). */
__global__ void sl_k_px_tfill(const unsigned long long *__restrict__ seg, const int *__restrict__ index, int b0,
                              int nb, long long R, long long C, long long tr, long long tc, double2 *__restrict__ out) {
  const int u = blockIdx.x;
  if (u >= nb) return;
  const long long np = tr * tc;
  const unsigned long long *s = seg + (long long)index[b0 + u] * R * C + (R - tr) / 2 * C + (C - tc) / 2;
  double a = 0;
  for (long long k = threadIdx.x; k < np; k += blockDim.x) a += (double)s[(k / tc) * C + k % tc];
  const double mean = sl_cuda_block_sum(a) / (double)np;
  for (long long k = threadIdx.x; k < np; k += blockDim.x)
    out[(long long)u * np + k] = make_double2((double)s[(k / tc) * C + k % tc] - mean, 0);
}

__device__ __forceinline__ double px_sinc(double x) { return fabs(x) < 1e-12 ? 1 : sin(PX_PI * x) / (PX_PI * x); }

/* acc (+)= the spectra of used segments [b0, b0 + nb) shifted by their M o
 * (exp(2 pi i f . sh)), in segment order; on the last batch each
 * frequency's sign turned (the host's corrected_tcbf). */
__global__ void sl_k_px_tsum(const double2 *__restrict__ spec, int b0, int nb, const double *__restrict__ shifts,
                             long long tr, long long tc, bool first, bool last, double chi, double cell, double m0,
                             double m1, double m2, double m3, double2 *__restrict__ acc) {
  const long long np = tr * tc;
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < np; q += (long long)gridDim.x * blockDim.x) {
    const long long i = q / tc, c = q - i * tc;
    const double fi = px_freq(i, tr), fj = px_freq(c, tc);
    double re = first ? 0 : acc[q].x, im = first ? 0 : acc[q].y;
    for (int u = 0; u < nb; u++) {
      double ers, erc, ecs, ecc;
      sincos(2 * PX_PI * fi * shifts[2 * (b0 + u)], &ers, &erc);
      sincos(2 * PX_PI * fj * shifts[2 * (b0 + u) + 1], &ecs, &ecc);
      const double cs = erc * ecc - ers * ecs, sn = erc * ecs + ers * ecc;
      const double2 x = spec[u * np + q];
      re += x.x * cs - x.y * sn;
      im += x.x * sn + x.y * cs;
    }
    if (last) {
      const double g0 = m0 * fi + m2 * fj, g1 = m1 * fi + m3 * fj;
      const double sg = sin(chi * (fi * fi + fj * fj)) * px_sinc(cell * g0) * px_sinc(cell * g1);
      const double f = sg > 0 ? 1 : sg < 0 ? -1 : 0;
      re *= f, im *= f;
    }
    acc[q] = make_double2(re, im);
  }
}

/* The skewness of Re(acc) over the interior `margin` from the edges (the
 * host's interior_skewness), one block, into out[0]. */
__global__ void sl_k_px_skewness(const double2 *__restrict__ acc, long long tr, long long tc, long long margin,
                                 double *__restrict__ out) {
  if (tr - 2 * margin < 3 || tc - 2 * margin < 3) margin = 0;
  const long long ir = tr - 2 * margin, ic = tc - 2 * margin, n = ir * ic;
  double s1 = 0;
  for (long long k = threadIdx.x; k < n; k += blockDim.x) s1 += acc[(margin + k / ic) * tc + margin + k % ic].x;
  const double mean = sl_cuda_block_sum(s1) / (double)n;
  double s2 = 0, s3 = 0;
  for (long long k = threadIdx.x; k < n; k += blockDim.x) {
    const double d = acc[(margin + k / ic) * tc + margin + k % ic].x - mean;
    s2 += d * d, s3 += d * d * d;
  }
  const double t2 = sl_cuda_block_sum(s2) / (double)n, t3 = sl_cuda_block_sum(s3) / (double)n;
  if (threadIdx.x == 0) out[0] = t2 > 0 ? t3 / (t2 * sqrt(t2)) : 0;
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel parallax_kernels[] = {
    ENTRY("px_window", sl_k_px_window),   ENTRY("px_products", sl_k_px_products), ENTRY("px_lags", sl_k_px_lags),
    ENTRY("px_power", sl_k_px_power),     ENTRY("px_grid", sl_k_px_grid),         ENTRY("px_value", sl_k_px_value),
    ENTRY("px_pattern", sl_k_px_pattern), ENTRY("px_tfill", sl_k_px_tfill),       ENTRY("px_tsum", sl_k_px_tsum),
    ENTRY("px_skewness", sl_k_px_skewness),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(parallax_kernels, "dpc")

/* ---- context ---------------------------------------------------------------------- */

extern "C" int64_t sl_cuda_dpc_parallax_bytes(int n, const sl_cuda_parallax_geometry *g) {
  sl_table t = sl_table_counter();
  sl_cuda_dpc_parallax o;
  parallax_layout(&t, n, g, &o);
  return t.used;
}

extern "C" void sl_cuda_dpc_parallax_free(void *p) {
  sl_cuda_dpc_parallax *x = (sl_cuda_dpc_parallax *)p;
  if (!x) return;
  for (int k = 0; k < 4; k++)
    if (x->have[k]) x->fft.destroy(x->plan[k]);
  free(x);
}

/* Plan k: a 2D double complex plan of rows x cols, `batch` fields apart by
 * their size, on the shared work area; false (why) when it wants more. */
static sl_code make_plan(sl_cuda_dpc_parallax *x, sl_kernel_args *a, int k, int64_t rows, int64_t cols, int batch,
                         bool *fits, char *why, size_t why_size) {
  int r = x->fft.create(&x->plan[k]);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, k_node, r, "cufftCreate");
  x->have[k] = true;
  if ((r = x->fft.set_auto_allocation(x->plan[k], 0)) != SL_CUFFT_SUCCESS)
    return sl_cuda_cufft_fail(a, k_node, r, "cufftSetAutoAllocation");
  int n[2] = {(int)rows, (int)cols};
  size_t work = 0;
  r = x->fft.make_plan_many(x->plan[k], 2, n, NULL, 1, 0, NULL, 1, 0, SL_CUFFT_Z2Z, batch, &work);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, k_node, r, "cufftMakePlanMany (the parallax's plans)");
  if ((int64_t)work > x->work_bytes) {
    snprintf(why, why_size, "cuFFT wants a %zu-byte work area for the parallax's %lldx%lld transforms, %lld "
             "reserved", work, (long long)rows, (long long)cols, (long long)x->work_bytes);
    *fits = false;
    return SL_OK;
  }
  if ((r = x->fft.set_work_area(x->plan[k], x->work)) != SL_CUFFT_SUCCESS)
    return sl_cuda_cufft_fail(a, k_node, r, "cufftSetWorkArea");
  return SL_OK;
}

extern "C" sl_code sl_cuda_dpc_parallax_new(sl_kernel_args *a, int n, int64_t rows, int64_t cols,
                                            const sl_cuda_parallax_geometry *g, int64_t offset,
                                            sl_cuda_dpc_parallax **out, char *why, size_t why_size) {
  *out = NULL;
  sl_cuda_dpc_parallax *x = (sl_cuda_dpc_parallax *)calloc(1, sizeof *x);
  if (!x) return sl_fail(a->err, SL_ERR_NOMEM, "%s: out of memory for the parallax's device state", k_node);
  x->n = n, x->rows = rows, x->cols = cols, x->g = *g;
  x->pw = g->pr * g->pc, x->npt = g->tr * g->tc, x->lags = (2 * g->lr + 1) * (2 * g->lc + 1);
  sl_table t = sl_table_lent(a);
  t.used = offset;
  parallax_layout(&t, n, g, x);
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc == SL_OK && !sl_cufft_load(&x->fft, why, why_size)) {
    sl_cuda_dpc_parallax_free(x);
    return SL_OK;
  }
  bool fits = true;
  if (rc == SL_OK) rc = make_plan(x, a, 0, g->pr, g->pc, PX_BATCH, &fits, why, why_size);
  if (rc == SL_OK && fits) rc = make_plan(x, a, 1, g->pr, g->pc, PX_BATCH, &fits, why, why_size);
  if (rc == SL_OK && fits) rc = make_plan(x, a, 2, g->tr, g->tc, PX_BATCH, &fits, why, why_size);
  if (rc == SL_OK && fits) rc = make_plan(x, a, 3, g->tr, g->tc, 1, &fits, why, why_size);
  if (rc != SL_OK || !fits) {
    sl_cuda_dpc_parallax_free(x);
    return rc;
  }
  *out = x;
  return SL_OK;
}

extern "C" sl_code sl_cuda_dpc_parallax_bind(sl_cuda_dpc_parallax *x, sl_kernel_args *a, const uint64_t *segments) {
  x->a = a, x->segments = segments;
  for (int k = 0; k < 4; k++) {
    int r = x->fft.set_stream(x->plan[k], (void *)sl_cuda_queue(a));
    if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, k_node, r, "cufftSetStream");
  }
  return SL_OK;
}

/* ---- steps ------------------------------------------------------------------------- */

static sl_code copy(sl_cuda_dpc_parallax *x, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                    const char *what) {
  return sl_cuda_runtime_fail(x->a, cudaMemcpyAsync(dst, src, bytes, kind, sl_cuda_queue(x->a)), k_node, what);
}

static sl_code exec(sl_cuda_dpc_parallax *x, int k, double2 *data, int direction) {
  int r = x->fft.exec_z2z(x->plan[k], data, data, direction);
  return r == SL_CUFFT_SUCCESS ? SL_OK : sl_cuda_cufft_fail(x->a, k_node, r, "cufftExecZ2Z (the parallax)");
}

extern "C" sl_code sl_cuda_dpc_parallax_correlate(sl_cuda_dpc_parallax *x, const int *index, int used,
                                                  const double *pair, const double *weight, double *sums,
                                                  double *diag) {
  sl_kernel_args *a = x->a;
  cudaStream_t st = sl_cuda_queue(a);
  const sl_cuda_parallax_geometry *g = &x->g;
  sl_code rc = SL_OK;
  if (!weight) {
    if (used > x->n || used < 2) return sl_fail(a->err, SL_ERR_INTERNAL, "%s: %d segments for the parallax", k_node, used);
    x->used = used, x->pairs = used * (used - 1) / 2;
    int *pidx = (int *)malloc((size_t)x->pairs * 2 * sizeof(int));
    if (!pidx) return sl_fail(a->err, SL_ERR_NOMEM, "%s: out of memory for the parallax's pairs", k_node);
    for (int i = 0, k = 0; i < used; i++)
      for (int j = i + 1; j < used; j++, k++) pidx[2 * k] = i, pidx[2 * k + 1] = j;
    rc = copy(x, x->index, index, (size_t)used * sizeof(int), cudaMemcpyHostToDevice, "uploading the parallax's segments");
    if (rc == SL_OK)
      rc = copy(x, x->pidx, pidx, (size_t)x->pairs * 2 * sizeof(int), cudaMemcpyHostToDevice, "uploading the pairs");
    if (rc == SL_OK)
      rc = copy(x, x->pair, pair, (size_t)x->pairs * 2 * sizeof(double), cudaMemcpyHostToDevice,
                "uploading the pairs' offsets");
    if (rc == SL_OK) rc = sl_cuda_wait(a); /* the pageable sources are staged */
    free(pidx);
    if (rc != SL_OK) return rc;
    const int slots = (int)slots_of(used);
    sl_k_px_window<<<slots, PX_THREADS, 0, st>>>((const unsigned long long *)x->segments, x->index, used, x->rows,
                                                 x->cols, g->wr, g->wc, g->pc, x->pw, x->wspec, x->sums, x->diag);
    if ((rc = sl_cuda_check_launch(a, "sl_k_px_window"))) return rc;
    for (int b0 = 0; b0 < used && rc == SL_OK; b0 += PX_BATCH) rc = exec(x, 0, x->wspec + b0 * x->pw, SL_CUFFT_FORWARD);
  } else {
    rc = copy(x, x->weight, weight, (size_t)x->pw * sizeof(double), cudaMemcpyHostToDevice, "uploading the weights");
  }
  const long long tasks = (x->pairs + 1) / 2;
  for (long long t0 = 0; t0 < tasks && rc == SL_OK; t0 += PX_BATCH) {
    const long long nt = tasks - t0 < PX_BATCH ? tasks - t0 : PX_BATCH;
    sl_k_px_products<<<sl_cuda_stem_grid(a, nt * x->pw), PX_THREADS, 0, st>>>(
        x->wspec, x->pidx, x->pairs, t0, nt, x->pw, weight ? x->weight : NULL, x->pairbuf);
    if ((rc = sl_cuda_check_launch(a, "sl_k_px_products"))) break;
    if ((rc = exec(x, 1, x->pairbuf, SL_CUFFT_INVERSE))) break;
    sl_k_px_lags<<<sl_cuda_stem_grid(a, nt * x->lags), PX_THREADS, 0, st>>>(x->pairbuf, x->pairs, t0, nt, g->pr, g->pc,
                                                                           g->wr, g->wc, g->lr, g->lc, x->xcorr);
    rc = sl_cuda_check_launch(a, "sl_k_px_lags");
  }
  double *d = NULL;
  if (rc == SL_OK && !weight) {
    if (!(d = (double *)malloc((size_t)used * sizeof(double))))
      return sl_fail(a->err, SL_ERR_NOMEM, "%s: out of memory for the parallax's sums", k_node);
    rc = copy(x, sums, x->sums, (size_t)used * sizeof(double), cudaMemcpyDeviceToHost, "reading the counts back");
    if (rc == SL_OK) rc = copy(x, d, x->diag, (size_t)used * sizeof(double), cudaMemcpyDeviceToHost, "reading the squares back");
  }
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  if (rc == SL_OK && d) {
    double s = 0;
    for (int u = 0; u < used; u++) s += d[u];
    *diag = s;
  }
  free(d);
  return rc;
}

extern "C" sl_code sl_cuda_dpc_parallax_power(sl_cuda_dpc_parallax *x, int used, double *power) {
  sl_kernel_args *a = x->a;
  sl_k_px_power<<<sl_cuda_stem_grid(a, x->pw), PX_THREADS, 0, sl_cuda_queue(a)>>>(x->wspec, used, x->pw, x->power);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_px_power");
  if (rc == SL_OK)
    rc = copy(x, power, x->power, (size_t)x->pw * sizeof(double), cudaMemcpyDeviceToHost, "reading the power back");
  return rc == SL_OK ? sl_cuda_wait(a) : rc;
}

extern "C" sl_code sl_cuda_dpc_parallax_grid(sl_cuda_dpc_parallax *x, double half, int64_t n_s, double *best) {
  sl_kernel_args *a = x->a;
  sl_code rc = SL_OK;
  for (int64_t k0 = 0; k0 < n_s && rc == SL_OK; k0 += PX_GRID_CHUNK) {
    const int64_t nk = n_s - k0 < PX_GRID_CHUNK ? n_s - k0 : PX_GRID_CHUNK;
    sl_k_px_grid<<<(unsigned)nk, PX_THREADS, 0, sl_cuda_queue(a)>>>(x->xcorr, x->g.lr, x->g.lc, x->pair, x->pairs, half,
                                                                    k0, x->best);
    if ((rc = sl_cuda_check_launch(a, "sl_k_px_grid"))) break;
    rc = copy(x, best + 4 * k0, x->best, (size_t)nk * 4 * sizeof(double), cudaMemcpyDeviceToHost,
              "reading the grid's best back");
    if (rc == SL_OK) rc = sl_cuda_wait(a);
  }
  return rc;
}

extern "C" sl_code sl_cuda_dpc_parallax_value(sl_cuda_dpc_parallax *x, const double m[4], double *v) {
  sl_kernel_args *a = x->a;
  sl_k_px_value<<<1, 32, 0, sl_cuda_queue(a)>>>(x->xcorr, x->g.lr, x->g.lc, x->pair, x->pairs, m[0], m[1], m[2], m[3],
                                                x->scalars);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_px_value");
  if (rc == SL_OK) rc = copy(x, v, x->scalars, sizeof(double), cudaMemcpyDeviceToHost, "reading the objective back");
  return rc == SL_OK ? sl_cuda_wait(a) : rc;
}

extern "C" sl_code sl_cuda_dpc_parallax_pattern(sl_cuda_dpc_parallax *x, double half, double *s, double *p, int t,
                                                double *v) {
  sl_kernel_args *a = x->a;
  sl_k_px_pattern<<<1, PX_THREADS, 0, sl_cuda_queue(a)>>>(x->xcorr, x->g.lr, x->g.lc, x->pair, x->pairs, half, *s, *p,
                                                          t, *v, x->scalars + 1);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_px_pattern");
  double r[3];
  if (rc == SL_OK) rc = copy(x, r, x->scalars + 1, sizeof r, cudaMemcpyDeviceToHost, "reading the pattern search back");
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  if (rc == SL_OK) *s = r[0], *p = r[1], *v = r[2];
  return rc;
}

extern "C" sl_code sl_cuda_dpc_parallax_tcbf(sl_cuda_dpc_parallax *x, int used, const double *shifts,
                                             const double m[4], double cell, double chi_per_f2, int64_t margin,
                                             double *skewness) {
  sl_kernel_args *a = x->a;
  cudaStream_t st = sl_cuda_queue(a);
  const sl_cuda_parallax_geometry *g = &x->g;
  sl_code rc = copy(x, x->shifts, shifts, (size_t)used * 2 * sizeof(double), cudaMemcpyHostToDevice,
                    "uploading the segments' shifts");
  if (rc == SL_OK) rc = sl_cuda_wait(a); /* the pageable source is staged */
  for (int b0 = 0; b0 < used && rc == SL_OK; b0 += PX_BATCH) {
    const int nb = used - b0 < PX_BATCH ? used - b0 : PX_BATCH;
    sl_k_px_tfill<<<PX_BATCH, PX_THREADS, 0, st>>>((const unsigned long long *)x->segments, x->index, b0, nb, x->rows,
                                                   x->cols, g->tr, g->tc, x->tspec);
    if ((rc = sl_cuda_check_launch(a, "sl_k_px_tfill"))) break;
    if ((rc = exec(x, 2, x->tspec, SL_CUFFT_FORWARD))) break;
    sl_k_px_tsum<<<sl_cuda_stem_grid(a, x->npt), PX_THREADS, 0, st>>>(x->tspec, b0, nb, x->shifts, g->tr, g->tc,
                                                                      b0 == 0, b0 + PX_BATCH >= used, chi_per_f2, cell,
                                                                      m[0], m[1], m[2], m[3], x->acc);
    rc = sl_cuda_check_launch(a, "sl_k_px_tsum");
  }
  if (rc == SL_OK) rc = exec(x, 3, x->acc, SL_CUFFT_INVERSE);
  if (rc == SL_OK) {
    sl_k_px_skewness<<<1, PX_THREADS, 0, st>>>(x->acc, g->tr, g->tc, margin, x->scalars + 4);
    rc = sl_cuda_check_launch(a, "sl_k_px_skewness");
  }
  if (rc == SL_OK)
    rc = copy(x, skewness, x->scalars + 4, sizeof(double), cudaMemcpyDeviceToHost, "reading the skewness back");
  return rc == SL_OK ? sl_cuda_wait(a) : rc;
}
