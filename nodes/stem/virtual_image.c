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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/mask_file.h"
#include "nodes/common/stem_geom.h"
#include "nodes/common/stem_ports.h"
#include "shaders/cuda/sl_cuda.h"
#include "shaders/cuda/sl_cuda_detector.h"

typedef enum vi_kind { VI_BF, VI_ADF, VI_DF, VI_ANNULUS, VI_MASK } vi_kind;

typedef struct vi_span {
  int64_t offset; /* first pixel, r * W + c */
  int64_t length;
} vi_span;

/* Everything infer() checks, resolved to pixels. */
typedef struct vi_geom {
  vi_kind kind;
  int64_t h, w;
  double cr, cc;    /* centre, detector pixels */
  double radius;    /* BF disk radius, pixels (0 when unused) */
  double inner, outer; /* ring radii, pixels */
  double inner_p, outer_p; /* the params as given (in `units`) */
  int in_radii;     /* units: radii */
  int use_disk;     /* the `disk` input is connected */
  const char *mask_path;
} vi_geom;

typedef struct vi_state {
  vi_span *spans;
  int64_t n_spans;
  int64_t n_pixels; /* pixels in the mask */
  int64_t cap;      /* spans allocated */
  int built;        /* spans hold the region (with a disk input: of `disk`) */
  vi_geom g;
  double disk[3];   /* disk values the spans were built from */
} vi_state;

static sl_code vi_resolve(const sl_node *n, vi_geom *g, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check(x, err);
  if (rc) return rc;
  memset(g, 0, sizeof *g);
  g->h = x->dims[x->rank - 2];
  g->w = x->dims[x->rank - 1];

  const char *kind = sl_param_str(n, "kind");
  if (!strcmp(kind, "bf")) g->kind = VI_BF;
  else if (!strcmp(kind, "adf")) g->kind = VI_ADF;
  else if (!strcmp(kind, "df")) g->kind = VI_DF;
  else if (!strcmp(kind, "annulus")) g->kind = VI_ANNULUS;
  else if (!strcmp(kind, "mask")) g->kind = VI_MASK;
  else
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'kind' must be one of bf, adf, df, annulus, mask; got '%s'", kind);

  if ((rc = sl_stem_parse_center(n, g->h, g->w, &g->cr, &g->cc, err))) return rc;

  double radius, inner, outer;
  int in_radii;
  if ((rc = sl_stem_parse_radii(n, &radius, &inner, &outer, &in_radii, err))) return rc;

  g->in_radii = in_radii;
  g->inner_p = inner;
  g->outer_p = outer;
  g->use_disk = n->n_in > 1 && n->in[1].dtype != SL_DT_INVALID;
  if (g->use_disk) {
    if ((rc = sl_stem_check_disk_port(&n->in[1], err))) return rc;
    if (g->kind == VI_MASK)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "input 'disk' is not used with kind mask: connect it only for bf, adf, df "
                     "or annulus");
  }
  int need_radius = !g->use_disk && (g->kind == VI_BF || g->kind == VI_DF || g->kind == VI_ADF ||
                    (g->kind == VI_ANNULUS && in_radii));
  if (radius < 0 || (need_radius && radius <= 0))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'radius' (bright-field disk radius in pixels) must be > 0 for kind %s%s, "
                   "got %g",
                   kind, g->kind == VI_ANNULUS ? " with units radii" : "", radius);
  g->radius = radius;
  if (g->kind == VI_ADF || g->kind == VI_ANNULUS) {
    if ((rc = sl_stem_check_ring(inner, outer, err))) return rc;
    g->inner = in_radii ? inner * radius : inner;
    g->outer = in_radii ? outer * radius : outer;
  }
  g->mask_path = sl_param_str(n, "mask");
  if (g->kind == VI_MASK) {
    if (!g->mask_path || !g->mask_path[0])
      return sl_fail(err, SL_ERR_PIPELINE,
                     "param 'mask' (a .npy or .png file, or file.h5:/dataset) is required for "
                     "kind mask");
  } else if (g->mask_path && g->mask_path[0]) {
    return sl_fail(err, SL_ERR_PIPELINE, "param 'mask' is only used with kind mask (kind is %s)",
                   kind);
  }
  return SL_OK;
}

