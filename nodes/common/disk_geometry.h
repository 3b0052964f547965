/* Disk and annulus geometry of the nodes that sum detector regions around
 * the bright-field disk (virtual_image, virtual_detectors, bf_segments): the squared
 * distance of a pixel centre from the disk centre, computed one way
 * everywhere so that every node selects exactly the same pixels; the checks
 * of a `disk` input (the output of disk_fit); the geometry params they share
 * (centre, radius, ring, units) resolved to one struct; and the kernel-side
 * bookkeeping of a region built from the `disk` input at run time. */
#ifndef SL_DISK_GEOMETRY_H
#define SL_DISK_GEOMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/graph/node.h"

struct sl_node;

/* Squared distance of pixel (r, c) from (cr, cc), in pixels^2. */
static inline double sl_disk_d2(int64_t r, int64_t c, double cr, double cc) {
  double dr = (double)r - cr, dc = (double)c - cc;
  return dr * dr + dc * dc;
}

/* A `disk` input must be a whole f64 tensor of 4 elements
 * (centre_row, centre_col, radius, residual). */
sl_code sl_disk_port_check(const sl_tensor_desc *d, sl_error *err);

/* Run-time check of the disk values (they are known only after a pass over
 * the data): a finite centre within [-H, 2H] x [-W, 2W] and a finite radius > 0. */
sl_code sl_disk_values_check(const double *disk, int64_t h, int64_t w, sl_error *err);

/* The ADF ring: 0 <= inner < outer. */
sl_code sl_ring_check(double inner, double outer, sl_error *err);

/* ---- the shared geometry params ------------------------------------------------ */

/* Param 'units' of the ring radii: an ENUM in this order. */
typedef enum sl_ring_units { SL_RING_UNITS_RADII, SL_RING_UNITS_PIXELS } sl_ring_units;
#define SL_RING_UNITS_CHOICES "radii|pixels"

/* The disk params, for a node's param list (engine/graph/node_params.h):
 * center, radius. RADIUS_DOC says when the node needs a radius. */
#define SL_DISK_CENTRE_PARAMS(P, RADIUS_DOC)                                                 \
  P(LIST, center, "[]",                                                                      \
    "disk centre [row, col] in detector pixels; empty = detector centre ((H-1)/2, (W-1)/2)", \
    NULL)                                                                                    \
  P(FLOAT, radius, "0", RADIUS_DOC, NULL)

/* The geometry params: the disk's, then the ring's: inner, outer, units.
 * RING names the ring ("ADF", "adf/annulus"). */
#define SL_DISK_GEOMETRY_PARAMS(P, RADIUS_DOC, RING)                                         \
  SL_DISK_CENTRE_PARAMS(P, RADIUS_DOC)                                                       \
  P(FLOAT, inner, "1", RING " inner radius (in `units`); included", NULL)                    \
  P(FLOAT, outer, "2", RING " outer radius (in `units`); excluded", NULL)                    \
  P(ENUM, units, "radii", "units of inner/outer: radii (of the disk radius) or pixels",      \
    SL_RING_UNITS_CHOICES)

/* The values of those params, from the node's typed params. */
typedef struct sl_disk_params {
  const sl_param_value *center;
  double radius, inner, outer;
  int units; /* sl_ring_units */
} sl_disk_params;

/* The geometry a node resolved from its frames, its `disk` input and the params. */
typedef struct sl_disk_geometry {
  int64_t h, w;            /* detector */
  sl_dtype t;              /* frames */
  double cr, cc;           /* centre, detector pixels (from the params) */
  double radius;           /* disk radius, pixels (from the params; 0 = unset) */
  double inner_p, outer_p; /* ring radii as given, in `units` */
  bool in_radii;           /* units: radii */
  bool use_disk;           /* the `disk` input (input 1) is connected */
  bool params_ignored;     /* use_disk, and 'center' or 'radius' was given */
} sl_disk_geometry;

/* Checks input 0 (frames), input 1 (the optional `disk`), 'center' (empty:
 * the detector centre ((H-1)/2, (W-1)/2); else [row, col], finite and within
 * [-H, 2H] x [-W, 2W]) and that radius, inner and outer are finite numbers.
 * What the node needs of the radius and the ring is for the node to check. */
sl_code sl_disk_geometry_resolve(const struct sl_node *n, const sl_disk_params *p,
                                 sl_disk_geometry *g, sl_error *err);

/* With the `disk` input: notes that the geometry comes from it at run time. */
void sl_disk_geometry_note(struct sl_node *n, const sl_disk_geometry *g);

/* A ring radius in pixels for a disk of `radius` pixels. */
static inline double sl_ring_radius_px(const sl_disk_geometry *g, double given, double radius) {
  return g->in_radii ? given * radius : given;
}

/* The frames and disk inputs of those nodes (input 0 and 1). */
extern const sl_port_def sl_disk_geometry_inputs[2];

/* ---- a region built from the `disk` input ---------------------------------------- */

/* Whether a node's region (its spans or runs) is built, and from which disk. */
typedef struct sl_disk_region {
  bool built;
  double disk[3]; /* centre_row, centre_col, radius it was built from (disk input) */
} sl_disk_region;

/* Builds the node's region for the disk (centre_row, centre_col, radius). */
typedef sl_code (*sl_disk_region_build)(void *state, const double disk[3], sl_error *err);

/* For the CPU kernel: with the `disk` input (g->use_disk), checks its values
 * (a->in[1]) and builds the region through `build` on the first call and
 * whenever they change; without it, checks that prepare() built the region. */
sl_code sl_disk_region_update(const sl_kernel_args *a, const sl_disk_geometry *g,
                              sl_disk_region *r, sl_disk_region_build build, void *state);

#endif
