/* virtual_detectors: bright field (BF), annular dark field (ADF) and dark
 * field (DF) images from ONE sweep over each frame, exact in u64.
 *
 * A pixel at squared distance d2 from the disk centre belongs to
 *   BF  if d2 <= r^2,   DF if d2 > r^2 (the complement of BF),
 *   ADF if inner^2 <= d2 < outer^2 (may overlap BF when inner < r),
 * the same predicates, computed the same way (stem_geom.h), as
 * virtual_image's bf, df and adf kinds, so the images are bit for bit equal.
 *
 * The frame, flattened in C order, is cut into runs of consecutive pixels of
 * one class (BF, BF+ADF, DF, DF+ADF); runs continue across row ends, so a
 * frame is a handful of runs per row that crosses the disk or the ring and
 * one long DF run elsewhere. Runs are capped at 65536 pixels so that a u8 or
 * u16 run sums exactly in a u32 register (65536 * 65535 < 2^32), which the
 * compiler vectorises with widening adds. The per-frame work is a tight loop
 * over runs reading each pixel once: the whole frame streams through at
 * memory bandwidth; positions run in parallel.
 *
 * With the optional `disk` input (from disk_fit) the centre and radius come
 * from it at run time and the runs are built on the first kernel call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/core/util.h"
#include "../../engine/graph/graph.h"
#include "../../engine/graph/node.h"
#include "stem_geom.h"
#include "stem_ports.h"
#include "shaders/cuda/sl_cuda.h"
#include "shaders/cuda/sl_cuda_detector.h"

#define VD_MAX_RUN 65536

enum { VD_BF = 1, VD_ADF = 2 }; /* class bits; DF = not BF */

typedef struct vd_run {
  uint32_t len;
  uint32_t cls; /* 0 DF, 1 BF, 2 DF+ADF, 3 BF+ADF */
} vd_run;

typedef struct vd_geom {
  int64_t h, w;
  double cr, cc, radius;
  double inner_p, outer_p; /* as given, in `units` */
  int in_radii;
  int use_disk;
} vd_geom;

typedef struct vd_state {
  vd_geom g;
  vd_run *runs;
  int64_t n_runs;
  int64_t counts[4]; /* pixels per class */
  int built;
  double disk[3];
} vd_state;

static sl_code vd_resolve(const sl_node *n, vd_geom *g, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check(x, err);
  if (rc) return rc;
  memset(g, 0, sizeof *g);
  g->h = x->dims[x->rank - 2];
  g->w = x->dims[x->rank - 1];
  g->use_disk = n->n_in > 1 && n->in[1].dtype != SL_DT_INVALID;
  if (g->use_disk && (rc = sl_stem_check_disk_port(&n->in[1], err))) return rc;
  if ((rc = sl_stem_parse_center(n, g->h, g->w, &g->cr, &g->cc, err))) return rc;
  double radius, inner, outer;
  if ((rc = sl_stem_parse_radii(n, &radius, &inner, &outer, &g->in_radii, err))) return rc;
  if (radius < 0 || (!g->use_disk && radius <= 0))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'radius' (bright-field disk radius in pixels) must be > 0 unless input "
                   "'disk' is connected, got %g",
                   radius);
  if ((rc = sl_stem_check_ring(inner, outer, err))) return rc;
  g->radius = radius;
  g->inner_p = inner;
  g->outer_p = outer;
  return SL_OK;
}

static sl_code vd_infer(sl_node *n, sl_error *err) {
  vd_geom g;
  sl_code rc = vd_resolve(n, &g, err);
  if (rc) return rc;
  if (g.use_disk)
    sl_node_note(n, "geometry", "centre and radius from input 'disk' at run time%s",
                 sl_param(n, "center")->n || g.radius > 0 ? " (params 'center'/'radius' ignored)"
                                                          : "");
  const sl_tensor_desc *x = &n->in[0];
  for (int k = 0; k < 3; k++)
    n->out[k] = sl_desc_make(SL_U64, x->stream_rank, x->dims, x->stream_rank);
  return SL_OK;
}

