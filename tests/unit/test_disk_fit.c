/* disk_fit: sub-pixel centre and radius of rendered disks (area-weighted
 * edges, background, Poisson noise), of the summed synthetic_4dstem pattern,
 * u64 and f64 inputs; no disk (flat, pure noise) is a clear error. */
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

#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_disk_fit;

static double uniform(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }

/* Poisson(lam): Knuth's product method on pieces of at most 20 (a sum of
 * independent Poisson variables is Poisson). */
static uint64_t poisson(double lam) {
  uint64_t k = 0;
  while (lam > 0) {
    double l = lam > 20 ? 20 : lam, L = exp(-l), p = 1;
    lam -= l;
    for (;;) {
      p *= uniform();
      if (p <= L) break;
      k++;
    }
  }
  return k;
}

/* Disk of radius r at (cr, cc): each pixel's covered fraction (16 x 16
 * subsamples) times `peak`, plus `bg`; Poisson noise if `noisy`. */
static void render(uint64_t *img, int64_t h, int64_t w, double cr, double cc, double r,
                   double bg, double peak, int noisy) {
  for (int64_t y = 0; y < h; y++)
    for (int64_t x = 0; x < w; x++) {
      int in = 0;
      for (int a = 0; a < 16; a++)
        for (int b = 0; b < 16; b++) {
          double yy = (double)y - 0.5 + (a + 0.5) / 16, xx = (double)x - 0.5 + (b + 0.5) / 16;
          in += (yy - cr) * (yy - cr) + (xx - cc) * (xx - cc) <= r * r;
        }
      double lam = bg + peak * in / 256.0;
      img[y * w + x] = noisy ? poisson(lam) : (uint64_t)llround(lam);
    }
}

/* Runs disk_fit on a whole pattern. */
static sl_code fit(const void *pattern, sl_dtype t, int64_t h, int64_t w, const kv *o, int no,
                   double out[4], sl_node *keep, sl_error *e) {
  int64_t d[2] = {h, w};
  sl_tensor_desc in = sl_desc_make(t, 2, d, 0);
  sl_node n;
  sl_code rc = node_make(&n, &sl_node_disk_fit, o, no, &in, 1, e);
  if (rc) {
    node_free(&n);
    return rc;
  }
  assert_int_equal(n.out[0].dtype, SL_F64);
  assert_int_equal(n.out[0].stream_rank, 0);
  assert_int_equal(sl_desc_elems(&n.out[0]), 4);
  const void *ins[1] = {pattern};
  void *outs[1] = {out};
  rc = run_whole(&n, ins, 1, outs, e);
  if (keep) *keep = n;
  else node_free(&n);
  return rc;
}

