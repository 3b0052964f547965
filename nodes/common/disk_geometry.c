/* Disk and annulus geometry of the virtual-image nodes (see disk_geometry.h). */
#include "nodes/common/disk_geometry.h"

#include <math.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "nodes/common/frame_ports.h"

const sl_port_def sl_disk_geometry_inputs[2] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false},
    {"disk", "optional whole f64 [4] (centre_row, centre_col, radius, residual) from disk_fit; "
             "replaces 'center' and 'radius'", "pixels", true},
};

sl_code sl_disk_port_check(const sl_tensor_desc *d, sl_error *err) {
  if (d->dtype != SL_F64 || d->stream_rank != 0 || sl_desc_elems(d) != 4)
    return sl_input_refuse(err, "disk",
                           "a whole f64 [4] (centre_row, centre_col, radius, residual) as written "
                           "by disk_fit",
                           d);
  return SL_OK;
}

sl_code sl_disk_values_check(const double *disk, int64_t h, int64_t w, sl_error *err) {
  if (!isfinite(disk[0]) || !isfinite(disk[1]) || !isfinite(disk[2]) || !(disk[2] > 0))
    return sl_fail(err, SL_ERR_FORMAT,
                   "input 'disk' holds centre (%g, %g) radius %g: needs a finite centre and a "
                   "radius > 0",
                   disk[0], disk[1], disk[2]);
  if (disk[0] < -(double)h || disk[0] > 2.0 * (double)h || disk[1] < -(double)w ||
      disk[1] > 2.0 * (double)w)
    return sl_fail(err, SL_ERR_FORMAT,
                   "input 'disk': centre (%g, %g) is far outside the %lldx%lld detector", disk[0],
                   disk[1], (long long)h, (long long)w);
  return SL_OK;
}

sl_code sl_ring_check(double inner, double outer, sl_error *err) {
  if (inner < 0) return sl_fail(err, SL_ERR_PIPELINE, "param 'inner' must be >= 0, got %g", inner);
  if (outer <= inner)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'outer' (%g) must be greater than 'inner' (%g)",
                   outer, inner);
  return SL_OK;
}

/* Param 'center' for an H x W detector into (*cr, *cc). */
static sl_code center_parse(const sl_param_value *c, int64_t h, int64_t w, double *cr,
                            double *cc, sl_error *err) {
  *cr = (double)(h - 1) / 2.0;
  *cc = (double)(w - 1) / 2.0;
  if (c->n == 0) return SL_OK;
  if (c->n != 2)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'center' must be [row, col] (2 numbers) or empty, got %zu items", c->n);
  double v[2];
  for (int i = 0; i < 2; i++)
    if (!sl_parse_f64(c->strs[i], &v[i]) || !isfinite(v[i]))
      return sl_fail(err, SL_ERR_PIPELINE, "param 'center': item %d '%s' is not a finite number",
                     i, c->strs[i]);
  if (v[0] < -(double)h || v[0] > 2.0 * (double)h || v[1] < -(double)w || v[1] > 2.0 * (double)w)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'center' [%g, %g] is far outside the %lldx%lld detector", v[0], v[1],
                   (long long)h, (long long)w);
  *cr = v[0];
  *cc = v[1];
  return SL_OK;
}

static sl_code finite_check(const char *name, double v, sl_error *err) {
  if (!isfinite(v))
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' must be a finite number", name);
  return SL_OK;
}

sl_code sl_disk_geometry_resolve(const sl_node *n, const sl_disk_params *p, sl_disk_geometry *g,
                                 sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check(x, err);
  if (rc) return rc;
  memset(g, 0, sizeof *g);
  g->h = x->dims[x->rank - 2];
  g->w = x->dims[x->rank - 1];
  g->t = x->dtype;
  g->use_disk = n->n_in > 1 && n->in[1].dtype != SL_DT_INVALID;
  if (g->use_disk && (rc = sl_disk_port_check(&n->in[1], err))) return rc;
  if ((rc = center_parse(p->center, g->h, g->w, &g->cr, &g->cc, err)) ||
      (rc = finite_check("radius", p->radius, err)) ||
      (rc = finite_check("inner", p->inner, err)) || (rc = finite_check("outer", p->outer, err)))
    return rc;
  g->radius = p->radius;
  g->inner_p = p->inner;
  g->outer_p = p->outer;
  g->in_radii = p->units == SL_RING_UNITS_RADII;
  g->params_ignored = g->use_disk && (p->center->n > 0 || p->radius > 0);
  return SL_OK;
}

void sl_disk_geometry_note(sl_node *n, const sl_disk_geometry *g) {
  if (g->use_disk)
    sl_node_note(n, "geometry", "centre and radius from input 'disk' at run time%s",
                 g->params_ignored ? " (params 'center'/'radius' ignored)" : "");
}

sl_code sl_disk_region_update(const sl_kernel_args *a, const sl_disk_geometry *g,
                              sl_disk_region *r, sl_disk_region_build build, void *state) {
  const char *type = a->node->desc->type;
  if (!g->use_disk)
    return r->built ? SL_OK : sl_fail(a->err, SL_ERR_INTERNAL, "%s: region not built", type);
  const double *disk = a->in[1];
  if (!disk) return sl_fail(a->err, SL_ERR_INTERNAL, "%s: input 'disk' has no data", type);
  sl_code rc = sl_disk_values_check(disk, g->h, g->w, a->err);
  if (rc) return rc;
  if (r->built && memcmp(r->disk, disk, sizeof r->disk) == 0) return SL_OK;
  r->built = false;
  if ((rc = build(state, disk, a->err))) return rc;
  memcpy(r->disk, disk, sizeof r->disk);
  r->built = true;
  return SL_OK;
}
