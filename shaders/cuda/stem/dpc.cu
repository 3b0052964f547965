/* dpc on CUDA. See dpc.h; the host path it follows is nodes/stem/dpc.c and
 * nodes/stem/dpc_fit.c, the arithmetic both share is dpc_math.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/stem/dpc.h"
#include "shaders/cuda/stem/fourier_integral.cuh"

static const char k_node[] = "dpc";

/* Blocks of the skewness rule's reductions (of SL_INTEGRAL_THREADS
 * threads), and its sums: p^2, p^3 (sl_dpc_branch_sums). */
#define STAT_BLOCKS 256
#define STAT_SUMS 2

/* The node's device table: the integration's pieces (2R x 2C; its fields
 * also carry the forward spectra), then these. */
typedef struct dpc_pieces {
  double *spectra;                  /* [4][(R + 1) (C + 1)], kr major: dpc_math.h's order */
  double *ring_totals;              /* [rings][SL_DPC_RING_SUMS] */
  double *phase;                    /* [R C]; in step 1 the ADF image as f64 (no phase with one) */
  double *adf_of_row;               /* [R][SL_DPC_ADF_SUMS] */
  double *stat_partials;            /* [STAT_SUMS][STAT_BLOCKS] */
  double *stats;                    /* [STAT_SUMS] */
  double *div2_of_row;              /* [R] */
} dpc_pieces;

/* The node's state: the integration (its plans and pieces, first) and the
 * table's other pieces (sl_cuda_integral_state). */
typedef struct dpc_device_state {
  sl_cuda_integral in;
  dpc_pieces mem;
  sl_cuda_dpc_parallax *parallax; /* made on the parallax's first need (sl_cuda_dpc_parallax_of) */
} dpc_device_state;

/* The state's release: the parallax's context too. */
static void dpc_state_release(void *p) {
  dpc_device_state *s = (dpc_device_state *)p;
  if (!s) return;
  sl_cuda_dpc_parallax_free(s->parallax);
  sl_cuda_integral_free(&s->in);
  free(s);
}

/* dpc integrates the mirrored field: `mirror` is always true here. */
static void dpc_layout(sl_table *t, int64_t R, int64_t C, bool mirror, sl_cuda_integral_pieces *integral,
                       void *state) {
  const int64_t d = (int64_t)sizeof(double);
  dpc_pieces scratch, *o = state ? &((dpc_device_state *)state)->mem : &scratch;
  sl_cuda_integral_layout(t, sl_cuda_integral_padded(R, mirror), sl_cuda_integral_padded(C, mirror), integral);
  o->spectra = (double *)sl_table_take(t, 4 * (R + 1) * (C + 1) * d);
  o->ring_totals = (double *)sl_table_take(t, sl_dpc_rings(R, C) * SL_DPC_RING_SUMS * d);
  o->phase = (double *)sl_table_take(t, R * C * d);
  o->adf_of_row = (double *)sl_table_take(t, R * SL_DPC_ADF_SUMS * d);
  o->stat_partials = (double *)sl_table_take(t, STAT_SUMS * STAT_BLOCKS * d);
  o->stats = (double *)sl_table_take(t, STAT_SUMS * d);
  o->div2_of_row = (double *)sl_table_take(t, R * d);
}


/* ---- kernels --------------------------------------------------------------------- */

/* The 2R x 2C extensions of c_r (f0) and c_c (f1), two real fields packed in
 * each complex one: real part odd in rows, imaginary part odd in columns
 * (even reflection otherwise). */
__global__ void sl_k_dpc_fill(const double *__restrict__ cr, const double *__restrict__ cc, double2 *__restrict__ f0,
                              double2 *__restrict__ f1, long long R, long long C) {
  const long long PC = 2 * C, np = 2 * R * PC;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < np;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / PC, j = k - i * PC;
    const long long si = i < R ? i : 2 * R - 1 - i, sj = j < C ? j : 2 * C - 1 - j;
    const double odd_r = i < R ? 1 : -1, odd_c = j < C ? 1 : -1;
    const double vr = cr[si * C + sj], vc = cc[si * C + sj];
    f0[k] = make_double2(odd_r * vr, odd_c * vr);
    f1[k] = make_double2(odd_r * vc, odd_c * vc);
  }
}

