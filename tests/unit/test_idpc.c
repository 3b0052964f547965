/* idpc: Fourier integration of an exact gradient field gives the potential
 * back (periodic: to rounding without mirroring; non-periodic: r > 0.999
 * with mirroring), sign and scale included; highpass; on a synthetic_4dstem
 * acquisition (CoM computed plainly from the frames, rotated by dpc) the
 * phase matches the ground-truth phase low-pass filtered to the probe's
 * resolution; parameter and input validation. */
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

#include "engine/core/util.h"
#include "tests/unit/stem_test_data.h"

extern const sl_node_desc sl_node_dpc;
extern const sl_node_desc sl_node_idpc;

/* ---- runners ------------------------------------------------------------------ */

/* Runs a whole node with two f64 [R, C] inputs; outputs into out[] (caller
 * sized). */
static void run_on_field(const sl_node_desc *d, const double *cr, const double *cc, int R,
                         int C, const kv *over, int n_over, void **out) {
  int64_t dims[2] = {R, C};
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 2, dims, 0), sl_desc_make(SL_F64, 2, dims, 0)};
  sl_node n;
  sl_error e;
  sl_code rc = node_make(&n, d, over, n_over, in, 2, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  if (d->prepare) assert_int_equal(d->prepare(&n, &e), SL_OK);
  const void *ins[2] = {cr, cc};
  rc = run_whole(&n, ins, 2, out, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  node_free(&n);
}

static double *run_idpc(const double *cr, const double *cc, int R, int C, const kv *over,
                        int n_over) {
  double *phi = malloc(sizeof(double) * R * C);
  void *out[1] = {phi};
  run_on_field(&sl_node_idpc, cr, cc, R, C, over, n_over, out);
  return phi;
}

/* Least-squares slope of b against a (both mean removed). */
static double slope(const double *a, const double *b, int n) {
  double ma = 0, mb = 0, sab = 0, saa = 0;
  for (int i = 0; i < n; i++) ma += a[i], mb += b[i];
  ma /= n, mb /= n;
  for (int i = 0; i < n; i++) sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma);
  return sab / saa;
}

static double mean_of(const double *a, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) m += a[i];
  return m / n;
}

/* ---- tests ---------------------------------------------------------------------- */

/* A periodic potential (sinusoids with integer frequencies below Nyquist) and
 * its exact gradient: recovered to rounding without mirroring, with the
 * node's sign and scale (scale multiplies). */
static void test_periodic_exact(void **st) {
  (void)st;
  const int R = 24, C = 30;
  double *p = malloc(sizeof(double) * R * C), *gr = malloc(sizeof(double) * R * C),
         *gc = malloc(sizeof(double) * R * C);
  const double modes[3][4] = {{1, 2, 0.7, 0.3}, {3, -1, 0.4, 1.1}, {5, 7, 0.2, 2.0}};
  periodic_potential(R, C, p, gr, gc);
  double mp = mean_of(p, R * C);
  kv o[] = {{"mirror", "false"}};
  double *phi = run_idpc(gr, gc, R, C, o, 1);
  double maxe = 0;
  for (int k = 0; k < R * C; k++) maxe = fmax(maxe, fabs(phi[k] - (p[k] - mp)));
  fprintf(stderr, "periodic: max error %.3g\n", maxe);
  assert_true(maxe < 1e-12);
  assert_true(fabs(mean_of(phi, R * C)) < 1e-13);
  free(phi);
  kv o2[] = {{"mirror", "false"}, {"scale", "-2.5"}};
  phi = run_idpc(gr, gc, R, C, o2, 2);
  for (int k = 0; k < R * C; k++) assert_true(fabs(phi[k] + 2.5 * (p[k] - mp)) < 1e-11);
  free(phi);
  /* highpass h: mode (fr, fc) is multiplied by |k|^2 / (|k|^2 + h^2). */
  kv o3[] = {{"mirror", "false"}, {"highpass", "0.1"}};
  phi = run_idpc(gr, gc, R, C, o3, 2);
  maxe = 0;
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      double v = 0;
      for (int m = 0; m < 3; m++) {
        double kr = modes[m][0] / R, kc = modes[m][1] / C, k2 = kr * kr + kc * kc;
        double a = 2 * M_PI * (modes[m][0] * i / R + modes[m][1] * j / C) + modes[m][3];
        v += modes[m][2] * cos(a) * k2 / (k2 + 0.01);
      }
      maxe = fmax(maxe, fabs(phi[i * C + j] - v));
    }
  assert_true(maxe < 1e-12);
  free(phi);
  free(p);
  free(gr);
  free(gc);
}

