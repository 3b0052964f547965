/* dpc: scan-to-detector rotation of a centre-of-mass field (whole -> whole).
 *
 * Convention (the same as synthetic_4dstem's scan_rotation/scan_transpose):
 * a vector measured on the detector is c_det = A c_scan with
 * A = R(theta) T^t, R(theta) = [[cos, -sin], [sin, cos]] acting on (row, col)
 * vectors and T the swap (row, col) -> (col, row), t in {0, 1}. The node
 * returns theta and t and the field in scan coordinates,
 * c_scan = A^-1 c_det = T^t R(-theta) c_det.
 *
 * Fit (nodes/stem/dpc_fit.h): for each transpose candidate, the angle that
 * minimises the signal-to-noise weighted transverse (curl) power of the
 * rotated field in Fourier space, a 2x2 quadratic form in (cos, sin)
 * minimised exactly. The transpose with the smaller transverse fraction
 * wins. The angle is reported in (-180, 180].
 *
 * The transverse power has period 180 degrees: theta and theta + 180 give
 * opposite fields. With the optional `adf` input the ADF matched filter
 * (nodes/stem/dpc_adf.h) gives the angle over the full turn and the
 * transpose: the rotated field's correlation with the gradient of the ADF
 * image, a cos theta + b sin theta, is largest at the right angle (the CoM
 * is the gradient of the probe-blurred phase and the ADF image the columns
 * blurred by the same probe, so the two agree in sign whatever the
 * defocus). Where the curl fit's axis agrees with that angle within 3 of
 * its sigmas, the curl fit's axis is kept on the ADF's branch; else the
 * ADF's angle is taken (the curl fit missed the axis: low dose, large
 * defocus). Without an ADF image the node integrates the rotated field
 * (the iDPC phase, nodes/common/fourier_integral.h) and keeps the branch
 * whose phase is skewed towards positive peaks (atoms are sparse peaks of
 * positive phase): right near focus, wrong where the probe inverts the
 * contrast. With the BF disk's segments (bf_segments), the segments'
 * parallax (nodes/stem/dpc_parallax.h) decides the branch, angle and
 * transpose where either rule is a guess (low dose, large defocus: the CoM
 * holds no lattice signal there); with the probe's params it also gives
 * the axis where it is strong and the CoM's branch sure, without them it
 * runs only for a guessed branch (estimating its sign correction's cut-off,
 * alpha step / lambda, from the segments) or a weak axis (the ADF matched
 * filter's angle more than PARALLAX_AXIS_SIGMA uncertain, and the segments
 * able to hold a strong parallax: then M alone). The evidence is recorded
 * ("branch", "branch_com", "parallax", "axis", "branch_confidence",
 * "angle_uncertainty" notes), with a warning when it is weak; an explicit
 * rotation_deg wins.
 *
 * On CUDA the node runs on the device (shaders/cuda/stem/dpc.h): spectra,
 * ring sums, the fields and the branch rule's iDPC phase there, the fit's
 * 2x2 algebra and the decisions here, on the few sums read back (the same
 * code as the CPU's: sl_dpc_fit_solve, dpc_adf_angle, dpc_branch_skewness,
 * dpc_report). Where cuFFT
 * cannot be loaded the CUDA kernel runs the host path on copies of the
 * field and notes why ("backend"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/cuda_glue.h"
#include "nodes/common/fourier_integral.h"
#include "nodes/common/frame_ports.h"
#include "shaders/cuda/common/cufft_warm_up.h"
#include "nodes/stem/dpc_adf.h"
#include "nodes/stem/dpc_fit.h"
#include "nodes/stem/dpc_parallax.h"
#include "shaders/cuda/stem/dpc.h"

/* Param 'transpose', in the order of its choices. */
enum { TRANSPOSE_AUTO, TRANSPOSE_TRUE, TRANSPOSE_FALSE };

#define DPC_PARAMS(P)                                                                           \
  P(STRING, rotation_deg, "auto",                                                               \
    "scan-to-detector rotation in degrees ([-360, 360]), or auto to fit it (least curl)", NULL) \
  P(ENUM, transpose, "auto",                                                                    \
    "auto (fit: least curl), true or false: the scan's (row, col) are swapped",                 \
    "auto|true|false")                                                                          \
  P(FLOAT, semiangle_mrad, "0",                                                                 \
    "the probe's convergence semi-angle in mrad, for the parallax of the segments input (0: "   \
    "unknown: the parallax estimates its sign correction's cut-off from the segments)", NULL)   \
  P(FLOAT, energy_kev, "0", "the beam energy in keV, for the parallax (0: unknown)", NULL)      \
  P(FLOAT, step_angstrom, "0", "the scan step in Angstrom, for the parallax (0: unknown)", NULL)
SL_NODE_PARAMS(dpc_params, DPC_PARAMS)

typedef struct dpc_config {
  bool fit_angle;
  double angle;  /* degrees, when given */
  int transpose; /* -1 auto, 0, 1 */
  bool probe_known;    /* semiangle, energy and step all given */
  sl_dpc_probe probe;  /* when known */
} dpc_config;

static sl_code dpc_config_resolve(const sl_node *n, dpc_config *c, sl_error *err) {
  const dpc_params *p = dpc_params_of(n);
  const char *r = p->rotation_deg;
  c->fit_angle = !strcmp(r, "auto");
  c->angle = 0;
  if (!c->fit_angle && (!sl_parse_f64(r, &c->angle) || !isfinite(c->angle) ||
                        fabs(c->angle) > 360))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'rotation_deg' must be 'auto' or a number of degrees in [-360, 360], "
                   "got '%s'",
                   r);
  c->transpose = p->transpose == TRANSPOSE_AUTO ? -1 : p->transpose == TRANSPOSE_TRUE ? 1 : 0;
  const double probe[3] = {p->semiangle_mrad, p->energy_kev, p->step_angstrom};
  static const char *const probe_names[3] = {"semiangle_mrad", "energy_kev", "step_angstrom"};
  int given = 0;
  for (int k = 0; k < 3; k++) {
    if (!isfinite(probe[k]) || probe[k] < 0 || probe[k] > 1e6)
      return sl_fail(err, SL_ERR_PIPELINE, "param '%s' must be a number >= 0 (0: unknown), got %g",
                     probe_names[k], probe[k]);
    given += probe[k] > 0;
  }
  if (given != 0 && given != 3)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "params 'semiangle_mrad', 'energy_kev' and 'step_angstrom' go together (the "
                   "parallax's defocus needs all three), got %g, %g and %g",
                   probe[0], probe[1], probe[2]);
  c->probe_known = given == 3;
  c->probe = (sl_dpc_probe){probe[0] * 1e-3, c->probe_known ? sl_electron_wavelength(probe[1]) : 0,
                            probe[2]};
  return SL_OK;
}

/* The optional 'adf' input is connected. */
static bool has_adf(const sl_node *n) { return n->in_src[2].node != SL_SRC_NONE; }

/* The optional 'segments' and 'segment_offsets' inputs are connected. */
static bool has_segments(const sl_node *n) { return n->in_src[3].node != SL_SRC_NONE; }

/* Segments of the 'segments' input (0 when not connected). */
static int segment_count(const sl_node *n) { return has_segments(n) ? (int)n->in[3].dims[0] : 0; }

/* Whether the probe's three params are given. */
static bool probe_given(const sl_node *n) {
  const dpc_params *p = dpc_params_of(n);
  return p->semiangle_mrad > 0 && p->energy_kev > 0 && p->step_angstrom > 0;
}

/* Segments the parallax may fit: the input's count when it is connected
 * and the angle is fitted, else 0 (nothing planned or made, and the
 * segments are not read: infer says so, so that bf_segments computes
 * nothing). With the probe's params it always runs (the branch where the
 * CoM's rule is a guess, else the axis); without them only where the
 * CoM's rule is a guess (f_max estimated from the segments, dpc_parallax.h)
 * or its angle is weak (PARALLAX_AXIS_SIGMA, with a gain bound that can
 * reach PARALLAX_AXIS_GAIN). */
static int parallax_segments(const sl_node *n) {
  return !strcmp(dpc_params_of(n)->rotation_deg, "auto") ? segment_count(n) : 0;
}

/* Whether every run fits the parallax: with the probe's params. */
static bool parallax_always(const sl_node *n) { return parallax_segments(n) && probe_given(n); }

/* Whether a run may fit the parallax for the axis alone (without the
 * probe's params, with the ADF image whose matched filter gives the CoM's
 * angle its sigma: parallax_axis). On a device that fit runs there and
 * the gain bound reads the segments' band on the host: both planned. */
