/* dpc's parallax fit on the device (dpc_parallax.cu): the heavy steps of
 * nodes/stem/dpc_parallax.c (sl_dpc_parallax_steps) on the segments where
 * bf_segments left them, so that dpc on CUDA reads back a few numbers
 * instead of the segments' rows (22 MB at 512 x 512) and fits on the host.
 * The host's driver (sl_dpc_parallax_fit) makes every decision; these only
 * compute:
 *
 *   correlate  the window's spectra (batched cuFFT Z2Z, zero padded), the
 *              pairs' products (two pairs a transform, as the host), the
 *              batched inverse transforms and the lags, divided by the
 *              overlap (the host's formula); plain, or weighted per
 *              frequency;
 *   power      the spectra's mean power per frequency (the host sorts it
 *              for the noise weights);
 *   grid       one block per value of s, one thread per trial map, the
 *              objective in the host's order of operations (no contracted
 *              multiply-add), the block's best the first of equal values;
 *   value, pattern  the objective at one map; the pattern search in one
 *              block, its candidates one after another as the host's;
 *   tcbf       the central window's spectra, shifted and summed in segment
 *              order, sign-corrected, inverse transformed, and the
 *              interior's skewness.
 *
 * Equal to the host within rounding: the transforms are cuFFT's, so the
 * correlations differ in their last bits, and so may every number after
 * them; the search's decisions are the host's unless a case sits on their
 * edge (test_cuda_dpc compares host and device on the atomic-column grid).
 *
 * Memory: pieces of dpc's device table after its own (the node's cost
 * counts them, sl_cuda_dpc_parallax_bytes); four cuFFT plans share one work
 * area there. Where cuFFT needs a larger work area the context is not made
 * (why says so) and dpc fits on the host. */
#ifndef SL_CUDA_DPC_PARALLAX_H
#define SL_CUDA_DPC_PARALLAX_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The windows (nodes/stem/dpc_parallax.h, sl_dpc_parallax_geometry: the
 * node passes the host's numbers). */
typedef struct sl_cuda_parallax_geometry {
  int64_t wr, wc, lr, lc, pr, pc, tr, tc;
} sl_cuda_parallax_geometry;

/* Bytes of the parallax's pieces for n segments. */
int64_t sl_cuda_dpc_parallax_bytes(int n, const sl_cuda_parallax_geometry *g);

typedef struct sl_cuda_dpc_parallax sl_cuda_dpc_parallax;

/* The context over the pieces from `offset` bytes into the call's device
 * table (n segments [n][rows][cols] u64 on the device, the input of the
 * calls that follow), its plans made. SL_OK with *out NULL and the reason
 * in why when cuFFT cannot be loaded or wants a larger work area. */
sl_code sl_cuda_dpc_parallax_new(sl_kernel_args *a, int n, int64_t rows, int64_t cols,
                                 const sl_cuda_parallax_geometry *g, int64_t offset, sl_cuda_dpc_parallax **out,
                                 char *why, size_t why_size);
void sl_cuda_dpc_parallax_free(void *x);

/* Binds a call: its queue and its segments (device). */
sl_code sl_cuda_dpc_parallax_bind(sl_cuda_dpc_parallax *x, sl_kernel_args *a, const uint64_t *segments);

/* The steps (host arrays in, host arrays out; each waits for the device).
 * correlate: index[used] the segments used, pair[pairs][2] their offset
 * differences (kept for the search); weight NULL: plain, and sums[used]
 * (counts over the window) and *diag (sum_i X_ii(0)); else [pr pc]. */
sl_code sl_cuda_dpc_parallax_correlate(sl_cuda_dpc_parallax *x, const int *index, int used, const double *pair,
                                       const double *weight, double *sums, double *diag);
sl_code sl_cuda_dpc_parallax_power(sl_cuda_dpc_parallax *x, int used, double *power);
sl_code sl_cuda_dpc_parallax_grid(sl_cuda_dpc_parallax *x, double half, int64_t n_s, double *best);
sl_code sl_cuda_dpc_parallax_value(sl_cuda_dpc_parallax *x, const double m[4], double *v);
sl_code sl_cuda_dpc_parallax_pattern(sl_cuda_dpc_parallax *x, double half, double *s, double *p, int t, double *v);
/* The used segments are the plain correlation's; shifts[used][2]: M o of
 * each (rows, columns of the scan); cell: the segments' side in radii (its
 * blur, sincs along M^T f). */
sl_code sl_cuda_dpc_parallax_tcbf(sl_cuda_dpc_parallax *x, int used, const double *shifts, const double m[4],
                                  double cell, double chi_per_f2, int64_t margin, double *skewness);

#ifdef __cplusplus
}
#endif

#endif
