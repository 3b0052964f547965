/* bf_segments: the sum of every detector frame over each segment of the
 * bright-field disk (the layout: shaders/cuda/stem/bf_segments_layout.h),
 * exact in u64, into the whole output `segments` [n, scan...]: segment-major,
 * so that segment k's image is contiguous for dpc, which reads the images
 * one by one to measure their shifts (the parallax). Each chunk writes its
 * positions, as com does. `offsets` [n, 3] says where each segment looks
 * from: the mean offset of its pixels' centres from the disk centre, in disk
 * radii (row, col), and its pixel count; it follows from the geometry alone.
 *
 * As virtual_image does with its spans, the segments are turned into row
 * spans and column runs in prepare(), or with the `disk` input (disk_fit's
 * values, known only at run time) on the first kernel call and whenever the
 * disk changes; only the bounding box of the extent circle is visited, so a
 * frame's read is the disk's rows, not the whole frame. The kernel is a loop
 * over positions (parallel). A pixel's cell row depends on its row alone
 * and its cell column on its column alone, so per frame the kernel adds
 * each row's span of segment pixels into its cell row's column sums (a
 * vectorised add of whole rows, in the worker's scratch), then each cell
 * row's column sums over its segments' column runs: about four times
 * fewer operations than a short loop per run (a row crosses up to `grid`
 * runs of a few pixels each); for u16 frames of a box up to 128 columns
 * wide the column sums stay in registers (vec_sum_u16). Pixels at the
 * dtype's maximum (the detector's flag value) are summed as stored: mask
 * correction is a separate node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/common/cuda_glue.h"
#include "nodes/common/disk_geometry.h"
#include "nodes/common/madd_u16.h"
#include "nodes/stem/bf_segments_layout.h"
#include "shaders/cuda/stem/bf_segments.h"

#define BF_SEGMENTS_PARAMS(P)                                                                  \
  SL_DISK_CENTRE_PARAMS(P,                                                                     \
                        "bright-field disk radius in pixels; required (> 0) unless input "     \
                        "'disk' is connected")                                                 \
  P(INT, grid, "5", "cells per side of the segment grid, 1..15 (5: 21 segments)", NULL)       \
  P(FLOAT, extent, "0.9",                                                                      \
    "half side of the segment grid and radius of the segmented circle, in disk radii, (0, 1]", \
    NULL)
SL_NODE_PARAMS(bf_segments_params, BF_SEGMENTS_PARAMS)

#define MAX_SEGMENTS (SL_BF_SEGMENTS_MAX_GRID * SL_BF_SEGMENTS_MAX_GRID)
/* The vector path: vectors of 16 u16 columns (an AVX2 register), a box
 * of at most 8 of them. */
#define SEG_VEC_COLS 16
#define SEG_VEC_MAX 8
/* ... and at most this many rows: a run's lane then adds at most 2
 * SEG_VEC_MAX column sums of u16 over SEG_VEC_ROWS rows, below 2^32. */
#define SEG_VEC_ROWS 4095
/* The AVX-512 path: vectors of 32 u16 columns, a box of at most 4 of them
 * (the same 128 columns); a lane's int32 sum of a cell row then adds at
 * most 2 SEG_512_MAX of its biased column sums of at most SEG_VEC_ROWS
 * rows, each of at most 32768 in magnitude a row: below 2^31. */
#define SEG_512_COLS 32
#define SEG_512_MAX 4

/* Everything infer() checks. */
typedef struct seg_geometry {
  sl_disk_geometry g; /* centre and radius from the params (g.radius 0: unset) */
  sl_bf_segment_layout layout;
} seg_geometry;

/* A detector row's pixels in segments: [lo, hi) columns, all in cell row
 * `band` (-1: none). */
typedef struct row_span {
  int32_t band, lo, hi;
} row_span;

/* A run of columns of one cell row that belongs to one segment. */
typedef struct band_run {
  int32_t band, col, length, segment;
} band_run;

typedef struct seg_state {
  seg_geometry geom;
  row_span *rows;           /* [h] */
  band_run *bands;          /* [grid * grid] at most: a cell row crosses each cell once */
  int n_bands;
  int64_t row0, col0;       /* the bounding box's first row and column */
  int64_t n_pixels;         /* pixels in segments */
  int64_t box_rows, box_cols; /* bounding box of those pixels */
  double offsets[MAX_SEGMENTS * 3]; /* the output `offsets` */
  int band_first[SL_BF_SEGMENTS_MAX_GRID + 1]; /* cell row b's runs: bands[band_first[b], band_first[b + 1]) */
  /* The vector path (u16 frames, vec_sum_u16): a box row's pixels loaded
   * as nv vectors of SEG_VEC_COLS columns from column vcol0 (0 <= vcol0,
   * vcol0 + SEG_VEC_COLS nv <= w), its span kept by a 0/0xFFFF mask
   * [box row][SEG_VEC_COLS nv]; nv 0: the scalar path. vmask is allocated
   * at prepare for u16 frames (h rows of SEG_VEC_MAX vectors). */
  int nv;
  int64_t vcol0;
  uint16_t *vmask;
  /* The AVX-512 path (vec512_sum_u16, where sl_madd_avx512_used): a box
   * row's pixels loaded as nv512 vectors of SEG_512_COLS columns from
   * column vcol512 (0 <= vcol512, vcol512 + SEG_512_COLS nv512 <= w), and
   * for each vector two int16 weight vectors, 1 at the span's even columns
   * then 1 at its odd ones, 0 elsewhere: w512 [box row][nv512][2][32]
   * (allocated at prepare for u16 frames, h rows of SEG_512_MAX vectors);
   * run_lanes[k][v]: the int32 lanes of vector v whose even (then odd)
   * column is in run k. nv512 0: not this path. seg_pixels[k]: segment k's
   * pixel count (the bias to add back: madd_u16.h). */
  int nv512;
  int64_t vcol512;
  int16_t *w512;
  uint16_t run_lanes[MAX_SEGMENTS][SEG_512_MAX][2];
  uint64_t seg_pixels[MAX_SEGMENTS];
  sl_disk_region region;    /* rows and bands hold the segments (with a disk input: of that disk) */
} seg_state;

