/* Fourier integration of a gradient field. See fourier_integral.h. */
#include "nodes/common/fourier_integral.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nodes/common/fftw_planner.h"

int64_t sl_fourier_integral_bytes(int64_t rows, int64_t cols, bool mirror) {
  if (mirror) return 2 * rows * cols * 8 + sl_mirror_bytes(rows, cols);
  return 2 * rows * cols * 16;
}

int64_t sl_fourier_integral_ops(int64_t rows, int64_t cols, bool mirror) {
  double np = (double)rows * (double)cols;
  if (mirror) return 3 * sl_mirror_ops(rows, cols) + (int64_t)(20 * np);
  return (int64_t)(3 * 5.0 * np * log2(np > 2 ? np : 2) + 20 * np);
}

void sl_fourier_integral_free(sl_fourier_integral *f) {
  sl_mirror_free(&f->ms);
  free(f->xr);
  free(f->xc);
  if (f->fwd) fftw_destroy_plan(f->fwd);
  if (f->inv) fftw_destroy_plan(f->inv);
  fftw_free(f->a);
  fftw_free(f->b);
  memset(f, 0, sizeof *f);
}

static sl_code init_periodic(sl_fourier_integral *f, sl_error *err) {
  size_t np = (size_t)(f->rows * f->cols);
  f->a = fftw_malloc(np * sizeof(fftw_complex));
  f->b = fftw_malloc(np * sizeof(fftw_complex));
  if (!f->a || !f->b)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for two %lldx%lld complex fields",
                   (long long)f->rows, (long long)f->cols);
  sl_fftw_planner_thread_safe();
  f->fwd = fftw_plan_dft_2d((int)f->rows, (int)f->cols, f->a, f->a, FFTW_FORWARD, FFTW_ESTIMATE);
  f->inv = fftw_plan_dft_2d((int)f->rows, (int)f->cols, f->a, f->a, FFTW_BACKWARD, FFTW_ESTIMATE);
  if (!f->fwd || !f->inv)
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan a %lldx%lld transform",
                   (long long)f->rows, (long long)f->cols);
  return SL_OK;
}

sl_code sl_fourier_integral_init(sl_fourier_integral *f, int64_t rows, int64_t cols, bool mirror,
                                 sl_error *err) {
  memset(f, 0, sizeof *f);
  f->rows = rows, f->cols = cols, f->mirror = mirror;
  sl_code rc;
  if (mirror) {
    rc = sl_mirror_init(&f->ms, rows, cols, err);
    f->xr = malloc((size_t)(rows * cols) * sizeof *f->xr);
    f->xc = malloc((size_t)(rows * cols) * sizeof *f->xc);
    if (rc == SL_OK && (!f->xr || !f->xc))
      rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for two %lldx%lld spectra", (long long)rows,
                   (long long)cols);
  } else {
    rc = init_periodic(f, err);
  }
  if (rc != SL_OK) sl_fourier_integral_free(f);
  return rc;
}

/* phi[k] = scale * v[k * step] less its mean, k < n (v may be phi). */
static void scaled_less_mean(const double *v, int64_t step, int64_t n, double scale,
                             double *phi) {
  double mean = 0;
  for (int64_t k = 0; k < n; k++) mean += (phi[k] = scale * v[k * step]);
  mean /= (double)n;
  for (int64_t k = 0; k < n; k++) phi[k] -= mean;
}

void sl_fourier_integral_from_spectra(sl_fourier_integral *f, struct sl_backend *b,
                                      const double *x_r, const double *x_c, double highpass,
                                      double scale, double *phi) {
  const int64_t R = f->rows, C = f->cols;
  double h2 = highpass * highpass, norm = 1.0 / (4.0 * (double)R * (double)C);
  /* Phi (even in both axes: frequencies 0..R-1, 0..C-1) into xr. Phi at
   * kr reads x_r at kr - 1 of the same row of the layout, so kr runs down
   * and x_r may be xr itself. */
  double *y = f->xr;
  for (int64_t kc = 0; kc < C; kc++) {
    double fc = (double)kc / (double)(2 * C);
    for (int64_t kr = R - 1; kr >= 0; kr--) {
      double fr = (double)kr / (double)(2 * R), k2 = fr * fr + fc * fc;
      double v = 0;
      if (k2 > 0) {
        double xr = sl_mirror_at(x_r, R, C, 1, 0, kr, kc), xc = sl_mirror_at(x_c, R, C, 0, 1, kr, kc);
        v = -(fr * xr + fc * xc) * norm / (2 * M_PI * (k2 + h2));
      }
      y[kc * R + kr] = v;
    }
  }
  sl_mirror_inverse(&f->ms, b, y, phi);
  scaled_less_mean(phi, 1, R * C, scale, phi);
}

/* The periodic integral (no mirror): complex transforms of R x C. */
static void run_periodic(sl_fourier_integral *f, const double *g_r, const double *g_c,
                         double highpass, double scale, double *phi) {
  fftw_complex *a = f->a, *b = f->b;
  int64_t R = f->rows, C = f->cols;
  for (int64_t k = 0; k < R * C; k++) a[k][0] = g_r[k], a[k][1] = 0, b[k][0] = g_c[k], b[k][1] = 0;
  fftw_execute_dft(f->fwd, a, a);
  fftw_execute_dft(f->fwd, b, b);
  double h2 = highpass * highpass, norm = 1.0 / ((double)R * (double)C);
  for (int64_t i = 0; i < R; i++) {
    double kr = sl_fft_freq(i, R);
    for (int64_t j = 0; j < C; j++) {
      double kc = sl_fft_freq(j, C), k2 = kr * kr + kc * kc;
      double *z = a[i * C + j];
      const double *w = b[i * C + j];
      if (k2 == 0) {
        z[0] = z[1] = 0;
        continue;
      }
      /* num / (2 pi i d) = -i num / (2 pi d) */
      double nr = kr * z[0] + kc * w[0], ni = kr * z[1] + kc * w[1];
      double fac = norm / (2 * M_PI * (k2 + h2));
      z[0] = ni * fac;
      z[1] = -nr * fac;
    }
  }
  fftw_execute_dft(f->inv, a, a);
  scaled_less_mean(&a[0][0], 2, R * C, scale, phi);
}

void sl_fourier_integral_run(sl_fourier_integral *f, const double *g_r, const double *g_c, double highpass,
                             double scale, double *phi) {
  if (!f->mirror) {
    run_periodic(f, g_r, g_c, highpass, scale, phi);
    return;
  }
  /* The row derivative is odd in the rows' mirror image, the column
   * derivative in the columns'. */
  sl_mirror_forward(&f->ms, NULL, g_r, 1, 0, f->xr);
  sl_mirror_forward(&f->ms, NULL, g_c, 0, 1, f->xc);
  sl_fourier_integral_from_spectra(f, NULL, f->xr, f->xc, highpass, scale, phi);
}
