/* dpc on CUDA (shaders/cuda/stem/dpc.cu, run through the node descriptor as
 * the executor runs it) against the host path (CPU backend: FFTW, the same
 * node) over a grid of cases: analytic gradient fields of atom-like peaks
 * turned to the detector by several rotations, transposed and not, square,
 * non-square and odd scans up to 512x512, with an f64 or u64 ADF image or
 * none; the rotation given; and synthetic_4dstem acquisitions of atomic
 * columns (tests/unit/dpc_grid.h) over rotations, defoci and doses.
 *
 * Each case must give, on the device and on the host: the same transpose
 * and 180-degree branch (exactly), the angle within 1e-12 relative, the
 * four fields (rotated row and column, curl, divergence) within 1e-12 of
 * their largest value, and the same notes (rotation_deg, transpose, curl,
 * branch, branch_confidence, angle_uncertainty, warning: printed with 3 to 6 digits, so equal
 * as text). What differs is printed: which output, by how much, where.
 *
 * Also: the device state reused by a second run (the same doubles); the
 * host fallback on a CUDA backend when cuFFT is not loaded (SLUICE_CUFFT=
 * none: the CPU's doubles exactly, a note saying why); and, without a GPU,
 * the device table the cost declares. The device tests skip with a visible
 * line when no GPU (or no cuFFT) is present. */
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

#include "engine/backend/backend.h"
#include "engine/core/settings.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/stem/dpc_parallax.h"
#include "shaders/cuda/common/cufft_loader.h"
#include "shaders/cuda/common/device_table.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/cufft_test_main.h"
#include "tests/unit/device_table_lend.h"
#include "tests/unit/dpc_grid.h"
#include "tests/unit/node_harness.h"
#include "tests/unit/stem_test_data.h"

#ifdef SLUICE_HAVE_CUDA
#include "shaders/cuda/stem/idpc.h"
#endif

extern const sl_node_desc sl_node_dpc;

static sl_backend *g_cpu, *g_cuda;

#define TOL 1e-12

/* ---- running the node on a backend ---------------------------------------------- */

/* The notes compared between host and device, in this order. */
static const char *const k_notes[] = {"rotation_deg", "transpose", "curl", "branch", "branch_confidence", "angle_uncertainty",
                                      "warning", "parallax", "branch_com", "parallax_backend", "parallax_for"};
#define N_NOTES (sizeof k_notes / sizeof k_notes[0])

typedef struct dpc_out {
  double *field[4]; /* com_row_rot, com_col_rot, curl, divergence */
  double angle;
  int transpose;
  char *notes[N_NOTES]; /* NULL: no such note */
  char *backend;        /* the "backend" note (the host fallback), or NULL */
  void *built_state;    /* the device state the run built (NULL: none) */
} dpc_out;