static sl_code geometry_resolve(const sl_node *n, seg_geometry *geom, sl_error *err) {
  const bf_segments_params *p = bf_segments_params_of(n);
  /* No ring here: inner, outer and units are fixed, finite values. */
  sl_disk_params dp = {p->center, p->radius, 0, 0, SL_RING_UNITS_RADII};
  memset(geom, 0, sizeof *geom);
  sl_code rc = sl_disk_geometry_resolve(n, &dp, &geom->g, err);
  if (rc) return rc;
  if (p->grid < 1 || p->grid > SL_BF_SEGMENTS_MAX_GRID)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'grid' (cells per side of the segment grid) must be 1..%d, got %lld",
                   SL_BF_SEGMENTS_MAX_GRID, (long long)p->grid);
  if (!(p->extent > 0) || p->extent > 1)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'extent' (radius of the segmented circle, in disk radii) must be in "
                   "(0, 1], got %g",
                   p->extent);
  if (geom->g.radius < 0 || (!geom->g.use_disk && geom->g.radius <= 0))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'radius' (bright-field disk radius in pixels) must be > 0 unless input "
                   "'disk' is connected, got %g",
                   geom->g.radius);
  if (!sl_bf_segment_layout_init(&geom->layout, (int)p->grid, p->extent))
    return sl_fail(err, SL_ERR_INTERNAL, "bf_segments: layout of grid %lld, extent %g refused",
                   (long long)p->grid, p->extent);
  return SL_OK;
}

static sl_code bf_segments_infer(sl_node *n, sl_error *err) {
  seg_geometry geom;
  sl_code rc = geometry_resolve(n, &geom, err);
  if (rc) return rc;
  sl_disk_geometry_note(n, &geom.g);
  const sl_tensor_desc *x = &n->in[0];
  int64_t dims[SL_MAX_RANK];
  dims[0] = geom.layout.count;
  for (int i = 0; i < x->stream_rank; i++) dims[1 + i] = x->dims[i];
  n->out[0] = sl_desc_make(SL_U64, 1 + x->stream_rank, dims, 0);
  const int64_t od[2] = {geom.layout.count, 3};
  n->out[1] = sl_desc_make(SL_F64, 2, od, 0);
  return SL_OK;
}

/* The segment of pixel (r, c) for a disk at (cr, cc) of `radius` pixels. */
static int segment_at(const sl_bf_segment_layout *l, int64_t r, int64_t c, double cr, double cc,
                      double radius) {
  return sl_bf_segment_of(l, sl_disk_d2(r, c, cr, cc), (double)r - cr, (double)c - cc, radius);
}

/* The cell row of segment k (the layout's cells are row-major). */
static int band_of(const sl_bf_segment_layout *l, int k) {
  for (int c = 0; c < l->grid * l->grid; c++)
    if (l->index[c] == k) return c / l->grid;
  return -1;
}

/* The AVX-512 path's geometry for the built box (seg_state.nv512); nv512
 * 0 without w512 (not u16 frames), for a box wider than SEG_512_MAX vectors
 * or taller than SEG_VEC_ROWS rows, or a frame narrower than the vectors. */
static void vector512_build(seg_state *s) {
  const int64_t w = s->geom.g.w;
  const int nv = (int)((s->box_cols + SEG_512_COLS - 1) / SEG_512_COLS);
  const int64_t cols = SEG_512_COLS * nv;
  s->nv512 = 0;
  if (!s->w512 || s->box_rows == 0 || s->box_rows > SEG_VEC_ROWS || nv > SEG_512_MAX || cols > w) return;
  s->nv512 = nv;
  s->vcol512 = s->col0 + cols <= w ? s->col0 : w - cols;
  for (int64_t i = 0; i < s->box_rows; i++) {
    const row_span rs = s->rows[s->row0 + i];
    for (int v = 0; v < nv; v++) {
      int16_t *we = s->w512 + (i * nv + v) * 2 * SEG_512_COLS, *wo = we + SEG_512_COLS;
      for (int l = 0; l < SEG_512_COLS; l++) {
        const int64_t col = s->vcol512 + SEG_512_COLS * v + l;
        const int16_t keep = rs.band >= 0 && col >= rs.lo && col < rs.hi;
        we[l] = l % 2 ? 0 : keep;
        wo[l] = l % 2 ? keep : 0;
      }
    }
  }
  for (int k = 0; k < s->n_bands; k++) {
    const int64_t a = s->bands[k].col - s->vcol512, b = a + s->bands[k].length;
    for (int v = 0; v < nv; v++) {
      uint16_t even = 0, odd = 0;
      for (int i = 0; i < SEG_512_COLS / 2; i++) {
        const int64_t ce = SEG_512_COLS * v + 2 * i, co = ce + 1;
        if (ce >= a && ce < b) even |= (uint16_t)(1u << i);
        if (co >= a && co < b) odd |= (uint16_t)(1u << i);
      }
      s->run_lanes[k][v][0] = even;
      s->run_lanes[k][v][1] = odd;
    }
  }
}