static void test_rendered(void **st) {
  const struct {
    int64_t h, w;
    double cr, cc, r, bg, peak;
    int noisy;
  } cases[] = {
      {64, 64, 31.5, 31.5, 12.0, 0, 1000, 0},
      {63, 70, 30.37, 33.81, 11.3, 100, 900, 1},
      {64, 64, 28.13, 35.72, 5.6, 50, 2000, 1},
      {96, 80, 50.61, 38.09, 21.27, 20, 500, 1},
      {48, 48, 23.9, 22.2, 17.4, 300, 5000, 1}, /* disk filling most of the detector */
      {40, 52, 20.5, 25.25, 3.2, 10, 3000, 1},  /* a small disk */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t h = cases[k].h, w = cases[k].w;
    uint64_t *img = malloc((size_t)(h * w) * 8);
    render(img, h, w, cases[k].cr, cases[k].cc, cases[k].r, cases[k].bg, cases[k].peak,
           cases[k].noisy);
    double out[4];
    sl_error e;
    sl_node n;
    sl_code rc = fit(img, SL_U64, h, w, NULL, 0, out, &n, &e);
    if (rc) fprintf(stderr, "case %zu: %s\n", k, e.msg);
    assert_int_equal(rc, SL_OK);
    double dc = hypot(out[0] - cases[k].cr, out[1] - cases[k].cc), dr = fabs(out[2] - cases[k].r);
    fprintf(stderr,
            "rendered %zu: centre (%.3f, %.3f) want (%.3f, %.3f) |d| %.3f; radius %.3f want %.3f; "
            "residual %.3f\n",
            k, out[0], out[1], cases[k].cr, cases[k].cc, dc, out[2], cases[k].r, out[3]);
    assert_true(dc < 0.1);
    assert_true(dr < 0.2);
    assert_true(out[3] >= 0 && out[3] < 0.5);
    assert_non_null(note(&n, "disk_fit"));
    assert_non_null(strstr(note(&n, "disk_fit"), "centre"));
    assert_non_null(strstr(note(&n, "result"), "(fitted)"));
    assert_null(note(&n, "warning"));
    node_free(&n);
    /* The same pattern as f64 and as u16 (noise-free case fits in u16). */
    double *pf = malloc((size_t)(h * w) * 8);
    for (int64_t i = 0; i < h * w; i++) pf[i] = (double)img[i];
    double out2[4];
    assert_int_equal(fit(pf, SL_F64, h, w, NULL, 0, out2, NULL, &e), SL_OK);
    assert_memory_equal(out, out2, sizeof out);
    free(pf);
    free(img);
  }
}

/* Thresholds other than 0.5 still find the edge of a sharp disk. */
static void test_threshold(void **st) {
  const int64_t h = 64, w = 64;
  uint64_t *img = malloc((size_t)(h * w) * 8);
  render(img, h, w, 30.3, 32.6, 14.2, 40, 4000, 1);
  const char *ths[] = {"0.3", "0.5", "0.7"};
  for (int k = 0; k < 3; k++) {
    kv o[] = {{"threshold", ths[k]}};
    double out[4];
    sl_error e;
    assert_int_equal(fit(img, SL_U64, h, w, o, 1, out, NULL, &e), SL_OK);
    assert_true(hypot(out[0] - 30.3, out[1] - 32.6) < 0.1);
    assert_true(fabs(out[2] - 14.2) < 0.5); /* the level moves the edge along the blur */
  }
  free(img);
}

/* The summed output of synthetic_4dstem: the disk sits at ((H-1)/2, (W-1)/2)
 * with radius disk_radius. */
