/* Detector geometry shared by the virtual-image family (virtual_image,
 * virtual_detectors): the squared distance of a pixel centre from the disk
 * centre, computed one way everywhere so that every node selects exactly the
 * same pixels, the checks of a `disk` input (the output of disk_fit), and the
 * parsing of the geometry params they share (stem_geom.c). */
#ifndef SL_STEM_GEOM_H
#define SL_STEM_GEOM_H

#include <math.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"

struct sl_node;

/* Squared distance of pixel (r, c) from (cr, cc), in pixels^2. */
static inline double sl_stem_d2(int64_t r, int64_t c, double cr, double cc) {
  double dr = (double)r - cr, dc = (double)c - cc;
  return dr * dr + dc * dc;
}

/* A `disk` input must be a whole f64 tensor of 4 elements
 * (centre_row, centre_col, radius, residual). `what` names the node type. */
static inline sl_code sl_stem_check_disk_port(const sl_tensor_desc *d, sl_error *err) {
  if (d->dtype != SL_F64 || d->stream_rank != 0 || sl_desc_elems(d) != 4) {
    char buf[160];
    sl_desc_format(d, buf, sizeof buf);
    return sl_fail(err, SL_ERR_PIPELINE,
                   "input 'disk' expects a whole f64 [4] (centre_row, centre_col, radius, "
                   "residual) as written by disk_fit, got %s",
                   buf);
  }
  return SL_OK;
}

/* Run-time check of the disk values (they are known only after a pass over
 * the data): a finite centre within [-H, 2H] x [-W, 2W] and a finite radius > 0. */
static inline sl_code sl_stem_check_disk_values(const double *disk, int64_t h, int64_t w,
                                                sl_error *err) {
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

/* Param 'center' of `n` for an H x W detector: empty leaves (*cr, *cc) at the
 * detector centre ((H-1)/2, (W-1)/2); else [row, col], finite and within
 * [-H, 2H] x [-W, 2W]. */
sl_code sl_stem_parse_center(const struct sl_node *n, int64_t h, int64_t w, double *cr,
                             double *cc, sl_error *err);

/* Params 'radius', 'inner' and 'outer' of `n` (each a finite number) and
 * 'units' (radii or pixels: *in_radii 1 or 0), checked in that order. */
sl_code sl_stem_parse_radii(const struct sl_node *n, double *radius, double *inner,
                            double *outer, int *in_radii, sl_error *err);

/* The ADF ring: 0 <= inner < outer. */
sl_code sl_stem_check_ring(double inner, double outer, sl_error *err);

#endif