/* The real mirror spectra X at (kr, kc), 0 <= kr <= R, 0 <= kc <= C, from
 * the packed transforms. With Z = FFT(A + i B): F_A(k) = (Z(k) + conj Z(-k)) / 2,
 * F_B(k) = (Z(k) - conj Z(-k)) / 2i; each extension has one odd axis, so
 * F = -i e^{i pi (kr / 2R + kc / 2C)} X (mirror_spectrum.h) and
 * X = Re(F (sin + i cos)) of that angle. Where the host's real transform
 * has no value (a DST at k = 0, a DCT at k = n: sl_mirror_at) X is 0, not
 * the FFT's rounding. Spectra: 0 c_r odd in rows, 1 c_r odd in cols, 2 c_c
 * odd in rows, 3 c_c odd in cols. */
__global__ void sl_k_dpc_spectra(const double2 *__restrict__ f0, const double2 *__restrict__ f1,
                                 double *__restrict__ X, long long R, long long C) {
  const long long W = C + 1, n = (R + 1) * W, PC = 2 * C;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x) {
    const long long kr = k / W, kc = k - kr * W;
    const long long nr = kr ? 2 * R - kr : 0, nc = kc ? 2 * C - kc : 0;
    double sn, cs;
    sincospi((double)kr / (double)(2 * R) + (double)kc / (double)(2 * C), &sn, &cs);
    const bool none_r = kr == 0 || kc == C, none_c = kc == 0 || kr == R;
    for (int f = 0; f < 2; f++) {
      const double2 *z = f ? f1 : f0;
      const double2 Z = z[kr * PC + kc], N = z[nr * PC + nc];
      const double ar = 0.5 * (Z.x + N.x), ai = 0.5 * (Z.y - N.y); /* F_A */
      const double br = 0.5 * (Z.y + N.y), bi = -0.5 * (Z.x - N.x); /* F_B */
      X[(2 * f) * n + k] = none_r ? 0 : ar * sn - ai * cs;
      X[(2 * f + 1) * n + k] = none_c ? 0 : br * sn - bi * cs;
    }
  }
}

/* The ring sums, one block (SL_INTEGRAL_THREADS threads) per ring r: each
 * thread takes columns kc, and of each the rows kr whose |k| may fall in
 * the ring (half a ring's width of margin each side), keeping those that do
 * by the host's own test (sl_dpc_ring_of, the host's bits), so each
 * frequency is counted once, by one ring; the threads' sums are added in
 * a fixed tree. */
__global__ void sl_k_dpc_rings(const double *__restrict__ X, double *__restrict__ totals, long long R, long long C) {
  const long long r = blockIdx.x, W = C + 1, n = (R + 1) * W;
  const double S = (double)(2 * (R > C ? R : C));
  const double lo = ((double)r - 0.5) / S, hi = ((double)r + 1.5) / S;
  double acc[SL_DPC_RING_SUMS] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (long long kc = threadIdx.x; kc <= C; kc += blockDim.x) {
    const double fc = sl_dpc_half_freq(kc, C), b = hi * hi - fc * fc, a = lo * lo - fc * fc;
    if (b < 0) continue;
    const long long kr0 = lo > 0 && a > 0 ? (long long)floor(2 * R * sqrt(a)) : 0;
    long long kr1 = (long long)ceil(2 * R * sqrt(b));
    if (kr1 > R) kr1 = R;
    for (long long kr = kr0; kr <= kr1; kr++) {
      if (kr == 0 && kc == 0) continue;
      const double fr = sl_dpc_half_freq(kr, R), kk = sl_dpc_kk(fr, fc);
      if (sl_dpc_ring_of(R, C, kk) != r) continue;
      const long long at = kr * W + kc;
      const double x[4] = {X[at], X[n + at], X[2 * n + at], X[3 * n + at]};
      sl_dpc_add_frequency(acc, fr, fc, kk, x, sl_dpc_multiplicity(R, C, kr, kc));
    }
  }
  for (int s = 0; s < SL_DPC_RING_SUMS; s++) {
    const double v = sl_cuda_block_sum(acc[s]);
    if (threadIdx.x == 0) totals[r * SL_DPC_RING_SUMS + s] = v;
  }
}

/* (orow, ocol) = T^t R(-theta) (cr, cc), c = cos, s = sin (dpc_math.h). */
__global__ void sl_k_dpc_rotate(const double *__restrict__ cr, const double *__restrict__ cc, double *__restrict__ orow,
                                double *__restrict__ ocol, long long n, double c, double s, int t) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x)
    sl_dpc_rotate(c, s, t, cr[k], cc[k], &orow[k], &ocol[k]);
}

__global__ void sl_k_dpc_curl_div(const double *__restrict__ orow, const double *__restrict__ ocol,
                                  double *__restrict__ curl, double *__restrict__ div, long long R, long long C) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < R * C;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / C, j = k - i * C;
    sl_dpc_curl_div(orow, ocol, R, C, i, j, &curl[k], &div[k]);
  }
}

