/* synthetic_4dstem: determinism across chunking and threads, seeds, dose and
 * Poisson statistics, disk confinement, ground-truth centre of mass and
 * phase, scan rotation and transpose, clamping, parameter validation. */
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

extern const sl_node_desc sl_node_synthetic_4dstem;

static sl_code synthetic_make(sl_node *n, const kv *over, int n_over, sl_error *e) {
  return node_make(n, &sl_node_synthetic_4dstem, over, n_over, NULL, 0, e);
}

/* A generated data set: frames as u32 whatever the dtype (for easy checks). */
typedef struct dataset {
  int64_t rows, cols, h, w, npos;
  sl_dtype dtype;
  void *raw;       /* as produced */
  uint32_t *frames;
  double *phase, *com;
} dataset;

static void ds_free(dataset *d) {
  free(d->raw);
  free(d->frames);
  free(d->phase);
  free(d->com);
}

/* Runs the node over all positions in chunks of `chunk` on `threads` threads. */
static dataset generate(const kv *over, int n_over, int64_t chunk, int threads) {
  synth_data s = synth_run(over, n_over, chunk, threads);
  dataset d;
  memset(&d, 0, sizeof d);
  d.rows = s.rows;
  d.cols = s.cols;
  d.h = s.h;
  d.w = s.w;
  d.dtype = s.out[0].dtype;
  d.npos = s.npos;
  assert_int_equal(s.out[0].stream_rank, 2);
  assert_int_equal(s.out[1].stream_rank, 0);
  assert_int_equal(s.out[1].dtype, SL_F64);
  assert_int_equal(s.out[2].rank, 3);
  assert_int_equal(s.out[2].dims[2], 2);
  int64_t hw = d.h * d.w;
  d.raw = s.frames; /* as produced; reduction outputs zeroed by the harness */
  d.phase = s.phase;
  d.com = s.com;
  d.frames = malloc((size_t)(d.npos * hw) * 4);
  for (int64_t i = 0; i < d.npos * hw; i++)
    d.frames[i] = d.dtype == SL_U8    ? ((uint8_t *)d.raw)[i]
                  : d.dtype == SL_U16 ? ((uint16_t *)d.raw)[i]
                                      : ((uint32_t *)d.raw)[i];
  return d;
}