static sl_code vi_infer(sl_node *n, sl_error *err) {
  vi_geom g;
  sl_code rc = vi_resolve(n, &g, err);
  if (rc) return rc;
  if (g.use_disk)
    sl_node_note(n, "geometry", "centre and radius from input 'disk' at run time%s",
                 sl_param(n, "center")->n || sl_param_float(n, "radius") > 0
                     ? " (params 'center'/'radius' ignored)"
                     : "");
  if (g.kind == VI_MASK) { /* fail at plan time on a bad file, not mid-run */
    rc = sl_mask_file_read(g.mask_path, g.h, g.w, NULL, err);
    if (rc) return rc;
  }
  const sl_tensor_desc *x = &n->in[0];
  n->out[0] = sl_desc_make(SL_U64, x->stream_rank, x->dims, x->stream_rank);
  return SL_OK;
}

static void vi_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const vi_state *s = n->state;
  int64_t item = sl_desc_item_elems(&n->in[0]);
  int64_t px = s && s->built ? s->n_pixels : item; /* before prepare: an upper bound */
  c->bytes_read = positions * px * (int64_t)sl_dtype_size(n->in[0].dtype);
  c->bytes_written = positions * 8;
  c->ops = positions * px;
}

static void vi_release(sl_node *n) {
  vi_state *s = n->state;
  if (!s) return;
  free(s->spans);
  free(s);
  n->state = NULL;
}

/* Builds the spans of the region of `g` (or of mask `m` when not NULL). */
static void vi_build(vi_state *s, const vi_geom *g, const uint8_t *m) {
  s->n_spans = 0;
  s->n_pixels = 0;
  double r2 = g->radius * g->radius, in2 = g->inner * g->inner, out2 = g->outer * g->outer;
  for (int64_t r = 0; r < g->h; r++) {
    int64_t c0 = -1; /* start of the open run, -1 = none */
    for (int64_t c = 0; c <= g->w; c++) {
      int in = 0;
      if (c < g->w) {
        if (m) {
          in = m[r * g->w + c] != 0;
        } else {
          double d2 = sl_stem_d2(r, c, g->cr, g->cc);
          switch (g->kind) {
            case VI_BF: in = d2 <= r2; break;
            case VI_DF: in = d2 > r2; break;
            default: in = d2 >= in2 && d2 < out2; break; /* ADF, annulus */
          }
        }
      }
      if (in && c0 < 0) c0 = c;
      if (!in && c0 >= 0) {
        s->spans[s->n_spans].offset = r * g->w + c0;
        s->spans[s->n_spans].length = c - c0;
        s->n_spans++;
        s->n_pixels += c - c0;
        c0 = -1;
      }
    }
  }
  s->built = 1;
}

/* With a disk input: the region in pixels from the disk values. */
static void vi_geom_from_disk(vi_geom *g, const double *disk) {
  g->cr = disk[0];
  g->cc = disk[1];
  g->radius = disk[2];
  if (g->kind == VI_ADF || g->kind == VI_ANNULUS) {
    g->inner = g->in_radii ? g->inner_p * g->radius : g->inner_p;
    g->outer = g->in_radii ? g->outer_p * g->radius : g->outer_p;
  }
}

static sl_code vi_prepare(sl_node *n, sl_error *err) {
  vi_geom g;
  sl_code rc = vi_resolve(n, &g, err);
  if (rc) return rc;
  uint8_t *m = NULL;
  if (g.kind == VI_MASK && (rc = sl_mask_file_read(g.mask_path, g.h, g.w, &m, err)) != SL_OK)
    return rc;
  vi_state *s = calloc(1, sizeof *s);
  /* At most ceil(W/2) runs per row. */
  int64_t cap = g.h * ((g.w + 1) / 2);
  if (s) s->spans = malloc((size_t)(cap ? cap : 1) * sizeof *s->spans);
  if (!s || !s->spans) {
    free(m);
    if (s) free(s);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for the mask spans");
  }
  s->cap = cap;
  s->g = g;
  s->g.mask_path = NULL;
  if (!g.use_disk) vi_build(s, &g, m);
  free(m);
  n->state = s;
  return SL_OK;
}

/* For the CUDA kernels: the spans prepare() built, {offset, length} pairs. */
const int64_t *sl_virtual_image_spans(const sl_node *n, int64_t *n_spans) {
  const vi_state *s = n->state;
  _Static_assert(sizeof(vi_span) == 2 * sizeof(int64_t), "vi_span layout");
  if (!s || !s->built || s->g.use_disk) return NULL;
  *n_spans = s->n_spans;
  return (const int64_t *)s->spans;
}