static void vd_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *x = &n->in[0];
  const vd_state *s = n->state;
  c->bytes_read = positions * sl_desc_item_bytes(x); /* every pixel is BF or DF */
  c->bytes_written = positions * 3 * 8;
  c->ops = positions * sl_desc_item_elems(x);
  int64_t runs = s && s->built ? s->n_runs : sl_desc_item_elems(x);
  c->state_bytes = runs * (int64_t)sizeof(vd_run);
}

/* Class of every pixel, pass 0 counts the runs, pass 1 stores them. */
static sl_code vd_build(vd_state *s, double cr, double cc, double radius, sl_error *err) {
  const vd_geom *g = &s->g;
  double inner = g->in_radii ? g->inner_p * radius : g->inner_p;
  double outer = g->in_radii ? g->outer_p * radius : g->outer_p;
  double r2 = radius * radius, in2 = inner * inner, out2 = outer * outer;
  int64_t n_runs = 0;
  for (int pass = 0; pass < 2; pass++) {
    n_runs = 0;
    int64_t len = 0;
    uint32_t cur = 0;
    memset(s->counts, 0, sizeof s->counts);
    for (int64_t r = 0; r < g->h; r++)
      for (int64_t c = 0; c < g->w; c++) {
        double d2 = sl_stem_d2(r, c, cr, cc);
        uint32_t cls = (d2 <= r2 ? VD_BF : 0) | (d2 >= in2 && d2 < out2 ? VD_ADF : 0);
        s->counts[cls]++;
        if (len > 0 && (cls != cur || len == VD_MAX_RUN)) {
          if (pass) s->runs[n_runs] = (vd_run){(uint32_t)len, cur};
          n_runs++;
          len = 0;
        }
        cur = cls;
        len++;
      }
    if (len > 0) {
      if (pass) s->runs[n_runs] = (vd_run){(uint32_t)len, cur};
      n_runs++;
    }
    if (pass == 0) {
      vd_run *runs = realloc(s->runs, (size_t)n_runs * sizeof *runs);
      if (!runs) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld detector runs",
                                (long long)n_runs);
      s->runs = runs;
    }
  }
  s->n_runs = n_runs;
  s->built = 1;
  return SL_OK;
}

static void vd_release(sl_node *n) {
  vd_state *s = n->state;
  if (!s) return;
  free(s->runs);
  free(s);
  n->state = NULL;
}

static sl_code vd_prepare(sl_node *n, sl_error *err) {
  vd_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  sl_code rc = vd_resolve(n, &s->g, err);
  if (rc == SL_OK && !s->g.use_disk) rc = vd_build(s, s->g.cr, s->g.cc, s->g.radius, err);
  if (rc) {
    free(s->runs);
    free(s);
    return rc;
  }
  n->state = s;
  return SL_OK;
}

/* For the CUDA kernels: the class runs prepare() built, {len, cls} pairs. */
const uint32_t *sl_virtual_detectors_runs(const sl_node *n, int64_t *n_runs) {
  const vd_state *s = n->state;
  _Static_assert(sizeof(vd_run) == 2 * sizeof(uint32_t), "vd_run layout");
  if (!s || !s->built || s->g.use_disk) return NULL;
  *n_runs = s->n_runs;
  return (const uint32_t *)s->runs;
}

typedef struct vd_job {
  const sl_kernel_args *a;
  const vd_state *s;
  int64_t item;
} vd_job;

