/* Fourier integration of a gradient field (REFERENCE.md 4), shared by idpc
 * (the iDPC image) and dpc (which integrates both 180-degree branches of its
 * rotated field to choose one). With FFTW's forward sign exp(-2 pi i k x):
 *
 *   phi = scale * Re IFFT[ (k_r F(g_r) + k_c F(g_c)) / (2 pi i (|k|^2 + h^2)) ]
 *
 * k in cycles per sample (numpy.fft.fftfreq order), the DC term 0, the mean
 * of the result removed: an exact gradient gives phi back with its sign and
 * scale (scale 1, h 0). h (cycles per sample) makes it a high-pass filter
 * |k|^2 / (|k|^2 + h^2) of phi. With `mirror` the fields are extended to
 * 2R x 2C by even reflection of phi (g_r odd in rows, g_c odd in columns), so
 * the integral does not wrap around a non-periodic scan.
 *
 * With `mirror` the work is done on R x C real transforms
 * (nodes/common/mirror_spectrum.h): g_r's spectrum odd in rows, g_c's odd
 * in columns and phi's even in both share one phase per frequency, so
 *
 *   Phi(k) = -(k_r X_r + k_c X_c) / (2 pi (|k|^2 + h^2))
 *
 * with X the real mirror spectra, and phi is the inverse DCT of Phi: the
 * formula above, 8 times cheaper, the same to rounding. The Nyquist row and
 * column of the 2R x 2C transform contribute no real part, so their loss
 * changes nothing.
 *
 * Plans are made by sl_fourier_integral_init (FFTW planning is not thread
 * safe: nodes call it from prepare, which runs on one thread).
 *
 * shaders/cuda/stem/fourier_integral.cu repeats the formula on the device
 * (idpc and dpc on CUDA) with the complex transform of the extension: a
 * change of the formula here goes there too, and tests/unit/test_cuda_idpc.c
 * and test_cuda_dpc.c compare the two. */
#ifndef SL_FOURIER_INTEGRAL_H
#define SL_FOURIER_INTEGRAL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

/* What FFTW's planner makes at the first plan of a process (its codelet and
 * solver tables), whatever the size: 2.4 MiB measured with FFTW 3.3 on
 * Debian 12 (six 1-D r2r plans of 24 or 512 points, ESTIMATE). Nodes that
 * plan with FFTW declare it as their library_bytes. */
#define SL_FFTW_PLANNER_BYTES ((int64_t)5 << 19)
/* What loading cuFFT and making its first plans takes of host memory, once
 * per process: about 16 MiB on the H200 (Ubuntu 24.04, CUDA 13): the
 * process grew 20.4 MiB more running dpc.yaml on CUDA than mean_pattern.yaml
 * on the same acquisition, 12.1 MiB more planned without it. Nodes whose
 * device kernels use cuFFT declare it as their device_library_bytes. */
#define SL_CUFFT_HOST_BYTES ((int64_t)16 << 20)
#include "nodes/common/mirror_spectrum.h"

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n. */
static inline double sl_fft_freq(int64_t i, int64_t n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

struct sl_backend;

typedef struct sl_fourier_integral {
  int64_t rows, cols;
  bool mirror;
  sl_mirror ms;       /* mirror: the real transforms */
  double *xr, *xc;    /* mirror: the spectra of g_r and g_c [rows * cols], then Phi in xr */
  void *a, *b;        /* no mirror: fftw_complex[rows * cols] each */
  void *fwd, *inv;    /* no mirror: fftw_plan */
} sl_fourier_integral;

/* Bytes of the transforms' buffers for a rows x cols field. */
int64_t sl_fourier_integral_bytes(int64_t rows, int64_t cols, bool mirror);
/* Floating-point operations of one integration, about. */
int64_t sl_fourier_integral_ops(int64_t rows, int64_t cols, bool mirror);

sl_code sl_fourier_integral_init(sl_fourier_integral *f, int64_t rows, int64_t cols, bool mirror,
                                 sl_error *err);
void sl_fourier_integral_free(sl_fourier_integral *f);

/* phi[rows * cols] from the gradient (g_r, g_c), each rows * cols. */
void sl_fourier_integral_run(sl_fourier_integral *f, const double *g_r, const double *g_c, double highpass,
                             double scale, double *phi);

/* Mirror only: phi[rows * cols] from the mirror spectra of the gradient,
 * X_r of g_r odd in rows and X_c of g_c odd in columns (sl_mirror_forward's
 * layout), for a caller that has them already (dpc); the transforms' rows
 * are shared among the workers of b (NULL: this thread). */
void sl_fourier_integral_from_spectra(sl_fourier_integral *f, struct sl_backend *b,
                                      const double *x_r, const double *x_c, double highpass,
                                      double scale, double *phi);

#endif