static bool axis_fit_possible(const sl_node *n) { return parallax_segments(n) && !probe_given(n) && has_adf(n); }

/* The rate of a dpc that fits the parallax is calibrated apart
 * (calibrate's parallax.yaml): on the H200 its device steps took 16.5-17.4
 * ms on a 512 x 512 scan where its operations at the rotation's rate gave
 * 5.4 ms (docs/performance.md). A fit the data decide on (without the
 * probe's params) is priced at it too. A dpc whose branch the ADF matched
 * filter decides has a rate of its own as well (calibrate's stem.yaml and
 * fields.yaml run dpc with each branch rule): on the H200 stem_products'
 * dpc of a 256 x 256 scan took 1.9-2.3 ms and dpc.yaml's, which decides by
 * the iDPC's skewness, 1.4-1.6, where one rate for both priced each at
 * 1.1-1.3 ms. */
#define PARALLAX_VARIANT "parallax"
#define ADF_VARIANT "adf"
static const char *dpc_rate_variant(const sl_node *n) {
  return parallax_always(n) ? PARALLAX_VARIANT : has_adf(n) ? ADF_VARIANT : NULL;
}

#ifdef SLUICE_HAVE_CUDA
/* The parallax's windows as the device takes them: the host's. */
static sl_cuda_parallax_geometry device_geometry(int64_t rows, int64_t cols) {
  sl_dpc_parallax_geometry h;
  sl_dpc_parallax_geometry_of(rows, cols, &h);
  return (sl_cuda_parallax_geometry){h.wr, h.wc, h.lr, h.lc, h.pr, h.pc, h.tr, h.tc};
}
#endif

/* The inputs of the parallax: both or neither; segments whole u64
 * [n, rows, cols], offsets whole f64 [n, 3]. */
static sl_code segments_check(const sl_node *n, sl_error *err) {
  const bool seg = has_segments(n), off = n->in_src[4].node != SL_SRC_NONE;
  if (seg != off)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "inputs 'segments' and 'segment_offsets' go together (bf_segments' two outputs)");
  if (!seg) return SL_OK;
  const sl_tensor_desc *d = &n->in[3], *o = &n->in[4];
  if (d->dtype != SL_U64 || d->stream_rank != 0 || d->rank != 3 || d->dims[1] != n->in[0].dims[0] ||
      d->dims[2] != n->in[0].dims[1] || d->dims[0] < 1 || d->dims[0] > 255)
    return sl_input_refuse(err, "segments",
                           "a whole u64 [n, rows, cols] (bf_segments' segments, 1..255 segments, the scan's shape)",
                           d);
  if (o->dtype != SL_F64 || o->stream_rank != 0 || o->rank != 2 || o->dims[0] != d->dims[0] ||
      o->dims[1] != 3)
    return sl_input_refuse(err, "segment_offsets", "a whole f64 [n, 3] with the segments' n", o);
  return SL_OK;
}

static sl_code dpc_infer(sl_node *n, sl_error *err) {
  dpc_config c;
  sl_code rc = dpc_config_resolve(n, &c, err);
  if (rc) return rc;
  if ((rc = sl_com_field_check(n, err))) return rc;
  const sl_tensor_desc *adf = &n->in[2];
  if (has_adf(n) && ((adf->dtype != SL_F64 && adf->dtype != SL_U64) || adf->stream_rank != 0 ||
                     !sl_desc_equal_shape(adf, &n->in[0])))
    return sl_input_refuse(err, "adf", "a whole f64 or u64 image of the scan's shape [rows, cols]",
                           adf);
  if ((rc = segments_check(n, err))) return rc;
  n->in_unread = has_segments(n) && !parallax_segments(n) ? (1u << 3) | (1u << 4) : 0;
  int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1], one = 1;
  if ((c.fit_angle || c.transpose < 0) && (rows < 3 || cols < 3))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "fitting the rotation needs at least 3x3 scan positions, got %lldx%lld; give "
                   "'rotation_deg' and 'transpose'",
                   (long long)rows, (long long)cols);
  int64_t dims[2] = {rows, cols};
  for (int i = 0; i < 6; i++) n->out[i] = sl_desc_make(SL_F64, 2, dims, 0);
  n->out[2] = sl_desc_make(SL_F64, 1, &one, 0);
  n->out[3] = sl_desc_make(SL_U8, 1, &one, 0);
  return SL_OK;
}

/* What cuFFT's plans of the parallax's transforms (192 x 192 and 256 x 256
 * batches on the device) take of host memory more, once per process: on a
 * fresh H200 machine the process's peak was 33 MB higher on its first run
 * with the probe params than on the next (287.5 against 254.3-254.8 MiB,
 * stem_products on the 512 x 512 file: their kernels loaded from a cold
 * library); counted so that the plan holds that first run too. */
#define PARALLAX_CUFFT_HOST_BYTES ((int64_t)32 << 20)

/* Bytes of the segments' band (sl_dpc_parallax_band) that a device reads
 * back for a fit on the host. */
static int64_t band_bytes(const sl_node *n) {
  int64_t band0, band;
  sl_dpc_parallax_band(n->in[0].dims[0], &band0, &band);
  return (int64_t)segment_count(n) * band * n->in[0].dims[1] * (int64_t)sizeof(uint64_t);
}

static void dpc_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)positions;
  memset(c, 0, sizeof *c);
  int64_t rc = sl_desc_elems(&n->in[0]), rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  c->bytes_read = 2 * rc * 8 * 3;
  c->bytes_written = 4 * rc * 8 + 9;
  /* The branch rule: the integral from the fit's spectra (one inverse
   * transform of the integral's three) and the rotated spectra. */
  c->ops = 40 * rc + sl_fourier_integral_ops(rows, cols, true) / 3 + sl_dpc_fit_ops(rows, cols);
  c->library_bytes = SL_FFTW_PLANNER_BYTES;
  const int ns = parallax_segments(n);
  const bool device_fit = ns && (probe_given(n) || axis_fit_possible(n));
  c->device_library_bytes = SL_CUFFT_HOST_BYTES + (device_fit ? PARALLAX_CUFFT_HOST_BYTES : 0);
  c->state_bytes = sl_fourier_integral_bytes(rows, cols, true) + sl_dpc_fit_bytes(rows, cols) +
                   2 * rc * 8 + rows * (1 + SL_DPC_ADF_SUMS) * 8;
  if (ns) {
    /* The parallax (and on CUDA the segments' host copies): it runs
     * whenever the angle is fitted with the probe's params (for the branch
     * where the CoM's rule is a guess, else for the axis). Without them it
     * runs only where the CoM's rule is a guess or its angle weak on data
     * that can hold a strong parallax, which no plan can know: its bytes
     * and operations are the decided ones (the budget holds them, the
     * estimate and the planned peak are the usual run's; such a run takes
     * the fit's time more, 0.2-0.4 s at 1 thread on a 128 x 128 scan,
     * docs/nodes/dpc.md, and report.json adds both once it ran:
     * sl_node_decided_work, sl_node_decided_state). */
    if (probe_given(n)) c->ops += sl_dpc_parallax_ops(ns, rows, cols);
    else /* at most the fit of a guessed branch, f_max estimated (the axis's is less) */
      c->decided_ops_most = sl_dpc_parallax_ops_of(ns, rows, cols, SL_DPC_PARALLAX_OPS_NO_PROBE),
      c->decided_variant = PARALLAX_VARIANT;
    c->bytes_read += (int64_t)ns * rc * 8;
    /* The host steps' plans and buffers are made on their first need: on a
     * device, whose steps run there, only the driver's weights are (unless
     * the device's fit cannot run: a note says so). Without the params
     * the steps run only where the data decide: their bytes are decided
     * state (on a bench acquisition without an object the fit does not
     * run, and planning its 47 MiB put the plan at 3.5x the run's 19 MiB). */
    const int64_t host = sl_dpc_parallax_bytes(ns, rows, cols), driver = sl_dpc_parallax_driver_bytes(rows, cols);
    if (probe_given(n)) c->state_bytes += host, c->host_fallback_bytes = host - driver;
    else c->decided_state_bytes = host; /* a device's fit makes the driver's part */
    c->per_worker_bytes = sl_dpc_parallax_worker_bytes(rows, cols);
#ifdef SLUICE_HAVE_CUDA
    /* on a device, the gain bound's sums read back for the axis's fit (the
     * segments' band for the host's fit with the params is a fallback not
     * planned), and
     * their offsets; the CPU backend reads the segments where they are
     * (planned there, 11 MiB at a 256 x 256 scan put stem_products' host
     * plan at 1.34x the measured peak) */
    const sl_cuda_parallax_geometry g = device_geometry(rows, cols);
    c->device_host_bytes =
        (int64_t)ns * 3 * 8 + (axis_fit_possible(n) ? sl_cuda_dpc_gain_sums_bytes(ns, g.wr, g.wc) : 0);
    /* without the params, a guessed branch fits on the host on the band
     * read back: decided with the fit's state */
    if (!probe_given(n)) c->device_decided_state_bytes = band_bytes(n);
#endif
  }