/* A non-periodic potential (Gaussian atoms) sampled with its exact gradient:
 * with mirroring the integral equals the potential (r > 0.999, slope 1 within
 * 2%); without, the wrap-around at the edges costs accuracy. */
static void test_analytic_potential(void **st) {
  (void)st;
  const int R = 48, C = 40;
  blobs b = make_blobs(R, C, 40, 777);
  double *p = malloc(sizeof(double) * R * C), *gr = malloc(sizeof(double) * R * C),
         *gc = malloc(sizeof(double) * R * C);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) blob_eval(&b, i, j, &p[i * C + j], &gr[i * C + j], &gc[i * C + j]);
  double *phi = run_idpc(gr, gc, R, C, NULL, 0);
  double r = correlation(phi, p, R * C), s = slope(p, phi, R * C);
  kv o[] = {{"mirror", "false"}};
  double *pw = run_idpc(gr, gc, R, C, o, 1);
  double rw = correlation(pw, p, R * C);
  fprintf(stderr, "analytic potential: r %.6f slope %.4f (no mirror: r %.4f)\n", r, s, rw);
  assert_true(r > 0.999);
  assert_true(fabs(s - 1) < 0.02);
  assert_true(rw < r);
  free(phi);
  free(pw);
  free(p);
  free(gr);
  free(gc);
}

/* Gaussian low-pass (sigma in scan steps), edges reflected. */
static void gauss_blur(const double *in, double *out, int R, int C, double sigma) {
  int rad = (int)ceil(4 * sigma);
  double *k = malloc(sizeof(double) * (2 * rad + 1)), *tmp = malloc(sizeof(double) * R * C);
  double ks = 0;
  for (int i = -rad; i <= rad; i++) ks += k[i + rad] = exp(-i * i / (2 * sigma * sigma));
  for (int i = 0; i <= 2 * rad; i++) k[i] /= ks;
#define REFL(x, n) ((x) < 0 ? -(x) - 1 : (x) >= (n) ? 2 * (n) - (x) - 1 : (x))
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      double v = 0;
      for (int d = -rad; d <= rad; d++) v += k[d + rad] * in[REFL(i + d, R) * C + j];
      tmp[i * C + j] = v;
    }
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      double v = 0;
      for (int d = -rad; d <= rad; d++) v += k[d + rad] * tmp[i * C + REFL(j + d, C)];
      out[i * C + j] = v;
    }
#undef REFL
  free(k);
  free(tmp);
}

/* End to end: frames -> plain CoM -> dpc (fitted rotation) -> idpc, against
 * the generator's phase at the probe centres low-pass filtered by a Gaussian
 * of the probe intensity's size: FWHM = 0.5145 H / disk_radius object pixels
 * (Airy), sigma = FWHM / 2.355 = 1.75 pixels here (step 1). */