static void out_free(dpc_out *o) {
  for (int k = 0; k < 4; k++) free(o->field[k]);
  for (size_t k = 0; k < N_NOTES; k++) free(o->notes[k]);
  free(o->backend);
  memset(o, 0, sizeof *o);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* A dpc node on [R, C] with the ADF input of `adf_type` (SL_DT_INVALID:
 * none) and params `over`, prepared. */
/* The segments of a run (n 0: not connected). */
typedef struct seg_inputs {
  const uint64_t *seg;
  const double *offsets;
  int n;
} seg_inputs;

/* A dpc node on an R x C field, with an ADF image of adf_type (or none) and
 * n_seg segments (0: none). */
static void make_dpc_seg(sl_node *n, int64_t R, int64_t C, sl_dtype adf_type, int n_seg, const kv *over,
                         int n_over) {
  int64_t dims[2] = {R, C}, sdims[3] = {n_seg ? n_seg : 1, R, C}, odims[2] = {n_seg ? n_seg : 1, 3};
  sl_tensor_desc in[5] = {sl_desc_make(SL_F64, 2, dims, 0), sl_desc_make(SL_F64, 2, dims, 0),
                          sl_desc_make(adf_type == SL_DT_INVALID ? SL_F64 : adf_type, 2, dims, 0),
                          sl_desc_make(SL_U64, 3, sdims, 0), sl_desc_make(SL_F64, 2, odims, 0)};
  sl_error e;
  sl_code rc = node_make(n, &sl_node_dpc, over, n_over, in, n_seg ? 5 : adf_type == SL_DT_INVALID ? 2 : 3, &e);
  if (rc == SL_OK && n_seg && adf_type == SL_DT_INVALID) { /* input 2 unconnected */
    n->in_src[2] = (sl_edge_src){SL_SRC_NONE, 0};
    rc = n->desc->infer(n, &e);
  }
  if (rc == SL_OK) rc = sl_node_dpc.prepare(n, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
}

static void make_dpc(sl_node *n, int64_t R, int64_t C, sl_dtype adf_type, const kv *over, int n_over) {
  make_dpc_seg(n, R, C, adf_type, 0, over, n_over);
}

/* Runs the node's kernel for backend b as the executor does (device buffers
 * and the node's device table, upload, one batch, download; then the device
 * state goes with the table) on (cr, cc, adf). */
static dpc_out run_on_seg(sl_backend *b, sl_node *n, const double *cr, const double *cc, const void *adf,
                          const seg_inputs *sg) {
  const sl_backend_ops *o = b->ops;
  const int64_t R = n->in[0].dims[0], C = n->in[0].dims[1];
  const size_t bytes = (size_t)(R * C) * sizeof(double);
  sl_error e;
  sl_error_clear(&e);
  /* in 0..2 (the ADF's items are 8 bytes either way), out 0..5 */
  const size_t out_bytes[6] = {bytes, bytes, sizeof(double), 1, bytes, bytes};
  void *din[3] = {0}, *dout[6] = {0};
  for (int k = 0; k < 3; k++) assert_int_equal(o->alloc(b, bytes, &din[k], &e), SL_OK);
  for (int k = 0; k < 6; k++) {
    assert_int_equal(o->alloc(b, out_bytes[k], &dout[k], &e), SL_OK);
    assert_int_equal(o->zero(b, dout[k], out_bytes[k], &e), SL_OK);
  }
  assert_int_equal(o->upload(b, din[0], cr, bytes, &e), SL_OK);
  assert_int_equal(o->upload(b, din[1], cc, bytes, &e), SL_OK);
  if (adf) assert_int_equal(o->upload(b, din[2], adf, bytes, &e), SL_OK);
  void *dseg = NULL, *doff = NULL;
  const size_t seg_bytes = sg ? (size_t)sg->n * (size_t)(R * C) * 8 : 0, off_bytes = sg ? (size_t)sg->n * 24 : 0;
  if (sg) {
    assert_int_equal(o->alloc(b, seg_bytes, &dseg, &e), SL_OK);
    assert_int_equal(o->alloc(b, off_bytes, &doff, &e), SL_OK);
    assert_int_equal(o->upload(b, dseg, sg->seg, seg_bytes, &e), SL_OK);
    assert_int_equal(o->upload(b, doff, sg->offsets, off_bytes, &e), SL_OK);
  }
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b;
  a.node = n;
  a.node_id = "dpc";
  a.state = n->state;
  a.pos_count = 1;
  a.n_chunks = 1;
  a.in[0] = din[0];
  a.in[1] = din[1];
  a.in[2] = adf ? din[2] : NULL;
  a.in[3] = dseg, a.in[4] = doff;
  for (int k = 0; k < 6; k++) a.out[k] = dout[k];
  a.err = &e;
  test_table table = {0};
  sl_code rc = test_run_whole_call(b, n, &a, &table, &e);
  if (rc) fprintf(stderr, "dpc on %s: %s\n", b->caps.device, e.msg);
  assert_int_equal(rc, SL_OK);
  dpc_out r;
  memset(&r, 0, sizeof r);
  static const int fields[4] = {0, 1, 4, 5};
  for (int k = 0; k < 4; k++) {
    r.field[k] = malloc(bytes);
    assert_int_equal(o->download(b, r.field[k], dout[fields[k]], bytes, &e), SL_OK);
  }
  uint8_t t = 9;
  assert_int_equal(o->download(b, &r.angle, dout[2], sizeof(double), &e), SL_OK);
  assert_int_equal(o->download(b, &t, dout[3], 1, &e), SL_OK);
  r.transpose = t;
  for (size_t k = 0; k < N_NOTES; k++) r.notes[k] = dup_or_null(note(n, k_notes[k]));
  r.backend = dup_or_null(note(n, "backend"));
  r.built_state = n->dev_state;
  test_table_give_back(&table, &n->dev_state, &n->dev_state_free);
  for (int k = 0; k < 3; k++) o->free(b, din[k], bytes);
  for (int k = 0; k < 6; k++) o->free(b, dout[k], out_bytes[k]);
  if (sg) o->free(b, dseg, seg_bytes), o->free(b, doff, off_bytes);
  /* The node's notes start afresh for the next run. */
  for (int i = 0; i < n->n_notes; i++) free(n->notes[i]);
  n->n_notes = 0;
  return r;
}

static dpc_out run_on(sl_backend *b, sl_node *n, const double *cr, const double *cc, const void *adf) {
  return run_on_seg(b, n, cr, cc, adf, NULL);
}

/* max |x - y| / max |y| over n, and where the largest |x - y| is. */
static double rel_diff(const double *x, const double *y, int64_t n, int64_t *where) {
  double md = 0, my = 0;
  *where = 0;
  for (int64_t k = 0; k < n; k++) {
    double d = fabs(x[k] - y[k]);
    if (d > md || d != d) md = d, *where = k;
    my = fmax(my, fabs(y[k]));
  }
  return my > 0 ? md / my : md;
}

/* Angles (degrees) apart, modulo 360. */
static double angle_apart(double a, double b) {
  double d = fmod(a - b, 360.0);
  if (d > 180) d -= 360;
  if (d < -180) d += 360;
  return fabs(d);
}

/* Host and device outputs of one case agree (see the header); prints every
 * difference and returns false, or prints one line and returns true. */
static bool same_outputs(const char *label, int64_t R, int64_t C, const dpc_out *cpu, const dpc_out *gpu) {
  static const char *const names[4] = {"com_row_rot", "com_col_rot", "curl", "divergence"};
  bool ok = true;
  if (gpu->backend) {
    fprintf(stderr, "%s: ran on the host, not the device: %s\n", label, gpu->backend);
    ok = false;
  }
  if (gpu->transpose != cpu->transpose) {
    fprintf(stderr, "%s: transpose device %d, host %d\n", label, gpu->transpose, cpu->transpose);
    ok = false;
  }
  double da = angle_apart(gpu->angle, cpu->angle);
  if (!(da <= TOL * fmax(1.0, fabs(cpu->angle)))) {
    fprintf(stderr, "%s: rotation_deg device %.17g, host %.17g (%.3g apart%s)\n", label, gpu->angle, cpu->angle, da,
            fabs(da - 180) < 1 ? ": the other 180-degree branch" : "");
    ok = false;
  }
  double worst = 0;
  for (int k = 0; k < 4; k++) {
    int64_t at;
    double r = rel_diff(gpu->field[k], cpu->field[k], R * C, &at);
    worst = fmax(worst, r);
    if (!(r < TOL)) {
      fprintf(stderr, "%s: %s differs by %.3g of its largest value, most at (%lld, %lld): device %.17g, host %.17g\n",
              label, names[k], r, (long long)(at / C), (long long)(at % C), gpu->field[k][at], cpu->field[k][at]);
      ok = false;
    }
  }
  for (size_t k = 0; k < N_NOTES; k++) {
    const char *g = gpu->notes[k], *c = cpu->notes[k];
    /* without the probe's params the device fits a guessed branch's
     * parallax on the host, and says so: that note only, and only then */
    if (!strcmp(k_notes[k], "parallax_backend") && g && !c && strstr(g, "probe's params not given")) continue;
    if ((g == NULL) != (c == NULL) || (g && strcmp(g, c))) {
      fprintf(stderr, "%s: note %s differs:\n  device: %s\n  host:   %s\n", label, k_notes[k], g ? g : "(none)",
              c ? c : "(none)");
      ok = false;
    }
  }
  print_message("%-44s %4lldx%-4lld angle %9.4f t %d, |angle diff| %.2g deg, fields %.2g of max%s\n", label,
                (long long)R, (long long)C, cpu->angle, cpu->transpose, da, worst, ok ? "" : "  DIFFERS");
  return ok;
}

/* The field (cr, cc) with the ADF image `adf` of adf_type (SL_DT_INVALID:
 * none) through the host and the device; true when they agree. */
static bool compare(const char *label, int64_t R, int64_t C, const double *cr, const double *cc, const void *adf,
                    sl_dtype adf_type, const kv *over, int n_over) {
  sl_node nc, ng;
  make_dpc(&nc, R, C, adf_type, over, n_over);
  make_dpc(&ng, R, C, adf_type, over, n_over);
  dpc_out c = run_on(g_cpu, &nc, cr, cc, adf), g = run_on(g_cuda, &ng, cr, cc, adf);
  bool ok = same_outputs(label, R, C, &c, &g);
  out_free(&c);
  out_free(&g);
  node_free(&nc);
  node_free(&ng);
  return ok;
}

/* ---- analytic fields ------------------------------------------------------------ */

/* A field and ADF images of an R x C scan: the gradient of a potential of
 * Gaussian peaks (atoms: sparse positive peaks, so the skewness rule is
 * sure) on a lattice `spacing` apart, turned to the detector by theta and
 * t (det = R(theta) T^t scan, dpc's convention), plus uniform noise of
 * `noise`; the ADF image is the potential itself (f64) and rounded counts
 * of it (u64). */
typedef struct field_case {
  int64_t R, C;
  double *cr, *cc, *adf;
  uint64_t *adf_u64;
} field_case;

static void field_free(field_case *f) {
  free(f->cr), free(f->cc), free(f->adf), free(f->adf_u64);
}

static double noise_of(double amp) { return amp * ((double)(rnd() >> 11) / 9007199254740992.0 - 0.5); }

static field_case field_make(int64_t R, int64_t C, double theta_deg, int t, double spacing, double noise) {
  field_case f = {R, C, NULL, NULL, NULL, NULL};
  size_t n = (size_t)(R * C);
  f.cr = malloc(n * sizeof(double)), f.cc = malloc(n * sizeof(double)), f.adf = malloc(n * sizeof(double));
  f.adf_u64 = malloc(n * sizeof(uint64_t));
  const double sigma = 0.2 * spacing, th = theta_deg * M_PI / 180, c = cos(th), s = sin(th);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) {
      /* the nearest peaks of the lattice (offset from the scan's corner) */
      double p = 0, gr = 0, gc = 0;
      double ci0 = floor((double)i / spacing) * spacing + 0.37 * spacing;
      double cj0 = floor((double)j / spacing) * spacing + 0.61 * spacing;
      for (int di = -1; di <= 1; di++)
        for (int dj = -1; dj <= 1; dj++) {
          double y = (double)i - (ci0 + di * spacing), x = (double)j - (cj0 + dj * spacing);
          double g = exp(-(x * x + y * y) / (2 * sigma * sigma));
          p += g, gr += -y / (sigma * sigma) * g, gc += -x / (sigma * sigma) * g;
        }
      if (t) {
        double x = gr;
        gr = gc, gc = x;
      }
      int64_t k = i * C + j;
      f.cr[k] = c * gr - s * gc + noise_of(noise);
      f.cc[k] = s * gr + c * gc + noise_of(noise);
      f.adf[k] = p + noise_of(0.05);
      f.adf_u64[k] = (uint64_t)llround(1000 * p + 200 + noise_of(50));
    }
  return f;
}

static void test_analytic_grid(void **st) {
  (void)st;
  const int64_t sizes[][2] = {{24, 24}, {33, 17}, {17, 40}, {3, 5}, {64, 64}, {101, 77}};
  const double rots[] = {30, -110, 143.5, 75.25, -5, -170.5};
  bool ok = true;
  int cases = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t ri = 0; ri < sizeof rots / sizeof rots[0]; ri++) {
      const int64_t R = sizes[si][0], C = sizes[si][1];
      const int t = (int)((si + ri) % 2);
      field_case f = field_make(R, C, rots[ri], t, R < 10 ? 2.5 : 6.0, 0.02);
      char label[96];
      snprintf(label, sizeof label, "analytic rot %g t %d, no adf", rots[ri], t);
      ok &= compare(label, R, C, f.cr, f.cc, NULL, SL_DT_INVALID, NULL, 0);
      snprintf(label, sizeof label, "analytic rot %g t %d, adf f64", rots[ri], t);
      ok &= compare(label, R, C, f.cr, f.cc, f.adf, SL_F64, NULL, 0);
      snprintf(label, sizeof label, "analytic rot %g t %d, adf u64", rots[ri], t);
      ok &= compare(label, R, C, f.cr, f.cc, f.adf_u64, SL_U64, NULL, 0);
      cases += 3;
      field_free(&f);
    }
  print_message("analytic grid: %d cases\n", cases);
  assert_true(ok);
}

