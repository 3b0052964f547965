/* Geometry params shared by the virtual-image family (see stem_geom.h). */
#include "nodes/common/stem_geom.h"

#include <string.h>

#include "engine/core/util.h"
#include "engine/graph/graph.h"

sl_code sl_stem_parse_center(const sl_node *n, int64_t h, int64_t w, double *cr, double *cc,
                             sl_error *err) {
  const sl_param_value *c = sl_param(n, "center");
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

static sl_code finite_param(const sl_node *n, const char *name, double *v, sl_error *err) {
  *v = sl_param_float(n, name);
  if (!isfinite(*v))
    return sl_fail(err, SL_ERR_PIPELINE, "param '%s' must be a finite number", name);
  return SL_OK;
}

sl_code sl_stem_parse_radii(const sl_node *n, double *radius, double *inner, double *outer,
                            int *in_radii, sl_error *err) {
  sl_code rc;
  if ((rc = finite_param(n, "radius", radius, err)) ||
      (rc = finite_param(n, "inner", inner, err)) || (rc = finite_param(n, "outer", outer, err)))
    return rc;
  const char *units = sl_param_str(n, "units");
  if (!strcmp(units, "radii")) *in_radii = 1;
  else if (!strcmp(units, "pixels")) *in_radii = 0;
  else
    return sl_fail(err, SL_ERR_PIPELINE, "param 'units' must be radii or pixels, got '%s'", units);
  return SL_OK;
}

sl_code sl_stem_check_ring(double inner, double outer, sl_error *err) {
  if (inner < 0) return sl_fail(err, SL_ERR_PIPELINE, "param 'inner' must be >= 0, got %g", inner);
  if (outer <= inner)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'outer' (%g) must be greater than 'inner' (%g)",
                   outer, inner);
  return SL_OK;
}