/* Each row's sum of squared divergence, in column order (the host's). */
__global__ void sl_k_dpc_div2_rows(const double *__restrict__ div, double *__restrict__ div2, long long R, long long C) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < R; i += (long long)gridDim.x * blockDim.x) {
    double d2 = 0;
    for (long long j = 0; j < C; j++) {
      const double v = div[i * C + j];
      d2 = sl_dpc_add(d2, sl_dpc_mul(v, v));
    }
    div2[i] = d2;
  }
}

/* The ADF image as f64 (the host's conversion). */
__global__ void sl_k_dpc_adf_f64(const void *__restrict__ adf, bool u64, long long n, double *__restrict__ q) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x)
    q[k] = u64 ? (double)((const unsigned long long *)adf)[k] : ((const double *)adf)[k];
}

/* The ADF matched filter's sums of each row, one thread per row
 * (sl_dpc_adf_row: the host's order and roundings). */
__global__ void sl_k_dpc_adf_rows(const double *__restrict__ cr, const double *__restrict__ cc,
                                  const double *__restrict__ q, double *__restrict__ sums, long long R, long long C) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < R; i += (long long)gridDim.x * blockDim.x)
    sl_dpc_adf_row(cr, cc, q, R, C, i, sums + i * SL_DPC_ADF_SUMS);
}

/* Each block's sums p^2, p^3 of the phase. */
__global__ void sl_k_dpc_branch_partials(const double *__restrict__ phase, long long n, double *__restrict__ partials) {
  double m2 = 0, m3 = 0;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
    const double p = phase[k];
    m2 += p * p, m3 += p * p * p;
  }
  const double v[STAT_SUMS] = {m2, m3};
  for (int s = 0; s < STAT_SUMS; s++) {
    const double total = sl_cuda_block_sum(v[s]);
    if (threadIdx.x == 0) partials[s * STAT_BLOCKS + blockIdx.x] = total;
  }
}

/* The partials of each sum added in a fixed order (one block). */
__global__ void sl_k_dpc_branch_total(const double *__restrict__ partials, double *__restrict__ stats) {
  for (int s = 0; s < STAT_SUMS; s++) {
    double p = 0;
    for (int b = threadIdx.x; b < STAT_BLOCKS; b += blockDim.x) p += partials[s * STAT_BLOCKS + b];
    const double total = sl_cuda_block_sum(p);
    if (threadIdx.x == 0) stats[s] = total;
  }
}

__global__ void sl_k_dpc_negate(double *__restrict__ a, double *__restrict__ b, double *__restrict__ c,
                                double *__restrict__ d, long long n) {
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x)
    a[k] = -a[k], b[k] = -b[k], c[k] = -c[k], d[k] = -d[k];
}

__global__ void sl_k_dpc_scalars(double *__restrict__ angle, unsigned char *__restrict__ transpose, double theta, int t) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *angle = theta, *transpose = (unsigned char)t;
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel dpc_kernels[] = {
    ENTRY("dpc_fill", sl_k_dpc_fill),
    ENTRY("dpc_spectra", sl_k_dpc_spectra),
    ENTRY("dpc_rings", sl_k_dpc_rings),
    ENTRY("dpc_rotate", sl_k_dpc_rotate),
    ENTRY("dpc_curl_div", sl_k_dpc_curl_div),
    ENTRY("dpc_div2_rows", sl_k_dpc_div2_rows),
    ENTRY("dpc_adf_f64", sl_k_dpc_adf_f64),
    ENTRY("dpc_adf_rows", sl_k_dpc_adf_rows),
    ENTRY("dpc_branch_partials", sl_k_dpc_branch_partials),
    ENTRY("dpc_branch_total", sl_k_dpc_branch_total),
    ENTRY("dpc_negate", sl_k_dpc_negate),
    ENTRY("dpc_scalars", sl_k_dpc_scalars),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(dpc_kernels, "dpc")

/* ---- state ----------------------------------------------------------------------- */

extern "C" int64_t sl_cuda_dpc_state_bytes(int64_t rows, int64_t cols) {
  sl_table t = sl_table_counter();
  sl_cuda_integral_pieces o;
  dpc_layout(&t, rows, cols, true, &o, NULL);
  return t.used;
}

extern "C" int64_t sl_cuda_dpc_state_bytes_with(int64_t rows, int64_t cols, int n_segments,
                                                const sl_cuda_parallax_geometry *g) {
  return sl_cuda_dpc_state_bytes(rows, cols) +
         (n_segments > 0 ? sl_cuda_dpc_parallax_bytes(n_segments, g) +
                               sl_table_round(sl_cuda_dpc_gain_sums_bytes(n_segments, g->wr, g->wc))
                         : 0);
}

/* The state step 1 made. */
static sl_code state_of(const sl_cuda_dpc_params *p, sl_kernel_args *a, dpc_device_state **out) {
  *out = (dpc_device_state *)*p->device_state.state;
  if (!*out || !(*out)->in.ready)
    return sl_fail(a->err, SL_ERR_INTERNAL, "%s: a later step ran before the ring sums (step 1)", k_node);
  return SL_OK;
}

/* Copies `bytes` from the device to host memory after what is enqueued. */
static sl_code read_back(sl_kernel_args *a, void *host, const void *dev, size_t bytes, const char *what) {
  return sl_cuda_runtime_fail(a, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, sl_cuda_queue(a)), k_node,
                              what);
}