static int same(const dataset *a, const dataset *b) {
  int64_t bytes = a->npos * a->h * a->w * (int64_t)sl_dtype_size(a->dtype);
  return !memcmp(a->raw, b->raw, (size_t)bytes) &&
         !memcmp(a->phase, b->phase, (size_t)a->npos * 8) &&
         !memcmp(a->com, b->com, (size_t)a->npos * 16);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_chunking_and_threads(void **st) {
  /* Integer step (transmission lookup) and fractional step (interpolation). */
  const char *steps[2] = {"1", "1.37"};
  for (int k = 0; k < 2; k++) {
    kv o[] = {{"scan_shape", "[6, 5]"},   {"detector_shape", "[32, 24]"}, {"step", steps[k]},
              {"defocus", "2.5"},         {"phase_max", "0.6"},           {"dose", "5000"}};
    dataset all2 = generate(o, 6, 30, 2);
    dataset one1 = generate(o, 6, 1, 1);
    dataset sev1 = generate(o, 6, 7, 1);
    dataset sev2 = generate(o, 6, 7, 2);
    assert_true(same(&all2, &one1));
    assert_true(same(&all2, &sev1));
    assert_true(same(&all2, &sev2));
    /* Something was written everywhere (the 0xCD fill is gone, counts exist). */
    uint64_t total = 0;
    for (int64_t i = 0; i < all2.npos * all2.h * all2.w; i++) total += all2.frames[i];
    assert_true(total > 0);
    for (int64_t p = 0; p < all2.npos; p++) {
      uint64_t t = 0;
      for (int64_t i = 0; i < all2.h * all2.w; i++) t += all2.frames[p * all2.h * all2.w + i];
      assert_true(t > 4000 && t < 6000);
    }
    ds_free(&all2);
    ds_free(&one1);
    ds_free(&sev1);
    ds_free(&sev2);
  }
}

static void test_seed(void **st) {
  kv a[] = {{"scan_shape", "[4, 4]"}, {"detector_shape", "[32, 32]"}, {"seed", "7"}};
  kv b[] = {{"scan_shape", "[4, 4]"}, {"detector_shape", "[32, 32]"}, {"seed", "8"}};
  dataset x = generate(a, 3, 16, 2), y = generate(a, 3, 5, 2), z = generate(b, 3, 16, 2);
  assert_true(same(&x, &y));
  int64_t n = x.npos * x.h * x.w, diff = 0;
  for (int64_t i = 0; i < n; i++) diff += x.frames[i] != z.frames[i];
  assert_true(diff > n / 50);
  /* The object depends on the seed too. */
  assert_true(memcmp(x.phase, z.phase, (size_t)x.npos * 8) != 0);
  ds_free(&x);
  ds_free(&y);
  ds_free(&z);
}

/* Mean total counts per frame within 4 sigma of the dose; variance of the
 * total close to the dose (Poisson). Small and large per-pixel means. */
static void test_dose(void **st) {
  const char *doses[3] = {"1000", "150000", "3e7"};
  const char *types[3] = {"u16", "u32", "u32"};
  for (int k = 0; k < 3; k++) {
    kv o[] = {{"scan_shape", "[24, 25]"}, {"detector_shape", "[24, 24]"}, {"dose", doses[k]},
              {"dtype", types[k]}, {"phase_max", "0.5"}};
    dataset d = generate(o, 5, 600, 2);
    double dose = atof(doses[k]), s = 0, s2 = 0;
    for (int64_t p = 0; p < d.npos; p++) {
      double t = 0;
      for (int64_t i = 0; i < d.h * d.w; i++) t += d.frames[p * d.h * d.w + i];
      s += t;
      s2 += t * t;
    }
    double mean = s / d.npos, var = s2 / d.npos - mean * mean;
    double sigma_mean = sqrt(dose / (double)d.npos);
    if (fabs(mean - dose) > 4 * sigma_mean || fabs(var / dose - 1) > 0.3)
      fprintf(stderr, "dose %g: mean %g (4 sigma %g) var %g\n", dose, mean, 4 * sigma_mean, var);
    assert_true(fabs(mean - dose) <= 4 * sigma_mean);
    /* var of a sample variance of N=600 Poisson totals: relative sd ~ sqrt(2/N) = 6% */
    assert_true(fabs(var / dose - 1) < 0.3);
    ds_free(&d);
  }
}

/* With no object, every frame has the same mean pattern lambda: a disk,
 * flat inside its rim. Per-pixel mean and variance across frames match
 * lambda (Poisson), for inversion (< 30) and PTRS (>= 30). */
static void test_poisson_per_pixel(void **st) {
  const char *doses[2] = {"400", "2e5"};
  for (int k = 0; k < 2; k++) {
    kv o[] = {{"scan_shape", "[40, 40]"}, {"detector_shape", "[16, 16]"}, {"disk_radius", "3"},
              {"dose", doses[k]}, {"dtype", "u32"}, {"phase_max", "0"}};
    dataset d = generate(o, 6, 1600, 2);
    /* The pixels wholly inside the disk (centre within radius - 0.75 of
     * (7.5, 7.5): the rim's pixels are partly covered) share one mean, the
     * pooled one; each must match it and have variance = mean. */
    double cr = 7.5, cc = 7.5, inner = (3 - 0.75) * (3 - 0.75), pooled = 0;
    int n_in = 0;
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < 16; c++) {
        if ((r - cr) * (r - cr) + (c - cc) * (c - cc) > inner) continue;
        n_in++;
        for (int64_t p = 0; p < d.npos; p++) pooled += d.frames[p * 256 + r * 16 + c];
      }
    double lam = pooled / ((double)n_in * (double)d.npos);
    assert_true(n_in >= 12 && lam > 0.6 * atof(doses[k]) / 32);
    double worst = 0, ratio_sum = 0;
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < 16; c++) {
        if ((r - cr) * (r - cr) + (c - cc) * (c - cc) > inner) continue;
        double s = 0, s2 = 0;
        for (int64_t p = 0; p < d.npos; p++) {
          double v = d.frames[p * 256 + r * 16 + c];
          s += v;
          s2 += v * v;
        }
        double m = s / d.npos, var = s2 / d.npos - m * m;
        double z = fabs(m - lam) / sqrt(lam / d.npos);
        worst = z > worst ? z : worst;
        ratio_sum += var / lam;
      }
    double vr = ratio_sum / n_in;
    if (worst > 4.5 || fabs(vr - 1) > 0.05)
      fprintf(stderr, "lambda %g: worst z %g, mean var/lambda %g\n", lam, worst, vr);
    assert_true(worst < 4.5);           /* max |z| of the inner pixels' normals */
    assert_true(fabs(vr - 1) < 0.05);  /* pooled over n_in x 1600 samples */
    ds_free(&d);
  }
}

