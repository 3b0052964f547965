/* virtual_detectors: bright field (BF), annular dark field (ADF) and dark
 * field (DF) images from ONE sweep over each frame, exact in u64.
 *
 * A pixel at squared distance d2 from the disk centre belongs to
 *   BF  if d2 <= r^2,   DF if d2 > r^2 (the complement of BF),
 *   ADF if inner^2 <= d2 < outer^2 (may overlap BF when inner < r),
 * the same predicates, computed the same way (disk_geometry.h), as
 * virtual_image's bf, df and adf kinds, so the images are bit for bit equal.
 *
 * Two sweeps over the same classes, built once per geometry (classes_build):
 *  - u16 frames 16 to 32768 pixels wide on the AVX2 path (param 'simd',
 *    madd_u16.h): the frame total S from one vpmaddwd per 16 pixels against
 *    ones over every row, and BF and ADF from vpmaddwd against per-vector 0/1
 *    weights, only over the band of rows and vectors that holds every BF and
 *    ADF pixel (a disk and a ring cover a fraction of the rows and columns);
 *    DF = S - BF. The last partial vector of a row is loaded ending at the
 *    row's end, its already counted lanes weighted 0.
 *  - otherwise (u8, u32, other widths, the portable path): the frame,
 *    flattened in C order, is cut into runs of consecutive pixels of one
 *    class (BF, BF+ADF, DF, DF+ADF); runs continue across row ends, so a
 *    frame is a handful of runs per row that crosses the disk or the ring
 *    and one long DF run elsewhere. Runs are capped at 65536 pixels so that
 *    a u8 or u16 run sums exactly in a u32 register (65536 * 65535 < 2^32),
 *    which the compiler vectorises with widening adds; a tight loop over the
 *    runs reads each pixel once. The CUDA kernels get the same runs in
 *    their plain parameters (virtual_detectors_cuda_params).
 * Positions run in parallel.
 *
 * Outputs s, sr, sc (the frame moments S, Sr, Sc, for a com node) are
 * computed only when read (sl_node.out_used): then frame_moments.c's sweep
 * gives S, Sr, Sc, the AVX2 path sums BF and ADF over the band only, and
 * DF = S - BF, so a pipeline with virtual images and a centre of mass sweeps
 * each frame once.
 *
 * With the optional `disk` input (from disk_fit) the centre and radius come
 * from it at run time and the classes are built on the first kernel call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/disk_geometry.h"
#include "nodes/common/frame_moments.h"
#include "nodes/common/madd_u16.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/stem/virtual_detectors.h"

#define VIRTUAL_DETECTORS_PARAMS(P)                                                       \
  SL_DISK_GEOMETRY_PARAMS(P,                                                              \
                          "bright-field disk radius in pixels; required (> 0) unless "    \
                          "input 'disk' is connected",                                    \
                          "ADF")                                                          \
  P(ENUM, simd, "auto", SL_SIMD_PARAM_DOC, SL_SIMD_CHOICES)
SL_NODE_PARAMS(virtual_detectors_params, VIRTUAL_DETECTORS_PARAMS)

#define MAX_RUN 65536
#define MOMENTS_PORTS (7u << 3) /* s, sr, sc */

enum { CLASS_BF = 1, CLASS_ADF = 2 }; /* class bits; DF = not BF */

typedef struct class_run {
  uint32_t len;
  uint32_t cls; /* 0 DF, 1 BF, 2 DF+ADF, 3 BF+ADF */
} class_run;

/* The AVX2 sweep's layout: rows [r0, r1) and vectors [lo, hi) of a row
 * (vector v holds columns 16v..16v+15; with W % 16, vector W/16 is the row's
 * last 16 columns) bound every BF and ADF pixel; for each vector of that band,
 * row by row, 16 BF then 16 ADF weights (0/1). One band rather than a span per
 * row: every row of the band then runs the same loop counts, which the branch
 * predictor follows; it was faster than per-row spans despite its extra zero
 * weights (1.39 against 1.46 us per 192 x 192 frame with a disk and its 1-2
 * radii ring). No BF or ADF pixel: an empty band. */
typedef struct madd_band {
  int64_t r0, r1, lo, hi;
  int16_t *wts;
  int16_t ones_t[16]; /* S weights of the last partial vector of a row */
} madd_band;