#ifdef SLUICE_HAVE_CUDA
  /* On the device the parallax's pieces follow dpc's own (it fits there) */
  const sl_cuda_parallax_geometry g = device_geometry(rows, cols);
  /* without the probe the parallax fits on the host for a guessed branch
   * (its cut-off's estimate is the host's: a rare path, like the host
   * fallback above), on the device for the axis alone */
  c->device_state_bytes = sl_cuda_dpc_state_bytes_with(rows, cols, device_fit ? ns : 0, &g);
#endif
}

/* The state: the fit and the integral of the branch rule (planned in
 * prepare: FFTW planning is not thread safe) and the phase. */
typedef struct dpc_state {
  sl_dpc_fit fit;
  sl_fourier_integral integral;
  double *phase;
  double *div2_of_row; /* [rows]: squared divergence summed per row */
  double *adf;         /* [rows * cols]: the ADF image as f64 */
  double *adf_of_row;  /* [rows][SL_DPC_ADF_SUMS]: the ADF matched filter's sums per row */
  sl_dpc_parallax *parallax; /* with the segments input, made on first need (parallax_state) */
  uint64_t *segments_host;   /* CUDA: the segments' band (sl_dpc_parallax_band), made on first need, */
  double *offsets_host;      /* and their offsets, read back for the parallax */
  uint64_t *gain_sums_host;  /* CUDA: the gain bound's sums, read back (dpc_gain_bound.h) */
} dpc_state;

static void dpc_release(sl_node *n) {
  dpc_state *s = n->state;
  if (!s) return;
  sl_dpc_fit_free(&s->fit);
  sl_fourier_integral_free(&s->integral);
  free(s->phase);
  free(s->div2_of_row);
  free(s->adf);
  free(s->adf_of_row);
  sl_dpc_parallax_free(s->parallax);
  free(s->segments_host);
  free(s->offsets_host);
  free(s->gain_sums_host);
  free(s);
  n->state = NULL;
}

static sl_code dpc_prepare(sl_node *n, sl_error *err) {
  dpc_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  sl_code rc = sl_fourier_integral_init(&s->integral, rows, cols, true, err);
  if (rc == SL_OK) rc = sl_dpc_fit_init(&s->fit, rows, cols, err);
  s->phase = malloc((size_t)(rows * cols) * sizeof *s->phase);
  s->div2_of_row = malloc((size_t)rows * sizeof *s->div2_of_row);
  s->adf = malloc((size_t)(rows * cols) * sizeof *s->adf);
  s->adf_of_row = malloc((size_t)(rows * SL_DPC_ADF_SUMS) * sizeof *s->adf_of_row);
  if (rc == SL_OK && (!s->phase || !s->div2_of_row || !s->adf || !s->adf_of_row))
    rc = sl_fail(err, SL_ERR_NOMEM, "out of memory");
#ifdef SLUICE_HAVE_CUDA
  /* the parallax's state and the segments' host copy are made on first need */
  const int ns = parallax_segments(n);
  if (rc == SL_OK && ns && !(s->offsets_host = malloc((size_t)ns * 3 * sizeof *s->offsets_host)))
    rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for the segments' offsets");
#endif
  n->state = s;
  if (rc != SL_OK) dpc_release(n);
  return rc;
}

/* The sums of the skewness rule (shaders/cuda/stem/dpc_math.h,
 * sl_dpc_branch_score) for the branch (theta, t) of the field. The phase is
 * integrated from the fit's spectra, rotated: no transform of the field
 * again. */
static sl_dpc_branch_sums branch_sums_of(dpc_state *s, sl_backend *b, double theta, int t, int64_t n) {
  sl_dpc_branch_sums v = {0, 0};
  /* The rotated spectra go into the integral's own buffers. */
  sl_fourier_integral *in = &s->integral;
  sl_dpc_fit_rotated_spectra(&s->fit, theta, t, in->xr, in->xc);
  sl_fourier_integral_from_spectra(in, b, in->xr, in->xc, 0, 1, s->phase);
  for (int64_t k = 0; k < n; k++) { /* the integral's mean is 0 */
    double p = s->phase[k];
    v.m2 += p * p, v.m3 += p * p * p;
  }
  return v;
}

/* The skewness rule's branch threshold (|skewness| below it: a guess; at
 * 0.3 the 64 x 64 grid had 20 wrong branches above it, up to 0.71, none
 * from 1 on), and
 * the ADF matched filter's (its correlation at the angle taken, in sigmas
 * of its noise: over the 376 cases of docs/nodes/dpc.md's grid every branch
 * at or above it was right). */
#define SKEWNESS_SURE 1.0
#define ADF_SIGMAS_SURE 4.0

/* The parallax's branch threshold: |skewness| of the sign-corrected tcBF
 * below it, a guess; and where the CoM's branch is sure, the parallax's
 * axis replaces the CoM's when its power gain and scale (scan steps per
 * disk radius) reach these: over the grid of docs/nodes/dpc.md that took
 * the angles within 2 degrees from 78% to 92% of the cases, and every
 * determinable one within 1 degree. */
#define PARALLAX_SKEWNESS_SURE 0.5
#define PARALLAX_AXIS_GAIN 1.5
#define PARALLAX_AXIS_SCALE 2.0
/* Without the probe's params the parallax is fitted for the axis too where
 * the CoM's branch is sure but the ADF matched filter's angle has a 1 sigma
 * over this many degrees (the harness's determinable bound, issue 11's
 * grid), and the segments' gain bound (sl_dpc_parallax_gain_bound, a pass
 * over the window) reaches PARALLAX_AXIS_GAIN: below it no parallax could
 * give the gain its axis is taken at, and the fit's time (0.2 s at 1
 * thread on a 128 x 128 scan) is not spent (on bench_mask_cost.sh's
 * acquisition without an object the bound is 1.31). On issue 11's 64 x 64
 * grid it was 1.40-1.92 times the gain found and skipped no case: angles
 * within 2 degrees 80.6% -> 95.0%, the same as with the params, none made
 * worse (docs/nodes/dpc.md). Without an ADF image there is no such sigma:
 * not fitted. */
#define PARALLAX_AXIS_SIGMA 0.7

/* The warning of a weak branch decision; where the BF segments are
 * connected but the probe is unknown it names the params (the parallax's
 * exact sign correction: 96-98% of issue 11's grid against 94-96.5% with
 * its cut-off estimated, dpc.md). */
static void note_branch_guess(sl_node *n, const char *what, double value) {
  const bool parallax_could = parallax_segments(n) && !probe_given(n);
  sl_node_note(n, "warning",
               "the 180-degree branch of the rotation is a guess (%s %.3f): check the "
               "contrast of the iDPC image, or give rotation_deg%s",
               what, value,
               parallax_could ? ", or the probe's semiangle_mrad, energy_kev and step_angstrom (the BF segments' "
                                "parallax's sign correction then needs no estimate of its cut-off)"
                              : "");
}

/* The 180-degree branch without an ADF image (see the header) from the
 * skewness `score` of the fitted one's iDPC phase. Notes the evidence;
 * returns the sign of the field (-1: the other branch, *theta turned by
 * 180). */
static double dpc_parallax_branch(sl_node *n, const dpc_config *cfg, const sl_dpc_parallax_result *px,
                                  double theta, int *t, const char *com_rule, double com_confidence);

/* Where the parallax's inputs are (host pointers, or device ones that
 * `a`'s backend downloads into the state's host copies first); it is run
 * on the first need (the branch where the CoM's rule is a guess, else the
 * axis where it is sure) and not where there is none (no probe params, a
 * given angle). */
typedef struct parallax_source {
  sl_kernel_args *a;
  const dpc_config *cfg;
  dpc_state *st;
  const uint64_t *segments;
  const double *offsets;
  bool on_device;
  bool downloaded; /* on_device: segments and offsets are the band read back (host_segments) */
#ifdef SLUICE_HAVE_CUDA
  const sl_cuda_dpc_params *device; /* on_device: dpc's device state (the parallax fits there) */
#endif
  sl_code rc; /* of the download, or of the device's fit */
  bool axis_only; /* the fit for the axis alone (sl_dpc_parallax_fit) */
  sl_dpc_parallax_result r;
  /* wall seconds around the fit's steps, in its parallax_seconds note:
   * the segments' gain bound (with its sums made on a device), and
   * the fit's set-up (a device's plans and the offsets read back, or the
   * host's state made) */
  double bound_seconds, sums_seconds, setup_seconds;
} parallax_source;