static void test_synthetic(void **st) {
  const struct {
    const char *det, *radius;
    int64_t h, w;
    double r;
  } cases[] = {{"[48, 48]", "9.3", 48, 48, 9.3}, {"[40, 56]", "12", 40, 56, 12}};
  for (size_t k = 0; k < 2; k++) {
    const int64_t rows = 6, cols = 6, npos = rows * cols, h = cases[k].h, w = cases[k].w;
    kv so[] = {{"scan_shape", "[6, 6]"}, {"detector_shape", cases[k].det}, {"dose", "2e4"},
               {"dtype", "u32"},         {"disk_radius", cases[k].radius}};
    synth_data syn = synth_run(so, 5, npos, 2);
    const uint32_t *frames = syn.frames;
    sl_error e;
    uint64_t *sum = calloc((size_t)(h * w), 8);
    for (int64_t p = 0; p < npos; p++)
      for (int64_t i = 0; i < h * w; i++) sum[i] += frames[p * h * w + i];
    double out[4];
    sl_code rc = fit(sum, SL_U64, h, w, NULL, 0, out, NULL, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(rc, SL_OK);
    double cr = (h - 1) / 2.0, cc = (w - 1) / 2.0;
    fprintf(stderr, "synthetic %zu: centre (%.3f, %.3f) want (%.2f, %.2f); radius %.3f want %.2f; residual %.3f\n",
            k, out[0], out[1], cr, cc, out[2], cases[k].r, out[3]);
    assert_true(fabs(out[0] - cr) < 0.25 && fabs(out[1] - cc) < 0.25);
    assert_true(fabs(out[2] - cases[k].r) < 0.25);
    free(sum);
    synth_free(&syn);
  }
}

static void test_no_disk(void **st) {
  const int64_t h = 32, w = 40;
  uint64_t *img = malloc((size_t)(h * w) * 8);
  double out[4];
  sl_error e;
  /* flat */
  for (int64_t i = 0; i < h * w; i++) img[i] = 77;
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no disk found"));
  assert_non_null(strstr(e.msg, "flat"));
  /* all zero */
  memset(img, 0, (size_t)(h * w) * 8);
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "flat"));
  /* pure noise: no disk */
  for (int64_t i = 0; i < h * w; i++) img[i] = poisson(100);
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  fprintf(stderr, "noise: %s\n", e.msg);
  assert_non_null(strstr(e.msg, "no disk found"));
  /* a vertical stripe is not a disk */
  for (int64_t i = 0; i < h * w; i++) img[i] = (i % w) >= 10 && (i % w) < 20 ? 1000 : 10;
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  fprintf(stderr, "stripe: %s\n", e.msg);
  assert_non_null(strstr(e.msg, "no disk found"));
  /* a single hot pixel */
  for (int64_t i = 0; i < h * w; i++) img[i] = 5;
  img[100] = 1000000;
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no disk found"));
  /* NaN in a float pattern */
  double *pf = malloc((size_t)(h * w) * 8);
  for (int64_t i = 0; i < h * w; i++) pf[i] = 1;
  pf[5] = NAN;
  assert_int_equal(fit(pf, SL_F64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "not finite"));
  free(pf);
  free(img);
}

/* A disk with hot pixels (summed flag values) elsewhere is still found. */
static void test_hot_pixels(void **st) {
  const int64_t h = 64, w = 64;
  uint64_t *img = malloc((size_t)(h * w) * 8);
  render(img, h, w, 33.4, 29.8, 10.5, 30, 800, 1);
  img[3 * w + 60] = 65535ull * 1000;
  img[50 * w + 5] = 65535ull * 1000;
  double out[4];
  sl_error e;
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_OK);
  assert_true(hypot(out[0] - 33.4, out[1] - 29.8) < 0.1 && fabs(out[2] - 10.5) < 0.2);
  free(img);
}

/* More hot pixels than the robust bounds ignore (16): a level first set by
 * them finds a region too small for a disk (DISK_MIN_AREA, 12 pixels); they
 * are clipped as outliers, clusters of them too, and the
 * disk is found, with a note, over a grid of disks (radius 6-20 px,
 * centres off the detector's), 20-60 hot pixels of summed flag values
 * scattered outside the disk, on 64 x 64 and 96 x 80 detectors. More
 * isolated outliers than OUTLIERS_MAX (80 on 64 x 64, where it is 64) are
 * not clipped: the fit fails with its reason, no disk made up. */
