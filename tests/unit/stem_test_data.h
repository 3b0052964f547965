/* Test data and plain references shared by the STEM node tests (moments,
 * com, dpc, idpc, synthetic_4dstem, virtual_image, virtual_detectors):
 * the moments of frames by plain loops and the frame patterns that stress
 * them, the cost a node reports, an analytic potential with its exact gradient, the centre of mass of
 * a synthetic_4dstem acquisition by plain loops, the correlation coefficient,
 * and tables of params and inputs a node must refuse. Header-only, like
 * node_harness.h; every function is static inline, so a test takes what it
 * needs. The references stay independent of the code under test. */
#ifndef SL_STEM_TEST_DATA_H
#define SL_STEM_TEST_DATA_H

#include <math.h>

#include "tests/unit/node_harness.h"
#include "tests/unit/test_rng.h"

/* ---- refusals ------------------------------------------------------------------ */

/* A node of `d` with param `o` on the first n_in of inputs `in` must be
 * refused with SL_ERR_PIPELINE naming `needle`, for every case of the table. */
typedef struct refusal_case {
  kv o;
  const char *needle;
  sl_tensor_desc in[2];
} refusal_case;

static inline void expect_refusals(const sl_node_desc *d, int n_in, const refusal_case *cases,
                                   size_t n) {
  for (size_t k = 0; k < n; k++)
    expect_node_error(d, &cases[k].o, 1, cases[k].in, n_in, SL_ERR_PIPELINE, cases[k].needle,
                      NULL);
}

/* A node of `d` with params o[0 .. n_o) on the first n_in of inputs `in`
 * must be refused with SL_ERR_PIPELINE naming `needle`, for every case. */
typedef struct param_refusal {
  kv o[3];
  int n_o;
  const char *needle;
} param_refusal;

static inline void expect_param_refusals(const sl_node_desc *d, const sl_tensor_desc *in, int n_in,
                                         const param_refusal *cases, size_t n) {
  for (size_t k = 0; k < n; k++)
    expect_node_error(d, cases[k].o, cases[k].n_o, in, n_in, SL_ERR_PIPELINE, cases[k].needle,
                      NULL);
}

/* The cost a node of `d` with default params on input `in` reports for
 * `positions`, before prepare. */
static inline sl_node_cost cost_before_prepare(const sl_node_desc *d, const sl_tensor_desc *in,
                                               int64_t positions) {
  sl_node n;
  sl_error e;
  sl_node_cost c;
  assert_int_equal(node_make(&n, d, NULL, 0, in, 1, &e), SL_OK);
  d->cost(&n, positions, &c);
  node_free(&n);
  return c;
}

/* ---- frame moments ----------------------------------------------------------- */

/* S, Sr, Sc of npos frames of h x w pixels, by plain loops. */
static inline void ref_moments(const void *f, sl_dtype t, int64_t npos, int64_t h, int64_t w,
                               uint64_t *s, uint64_t *sr, uint64_t *sc) {
  for (int64_t p = 0; p < npos; p++) {
    uint64_t a = 0, b = 0, c = 0;
    for (int64_t r = 0; r < h; r++)
      for (int64_t col = 0; col < w; col++) {
        uint64_t v = pix(f, t, p * h * w + r * w + col);
        a += v;
        b += (uint64_t)r * v;
        c += (uint64_t)col * v;
      }
    s[p] = a, sr[p] = b, sc[p] = c;
  }
}

/* Random frames, frame 3 all zero (S = 0), frame 5 all at the max. */
static inline void *moment_frames(sl_dtype t, int64_t npos, int64_t h, int64_t w) {
  void *f = random_frames(t, npos * h * w);
  for (int64_t i = 0; i < h * w; i++) {
    set_pix(f, t, 3 * h * w + i, 0);
    set_pix(f, t, 5 * h * w + i, dmax(t));
  }
  return f;
}

/* u16 frames that stress the signed vpmaddwd: pattern 0 random with half the
 * pixels >= 32768 and one in eight 65535 in every row, 1 all 0 (the most
 * negative biased sums), 2 all 65535 (the most positive), 3 alternating
 * 0 / 65535 by pixel and row. */
static inline uint16_t *u16_frames(int pattern, int64_t n) {
  uint16_t *f = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    f[i] = pattern == 1   ? 0
           : pattern == 2 ? 0xFFFF
           : pattern == 3 ? (i % 3 ? 0xFFFF : 0)
           : (v & 7) == 0 ? 0xFFFF
           : (v & 8)      ? (uint16_t)(0x8000 | (v >> 16))
                          : (uint16_t)((v >> 16) & 0x7FFF);
  }
  return f;
}

/* The frame sizes {h, w} of a table, for every frame dtype. */
typedef void (*frame_case_fn)(sl_dtype t, int64_t h, int64_t w);
static inline void each_frame_case(const int64_t (*sizes)[2], size_t n_sizes, frame_case_fn fn) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++)
    for (size_t si = 0; si < n_sizes; si++) fn(types[ti], sizes[si][0], sizes[si][1]);
}

/* A node of `d` with default params on streamed frames [rows, cols | h, w]
 * of t; infer must accept them. */