static const sl_dpc_parallax_result *parallax_when_needed(parallax_source *ps);
static double parallax_axis(sl_node *n, parallax_source *ps, double theta, int t, double sigma);

static double dpc_branch_skewness(sl_node *n, double *theta, double score) {
  double sign = 1;
  if (score < 0) *theta += 180, sign = -1;
  double c = fabs(score);
  sl_node_note(n, "branch", "%.4f of the two 180-degree branches, by the skewness of its iDPC phase %.3f "
               "(the other branch %+.3f; no ADF input)", sl_dpc_wrap_deg(*theta), c, -c);
  sl_node_note(n, "branch_confidence", "%.3f (|skewness| of iDPC, no ADF input; below %.2f the branch is a guess)",
               c, SKEWNESS_SURE);
  if (c < SKEWNESS_SURE) note_branch_guess(n, "iDPC skewness", c);
  return sign;
}

/* With an ADF image (see the header): the transpose (given, or the one
 * whose field correlates more strongly with the ADF gradient) and the angle
 * over the full turn from the ADF matched filter's totals, the curl fit's
 * axis kept where it agrees within 3 sigma. Where that branch is a guess
 * and the parallax (ps) is found, the parallax decides
 * (dpc_parallax_branch). Notes the evidence. Returns the angle, degrees;
 * *t the transpose. */
static double dpc_adf_angle(sl_node *n, const dpc_config *cfg, const sl_dpc_fit_result *fit,
                            const double *totals, int64_t positions, parallax_source *ps, int *t) {
  sl_dpc_adf_fit af;
  sl_dpc_adf_solve(totals, sl_dpc_adf_noise(fit, totals[SL_DPC_ADF_F2], positions), &af);
  *t = cfg->transpose >= 0 ? cfg->transpose : af.strength[1] > af.strength[0] ? 1 : 0;
  const double adf = af.angle[*t], sigma = af.sigma[*t], axis = fit->angle[*t];
  double off = fabs(sl_dpc_wrap_deg(axis - adf)); /* the axis's distance from the ADF angle, mod 180 */
  if (off > 90) off = 180 - off;
  const bool keep_axis = off < 3 * sigma;
  const double theta = keep_axis ? (fabs(sl_dpc_wrap_deg(axis - adf)) <= 90 ? axis : axis + 180) : adf;
  /* The correlation at the angle taken, in sigmas of its noise. */
  const double z = isfinite(sigma) && sigma > 0 ? cos((theta - adf) * M_PI / 180.0) / (sigma * M_PI / 180.0) : 0;
  const sl_dpc_parallax_result *px = z < ADF_SIGMAS_SURE ? parallax_when_needed(ps) : NULL;
  const bool to_parallax = px != NULL;
  sl_node_note(n, to_parallax ? "branch_com" : "branch",
               "%.4f, by the ADF matched filter (the field's correlation with the ADF image's gradient, "
               "largest at %.4f +- %.3g degrees; transposed %.4g, untransposed %.4g): %s (the curl fit's "
               "axis %.4f is %.3g sigma from it)%s",
               sl_dpc_wrap_deg(theta), adf, sigma, af.strength[1], af.strength[0],
               keep_axis ? "the curl fit's axis on the ADF's branch" : "the ADF's angle", axis,
               isfinite(sigma) && sigma > 0 ? off / sigma : INFINITY,
               to_parallax ? "; a guess, the parallax decides" : "");
  sl_node_note(n, "angle_uncertainty", "%.3g degrees (1 sigma of the ADF matched filter's angle, CoM shot noise)",
               sigma);
  if (to_parallax) return dpc_parallax_branch(n, cfg, px, theta, t, "ADF correlation in sigmas", z);
  sl_node_note(n, "branch_confidence",
               "%.3f (the ADF correlation at the angle taken, in sigmas of its noise; below %.1f the branch "
               "is a guess)", z, ADF_SIGMAS_SURE);
  if (z < ADF_SIGMAS_SURE) note_branch_guess(n, "ADF correlation in sigmas", z);
  return z < ADF_SIGMAS_SURE ? theta : parallax_axis(n, ps, theta, *t, sigma);
}

/* Where the CoM's branch rule (com_rule, its confidence) is a guess and the
 * parallax of the BF segments was found (nodes/stem/dpc_parallax.h): the
 * parallax's angle and transpose. (Keeping the CoM's axis on the
 * parallax's branch where the two agree within 20 degrees had as many
 * branches right but fewer angles within 2 degrees, 72% against 78% of the
 * grid: where the CoM's rule is a guess its axis is mostly noise, the
 * parallax's is not; docs/nodes/dpc.md.) A given transpose that the
 * parallax contradicts leaves the CoM's answer. Notes the evidence;
 * returns the angle, *t the transpose. */
static double dpc_parallax_branch(sl_node *n, const dpc_config *cfg, const sl_dpc_parallax_result *px,
                                  double theta, int *t, const char *com_rule, double com_confidence) {
  if (cfg->transpose >= 0 && px->transpose != cfg->transpose) {
    sl_node_note(n, "branch", "%.4f, by the CoM's rule (%s %.3f): the parallax's transpose contradicts "
                 "the given one", sl_dpc_wrap_deg(theta), com_rule, com_confidence);
    sl_node_note(n, "branch_confidence", "%.3f (%s)", com_confidence, com_rule);
    note_branch_guess(n, com_rule, com_confidence);
    return theta;
  }
  double off = fabs(sl_dpc_wrap_deg(theta - px->theta));
  if (off > 90) off = 180 - off;
  const double c = fabs(px->skewness);
  char scale[96];
  if (px->fmax_estimated) snprintf(scale, sizeof scale, "f_max %.4g cycles per scan step, estimated", px->fmax);
  else snprintf(scale, sizeof scale, "|defocus| %.1f A", px->defocus);
  sl_node_note(n, "branch",
               "%.4f, transposed %d, by the parallax of the BF segments (%.4g scan steps per disk radius at "
               "%.2f degrees%s, power gain %.3f; %s; sign-corrected tcBF skewness %+.3f, the "
               "defocus's sign); the CoM's rule was a guess (%s %.3f; its axis %.4f, transposed %d, %.2f "
               "degrees from the parallax's)",
               sl_dpc_wrap_deg(px->theta), px->transpose, px->scale, px->angle, px->transpose ? ", transposed" : "",
               px->gain, scale, px->skewness, com_rule, com_confidence, sl_dpc_wrap_deg(theta), *t, off);
  sl_node_note(n, "branch_confidence",
               "%.3f (|skewness| of the parallax's sign-corrected tcBF image; below %.2f the branch is a guess)",
               c, PARALLAX_SKEWNESS_SURE);
  if (c < PARALLAX_SKEWNESS_SURE) note_branch_guess(n, "parallax tcBF skewness", c);
  *t = px->transpose;
  return px->theta;
}

/* The skewness rule's guess (score below SKEWNESS_SURE) handed to the
 * parallax: the CoM's evidence noted as "branch_com". */
static double skewness_to_parallax(sl_node *n, const dpc_config *cfg, const sl_dpc_parallax_result *px,
                                   double theta, int *t, double score) {
  if (score < 0) theta += 180;
  sl_node_note(n, "branch_com", "%.4f of the two 180-degree branches, by the skewness of its iDPC phase "
               "%.3f (no ADF input); a guess, the parallax decides", sl_dpc_wrap_deg(theta), fabs(score));
  return dpc_parallax_branch(n, cfg, px, theta, t, "iDPC skewness", fabs(score));
}

/* The segments and their offsets read back into the state's host copies
 * (the parallax runs on the host: a few pair correlations of a 128 x 128
 * window and one transform per segment). */
