/* Spectra of real fields [rows, cols] extended by mirror images to 2R x 2C,
 * computed as real transforms of R x C (shared by
 * nodes/common/fourier_integral.h and nodes/stem/dpc_fit.h).
 *
 * The extension reflects f across each edge, f(2R-1-i, j) = +-f(i, j) and
 * f(i, 2C-1-j) = +-f(i, j): even (+) for a phase, odd (-) along the axis
 * of its derivative. With FFTW's forward sign exp(-2 pi i k x), the DFT of
 * the extension at frequency (kr, kc), 0 <= kr <= R, 0 <= kc <= C, is
 *
 *   F(kr, kc) = (-i)^(odd_r + odd_c) e^{i pi (kr / 2R + kc / 2C)} X(kr, kc)
 *
 * with X real and separable: along an even axis of length n the DCT-II
 * 2 sum_j x_j cos(pi k (j + 1/2) / n) (FFTW's REDFT10; 0 at k = n), along
 * an odd one the DST-II 2 sum_j x_j sin(pi k (j + 1/2) / n) (RODFT10,
 * whose output m is k = m + 1; 0 at k = 0). The frequency -kr (index
 * 2R - kr) holds the same X with the phase conjugated along that axis and
 * the DCT's sign flipped, the DST's kept. So every product of two spectra
 * with the same number of odd axes, F conj(G), is X Y at a nonnegative
 * frequency: quadratic forms over the 2R x 2C spectrum are sums over
 * (R + 1) x (C + 1) real frequencies, each counted once per mirror image
 * (sl_mirror_multiplicity). This is 8 times less work than the complex
 * transform of the extension, and it is exact (the same sums, rounded
 * differently).
 *
 * Layout: X is stored transposed, column frequency major: the value of
 * axis indices (m_r, m_c) at X[m_c * rows + m_r] (sl_mirror_at maps
 * frequencies to them).
 *
 * Each 1-D transform runs through one plan per axis and kind, on one row at
 * a time (FFTW_UNALIGNED), so a row's result does not depend on how rows
 * are shared among threads: the output has the same bits at any thread
 * count. Plans are made by sl_mirror_init (FFTW planning is not thread
 * safe: nodes call it from prepare). */
#ifndef SL_MIRROR_SPECTRUM_H
#define SL_MIRROR_SPECTRUM_H

#include <stdint.h>

#include "engine/core/status.h"

struct sl_backend;

typedef struct sl_mirror {
  int64_t rows, cols;
  void *plan[2][3]; /* fftw_plan per axis (0: length rows, 1: length cols) and
                       sl_mirror_kind, in place */
  void *copy_plan[2][3]; /* the same, out of place (input kept): the first pass */
  double *work;     /* [rows * cols]: the first axis's result before the transpose */
} sl_mirror;

typedef enum sl_mirror_kind {
  SL_MIRROR_EVEN = 0,    /* DCT-II */
  SL_MIRROR_ODD = 1,     /* DST-II */
  SL_MIRROR_INVERSE = 2, /* DCT-III (REDFT01): the inverse of EVEN, times 2n */
} sl_mirror_kind;

/* Bytes of the work buffer for a rows x cols field. */
int64_t sl_mirror_bytes(int64_t rows, int64_t cols);
/* Floating-point operations of one transform of a rows x cols field, about. */
int64_t sl_mirror_ops(int64_t rows, int64_t cols);

sl_code sl_mirror_init(sl_mirror *m, int64_t rows, int64_t cols, sl_error *err);
void sl_mirror_free(sl_mirror *m);

/* X [cols * rows, transposed] = the spectrum of f [rows * cols] extended
 * odd (1) or even (0) along rows and along cols. Rows are shared among the
 * workers of b (NULL: the calling thread only). */
void sl_mirror_forward(sl_mirror *m, struct sl_backend *b, const double *f, int odd_rows,
                       int odd_cols, double *X);

/* f [rows * cols] from Y [cols * rows, transposed], the spectrum of its
 * even-even extension, times 4 rows cols: the DCT-III of Y along both axes
 * (the caller folds the 1 / (4 rows cols) into its own factors). */
void sl_mirror_inverse(sl_mirror *m, struct sl_backend *b, const double *Y, double *f);

/* X at frequency (kr, kc), 0 <= kr <= rows, 0 <= kc <= cols, for the
 * parity (odd_rows, odd_cols) it was made with: 0 where the transform
 * vanishes (the DCT at k = n, the DST at k = 0). */
static inline double sl_mirror_at(const double *X, int64_t rows, int64_t cols, int odd_rows,
                                  int odd_cols, int64_t kr, int64_t kc) {
  int64_t mr = kr - odd_rows, mc = kc - odd_cols;
  return mr >= 0 && mr < rows && mc >= 0 && mc < cols ? X[mc * rows + mr] : 0;
}

/* How many of the 2R x 2C frequencies frequency (kr, kc) stands for: 2 per
 * axis, 1 on the axis's zero and Nyquist frequencies. */
static inline double sl_mirror_multiplicity(int64_t rows, int64_t cols, int64_t kr, int64_t kc) {
  return (kr == 0 || kr == rows ? 1.0 : 2.0) * (kc == 0 || kc == cols ? 1.0 : 2.0);
}

#endif