/* ---- launchers ------------------------------------------------------------------- */

extern "C" sl_code sl_cuda_dpc_rings(const sl_cuda_dpc_params *p, sl_kernel_args *a, double *ring_totals,
                                     double *adf_of_row, bool *on_device, char *why, size_t why_size) {
  *on_device = false;
  void *state = NULL; /* made here, by step 1 */
  sl_code rc = sl_cuda_integral_state(a, p->device_state, sizeof(dpc_device_state), p->rows, p->cols, true,
                                      dpc_layout, k_node, &state, why, why_size);
  if (rc != SL_OK || !state) return rc;
  dpc_device_state *s = (dpc_device_state *)state;
  *p->device_state.release = dpc_state_release; /* the parallax's context goes with it */
  *on_device = true;
  if ((rc = sl_cuda_integral_bind(&s->in, a, k_node))) return rc;
  cudaStream_t st = sl_cuda_queue(a);
  const long long R = p->rows, C = p->cols, np = 4 * R * C;
  double2 *f0 = s->in.mem.fields, *f1 = f0 + np;
  sl_k_dpc_fill<<<sl_cuda_stem_grid(a, np), 256, 0, st>>>((const double *)a->in[0], (const double *)a->in[1], f0, f1,
                                                          R, C);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_fill"))) return rc;
  if ((rc = sl_cuda_integral_forward2(&s->in, a, k_node))) return rc;
  sl_k_dpc_spectra<<<sl_cuda_stem_grid(a, (R + 1) * (C + 1)), 256, 0, st>>>(f0, f1, s->mem.spectra, R, C);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_spectra"))) return rc;
  const int64_t rings = sl_dpc_rings(R, C);
  sl_k_dpc_rings<<<(unsigned)rings, SL_INTEGRAL_THREADS, 0, st>>>(s->mem.spectra, s->mem.ring_totals, R, C);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_rings"))) return rc;
  if (adf_of_row) {
    sl_k_dpc_adf_f64<<<sl_cuda_stem_grid(a, R * C), 256, 0, st>>>(a->in[2], p->adf_u64, R * C, s->mem.phase);
    if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_adf_f64"))) return rc;
    sl_k_dpc_adf_rows<<<sl_cuda_stem_grid(a, R), 64, 0, st>>>((const double *)a->in[0], (const double *)a->in[1],
                                                              s->mem.phase, s->mem.adf_of_row, R, C);
    if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_adf_rows"))) return rc;
  }
  rc = read_back(a, ring_totals, s->mem.ring_totals, (size_t)(rings * SL_DPC_RING_SUMS) * sizeof(double),
                 "reading the ring sums back");
  if (rc == SL_OK && adf_of_row)
    rc = read_back(a, adf_of_row, s->mem.adf_of_row, (size_t)(R * SL_DPC_ADF_SUMS) * sizeof(double),
                   "reading the ADF matched filter's sums back");
  return rc == SL_OK ? sl_cuda_wait(a) : rc;
}