/* The rotation or the transpose given: the fit evaluates only the residuals
 * (or only the transpose), no branch rule. */
static void test_given(void **st) {
  (void)st;
  field_case f = field_make(29, 35, 63.0, 1, 5.0, 0.01);
  kv both[2] = {{"rotation_deg", "63"}, {"transpose", "true"}}, angle[1] = {{"rotation_deg", "-117"}},
     tr[1] = {{"transpose", "false"}};
  bool ok = compare("given rotation 63, transpose true", 29, 35, f.cr, f.cc, f.adf, SL_F64, both, 2);
  ok &= compare("given rotation -117, transpose auto", 29, 35, f.cr, f.cc, NULL, SL_DT_INVALID, angle, 1);
  ok &= compare("given transpose false (the wrong one)", 29, 35, f.cr, f.cc, f.adf, SL_F64, tr, 1);
  field_free(&f);
  assert_true(ok);
}

static void test_large(void **st) {
  (void)st;
  const int64_t sizes[][2] = {{512, 512}, {511, 257}};
  bool ok = true;
  for (int k = 0; k < 2; k++) {
    field_case f = field_make(sizes[k][0], sizes[k][1], k ? -47.5 : 121.0, k, 9.0, 0.05);
    ok &= compare(k ? "analytic rot -47.5 t 1, adf u64" : "analytic rot 121 t 0, adf f64", sizes[k][0], sizes[k][1],
                  f.cr, f.cc, k ? (const void *)f.adf_u64 : (const void *)f.adf, k ? SL_U64 : SL_F64, NULL, 0);
    field_free(&f);
  }
  assert_true(ok);
}

