/* mirror_spectrum: the R x C real transforms against a brute-force DFT of
 * the 2R x 2C mirror extension (the definition, summed directly), for each
 * parity and odd and even sizes; the inverse gives the field back; the
 * results have the same bits with 1 and 3 workers. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nodes/common/mirror_spectrum.h"
#include "tests/unit/node_harness.h"

/* The extension of f [R, C] to 2R x 2C, odd (sign -1 in the mirror image)
 * along rows and/or cols, at (i, j). */
static double extended(const double *f, int R, int C, int odd_r, int odd_c, int i, int j) {
  double s = 1;
  if (i >= R) i = 2 * R - 1 - i, s *= odd_r ? -1 : 1;
  if (j >= C) j = 2 * C - 1 - j, s *= odd_c ? -1 : 1;
  return s * f[i * C + j];
}

/* The DFT of the extension at (kr, kc), exp(-2 pi i k x), directly. */
static void dft_at(const double *f, int R, int C, int odd_r, int odd_c, int kr, int kc,
                   double *re, double *im) {
  double sr = 0, si = 0;
  for (int i = 0; i < 2 * R; i++)
    for (int j = 0; j < 2 * C; j++) {
      double v = extended(f, R, C, odd_r, odd_c, i, j);
      double a = -2 * M_PI * ((double)kr * i / (2.0 * R) + (double)kc * j / (2.0 * C));
      sr += v * cos(a), si += v * sin(a);
    }
  *re = sr, *im = si;
}

static double *random_field(int R, int C) {
  double *f = malloc(sizeof(double) * R * C);
  for (int k = 0; k < R * C; k++) f[k] = (double)(rnd() % 2001) / 1000.0 - 1.0;
  return f;
}

/* F(kr, kc) = (-i)^(odd_r + odd_c) e^{i pi (kr / 2R + kc / 2C)} X(kr, kc) at
 * every frequency 0..R x 0..C (the header's relation), within 1e-12 of
 * the largest |F|. */
static void check_forward(int R, int C) {
  double *f = random_field(R, C), *X = malloc(sizeof(double) * R * C);
  sl_mirror m;
  sl_error e;
  assert_int_equal(sl_mirror_init(&m, R, C, &e), SL_OK);
  for (int odd_r = 0; odd_r < 2; odd_r++)
    for (int odd_c = 0; odd_c < 2; odd_c++) {
      sl_mirror_forward(&m, NULL, f, odd_r, odd_c, X);
      double maxe = 0, maxv = 0;
      for (int kr = 0; kr <= R; kr++)
        for (int kc = 0; kc <= C; kc++) {
          double re, im, x = sl_mirror_at(X, R, C, odd_r, odd_c, kr, kc);
          dft_at(f, R, C, odd_r, odd_c, kr, kc, &re, &im);
          /* The predicted F: x times (-i)^n times the phase. */
          double ph = M_PI * (kr / (2.0 * R) + kc / (2.0 * C)) - M_PI / 2 * (odd_r + odd_c);
          double pr = x * cos(ph), pi = x * sin(ph);
          maxe = fmax(maxe, hypot(re - pr, im - pi));
          maxv = fmax(maxv, hypot(re, im));
        }
      fprintf(stderr, "forward %dx%d odd (%d, %d): max error %.2g of %.3g\n", R, C, odd_r, odd_c,
              maxe, maxv);
      assert_true(maxv > 0);
      assert_true(maxe < 1e-12 * maxv);
    }
  sl_mirror_free(&m);
  free(f);
  free(X);
}

static void test_forward_against_dft(void **st) {
  (void)st;
  check_forward(6, 5);
  check_forward(4, 8);
  check_forward(1, 7);
  check_forward(9, 1);
}

/* The inverse of the even-even spectrum is 4 R C times the field. */
static void test_inverse(void **st) {
  (void)st;
  const int R = 13, C = 10;
  double *f = random_field(R, C), *X = malloc(sizeof(double) * R * C),
         *g = malloc(sizeof(double) * R * C);
  sl_mirror m;
  sl_error e;
  assert_int_equal(sl_mirror_init(&m, R, C, &e), SL_OK);
  sl_mirror_forward(&m, NULL, f, 0, 0, X);
  sl_mirror_inverse(&m, NULL, X, g);
  double maxe = 0;
  for (int k = 0; k < R * C; k++) maxe = fmax(maxe, fabs(g[k] / (4.0 * R * C) - f[k]));
  assert_true(maxe < 1e-13);
  sl_mirror_free(&m);
  free(f);
  free(X);
  free(g);
}

/* Rows shared among 3 workers: the same bits as on this thread alone. */
static void test_same_bits_on_workers(void **st) {
  (void)st;
  const int R = 70, C = 45;
  double *f = random_field(R, C), *a = malloc(sizeof(double) * R * C),
         *b = malloc(sizeof(double) * R * C);
  sl_mirror m;
  sl_error e;
  assert_int_equal(sl_mirror_init(&m, R, C, &e), SL_OK);
  sl_backend *be = backend(3);
  for (int odd = 0; odd < 2; odd++) {
    sl_mirror_forward(&m, NULL, f, odd, !odd, a);
    sl_mirror_forward(&m, be, f, odd, !odd, b);
    assert_memory_equal(a, b, sizeof(double) * R * C);
  }
  sl_mirror_inverse(&m, NULL, f, a);
  sl_mirror_inverse(&m, be, f, b);
  assert_memory_equal(a, b, sizeof(double) * R * C);
  sl_cpu_backend_ops.destroy(be);
  sl_mirror_free(&m);
  free(f);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward_against_dft),
      cmocka_unit_test(test_inverse),
      cmocka_unit_test(test_same_bits_on_workers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