static sl_code segments_download(sl_kernel_args *a, dpc_state *st) {
  const sl_node *n = a->node;
  const sl_backend_ops *o = a->backend->ops;
  const int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  int64_t band0, band;
  sl_dpc_parallax_band(rows, &band0, &band);
  const size_t ns = (size_t)segment_count(n), piece = (size_t)(band * cols) * sizeof(uint64_t);
  if (!st->segments_host && !(st->segments_host = malloc(ns * piece)))
    return sl_fail(a->err, SL_ERR_NOMEM, "dpc: out of memory for the segments' host copy");
  sl_code rc = SL_OK;
  for (size_t k = 0; k < ns && rc == SL_OK; k++) /* segment k's band: one contiguous piece */
    rc = o->download(a->backend, (char *)st->segments_host + k * piece,
                     (const char *)a->in[3] + (k * (size_t)rows + (size_t)band0) * (size_t)cols * sizeof(uint64_t),
                     piece, a->err);
  if (rc == SL_OK) rc = o->download(a->backend, st->offsets_host, a->in[4], ns * 3 * sizeof(double), a->err);
  return rc;
}

/* The parallax's host state, made on its first need: `steps` for the host
 * steps (FFTW's plans, made here on the executor's thread, where no other
 * node plans), else the driver's buffers only (the steps run on a device). */
static sl_code parallax_state(sl_node *n, dpc_state *st, bool steps, sl_error *err) {
  if (st->parallax && (!steps || sl_dpc_parallax_has_host_steps(st->parallax))) return SL_OK;
  sl_dpc_parallax_free(st->parallax);
  st->parallax = NULL;
  const int ns = parallax_segments(n);
  const int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  sl_code rc = steps ? sl_dpc_parallax_new(ns, rows, cols, &st->parallax, err)
                     : sl_dpc_parallax_new_driver(ns, rows, cols, &st->parallax, err);
  /* without the params this state is decided by the data (dpc_cost), with
   * the band a device read back for the host's steps */
  if (rc == SL_OK && !probe_given(n))
    sl_node_decided_state(n, steps ? sl_dpc_parallax_bytes(ns, rows, cols) + (st->segments_host ? band_bytes(n) : 0)
                                   : sl_dpc_parallax_driver_bytes(rows, cols));
  return rc;
}

#ifdef SLUICE_HAVE_CUDA
/* The parallax's steps on the device (shaders/cuda/stem/dpc_parallax.h),
 * behind the host's driver (sl_dpc_parallax_fit): its error in rc. */
typedef struct device_steps {
  sl_cuda_dpc_parallax *x;
  sl_code rc;
} device_steps;

static bool dev_correlate(void *ctx, sl_dpc_parallax_set *s, const double *weight, double *diag) {
  device_steps *d = ctx;
  return (d->rc = sl_cuda_dpc_parallax_correlate(d->x, s->index, s->used, s->pair, weight, s->sum, diag)) == SL_OK;
}

static bool dev_power(void *ctx, const sl_dpc_parallax_set *s, double *power) {
  device_steps *d = ctx;
  return (d->rc = sl_cuda_dpc_parallax_power(d->x, s->used, power)) == SL_OK;
}

static bool dev_grid(void *ctx, const sl_dpc_parallax_set *s, double half, int64_t n_s, double *best) {
  (void)s;
  device_steps *d = ctx;
  return (d->rc = sl_cuda_dpc_parallax_grid(d->x, half, n_s, best)) == SL_OK;
}

static bool dev_value(void *ctx, const sl_dpc_parallax_set *s, const double m[4], double *v) {
  (void)s;
  device_steps *d = ctx;
  return (d->rc = sl_cuda_dpc_parallax_value(d->x, m, v)) == SL_OK;
}

static bool dev_pattern(void *ctx, const sl_dpc_parallax_set *s, double half, double *sc, double *p, int t,
                        double *v) {
  (void)s;
  device_steps *d = ctx;
  return (d->rc = sl_cuda_dpc_parallax_pattern(d->x, half, sc, p, t, v)) == SL_OK;
}

/* The shifts M o of the used segments (the host's expressions, tcbf_groups). */
static bool dev_tcbf(void *ctx, const sl_dpc_parallax_set *s, const double *offsets, const double m[4],
                     double chi_per_f2, int64_t margin, double *skewness) {
  device_steps *d = ctx;
  double *sh = malloc((size_t)s->used * 2 * sizeof *sh);
  if (!sh) return false;
  for (int u = 0; u < s->used; u++) {
    const double o0 = offsets[3 * s->index[u]], o1 = offsets[3 * s->index[u] + 1];
    sh[2 * u] = m[0] * o0 + m[1] * o1, sh[2 * u + 1] = m[2] * o0 + m[3] * o1;
  }
  d->rc = sl_cuda_dpc_parallax_tcbf(d->x, s->used, sh, m, s->cell, chi_per_f2, margin, skewness);
  free(sh);
  return d->rc == SL_OK;
}

/* The fit on the device where the segments are (their offsets read back:
 * n x 3 doubles). *ran false, with why, when it cannot run there (the host
 * fits then); ps->rc a device error. */
static void parallax_on_device(parallax_source *ps, bool *ran, char *why, size_t why_size) {
  sl_kernel_args *a = ps->a;
  sl_node *n = (sl_node *)a->node; /* its notes and decided state */
  const int ns = segment_count(n);
  *ran = false;
  const sl_cuda_parallax_geometry g = device_geometry(n->in[0].dims[0], n->in[0].dims[1]);
  sl_cuda_dpc_parallax *x = NULL;
  const double t0 = sl_now();
  ps->rc = sl_cuda_dpc_parallax_of(ps->device, a, ns, &g, a->in[3], &x, why, why_size);
  if (ps->rc != SL_OK || !x) return;
  ps->rc = a->backend->ops->download(a->backend, ps->st->offsets_host, a->in[4], (size_t)ns * 3 * sizeof(double),
                                     a->err);
  if (ps->rc == SL_OK) ps->rc = parallax_state(n, ps->st, false, a->err);
  if (ps->rc != SL_OK) return;
  ps->setup_seconds = sl_now() - t0;
  device_steps d = {x, SL_OK};
  /* no fmax: without the probe the host fits a guessed branch
   * (parallax_when_needed); the axis alone needs none */
  const sl_dpc_parallax_steps st = {&d,        dev_correlate, dev_power, dev_grid,
                                     dev_value, dev_pattern,   dev_tcbf,  NULL};
  (void)sl_dpc_parallax_fit(ps->st->parallax, &st, ps->st->offsets_host,
                            ps->cfg->probe_known ? &ps->cfg->probe : NULL, ps->axis_only, &ps->r);
  ps->rc = d.rc;
  *ran = ps->rc == SL_OK;
}
#endif

/* The segments on the host and the scan rows they hold: the input's
 * every row, or on a device the band read back (once). False with ps->rc
 * set when the download failed. */
static bool host_segments(parallax_source *ps, int64_t *row0, int64_t *nrows) {
  const int64_t rows = ps->a->node->in[0].dims[0];
  *row0 = 0, *nrows = rows;
  if (!ps->on_device) return true;
  if (!ps->downloaded) {
    if ((ps->rc = segments_download(ps->a, ps->st)) != SL_OK) return false;
    ps->segments = ps->st->segments_host, ps->offsets = ps->st->offsets_host, ps->downloaded = true;
  }
  sl_dpc_parallax_band(rows, row0, nrows);
  return true;
}

/* The segments' gain bound (sl_dpc_parallax_gain_bound): on a device from
 * the sums of their fit's window made there and read back (130 KB at 21
 * segments; the band, 11 MB at 256 x 256, took 9-10 ms to read back on the
 * H200), else where they are. False with ps->rc set when the device
 * failed. */
static bool segments_gain_bound(parallax_source *ps, double *bound) {
  const sl_node *n = ps->a->node;
  const int ns = segment_count(n);
  const int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
#ifdef SLUICE_HAVE_CUDA
  if (ps->on_device) {
    sl_kernel_args *a = ps->a;
    dpc_state *st = ps->st;
    const sl_cuda_parallax_geometry g = device_geometry(rows, cols);
    const double t0 = sl_now();
    if (!st->gain_sums_host &&
        !(st->gain_sums_host = malloc((size_t)sl_cuda_dpc_gain_sums_bytes(ns, g.wr, g.wc)))) {
      ps->rc = sl_fail(a->err, SL_ERR_NOMEM, "dpc: out of memory for the gain bound's sums");
      return false;
    }
    uint64_t *seg = st->gain_sums_host, *pos = seg + (size_t)ns * SL_DPC_GAIN_SEGMENT_SUMS;
    ps->rc = sl_cuda_dpc_gain_bound_sums(ps->device, a, ns, &g, seg, pos);
    if (ps->rc == SL_OK)
      ps->rc = a->backend->ops->download(a->backend, st->offsets_host, a->in[4], (size_t)ns * 3 * sizeof(double),
                                         a->err);
    if (ps->rc != SL_OK) return false;
    ps->sums_seconds = sl_now() - t0;
    *bound = sl_dpc_parallax_gain_bound_of_sums(ns, g.wr * g.wc, seg, pos, st->offsets_host);
    return true;
  }
#endif
  int64_t row0, nrows;
  if (!host_segments(ps, &row0, &nrows)) return false;
  *bound = sl_dpc_parallax_gain_bound(ns, rows, cols, ps->segments, row0, nrows, ps->offsets);
  return true;
}