static void test_many_hot_pixels(void **st) {
  (void)st;
  const struct {
    int64_t h, w;
    double cr, cc, r;
  } disks[] = {{64, 64, 33.4, 29.8, 10.5}, {64, 64, 30.2, 35.7, 6.2}, {96, 80, 47.1, 38.6, 20.3}};
  const int hot_counts[] = {20, 40, 60};
  for (size_t d = 0; d < sizeof disks / sizeof disks[0]; d++)
    for (size_t k = 0; k < sizeof hot_counts / sizeof hot_counts[0]; k++) {
      const int64_t h = disks[d].h, w = disks[d].w;
      uint64_t *img = malloc((size_t)(h * w) * 8);
      render(img, h, w, disks[d].cr, disks[d].cc, disks[d].r, 30, 800, 1);
      for (int placed = 0; placed < hot_counts[k];) { /* outside the disk and its edge */
        int64_t i = (int64_t)(rnd() % (uint64_t)(h * w));
        if (hypot((double)(i / w) - disks[d].cr, (double)(i % w) - disks[d].cc) < disks[d].r + 3) continue;
        if (img[i] > 1000000) continue;
        img[i] = 65535ull * 16384, placed++;
      }
      double out[4];
      sl_error e;
      sl_node n;
      sl_code rc = fit(img, SL_U64, h, w, NULL, 0, out, &n, &e);
      if (rc) fprintf(stderr, "disk %zu, %d hot: %s\n", d, hot_counts[k], e.msg);
      assert_int_equal(rc, SL_OK);
      if (hypot(out[0] - disks[d].cr, out[1] - disks[d].cc) >= 0.15 || fabs(out[2] - disks[d].r) >= 0.25)
        fail_msg("disk %zu, %d hot: (%.3f, %.3f) r %.3f", d, hot_counts[k], out[0], out[1], out[2]);
      const char *why = note(&n, "outliers");
      assert_non_null(why);
      char want[32];
      snprintf(want, sizeof want, "%d isolated pixel(s)", hot_counts[k]);
      assert_non_null(strstr(why, want));
      node_free(&n);
      free(img);
    }
  /* too many to be outliers: 80 isolated ones (no two side by side) */
  const int64_t h = 64, w = 64;
  uint64_t *img = malloc((size_t)(h * w) * 8);
  render(img, h, w, 33.4, 29.8, 10.5, 30, 800, 1);
  for (int placed = 0; placed < 80;) {
    int64_t i = (int64_t)(rnd() % (uint64_t)(h * w)), r = i / w, c = i % w;
    if (r < 1 || r >= h - 1 || c < 1 || c >= w - 1 || hypot((double)r - 33.4, (double)c - 29.8) < 13.5)
      continue;
    if (img[i - 1] > 1000000 || img[i + 1] > 1000000 || img[i - w] > 1000000 || img[i + w] > 1000000 ||
        img[i] > 1000000)
      continue;
    img[i] = 65535ull * 16384, placed++;
  }
  double out[4];
  sl_error e;
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no disk found"));
  assert_non_null(strstr(e.msg, "has 1 pixel(s)"));
  /* clusters of hot pixels (2 x 2 and a row of 3) among 30 hot pixels are
   * clipped as outliers too, and the disk found */
  render(img, h, w, 33.4, 29.8, 10.5, 30, 800, 1);
  const int64_t cluster[] = {5 * w + 5,  5 * w + 6,  6 * w + 5,  6 * w + 6, 58 * w + 50,
                             58 * w + 51, 58 * w + 52};
  for (size_t q = 0; q < sizeof cluster / sizeof cluster[0]; q++) img[cluster[q]] = 65535ull * 16384;
  for (int placed = 0; placed < 23;) {
    int64_t i = (int64_t)(rnd() % (uint64_t)(h * w));
    if (hypot((double)(i / w) - 33.4, (double)(i % w) - 29.8) < 13.5 || img[i] > 1000000) continue;
    img[i] = 65535ull * 16384, placed++;
  }
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_OK);
  assert_true(hypot(out[0] - 33.4, out[1] - 29.8) < 0.15 && fabs(out[2] - 10.5) < 0.25);
  /* 300 hot pixels, clusters among them: no disk made up of a cluster (one
   * of 3 passed as a disk of radius 0.9 px) */
  render(img, h, w, 33.4, 29.8, 10.5, 30, 800, 1);
  for (int placed = 0; placed < 300;) {
    int64_t i = (int64_t)(rnd() % (uint64_t)(h * w));
    if (hypot((double)(i / w) - 33.4, (double)(i % w) - 29.8) < 13.5 || img[i] > 1000000) continue;
    img[i] = 65535ull * 16384, placed++;
  }
  assert_int_equal(fit(img, SL_U64, h, w, NULL, 0, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no disk found"));
  assert_non_null(strstr(e.msg, "a disk has at least 12"));
  free(img);
}

/* Explicit geometry wins over the fit; a radius more than 20% away from the
 * fitted one is a warning; without a disk in the pattern, explicit values
 * must give both centre and radius. */
static void test_explicit_geometry(void **st) {
  const int64_t h = 64, w = 64;
  uint64_t *img = malloc((size_t)(h * w) * 8);
  render(img, h, w, 31.5, 31.5, 12.0, 0, 1000, 0);
  double out[4];
  sl_error e;
  sl_node n;
  kv close[] = {{"radius", "12.5"}};
  assert_int_equal(fit(img, SL_U64, h, w, close, 1, out, &n, &e), SL_OK);
  assert_true(out[2] == 12.5 && fabs(out[0] - 31.5) < 0.1 && fabs(out[1] - 31.5) < 0.1);
  assert_null(note(&n, "warning")); /* 4% off: no warning */
  assert_non_null(strstr(note(&n, "result"), "given and fitted"));
  node_free(&n);
  kv far[] = {{"radius", "20"}};
  assert_int_equal(fit(img, SL_U64, h, w, far, 1, out, &n, &e), SL_OK);
  assert_true(out[2] == 20);
  assert_non_null(strstr(note(&n, "warning"), "differs from the 12"));
  node_free(&n);
  kv both[] = {{"radius", "12"}, {"center", "[30, 33]"}};
  assert_int_equal(fit(img, SL_U64, h, w, both, 2, out, &n, &e), SL_OK);
  assert_true(out[0] == 30 && out[1] == 33 && out[2] == 12);
  assert_non_null(strstr(note(&n, "result"), "(given)"));
  node_free(&n);
  for (int64_t i = 0; i < h * w; i++) img[i] = 77; /* no disk at all */
  assert_int_equal(fit(img, SL_U64, h, w, both, 2, out, &n, &e), SL_OK);
  assert_true(out[0] == 30 && out[1] == 33 && out[2] == 12 && isnan(out[3]));
  assert_non_null(strstr(note(&n, "warning"), "no disk fitted"));
  node_free(&n);
  assert_int_equal(fit(img, SL_U64, h, w, far, 1, out, NULL, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no disk found"));
  int64_t d[2] = {h, w};
  sl_tensor_desc in = sl_desc_make(SL_U64, 2, d, 0);
  kv neg[] = {{"radius", "-1"}}, one[] = {{"center", "[3]"}};
  expect_node_error(&sl_node_disk_fit, neg, 1, &in, 1, SL_ERR_PIPELINE, "'radius'", NULL);
  expect_node_error(&sl_node_disk_fit, one, 1, &in, 1, SL_ERR_PIPELINE, "'center'", NULL);
  free(img);
}

static void test_invalid(void **st) {
  int64_t d[3] = {4, 16, 16};
  sl_tensor_desc streamed = sl_desc_make(SL_U64, 3, d, 1), rank3 = sl_desc_make(SL_U64, 3, d, 0),
                 c64 = sl_desc_make(SL_C64, 2, d + 1, 0), ok = sl_desc_make(SL_U64, 2, d + 1, 0);
  sl_tensor_desc bad[3] = {streamed, rank3, c64};
  for (int k = 0; k < 3; k++)
    expect_node_error(&sl_node_disk_fit, NULL, 0, &bad[k], 1, SL_ERR_PIPELINE, "input 'pattern'",
                      NULL);
  const char *ths[] = {"0", "1", "-0.5", ".nan"};
  for (int k = 0; k < 4; k++) {
    kv o[] = {{"threshold", ths[k]}};
    expect_node_error(&sl_node_disk_fit, o, 1, &ok, 1, SL_ERR_PIPELINE, "'threshold'", NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rendered), cmocka_unit_test(test_threshold),
      cmocka_unit_test(test_synthetic), cmocka_unit_test(test_no_disk),
      cmocka_unit_test(test_hot_pixels), cmocka_unit_test(test_many_hot_pixels),
      cmocka_unit_test(test_invalid),
      cmocka_unit_test(test_explicit_geometry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
