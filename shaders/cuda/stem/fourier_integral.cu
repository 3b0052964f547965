/* Fourier integration on the device. See fourier_integral.cuh; the host path
 * it follows step by step is nodes/common/fourier_integral.c
 * (sl_fourier_integral_run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/stem/fourier_integral.cuh"

/* M_PI of the host's math.h, the same double. */
#define INTEGRAL_PI 3.14159265358979323846

/* ---- kernels --------------------------------------------------------------------- */

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n (fourier_integral.c freq). */
__device__ __forceinline__ double integral_freq(long long i, long long n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

/* The padded fields from the gradient, by even reflection of phi: the row
 * derivative flips sign in the rows' mirror image, the column derivative in
 * the columns' (pr = rows or 2 rows, pc likewise). */
__global__ void sl_k_integral_mirror(const double *__restrict__ gr, const double *__restrict__ gc,
                                     double2 *__restrict__ a, double2 *__restrict__ b, long long R, long long C,
                                     long long PR, long long PC) {
  const long long np = PR * PC;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < np;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / PC, j = k - i * PC;
    const long long si = i < R ? i : 2 * R - 1 - i, sj = j < C ? j : 2 * C - 1 - j;
    const double sgr = i < R ? 1 : -1, sgc = j < C ? 1 : -1;
    a[k] = make_double2(sgr * gr[si * C + sj], 0);
    b[k] = make_double2(sgc * gc[si * C + sj], 0);
  }
}

/* a = (k_r A + k_c B) / (2 pi i (|k|^2 + h^2)) * norm, DC 0: the host's
 * expressions, -i num / (2 pi d). */
__global__ void sl_k_integral_multiplier(double2 *__restrict__ a, const double2 *__restrict__ b, long long PR,
                                         long long PC, double h2, double norm) {
  const long long np = PR * PC;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < np;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / PC, j = k - i * PC;
    const double kr = integral_freq(i, PR), kc = integral_freq(j, PC), k2 = kr * kr + kc * kc;
    if (k2 == 0) {
      a[k] = make_double2(0, 0);
      continue;
    }
    const double2 z = a[k], w = b[k];
    const double nr = kr * z.x + kc * w.x, ni = kr * z.y + kc * w.y;
    const double fac = norm / (2 * INTEGRAL_PI * (k2 + h2));
    a[k] = make_double2(ni * fac, -nr * fac);
  }
}

/* phi = scale * Re(a) on the unpadded rows x cols, and each block's partial
 * sum of it (SL_INTEGRAL_BLOCKS blocks of SL_INTEGRAL_THREADS). */
__global__ void sl_k_integral_extract(const double2 *__restrict__ a, double *__restrict__ phi, long long R,
                                      long long C, long long PC, double scale, double *__restrict__ partials) {
  double sum = 0;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < R * C;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / C, j = k - i * C;
    const double v = scale * a[i * PC + j].x;
    phi[k] = v;
    sum += v;
  }
  const double total = sl_cuda_block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* phi -= mean; every block sums the partials in the same order itself (a
 * thousand doubles), which saves a kernel and a round trip. */