/* ---- synthetic acquisitions (issue 11's grid) ---------------------------------- */

static bool g_grid_ok = true;
static bool g_no_probe; /* grid_both without the probe's params */

/* A grid case through both backends, the ADF image of type ty (SL_DT_INVALID:
 * none) and the params `over`, compared (into g_grid_ok); the host's
 * answer. want_axis: the host must have fitted the axis alone (its
 * parallax_for note says so). */
static dpc_grid_answer both_on_case(const char *label, const dpc_grid_fields *f, int R, int C, sl_dtype ty,
                                    const kv *over, int n_over, bool want_axis) {
  const seg_inputs sg = {f->seg, f->offsets, f->n_seg};
  const double *adf = ty == SL_DT_INVALID ? NULL : f->adf;
  sl_node nc, ng;
  make_dpc_seg(&nc, R, C, ty, sg.n, over, n_over);
  make_dpc_seg(&ng, R, C, ty, sg.n, over, n_over);
  dpc_out c = run_on_seg(g_cpu, &nc, f->cr, f->cc, adf, &sg), g = run_on_seg(g_cuda, &ng, f->cr, f->cc, adf, &sg);
  const char *why = c.notes[N_NOTES - 1]; /* parallax_for */
  if (want_axis && (!why || strncmp(why, "parallax_for: the axis", 22))) {
    fprintf(stderr, "%s: the axis was not fitted: %s\n", label, why ? why : "(no parallax_for note)");
    g_grid_ok = false;
  }
  g_grid_ok &= same_outputs(label, R, C, &c, &g);
  dpc_grid_answer a = {c.angle, c.transpose, 0, 0, true};
  out_free(&c);
  out_free(&g);
  node_free(&nc);
  node_free(&ng);
  return a;
}