static inline void node_on_frames(sl_node *n, const sl_node_desc *d, sl_dtype t, int64_t rows,
                                  int64_t cols, int64_t h, int64_t w) {
  sl_tensor_desc in = frames_desc(t, rows, cols, h, w);
  sl_error e;
  sl_code rc = node_make(n, d, NULL, 0, &in, 1, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
}

/* Runs stream node n over npos frames f in chunks of 1, 7 and all positions
 * on 1 and 2 threads, its n_out outputs of npos 8-byte values filled with
 * 0xAB first (the harness zeroes reductions); calls check(ctx) after each run. */
static inline void run_each_chunking(sl_node *n, const void *f, int64_t npos, void *const *outs,
                                     int n_out, void (*check)(void *ctx), void *ctx) {
  const int64_t chunks[3] = {1, 7, npos};
  sl_error e;
  for (int th = 1; th <= 2; th++) {
    sl_backend *b = backend(th);
    for (int c = 0; c < 3; c++) {
      for (int k = 0; k < n_out; k++) memset(outs[k], 0xAB, (size_t)npos * 8);
      assert_int_equal(run_stream(n, b, f, NULL, 0, outs, npos, chunks[c], &e), SL_OK);
      check(ctx);
    }
    sl_cpu_backend_ops.destroy(b);
  }
}

/* ---- statistics ------------------------------------------------------------------ */

/* Pearson's correlation coefficient of a and b. */
static inline double correlation(const double *a, const double *b, int64_t n) {
  double ma = 0, mb = 0;
  for (int64_t i = 0; i < n; i++) ma += a[i], mb += b[i];
  ma /= (double)n, mb /= (double)n;
  double sab = 0, saa = 0, sbb = 0;
  for (int64_t i = 0; i < n; i++) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / sqrt(saa * sbb);
}

/* ---- an analytic potential ------------------------------------------------------ */

/* phi = sum of positive Gaussian "atoms" with random centres, widths and
 * weights (a smooth potential, not periodic); field = grad phi, exactly. */
typedef struct blobs {
  int n;
  double y[64], x[64], s[64], w[64];
} blobs;

static inline blobs make_blobs(int R, int C, int n, uint64_t seed) {
  blobs b;
  b.n = n;
  uint64_t st = seed;
  for (int k = 0; k < n; k++) {
    b.y[k] = urand_from(&st) * R;
    b.x[k] = urand_from(&st) * C;
    b.s[k] = 1.5 + 2.0 * urand_from(&st);
    b.w[k] = 0.5 + 0.5 * urand_from(&st);
  }
  return b;
}

static inline void blob_eval(const blobs *b, double y, double x, double *phi, double *gy,
                             double *gx) {
  *phi = *gy = *gx = 0;
  for (int k = 0; k < b->n; k++) {
    double dy = y - b->y[k], dx = x - b->x[k], s2 = b->s[k] * b->s[k];
    double v = b->w[k] * exp(-(dy * dy + dx * dx) / (2 * s2));
    *phi += v;
    *gy += -dy / s2 * v;
    *gx += -dx / s2 * v;
  }
}

/* ---- the centre of mass of a synthetic acquisition -------------------------------- */

/* synthetic_4dstem with params `over` (u32 frames); CoM per frame (Sr/S,
 * Sc/S) in float64 by plain loops, then minus the scan mean, into *cr, *cc
 * [R, C]; the generator's com_expected and phase when asked. */
static inline void synth_com(const kv *over, int n_over, int *R, int *C, double **cr, double **cc,
                             double **com_exp, double **phase) {
  synth_data d = synth_run(over, n_over, INT64_MAX, 2);
  int64_t rows = d.rows, cols = d.cols, h = d.h, w = d.w, np = d.npos;
  assert_int_equal(d.out[0].dtype, SL_U32);
  const uint32_t *fr = d.frames;
  *cr = malloc((size_t)np * 8);
  *cc = malloc((size_t)np * 8);
  double mr = 0, mc = 0;
  for (int64_t p = 0; p < np; p++) {
    uint64_t s = 0, sr = 0, sc = 0;
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w; x++) {
        uint64_t v = fr[(p * h + y) * w + x];
        s += v, sr += (uint64_t)y * v, sc += (uint64_t)x * v;
      }
    (*cr)[p] = s ? (double)sr / (double)s : 0;
    (*cc)[p] = s ? (double)sc / (double)s : 0;
    mr += (*cr)[p], mc += (*cc)[p];
  }
  for (int64_t p = 0; p < np; p++) (*cr)[p] -= mr / np, (*cc)[p] -= mc / np;
  *R = (int)rows, *C = (int)cols;
  if (com_exp) *com_exp = d.com, d.com = NULL;
  if (phase) *phase = d.phase, d.phase = NULL;
  synth_free(&d);
}

/* A periodic potential on R x C (three sinusoids of integer frequencies
 * below Nyquist) into p, and its exact gradient along rows and cols into gr
 * and gc: what iDPC must integrate back (to the potential minus its mean). */
static inline void periodic_potential(int R, int C, double *p, double *gr, double *gc) {
  const double modes[3][4] = {{1, 2, 0.7, 0.3}, {3, -1, 0.4, 1.1}, {5, 7, 0.2, 2.0}};
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      double v = 0, dr = 0, dc = 0;
      for (int m = 0; m < 3; m++) {
        double a = 2 * M_PI * (modes[m][0] * i / R + modes[m][1] * j / C) + modes[m][3];
        v += modes[m][2] * cos(a);
        dr -= modes[m][2] * sin(a) * 2 * M_PI * modes[m][0] / R;
        dc -= modes[m][2] * sin(a) * 2 * M_PI * modes[m][1] / C;
      }
      p[i * C + j] = v, gr[i * C + j] = dr, gc[i * C + j] = dc;
    }
}

#endif