typedef struct detectors_state {
  sl_disk_geometry g;
  class_run *runs;
  int64_t n_runs;
  int64_t counts[4];    /* pixels per class */
  madd_band band;       /* the AVX2 sweep's layout; band.wts NULL when it does not apply */
  sl_disk_region region; /* runs (and band) hold the classes (with a disk input: of that disk) */
} detectors_state;

static const sl_port_def virtual_detectors_outputs[] = {
    {"bf", "streamed u64 [scan... |]: sum over the disk (d <= radius)", "counts", false},
    {"adf", "streamed u64 [scan... |]: sum over the ring inner <= d < outer", "counts", false},
    {"df", "streamed u64 [scan... |]: sum outside the disk (d > radius)", "counts", false},
    {"s", "streamed u64 [scan... |]: S = sum of the frame (computed only when read)", "counts",
     false},
    {"sr", "streamed u64 [scan... |]: Sr = sum of row index * pixel (only when read)",
     "counts*pixels", false},
    {"sc", "streamed u64 [scan... |]: Sc = sum of column index * pixel (only when read)",
     "counts*pixels", false},
};

/* Whether the AVX2 sweep takes these frames: u16, and at least one full
 * vector per row (the last partial one is loaded ending at the row's end);
 * up to 32768 columns like the moments sweep (a row of at most 2048 vectors,
 * so at least 15 rows between spills). */
static bool madd_fits(sl_dtype t, int64_t w) { return t == SL_U16 && w >= 16 && w <= 32768; }

/* Bytes of the band's weights. */
static int64_t band_bytes(const madd_band *b) { return (b->r1 - b->r0) * (b->hi - b->lo) * 64; }

static sl_code geometry_resolve(const sl_node *n, sl_disk_geometry *g, sl_error *err) {
  const virtual_detectors_params *p = virtual_detectors_params_of(n);
  sl_disk_params dp = {p->center, p->radius, p->inner, p->outer, p->units};
  sl_code rc = sl_disk_geometry_resolve(n, &dp, g, err);
  if (rc) return rc;
  if (g->radius < 0 || (!g->use_disk && g->radius <= 0))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'radius' (bright-field disk radius in pixels) must be > 0 unless input "
                   "'disk' is connected, got %g",
                   g->radius);
  return sl_ring_check(g->inner_p, g->outer_p, err);
}

static sl_code virtual_detectors_infer(sl_node *n, sl_error *err) {
  sl_disk_geometry g;
  sl_code rc = geometry_resolve(n, &g, err);
  if (rc) return rc;
  sl_disk_geometry_note(n, &g);
  const sl_tensor_desc *x = &n->in[0];
  for (int k = 0; k < SL_COUNT_OF(virtual_detectors_outputs); k++)
    n->out[k] = sl_desc_make(SL_U64, x->stream_rank, x->dims, x->stream_rank);
  return SL_OK;
}

/* Whether a run reads the moments outputs s, sr, sc (then one moments sweep
 * gives S, Sr, Sc and the BF/ADF sweep covers only the band: DF = S - BF). */
static bool moments_used(const sl_node *n) { return (n->out_used & MOMENTS_PORTS) != 0; }

static void virtual_detectors_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *x = &n->in[0];
  const detectors_state *s = n->state;
  c->bytes_read = positions * sl_desc_item_bytes(x); /* every pixel is BF or DF */
  c->bytes_written = positions * (moments_used(n) ? 6 : 3) * 8;
  if (moments_used(n)) c->per_worker_bytes = sl_frame_moments_scratch(x->dims[x->rank - 1]);
  /* every pixel is classified once; the moments add two weighted sums */
  c->ops = positions * sl_desc_item_elems(x) * (moments_used(n) ? 3 : 1);
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  if (s && s->region.built) {
    c->state_bytes = s->n_runs * (int64_t)sizeof(class_run);
    if (s->band.wts) c->state_bytes += band_bytes(&s->band);
  } else { /* at most one run per pixel, the whole frame in the band */
    c->state_bytes = sl_desc_item_elems(x) * (int64_t)sizeof(class_run);
    if (madd_fits(x->dtype, w)) c->state_bytes += h * ((w + 15) / 16) * 64;
  }
#ifdef SLUICE_HAVE_CUDA
  const sl_cuda_frame_shape f = sl_glue_frame_shape(x);
  c->device_state_bytes = sl_cuda_virtual_detectors_table_bytes(&f, sl_glue_input_present(n, 1));