/* dpc_grid's runner: both backends on the case, compared; the host's
 * answer. Cases alternate with and without the ADF image; every case has
 * the segments and the probe (the parallax runs for the branch where the
 * CoM's rule is a guess, else for the axis: on the device its steps run
 * there, shaders/cuda/stem/dpc_parallax.cu, and a fit on the host instead
 * would differ in the note "parallax_backend"); with g_no_probe the
 * parallax runs on the host for a guessed branch, which that note says
 * (same_outputs lets it differ there). */
static dpc_grid_answer grid_both(const dpc_grid_fields *f, int R, int C) {
  static int no;
  char label[64], alpha[32], step[32];
  snprintf(label, sizeof label, "atomic columns case %d%s", no, no % 2 ? ", no adf" : ", adf");
  const bool with_adf = no++ % 2 == 0;
  snprintf(alpha, sizeof alpha, "%.9g", f->alpha * 1e3);
  snprintf(step, sizeof step, "%.9g", f->step);
  const kv probe[] = {{"semiangle_mrad", alpha}, {"energy_kev", "300"}, {"step_angstrom", step}};
  return both_on_case(label, f, R, C, with_adf ? SL_F64 : SL_DT_INVALID, probe, g_no_probe ? 0 : 3, false);
}

/* dpc_grid's runner for the axis's fit without the probe's params: the
 * ADF image always (its matched filter's sigma selects the fit), the
 * segments, no params; both backends compared (the device fits the axis
 * there, parallax_for and parallax notes and all). */
static dpc_grid_answer axis_both(const dpc_grid_fields *f, int R, int C) {
  return both_on_case("atomic columns, the axis without the params", f, R, C, SL_F64, NULL, 0, true);
}

static void test_atomic_columns(void **st) {
  (void)st;
  const double alphas[] = {0.02};
  const double defoci[] = {-100, 0, 200};
  const char *doses[] = {"1e4", "1e6"};
  const int rots[] = {17, 143, 251};
  dpc_grid g = {alphas, 1, defoci, 3, doses, 2, rots, 3, 32, NULL};
  (void)dpc_grid_run(&g, grid_both);
  assert_true(g_grid_ok);
  /* On 64 x 64 scans at +-200 A the parallax is found and refined (its
   * weighted correlations and second pattern search): the device's too. */
  const double far[] = {-200, 200};
  const char *dose4[] = {"1e4"};
  const int rot60[] = {60};
  dpc_grid big = {alphas, 1, far, 2, dose4, 1, rot60, 1, 64, NULL};
  (void)dpc_grid_run(&big, grid_both);
  assert_true(g_grid_ok);
  /* Without the probe's params the parallax estimates its cut-off on the
   * host (the device's segments read back): the same bits as the CPU. */
  g_no_probe = true;
  (void)dpc_grid_run(&big, grid_both);
  g_no_probe = false;
  assert_true(g_grid_ok);
  /* Without them, where the CoM's branch is sure but its angle weak, the
   * device fits the axis alone (two of test_dpc's
   * test_parallax_axis_no_probe cases: grid numbers 12 and 426): the same
   * bits as the host's fit. */
  (void)dpc_grid_case(0.015, -200, "1e4", 240, 0, 64, 13, NULL, axis_both);
  (void)dpc_grid_case(0.025, 100, "1e4", 120, 0, 64, 427, NULL, axis_both);
  assert_true(g_grid_ok);
}

