/* bf_segments on CUDA. See bf_segments.h.
 *
 * Two kernels a call: sl_k_bf_segments_table (one block) writes the segment
 * of every pixel of the extent circle's window into the node's table, the
 * bounding box of the segment pixels, and the offsets from exact integer
 * sums of the coordinates (sl_bf_offset_mean, as the CPU); then
 * sl_k_bf_segments_sums runs one block per frame over the bounding box,
 * each warp a contiguous band of its rows and each lane a column of the
 * band: a lane keeps its column's run of one segment in a register and adds
 * it into its warp's u64 of that segment in shared memory where the segment
 * changes (a few times a column) instead of at every pixel; the warps' sums
 * are added at the end. Integer sums: any order gives the CPU's values.
 *
 * The table kernel rebuilds the table only for a disk other than the last
 * one it built (the disk comes from the prologue, the same for every chunk
 * of a pass): a call with the same disk copies the offsets it kept and
 * returns. Rebuilt every call, the one-block kernel took about half of the
 * node's 58 us a chunk on the H200 (stem_products, 1,877-frame chunks). */
#include <stdlib.h>

#include "shaders/cuda/common/device_error.cuh"
#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/stem/bf_segments.h"

static const char k_node[] = "bf_segments";

#define MAX_SEGMENTS (SL_BF_SEGMENTS_MAX_GRID * SL_BF_SEGMENTS_MAX_GRID)
#define SUM_THREADS 256
#define SUM_WARPS (SUM_THREADS / 32)

/* The bounding box of the last build's segment pixels, half-open (empty: 0s). */
struct bf_box {
  int r0, r1, c0, c1;
};

/* What the last build of the table was for (in the device table): the disk
 * (centre row, col, radius), whether it holds a good build, and its
 * offsets, which a call with the same disk writes without a rebuild. */
struct bf_built {
  double geo[3];
  int built;
  double offsets[3 * MAX_SEGMENTS];
};

/* The node's host state over its device table. */
struct bf_state {
  bf_box *box;       /* device */
  bf_built *built;   /* device */
  uint8_t *seg;      /* device: H*W, 1 + the segment of each pixel, 0 none (valid in the last window) */
  sl_cuda_error_mirror err;
};

/* The device table: the error word, the box record, the segment table. */
static void bf_layout(sl_table *t, int64_t npix, sl_cuda_error_word **word, bf_state *o) {
  *word = (sl_cuda_error_word *)sl_table_take(t, SL_CUDA_ERROR_WORD_BYTES);
  o->box = (bf_box *)sl_table_take(t, sizeof(bf_box));
  o->built = (bf_built *)sl_table_take(t, sizeof(bf_built));
  o->seg = (uint8_t *)sl_table_take(t, npix);
}

extern "C" int64_t sl_cuda_bf_segments_table_bytes(const sl_cuda_frame_shape *frames) {
  sl_table t = sl_table_counter();
  sl_cuda_error_word *word;
  bf_state o;
  bf_layout(&t, frames->height * frames->width, &word, &o);
  return t.used;
}

/* ---- kernels --------------------------------------------------------------------- */

/* One block. The disk from the params or (use_disk) from `disk`, checked as
 * the CPU checks it (a bad one: recorded, empty box, offsets 0); then per
 * pixel of the window (sl_bf_window) its segment, d2 as sl_disk_d2 computes
 * it on the host (no FMA: __d*_rn); per segment the exact sums n, sum r,
 * sum c; the box; offsets[3k..3k+2] = mean row, mean col offset (radii), n
 * (offsets NULL: unread, not written). */