#endif
}

/* The class of pixel (r, c) for one geometry (squared radii). */
typedef struct class_radii {
  double cr, cc, r2, in2, out2;
} class_radii;

static inline uint32_t pixel_class(const class_radii *k, int64_t r, int64_t c) {
  double d2 = sl_disk_d2(r, c, k->cr, k->cc);
  return (d2 <= k->r2 ? CLASS_BF : 0) | (d2 >= k->in2 && d2 < k->out2 ? CLASS_ADF : 0);
}

/* Runs and pixel counts of every class: pass 0 counts the runs, pass 1
 * stores them. */
static sl_code runs_build(detectors_state *s, const class_radii *k, sl_error *err) {
  const sl_disk_geometry *g = &s->g;
  int64_t n_runs = 0;
  for (int pass = 0; pass < 2; pass++) {
    n_runs = 0;
    int64_t len = 0;
    uint32_t cur = 0;
    memset(s->counts, 0, sizeof s->counts);
    for (int64_t r = 0; r < g->h; r++)
      for (int64_t c = 0; c < g->w; c++) {
        uint32_t cls = pixel_class(k, r, c);
        s->counts[cls]++;
        if (len > 0 && (cls != cur || len == MAX_RUN)) {
          if (pass) s->runs[n_runs] = (class_run){(uint32_t)len, cur};
          n_runs++;
          len = 0;
        }
        cur = cls;
        len++;
      }
    if (len > 0) {
      if (pass) s->runs[n_runs] = (class_run){(uint32_t)len, cur};
      n_runs++;
    }
    if (pass == 0) {
      class_run *runs = realloc(s->runs, (size_t)n_runs * sizeof *runs);
      if (!runs) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld detector runs",
                                (long long)n_runs);
      s->runs = runs;
    }
  }
  s->n_runs = n_runs;
  return SL_OK;
}

/* Column of lane l of vector v of a row, or -1 when the lane repeats a column
 * of the full vectors (the last vector of a row of W % 16 columns). */
static inline int64_t lane_column(int64_t w, int64_t v, int64_t l) {
  int64_t full = w / 16;
  if (v < full) return 16 * v + l;
  int64_t c = w - 16 + l;
  return c >= 16 * full ? c : -1;
}

/* The AVX2 sweep's band and weights (madd_band), from the same classes. */
static sl_code band_build(detectors_state *s, const class_radii *k, sl_error *err) {
  const int64_t h = s->g.h, w = s->g.w, nvec = (w + 15) / 16;
  madd_band *b = &s->band;
  b->r0 = h, b->r1 = 0, b->lo = nvec, b->hi = 0;
  for (int64_t r = 0; r < h; r++)
    for (int64_t v = 0; v < nvec; v++)
      for (int64_t l = 0; l < 16; l++) {
        int64_t c = lane_column(w, v, l);
        if (c >= 0 && pixel_class(k, r, c)) { /* BF or ADF */
          if (r < b->r0) b->r0 = r;
          b->r1 = r + 1;
          if (v < b->lo) b->lo = v;
          if (v + 1 > b->hi) b->hi = v + 1;
        }
      }
  if (b->r1 <= b->r0) b->r0 = b->r1 = 0, b->lo = b->hi = w / 16;
  int16_t *wts = realloc(b->wts, (size_t)(band_bytes(b) > 0 ? band_bytes(b) : 64));
  if (!wts)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld bytes of detector weights",
                   (long long)band_bytes(b));
  b->wts = wts;
  for (int64_t r = b->r0; r < b->r1; r++)
    for (int64_t v = b->lo; v < b->hi; v++, wts += 32)
      for (int64_t l = 0; l < 16; l++) {
        int64_t c = lane_column(w, v, l);
        uint32_t cls = c >= 0 ? pixel_class(k, r, c) : 0;
        wts[l] = cls & CLASS_BF ? 1 : 0;
        wts[16 + l] = cls & CLASS_ADF ? 1 : 0;
      }
  for (int64_t l = 0; l < 16; l++) b->ones_t[l] = lane_column(w, w / 16, l) >= 0 ? 1 : 0;
  return SL_OK;
}