/* ---- the device state, the fallback --------------------------------------------- */

/* Every run builds its state over its own device table and leaves none
 * behind; a run gives the same doubles again, also after another field. */
static void test_state_reused(void **st) {
  (void)st;
  field_case f = field_make(40, 52, 33.0, 0, 6.0, 0.02), other = field_make(40, 52, -80.0, 1, 5.0, 0.02);
  sl_node n;
  make_dpc(&n, 40, 52, SL_F64, NULL, 0);
  dpc_out first = run_on(g_cuda, &n, f.cr, f.cc, f.adf);
  assert_non_null(first.built_state);
  assert_null(first.backend);
  assert_null(n.dev_state);
  dpc_out mid = run_on(g_cuda, &n, other.cr, other.cc, other.adf);
  dpc_out again = run_on(g_cuda, &n, f.cr, f.cc, f.adf);
  assert_null(n.dev_state);
  for (int k = 0; k < 4; k++) assert_memory_equal(first.field[k], again.field[k], sizeof(double) * 40 * 52);
  assert_memory_equal(&first.angle, &again.angle, sizeof(double));
  assert_int_equal(first.transpose, again.transpose);
  out_free(&first), out_free(&mid), out_free(&again);
  node_free(&n);
  field_free(&f), field_free(&other);
}

/* The setting cufft as its environment variable gives it (NULL: unset). */
static void cufft_setting(const char *value) {
  if (value) setenv("SLUICE_CUFFT", value, 1);
  else unsetenv("SLUICE_CUFFT");
  sl_error e;
  assert_int_equal(sl_settings_init(NULL, 0, &e), SL_OK);
}

/* Without cuFFT the CUDA kernel runs the host path on copies: the CPU's
 * doubles exactly, a note saying why, no device state kept. */
static void test_fallback_without_cufft(void **st) {
  (void)st;
  const int64_t R = 37, C = 29;
  field_case f = field_make(R, C, -64.0, 1, 6.0, 0.02);
  sl_node nc, ng;
  make_dpc(&nc, R, C, SL_U64, NULL, 0);
  make_dpc(&ng, R, C, SL_U64, NULL, 0);
  dpc_out c = run_on(g_cpu, &nc, f.cr, f.cc, f.adf_u64);
  cufft_setting("none");
  dpc_out g = run_on(g_cuda, &ng, f.cr, f.cc, f.adf_u64);
  cufft_setting(NULL);
  assert_non_null(g.backend);
  assert_non_null(strstr(g.backend, "ran on the host"));
  assert_non_null(strstr(g.backend, "SLUICE_CUFFT=none"));
  assert_null(g.built_state);
  for (int k = 0; k < 4; k++) assert_memory_equal(c.field[k], g.field[k], sizeof(double) * (size_t)(R * C));
  assert_memory_equal(&c.angle, &g.angle, sizeof(double));
  assert_int_equal(c.transpose, g.transpose);
  for (size_t k = 0; k < N_NOTES; k++) {
    assert_true((c.notes[k] == NULL) == (g.notes[k] == NULL));
    if (c.notes[k]) assert_string_equal(c.notes[k], g.notes[k]);
  }
  out_free(&c), out_free(&g);
  node_free(&nc), node_free(&ng);
  field_free(&f);
}

/* ---- no GPU needed: the cost ------------------------------------------------------ */

/* With CUDA built in, the cost declares the device table: at least idpc's
 * integration of the mirrored field (whose transforms dpc runs) plus the
 * four spectra of (R + 1) x (C + 1) doubles; none without CUDA. */