/* The vector path's geometry for the built box: nv vectors of columns
 * from vcol0 that hold the box within the frame's row, and each box row's
 * span as a mask of those columns; nv 0 (the scalar path) without vmask
 * (not u16 frames), for a box wider than SEG_VEC_MAX vectors or taller
 * than SEG_VEC_ROWS rows, a frame narrower than the vectors, or on a
 * big-endian host (the kernel splits pairs of u16 columns by their place
 * in a u32). */
static void vector_path_build(seg_state *s) {
  const int64_t w = s->geom.g.w;
  const int nv = (int)((s->box_cols + SEG_VEC_COLS - 1) / SEG_VEC_COLS);
  s->nv = 0;
  vector512_build(s);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const int64_t cols = SEG_VEC_COLS * nv;
  if (!s->vmask || s->box_rows == 0 || s->box_rows > SEG_VEC_ROWS || nv > SEG_VEC_MAX || cols > w)
    return;
  s->nv = nv;
  s->vcol0 = s->col0 + cols <= w ? s->col0 : w - cols;
  for (int64_t i = 0; i < s->box_rows; i++) {
    const row_span rs = s->rows[s->row0 + i];
    uint16_t *m = s->vmask + i * cols;
    for (int64_t c = 0; c < cols; c++) {
      const int64_t col = s->vcol0 + c;
      m[c] = rs.band >= 0 && col >= rs.lo && col < rs.hi ? 0xFFFF : 0;
    }
  }
#endif
}

/* Builds each row's span and cell row, each cell row's column runs of one
 * segment, the bounding box, the pixel count and the offsets for the disk
 * (cr, cc, radius), visiting the window of the extent circle only. Within
 * a cell row a column's segment is fixed (its cell column depends on the
 * column alone) and a row's segment pixels are contiguous (the circle's
 * chord, corner cells only at its ends), so a span and the column runs
 * select exactly the segment pixels. The offsets come from exact integer
 * sums of the coordinates (the device sums them in any order and gets the
 * same). */
static sl_code segments_build(seg_state *s, double cr, double cc, double radius, sl_error *err) {
  const sl_bf_segment_layout *l = &s->geom.layout;
  const int64_t h = s->geom.g.h, w = s->geom.g.w;
  const double lim = l->extent * radius;
  int64_t r_lo, r_hi, c_lo, c_hi;
  sl_bf_window(cr, lim, h, &r_lo, &r_hi);
  sl_bf_window(cc, lim, w, &c_lo, &c_hi);
  const int64_t ww = c_hi > c_lo ? c_hi - c_lo : 1;
  int16_t *col_seg = malloc((size_t)(l->grid * ww) * sizeof *col_seg); /* [cell row][window column] */
  if (!col_seg) return sl_fail(err, SL_ERR_NOMEM, "out of memory for the segment bands");
  for (int64_t q = 0; q < l->grid * ww; q++) col_seg[q] = -1;
  int band[MAX_SEGMENTS];
  for (int k = 0; k < l->count; k++) band[k] = band_of(l, k);
  uint64_t n[MAX_SEGMENTS] = {0}, sr[MAX_SEGMENTS] = {0}, sc[MAX_SEGMENTS] = {0};
  int64_t r0 = h, r1 = 0, c0 = w, c1 = 0; /* bounding box, empty */
  s->n_pixels = 0;
  for (int64_t r = 0; r < h; r++) s->rows[r] = (row_span){-1, 0, 0};
  for (int64_t r = r_lo; r < r_hi; r++)
    for (int64_t c = c_lo; c < c_hi; c++) {
      const int k = segment_at(l, r, c, cr, cc, radius);
      if (k < 0) continue;
      n[k]++, sr[k] += (uint64_t)r, sc[k] += (uint64_t)c;
      s->n_pixels++;
      if (r < r0) r0 = r;
      if (r >= r1) r1 = r + 1;
      if (c < c0) c0 = c;
      if (c >= c1) c1 = c + 1;
      row_span *rs = &s->rows[r];
      if (rs->band < 0) *rs = (row_span){band[k], (int32_t)c, (int32_t)c};
      rs->hi = (int32_t)(c + 1);
      col_seg[band[k] * ww + c - c_lo] = (int16_t)k;
    }
  s->box_rows = r1 > r0 ? r1 - r0 : 0;
  s->box_cols = c1 > c0 ? c1 - c0 : 0;
  s->row0 = r0, s->col0 = c0;
  s->n_bands = 0;
  for (int b = 0; b < l->grid; b++) {
    s->band_first[b] = s->n_bands;
    for (int64_t c = 0; c < c_hi - c_lo;) {
      const int k = col_seg[b * ww + c];
      int64_t e = c + 1;
      while (e < c_hi - c_lo && col_seg[b * ww + e] == k) e++;
      if (k >= 0) s->bands[s->n_bands++] = (band_run){b, (int32_t)(c_lo + c), (int32_t)(e - c), k};
      c = e;
    }
  }
  s->band_first[l->grid] = s->n_bands;
  free(col_seg);
  vector_path_build(s);
  for (int k = 0; k < l->count; k++) {
    double *o = s->offsets + 3 * k;
    o[0] = n[k] ? sl_bf_offset_mean(sr[k], n[k], cr, radius) : 0;
    o[1] = n[k] ? sl_bf_offset_mean(sc[k], n[k], cc, radius) : 0;
    o[2] = (double)n[k];
    s->seg_pixels[k] = n[k];
  }
  return SL_OK;
}