__global__ void sl_k_integral_remove_mean(double *__restrict__ phi, long long n, const double *__restrict__ partials) {
  double p = 0;
  for (int b = threadIdx.x; b < SL_INTEGRAL_BLOCKS; b += SL_INTEGRAL_THREADS) p += partials[b];
  const double mean = sl_cuda_block_sum(p) / (double)n;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x)
    phi[k] -= mean;
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel integral_kernels[] = {
    ENTRY("integral_mirror", sl_k_integral_mirror),
    ENTRY("integral_multiplier", sl_k_integral_multiplier),
    ENTRY("integral_extract", sl_k_integral_extract),
    ENTRY("integral_remove_mean", sl_k_integral_remove_mean),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(integral_kernels, "dpc idpc")

/* ---- pieces and plans ------------------------------------------------------------- */

/* The work area reserved for cuFFT: as much as the batched forward
 * transform's data, two fields. cuFFT says the size it needs only when it
 * plans (on the device, at run time), and the size is not documented; a
 * transform that needs more runs on the host with a note saying so (never a
 * silent fallback, never an allocation beside the plan). */
static int64_t work_bound(int64_t pr, int64_t pc) { return 2 * pr * pc * (int64_t)sizeof(double2); }

void sl_cuda_integral_layout(sl_table *t, int64_t pr, int64_t pc, sl_cuda_integral_pieces *o) {
  o->fields = (double2 *)sl_table_take(t, 2 * pr * pc * (int64_t)sizeof(double2));
  o->partials = (double *)sl_table_take(t, SL_INTEGRAL_BLOCKS * (int64_t)sizeof(double));
  o->work_bytes = work_bound(pr, pc);
  o->work = sl_table_take(t, o->work_bytes);
}

sl_code sl_cuda_cufft_fail(sl_kernel_args *a, const char *node, int r, const char *what) {
  return sl_fail(a->err, SL_ERR_BACKEND, "%s: %s failed (%s)", node, what, sl_cufft_result_name(r));
}

void sl_cuda_integral_free(sl_cuda_integral *s) {
  if (s->have_forward2) s->fft.destroy(s->plan_forward2);
  if (s->have_inverse) s->fft.destroy(s->plan_inverse);
  memset(s, 0, sizeof *s);
}

/* A 2D double complex plan of pr x pc, `batch` fields apart by pr * pc, that
 * leaves its work area to us; *work gets its size. */
static sl_code make_plan(sl_cuda_integral *s, sl_kernel_args *a, const char *node, int batch, int *plan, bool *have,
                         size_t *work) {
  int r = s->fft.create(plan);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, node, r, "cufftCreate");
  *have = true;
  if ((r = s->fft.set_auto_allocation(*plan, 0)) != SL_CUFFT_SUCCESS)
    return sl_cuda_cufft_fail(a, node, r, "cufftSetAutoAllocation");
  int n[2] = {(int)s->pr, (int)s->pc};
  r = s->fft.make_plan_many(*plan, 2, n, NULL, 1, 0, NULL, 1, 0, SL_CUFFT_Z2Z, batch, work);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, node, r, "cufftMakePlanMany (a double complex 2D plan)");
  return SL_OK;
}

static void integral_state_release(void *p) {
  if (!p) return;
  sl_cuda_integral_free((sl_cuda_integral *)p);
  free(p);
}

sl_code sl_cuda_integral_state(sl_kernel_args *a, sl_cuda_state_holder holder, size_t size, int64_t rows,
                               int64_t cols, bool mirror, sl_cuda_integral_layout_fn layout, const char *node,
                               void **out, char *why, size_t why_size) {
  *out = NULL;
  sl_cuda_integral *s = (sl_cuda_integral *)*holder.state;
  if (s) { /* made by an earlier call of this run */
    if (s->rows != rows || s->cols != cols || s->pr != sl_cuda_integral_padded(rows, mirror))
      return sl_fail(a->err, SL_ERR_INTERNAL, "%s: the device state was made for another field", node);
    if (!s->ready)
      return sl_fail(a->err, SL_ERR_BACKEND, "%s: the transforms could not be set up on an earlier call", node);
    *out = s;
    return SL_OK;
  }
  if (!(s = (sl_cuda_integral *)calloc(1, size))) return sl_fail(a->err, SL_ERR_NOMEM, "%s: out of memory for device state", node);
  sl_table t = sl_table_lent(a);
  sl_cuda_integral_pieces mem;
  layout(&t, rows, cols, mirror, &mem, s);
  sl_code rc = sl_table_check(&t, a, node);
  if (rc == SL_OK) rc = sl_cuda_integral_init(s, rows, cols, mirror, &mem, a, node, why, why_size);
  if (rc == SL_OK && !s->ready) { /* the host path, with why */
    integral_state_release(s);
    return SL_OK;
  }
  *holder.state = s;
  *holder.release = integral_state_release;
  if (rc == SL_OK) *out = s;
  return rc;
}