static void test_cost_counts_device_table(void **st) {
  (void)st;
  const int64_t sizes[][2] = {{24, 24}, {511, 257}, {3, 3}};
  for (int k = 0; k < 3; k++) {
    const int64_t R = sizes[k][0], C = sizes[k][1];
    sl_node n;
    make_dpc(&n, R, C, SL_DT_INVALID, NULL, 0);
    sl_node_cost c;
    sl_node_dpc.cost(&n, 1, &c);
#ifdef SLUICE_HAVE_CUDA
    const int64_t lower = sl_cuda_idpc_state_bytes(R, C, true) + 4 * (R + 1) * (C + 1) * 8;
    print_message("%lldx%lld: device table %lld bytes (at least %lld)\n", (long long)R, (long long)C,
                  (long long)c.device_state_bytes, (long long)lower);
    assert_true(c.device_state_bytes >= lower);
#else
    assert_int_equal(c.device_state_bytes, 0);
#endif
    node_free(&n);
  }
  /* The axis's fit without the probe's params runs on the device where the
   * ADF image can call for it: its tables are planned as with the params;
   * without the ADF image (no axis's fit) they are not. */
  const kv probe[] = {{"semiangle_mrad", "20"}, {"energy_kev", "300"}, {"step_angstrom", "0.4"}};
  sl_node adf, given, none;
  sl_node_cost c_adf, c_given, c_none;
  make_dpc_seg(&adf, 64, 64, SL_F64, 21, NULL, 0);
  make_dpc_seg(&given, 64, 64, SL_F64, 21, probe, 3);
  make_dpc_seg(&none, 64, 64, SL_DT_INVALID, 21, NULL, 0);
  sl_node_dpc.cost(&adf, 1, &c_adf);
  sl_node_dpc.cost(&given, 1, &c_given);
  sl_node_dpc.cost(&none, 1, &c_none);
#ifdef SLUICE_HAVE_CUDA
  assert_int_equal(c_adf.device_state_bytes, c_given.device_state_bytes);
  /* whole pieces of the table, as the launchers take them (the gain
   * bound's sums after the parallax's) */
  assert_int_equal(c_adf.device_state_bytes % SL_TABLE_ALIGN, 0);
  assert_int_equal(c_adf.device_library_bytes, c_given.device_library_bytes);
  assert_true(c_none.device_state_bytes < c_adf.device_state_bytes);
  /* and the gain bound's sums read back: host state of the device path
   * (not a fallback, not the CPU backend's) */
  sl_dpc_parallax_geometry g;
  sl_dpc_parallax_geometry_of(64, 64, &g);
  assert_int_equal(c_adf.device_host_bytes, 21 * 3 * 8 + (21 * SL_DPC_GAIN_SEGMENT_SUMS + g.wr * g.wc) * 8);
  /* the band a guessed branch's host fit reads back without the params:
   * decided with the fit's state; with the params a fallback's */
  int64_t band0, band;
  sl_dpc_parallax_band(64, &band0, &band);
  assert_int_equal(c_adf.device_decided_state_bytes, 21 * band * 64 * 8);
  assert_int_equal(c_given.device_decided_state_bytes, 0);
  assert_int_equal(c_none.device_host_bytes, 21 * 3 * 8);
  assert_int_equal(c_adf.host_fallback_bytes, 0);
#else
  assert_int_equal(c_adf.device_state_bytes, 0);
#endif
  /* Without the params the fit is the data's decision: not in ops, but its
   * most (a guessed branch's, f_max estimated) for `sluice plan`; with
   * them it is in ops. */
  assert_int_equal(c_adf.decided_ops_most, sl_dpc_parallax_ops_of(21, 64, 64, SL_DPC_PARALLAX_OPS_NO_PROBE));
  assert_string_equal(c_adf.decided_variant, "parallax");
  assert_int_equal(c_given.decided_ops_most, 0);
  assert_true(c_given.ops >= c_adf.ops + sl_dpc_parallax_ops(21, 64, 64));
  /* and so are its host bytes: without the params the fit's state is the
   * decided state (held by the budget, planned once made), with them the
   * node's state */
  assert_int_equal(c_adf.decided_state_bytes, sl_dpc_parallax_bytes(21, 64, 64));
  assert_int_equal(c_given.decided_state_bytes, 0);
  assert_int_equal(c_given.state_bytes - c_adf.state_bytes, sl_dpc_parallax_bytes(21, 64, 64));
  node_free(&adf);
  node_free(&given);
  node_free(&none);
}

#ifdef SLUICE_HAVE_CUDA
typedef struct gain_call {
  const uint64_t *window;
  int64_t row_stride, segment_stride, wr, wc;
  int n;
  const double *offsets;
  uint64_t *scratch, *segment_sums, *position_sums;
} gain_call;

/* The launcher with its arguments in a->state, as a kernel function. */
static sl_code gain_sums_on_cuda(sl_kernel_args *a) {
  const gain_call *c = a->state;
  return sl_cuda_dpc_gain_sums(a, c->window, c->row_stride, c->segment_stride, c->n, c->wr, c->wc, c->offsets,
                               c->scratch, c->segment_sums, c->position_sums);
}
#endif

/* The gain bound's sums on the device are the host's to the bit: 21
 * segments of a 150 x 170 scan (its 128 x 128 window off the corner), counts
 * small and large (up to 2^32 - 1, whose squares need the 128-bit sums),
 * two segments without pixels (zeros, and not in the positions' sums). */