/* Exact: a run of at most 65536 pixels of u8/u16 fits in u32. */
#define VD_RANGE(NAME, T, ACC)                                               \
  SL_HOT_CLONES static void NAME(void *ctx, int64_t begin, int64_t end, int worker) {     \
    const vd_job *j = ctx;                                                   \
    const T *x = j->a->in[0];                                                \
    uint64_t *bf = j->a->out[0], *adf = j->a->out[1], *df = j->a->out[2];    \
    const vd_run *runs = j->s->runs;                                         \
    const int64_t nr = j->s->n_runs;                                         \
    for (int64_t p = begin; p < end; p++) {                                  \
      const T *restrict q = x + p * j->item;                                 \
      uint64_t acc[4] = {0, 0, 0, 0};                                        \
      for (int64_t k = 0; k < nr; k++) {                                     \
        const uint32_t len = runs[k].len;                                    \
        ACC s = 0;                                                           \
        for (uint32_t i = 0; i < len; i++) s += q[i];                        \
        acc[runs[k].cls] += s;                                               \
        q += len;                                                            \
      }                                                                      \
      bf[p] = acc[1] + acc[3];                                               \
      adf[p] = acc[2] + acc[3];                                              \
      df[p] = acc[0] + acc[2];                                               \
    }                                                                        \
  }
VD_RANGE(vd_range_u8, uint8_t, uint32_t)
VD_RANGE(vd_range_u16, uint16_t, uint32_t)
VD_RANGE(vd_range_u32, uint32_t, uint64_t)
#undef VD_RANGE

static sl_code vd_cpu(sl_kernel_args *a) {
  vd_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: kernel called before prepare");
  if (s->g.use_disk) {
    const double *disk = a->in[1];
    if (!disk)
      return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: input 'disk' has no data");
    sl_code rc = sl_stem_check_disk_values(disk, s->g.h, s->g.w, a->err);
    if (rc) return rc;
    if (!s->built || memcmp(s->disk, disk, sizeof s->disk) != 0) {
      if ((rc = vd_build(s, disk[0], disk[1], disk[2], a->err))) return rc;
      memcpy(s->disk, disk, sizeof s->disk);
    }
  } else if (!s->built) {
    return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: runs not built");
  }
  vd_job j = {a, s, sl_desc_item_elems(&a->node->in[0])};
  sl_dtype t = a->node->in[0].dtype;
  sl_range_fn fn = t == SL_U8 ? vd_range_u8 : t == SL_U16 ? vd_range_u16 : vd_range_u32;
  int64_t grain = 65536 / (j.item + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

static const sl_param_def vd_params[] = {
    {"center", SL_PT_LIST, "[]",
     "disk centre [row, col] in detector pixels; empty = detector centre ((H-1)/2, (W-1)/2)"},
    {"radius", SL_PT_FLOAT, "0",
     "bright-field disk radius in pixels; required (> 0) unless input 'disk' is connected"},
    {"inner", SL_PT_FLOAT, "1", "ADF inner radius (in `units`); included"},
    {"outer", SL_PT_FLOAT, "2", "ADF outer radius (in `units`); excluded"},
    {"units", SL_PT_STRING, "radii", "units of inner/outer: radii (of the disk radius) or pixels"},
};
static const sl_port_def vd_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false},
    {"disk", "optional whole f64 [4] (centre_row, centre_col, radius, residual) from disk_fit; "
             "replaces 'center' and 'radius'", "pixels", true},
};
static const sl_port_def vd_out[] = {
    {"bf", "streamed u64 [scan... |]: sum over the disk (d <= radius)", "counts", false},
    {"adf", "streamed u64 [scan... |]: sum over the ring inner <= d < outer", "counts", false},
    {"df", "streamed u64 [scan... |]: sum outside the disk (d > radius)", "counts", false},
};

const sl_node_desc sl_node_virtual_detectors = {
    .type = "virtual_detectors",
    .doc = "BF, ADF and DF images (exact u64) from one sweep over each frame; geometry from "
           "params or a disk_fit input.",
    .params = vd_params, .n_params = (int)(sizeof vd_params / sizeof vd_params[0]),
    .inputs = vd_in, .n_inputs = 2,
    .outputs = vd_out, .n_outputs = 3,
    .infer = vd_infer, .cost = vd_cost,
    .prepare = vd_prepare, .release = vd_release,
    .kernel = {[SL_BACKEND_CPU] = vd_cpu,
               [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_virtual_detectors)},
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sl_cuda_virtual_detectors_finalize)},
};
