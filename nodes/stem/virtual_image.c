/* virtual_image: a masked sum of every detector frame (bright field disk,
 * annular dark field ring, dark field outside the disk, or a mask read from a
 * .npy, PNG or HDF5 file), accumulated exactly in u64 (REFERENCE.md section 4).
 *
 * The mask is turned into row runs ("spans") once in prepare(); the kernel is
 * a loop over positions (parallel) and, per frame, over the spans. Pixels at
 * the dtype's maximum (the detector's flag value) are summed as stored: mask
 * correction is a separate node.
 *
 * With the optional `disk` input (disk_fit's (centre_row, centre_col, radius,
 * residual)), the centre and radius come from it instead of the params; they
 * are known only at run time, so the spans are built on the first kernel call
 * (and rebuilt if the disk values change, e.g. on a later run). */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/disk_geometry.h"
#include "nodes/common/mask_file.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/stem/virtual_image.h"

/* Param 'kind', in the order of its choices. */
typedef enum image_kind { KIND_BF, KIND_ADF, KIND_DF, KIND_ANNULUS, KIND_MASK } image_kind;
static const char *const kind_names[] = {"bf", "adf", "df", "annulus", "mask"};

#define VIRTUAL_IMAGE_PARAMS(P)                                                              \
  P(ENUM, kind, "bf",                                                                        \
    "bf (disk), adf or annulus (ring inner..outer), df (outside the disk), mask (file)",     \
    "bf|adf|df|annulus|mask")                                                                \
  SL_DISK_GEOMETRY_PARAMS(P,                                                                 \
                          "bright-field disk radius in pixels; required (> 0) for bf, df, "  \
                          "adf and annulus in radii unless input 'disk' is connected",       \
                          "adf/annulus")                                                     \
  P(PATH, mask, "",                                                                          \
    "kind mask: H x W mask, nonzero = included: .npy (u1/b1/u2/i4/f4/f8, C order), "         \
    "grayscale .png, or file.h5:/dataset (u8/u16/u32/f32/f64)",                              \
    NULL)
SL_NODE_PARAMS(virtual_image_params, VIRTUAL_IMAGE_PARAMS)

/* A run of pixels of one row in the region. */
typedef struct span {
  int64_t offset; /* first pixel, r * W + c */
  int64_t length;
} span;

/* Everything infer() checks, resolved to pixels. */
typedef struct image_geometry {
  sl_disk_geometry g;
  image_kind kind;
  double radius;       /* disk radius, pixels: g.radius, or the disk input's */
  double inner, outer; /* ring radii, pixels */
  const char *mask_path;
} image_geometry;

typedef struct image_state {
  span *spans;
  int64_t n_spans;
  int64_t n_pixels; /* pixels in the mask */
  int64_t cap;      /* spans allocated */
  sl_disk_region region; /* spans hold the region (with a disk input: of that disk) */
  image_geometry geom;
} image_state;

static bool is_ring(image_kind k) { return k == KIND_ADF || k == KIND_ANNULUS; }

/* What each kind needs beyond the shared geometry: no disk input for kind
 * mask; a radius for bf, df, adf and annulus in radii (unless the disk input
 * gives it); a ring for adf and annulus; a mask file for kind mask, and for
 * no other kind. */
static sl_code geometry_check(const image_geometry *geom, const char *mask, sl_error *err) {
  const sl_disk_geometry *g = &geom->g;
  const char *kind = kind_names[geom->kind];
  if (g->use_disk && geom->kind == KIND_MASK)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "input 'disk' is not used with kind mask: connect it only for bf, adf, df "
                   "or annulus");
  bool need_radius = !g->use_disk && geom->kind != KIND_MASK &&
                     (geom->kind != KIND_ANNULUS || g->in_radii);
  if (g->radius < 0 || (need_radius && g->radius <= 0))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'radius' (bright-field disk radius in pixels) must be > 0 for kind %s%s, "
                   "got %g",
                   kind, geom->kind == KIND_ANNULUS ? " with units radii" : "", g->radius);
  sl_code rc;
  if (is_ring(geom->kind) && (rc = sl_ring_check(g->inner_p, g->outer_p, err))) return rc;
  if (geom->kind == KIND_MASK && !mask[0])
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'mask' (a .npy or .png file, or file.h5:/dataset) is required for "
                   "kind mask");
  if (geom->kind != KIND_MASK && mask[0])
    return sl_fail(err, SL_ERR_PIPELINE, "param 'mask' is only used with kind mask (kind is %s)",
                   kind);
  return SL_OK;
}

/* The region of a disk (centre_row, centre_col, radius) in pixels. */
static void geometry_place(image_geometry *geom, double cr, double cc, double radius) {
  geom->g.cr = cr;
  geom->g.cc = cc;
  geom->radius = radius;
  if (is_ring(geom->kind)) {
    geom->inner = sl_ring_radius_px(&geom->g, geom->g.inner_p, radius);
    geom->outer = sl_ring_radius_px(&geom->g, geom->g.outer_p, radius);
  }
}