/* Classes for the disk at (cr, cc) of this radius: the runs always, the
 * band for frames the AVX2 sweep takes. */
/* sl_disk_region_build: the classes of the disk (centre_row, centre_col,
 * radius): the runs always, the band for frames the AVX2 sweep takes. */
static sl_code classes_build(void *state, const double disk[3], sl_error *err) {
  detectors_state *s = state;
  const sl_disk_geometry *g = &s->g;
  double radius = disk[2], inner = sl_ring_radius_px(g, g->inner_p, radius),
         outer = sl_ring_radius_px(g, g->outer_p, radius);
  class_radii k = {disk[0], disk[1], radius * radius, inner * inner, outer * outer};
  sl_code rc = runs_build(s, &k, err);
  if (rc == SL_OK && madd_fits(g->t, g->w)) rc = band_build(s, &k, err);
  return rc;
}

static void virtual_detectors_release(sl_node *n) {
  detectors_state *s = n->state;
  if (!s) return;
  free(s->runs);
  free(s->band.wts);
  free(s);
  n->state = NULL;
}

static sl_code virtual_detectors_prepare(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (moments_used(n) &&
      !sl_frame_moments_fit(x->dtype, x->dims[x->rank - 2], x->dims[x->rank - 1]))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "%s frames of %lldx%lld pixels: outputs s, sr, sc (sum r*I) may exceed u64",
                   sl_dtype_name(x->dtype), (long long)x->dims[x->rank - 2],
                   (long long)x->dims[x->rank - 1]);
  detectors_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  n->state = s;
  sl_code rc = geometry_resolve(n, &s->g, err);
  if (rc == SL_OK && !s->g.use_disk) {
    const double disk[3] = {s->g.cr, s->g.cc, s->g.radius};
    rc = classes_build(s, disk, err);
    s->region.built = rc == SL_OK;
  }
  if (rc) virtual_detectors_release(n);
  return rc;
}

typedef struct detectors_job {
  const sl_kernel_args *a;
  const detectors_state *s;
  int64_t item;
  bool moments; /* outputs s, sr, sc are read: out[3] holds S already */
} detectors_job;

/* Exact: a run of at most 65536 pixels of u8/u16 fits in u32. */
#define RUNS_SUM(NAME, T, ACC)                                                        \
  SL_HOT_CLONES static void NAME(void *ctx, int64_t begin, int64_t end, int worker) { \
    const detectors_job *j = ctx;                                                     \
    const T *x = j->a->in[0];                                                         \
    uint64_t *bf = j->a->out[0], *adf = j->a->out[1], *df = j->a->out[2];             \
    const class_run *runs = j->s->runs;                                               \
    const int64_t nr = j->s->n_runs;                                                  \
    for (int64_t p = begin; p < end; p++) {                                           \
      const T *restrict q = x + p * j->item;                                          \
      uint64_t acc[4] = {0, 0, 0, 0};                                                 \
      for (int64_t k = 0; k < nr; k++) {                                              \
        const uint32_t len = runs[k].len;                                             \
        ACC s = 0;                                                                    \
        for (uint32_t i = 0; i < len; i++) s += q[i];                                 \
        acc[runs[k].cls] += s;                                                        \
        q += len;                                                                     \
      }                                                                               \
      bf[p] = acc[1] + acc[3];                                                        \
      adf[p] = acc[2] + acc[3];                                                       \
      df[p] = acc[0] + acc[2];                                                        \
    }                                                                                 \
  }
RUNS_SUM(runs_sum_u8, uint8_t, uint32_t)
RUNS_SUM(runs_sum_u16, uint16_t, uint32_t)
RUNS_SUM(runs_sum_u32, uint32_t, uint64_t)
#undef RUNS_SUM

#if SL_MADD_X86
/* *t += madds of n vectors of 16 pixels from x against ones; two
 * accumulators so that the adds do not chain from one vector to the next. */
SL_MADD_AVX2 static inline void madd_ones(const uint16_t *x, int64_t n, __m256i *t) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i t0 = *t, t1 = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    t0 = _mm256_add_epi32(t0, _mm256_madd_epi16(sl_madd_bias(x + 16 * k), ones));
    t1 = _mm256_add_epi32(t1, _mm256_madd_epi16(sl_madd_bias(x + 16 * k + 16), ones));
  }
  if (k < n) t0 = _mm256_add_epi32(t0, _mm256_madd_epi16(sl_madd_bias(x + 16 * k), ones));
  *t = _mm256_add_epi32(t0, t1);
}

