/* idpc on CUDA. See idpc.h; the host path it follows step by step is
 * nodes/common/fourier_integral.c (sl_fourier_integral_run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/cufft_loader.h"
#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/stem/idpc.h"

static const char k_node[] = "idpc";

/* M_PI of the host's math.h, the same double. */
#define IDPC_PI 3.14159265358979323846

/* The mean of the phase is summed in MEAN_BLOCKS fixed partial sums (one per
 * block of the extract kernel, grid-stride), then those in index order:
 * deterministic for a given size. */
#define MEAN_THREADS 256
#define MEAN_BLOCKS 1024

/* The node's device table: the fields, the mean's partial sums and cuFFT's
 * work area (cuFFT wants its data and work area aligned: the table's pieces
 * are 256 bytes apart, cudaMalloc's own alignment). */
typedef struct idpc_pieces {
  double2 *fields;  /* [2][pr * pc]: g_r's then g_c's */
  double *partials; /* [MEAN_BLOCKS] */
  void *work;       /* work_bytes */
  int64_t work_bytes;
} idpc_pieces;

/* The work area reserved for cuFFT: as much as the batched forward
 * transform's data, two fields. cuFFT says the size it needs only when it
 * plans (on the device, at run time), and the size is not documented; a
 * transform that needs more runs on the host with a note saying so (never a
 * silent fallback, never an allocation beside the plan). */
static int64_t work_bound(int64_t pr, int64_t pc) { return 2 * pr * pc * (int64_t)sizeof(double2); }

static void idpc_layout(sl_table *t, int64_t pr, int64_t pc, idpc_pieces *o) {
  o->fields = (double2 *)sl_table_take(t, 2 * pr * pc * (int64_t)sizeof(double2));
  o->partials = (double *)sl_table_take(t, MEAN_BLOCKS * (int64_t)sizeof(double));
  o->work_bytes = work_bound(pr, pc);
  o->work = sl_table_take(t, o->work_bytes);
}

/* The node's state: the plans (cuFFT objects: they hold a little device
 * memory of their own, outside the table, see docs/backends.md) and the
 * pieces of the device table they and the kernels use. */
typedef struct idpc_device_state {
  sl_cufft_api fft;
  int plan_forward2, plan_inverse; /* a batch of both fields; one field */
  bool have_forward2, have_inverse;
  bool ready; /* plans made and bound to the work area */
  int64_t rows, cols, pr, pc;
  idpc_pieces mem;
} idpc_device_state;