static sl_code geometry_resolve(const sl_node *n, image_geometry *geom, sl_error *err) {
  const virtual_image_params *p = virtual_image_params_of(n);
  sl_disk_params dp = {p->center, p->radius, p->inner, p->outer, p->units};
  memset(geom, 0, sizeof *geom);
  geom->kind = (image_kind)p->kind;
  geom->mask_path = p->mask;
  sl_code rc = sl_disk_geometry_resolve(n, &dp, &geom->g, err);
  if (rc == SL_OK) rc = geometry_check(geom, p->mask, err);
  if (rc == SL_OK) geometry_place(geom, geom->g.cr, geom->g.cc, geom->g.radius);
  return rc;
}

static sl_code virtual_image_infer(sl_node *n, sl_error *err) {
  image_geometry geom;
  sl_code rc = geometry_resolve(n, &geom, err);
  if (rc) return rc;
  sl_disk_geometry_note(n, &geom.g);
  if (geom.kind == KIND_MASK) { /* fail at plan time on a bad file, not mid-run */
    rc = sl_mask_file_read(geom.mask_path, geom.g.h, geom.g.w, NULL, err);
    if (rc) return rc;
  }
  const sl_tensor_desc *x = &n->in[0];
  n->out[0] = sl_desc_make(SL_U64, x->stream_rank, x->dims, x->stream_rank);
  return SL_OK;
}

static void virtual_image_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const image_state *s = n->state;
  int64_t item = sl_desc_item_elems(&n->in[0]);
  int64_t px = s && s->region.built ? s->n_pixels : item; /* before prepare: an upper bound */
  c->bytes_read = positions * px * (int64_t)sl_dtype_size(n->in[0].dtype);
  c->bytes_written = positions * 8;
  c->ops = positions * px;
#ifdef SLUICE_HAVE_CUDA
  const sl_cuda_frame_shape f = sl_glue_frame_shape(&n->in[0]);
  c->device_state_bytes = sl_cuda_virtual_image_table_bytes(&f, sl_glue_input_present(n, 1));
#endif
}

static void virtual_image_release(sl_node *n) {
  image_state *s = n->state;
  if (!s) return;
  free(s->spans);
  free(s);
  n->state = NULL;
}

/* Whether pixel (r, c) is in the region (not for kind mask). */
static bool geometry_has(const image_geometry *geom, int64_t r, int64_t c) {
  double d2 = sl_disk_d2(r, c, geom->g.cr, geom->g.cc), r2 = geom->radius * geom->radius;
  switch (geom->kind) {
    case KIND_BF: return d2 <= r2;
    case KIND_DF: return d2 > r2;
    default: /* ADF, annulus */
      return d2 >= geom->inner * geom->inner && d2 < geom->outer * geom->outer;
  }
}

/* Builds the spans of the region (or of mask `m` when not NULL). */
static void spans_build(image_state *s, const uint8_t *m) {
  const image_geometry *geom = &s->geom;
  const int64_t h = geom->g.h, w = geom->g.w;
  s->n_spans = 0;
  s->n_pixels = 0;
  for (int64_t r = 0; r < h; r++) {
    int64_t c0 = -1; /* start of the open run, -1 = none */
    for (int64_t c = 0; c <= w; c++) {
      bool in = c < w && (m ? m[r * w + c] != 0 : geometry_has(geom, r, c));
      if (in && c0 < 0) c0 = c;
      if (!in && c0 >= 0) {
        s->spans[s->n_spans].offset = r * w + c0;
        s->spans[s->n_spans].length = c - c0;
        s->n_spans++;
        s->n_pixels += c - c0;
        c0 = -1;
      }
    }
  }
}

/* sl_disk_region_build: the spans of the region around the disk input's values. */
static sl_code spans_build_for_disk(void *state, const double disk[3], sl_error *err) {
  (void)err;
  image_state *s = state;
  geometry_place(&s->geom, disk[0], disk[1], disk[2]);
  spans_build(s, NULL);
  return SL_OK;
}

static sl_code virtual_image_prepare(sl_node *n, sl_error *err) {
  image_geometry geom;
  sl_code rc = geometry_resolve(n, &geom, err);
  if (rc) return rc;
  uint8_t *m = NULL;
  if (geom.kind == KIND_MASK &&
      (rc = sl_mask_file_read(geom.mask_path, geom.g.h, geom.g.w, &m, err)) != SL_OK)
    return rc;
  image_state *s = calloc(1, sizeof *s);
  /* At most ceil(W/2) runs per row. */
  int64_t cap = geom.g.h * ((geom.g.w + 1) / 2);
  if (s) s->spans = malloc((size_t)(cap ? cap : 1) * sizeof *s->spans);
  if (!s || !s->spans) {
    free(m);
    free(s);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for the mask spans");
  }
  s->cap = cap;
  s->geom = geom;
  s->geom.mask_path = NULL;
  if (!geom.g.use_disk) {
    spans_build(s, m);
    s->region.built = true;
  }
  free(m);
  n->state = s;
  return SL_OK;
}

