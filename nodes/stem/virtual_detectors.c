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
 *    row's end, its already counted lanes weighted 0. Where the CPU has
 *    AVX-512 BW/VNNI (sl_madd_avx512_used), its AVX-512 variant: 32 pixels
 *    a vector with vpdpwssd, the row's last partial vector by a masked load,
 *    the band's weights made in registers from two lane masks a vector.
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
 * computed only when read (sl_node.out_used): then the AVX2 sweep (frames
 * up to 720 wide) and its AVX-512 variant add each vector's Sc madd and Sr
 * from the running row totals (one sweep over each frame for everything);
 * for wider frames frame_moments.c's sweep gives S, Sr, Sc, the AVX2 path
 * sums BF and ADF over the band only, and DF = S - BF; either way a
 * pipeline with virtual images and a centre of mass needs no second node
 * sweeping the frames.
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
 * radii ring). No BF or ADF pixel: an empty band.
 *
 * Its AVX-512 variant (vw 32, sl_madd_avx512_used when the classes are
 * built): vector v holds columns 32v..32v+31 (the last one masked at the
 * row's end), and each vector of the band has two 32-bit lane masks, BF then
 * ADF, instead of 64 bytes of weights: 8 bytes a vector, so that the table
 * stays in L1 (the int16 weights of a 192 x 192 frame's band were 43 KB read
 * from L2 beside the frame) and the sweep makes each vector's 0/1 weights
 * from its mask in a register. */
typedef struct madd_band {
  int64_t r0, r1, lo, hi;
  int vw;    /* pixels a vector: 16 (AVX2, int16 weights) or 32 (AVX-512, lane masks) */
  void *wts; /* int16_t weights (vw 16) or uint32_t masks (vw 32) */
  int16_t ones_t[16]; /* vw 16: S weights of the last partial vector of a row */
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

/* Whether the AVX2 sweep can add the moments too (madd_sweep's `mom`): a
 * row's Sc madds (weights <= W - 1) fit an int32 lane: W up to 720;
 * wider frames take frame_moments.c's sweep, which spills within a row. */
static bool madd_mom_fits(int64_t w) { return sl_madd_spill_every(w - 1) >= (w + 15) / 16; }

/* Bytes of the band's weights or masks. */
static int64_t band_bytes(const madd_band *b) {
  return (b->r1 - b->r0) * (b->hi - b->lo) * (b->vw == 32 ? 8 : 64);
}

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
  /* every pixel is classified once; the moments add two weighted sums,
   * which cost about a fifth more where one sweep adds them (u16 frames up
   * to 720 wide on AVX2 and AVX-512, and CUDA's masked sums: AVX-512 19-20
   * ms against 23.6 ms at 128 x 128, AVX2 3.9 against 3.6 us a 192 x 192
   * frame in L2, the H200's stem_products node 12.8-13.9 ms against
   * virtual_image's 11.9) and about as much again where they are a sweep
   * of their own (frame_moments.c: other dtypes and widths, the portable
   * path). Calibrate's samples all read the moments, so this ratio is what
   * sets the estimate of a run that does not (counted as twice, it put
   * virtual_image's node at 1.3-1.5x its estimate and stem_products' at
   * 0.6-1.1x). */
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  const int64_t fifths = !moments_used(n) ? 5 : madd_fits(x->dtype, w) && madd_mom_fits(w) ? 6 : 10;
  c->ops = positions * sl_desc_item_elems(x) * fifths / 5;
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
 * of the full vectors (vw 16: the last vector of a row of W % 16 columns is
 * loaded ending at the row's end) or lies past the row's end (vw 32: masked). */
static inline int64_t lane_column(int vw, int64_t w, int64_t v, int64_t l) {
  if (vw == 32) return 32 * v + l < w ? 32 * v + l : -1;
  int64_t full = w / 16;
  if (v < full) return 16 * v + l;
  int64_t c = w - 16 + l;
  return c >= 16 * full ? c : -1;
}

/* The sweep's band and weights or masks (madd_band, vw pixels a vector),
 * from the same classes. */
static sl_code band_build(detectors_state *s, const class_radii *k, int vw, sl_error *err) {
  const int64_t h = s->g.h, w = s->g.w, nvec = (w + vw - 1) / vw;
  madd_band *b = &s->band;
  b->vw = vw;
  b->r0 = h, b->r1 = 0, b->lo = nvec, b->hi = 0;
  for (int64_t r = 0; r < h; r++)
    for (int64_t v = 0; v < nvec; v++)
      for (int64_t l = 0; l < vw; l++) {
        int64_t c = lane_column(vw, w, v, l);
        if (c >= 0 && pixel_class(k, r, c)) { /* BF or ADF */
          if (r < b->r0) b->r0 = r;
          b->r1 = r + 1;
          if (v < b->lo) b->lo = v;
          if (v + 1 > b->hi) b->hi = v + 1;
        }
      }
  if (b->r1 <= b->r0) b->r0 = b->r1 = 0, b->lo = b->hi = w / vw;
  void *tab = realloc(b->wts, (size_t)(band_bytes(b) > 0 ? band_bytes(b) : 64));
  if (!tab)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld bytes of detector weights",
                   (long long)band_bytes(b));
  b->wts = tab;
  int16_t *wts = tab;
  uint32_t *masks = tab;
  for (int64_t r = b->r0; r < b->r1; r++)
    for (int64_t v = b->lo; v < b->hi; v++) {
      uint32_t bf = 0, adf = 0;
      for (int64_t l = 0; l < vw; l++) {
        int64_t c = lane_column(vw, w, v, l);
        uint32_t cls = c >= 0 ? pixel_class(k, r, c) : 0;
        if (vw == 32) {
          bf |= (cls & CLASS_BF ? 1u : 0u) << l;
          adf |= (cls & CLASS_ADF ? 1u : 0u) << l;
        } else {
          wts[l] = cls & CLASS_BF ? 1 : 0;
          wts[16 + l] = cls & CLASS_ADF ? 1 : 0;
        }
      }
      if (vw == 32) *masks++ = bf, *masks++ = adf;
      else wts += 32;
    }
  for (int64_t l = 0; l < 16; l++) b->ones_t[l] = lane_column(16, w, w / 16, l) >= 0 ? 1 : 0;
  return SL_OK;
}

/* sl_disk_region_build: the classes of the disk (centre_row, centre_col,
 * radius): the runs always, the band for frames the AVX2 sweep takes (its
 * AVX-512 layout where that variant runs). */
static sl_code classes_build(void *state, const double disk[3], sl_error *err) {
  detectors_state *s = state;
  const sl_disk_geometry *g = &s->g;
  double radius = disk[2], inner = sl_ring_radius_px(g, g->inner_p, radius),
         outer = sl_ring_radius_px(g, g->outer_p, radius);
  class_radii k = {disk[0], disk[1], radius * radius, inner * inner, outer * outer};
  sl_code rc = runs_build(s, &k, err);
  if (rc == SL_OK && madd_fits(g->t, g->w))
    rc = band_build(s, &k, sl_madd_avx512_used() ? 32 : 16, err);
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

/* {S, BF, ADF} of one u16 frame, and with `mom` {Sr, Sc} too, biased
 * (madd_u16.h). With `total` every row adds its ones-madds to S; without
 * (S comes from the moments sweep) only the band's rows and vectors are
 * read and out[0] is 0. With `mom` (and `total`; madd_mom_fits) every
 * vector also adds its madd against Sc's column weights cw
 * (sl_frame_moments_madd_weights), and Sr comes from the running row
 * totals as in frame_moments.c: within a block of n rows from r0 the S
 * total T is added into P once per row and sum_r r * S_r = (r0 + n) * T - P,
 * so stem_products' moments and images take one sweep a frame, as on
 * AVX-512. Every BF/ADF madd lane has weights <= 1, so an accumulator takes
 * a block of rows of at most k1 vectors between spills (with `mom`, blocks
 * short enough for P and Sc too). Always inlined into its callers, so
 * `total` and `mom` are constants there. */
SL_MADD_AVX2 static inline __attribute__((always_inline)) void madd_sweep(
    const uint16_t *q, const detectors_state *st, const int16_t *cw, bool total, bool mom,
    uint64_t out[5]) {
  const int64_t h = st->g.h, w = st->g.w, full = w / 16, nvec = (w + 15) / 16;
  const madd_band *bd = &st->band;
  const int64_t lo = bd->lo, mid = bd->hi < full ? bd->hi : full;
  const bool tail = nvec > full, tail_in_band = bd->hi > full;
  const __m256i ones = _mm256_set1_epi16(1), zero = _mm256_setzero_si256();
  const int64_t k1 = sl_madd_spill_every(1), kc = sl_madd_spill_every(w - 1);
  const int64_t per_row = total ? nvec : bd->hi - bd->lo > 0 ? bd->hi - bd->lo : 1;
  int64_t rb = 1;
  if (mom)
    while ((rb + 1) * (rb + 2) / 2 * nvec <= k1 && (rb + 1) * nvec <= kc) rb++;
  else
    rb = k1 / per_row > 0 ? k1 / per_row : 1;
  const int64_t first = total ? 0 : bd->r0, last = total ? h : bd->r1;
  const int16_t *wt = bd->wts;
  const __m256i col_t = mom ? _mm256_loadu_si256((const __m256i *)(cw + 16 * full + 16)) : zero;
  __m256i s64 = zero, b64 = zero, a64 = zero, c64 = zero;
  uint64_t s = 0, sr = 0; /* with mom: biased, wrapping */
/* S (and with mom Sc) of n plain vectors from x, column vector v0 on. */
#define PLAIN_RUN(x, v0, n)                                                 \
  do {                                                                      \
    if (mom) sl_madd_run_sc(x, cw + 16 * (v0), n, &ts, &tc);                \
    else madd_ones(x, n, &ts);                                              \
  } while (0)
  for (int64_t r0 = first; r0 < last; r0 += rb) {
    const int64_t r1 = last - r0 < rb ? last : r0 + rb;
    __m256i ts = zero, tb = zero, ta = zero, tc = zero, p = zero;
    for (int64_t r = r0; r < r1; r++) {
      const uint16_t *row = q + r * w;
      const bool band = r >= bd->r0 && r < bd->r1;
      if (!band) { /* outside the band: S (and the moments) only */
        PLAIN_RUN(row, 0, full);
      } else {
        if (total) PLAIN_RUN(row, 0, lo);
        for (int64_t v = lo; v < mid; v++, wt += 32) {
          __m256i x = sl_madd_bias(row + 16 * v);
          if (total) ts = _mm256_add_epi32(ts, _mm256_madd_epi16(x, ones));
          if (mom) tc = sl_madd_acc(tc, x, cw + 16 * v);
          tb = sl_madd_acc(tb, x, wt);
          ta = sl_madd_acc(ta, x, wt + 16);
        }
        if (total) PLAIN_RUN(row + 16 * mid, mid, full - mid);
      }
      if (tail && (total || (band && tail_in_band))) { /* the last, partial vector */
        __m256i x = sl_madd_bias(row + w - 16);
        if (total) ts = sl_madd_acc(ts, x, bd->ones_t);
        if (mom) tc = _mm256_add_epi32(tc, _mm256_madd_epi16(x, col_t));
        if (band && tail_in_band) {
          tb = sl_madd_acc(tb, x, wt);
          ta = sl_madd_acc(ta, x, wt + 16);
          wt += 32;
        }
      }
      if (mom) p = _mm256_add_epi32(p, ts);
    }
    if (mom) {
      c64 = sl_madd_spill(c64, tc);
      const uint64_t sb = sl_madd_hsum32(ts), pb = sl_madd_hsum32(p);
      s += sb;
      sr += (uint64_t)r1 * sb - pb; /* r1 = r0 + n */
    } else {
      s64 = sl_madd_spill(s64, ts);
    }
    b64 = sl_madd_spill(b64, tb);
    a64 = sl_madd_spill(a64, ta);
  }
#undef PLAIN_RUN
  out[0] = mom ? s : sl_madd_hsum64(s64);
  out[1] = sl_madd_hsum64(b64);
  out[2] = sl_madd_hsum64(a64);
  out[3] = sr;
  out[4] = sl_madd_hsum64(c64);
}

/* The biases of the sweeps' sums {S, BF, ADF, Sr, Sc}: 32768 times the sum
 * of each sum's weights (madd_u16.h): pixel counts, and for Sr and Sc the
 * sums of the row and column indices over the frame. */
static void sweep_biases(const detectors_state *st, uint64_t bias[5]) {
  const uint64_t uh = (uint64_t)st->g.h, uw = (uint64_t)st->g.w;
  const int64_t *n = st->counts;
  bias[0] = 32768u * uh * uw;
  bias[1] = 32768u * (uint64_t)(n[CLASS_BF] + n[CLASS_BF | CLASS_ADF]);
  bias[2] = 32768u * (uint64_t)(n[CLASS_ADF] + n[CLASS_BF | CLASS_ADF]);
  bias[3] = 32768u * uw * (uh * (uh - 1) / 2);
  bias[4] = 32768u * uh * (uw * (uw - 1) / 2);
}

/* Frame p's outputs from its biased sums m = {S, BF, ADF, Sr, Sc}: BF,
 * ADF, DF = S - BF, and with the moments S, Sr, Sc. */
static inline void sweep_emit(const detectors_job *j, int64_t p, const uint64_t m[5],
                              const uint64_t bias[5]) {
  uint64_t *const *o = (uint64_t *const *)j->a->out;
  const uint64_t s = m[0] + bias[0];
  o[0][p] = m[1] + bias[1];
  o[1][p] = m[2] + bias[2];
  o[2][p] = s - o[0][p];
  if (j->moments) o[3][p] = s, o[4][p] = m[3] + bias[3], o[5][p] = m[4] + bias[4];
}

/* BF, ADF and DF = S - BF of u16 frames; S from the frame (one sweep for
 * all), or from the moments outputs when they are read (frames too wide for
 * madd_mom_sum_u16). */
SL_MADD_AVX2 static void madd_sum_u16(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const detectors_job *j = ctx;
  const detectors_state *st = j->s;
  const uint16_t *x = j->a->in[0];
  uint64_t *bf = j->a->out[0], *adf = j->a->out[1], *df = j->a->out[2];
  const uint64_t *moments_s = j->moments ? j->a->out[3] : NULL;
  uint64_t bias[5];
  sweep_biases(st, bias);
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[5];
    if (moments_s) madd_sweep(x + p * j->item, st, NULL, false, false, m);
    else madd_sweep(x + p * j->item, st, NULL, true, false, m);
    const uint64_t s = moments_s ? moments_s[p] : m[0] + bias[0];
    bf[p] = m[1] + bias[1];
    adf[p] = m[2] + bias[2];
    df[p] = s - bf[p];
  }
}

/* BF, ADF, DF and the moments S, Sr, Sc of u16 frames (madd_mom_fits) from
 * one AVX2 sweep a frame. */
SL_MADD_AVX2 static void madd_mom_sum_u16(void *ctx, int64_t begin, int64_t end, int worker) {
  const detectors_job *j = ctx;
  const uint16_t *x = j->a->in[0];
  int16_t *cw = sl_worker_scratch(j->a, worker);
  sl_frame_moments_madd_weights(cw, j->s->g.w);
  uint64_t bias[5];
  sweep_biases(j->s, bias);
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[5];
    madd_sweep(x + p * j->item, j->s, cw, true, true, m);
    sweep_emit(j, p, m, bias);
  }
}

/* --- AVX-512: {S, BF, ADF} and, when the moments outputs are read, Sr and
 * Sc too, in one sweep over each frame (the band's vw 32 layout) --- */

/* The sums of one frame into m: {S, BF, ADF, Sr, Sc}, biased (madd_u16.h);
 * Sr and Sc only with `mom`. Every row: each vector's S (against ones) and
 * with `mom` its Sc (against the column weights); in the band's rows and
 * vectors also BF and ADF, against 0/1 weights made from the band's lane
 * masks. Sr as in frame_moments.c: within a block of n rows from r0 the
 * running S total T is added into P once per row and sum_r r * S_r =
 * (r0 + n) * T - P. `wide` (Sc's weights so large that a row's vectors
 * exceed its int32 bound, W > 1024): Sc spilled after every vector. Three
 * accumulators (chains) of each sum, a row's vectors dealt among them, so
 * that vpdpwssd's latency does not bind: a 192-wide row of six vectors
 * puts two on each chain, a chain's latency (about 5 cycles) twice a row
 * against twelve vpdpwssd issued two a cycle (with two chains the sweep
 * waited on them: 0.83 against 0.57 us a hot frame for S and Sc alone,
 * scratch microbenchmark on the dev VM's Xeon). Always inlined into its
 * callers, so `mom` and `wide` are constants there. */
SL_MADD_AVX512 static inline __attribute__((always_inline)) void sweep512(
    const uint16_t *q, const detectors_state *st, const int16_t *cw, bool mom, bool wide,
    uint64_t m[5]) {
  const int64_t h = st->g.h, w = st->g.w, full = w / 32, nvec = (w + 31) / 32;
  const madd_band *bd = &st->band;
  const int64_t lo = bd->lo, mid = bd->hi < full ? bd->hi : full;
  const bool tail = nvec > full, tail_in_band = bd->hi > full;
  const __mmask32 tmask = (__mmask32)((1u << (w % 32)) - 1u);
  const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
  /* Rows a block: T, P and the band sums (weights 1) within k1 vpdpwssd a
   * lane; Sc (weights <= W - 1) within kc, unless spilled every vector. */
  const int64_t k1 = sl_madd_spill_every(1), kc = sl_madd_spill_every(w - 1);
  int64_t rb = 1;
  if (mom)
    while ((rb + 1) * (rb + 2) / 2 * nvec <= k1 && (wide || (rb + 1) * nvec <= kc)) rb++;
  else
    rb = k1 / nvec > 1 ? k1 / nvec : 1;
  const uint32_t *km = bd->wts;
  __m512i s64 = zero, b64 = zero, a64 = zero, c64 = zero;
  uint64_t sr = 0, s = 0; /* biased, wrapping */
/* One vector x of column vector v into the S chain T (and Sc chain C). */
#define PLAIN(x, v, T, C)                                                   \
  do {                                                                      \
    T = sl_madd512_acc(T, x, ones);                                         \
    if (mom) {                                                              \
      C = sl_madd512_acc(C, x, _mm512_loadu_si512(cw + 32 * (v)));          \
      if (wide) c64 = sl_madd512_spill(c64, C), C = zero;                   \
    }                                                                       \
  } while (0)
/* ... and its BF and ADF from the band's next two masks. */
#define BAND(x, v, T, C, B, A)                                              \
  do {                                                                      \
    PLAIN(x, v, T, C);                                                      \
    B = sl_madd512_acc(B, x, _mm512_maskz_mov_epi16(km[0], ones));          \
    A = sl_madd512_acc(A, x, _mm512_maskz_mov_epi16(km[1], ones));          \
    km += 2;                                                                \
  } while (0)
  for (int64_t r0 = 0; r0 < h; r0 += rb) {
    const int64_t n = h - r0 < rb ? h - r0 : rb;
    __m512i t0 = zero, t1 = zero, t2 = zero, c0 = zero, c1 = zero, c2 = zero, b0 = zero,
            b1 = zero, b2 = zero, a0 = zero, a1 = zero, a2 = zero, p = zero;
    for (int64_t r = r0; r < r0 + n; r++) {
      const uint16_t *row = q + r * w;
      const bool band = r >= bd->r0 && r < bd->r1;
      const int64_t e0 = band ? lo : full; /* plain vectors [0, e0), band [e0, e1) */
      const int64_t e1 = band ? mid : full;
      int64_t v = 0;
      for (; v + 3 <= e0; v += 3) {
        __m512i x = sl_madd512_bias(row + 32 * v), y = sl_madd512_bias(row + 32 * v + 32),
                z = sl_madd512_bias(row + 32 * v + 64);
        PLAIN(x, v, t0, c0);
        PLAIN(y, v + 1, t1, c1);
        PLAIN(z, v + 2, t2, c2);
      }
      /* A segment's last one or two vectors go to the chains its
       * neighbours use least (a band row of a 192-wide frame: two vectors
       * a chain). */
      for (; v < e0; v++) PLAIN(sl_madd512_bias(row + 32 * v), v, t2, c2);
      for (; v + 3 <= e1; v += 3) {
        __m512i x = sl_madd512_bias(row + 32 * v), y = sl_madd512_bias(row + 32 * v + 32),
                z = sl_madd512_bias(row + 32 * v + 64);
        BAND(x, v, t0, c0, b0, a0);
        BAND(y, v + 1, t1, c1, b1, a1);
        BAND(z, v + 2, t2, c2, b2, a2);
      }
      if (v < e1) {
        BAND(sl_madd512_bias(row + 32 * v), v, t1, c1, b1, a1);
        v++;
      }
      if (v < e1) {
        BAND(sl_madd512_bias(row + 32 * v), v, t0, c0, b2, a2);
        v++;
      }
      for (; v + 3 <= full; v += 3) {
        __m512i x = sl_madd512_bias(row + 32 * v), y = sl_madd512_bias(row + 32 * v + 32),
                z = sl_madd512_bias(row + 32 * v + 64);
        PLAIN(x, v, t0, c0);
        PLAIN(y, v + 1, t1, c1);
        PLAIN(z, v + 2, t2, c2);
      }
      if (v < full) {
        PLAIN(sl_madd512_bias(row + 32 * v), v, t0, c0);
        v++;
      }
      if (v < full) PLAIN(sl_madd512_bias(row + 32 * v), v, t1, c1);
      if (tail) { /* the last, partial vector */
        __m512i x = sl_madd512_bias_masked(row + 32 * full, tmask);
        if (band && tail_in_band) BAND(x, full, t2, c2, b0, a0);
        else PLAIN(x, full, t2, c2);
      }
      if (mom) p = _mm512_add_epi32(p, _mm512_add_epi32(_mm512_add_epi32(t0, t1), t2));
    }
#undef PLAIN
#undef BAND
    const __m512i t = _mm512_add_epi32(_mm512_add_epi32(t0, t1), t2);
    b64 = sl_madd512_spill(sl_madd512_spill(sl_madd512_spill(b64, b0), b1), b2);
    a64 = sl_madd512_spill(sl_madd512_spill(sl_madd512_spill(a64, a0), a1), a2);
    if (mom) {
      c64 = sl_madd512_spill(sl_madd512_spill(sl_madd512_spill(c64, c0), c1), c2);
      const uint64_t sb = sl_madd512_hsum32(t), pb = sl_madd512_hsum32(p);
      s += sb;
      sr += (uint64_t)(r0 + n) * sb - pb;
    } else {
      s64 = sl_madd512_spill(s64, t);
    }
  }
  m[0] = mom ? s : sl_madd512_hsum64(s64);
  m[1] = sl_madd512_hsum64(b64);
  m[2] = sl_madd512_hsum64(a64);
  m[3] = sr;
  m[4] = sl_madd512_hsum64(c64);
}

/* BF, ADF, DF = S - BF of u16 frames, and S, Sr, Sc when the moments
 * outputs are read, from one AVX-512 sweep a frame. */
SL_MADD_AVX512 static void madd512_sum_u16(void *ctx, int64_t begin, int64_t end, int worker) {
  const detectors_job *j = ctx;
  const detectors_state *st = j->s;
  const uint16_t *x = j->a->in[0];
  uint64_t bias[5];
  sweep_biases(st, bias);
  int16_t *cw = NULL;
  /* Sc's weights, column 32v + l in lane l of vector v, in the worker's
   * scratch (sl_frame_moments_scratch: the node's per_worker_bytes when the
   * moments are read) */
  if (j->moments) sl_frame_moments_madd512_weights(cw = sl_worker_scratch(j->a, worker), st->g.w);
  const bool wide = sl_madd_spill_every(st->g.w - 1) < (st->g.w + 31) / 32;
  for (int64_t p = begin; p < end; p++) {
    uint64_t m[5];
    const uint16_t *f = x + p * j->item;
    if (!j->moments) sweep512(f, st, NULL, false, false, m);
    else if (!wide) sweep512(f, st, cw, true, false, m);
    else sweep512(f, st, cw, true, true, m);
    sweep_emit(j, p, m, bias);
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
#if SL_MADD_X86
  /* One sweep for every output, the moments too: the AVX-512 sweep, or the
   * AVX2 one where a row's Sc fits its int32 lanes. */
  const bool one_sweep = path == SL_SIMD_AVX2 && s->band.wts &&
                         (s->band.vw == 32 || (j.moments && madd_mom_fits(s->g.w)));
  if (one_sweep) {
    if (j.moments && (!a->worker_scratch ||
                      a->worker_scratch_stride < sl_frame_moments_scratch(s->g.w)))
      return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: called without its scratch");
    fn = s->band.vw == 32 ? madd512_sum_u16 : madd_mom_sum_u16;
  } else {
    if (j.moments && (rc = sl_frame_moments_chunk(a, want, moments_emit, NULL))) return rc;
    if (path == SL_SIMD_AVX2 && s->band.wts) fn = madd_sum_u16;
  }
#else
  if (j.moments && (rc = sl_frame_moments_chunk(a, want, moments_emit, NULL))) return rc;
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