/* ---- kernels --------------------------------------------------------------------- */

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n (fourier_integral.c freq). */
__device__ __forceinline__ double idpc_freq(long long i, long long n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

/* The padded fields from the gradient, by even reflection of phi: the row
 * derivative flips sign in the rows' mirror image, the column derivative in
 * the columns' (pr = rows or 2 rows, pc likewise). */
__global__ void sl_k_idpc_mirror(const double *__restrict__ gr, const double *__restrict__ gc,
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
__global__ void sl_k_idpc_multiplier(double2 *__restrict__ a, const double2 *__restrict__ b, long long PR,
                                     long long PC, double h2, double norm) {
  const long long np = PR * PC;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < np;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / PC, j = k - i * PC;
    const double kr = idpc_freq(i, PR), kc = idpc_freq(j, PC), k2 = kr * kr + kc * kc;
    if (k2 == 0) {
      a[k] = make_double2(0, 0);
      continue;
    }
    const double2 z = a[k], w = b[k];
    const double nr = kr * z.x + kc * w.x, ni = kr * z.y + kc * w.y;
    const double fac = norm / (2 * IDPC_PI * (k2 + h2));
    a[k] = make_double2(ni * fac, -nr * fac);
  }
}

/* The sum of v over the block, in thread 0 (blockDim.x = MEAN_THREADS). */
__device__ double idpc_block_sum(double v) {
  __shared__ double s[MEAN_THREADS];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = MEAN_THREADS / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  return s[0];
}

/* phi = scale * Re(a) on the unpadded rows x cols, and each block's partial
 * sum of it (MEAN_BLOCKS blocks of MEAN_THREADS). */
__global__ void sl_k_idpc_extract(const double2 *__restrict__ a, double *__restrict__ phi, long long R,
                                  long long C, long long PC, double scale, double *__restrict__ partials) {
  double sum = 0;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < R * C;
       k += (long long)gridDim.x * blockDim.x) {
    const long long i = k / C, j = k - i * C;
    const double v = scale * a[i * PC + j].x;
    phi[k] = v;
    sum += v;
  }
  const double total = idpc_block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

/* phi -= mean; every block sums the partials in the same order itself (a
 * thousand doubles), which saves a kernel and a round trip. */
__global__ void sl_k_idpc_remove_mean(double *__restrict__ phi, long long n, const double *__restrict__ partials) {
  double p = 0;
  for (int b = threadIdx.x; b < MEAN_BLOCKS; b += MEAN_THREADS) p += partials[b];
  const double mean = idpc_block_sum(p) / (double)n;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += (long long)gridDim.x * blockDim.x)
    phi[k] -= mean;
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel idpc_kernels[] = {
    ENTRY("idpc_mirror", sl_k_idpc_mirror),
    ENTRY("idpc_multiplier", sl_k_idpc_multiplier),
    ENTRY("idpc_extract", sl_k_idpc_extract),
    ENTRY("idpc_remove_mean", sl_k_idpc_remove_mean),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(idpc_kernels)

/* ---- state ----------------------------------------------------------------------- */

extern "C" int64_t sl_cuda_idpc_state_bytes(int64_t rows, int64_t cols, bool mirror) {
  const int64_t m = mirror ? 2 : 1;
  sl_table t = sl_table_counter();
  idpc_pieces o;
  idpc_layout(&t, m * rows, m * cols, &o);
  return t.used;
}

static void idpc_state_release(void *p) {
  idpc_device_state *s = (idpc_device_state *)p;
  if (!s) return;
  if (s->have_forward2) s->fft.destroy(s->plan_forward2);
  if (s->have_inverse) s->fft.destroy(s->plan_inverse);
  free(s);
}

static sl_code cufft_fail(sl_kernel_args *a, int r, const char *what) {
  return sl_fail(a->err, SL_ERR_BACKEND, "%s: %s failed (%s)", k_node, what, sl_cufft_result_name(r));
}

/* A 2D double complex plan of pr x pc, `batch` fields apart by pr * pc, that
 * leaves its work area to us; *work gets its size. */
static sl_code make_plan(idpc_device_state *s, sl_kernel_args *a, int batch, int *plan, bool *have, size_t *work) {
  int r = s->fft.create(plan);
  if (r != SL_CUFFT_SUCCESS) return cufft_fail(a, r, "cufftCreate");
  *have = true;
  if ((r = s->fft.set_auto_allocation(*plan, 0)) != SL_CUFFT_SUCCESS)
    return cufft_fail(a, r, "cufftSetAutoAllocation");
  int n[2] = {(int)s->pr, (int)s->pc};
  r = s->fft.make_plan_many(*plan, 2, n, NULL, 1, 0, NULL, 1, 0, SL_CUFFT_Z2Z, batch, work);
  if (r != SL_CUFFT_SUCCESS) return cufft_fail(a, r, "cufftMakePlanMany (a double complex 2D plan)");
  return SL_OK;
}

/* The plans, bound to the work area of the device table. SL_OK with *why
 * set when cuFFT needs a larger work area than the table holds. */
static sl_code state_build(idpc_device_state *s, const sl_cuda_idpc_params *p, sl_kernel_args *a, char *why,
                           size_t why_size) {
  const int64_t m = p->mirror ? 2 : 1;
  s->rows = p->rows, s->cols = p->cols, s->pr = m * p->rows, s->pc = m * p->cols;
  if (s->pr > (1 << 30) || s->pc > (1 << 30) || s->pr * s->pc > ((int64_t)1 << 31) - 1)
    return sl_fail(a->err, SL_ERR_BACKEND, "%s: a %lldx%lld transform is too large for cuFFT's 32-bit plans",
                   k_node, (long long)s->pr, (long long)s->pc);
  sl_table t = sl_table_lent(a);
  idpc_layout(&t, s->pr, s->pc, &s->mem);
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc != SL_OK) return rc;
  size_t w_fwd = 0, w_inv = 0;
  rc = make_plan(s, a, 2, &s->plan_forward2, &s->have_forward2, &w_fwd);
  if (rc == SL_OK) rc = make_plan(s, a, 1, &s->plan_inverse, &s->have_inverse, &w_inv);
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
  if (r != SL_CUFFT_SUCCESS) return cufft_fail(a, r, "cufftSetWorkArea");
  s->ready = true;
  return SL_OK;
}

/* The node's state: NULL with *why when cuFFT cannot be loaded or cannot
 * work in the table (nothing is kept then, so a later run tries again). */
static sl_code state_get(const sl_cuda_idpc_params *p, sl_kernel_args *a, idpc_device_state **out, char *why,
                         size_t why_size) {
  *out = (idpc_device_state *)*p->device_state.state;
  if (*out) {
    if ((*out)->rows != p->rows || (*out)->cols != p->cols || (*out)->pr != (p->mirror ? 2 : 1) * p->rows)
      return sl_fail(a->err, SL_ERR_INTERNAL, "%s: the device state was made for another field", k_node);
    if (!(*out)->ready)
      return sl_fail(a->err, SL_ERR_BACKEND, "%s: the transforms could not be set up on an earlier call", k_node);
    return SL_OK;
  }
  idpc_device_state *s = (idpc_device_state *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  if (!sl_cufft_load(&s->fft, why, why_size)) {
    free(s);
    return SL_OK;
  }
  why[0] = 0;
  sl_code rc = state_build(s, p, a, why, why_size);
  if (rc == SL_OK && !s->ready) { /* the host path, with why */
    idpc_state_release(s);
    return SL_OK;
  }
  *p->device_state.state = s;
  *p->device_state.release = idpc_state_release;
  if (rc == SL_OK) *out = s;
  return rc;
}

/* ---- launcher -------------------------------------------------------------------- */

static unsigned grid_for(const sl_kernel_args *a, long long n) {
  long long g = (n + 255) / 256, cap = 32LL * sl_cuda_multiprocessors(a);
  if (g > cap) g = cap;
  return (unsigned)(g < 1 ? 1 : g);
}

extern "C" sl_code sl_cuda_idpc(const sl_cuda_idpc_params *p, sl_kernel_args *a, bool *on_device, char *why,
                                size_t why_size) {
  *on_device = false;
  idpc_device_state *s = NULL;
  sl_code rc = state_get(p, a, &s, why, why_size);
  if (rc != SL_OK || !s) return rc;
  *on_device = true;
  cudaStream_t st = sl_cuda_queue(a);
  const long long R = s->rows, C = s->cols, PR = s->pr, PC = s->pc, np = PR * PC;
  double2 *fa = s->mem.fields, *fb = s->mem.fields + np;
  int r = s->fft.set_stream(s->plan_forward2, (void *)st);
  if (r == SL_CUFFT_SUCCESS) r = s->fft.set_stream(s->plan_inverse, (void *)st);
  if (r != SL_CUFFT_SUCCESS) return cufft_fail(a, r, "cufftSetStream");
  const unsigned g = grid_for(a, np);
  sl_k_idpc_mirror<<<g, 256, 0, st>>>((const double *)a->in[0], (const double *)a->in[1], fa, fb, R, C, PR, PC);
  if ((rc = sl_cuda_check_launch(a, "sl_k_idpc_mirror"))) return rc;
  if ((r = s->fft.exec_z2z(s->plan_forward2, fa, fa, SL_CUFFT_FORWARD)) != SL_CUFFT_SUCCESS)
    return cufft_fail(a, r, "cufftExecZ2Z (forward)");
  const double norm = 1.0 / ((double)PR * (double)PC);
  sl_k_idpc_multiplier<<<g, 256, 0, st>>>(fa, fb, PR, PC, p->highpass * p->highpass, norm);
  if ((rc = sl_cuda_check_launch(a, "sl_k_idpc_multiplier"))) return rc;
  if ((r = s->fft.exec_z2z(s->plan_inverse, fa, fa, SL_CUFFT_INVERSE)) != SL_CUFFT_SUCCESS)
    return cufft_fail(a, r, "cufftExecZ2Z (inverse)");
  double *phi = (double *)a->out[0];
  sl_k_idpc_extract<<<MEAN_BLOCKS, MEAN_THREADS, 0, st>>>(fa, phi, R, C, PC, p->scale, s->mem.partials);
  if ((rc = sl_cuda_check_launch(a, "sl_k_idpc_extract"))) return rc;
  sl_k_idpc_remove_mean<<<grid_for(a, R * C), MEAN_THREADS, 0, st>>>(phi, R * C, s->mem.partials);
  return sl_cuda_check_launch(a, "sl_k_idpc_remove_mean");
}