static void test_gain_sums(void **st) {
  (void)st;
#ifdef SLUICE_HAVE_CUDA
  const int n = 21;
  const int64_t R = 150, C = 170, np = R * C;
  sl_dpc_parallax_geometry g;
  sl_dpc_parallax_geometry_of(R, C, &g);
  uint64_t *seg = malloc((size_t)(n * np) * sizeof *seg);
  double offsets[3 * 21];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int64_t k = 0; k < n * np; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    seg[k] = (x & 0xFF) == 0 ? 0xFFFFFFFFull - (x >> 40 & 0xFFF) : (x >> 20) % 900;
  }
  for (int u = 0; u < n; u++)
    offsets[3 * u] = u, offsets[3 * u + 1] = -u, offsets[3 * u + 2] = u % 9 == 4 ? 0 : 100 + u;
  const int64_t r0 = (R - g.wr) / 2, c0 = (C - g.wc) / 2, npos = g.wr * g.wc;
  const size_t sums = (size_t)n * SL_DPC_GAIN_SEGMENT_SUMS;
  uint64_t *host_seg = malloc(sums * 8), *host_pos = malloc((size_t)npos * 8);
  uint64_t *dev_seg = malloc(sums * 8), *dev_pos = malloc((size_t)npos * 8);
  sl_dpc_parallax_gain_sums(n, g.wr, g.wc, seg + r0 * C + c0, C, np, offsets, host_seg, host_pos);
  assert_int_equal(host_seg[3 * 4], 0); /* a segment without pixels */
  sl_backend *b = g_cuda;
  sl_error e;
  sl_error_clear(&e);
  void *dseg = NULL, *doff = NULL, *dscratch = NULL;
  const size_t scratch = (size_t)sl_cuda_dpc_gain_sums_bytes(n, g.wr, g.wc);
  assert_int_equal(b->ops->alloc(b, (size_t)(n * np) * 8, &dseg, &e), SL_OK);
  assert_int_equal(b->ops->alloc(b, sizeof offsets, &doff, &e), SL_OK);
  assert_int_equal(b->ops->alloc(b, scratch, &dscratch, &e), SL_OK);
  assert_int_equal(b->ops->upload(b, dseg, seg, (size_t)(n * np) * 8, &e), SL_OK);
  assert_int_equal(b->ops->upload(b, doff, offsets, sizeof offsets, &e), SL_OK);
  gain_call c = {(const uint64_t *)dseg + r0 * C + c0, C, np, g.wr, g.wc, n, doff, dscratch, dev_seg, dev_pos};
  sl_kernel_args a = {.backend = b, .node_id = "dpc", .state = &c, .pos_count = 1, .n_chunks = 1, .err = &e};
  sl_code rc = b->ops->batch_begin(b, &e);
  if (rc == SL_OK) rc = b->ops->batch_encode(b, gain_sums_on_cuda, &a, &e);
  if (rc == SL_OK) rc = b->ops->batch_commit(b, &e);
  if (rc == SL_OK) rc = b->ops->batch_wait(b, &e);
  if (rc) fprintf(stderr, "gain sums on the device: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  assert_memory_equal(dev_seg, host_seg, sums * 8);
  assert_memory_equal(dev_pos, host_pos, (size_t)npos * 8);
  assert_true(sl_dpc_parallax_gain_bound_of_sums(n, npos, dev_seg, dev_pos, offsets) ==
              sl_dpc_parallax_gain_bound(n, R, C, seg, 0, R, offsets));
  b->ops->free(b, dseg, (size_t)(n * np) * 8);
  b->ops->free(b, doff, sizeof offsets);
  b->ops->free(b, dscratch, scratch);
  free(host_seg), free(host_pos), free(dev_seg), free(dev_pos), free(seg);
#endif
}

int main(void) {
  const struct CMUnitTest cost_tests[] = {cmocka_unit_test(test_cost_counts_device_table)};
  int rc = cmocka_run_group_tests_name("dpc_cuda_cost", cost_tests, NULL, NULL);
  if (rc) return rc;
  const struct CMUnitTest fallback_tests[] = {cmocka_unit_test(test_fallback_without_cufft)};
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_analytic_grid), cmocka_unit_test(test_given),        cmocka_unit_test(test_large),
      cmocka_unit_test(test_atomic_columns), cmocka_unit_test(test_state_reused), cmocka_unit_test(test_gain_sums),
  };
  return sl_test_cufft_device_groups("dpc", &g_cuda, &g_cpu, fallback_tests, SL_COUNT_OF(fallback_tests),
                                     tests, SL_COUNT_OF(tests));
}