/* sl_disk_region_build: the spans and runs around the disk input's values. */
static sl_code segments_build_for_disk(void *state, const double disk[3], sl_error *err) {
  return segments_build(state, disk[0], disk[1], disk[2], err);
}

static void bf_segments_release(sl_node *n) {
  seg_state *s = n->state;
  if (!s) return;
  free(s->rows);
  free(s->bands);
  free(s->vmask);
  free(s->w512);
  free(s);
  n->state = NULL;
}

/* Whether output k is read (sl_node.out_used). An unread one has no buffer
 * (omit_unread_outputs: out[k] is NULL) and the kernels leave it alone;
 * neither is read when dpc is not given the probe's params (it declares its
 * segments inputs unread), and then the kernels do nothing. The unit tests
 * that build the node alone set out_used as a graph would. */
static bool output_read(const sl_node *n, int k) { return (n->out_used >> k) & 1u; }
static bool outputs_unread(const sl_node *n) { return !output_read(n, 0) && !output_read(n, 1); }

/* The vector path's row masks for frames of h rows: every row of the box
 * (at most h) of SEG_VEC_MAX vectors. */
static int64_t vmask_bytes(int64_t h) {
  return (h ? h : 1) * SEG_VEC_MAX * SEG_VEC_COLS * (int64_t)sizeof(uint16_t);
}

/* ... and the AVX-512 path's weights: every row of SEG_512_MAX vectors of
 * two weight vectors. */
static int64_t w512_bytes(int64_t h) {
  return (h ? h : 1) * SEG_512_MAX * 2 * SEG_512_COLS * (int64_t)sizeof(int16_t);
}

static sl_code bf_segments_prepare(sl_node *n, sl_error *err) {
  seg_geometry geom;
  sl_code rc = geometry_resolve(n, &geom, err);
  if (rc) return rc;
  if (outputs_unread(n))
    sl_node_note(n, "segments", "not read (dpc is given its rotation, or nothing reads them): nothing computed");
  seg_state *s = calloc(1, sizeof *s);
  const bool vec = n->in[0].dtype == SL_U16;
  if (s) {
    s->rows = malloc((size_t)(geom.g.h ? geom.g.h : 1) * sizeof *s->rows);
    s->bands = malloc((size_t)(geom.layout.grid * geom.layout.grid) * sizeof *s->bands);
    if (vec) s->vmask = malloc((size_t)vmask_bytes(geom.g.h)), s->w512 = malloc((size_t)w512_bytes(geom.g.h));
  }
  if (!s || !s->rows || !s->bands || (vec && (!s->vmask || !s->w512))) {
    if (s) free(s->rows), free(s->bands), free(s->vmask), free(s->w512);
    free(s);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for the segment spans");
  }
  s->geom = geom;
  n->state = s;
  if (!geom.g.use_disk) {
    if ((rc = segments_build(s, geom.g.cr, geom.g.cc, geom.g.radius, err))) return rc;
    s->region.built = true;
  }
  return SL_OK;
}

/* Pixels of a frame read, and pixels summed: the bounding box of the
 * segments and their pixels once built; before prepare, the window of the
 * extent circle from the params, or with the disk input (not known yet)
 * of a typical disk (below). */
static void frame_work(const sl_node *n, int64_t *read, int64_t *summed) {
  const seg_state *s = n->state;
  *read = *summed = sl_desc_item_elems(&n->in[0]);
  if (s && s->region.built) {
    *read = s->box_rows * s->box_cols;
    *summed = s->n_pixels;
    return;
  }
  seg_geometry geom;
  sl_error err;
  if (geometry_resolve(n, &geom, &err) != SL_OK) return;
  /* With the disk input the plan comes before the disk is known: a disk of
   * a sixth of the detector's side about its centre, a typical bright-field
   * disk (the bench acquisitions' is an eighth, the H200's a seventh), so
   * the time estimate is near what a run takes (the whole frame, an upper
   * bound, put it at 5-13 times). Memory does not depend on it. */
  const double radius = geom.g.use_disk ? (double)(geom.g.h < geom.g.w ? geom.g.h : geom.g.w) / 6.0 : geom.g.radius;
  const double cr = geom.g.use_disk ? (double)(geom.g.h - 1) / 2 : geom.g.cr;
  const double cc = geom.g.use_disk ? (double)(geom.g.w - 1) / 2 : geom.g.cc;
  const double lim = geom.layout.extent * radius;
  int64_t r_lo, r_hi, c_lo, c_hi;
  sl_bf_window(cr, lim, geom.g.h, &r_lo, &r_hi);
  sl_bf_window(cc, lim, geom.g.w, &c_lo, &c_hi);
  *read = (r_hi - r_lo) * (c_hi - c_lo);
  /* the circle's pixels, about pi/4 of its box */
  *summed = geom.g.use_disk ? (int64_t)(M_PI * lim * lim) + 1 : *read;
}