sl_code sl_cuda_integral_init(sl_cuda_integral *s, int64_t rows, int64_t cols, bool mirror,
                              const sl_cuda_integral_pieces *mem, sl_kernel_args *a, const char *node,
                              char *why, size_t why_size) {
  memset(s, 0, sizeof *s);
  s->rows = rows, s->cols = cols;
  s->pr = sl_cuda_integral_padded(rows, mirror), s->pc = sl_cuda_integral_padded(cols, mirror);
  s->mem = *mem;
  if (s->pr > (1 << 30) || s->pc > (1 << 30) || s->pr * s->pc > ((int64_t)1 << 31) - 1)
    return sl_fail(a->err, SL_ERR_BACKEND, "%s: a %lldx%lld transform is too large for cuFFT's 32-bit plans",
                   node, (long long)s->pr, (long long)s->pc);
  if (!sl_cufft_load(&s->fft, why, why_size)) return SL_OK;
  why[0] = 0;
  size_t w_fwd = 0, w_inv = 0;
  sl_code rc = make_plan(s, a, node, 2, &s->plan_forward2, &s->have_forward2, &w_fwd);
  if (rc == SL_OK) rc = make_plan(s, a, node, 1, &s->plan_inverse, &s->have_inverse, &w_inv);
  if (rc != SL_OK) return rc;
  /* The plans run one after the other on one queue: one work area serves both. */
  const size_t work = w_fwd > w_inv ? w_fwd : w_inv;
  if (work > (size_t)s->mem.work_bytes) {
    snprintf(why, why_size,
             "cuFFT needs %zu bytes of work area for the %lldx%lld transforms, more than the %lld bytes the "
             "plan reserved in the node's device table",
             work, (long long)s->pr, (long long)s->pc, (long long)s->mem.work_bytes);
    return SL_OK;
  }
  int r = s->fft.set_work_area(s->plan_forward2, s->mem.work);
  if (r == SL_CUFFT_SUCCESS) r = s->fft.set_work_area(s->plan_inverse, s->mem.work);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, node, r, "cufftSetWorkArea");
  s->ready = true;
  return SL_OK;
}

sl_code sl_cuda_integral_bind(sl_cuda_integral *s, sl_kernel_args *a, const char *node) {
  void *st = (void *)sl_cuda_queue(a);
  int r = s->fft.set_stream(s->plan_forward2, st);
  if (r == SL_CUFFT_SUCCESS) r = s->fft.set_stream(s->plan_inverse, st);
  return r == SL_CUFFT_SUCCESS ? SL_OK : sl_cuda_cufft_fail(a, node, r, "cufftSetStream");
}

sl_code sl_cuda_integral_forward2(sl_cuda_integral *s, sl_kernel_args *a, const char *node) {
  int r = s->fft.exec_z2z(s->plan_forward2, s->mem.fields, s->mem.fields, SL_CUFFT_FORWARD);
  return r == SL_CUFFT_SUCCESS ? SL_OK : sl_cuda_cufft_fail(a, node, r, "cufftExecZ2Z (forward)");
}

sl_code sl_cuda_integral_run(sl_cuda_integral *s, sl_kernel_args *a, const double *g_r, const double *g_c,
                             double highpass, double scale, double *phi, const char *node) {
  cudaStream_t st = sl_cuda_queue(a);
  const long long R = s->rows, C = s->cols, PR = s->pr, PC = s->pc, np = PR * PC;
  double2 *fa = s->mem.fields, *fb = s->mem.fields + np;
  const unsigned g = sl_cuda_stem_grid(a, np);
  sl_k_integral_mirror<<<g, 256, 0, st>>>(g_r, g_c, fa, fb, R, C, PR, PC);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_integral_mirror");
  if (rc == SL_OK) rc = sl_cuda_integral_forward2(s, a, node);
  if (rc != SL_OK) return rc;
  const double norm = 1.0 / ((double)PR * (double)PC);
  sl_k_integral_multiplier<<<g, 256, 0, st>>>(fa, fb, PR, PC, highpass * highpass, norm);
  if ((rc = sl_cuda_check_launch(a, "sl_k_integral_multiplier"))) return rc;
  int r = s->fft.exec_z2z(s->plan_inverse, fa, fa, SL_CUFFT_INVERSE);
  if (r != SL_CUFFT_SUCCESS) return sl_cuda_cufft_fail(a, node, r, "cufftExecZ2Z (inverse)");
  sl_k_integral_extract<<<SL_INTEGRAL_BLOCKS, SL_INTEGRAL_THREADS, 0, st>>>(fa, phi, R, C, PC, scale,
                                                                           s->mem.partials);
  if ((rc = sl_cuda_check_launch(a, "sl_k_integral_extract"))) return rc;
  sl_k_integral_remove_mean<<<sl_cuda_stem_grid(a, R * C), SL_INTEGRAL_THREADS, 0, st>>>(phi, R * C,
                                                                                          s->mem.partials);
  return sl_cuda_check_launch(a, "sl_k_integral_remove_mean");
}