/* {S, BF, ADF} of one u16 frame, biased (madd_u16.h). With `total` every
 * row adds its ones-madds to S; without (S comes from the moments sweep) only
 * the band's rows and vectors are read and out[0] is 0. Every madd lane here
 * has weights <= 1, so an accumulator takes a block of rows of at most k1
 * vectors between spills. Always inlined into its two callers, so `total` is
 * a constant there. */
SL_MADD_AVX2 static inline __attribute__((always_inline)) void madd_sweep(
    const uint16_t *q, const detectors_state *st, bool total, uint64_t out[3]) {
  const int64_t h = st->g.h, w = st->g.w, full = w / 16, nvec = (w + 15) / 16;
  const madd_band *bd = &st->band;
  const int64_t lo = bd->lo, mid = bd->hi < full ? bd->hi : full;
  const bool tail = nvec > full, tail_in_band = bd->hi > full;
  const __m256i ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
  const int64_t per_row = total ? nvec : bd->hi - bd->lo > 0 ? bd->hi - bd->lo : 1;
  const int64_t rb = sl_madd_spill_every(1) / per_row > 0 ? sl_madd_spill_every(1) / per_row : 1;
  const int64_t first = total ? 0 : bd->r0, last = total ? h : bd->r1;
  const int16_t *wt = bd->wts;
  __m256i s64 = zero, b64 = zero, a64 = zero;
  for (int64_t r0 = first; r0 < last; r0 += rb) {
    const int64_t r1 = last - r0 < rb ? last : r0 + rb;
    __m256i ts = zero, tb = zero, ta = zero;
    for (int64_t r = r0; r < r1; r++) {
      const uint16_t *row = q + r * w;
      if (r < bd->r0 || r >= bd->r1) { /* outside the band: S only */
        madd_ones(row, full, &ts);
        if (tail) ts = sl_madd_acc(ts, sl_madd_bias(row + w - 16), bd->ones_t);
        continue;
      }
      if (total) madd_ones(row, lo, &ts);
      for (int64_t v = lo; v < mid; v++, wt += 32) {
        __m256i x = sl_madd_bias(row + 16 * v);
        if (total) ts = _mm256_add_epi32(ts, _mm256_madd_epi16(x, ones));
        tb = sl_madd_acc(tb, x, wt);
        ta = sl_madd_acc(ta, x, wt + 16);
      }
      if (total) madd_ones(row + 16 * mid, full - mid, &ts);
      if (tail && (total || tail_in_band)) { /* the last, partial vector */
        __m256i x = sl_madd_bias(row + w - 16);
        if (total) ts = sl_madd_acc(ts, x, bd->ones_t);
        if (tail_in_band) {
          tb = sl_madd_acc(tb, x, wt);
          ta = sl_madd_acc(ta, x, wt + 16);
          wt += 32;
        }
      }
    }
    s64 = sl_madd_spill(s64, ts);
    b64 = sl_madd_spill(b64, tb);
    a64 = sl_madd_spill(a64, ta);
  }
  out[0] = sl_madd_hsum64(s64);
  out[1] = sl_madd_hsum64(b64);
  out[2] = sl_madd_hsum64(a64);
}

/* BF, ADF and DF = S - BF of u16 frames; S from the frame (one sweep for
 * all), or from the moments outputs when they are read. */
SL_MADD_AVX2 static void madd_sum_u16(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const detectors_job *j = ctx;
  const detectors_state *st = j->s;
  const uint16_t *x = j->a->in[0];
  uint64_t *bf = j->a->out[0], *adf = j->a->out[1], *df = j->a->out[2];
  const uint64_t *moments_s = j->moments ? j->a->out[3] : NULL;
  /* The bias: 32768 times the sum of the weights, i.e. the pixel counts. */
  const uint64_t bias_s = 32768u * (uint64_t)(st->g.h * st->g.w);
  const int64_t *n = st->counts;
  const uint64_t bias_b = 32768u * (uint64_t)(n[CLASS_BF] + n[CLASS_BF | CLASS_ADF]);
  const uint64_t bias_a = 32768u * (uint64_t)(n[CLASS_ADF] + n[CLASS_BF | CLASS_ADF]);
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[3];
    if (moments_s) madd_sweep(x + p * j->item, st, false, m);
    else madd_sweep(x + p * j->item, st, true, m);
    const uint64_t s = moments_s ? moments_s[p] : m[0] + bias_s;
    bf[p] = m[1] + bias_b;
    adf[p] = m[2] + bias_a;
    df[p] = s - bf[p];
  }
}
#endif