/* The parallax_seconds note: the wall seconds of the gain bound (where it
 * ran) and of the fit's set-up and steps (where it ran; on_device: the
 * host waited for each step there). */
static void note_parallax_seconds(sl_node *n, const parallax_source *ps, bool fitted, bool on_device) {
  char bound[96] = "";
  if (ps->bound_seconds > 0 && ps->sums_seconds > 0)
    snprintf(bound, sizeof bound, "gain bound %.4f (its sums on the device %.4f)", ps->bound_seconds,
             ps->sums_seconds);
  else if (ps->bound_seconds > 0)
    snprintf(bound, sizeof bound, "gain bound %.4f", ps->bound_seconds);
  if (!fitted) {
    if (bound[0]) sl_node_note(n, "parallax_seconds", "%s; not fitted", bound);
    return;
  }
  const double *sec = ps->r.step_seconds;
  sl_node_note(n, "parallax_seconds", "%s%sset-up %.4f, correlations %.4f, search %.4f, refinement %.4f, cut-off "
               "%.4f, tcBF %.4f (%s)", bound, bound[0] ? ", " : "", ps->setup_seconds,
               sec[SL_DPC_PARALLAX_STEP_CORRELATE], sec[SL_DPC_PARALLAX_STEP_SEARCH], sec[SL_DPC_PARALLAX_STEP_REFINE],
               sec[SL_DPC_PARALLAX_STEP_FMAX], sec[SL_DPC_PARALLAX_STEP_TCBF],
               on_device ? "on the device, as the host waited for each" : "on the host");
}

/* The parallax of the segments, when it can decide: connected, the probe
 * known, the angle fitted, and found; run on the first call (the CoM's rule
 * was a guess). Notes why not where it cannot. Returns the result, or
 * NULL (also when the download failed: ps->rc). */
static const sl_dpc_parallax_result *parallax_when_needed(parallax_source *ps) {
  sl_node *n = (sl_node *)ps->a->node;
  const dpc_config *cfg = ps->cfg;
  if (!has_segments(n) || !cfg->fit_angle) return NULL;
  sl_dpc_parallax_result *r = &ps->r;
  sl_kernel_args *a = ps->a;
  bool ran = false;
#ifdef SLUICE_HAVE_CUDA
  /* Without the probe the estimate of f_max is the host's step (the
   * segments' band read back): the same bits as the CPU backend's. The
   * axis alone needs no estimate: the device fits it. */
  if (ps->on_device && (cfg->probe_known || ps->axis_only)) {
    char why[300] = "";
    parallax_on_device(ps, &ran, why, sizeof why);
    if (ps->rc != SL_OK) return NULL;
    if (!ran) sl_node_note(n, "parallax_backend", "fitted on the host: %s", why);
  }
#endif
  if (ps->on_device && !ran && !cfg->probe_known)
    sl_node_note(n, "parallax_backend", "fitted on the host: the probe's params not given (the estimate of "
                 "its cut-off is the host's; its state is the plan's decided state)");
  if (!ran) {
    int64_t row0, nrows;
    const double t0 = sl_now();
    if (!host_segments(ps, &row0, &nrows) || (ps->rc = parallax_state(n, ps->st, true, a->err)) != SL_OK)
      return NULL;
    ps->setup_seconds = sl_now() - t0;
    sl_dpc_parallax_run(ps->st->parallax, a->backend, a->worker_scratch, a->worker_scratch_stride, ps->segments,
                        row0, nrows, ps->offsets, cfg->probe_known ? &cfg->probe : NULL, ps->axis_only, r);
  }
  /* Without the params the fit ran because of the data, which the plan
   * could not see: its work is estimated now, at the fit's rate (the
   * variant calibrate measures with the params, which dpc_cost declares),
   * beside the plan's. Not
   * for a device run's fit on the host (a guessed branch): no rate of the
   * profile is the host's. */
  if (!cfg->probe_known && (ran || !ps->on_device))
    sl_node_decided_work(n, sl_dpc_parallax_ops_of(segment_count(n), n->in[0].dims[0], n->in[0].dims[1],
                                                   ps->axis_only ? SL_DPC_PARALLAX_OPS_AXIS
                                                                 : SL_DPC_PARALLAX_OPS_NO_PROBE));
  char scale[256];
  if (r->axis_only)
    snprintf(scale, sizeof scale, "fitted for the axis alone (the branch the CoM's; no sign correction)");
  else if (r->fmax_estimated && !r->found)
    snprintf(scale, sizeof scale, "the aperture's cut-off not estimated (no parallax; the probe's params not given)");
  else if (r->fmax_estimated)
    snprintf(scale, sizeof scale, "the aperture's cut-off %.4g cycles per scan step estimated from the segments' "
             "spectra (%.4g frequencies above noise; the probe's params not given, |defocus| unknown)",
             r->fmax, r->fmax_energy);
  else snprintf(scale, sizeof scale, "|defocus| %.1f A", r->defocus);
  sl_node_note(n, "parallax",
               "%s: %.4g scan steps per disk radius at %.2f degrees%s, power gain %.3f (found above %.2f); "
               "%s; sign-corrected tcBF skewness %+.3f; rotation on its branch %.4f",
               r->found ? "found" : "not found", r->scale, r->angle, r->transpose ? ", transposed" : "",
               r->gain, SL_DPC_PARALLAX_GAIN, scale, r->skewness, r->theta);
  note_parallax_seconds(n, ps, true, ran);
  return r->found ? r : NULL;
}

/* Where the CoM's branch is sure: the parallax's axis on that branch when
 * the parallax is strong (gain and scale at least PARALLAX_AXIS_GAIN and
 * PARALLAX_AXIS_SCALE) and has the same transpose; else theta. At large
 * defocus the CoM keeps little of the lattice and its angle is off by
 * degrees where the parallax's is not (docs/nodes/dpc.md). sigma: the
 * CoM's angle's 1 sigma in degrees (0: not known); without the probe's
 * params the parallax is fitted, for M alone, only above
 * PARALLAX_AXIS_SIGMA and where the segments' gain bound reaches
 * PARALLAX_AXIS_GAIN (a "parallax_for" note says which). */
static double parallax_axis(sl_node *n, parallax_source *ps, double theta, int t, double sigma) {
  if (!has_segments(n) || !ps->cfg->fit_angle || (!ps->cfg->probe_known && !(sigma > PARALLAX_AXIS_SIGMA)))
    return theta;
  if (!ps->cfg->probe_known) {
    const double t0 = sl_now();
    double bound;
    if (!segments_gain_bound(ps, &bound)) return theta;
    ps->bound_seconds = sl_now() - t0;
    if (!(bound >= PARALLAX_AXIS_GAIN)) {
      note_parallax_seconds(n, ps, false, false);
      sl_node_note(n, "parallax_for", "not fitted for the axis: the CoM's angle is %.3g degrees uncertain (1 "
                   "sigma, over %.2g), but the segments' power can gain at most %.3f under any parallax (below %.2f)",
                   sigma, PARALLAX_AXIS_SIGMA, bound, PARALLAX_AXIS_GAIN);
      return theta;
    }
    sl_node_note(n, "parallax_for", "the axis: the CoM's angle is %.3g degrees uncertain (1 sigma, over %.2g), and "
                 "the segments' power can gain up to %.3f under a parallax (%.2f or more)", sigma, PARALLAX_AXIS_SIGMA,
                 bound, PARALLAX_AXIS_GAIN);
    ps->axis_only = true;
  }
  const sl_dpc_parallax_result *px = parallax_when_needed(ps);
  if (!px || px->gain < PARALLAX_AXIS_GAIN || px->scale < PARALLAX_AXIS_SCALE || px->transpose != t)
    return theta;
  const double d = sl_dpc_wrap_deg(px->theta - theta);
  const double out = fabs(d) <= 90 ? px->theta : px->theta + 180;
  sl_node_note(n, "axis", "%.4f: the parallax's axis (gain %.3f, %.4g scan steps per disk radius) on the "
               "CoM's branch, %.2f degrees from the CoM's %.4f", sl_dpc_wrap_deg(out), px->gain, px->scale,
               fabs(sl_dpc_wrap_deg(out - theta)), sl_dpc_wrap_deg(theta));
  return out;
}