static void bf_segments_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  if (outputs_unread(n)) return;
  const int64_t count = n->out[0].dims[0];
  if (output_read(n, 0)) { /* the sums: each frame's box read; only the offsets: no frame */
    int64_t read, summed;
    frame_work(n, &read, &summed);
    c->bytes_read = positions * read * (int64_t)sl_dtype_size(n->in[0].dtype);
    c->bytes_written = positions * count * 8;
    c->ops = positions * summed;
  }
  /* the rows' spans, the cell rows' column runs (the build's column table,
   * a few hundred bytes, is freed before it returns); a cell row's column
   * sums per worker */
  const int64_t h = n->in[0].dims[n->in[0].rank - 2], w = n->in[0].dims[n->in[0].rank - 1];
  const int64_t grid = bf_segments_params_of(n)->grid;
  c->state_bytes = h * (int64_t)sizeof(row_span) + grid * grid * (int64_t)sizeof(band_run) +
                   (int64_t)sizeof(seg_state) + (n->in[0].dtype == SL_U16 ? vmask_bytes(h) + w512_bytes(h) : 0);
  if (output_read(n, 0)) c->per_worker_bytes = grid * w * (int64_t)sizeof(uint64_t);
#ifdef SLUICE_HAVE_CUDA
  const sl_cuda_frame_shape f = sl_glue_frame_shape(&n->in[0]);
  c->device_state_bytes = sl_cuda_bf_segments_table_bytes(&f);
#endif
}

typedef struct seg_job {
  const sl_kernel_args *a;
  const seg_state *s;
  int64_t item;  /* pixels of a frame */
  int64_t npos;  /* positions of the scan: the stride of a segment's image */
} seg_job;

/* Asks for the lines of positions [begin, end) of every segment's image
 * in y (for writing) before a range's frames are summed: the segment-major
 * output's lines have left the cache since the last chunk (its frames
 * streamed through), and the stores waiting for them took 1.3-1.6 of the
 * node's 4.4-4.7 ms (the dev VM, 1 thread, 16,384 frames); asked for
 * first, they arrive while the frames are summed. Only the lines wholly in
 * the range: one shared with the next worker's range, taken for writing
 * by both, went back and forth between the cores (the node at 2 threads
 * 3.6-3.8 ms without the prefetch, 4.0-4.3 with every line's). */
static inline void prefetch_sums(uint64_t *y, int count, int64_t npos, int64_t begin, int64_t end) {
  for (int k = 0; k < count; k++) {
    const uintptr_t a0 = ((uintptr_t)(y + k * npos + begin) + 63) & ~(uintptr_t)63;
    const uintptr_t a1 = (uintptr_t)(y + k * npos + end) & ~(uintptr_t)63;
    for (uintptr_t a = a0; a < a1; a += 64) __builtin_prefetch((const void *)a, 1, 3);
  }
}

/* A frame's segment sums from its rows' spans: each row added into its
 * cell row's column sums (ACC: exact, a cell row has at most h rows of at
 * most 2^32 - 1, u32 for u8 and u16 frames of up to 65537 rows, else u64),
 * then each cell row's column runs added up per segment. */
#define BANDS_SUM(NAME, T, ACC)                                                            \
  SL_HOT_CLONES static void NAME(void *ctx, int64_t begin, int64_t end, int worker) {      \
    const seg_job *j = ctx;                                                                \
    const seg_state *s = j->s;                                                             \
    const T *x = j->a->in[0];                                                              \
    uint64_t *y = (uint64_t *)j->a->out[0];                                                \
    const int count = s->geom.layout.count, grid = s->geom.layout.grid;                    \
    const int64_t w = s->geom.g.w, bw = s->box_cols, c0 = s->col0;                         \
    ACC *sums = sl_worker_scratch(j->a, worker); /* [grid][bw] */                          \
    uint64_t acc[MAX_SEGMENTS];                                                            \
    prefetch_sums(y, count, j->npos, begin, end);                                          \
    for (int64_t p = begin; p < end; p++) {                                                \
      const T *f = x + p * j->item;                                                        \
      memset(sums, 0, (size_t)(grid * bw) * sizeof *sums);                                 \
      for (int64_t r = s->row0; r < s->row0 + s->box_rows; r++) {                          \
        const row_span rs = s->rows[r];                                                    \
        if (rs.band < 0) continue;                                                         \
        ACC *restrict d = sums + rs.band * bw - c0;                                        \
        const T *restrict q = f + r * w;                                                   \
        for (int64_t c = rs.lo; c < rs.hi; c++) d[c] += q[c];                              \
      }                                                                                    \
      memset(acc, 0, (size_t)count * sizeof acc[0]);                                       \
      for (int k = 0; k < s->n_bands; k++) {                                               \
        const band_run *u = &s->bands[k];                                                  \
        const ACC *d = sums + u->band * bw + u->col - c0;                                  \
        uint64_t t = 0;                                                                    \
        for (int32_t i = 0; i < u->length; i++) t += d[i];                                 \
        acc[u->segment] += t;                                                              \
      }                                                                                    \
      for (int k = 0; k < count; k++) y[k * j->npos + p] = acc[k];                         \
    }                                                                                      \
  }
