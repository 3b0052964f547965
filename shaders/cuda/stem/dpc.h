/* dpc on CUDA (dpc.cu): the rotation fit's spectra and ring sums, the
 * rotated field with its curl and divergence, the ADF matched filter's sums
 * and (without an ADF image) the iDPC phase and sums of the skewness
 * rule, all on the device; the host reads back only
 * what it decides with (the ring sums, [2 max(R, C) + 1][8] doubles; the ADF
 * matched filter's sums per row, R x 6 doubles; the skewness rule's two
 * sums; the rows' squared divergence, R doubles) and
 * solves the 2x2 forms itself (nodes/stem/dpc_fit.c, sl_dpc_fit_solve), so
 * the fit's decisions are the host code's. Three steps, called in order by
 * the node (nodes/stem/dpc.c):
 *
 *   1. sl_cuda_dpc_rings: the four mirror spectra of the field (DCT-II /
 *      DST-II along each axis, nodes/common/mirror_spectrum.h) as the batched
 *      complex FFT of the 2R x 2C extensions, two real fields packed in one
 *      complex one; then the ring sums (dpc_math.h), one block per ring, a
 *      fixed order: the same bits every run; with an ADF image, the matched
 *      filter's sums of each row (dpc_math.h, one thread per row, the
 *      host's bits).
 *   2. sl_cuda_dpc_fields: out[0], out[1] = T^t R(-theta) c (sign +1),
 *      out[4], out[5] = its curl and divergence (the host's bits for the same
 *      cos and sin: dpc_math.h), the rows' squared divergence; with `branch`
 *      (the skewness rule: no ADF image) the iDPC phase of that field
 *      (fourier_integral.cuh, idpc's integration) and its two sums.
 *   3. sl_cuda_dpc_finish: the skewness rule's other branch negates the four fields (exact:
 *      every step of them is odd in the field); out[2] = theta, out[3] = t.
 *
 * Equal to the CPU within rounding: the spectra come from another FFT
 * (relative 1e-15), so the ring sums, the angle and everything after it
 * differ from the host's in the last bits; transpose and branch are the
 * same decisions unless a case sits on their edge. */
#ifndef SL_CUDA_DPC_H
#define SL_CUDA_DPC_H

#include "shaders/cuda/common/launcher.h"
#include "shaders/cuda/stem/dpc_math.h"
#include "shaders/cuda/stem/dpc_gain_bound.h"
#include "shaders/cuda/stem/dpc_parallax.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_dpc_params {
  int64_t rows, cols; /* of the field */
  bool adf_u64;       /* in[2] (when connected) is u64, else f64 */
  sl_cuda_state_holder device_state;
} sl_cuda_dpc_params;

/* Bytes of the node's device table (cost().device_state_bytes): the
 * integration's (idpc's, 2R x 2C, whose batched fields also carry the
 * forward spectra), the four spectra [(R + 1)(C + 1)], the ring sums, the
 * phase, the reductions' partial sums and the rows' squared divergence. */
int64_t sl_cuda_dpc_state_bytes(int64_t rows, int64_t cols);

/* The same with the parallax's pieces after dpc's own, and the gain
 * bound's scratch after them, for n_segments segments (0: none;
 * dpc_parallax.h, dpc_gain_bound.h). */
int64_t sl_cuda_dpc_state_bytes_with(int64_t rows, int64_t cols, int n_segments, const sl_cuda_parallax_geometry *g);

/* After step 1: the parallax's device context of this run, made on the
 * first call that needs it over the pieces after dpc's own and kept (and
 * freed) with dpc's state, bound to this call and its segments (device).
 * SL_OK with *out NULL and the reason in why when it cannot run there
 * (the node fits on the host then). */
sl_code sl_cuda_dpc_parallax_of(const sl_cuda_dpc_params *p, sl_kernel_args *a, int n_segments,
                                const sl_cuda_parallax_geometry *g, const uint64_t *segments,
                                sl_cuda_dpc_parallax **out, char *why, size_t why_size);

/* Step 1: ring_totals[sl_dpc_rings(rows, cols) * SL_DPC_RING_SUMS] (host)
 * from the field in[0], in[1]; with adf_of_row (host, non-NULL: the ADF
 * image in[2] is connected) also the ADF matched filter's sums of each row,
 * [rows][SL_DPC_ADF_SUMS] (sl_dpc_adf_row: the host's bits). When cuFFT
 * cannot be loaded (or needs a larger work area than the table holds) returns SL_OK with *on_device false
 * and the reason in why[why_size], having enqueued nothing: the caller runs
 * its host path. Waits for the device (the sums are read back). */
sl_code sl_cuda_dpc_rings(const sl_cuda_dpc_params *p, sl_kernel_args *a, double *ring_totals, double *adf_of_row,
                          bool *on_device, char *why, size_t why_size);

/* Step 2, after step 1: the fields for (c, s) = (cos theta, sin theta) and
 * t; div2_of_row[rows] (host): each row's sum of squared divergence, in
 * column order; with `branch` *sums (host) from the iDPC phase of the
 * field (the skewness rule). Waits for the device. */
sl_code sl_cuda_dpc_fields(const sl_cuda_dpc_params *p, sl_kernel_args *a, double c, double s, int t, bool branch,
                           double *div2_of_row, sl_dpc_branch_sums *sums);

/* The gain bound's sums (dpc_gain_bound.h) of the fit's window of the
 * n_segments segments in[3] (offsets in[4]), on the device's scratch after
 * the parallax's pieces; segment_sums and position_sums are host memory,
 * read back. Waits for the device. */
sl_code sl_cuda_dpc_gain_bound_sums(const sl_cuda_dpc_params *p, sl_kernel_args *a, int n_segments,
                                    const sl_cuda_parallax_geometry *g, uint64_t *segment_sums,
                                    uint64_t *position_sums);

/* Step 3: negates out[0], out[1], out[4], out[5] when `negate`; writes
 * out[2] = theta_deg, out[3] = t. Enqueued only. */
sl_code sl_cuda_dpc_finish(const sl_cuda_dpc_params *p, sl_kernel_args *a, bool negate, double theta_deg, int t);

#ifdef __cplusplus
}
#endif

#endif
