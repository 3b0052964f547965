/* Fourier integration of a gradient field on the device (.cu files only),
 * shared by idpc (its whole launcher, idpc.cu) and dpc (the iDPC phase of its
 * 180-degree branch rule, dpc.cu; dpc also runs its forward spectra through
 * the batched forward plan). The device twin of nodes/common/
 * fourier_integral.c, in double precision, cuFFT loaded at run time
 * (shaders/cuda/common/cufft_loader.h):
 *
 *   phi = scale * Re IFFT[ (k_r F(g_r) + k_c F(g_c)) / (2 pi i (|k|^2 + h^2)) ]
 *
 * with the even-reflection fill (mirror: the transforms are 2R x 2C), one
 * batched forward Z2Z of both fields, the spectral multiplier, one inverse
 * Z2Z, then scale * Re and the mean removed, all on the call's queue. The
 * same formulas as the host path; the FFTs and the mean sum in another
 * order, so the result equals the host's to rounding (1e-12 relative).
 *
 * Memory: the pieces lie in the caller's device table, taken by
 * sl_cuda_integral_layout (the caller's layout calls it, so cost and launcher
 * count the same bytes). */
#ifndef SL_CUDA_FOURIER_INTEGRAL_CUH
#define SL_CUDA_FOURIER_INTEGRAL_CUH

#include <cuda_runtime.h>

#include "shaders/cuda/common/cufft_loader.h"
#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/launch.cuh"

/* Fixed-shape reductions: MEAN_BLOCKS partial sums of MEAN_THREADS threads,
 * then those in index order: deterministic for a given size. */
#define SL_INTEGRAL_THREADS 256
#define SL_INTEGRAL_BLOCKS 1024

/* The pieces of the device table (cuFFT wants data and work area aligned:
 * the table's pieces are SL_TABLE_ALIGN apart). */
typedef struct sl_cuda_integral_pieces {
  double2 *fields;  /* [2][pr * pc]: g_r's then g_c's; the batched transform's data */
  double *partials; /* [SL_INTEGRAL_BLOCKS]: the mean's */
  void *work;       /* cuFFT's work area, work_bytes */
  int64_t work_bytes;
} sl_cuda_integral_pieces;

/* The plans and pieces of one integration of rows x cols (pr x pc padded). */
typedef struct sl_cuda_integral {
  sl_cufft_api fft;
  int plan_forward2, plan_inverse; /* a batch of both fields; one field */
  bool have_forward2, have_inverse;
  bool ready; /* plans made and bound to the work area */
  int64_t rows, cols, pr, pc;
  sl_cuda_integral_pieces mem;
} sl_cuda_integral;

/* The transforms' size along an axis of n: 2 n with mirror, else n. */
static inline int64_t sl_cuda_integral_padded(int64_t n, bool mirror) { return mirror ? 2 * n : n; }

/* Takes the pieces for pr x pc transforms from t (counting or lent). */
void sl_cuda_integral_layout(sl_table *t, int64_t pr, int64_t pc, sl_cuda_integral_pieces *o);

/* Loads cuFFT and makes the plans over the pieces `mem` (from the layout on
 * the lent table). SL_OK with s->ready false and the reason in why when cuFFT
 * cannot be loaded or needs a larger work area than the table holds (the
 * caller runs its host path); an error names `node`. Free with
 * sl_cuda_integral_free in every case. */
sl_code sl_cuda_integral_init(sl_cuda_integral *s, int64_t rows, int64_t cols, bool mirror,
                              const sl_cuda_integral_pieces *mem, sl_kernel_args *a, const char *node,
                              char *why, size_t why_size);
void sl_cuda_integral_free(sl_cuda_integral *s);

/* The device state of a node that integrates a field (dpc, idpc): `size`
 * bytes whose first member is its sl_cuda_integral; `layout` takes the
 * integral's pieces into *integral and the node's own (after them) into its
 * state, from the table t (counting or lent). */
typedef void (*sl_cuda_integral_layout_fn)(sl_table *t, int64_t rows, int64_t cols, bool mirror,
                                           sl_cuda_integral_pieces *integral, void *state);

/* The node's state, made on its first call (the pieces from the lent table,
 * the plans over them) and kept in `holder` for the run; a later call gets
 * it back, checked against rows, cols and mirror. SL_OK with *out NULL and
 * the reason in `why` when cuFFT cannot be used here (nothing is kept: the
 * node runs its host path, and a later run tries again); an error names
 * `node`. */
sl_code sl_cuda_integral_state(sl_kernel_args *a, sl_cuda_state_holder holder, size_t size, int64_t rows,
                               int64_t cols, bool mirror, sl_cuda_integral_layout_fn layout, const char *node,
                               void **out, char *why, size_t why_size);

/* Binds the plans to the call's queue (every call: the queue can change). */
sl_code sl_cuda_integral_bind(sl_cuda_integral *s, sl_kernel_args *a, const char *node);

/* The batched forward transform of s->mem.fields, in place. */
sl_code sl_cuda_integral_forward2(sl_cuda_integral *s, sl_kernel_args *a, const char *node);

/* phi [rows * cols] (device) from the gradient (g_r, g_c) (device), after
 * sl_cuda_integral_bind. */
sl_code sl_cuda_integral_run(sl_cuda_integral *s, sl_kernel_args *a, const double *g_r, const double *g_c,
                             double highpass, double scale, double *phi, const char *node);

/* "NODE: WHAT failed (CUFFT_...)". */
sl_code sl_cuda_cufft_fail(sl_kernel_args *a, const char *node, int result, const char *what);

/* A grid of 256-thread blocks for n items, at most 32 per multiprocessor
 * (grid-stride loops do the rest). */
static inline unsigned sl_cuda_stem_grid(const sl_kernel_args *a, long long n) { return sl_cuda_stride_grid(a, n, 32); }

/* The sum of v over a block of SL_INTEGRAL_THREADS threads, returned to every
 * thread; a fixed tree, so the same bits every run. Callable several times
 * in a row (it waits for the previous call's readers first). */
static __device__ __forceinline__ double sl_cuda_block_sum(double v) {
  __shared__ double s[SL_INTEGRAL_THREADS];
  __syncthreads();
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = SL_INTEGRAL_THREADS / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  return s[0];
}

#endif