typedef struct vi_job {
  const sl_kernel_args *a;
  const vi_state *s;
  int64_t item;
} vi_job;

#define VI_RANGE(NAME, T)                                                    \
  static void NAME(void *ctx, int64_t begin, int64_t end, int worker) {     \
    const vi_job *j = ctx;                                                   \
    const T *x = j->a->in[0];                                                \
    uint64_t *y = j->a->out[0];                                              \
    const vi_span *sp = j->s->spans;                                         \
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
VI_RANGE(vi_range_u8, uint8_t)
VI_RANGE(vi_range_u16, uint16_t)
VI_RANGE(vi_range_u32, uint32_t)
#undef VI_RANGE

static sl_code vi_cpu(sl_kernel_args *a) {
  vi_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_image: kernel called before prepare");
  if (s->g.use_disk) {
    const double *disk = a->in[1];
    if (!disk) return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_image: input 'disk' has no data");
    sl_code rc = sl_stem_check_disk_values(disk, s->g.h, s->g.w, a->err);
    if (rc) return rc;
    if (!s->built || memcmp(s->disk, disk, sizeof s->disk) != 0) {
      vi_geom_from_disk(&s->g, disk);
      vi_build(s, &s->g, NULL);
      memcpy(s->disk, disk, sizeof s->disk);
    }
  } else if (!s->built) {
    return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_image: region not built");
  }
  vi_job j = {a, s, sl_desc_item_elems(&a->node->in[0])};
  sl_range_fn fn = a->node->in[0].dtype == SL_U8    ? vi_range_u8
                   : a->node->in[0].dtype == SL_U16 ? vi_range_u16
                                                    : vi_range_u32;
  /* ~64k pixels of work per range at least. */
  int64_t grain = 65536 / (s->n_pixels + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

static const sl_param_def vi_params[] = {
    {"kind", SL_PT_STRING, "bf",
     "bf (disk), adf or annulus (ring inner..outer), df (outside the disk), mask (file)"},
    {"center", SL_PT_LIST, "[]",
     "disk centre [row, col] in detector pixels; empty = detector centre ((H-1)/2, (W-1)/2)"},
    {"radius", SL_PT_FLOAT, "0",
     "bright-field disk radius in pixels; required (> 0) for bf, df, adf and annulus in radii "
     "unless input 'disk' is connected"},
    {"inner", SL_PT_FLOAT, "1", "adf/annulus inner radius (in `units`); included"},
    {"outer", SL_PT_FLOAT, "2", "adf/annulus outer radius (in `units`); excluded"},
    {"units", SL_PT_STRING, "radii", "units of inner/outer: radii (of `radius`) or pixels"},
    {"mask", SL_PT_PATH, "",
     "kind mask: H x W mask, nonzero = included: .npy (u1/b1/u2/i4/f4/f8, C order), grayscale "
     ".png, or file.h5:/dataset (u8/u16/u32/f32/f64)"},
};
static const sl_port_def vi_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false},
    {"disk", "optional whole f64 [4] (centre_row, centre_col, radius, residual) from disk_fit; "
             "replaces 'center' and 'radius'", "pixels", true}};
static const sl_port_def vi_out[] = {
    {"image", "streamed u64 [scan... |]: exact sum of the masked pixels of each frame", "counts",
     false}};

const sl_node_desc sl_node_virtual_image = {
    .type = "virtual_image",
    .doc = "Virtual detector image: exact u64 sum of each frame over a BF disk, ADF ring, DF "
           "region or mask file (.npy, PNG, HDF5); optional disk_fit input for the geometry. Flagged pixels (dtype max) are summed as stored.",
    .params = vi_params, .n_params = (int)(sizeof vi_params / sizeof vi_params[0]),
    .inputs = vi_in, .n_inputs = 2,
    .outputs = vi_out, .n_outputs = 1,
    .infer = vi_infer, .cost = vi_cost,
    .prepare = vi_prepare, .release = vi_release,
    .kernel = {[SL_BACKEND_CPU] = vi_cpu,
               [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_virtual_image)},
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_virtual_image_finalize)},
};
