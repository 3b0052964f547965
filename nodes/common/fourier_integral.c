/* Fourier integration of a gradient field. See fourier_integral.h. */
#include "nodes/common/fourier_integral.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t sl_fourier_integral_bytes(int64_t rows, int64_t cols, bool mirror) {
  int64_t m = mirror ? 2 : 1;
  return 2 * (m * rows) * (m * cols) * 16;
}

int64_t sl_fourier_integral_ops(int64_t rows, int64_t cols, bool mirror) {
  int64_t m = mirror ? 2 : 1;
  double np = (double)(m * rows) * (double)(m * cols);
  return (int64_t)(3 * 5.0 * np * log2(np > 2 ? np : 2) + 20 * np);
}

void sl_fourier_integral_free(sl_fourier_integral *f) {
  if (f->fwd) fftw_destroy_plan(f->fwd);
  if (f->inv) fftw_destroy_plan(f->inv);
  fftw_free(f->a);
  fftw_free(f->b);
  memset(f, 0, sizeof *f);
}

sl_code sl_fourier_integral_init(sl_fourier_integral *f, int64_t rows, int64_t cols, bool mirror,
                                 sl_error *err) {
  memset(f, 0, sizeof *f);
  int m = mirror ? 2 : 1;
  f->rows = rows, f->cols = cols, f->pr = m * rows, f->pc = m * cols;
  size_t np = (size_t)(f->pr * f->pc);
  f->a = fftw_malloc(np * sizeof(fftw_complex));
  f->b = fftw_malloc(np * sizeof(fftw_complex));
  if (!f->a || !f->b) {
    sl_fourier_integral_free(f);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for two %lldx%lld complex fields",
                   (long long)(m * rows), (long long)(m * cols));
  }
  f->fwd = fftw_plan_dft_2d((int)f->pr, (int)f->pc, f->a, f->a, FFTW_FORWARD, FFTW_ESTIMATE);
  f->inv = fftw_plan_dft_2d((int)f->pr, (int)f->pc, f->a, f->a, FFTW_BACKWARD, FFTW_ESTIMATE);
  if (!f->fwd || !f->inv) {
    sl_fourier_integral_free(f);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan a %lldx%lld transform",
                   (long long)(m * rows), (long long)(m * cols));
  }
  return SL_OK;
}

/* numpy.fft.fftfreq: cycles per sample of DFT index i of n. */
static inline double freq(int64_t i, int64_t n) {
  return (double)(i < (n + 1) / 2 ? i : i - n) / (double)n;
}

void sl_fourier_integral_run(sl_fourier_integral *f, const double *g_r, const double *g_c, double highpass,
                             double scale, double *phi) {
  fftw_complex *a = f->a, *b = f->b;
  int64_t R = f->rows, C = f->cols, PR = f->pr, PC = f->pc;
  /* Even reflection of phi: the row derivative flips sign in the rows'
   * mirror image, the column derivative in the columns'. */
  for (int64_t i = 0; i < PR; i++) {
    int64_t si = i < R ? i : 2 * R - 1 - i;
    double sgr = i < R ? 1 : -1;
    for (int64_t j = 0; j < PC; j++) {
      int64_t sj = j < C ? j : 2 * C - 1 - j;
      double sgc = j < C ? 1 : -1;
      a[i * PC + j][0] = sgr * g_r[si * C + sj];
      a[i * PC + j][1] = 0;
      b[i * PC + j][0] = sgc * g_c[si * C + sj];
      b[i * PC + j][1] = 0;
    }
  }
  fftw_execute_dft(f->fwd, a, a);
  fftw_execute_dft(f->fwd, b, b);
  double h2 = highpass * highpass, norm = 1.0 / ((double)PR * (double)PC);
  for (int64_t i = 0; i < PR; i++) {
    double kr = freq(i, PR);
    for (int64_t j = 0; j < PC; j++) {
      double kc = freq(j, PC), k2 = kr * kr + kc * kc;
      double *z = a[i * PC + j];
      const double *w = b[i * PC + j];
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
  double mean = 0;
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) mean += (phi[i * C + j] = scale * a[i * PC + j][0]);
  mean /= (double)(R * C);
  for (int64_t k = 0; k < R * C; k++) phi[k] -= mean;
}