typedef struct image_job {
  const sl_kernel_args *a;
  const image_state *s;
  int64_t item;
} image_job;

#define SPANS_SUM(NAME, T)                                                   \
  static void NAME(void *ctx, int64_t begin, int64_t end, int worker) {      \
    (void)worker;                                                            \
    const image_job *j = ctx;                                                \
    const T *x = j->a->in[0];                                                \
    uint64_t *y = j->a->out[0];                                              \
    const span *sp = j->s->spans;                                            \
    int64_t ns = j->s->n_spans;                                              \
    for (int64_t p = begin; p < end; p++) {                                  \
      const T *f = x + p * j->item;                                          \
      uint64_t acc = 0;                                                      \
      for (int64_t k = 0; k < ns; k++) {                                     \
        const T *q = f + sp[k].offset;                                       \
        int64_t len = sp[k].length;                                          \
        for (int64_t i = 0; i < len; i++) acc += (uint64_t)q[i];             \
      }                                                                      \
      y[p] = acc;                                                            \
    }                                                                        \
  }
SPANS_SUM(spans_sum_u8, uint8_t)
SPANS_SUM(spans_sum_u16, uint16_t)
SPANS_SUM(spans_sum_u32, uint32_t)
#undef SPANS_SUM

static sl_code virtual_image_cpu(sl_kernel_args *a) {
  image_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_image: kernel called before prepare");
  sl_code rc = sl_disk_region_update(a, &s->geom.g, &s->region, spans_build_for_disk, s);
  if (rc) return rc;
  image_job j = {a, s, sl_desc_item_elems(&a->node->in[0])};
  sl_dtype t = a->node->in[0].dtype;
  sl_range_fn fn = t == SL_U8 ? spans_sum_u8 : t == SL_U16 ? spans_sum_u16 : spans_sum_u32;
  /* ~64k pixels of work per range at least. */
  int64_t grain = 65536 / (s->n_pixels + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

static const sl_port_def virtual_image_outputs[] = {
    {"image", "streamed u64 [scan... |]: exact sum of the masked pixels of each frame", "counts",
     false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node and the spans its
 * prepare() built (none with a disk input: the device builds the selection). */
static sl_cuda_virtual_image_params virtual_image_cuda_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const virtual_image_params *vp = virtual_image_params_of(n);
  const image_state *s = n->state;
  static const int cuda_kind[] = {[KIND_BF] = SL_CUDA_VIRTUAL_IMAGE_BF,
                                  [KIND_ADF] = SL_CUDA_VIRTUAL_IMAGE_ADF,
                                  [KIND_DF] = SL_CUDA_VIRTUAL_IMAGE_DF,
                                  [KIND_ANNULUS] = SL_CUDA_VIRTUAL_IMAGE_ANNULUS,
                                  [KIND_MASK] = SL_CUDA_VIRTUAL_IMAGE_ANNULUS /* never with a disk */};
  _Static_assert(sizeof(span) == 2 * sizeof(int64_t), "span layout");
  sl_cuda_virtual_image_params p = {.frames = sl_glue_frame_shape(&n->in[0]),
                                    .use_disk = sl_glue_input_present(n, 1),
                                    .kind = cuda_kind[vp->kind],
                                    .ring_in_radii = vp->units == SL_RING_UNITS_RADII,
                                    .inner = vp->inner,
                                    .outer = vp->outer,
                                    .device_state = sl_glue_device_state(a)};
  if (s && s->region.built && !s->geom.g.use_disk) {
    p.spans = (const int64_t *)s->spans;
    p.n_spans = s->n_spans;
  }
  return p;
}

static sl_code virtual_image_cuda(sl_kernel_args *a) {
  const sl_cuda_virtual_image_params p = virtual_image_cuda_params(a);
  return sl_cuda_virtual_image(&p, a);
}

static sl_code virtual_image_cuda_finalize(sl_kernel_args *a) {
  const sl_cuda_virtual_image_params p = virtual_image_cuda_params(a);
  return sl_cuda_virtual_image_finalize(&p, a);
}
#endif

const sl_node_desc sl_node_virtual_image = {
    .type = "virtual_image",
    .doc = "Virtual detector image: exact u64 sum of each frame over a BF disk, ADF ring, DF "
           "region or mask file (.npy, PNG, HDF5); optional disk_fit input for the geometry. "
           "Flagged pixels (dtype max) are summed as stored.",
    SL_PARAMS_DESC(virtual_image_params),
    .inputs = sl_disk_geometry_inputs, .n_inputs = SL_COUNT_OF(sl_disk_geometry_inputs),
    .outputs = virtual_image_outputs, .n_outputs = SL_COUNT_OF(virtual_image_outputs),
    .infer = virtual_image_infer, .cost = virtual_image_cost,
    .prepare = virtual_image_prepare, .release = virtual_image_release,
    .kernel = {[SL_BACKEND_CPU] = virtual_image_cpu,
               [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(virtual_image_cuda)},
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(virtual_image_cuda_finalize)},
};