BANDS_SUM(bands_sum_u8, uint8_t, uint32_t)
BANDS_SUM(bands_sum_u16, uint16_t, uint32_t)
BANDS_SUM(bands_sum_u8_wide, uint8_t, uint64_t)
BANDS_SUM(bands_sum_u16_wide, uint16_t, uint64_t)
BANDS_SUM(bands_sum_u32, uint32_t, uint64_t)
#undef BANDS_SUM

/* The vector path (u16 frames whose box is at most SEG_VEC_MAX vectors
 * wide): the same cell rows' column sums, kept in registers. A row's nv
 * vectors are loaded whole from vcol0 and masked to its span; each vector,
 * read as u32 lanes, gives its even columns (the low halves) and odd
 * columns (the high halves) as u32 column sums (exact: at most
 * SEG_VEC_ROWS rows). At the end of a cell row each run is added from the
 * vectors it overlaps, under lane masks. Vectors of one AVX2 register: of
 * two, GCC's AVX2 clone kept them on the stack (the node 7.2 -> 25 ms on
 * 16,384 frames of 192 x 192, 1 thread; with one, 4.8 ms). */
typedef uint16_t seg_u16v __attribute__((vector_size(2 * SEG_VEC_COLS)));
typedef uint32_t seg_u32v __attribute__((vector_size(2 * SEG_VEC_COLS)));

/* Cell row `band`'s sums over the box rows [r, r_end) into acc: its
 * column sums in registers (nv a constant where it is inlined), then each
 * of its runs added from the vectors it overlaps. */
static inline __attribute__((always_inline)) void vec_cell_row(const seg_state *s, const uint16_t *f,
                                                               int band, int64_t r, int64_t r_end,
                                                               const int nv, uint64_t *acc) {
  const int64_t w = s->geom.g.w;
  seg_u32v even[SEG_VEC_MAX], odd[SEG_VEC_MAX];
  for (int v = 0; v < nv; v++) even[v] = odd[v] = (seg_u32v){0};
  for (; r < r_end; r++) {
    const uint16_t *q = f + r * w + s->vcol0, *m = s->vmask + (r - s->row0) * SEG_VEC_COLS * nv;
    for (int v = 0; v < nv; v++) {
      seg_u16v x, keep;
      memcpy(&x, q + SEG_VEC_COLS * v, sizeof x);
      memcpy(&keep, m + SEG_VEC_COLS * v, sizeof keep);
      const seg_u32v y = (seg_u32v)(x & keep);
      even[v] += y & 0xFFFFu;
      odd[v] += y >> 16;
    }
  }
  /* Each run's columns [a, b) from the vectors it overlaps: lane i of
   * vector v holds column 16 v + 2 i (even) and 16 v + 2 i + 1 (odd).
   * Exact in u32 lanes: a lane adds at most 2 SEG_VEC_MAX column sums of a
   * cell row of at most SEG_VEC_ROWS rows (vector_path_build). */
  const seg_u32v iota = {0, 2, 4, 6, 8, 10, 12, 14};
  for (int k = s->band_first[band]; k < s->band_first[band + 1]; k++) {
    const band_run *u = &s->bands[k];
    const int32_t a = (int32_t)(u->col - s->vcol0), b = a + u->length;
    seg_u32v t = {0};
    for (int v = 0; v < nv; v++) {
      if (SEG_VEC_COLS * (v + 1) <= a || SEG_VEC_COLS * v >= b) continue;
      const seg_u32v ce = iota + (uint32_t)(SEG_VEC_COLS * v), co = ce + 1u;
      t += even[v] & (seg_u32v)((ce >= (uint32_t)a) & (ce < (uint32_t)b));
      t += odd[v] & (seg_u32v)((co >= (uint32_t)a) & (co < (uint32_t)b));
    }
    uint64_t sum = 0;
    for (int i = 0; i < SEG_VEC_COLS / 2; i++) sum += t[i];
    acc[u->segment] += sum;
  }
}

/* A vector path's frame and range functions, for its cell-row function
 * CELL_ROW (vec_cell_row, vec512_cell_row), with attributes FRAME_ATTR and
 * RANGE_ATTR (its target, or its clones):
 * FRAME adds one frame's segment sums into acc cell row by cell row (a cell
 * row's rows are consecutive); RANGE sums each frame of a range from
 * INIT(k) (a segment's sum before its pixels are added) and writes the sums
 * to the segment-major output, FRAME inlined once per box width, 1 to
 * MAXV vectors (s->NV). */