/* Counts only inside the disk (+1 pixel) without an object, with and without
 * defocus; an object scatters some counts outside. */
static void test_disk_confinement(void **st) {
  const char *defocus[2] = {"0", "4"};
  for (int k = 0; k < 3; k++) {
    kv o[] = {{"scan_shape", "[8, 8]"}, {"detector_shape", "[48, 40]"}, {"disk_radius", "7.5"},
              {"dose", "1e6"}, {"dtype", "u32"}, {"phase_max", k < 2 ? "0" : "1.5"},
              {"defocus", defocus[k & 1]}};
    dataset d = generate(o, 7, 64, 2);
    double cr = 23.5, cc = 19.5, lim = (7.5 + 1) * (7.5 + 1);
    uint64_t outside = 0, inside = 0;
    for (int64_t p = 0; p < d.npos; p++)
      for (int r = 0; r < 48; r++)
        for (int c = 0; c < 40; c++) {
          uint32_t v = d.frames[p * 48 * 40 + r * 40 + c];
          if ((r - cr) * (r - cr) + (c - cc) * (c - cc) > lim) outside += v;
          else inside += v;
        }
    if (k < 2) {
      assert_true(outside == 0);
      assert_true(inside > 0);
    } else {
      assert_true(outside > 100); /* strong phase object scatters outside the disk */
    }
    ds_free(&d);
  }
}

/* com_expected: 0 without an object; with one, it follows the phase gradient:
 * com_row ~ +H/(2 pi) d phi/d row (per object pixel), likewise for columns. */
static void test_com_expected(void **st) {
  {
    /* even and odd detectors: the disk is centred on ((H-1)/2, (W-1)/2) */
    const char *dets[2] = {"[32, 28]", "[33, 27]"};
    for (int k = 0; k < 2; k++) {
      kv o[] = {{"scan_shape", "[5, 6]"}, {"detector_shape", dets[k]}, {"phase_max", "0"},
                {"defocus", "3"}};
      dataset d = generate(o, 4, 30, 2);
      for (int64_t i = 0; i < d.npos * 2; i++) assert_true(fabs(d.com[i]) < 1e-9);
      for (int64_t i = 0; i < d.npos; i++) assert_true(d.phase[i] == 0.0);
      ds_free(&d);
    }
  }
  kv o[] = {{"scan_shape", "[40, 36]"}, {"detector_shape", "[64, 48]"}, {"disk_radius", "16"},
            {"phase_max", "0.3"}, {"step", "0.5"}};
  dataset d = generate(o, 5, 1440, 2);
  const int R = 40, C = 36;
  /* phase at probe centres lies in [0, phase_max] and spans most of it */
  double pmin = 1e9, pmax = -1e9;
  for (int i = 0; i < R * C; i++) {
    pmin = fmin(pmin, d.phase[i]);
    pmax = fmax(pmax, d.phase[i]);
  }
  assert_true(pmin >= 0 && pmax <= 0.3 + 1e-12 && pmax > 0.15);
  /* central differences of the phase map (per object pixel: step 0.5) */
  int n = (R - 2) * (C - 2), k = 0;
  double *gr = malloc(sizeof(double) * n), *gc = malloc(sizeof(double) * n);
  double *cr = malloc(sizeof(double) * n), *cc = malloc(sizeof(double) * n);
  for (int i = 1; i < R - 1; i++)
    for (int j = 1; j < C - 1; j++, k++) {
      gr[k] = (d.phase[(i + 1) * C + j] - d.phase[(i - 1) * C + j]) / (2 * 0.5);
      gc[k] = (d.phase[i * C + j + 1] - d.phase[i * C + j - 1]) / (2 * 0.5);
      cr[k] = d.com[2 * (i * C + j)];
      cc[k] = d.com[2 * (i * C + j) + 1];
    }
  double rr = correlation(cr, gr, n), rc = correlation(cc, gc, n), cross = correlation(cr, gc, n);
  /* slope of com against H/(2 pi) * gradient: positive, order 1 (the probe
   * blurs the gradient, so below 1) */
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) num += cr[i] * gr[i] * 64 / (2 * M_PI), den += gr[i] * gr[i] * 64 * 64 / (4 * M_PI * M_PI);
  double slope = num / den;
  fprintf(stderr, "com vs gradient: corr row %.3f col %.3f cross %.3f slope %.3f\n", rr, rc,
          cross, slope);
  assert_true(rr > 0.7);
  assert_true(rc > 0.7);
  assert_true(fabs(cross) < 0.3);
  assert_true(slope > 0.3 && slope < 1.5);
  free(gr);
  free(gc);
  free(cr);
  free(cc);
  ds_free(&d);
}

