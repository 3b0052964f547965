/* The layout of the bright-field disk's segments (bf_segments; dpc's
 * parallax and its tests): which segment a detector pixel belongs to, one
 * definition for the CPU, the CUDA kernel and the test harnesses, so that
 * every one of them selects exactly the same pixels.
 *
 * The square [-extent, extent]^2 (in disk radii, about the disk centre) is cut
 * into grid x grid cells; a cell is a segment when its centre lies within the
 * circle of radius `extent` (grid 5: the 21 cells of a 5 x 5 grid without its
 * corners). A pixel belongs to the segment of the cell holding its centre when
 * its distance from the disk centre is at most extent * radius (sl_disk_d2,
 * as every disk node measures it), and to none otherwise. Segments are
 * numbered in row-major order of their cells. The cells are fixed in radii,
 * so the count is known when the pipeline is planned, before the disk is
 * fitted.
 *
 * Why segments: each part of the BF disk sees the object through a beam
 * tilted by its offset, so with a defocus the segment images are shifted
 * copies of each other (the parallax); the shifts give the scan-to-detector
 * axis and the defocus, and their shifted sum (tilt-corrected BF) keeps the
 * lattice where the centre of mass has lost it (docs/nodes/dpc.md).
 *
 * Plain C, usable from CUDA (__host__ __device__ under nvcc), so it lives
 * here in shaders/, which the device kernel may include and the nodes may
 * too (as dpc_math.h); nodes/stem/bf_segments_layout.h includes it. */
#ifndef SL_CUDA_BF_SEGMENTS_LAYOUT_H
#define SL_CUDA_BF_SEGMENTS_LAYOUT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SL_BF_HD __host__ __device__
#else
#define SL_BF_HD
#endif

#define SL_BF_SEGMENTS_MAX_GRID 15

typedef struct sl_bf_segment_layout {
  int grid;      /* cells per side, 1..SL_BF_SEGMENTS_MAX_GRID */
  double extent; /* half side of the square and radius of the circle, in disk radii, (0, 1] */
  int count;     /* segments */
  /* cell -> segment, -1 none; int16_t: grid 15 keeps 177 cells (a signed
   * char would wrap segments 128 and above to "none") */
  int16_t index[SL_BF_SEGMENTS_MAX_GRID * SL_BF_SEGMENTS_MAX_GRID];
} sl_bf_segment_layout;

/* Whether cell (i, j)'s centre lies within the circle: in units of the half
 * side, the centre is ((2i + 1) / grid - 1, (2j + 1) / grid - 1). */
static inline SL_BF_HD bool sl_bf_cell_kept(int grid, int i, int j) {
  double u = (2.0 * i + 1.0) / grid - 1.0, v = (2.0 * j + 1.0) / grid - 1.0;
  return u * u + v * v <= 1.0;
}

/* Fills the layout; false when grid or extent is out of range. */
static inline bool sl_bf_segment_layout_init(sl_bf_segment_layout *l, int grid, double extent) {
  if (grid < 1 || grid > SL_BF_SEGMENTS_MAX_GRID || !(extent > 0.0) || extent > 1.0) return false;
  l->grid = grid;
  l->extent = extent;
  l->count = 0;
  for (int i = 0; i < grid; i++)
    for (int j = 0; j < grid; j++)
      l->index[i * grid + j] = (int16_t)(sl_bf_cell_kept(grid, i, j) ? l->count++ : -1);
  return true;
}

/* The segment of pixel (r, c) for a disk at (cr, cc) of `radius` pixels, or
 * -1. d2 is sl_disk_d2(r, c, cr, cc), passed in so that callers that already
 * have it (and CUDA code, which cannot include disk_geometry.h) share it. */
static inline SL_BF_HD int sl_bf_segment_of(const sl_bf_segment_layout *l, double d2, double dr,
                                            double dc, double radius) {
  double lim = l->extent * radius;
  if (d2 > lim * lim) return -1;
  double cell = 2.0 * lim / l->grid; /* cell side, pixels */
  int i = (int)floor((dr + lim) / cell), j = (int)floor((dc + lim) / cell);
  if (i < 0) i = 0;
  if (i >= l->grid) i = l->grid - 1;
  if (j < 0) j = 0;
  if (j >= l->grid) j = l->grid - 1;
  return l->index[i * l->grid + j];
}

/* The pixels [*lo, *hi) of an axis of n pixels that can lie within `lim`
 * pixels of `centre` (lim = extent * radius), with one pixel to spare on
 * each side so that no rounding of d2 can put a segment pixel outside; the
 * segment test decides within. The loops of the CPU build and of the CUDA
 * table visit this window of the extent circle's bounding box only. */
static inline SL_BF_HD void sl_bf_window(double centre, double lim, int64_t n, int64_t *lo, int64_t *hi) {
  double a = floor(centre - lim) - 1.0, b = ceil(centre + lim) + 2.0;
  *lo = a <= 0.0 ? 0 : a >= (double)n ? n : (int64_t)a;
  *hi = b <= 0.0 ? 0 : b >= (double)n ? n : (int64_t)b;
  if (*hi < *lo) *hi = *lo;
}

/* A segment's mean offset along one axis, in disk radii, from the exact sum
 * of its pixels' coordinates on that axis (`sum`, over `n` > 0 pixels): one
 * division, one subtraction, one division, so that the host and the device
 * (which do not fuse them) give the same double. */
static inline SL_BF_HD double sl_bf_offset_mean(uint64_t sum, uint64_t n, double centre, double radius) {
  return ((double)sum / (double)n - centre) / radius;
}

#endif