__global__ void sl_k_bf_segments_table(sl_bf_segment_layout layout, int h, int w, int use_disk, double pcr,
                                       double pcc, double pradius, const double *disk, uint8_t *seg,
                                       bf_box *box, bf_built *last, double *offsets, sl_cuda_error_word *err) {
  __shared__ sl_bf_segment_layout l;
  __shared__ double geo[3]; /* cr, cc, radius */
  __shared__ int bad, same;
  __shared__ long long win[4]; /* rows [0, 1), cols [2, 3) */
  __shared__ int bb[4];        /* min r, max r + 1, min c, max c + 1 */
  __shared__ unsigned long long n[MAX_SEGMENTS], sr[MAX_SEGMENTS], sc[MAX_SEGMENTS];
  if (threadIdx.x == 0) {
    l = layout;
    geo[0] = pcr, geo[1] = pcc, geo[2] = pradius;
    bad = 0;
    if (use_disk) {
      geo[0] = disk[0], geo[1] = disk[1], geo[2] = disk[2];
      bad = sl_cuda_disk_check(geo, h, w, err);
    }
    win[0] = win[1] = win[2] = win[3] = 0;
    if (!bad) {
      const double lim = l.extent * geo[2];
      int64_t lo, hi;
      sl_bf_window(geo[0], lim, h, &lo, &hi);
      win[0] = lo, win[1] = hi;
      sl_bf_window(geo[1], lim, w, &lo, &hi);
      win[2] = lo, win[3] = hi;
    }
    bb[0] = h, bb[1] = 0, bb[2] = w, bb[3] = 0;
    /* the table, box and offsets of this disk are there already (a bad
     * disk is never built, so it is checked and reported every call) */
    same = !bad && last->built && last->geo[0] == geo[0] && last->geo[1] == geo[1] && last->geo[2] == geo[2];
  }
  for (int k = threadIdx.x; k < MAX_SEGMENTS; k += blockDim.x) n[k] = 0, sr[k] = 0, sc[k] = 0;
  __syncthreads();
  if (same) {
    for (int k = threadIdx.x; offsets && k < 3 * l.count; k += blockDim.x) offsets[k] = last->offsets[k];
    return;
  }
  const double cr = geo[0], cc = geo[1], radius = geo[2];
  const long long wc = win[3] - win[2], npix = (win[1] - win[0]) * wc;
  for (long long i = threadIdx.x; i < npix; i += blockDim.x) {
    const int r = (int)(win[0] + i / wc), c = (int)(win[2] + i % wc);
    const double dr = __dsub_rn((double)r, cr), dc = __dsub_rn((double)c, cc);
    const double d2 = __dadd_rn(__dmul_rn(dr, dr), __dmul_rn(dc, dc));
    const int k = sl_bf_segment_of(&l, d2, dr, dc, radius);
    seg[(long long)r * w + c] = (uint8_t)(k + 1); /* at most 225 segments */
    if (k < 0) continue;
    atomicAdd(n + k, 1ull);
    atomicAdd(sr + k, (unsigned long long)r);
    atomicAdd(sc + k, (unsigned long long)c);
    atomicMin(bb + 0, r), atomicMax(bb + 1, r + 1);
    atomicMin(bb + 2, c), atomicMax(bb + 3, c + 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool empty = bb[1] <= bb[0] || bb[3] <= bb[2];
    box->r0 = empty ? 0 : bb[0], box->r1 = empty ? 0 : bb[1];
    box->c0 = empty ? 0 : bb[2], box->c1 = empty ? 0 : bb[3];
  }
  for (int k = threadIdx.x; k < l.count; k += blockDim.x) {
    double o[3] = {n[k] ? sl_bf_offset_mean(sr[k], n[k], cr, radius) : 0,
                   n[k] ? sl_bf_offset_mean(sc[k], n[k], cc, radius) : 0, (double)n[k]};
    for (int j = 0; j < 3; j++) {
      last->offsets[3 * k + j] = o[j];
      if (offsets) offsets[3 * k + j] = o[j]; /* NULL: unread */
    }
  }
  __syncthreads(); /* every offset kept before the build is marked good */
  if (threadIdx.x == 0) {
    last->geo[0] = geo[0], last->geo[1] = geo[1], last->geo[2] = geo[2];
    last->built = !bad;
  }
}

/* Blocks over the frames; per frame, warp v takes the v-th of SUM_WARPS
 * contiguous bands of the box's rows and its lanes the columns: down its
 * column a lane adds each pixel into a register run of the pixel's segment,
 * and the run into the warp's acc[v][k] where the segment changes. */
template <typename T>
__global__ void __launch_bounds__(SUM_THREADS)
    sl_k_bf_segments_sums(const T *__restrict__ x, long long nframes, long long item, int w,
                          const uint8_t *__restrict__ seg, const bf_box *__restrict__ box, int count,
                          unsigned long long *__restrict__ out, long long npos) {
  extern __shared__ unsigned long long acc[]; /* [SUM_WARPS][count] */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bf_box b = *box;
  unsigned long long *mine = acc + warp * count;
  const int band = (b.r1 - b.r0 + SUM_WARPS - 1) / SUM_WARPS;
  const int ra = b.r0 + warp * band, rz = ra + band < b.r1 ? ra + band : b.r1;
  for (long long f = blockIdx.x; f < nframes; f += gridDim.x) {
    for (int i = threadIdx.x; i < SUM_WARPS * count; i += blockDim.x) acc[i] = 0;
    __syncthreads();
    const T *fr = x + f * item;
    for (int c = b.c0 + lane; c < b.c1; c += 32) {
      int cur = -1;
      unsigned long long run = 0;
#pragma unroll 4
      for (int r = ra; r < rz; r++) {
        const long long at = (long long)r * w + c;
        const int k = seg[at] - 1;
        if (k != cur) {
          if (cur >= 0) atomicAdd(mine + cur, run);
          cur = k, run = 0;
        }
        run += k >= 0 ? (unsigned long long)fr[at] : 0ull;
      }
      if (cur >= 0) atomicAdd(mine + cur, run);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < count; k += blockDim.x) {
      unsigned long long s = 0;
      for (int v = 0; v < SUM_WARPS; v++) s += acc[v * count + k];
      out[k * npos + f] = s; /* out: the chunk's first position (the executor's concat_scan_last) */
    }
    __syncthreads();
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel bf_segments_kernels[] = {
    ENTRY("bf_segments_table", sl_k_bf_segments_table),
    ENTRY("bf_segments_sums_u8", sl_k_bf_segments_sums<uint8_t>),
    ENTRY("bf_segments_sums_u16", sl_k_bf_segments_sums<uint16_t>),
    ENTRY("bf_segments_sums_u32", sl_k_bf_segments_sums<uint32_t>),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(bf_segments_kernels, "bf_segments")

/* ---- launchers ------------------------------------------------------------------- */

static void bf_state_release(void *p) {
  bf_state *s = (bf_state *)p;
  if (!s) return;
  sl_cuda_error_mirror_free(&s->err);
  free(s);
}

/* The node's state over its device table, made on its first call. */
static sl_code bf_state_get(const sl_cuda_bf_segments_params *p, sl_kernel_args *a, bf_state **out) {
  bf_state *s = (bf_state *)*p->device_state.state;
  if (s) {
    *out = s;
    return SL_OK;
  }
  sl_table t = sl_table_lent(a);
  bf_state pieces = {};
  sl_cuda_error_word *word = NULL;
  bf_layout(&t, p->frames.height * p->frames.width, &word, &pieces);
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc != SL_OK) return rc;
  /* lent memory holds whatever it held: no build is kept yet */
  cudaError_t e = cudaMemsetAsync(pieces.built, 0, sizeof(bf_built), sl_cuda_queue(a));
  if (e != cudaSuccess) return sl_cuda_runtime_fail(a, e, k_node, "the table's build record");
  s = (bf_state *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  *s = pieces;
  rc = sl_cuda_error_mirror_create(&s->err, word, a, k_node);
  if (rc != SL_OK) {
    free(s);
    return rc;
  }
  *p->device_state.state = s;
  *p->device_state.release = bf_state_release;
  *out = s;
  return SL_OK;
}

template <typename T>
static sl_code launch_sums(const sl_cuda_bf_segments_params *p, sl_kernel_args *a, const bf_state *s) {
  const long long nf = a->pos_count;
  const int count = p->layout.count;
  long long grid = 8LL * sl_cuda_multiprocessors(a);
  if (grid > nf) grid = nf;
  const size_t shared = (size_t)SUM_WARPS * (size_t)count * sizeof(unsigned long long);
  sl_k_bf_segments_sums<T><<<(unsigned)grid, SUM_THREADS, shared, sl_cuda_queue(a)>>>(
      (const T *)a->in[0], nf, (long long)(p->frames.height * p->frames.width), (int)p->frames.width, s->seg,
      s->box, count, (unsigned long long *)a->out[0], (long long)p->positions);
  return sl_cuda_check_launch(a, "sl_k_bf_segments_sums");
}

extern "C" sl_code sl_cuda_bf_segments(const sl_cuda_bf_segments_params *p, sl_kernel_args *a) {
  const sl_cuda_frame_shape *f = &p->frames;
  if (f->height * f->width > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  if (p->layout.count < 1 || p->layout.count > MAX_SEGMENTS)
    return sl_fail(a->err, SL_ERR_INTERNAL, "bf_segments: no segment layout");
  if (a->pos_start < 0 || a->pos_start + a->pos_count > p->positions)
    return sl_fail(a->err, SL_ERR_INTERNAL, "bf_segments: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count), (long long)p->positions);
  if (p->use_disk && !a->in[1]) return sl_fail(a->err, SL_ERR_INTERNAL, "input 'disk' has no data");
  bf_state *s = NULL;
  sl_code rc = bf_state_get(p, a, &s);
  if (rc) return rc;
  /* An error an earlier call recorded (its copy has landed: the executor
   * waited for that batch). */
  if ((rc = sl_cuda_error_disk_fail(s->err.host, a, f->height, f->width))) return rc;
  sl_k_bf_segments_table<<<1, 1024, 0, sl_cuda_queue(a)>>>(
      p->layout, (int)f->height, (int)f->width, p->use_disk, p->cr, p->cc, p->radius, (const double *)a->in[1],
      s->seg, s->box, s->built, (double *)a->out[1], s->err.device);
  if ((rc = sl_cuda_check_launch(a, "sl_k_bf_segments_table"))) return rc;
  if (a->pos_count > 0 && a->out[0]) { /* out[0] NULL: the segments are unread */
    switch (f->dtype) {
      case SL_U8: rc = launch_sums<uint8_t>(p, a, s); break;
      case SL_U16: rc = launch_sums<uint16_t>(p, a, s); break;
      default: rc = launch_sums<uint32_t>(p, a, s); break;
    }
    if (rc) return rc;
  }
  return sl_cuda_error_mirror_pull(&s->err, a, k_node);
}

extern "C" sl_code sl_cuda_bf_segments_finalize(const sl_cuda_bf_segments_params *p, sl_kernel_args *a) {
  bf_state *s = (bf_state *)*p->device_state.state;
  if (!s) return SL_OK; /* no chunk ran */
  sl_code rc = sl_cuda_error_mirror_pull(&s->err, a, k_node);
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  if (rc == SL_OK) rc = sl_cuda_error_disk_fail(s->err.host, a, p->frames.height, p->frames.width);
  return rc;
}