/* scan_rotation theta / scan_transpose: com_expected = R(theta) T^t applied to
 * the unrotated run's, R(theta) = [[cos, -sin], [sin, cos]] on (row, col),
 * T the swap; quarter turns and the plain transpose of a square detector are
 * exact permutations of the pattern, other angles resample it bilinearly. The
 * object (and so `phase`) does not change; each frame still holds `dose`. */
static void test_scan_rotation(void **st) {
  const char *base[][2] = {{"scan_shape", "[10, 12]"}, {"detector_shape", "[48, 48]"},
                           {"disk_radius", "8"},       {"phase_max", "0.5"},
                           {"dose", "20000"},          {"dtype", "u32"}};
  kv o[8];
  for (int i = 0; i < 6; i++) o[i].name = base[i][0], o[i].yaml = base[i][1];
  dataset d0 = generate(o, 6, 120, 2);
  struct {
    const char *rot, *tr;
    double tol; /* of the rms CoM */
  } cases[] = {{"0", "true", 1e-9},  {"90", "false", 1e-9}, {"-270", "true", 1e-9},
               {"30", "false", 0.02}, {"-75", "true", 0.02}, {"163", "false", 0.02}};
  double rms = 0;
  for (int64_t p = 0; p < d0.npos * 2; p++) rms += d0.com[p] * d0.com[p];
  rms = sqrt(rms / (double)(d0.npos * 2));
  assert_true(rms > 0.05);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    o[6].name = "scan_rotation", o[6].yaml = cases[k].rot;
    o[7].name = "scan_transpose", o[7].yaml = cases[k].tr;
    dataset d = generate(o, 8, 7, 2);
    assert_memory_equal(d.phase, d0.phase, (size_t)d.npos * 8);
    double th = atof(cases[k].rot) * M_PI / 180, c = cos(th), s = sin(th), worst = 0;
    int t = !strcmp(cases[k].tr, "true");
    for (int64_t p = 0; p < d.npos; p++) {
      double r0 = d0.com[2 * p], c0 = d0.com[2 * p + 1];
      if (t) {
        double x = r0;
        r0 = c0, c0 = x;
      }
      double er = c * r0 - s * c0, ec = s * r0 + c * c0;
      worst = fmax(worst, fmax(fabs(d.com[2 * p] - er), fabs(d.com[2 * p + 1] - ec)));
    }
    fprintf(stderr, "scan_rotation %s transpose %s: max |com - R T com0| %.3g (rms com %.3g)\n",
            cases[k].rot, cases[k].tr, worst, rms);
    assert_true(worst <= cases[k].tol * rms);
    for (int64_t p = 0; p < d.npos; p++) {
      double tot = 0;
      for (int64_t i = 0; i < d.h * d.w; i++) tot += d.frames[p * d.h * d.w + i];
      assert_true(fabs(tot - 20000) < 6 * sqrt(20000.0));
    }
    ds_free(&d);
  }
  /* Defaults (0, false) reproduce the data bit for bit. */
  o[6].name = "scan_rotation", o[6].yaml = "0";
  o[7].name = "scan_transpose", o[7].yaml = "false";
  dataset d = generate(o, 8, 120, 1);
  assert_true(same(&d, &d0));
  ds_free(&d);
  ds_free(&d0);
}