#define SEG_VEC_FUNCS(FRAME, RANGE, FRAME_ATTR, RANGE_ATTR, CELL_ROW, NV, MAXV, INIT)            \
  FRAME_ATTR static inline __attribute__((always_inline)) void FRAME(                             \
      const seg_state *s, const uint16_t *f, const int nv, uint64_t *acc) {                      \
    const int64_t r_end = s->row0 + s->box_rows;                                                 \
    for (int64_t r = s->row0; r < r_end;) {                                                      \
      const int band = s->rows[r].band;                                                          \
      int64_t e = r + 1;                                                                         \
      while (e < r_end && s->rows[e].band == band) e++;                                          \
      if (band >= 0) CELL_ROW(s, f, band, r, e, nv, acc);                                        \
      r = e;                                                                                     \
    }                                                                                            \
  }                                                                                              \
  RANGE_ATTR static void RANGE(void *ctx, int64_t begin, int64_t end, int worker) {              \
    (void)worker;                                                                                \
    const seg_job *j = ctx;                                                                      \
    const seg_state *s = j->s;                                                                   \
    const uint16_t *x = j->a->in[0];                                                             \
    uint64_t *y = (uint64_t *)j->a->out[0];                                                      \
    const int count = s->geom.layout.count;                                                      \
    prefetch_sums(y, count, j->npos, begin, end);                                                \
    for (int64_t p = begin; p < end; p++) {                                                      \
      uint64_t acc[MAX_SEGMENTS];                                                                \
      for (int k = 0; k < count; k++) acc[k] = INIT(k);                                          \
      const uint16_t *f = x + p * j->item;                                                       \
      switch (s->NV) { /* each width its own inlined loop */                                     \
      case 1: FRAME(s, f, 1, acc); break;                                                        \
      case 2: FRAME(s, f, 2, acc); break;                                                        \
      case 3: FRAME(s, f, 3, acc); break;                                                        \
      case 4: FRAME(s, f, 4 < MAXV ? 4 : MAXV, acc); break;                                      \
      case 5: FRAME(s, f, 5 < MAXV ? 5 : MAXV, acc); break;                                      \
      case 6: FRAME(s, f, 6 < MAXV ? 6 : MAXV, acc); break;                                      \
      case 7: FRAME(s, f, 7 < MAXV ? 7 : MAXV, acc); break;                                      \
      default: FRAME(s, f, MAXV, acc); break;                                                    \
      }                                                                                          \
      for (int k = 0; k < count; k++) y[k * j->npos + p] = acc[k];                               \
    }                                                                                            \
  }

/* The AVX2 path's sums start from 0; its frame function is inlined into
 * the range function's clones. */
#define SEG_ZERO(k) 0
#define SEG_NO_ATTR
SEG_VEC_FUNCS(vec_frame, vec_sum_u16, SEG_NO_ATTR, SL_HOT_CLONES, vec_cell_row, nv, SEG_VEC_MAX, SEG_ZERO)
#undef SEG_NO_ATTR
#undef SEG_ZERO

#if SL_MADD_X86
/* The AVX-512 path (u16 frames whose box is at most SEG_512_MAX vectors
 * wide): a cell row's even and odd column sums as int32 lanes in registers,
 * each vector's pixels biased (x - 32768: madd_u16.h) and multiplied by its
 * row's 0/1 weights with vpdpwssd, one instruction a sum and 32 pixels
 * where the AVX2 path takes four (mask, split, two adds) for 16; each run
 * added from the lanes run_lanes names; every segment's bias added back
 * once a frame. */
SL_MADD_AVX512 static inline __attribute__((always_inline)) void vec512_cell_row(
    const seg_state *s, const uint16_t *f, int band, int64_t r, int64_t r_end, const int nv, uint64_t *acc) {
  const int64_t w = s->geom.g.w;
  __m512i even[SEG_512_MAX], odd[SEG_512_MAX];
  for (int v = 0; v < nv; v++) even[v] = odd[v] = _mm512_setzero_si512();
  for (; r < r_end; r++) {
    const uint16_t *q = f + r * w + s->vcol512;
    const int16_t *wt = s->w512 + (r - s->row0) * nv * 2 * SEG_512_COLS;
    for (int v = 0; v < nv; v++) {
      const __m512i x = sl_madd512_bias(q + SEG_512_COLS * v);
      even[v] = sl_madd512_acc(even[v], x, _mm512_loadu_si512(wt + 2 * SEG_512_COLS * v));
      odd[v] = sl_madd512_acc(odd[v], x, _mm512_loadu_si512(wt + 2 * SEG_512_COLS * v + SEG_512_COLS));
    }
  }
  for (int k = s->band_first[band]; k < s->band_first[band + 1]; k++) {
    __m512i t = _mm512_setzero_si512();
    for (int v = 0; v < nv; v++) {
      t = _mm512_mask_add_epi32(t, s->run_lanes[k][v][0], t, even[v]);
      t = _mm512_mask_add_epi32(t, s->run_lanes[k][v][1], t, odd[v]);
    }
    acc[s->bands[k].segment] += sl_madd512_hsum32(t);
  }
}

/* Each segment's sum starts from its bias (32768 times its pixels). */
#define SEG_BIAS(k) (32768u * s->seg_pixels[k])
SEG_VEC_FUNCS(vec512_frame, vec512_sum_u16, SL_MADD_AVX512, SL_MADD_AVX512, vec512_cell_row, nv512, SEG_512_MAX,
              SEG_BIAS)
#undef SEG_BIAS
#endif
#undef SEG_VEC_FUNCS