/* Whether the node has a note "key: ...". */
static bool has_note(const sl_node *n, const char *key) {
  size_t k = strlen(key);
  for (int i = 0; i < n->n_notes; i++)
    if (!strncmp(n->notes[i], key, k) && n->notes[i][k] == ':') return true;
  return false;
}

/* The note of a parallax that was not run. */
static void note_parallax_unused(sl_node *n, const dpc_config *cfg) {
  if (has_segments(n) && cfg->fit_angle && !has_note(n, "parallax"))
    sl_node_note(n, "parallax", "not run");
}

/* The transpose: given, or the one with the smaller residual. */
static int dpc_transpose(const dpc_config *cfg, const sl_dpc_fit_result *fit) {
  return cfg->transpose >= 0 ? cfg->transpose : (fit->residual[1] < fit->residual[0] ? 1 : 0);
}

/* The mean squared divergence from the rows' sums, added in row order. */
static double mean_div2(const dpc_state *st, int64_t rows, int64_t cols) {
  double sd2 = 0;
  for (int64_t i = 0; i < rows; i++) sd2 += st->div2_of_row[i];
  return sd2 / (double)(rows * cols);
}

/* The notes of the outputs; theta (degrees, the branch taken) wrapped to
 * (-180, 180]. */
static double dpc_report(sl_node *n, const dpc_config *cfg, int t, double theta, const sl_dpc_fit_result *fit,
                         double sd2) {
  theta = sl_dpc_wrap_deg(theta);
  sl_node_note(n, "rotation_deg", "%.4f (%s)", theta, cfg->fit_angle ? "fitted" : "given");
  sl_node_note(n, "transpose",
               "%s (%s; transverse fraction of the weighted field power %.4g untransposed, %.4g "
               "transposed)",
               t ? "true" : "false", cfg->transpose < 0 ? "fitted" : "given", fit->residual[0],
               fit->residual[1]);
  sl_node_note(n, "curl",
               "transverse (curl) fraction %.4g at the angle (0: curl free, 0.5: no "
               "information); the fit's sharpness %.3f (0: flat); noise %.3g of the mean "
               "power per frequency; mean squared divergence %.6g",
               fit->residual[t], fit->sharpness, fit->noise, sd2);
  return theta;
}

/* The outputs, by rows shared among the workers: the rotated field
 * c_scan = sign T^t R(-theta) c_det (sign -1: the other 180-degree branch),
 * then its curl and divergence, with each row's sum of squared divergence
 * (added in row order afterwards: the same bits at any thread count). The
 * arithmetic is dpc_math.h's, which the device shares. */
typedef struct field_job {
  const double *cr, *cc;
  int64_t rows, cols;
  double c, s; /* sign cos theta, sign sin theta */
  int t;
  double *orow, *ocol, *curl, *div, *div2_of_row;
} field_job;

static void rotate_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const field_job *f = ctx;
  for (int64_t k = begin * f->cols; k < end * f->cols; k++)
    sl_dpc_rotate(f->c, f->s, f->t, f->cr[k], f->cc[k], &f->orow[k], &f->ocol[k]);
}

static void curl_div_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const field_job *f = ctx;
  const int64_t rows = f->rows, cols = f->cols;
  for (int64_t i = begin; i < end; i++) {
    double d2 = 0;
    for (int64_t j = 0; j < cols; j++) {
      double *dv = &f->div[i * cols + j];
      sl_dpc_curl_div(f->orow, f->ocol, rows, cols, i, j, &f->curl[i * cols + j], dv);
      d2 += *dv * *dv;
    }
    f->div2_of_row[i] = d2;
  }
}

/* The ADF matched filter's sums, by rows shared among the workers
 * (dpc_math.h's arithmetic, which the device shares). */
typedef struct adf_job {
  const double *cr, *cc, *q;
  int64_t rows, cols;
  double *sums_of_row;
} adf_job;

static void adf_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const adf_job *f = ctx;
  for (int64_t i = begin; i < end; i++)
    sl_dpc_adf_row(f->cr, f->cc, f->q, f->rows, f->cols, i, f->sums_of_row + i * SL_DPC_ADF_SUMS);
}

/* Rows per task of the output passes. */
enum { FIELD_ROWS_GRAIN = 16 };

static dpc_state *dpc_state_of(const sl_kernel_args *a) { return a->state ? a->state : a->node->state; }

/* What every kernel call starts from: the resolved params and the state
 * prepare made. */
static sl_code dpc_call_begin(sl_kernel_args *a, dpc_config *cfg, dpc_state **st) {
  sl_code rc = dpc_config_resolve(a->node, cfg, a->err);
  if (rc) return rc;
  *st = dpc_state_of(a);
  return *st ? SL_OK : sl_fail(a->err, SL_ERR_INTERNAL, "dpc: kernel called before prepare");
}

static sl_code dpc_cpu(sl_kernel_args *a) {
  sl_node *n = (sl_node *)a->node;
  dpc_config cfg;
  dpc_state *st = NULL;
  sl_code rc = dpc_call_begin(a, &cfg, &st);
  if (rc) return rc;
  const double *cr = a->in[0], *cc = a->in[1];
  int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  sl_dpc_fit_result fit;
  sl_dpc_fit_run(&st->fit, a->backend, cr, cc, cfg.fit_angle ? NULL : &cfg.angle, &fit);
  int t = dpc_transpose(&cfg, &fit);
  double theta = fit.angle[t], sign = 1;
  parallax_source ps = {.a = a, .cfg = &cfg, .st = st, .segments = a->in[3], .offsets = a->in[4]};
  if (cfg.fit_angle && has_adf(n)) {
    const void *adf = a->in[2];
    for (int64_t k = 0; k < rows * cols; k++)
      st->adf[k] = n->in[2].dtype == SL_U64 ? (double)((const uint64_t *)adf)[k] : ((const double *)adf)[k];
    adf_job aj = {cr, cc, st->adf, rows, cols, st->adf_of_row};
    a->backend->ops->parallel_for(a->backend, rows, FIELD_ROWS_GRAIN, adf_rows, &aj);
    double totals[SL_DPC_ADF_SUMS];
    sl_dpc_adf_totals(st->adf_of_row, rows, totals);
    theta = dpc_adf_angle(n, &cfg, &fit, totals, rows * cols, &ps, &t);
    if (ps.rc != SL_OK) return ps.rc; /* out of memory for the parallax's state */
  } else if (cfg.fit_angle) {
    sl_dpc_branch_sums v = branch_sums_of(st, a->backend, theta, t, rows * cols);
    const double score = sl_dpc_branch_score(&v, rows * cols);
    const sl_dpc_parallax_result *px = fabs(score) < SKEWNESS_SURE ? parallax_when_needed(&ps) : NULL;
    if (ps.rc != SL_OK) return ps.rc;
    if (px) {
      theta = skewness_to_parallax(n, &cfg, px, theta, &t, score);
    } else {
      sign = dpc_branch_skewness(n, &theta, score);
      const double axis = fabs(score) >= SKEWNESS_SURE ? parallax_axis(n, &ps, theta, t, 0) : theta;
      if (ps.rc != SL_OK) return ps.rc;
      if (axis != theta) theta = axis, sign = 1; /* the fields from the parallax's axis */
    }
  }
  note_parallax_unused(n, &cfg);
  /* Rotated field: c_scan = T^t R(-theta) c_det (the skewness rule's other
   * branch: the fitted angle's field negated, exactly). */
  double th = (sign < 0 ? fit.angle[t] : theta) * M_PI / 180.0;
  field_job fj = {cr, cc, rows, cols, sign * cos(th), sign * sin(th), t,
                  a->out[0], a->out[1], a->out[4], a->out[5], st->div2_of_row};
  sl_backend *b = a->backend;
  b->ops->parallel_for(b, rows, FIELD_ROWS_GRAIN, rotate_rows, &fj);
  b->ops->parallel_for(b, rows, FIELD_ROWS_GRAIN, curl_div_rows, &fj);
  ((double *)a->out[2])[0] = dpc_report(n, &cfg, t, theta, &fit, mean_div2(st, rows, cols));
  ((uint8_t *)a->out[3])[0] = (uint8_t)t;
  return SL_OK;
}

#ifdef SLUICE_HAVE_CUDA
/* CUDA without cuFFT: the host path on host copies of the device inputs and
 * outputs (the downloads wait for the inputs' producers; the upload of a
 * pageable buffer is staged before it returns, so the copies can go at
 * once), with a note saying why. */