/* u8 frames clamp at 254 (255 is the flag value). */
static void test_clamp(void **st) {
  kv o[] = {{"scan_shape", "[3, 3]"}, {"detector_shape", "[16, 16]"}, {"dose", "1e6"},
            {"dtype", "u8"}};
  dataset d = generate(o, 4, 9, 2);
  int at = 0;
  for (int64_t i = 0; i < d.npos * 256; i++) {
    assert_true(d.frames[i] <= 254);
    at += d.frames[i] == 254;
  }
  assert_true(at > 0);
  ds_free(&d);
}

static void test_invalid_params(void **st) {
  struct {
    kv o;
    const char *needle;
  } cases[] = {
      {{"scan_shape", "[0, 4]"}, "'scan_shape'"},
      {{"scan_shape", "[4]"}, "'scan_shape'"},
      {{"scan_shape", "[2, 2, 2]"}, "'scan_shape'"},
      {{"scan_shape", "[-1, 2]"}, "'scan_shape'"},
      {{"detector_shape", "[4, 64]"}, "'detector_shape'"},
      {{"detector_shape", "[64]"}, "'detector_shape'"},
      {{"detector_shape", "[64, 100000]"}, "'detector_shape'"},
      {{"dose", "0"}, "'dose'"},
      {{"dose", "-5"}, "'dose'"},
      {{"dose", "1e20"}, "'dose'"},
      {{"dose", "x"}, "'dose'"},
      {{"dtype", "f32"}, "'dtype'"},
      {{"dtype", "u64"}, "'dtype'"},
      {{"disk_radius", "32"}, "'disk_radius'"},
      {{"disk_radius", "-1"}, "'disk_radius'"},
      {{"disk_radius", "0.5"}, "'disk_radius'"},
      {{"defocus", "1e9"}, "'defocus'"},
      {{"step", "0"}, "'step'"},
      {{"step", "-1"}, "'step'"},
      {{"step", "500"}, "'step'"},
      {{"phase_max", "-0.1"}, "'phase_max'"},
      {{"phase_max", "7"}, "'phase_max'"},
      {{"seed", "1.5"}, "'seed'"},
      {{"scan_rotation", "400"}, "'scan_rotation'"},
      {{"scan_rotation", "nan"}, "'scan_rotation'"},
      {{"scan_rotation", "x"}, "'scan_rotation'"},
      {{"scan_transpose", "maybe"}, "'scan_transpose'"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    expect_node_error(&sl_node_synthetic_4dstem, &cases[k].o, 1, NULL, 0, SL_ERR_PIPELINE,
                      cases[k].needle, NULL);
  /* Defaults are valid and give the documented shapes. */
  sl_node n;
  sl_error e;
  assert_int_equal(synthetic_make(&n, NULL, 0, &e), SL_OK);
  assert_int_equal(n.out[0].dtype, SL_U16);
  assert_int_equal(n.out[0].rank, 4);
  assert_true(n.out[0].dims[0] == 32 && n.out[0].dims[1] == 32 && n.out[0].dims[2] == 64 &&
              n.out[0].dims[3] == 64);
  sl_node_cost c;
  n.desc->cost(&n, 10, &c);
  assert_true(c.bytes_written >= 10 * 64 * 64 * 2);
  assert_true(c.ops > 0);
  node_free(&n);
}

/* The brief's scale: a 64x64 scan of 128x128 frames, timed (not asserted:
 * machines differ); prints for the performance ledger. */
static void test_timing(void **st) {
  if (!getenv("SLUICE_SYNTH_TIMING")) {
    skip();
  }
  kv o[] = {{"scan_shape", "[64, 64]"}, {"detector_shape", "[128, 128]"}};
  double t0 = sl_now();
  dataset d = generate(o, 2, 1024, 0);
  fprintf(stderr, "64x64 scan of 128x128 frames: %.2f s\n", sl_now() - t0);
  ds_free(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunking_and_threads), cmocka_unit_test(test_seed),
      cmocka_unit_test(test_dose),                 cmocka_unit_test(test_poisson_per_pixel),
      cmocka_unit_test(test_disk_confinement),     cmocka_unit_test(test_com_expected),
      cmocka_unit_test(test_scan_rotation),
      cmocka_unit_test(test_clamp),                cmocka_unit_test(test_invalid_params),
      cmocka_unit_test(test_timing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