extern "C" sl_code sl_cuda_dpc_fields(const sl_cuda_dpc_params *p, sl_kernel_args *a, double c, double s, int t,
                                      bool branch, double *div2_of_row, sl_dpc_branch_sums *sums) {
  dpc_device_state *ds = NULL;
  sl_code rc = state_of(p, a, &ds);
  if (rc != SL_OK) return rc;
  cudaStream_t st = sl_cuda_queue(a);
  const long long R = p->rows, C = p->cols, n = R * C;
  double *orow = (double *)a->out[0], *ocol = (double *)a->out[1];
  const unsigned g = sl_cuda_stem_grid(a, n);
  sl_k_dpc_rotate<<<g, 256, 0, st>>>((const double *)a->in[0], (const double *)a->in[1], orow, ocol, n, c, s, t);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_rotate"))) return rc;
  sl_k_dpc_curl_div<<<g, 256, 0, st>>>(orow, ocol, (double *)a->out[4], (double *)a->out[5], R, C);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_curl_div"))) return rc;
  sl_k_dpc_div2_rows<<<sl_cuda_stem_grid(a, R), 256, 0, st>>>((const double *)a->out[5], ds->mem.div2_of_row, R, C);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_div2_rows"))) return rc;
  if (branch) {
    if ((rc = sl_cuda_integral_run(&ds->in, a, orow, ocol, 0, 1, ds->mem.phase, k_node))) return rc;
    sl_k_dpc_branch_partials<<<STAT_BLOCKS, SL_INTEGRAL_THREADS, 0, st>>>(ds->mem.phase, n, ds->mem.stat_partials);
    if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_branch_partials"))) return rc;
    sl_k_dpc_branch_total<<<1, SL_INTEGRAL_THREADS, 0, st>>>(ds->mem.stat_partials, ds->mem.stats);
    if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_branch_total"))) return rc;
  }
  /* One wait for everything the host reads. */
  double v[STAT_SUMS] = {0, 0};
  if (branch) rc = read_back(a, v, ds->mem.stats, sizeof v, "reading the branch sums back");
  if (rc == SL_OK)
    rc = read_back(a, div2_of_row, ds->mem.div2_of_row, (size_t)R * sizeof(double), "reading the squared divergence back");
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  if (rc == SL_OK && branch) sums->m2 = v[0], sums->m3 = v[1];
  return rc;
}

extern "C" sl_code sl_cuda_dpc_gain_bound_sums(const sl_cuda_dpc_params *p, sl_kernel_args *a, int n_segments,
                                               const sl_cuda_parallax_geometry *g, uint64_t *segment_sums,
                                               uint64_t *position_sums) {
  sl_table t = sl_table_lent(a);
  t.used = sl_cuda_dpc_state_bytes(p->rows, p->cols) + sl_cuda_dpc_parallax_bytes(n_segments, g);
  uint64_t *scratch = (uint64_t *)sl_table_take(&t, sl_cuda_dpc_gain_sums_bytes(n_segments, g->wr, g->wc));
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc != SL_OK) return rc;
  const int64_t r0 = (p->rows - g->wr) / 2, c0 = (p->cols - g->wc) / 2;
  const uint64_t *window = (const uint64_t *)a->in[3] + r0 * p->cols + c0;
  return sl_cuda_dpc_gain_sums(a, window, p->cols, p->rows * p->cols, n_segments, g->wr, g->wc,
                               (const double *)a->in[4], scratch, segment_sums, position_sums);
}

extern "C" sl_code sl_cuda_dpc_finish(const sl_cuda_dpc_params *p, sl_kernel_args *a, bool negate, double theta_deg,
                                      int t) {
  cudaStream_t st = sl_cuda_queue(a);
  sl_code rc;
  const long long n = p->rows * p->cols;
  if (negate) {
    sl_k_dpc_negate<<<sl_cuda_stem_grid(a, n), 256, 0, st>>>((double *)a->out[0], (double *)a->out[1],
                                                             (double *)a->out[4], (double *)a->out[5], n);
    if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_negate"))) return rc;
  }
  sl_k_dpc_scalars<<<1, 32, 0, st>>>((double *)a->out[2], (unsigned char *)a->out[3], theta_deg, t);
  return sl_cuda_check_launch(a, "sl_k_dpc_scalars");
}

extern "C" sl_code sl_cuda_dpc_parallax_of(const sl_cuda_dpc_params *p, sl_kernel_args *a, int n_segments,
                                           const sl_cuda_parallax_geometry *g, const uint64_t *segments,
                                           sl_cuda_dpc_parallax **out, char *why, size_t why_size) {
  *out = NULL;
  dpc_device_state *ds = NULL;
  sl_code rc = state_of(p, a, &ds);
  if (rc == SL_OK && !ds->parallax)
    rc = sl_cuda_dpc_parallax_new(a, n_segments, p->rows, p->cols, g, sl_cuda_dpc_state_bytes(p->rows, p->cols),
                                  &ds->parallax, why, why_size);
  if (rc != SL_OK || !ds->parallax) return rc;
  if ((rc = sl_cuda_dpc_parallax_bind(ds->parallax, a, segments))) return rc;
  *out = ds->parallax;
  return SL_OK;
}