static sl_code dpc_cuda_on_host(sl_kernel_args *a, const char *why) {
  sl_node *n = (sl_node *)a->node;
  const sl_backend_ops *o = a->backend->ops;
  size_t np = (size_t)sl_desc_elems(&n->in[0]), bytes = np * sizeof(double);
  /* in 0, 1, 2 (adf: 8-byte items either way), out 0, 1, 4, 5, then out 2 and 3. */
  double *h = malloc(7 * bytes + 16);
  if (!h) return sl_fail(a->err, SL_ERR_NOMEM, "dpc: out of memory for host copies of the field");
  sl_kernel_args ha = *a;
  static const int fields_out[4] = {0, 1, 4, 5};
  int n_in = has_adf(n) ? 3 : 2;
  sl_code rc = SL_OK;
  for (int k = 0; k < n_in && rc == SL_OK; k++) {
    rc = o->download(a->backend, h + (size_t)k * np, a->in[k], bytes, a->err);
    ha.in[k] = h + (size_t)k * np;
  }
  dpc_state *st = dpc_state_of(a);
  if (rc == SL_OK && parallax_segments(n)) { /* the parallax's inputs, into the state's host copies */
    rc = segments_download(a, st);
    ha.in[3] = st->segments_host, ha.in[4] = st->offsets_host;
  }
  for (int k = 0; k < 4; k++) ha.out[fields_out[k]] = h + (size_t)(3 + k) * np;
  ha.out[2] = h + 7 * np;
  ha.out[3] = (uint8_t *)(h + 7 * np + 1);
  if (rc == SL_OK) rc = dpc_cpu(&ha);
  for (int k = 0; k < 4 && rc == SL_OK; k++)
    rc = o->upload(a->backend, a->out[fields_out[k]], ha.out[fields_out[k]], bytes, a->err);
  if (rc == SL_OK) rc = o->upload(a->backend, a->out[2], ha.out[2], sizeof(double), a->err);
  if (rc == SL_OK) rc = o->upload(a->backend, a->out[3], ha.out[3], 1, a->err);
  free(h);
  if (rc == SL_OK) sl_node_note(n, "backend", "ran on the host (FFTW): %s", why);
  return rc;
}

/* On the device (shaders/cuda/stem/dpc.h): the spectra and ring sums there,
 * the fit's algebra here (the host's own code on the device's sums), the
 * fields and the branch rule's phase there. */
static sl_code dpc_cuda(sl_kernel_args *a) {
  sl_node *n = (sl_node *)a->node;
  dpc_config cfg;
  dpc_state *st = NULL;
  sl_code rc = dpc_call_begin(a, &cfg, &st);
  if (rc) return rc;
  int64_t rows = n->in[0].dims[0], cols = n->in[0].dims[1];
  const bool adf = has_adf(n);
  const sl_cuda_dpc_params cp = {.rows = rows, .cols = cols, .adf_u64 = adf && n->in[2].dtype == SL_U64,
                                 .device_state = sl_glue_device_state(a)};
  bool on_device = false;
  char why[512] = "";
  const bool adf_fit = adf && cfg.fit_angle;
  /* The totals go where the host pass leaves them (block 0); the ADF
   * matched filter's sums per row where the host's go. */
  rc = sl_cuda_dpc_rings(&cp, a, st->fit.ring_sums, adf_fit ? st->adf_of_row : NULL, &on_device, why, sizeof why);
  if (rc != SL_OK) return rc;
  if (!on_device) return dpc_cuda_on_host(a, why);
  sl_dpc_fit_result fit;
  sl_dpc_fit_solve(&st->fit, cfg.fit_angle ? NULL : &cfg.angle, &fit);
  int t = dpc_transpose(&cfg, &fit);
  double theta = fit.angle[t], sign = 1;
  parallax_source ps = {.a = a, .cfg = &cfg, .st = st, .on_device = true, .device = &cp};
  if (adf_fit) {
    double totals[SL_DPC_ADF_SUMS];
    sl_dpc_adf_totals(st->adf_of_row, rows, totals);
    theta = dpc_adf_angle(n, &cfg, &fit, totals, rows * cols, &ps, &t);
    if (ps.rc != SL_OK) return ps.rc;
  }
  double th = theta * M_PI / 180.0;
  sl_dpc_branch_sums v = {0, 0};
  const bool skewness = cfg.fit_angle && !adf;
  rc = sl_cuda_dpc_fields(&cp, a, cos(th), sin(th), t, skewness, st->div2_of_row, &v);
  if (rc != SL_OK) return rc;
  const double score = skewness ? sl_dpc_branch_score(&v, rows * cols) : 0;
  const sl_dpc_parallax_result *px = skewness && fabs(score) < SKEWNESS_SURE ? parallax_when_needed(&ps) : NULL;
  if (ps.rc != SL_OK) return ps.rc;
  if (px) { /* the parallax decides: the fields again */
    theta = skewness_to_parallax(n, &cfg, px, theta, &t, score);
    th = theta * M_PI / 180.0;
    rc = sl_cuda_dpc_fields(&cp, a, cos(th), sin(th), t, false, st->div2_of_row, &v);
    if (rc != SL_OK) return rc;
  } else if (skewness) {
    sign = dpc_branch_skewness(n, &theta, score);
    const double axis = fabs(score) >= SKEWNESS_SURE ? parallax_axis(n, &ps, theta, t, 0) : theta;
    if (ps.rc != SL_OK) return ps.rc;
    if (axis != theta) { /* the parallax's axis: the fields again */
      theta = axis, sign = 1, th = theta * M_PI / 180.0;
      rc = sl_cuda_dpc_fields(&cp, a, cos(th), sin(th), t, false, st->div2_of_row, &v);
      if (rc != SL_OK) return rc;
    }
  }
  note_parallax_unused(n, &cfg);
  theta = dpc_report(n, &cfg, t, theta, &fit, mean_div2(st, rows, cols));
  return sl_cuda_dpc_finish(&cp, a, sign < 0, theta, t);
}
#endif

static const sl_port_def dpc_inputs[] = {
    {"com_row", "whole f64 [R, C]: centre of mass, detector rows (scan mean removed)", "pixels",
     false},
    {"com_col", "whole f64 [R, C]: centre of mass, detector columns (scan mean removed)",
     "pixels", false},
    {"adf", "optional whole f64 or u64 [R, C]: an annular dark-field image of the same scan "
     "(columns bright); gives the angle over the full turn and its 180-degree branch", "counts", true},
    {"segments", "optional whole u64 [n, R, C]: images of the BF disk's segments (bf_segments); "
     "with the probe params, their parallax decides the branch where the CoM cannot", "counts", true},
    {"segment_offsets", "optional whole f64 [n, 3]: the segments' offsets in disk radii and pixel "
     "counts (bf_segments), with 'segments'", "radii", true},
};
static const sl_port_def dpc_outputs[] = {
    {"com_row_rot", "whole f64 [R, C]: the field along scan rows, T^t R(-theta) c", "pixels",
     false},
    {"com_col_rot", "whole f64 [R, C]: the field along scan columns", "pixels", false},
    {"rotation_deg", "f64 [1]: theta in (-180, 180], detector = R(theta) T^t scan", "degrees",
     false},
    {"transpose", "u8 [1]: 1 when the scan's (row, col) are swapped", "flag (1 = swapped)", false},
    {"curl", "whole f64 [R, C]: curl d(col)/d(row) - d(row)/d(col) of the rotated field",
     "pixels per scan step", false},
    {"divergence", "whole f64 [R, C]: divergence of the rotated field", "pixels per scan step",
     false},
};

const sl_node_desc sl_node_dpc = {
    .type = "dpc",
    .doc = "Differential phase contrast: fits the scan-to-detector rotation (and transpose) of a "
           "centre-of-mass field by least curl and rotates the field into scan coordinates.",
    SL_PARAMS_DESC(dpc_params),
    .inputs = dpc_inputs, .n_inputs = SL_COUNT_OF(dpc_inputs),
    .outputs = dpc_outputs, .n_outputs = SL_COUNT_OF(dpc_outputs),
    .infer = dpc_infer, .cost = dpc_cost, .prepare = dpc_prepare, .release = dpc_release,
    .kernel = {[SL_BACKEND_CPU] = dpc_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(dpc_cuda)},
    .device_warm_up_begin = sl_cufft_warm_up_begin, .device_warm_up_wait = sl_cufft_warm_up_wait,
    .device_warm_up_done = sl_cufft_warm_up_done,
    .rate_variant = dpc_rate_variant,
    .scan_image_outputs = 0x33u /* com_row_rot, com_col_rot, curl, divergence */,
};