static sl_code bf_segments_cpu(sl_kernel_args *a) {
  if (outputs_unread(a->node)) return SL_OK;
  seg_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "bf_segments: kernel called before prepare");
  const int64_t npos = sl_desc_positions(&a->node->in[0]);
  if (a->pos_start < 0 || a->pos_start + a->pos_count > npos)
    return sl_fail(a->err, SL_ERR_INTERNAL,
                   "bf_segments: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count),
                   (long long)npos);
  sl_code rc = sl_disk_region_update(a, &s->geom.g, &s->region, segments_build_for_disk, s);
  if (rc) return rc;
  /* The same values on every call: valid after the run whichever call was last. */
  if (output_read(a->node, 1)) memcpy(a->out[1], s->offsets, (size_t)s->geom.layout.count * 3 * sizeof(double));
  if (!output_read(a->node, 0)) return SL_OK;
  seg_job j = {a, s, sl_desc_item_elems(&a->node->in[0]), npos};
  sl_dtype t = a->node->in[0].dtype;
  /* u32 column sums hold a cell row of u8 or u16 exactly up to 65537 rows */
  const bool narrow = (t == SL_U8 || t == SL_U16) && s->box_rows <= 65537;
  sl_range_fn fn = t == SL_U8 ? (narrow ? bands_sum_u8 : bands_sum_u8_wide)
                  : t == SL_U16 ? (narrow ? (s->nv ? vec_sum_u16 : bands_sum_u16) : bands_sum_u16_wide)
                                : bands_sum_u32;
#if SL_MADD_X86
  if (t == SL_U16 && s->nv512 && sl_madd_avx512_used()) fn = vec512_sum_u16;
#endif
  if (!a->worker_scratch)
    return sl_fail(a->err, SL_ERR_INTERNAL, "bf_segments: no worker scratch for the column sums");
  /* ~8k pixels of work per range at least (a few frames' disks): with 64k
   * a chunk of 14 frames of a 24-pixel disk (1,460 pixels a frame) ran on
   * the calling thread alone, the other workers idle. */
  int64_t grain = 8192 / (s->n_pixels + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

static const sl_port_def bf_segments_outputs[] = {
    {"segments",
     "whole u64 [n, scan...]: per segment (segment-major), the exact sum of each frame's pixels "
     "in it",
     "counts", false},
    {"offsets",
     "whole f64 [n, 3]: per segment, the mean row and column offset of its pixels from the disk "
     "centre (disk radii) and its pixel count (0, 0, 0 for a segment without pixels)",
     "radii", false},
};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node (the disk of the
 * params, or the flag that a->in[1] holds it on the device). */
static sl_cuda_bf_segments_params bf_segments_cuda_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const seg_state *s = n->state;
  sl_cuda_bf_segments_params p = {.frames = sl_glue_frame_shape(&n->in[0]),
                                  .positions = sl_desc_positions(&n->in[0]),
                                  .use_disk = sl_glue_input_present(n, 1),
                                  .device_state = sl_glue_device_state(a)};
  if (s) {
    p.layout = s->geom.layout;
    p.cr = s->geom.g.cr;
    p.cc = s->geom.g.cc;
    p.radius = s->geom.g.radius;
  }
  return p;
}

static sl_code bf_segments_cuda(sl_kernel_args *a) {
  if (outputs_unread(a->node)) return SL_OK;
  if (!a->node->state)
    return sl_fail(a->err, SL_ERR_INTERNAL, "bf_segments: kernel called before prepare");
  const sl_cuda_bf_segments_params p = bf_segments_cuda_params(a);
  return sl_cuda_bf_segments(&p, a);
}

static sl_code bf_segments_cuda_finalize(sl_kernel_args *a) {
  if (outputs_unread(a->node)) return SL_OK;
  const sl_cuda_bf_segments_params p = bf_segments_cuda_params(a);
  return sl_cuda_bf_segments_finalize(&p, a);
}
#endif

const sl_node_desc sl_node_bf_segments = {
    .type = "bf_segments",
    .doc = "Sums of each frame over the segments of the bright-field disk (a grid of cells "
           "within `extent` radii; grid 5: 21 segments), exact u64, segment-major, with each "
           "segment's mean offset from the disk centre; optional disk_fit input for the "
           "geometry. For dpc's parallax.",
    SL_PARAMS_DESC(bf_segments_params),
    .inputs = sl_disk_geometry_inputs, .n_inputs = SL_COUNT_OF(sl_disk_geometry_inputs),
    .outputs = bf_segments_outputs, .n_outputs = SL_COUNT_OF(bf_segments_outputs),
    .infer = bf_segments_infer, .cost = bf_segments_cost,
    .prepare = bf_segments_prepare, .release = bf_segments_release,
    .kernel = {[SL_BACKEND_CPU] = bf_segments_cpu,
               [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(bf_segments_cuda)},
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(bf_segments_cuda_finalize)},
    /* an unread output is neither written nor read, on either backend */
    .omit_unread_outputs = 3u,
    /* segments: each chunk writes its own column block of [n, scan]; offsets:
     * every call writes the same values (from the disk's geometry), which
     * is max(what the output holds, them) whether it holds the identity or
     * an earlier call's: a fold, merged across devices by max */
    .combine = {SL_COMBINE_CONCAT_SCAN_LAST, SL_COMBINE_MAX},
    .fold_outputs = 2u,
};