static void test_synthetic(void **st) {
  (void)st;
  const char *rots[2] = {"30", "0"}, *trans[2] = {"true", "false"};
  for (int k = 0; k < 2; k++) {
    kv o[] = {{"scan_shape", "[32, 32]"}, {"detector_shape", "[48, 48]"}, {"dose", "1e6"},
              {"dtype", "u32"}, {"phase_max", "0.3"}, {"scan_rotation", rots[k]},
              {"scan_transpose", trans[k]}};
    int R, C;
    double *cr, *cc, *truth;
    synth_com(o, 7, &R, &C, &cr, &cc, NULL, &truth);
    double *rr = malloc(sizeof(double) * R * C), *rc = malloc(sizeof(double) * R * C);
    double *curl = malloc(sizeof(double) * R * C), *div = malloc(sizeof(double) * R * C);
    double ang = 0;
    uint8_t t = 0;
    void *dout[6] = {rr, rc, &ang, &t, curl, div};
    run_on_field(&sl_node_dpc, cr, cc, R, C, NULL, 0, dout);
    assert_int_equal(t, k == 0);
    /* CoM in detector pixels -> radians per scan step: 2 pi step / H. */
    kv io[] = {{"scale", "0.1308996938995747"}}; /* 2 pi / 48 */
    double *phi = run_idpc(rr, rc, R, C, io, 1);
    double *lp = malloc(sizeof(double) * R * C);
    double sigma = 0.5145 * 48 / 6 / 2.355;
    gauss_blur(truth, lp, R, C, sigma);
    gauss_blur(truth, lp, R, C, sigma);
    /* Interior: positions at least 5 steps (about the probe's radius to its
     * first Airy zero, 0.61 H / disk_radius = 4.9 pixels) from the edge,
     * where the probe sees only object inside the scan field (near the edge
     * it sees object the phase map does not hold, and iDPC's mirror image). */
    const int m = 5;
    int ni = 0;
    double *a1 = malloc(sizeof(double) * R * C), *a2 = malloc(sizeof(double) * R * C);
    for (int i = m; i < R - m; i++)
      for (int j = m; j < C - m; j++) a1[ni] = phi[i * C + j], a2[ni++] = lp[i * C + j];
    double r_in = correlation(a1, a2, ni);
    free(a1);
    free(a2);
    double r = correlation(phi, lp, R * C), r_raw = correlation(phi, truth, R * C);
    double s = slope(lp, phi, R * C);
    fprintf(stderr, "synthetic (rotation %s, transpose %s; dpc %.2f deg): r %.4f against the "
            "low-passed phase (sigma %.2f) in the interior, %.4f over the whole scan (raw phase: "
            "%.4f), slope %.3f\n",
            rots[k], trans[k], ang, r_in, sigma, r, r_raw, s);
    assert_true(r_in >= 0.97);
    assert_true(r >= 0.88);
    assert_true(s > 0.5 && s < 1.5);
    free(phi);
    free(lp);
    free(rr);
    free(rc);
    free(curl);
    free(div);
    free(cr);
    free(cc);
    free(truth);
  }
}

static void test_invalid(void **st) {
  (void)st;
  int64_t dims[2] = {8, 9}, other[2] = {8, 8};
  const sl_tensor_desc f = sl_desc_make(SL_F64, 2, dims, 0); /* a valid CoM map */
  const refusal_case cases[] = {
      {{"highpass", "-1"}, "'highpass'", {f, f}},
      {{"highpass", "0.7"}, "'highpass'", {f, f}},
      {{"scale", "nan"}, "'scale'", {f, f}},
      {{"scale", "1"}, "'com_row'", {sl_desc_make(SL_F64, 1, dims, 0), f}},
      {{"scale", "1"}, "'com_col'", {f, sl_desc_make(SL_U16, 2, dims, 0)}},
      {{"scale", "1"}, "differ", {f, sl_desc_make(SL_F64, 2, other, 0)}},
  };
  expect_refusals(&sl_node_idpc, 2, cases, SL_COUNT_OF(cases));
  /* A 1x1 scan integrates to 0; cost is reported. */
  double one = 3, two = -1, phi = 7;
  void *out[1] = {&phi};
  run_on_field(&sl_node_idpc, &one, &two, 1, 1, NULL, 0, out);
  assert_true(phi == 0);
  sl_node n;
  sl_error e;
  sl_tensor_desc in[2] = {sl_desc_make(SL_F64, 2, dims, 0), sl_desc_make(SL_F64, 2, dims, 0)};
  assert_int_equal(node_make(&n, &sl_node_idpc, NULL, 0, in, 2, &e), SL_OK);
  assert_int_equal(n.out[0].dtype, SL_F64);
  assert_true(n.out[0].dims[0] == 8 && n.out[0].dims[1] == 9 && n.out[0].stream_rank == 0);
  sl_node_cost c;
  n.desc->cost(&n, 1, &c);
  assert_true(c.ops > 0 && c.state_bytes == 3 * (8 * 9) * 8); /* two spectra, a work field */
  node_free(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_periodic_exact),
      cmocka_unit_test(test_analytic_potential),
      cmocka_unit_test(test_synthetic),
      cmocka_unit_test(test_invalid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