/* The moments sweep's frames go to the outputs s, sr, sc. */
static void moments_emit(const sl_kernel_args *a, void *ctx, int64_t p, const uint64_t m[3]) {
  (void)ctx;
  ((uint64_t *)a->out[3])[p] = m[0];
  ((uint64_t *)a->out[4])[p] = m[1];
  ((uint64_t *)a->out[5])[p] = m[2];
}

static sl_code virtual_detectors_cpu(sl_kernel_args *a) {
  detectors_state *s = a->state ? a->state : a->node->state;
  if (!s)
    return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: kernel called before prepare");
  sl_code rc = sl_disk_region_update(a, &s->g, &s->region, classes_build, s);
  if (rc) return rc;
  const sl_simd want = (sl_simd)virtual_detectors_params_of(a->node)->simd;
  sl_simd path;
  if ((rc = sl_simd_resolve(want, &path, a->err))) return rc;
  detectors_job j = {a, s, sl_desc_item_elems(&a->node->in[0]), moments_used(a->node)};
  sl_dtype t = a->node->in[0].dtype;
  sl_range_fn fn = t == SL_U8 ? runs_sum_u8 : t == SL_U16 ? runs_sum_u16 : runs_sum_u32;
  if (j.moments && (rc = sl_frame_moments_chunk(a, want, moments_emit, NULL))) return rc;
#if SL_MADD_X86
  if (path == SL_SIMD_AVX2 && s->band.wts) fn = madd_sum_u16;
#endif
  int64_t grain = 65536 / (j.item + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node and the class runs
 * its prepare() built (none with a disk input: the device builds them). */
static sl_cuda_virtual_detectors_params virtual_detectors_cuda_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const virtual_detectors_params *vp = virtual_detectors_params_of(n);
  const detectors_state *s = n->state;
  _Static_assert(sizeof(class_run) == 2 * sizeof(uint32_t), "class_run layout");
  sl_cuda_virtual_detectors_params p = {.frames = sl_glue_frame_shape(&n->in[0]),
                                        .use_disk = sl_glue_input_present(n, 1),
                                        .ring_in_radii = vp->units == SL_RING_UNITS_RADII,
                                        .inner = vp->inner,
                                        .outer = vp->outer,
                                        .moments_read = (n->out_used & MOMENTS_PORTS) != 0,
                                        .device_state = sl_glue_device_state(a)};
  if (s && s->region.built && !s->g.use_disk) {
    p.runs = (const uint32_t *)s->runs;
    p.n_runs = s->n_runs;
  }
  return p;
}

static sl_code virtual_detectors_cuda(sl_kernel_args *a) {
  const sl_cuda_virtual_detectors_params p = virtual_detectors_cuda_params(a);
  return sl_cuda_virtual_detectors(&p, a);
}

static sl_code virtual_detectors_cuda_finalize(sl_kernel_args *a) {
  const sl_cuda_virtual_detectors_params p = virtual_detectors_cuda_params(a);
  return sl_cuda_virtual_detectors_finalize(&p, a);
}
#endif

const sl_node_desc sl_node_virtual_detectors = {
    .type = "virtual_detectors",
    .doc = "BF, ADF and DF images (exact u64) from one sweep over each frame; geometry from "
           "params or a disk_fit input.",
    SL_PARAMS_DESC(virtual_detectors_params),
    .inputs = sl_disk_geometry_inputs, .n_inputs = SL_COUNT_OF(sl_disk_geometry_inputs),
    .outputs = virtual_detectors_outputs,
    .n_outputs = SL_COUNT_OF(virtual_detectors_outputs),
    .infer = virtual_detectors_infer, .cost = virtual_detectors_cost,
    .prepare = virtual_detectors_prepare, .release = virtual_detectors_release,
    .kernel = {[SL_BACKEND_CPU] = virtual_detectors_cpu,
               [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(virtual_detectors_cuda)},
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(virtual_detectors_cuda_finalize)},
};
