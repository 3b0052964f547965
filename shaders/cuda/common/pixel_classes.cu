/* Per-pixel classes and the masked frame sums of virtual_image and
 * virtual_detectors. See pixel_classes.cuh. Integer sums: equal to the CPU
 * bit for bit; the disk geometry uses the CPU's IEEE operations in its order
 * (explicit __d*_rn intrinsics, so nvcc never contracts a*b+c into an FMA). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/frame_units.cuh"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/common/pixel_classes.cuh"
#include "shaders/cuda/common/warp_reduce.cuh"

/* ---- kernels --------------------------------------------------------------------- */

/* Compacts the units holding a nonzero class byte into units[] (ascending), or
 * with `all` records every unit; one block of any multiple of 32 threads. */
__device__ void compact_units(const uint8_t *cls, uint32_t npix, int v, int all, uint32_t *units,
                              uint32_t *n_out) {
  __shared__ uint32_t wtot[32];
  __shared__ uint32_t base, total;
  const uint32_t nunits = (npix + (uint32_t)v - 1) / (uint32_t)v;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
  if (all) {
    if (tid == 0) *n_out = nunits;
    return;
  }
  if (tid == 0) base = 0;
  __syncthreads();
  for (uint32_t t0 = 0; t0 < nunits; t0 += blockDim.x) {
    uint32_t u = t0 + (uint32_t)tid;
    int flag = 0;
    if (u < nunits)
      for (int k = 0; k < v; k++) {
        uint32_t e = u * (uint32_t)v + (uint32_t)k;
        if (e < npix && cls[e]) flag = 1;
      }
    unsigned bal = __ballot_sync(0xFFFFFFFFu, flag);
    if (lane == 0) wtot[warp] = __popc(bal);
    __syncthreads();
    if (tid == 0) {
      uint32_t run = 0;
      for (int k = 0; k < nw; k++) {
        uint32_t t = wtot[k];
        wtot[k] = run;
        run += t;
      }
      total = run;
    }
    __syncthreads();
    if (flag) units[base + wtot[warp] + __popc(bal & ((1u << lane) - 1u))] = u;
    __syncthreads();
    if (tid == 0) base += total;
    __syncthreads();
  }
  if (tid == 0) *n_out = base;
}

__global__ void sl_k_compact_units(const uint8_t *cls, uint32_t npix, int v, int all, uint32_t *units,
                                   uint32_t *n_out) {
  compact_units(cls, npix, v, all, units, n_out);
}

/* The class table from the disk (nodes/common/disk_geometry.h: the CPU geometry), skipped
 * when the disk and unit width are those of the last build. Bad disk values
 * go to the error word (first error wins) and leave an empty unit list. */
__global__ void sl_k_disk_classes(sl_cuda_disk_geometry *g, sl_cuda_disk_geometry p, const double *disk,
                                  uint8_t *cls, int v, int all, uint32_t *units, uint32_t *n_units,
                                  sl_cuda_error_word *err) {
  __shared__ int skip;
  __shared__ double sd[3];
  if (threadIdx.x == 0) {
    double d0 = disk[0], d1 = disk[1], d2 = disk[2];
    sd[0] = d0, sd[1] = d1, sd[2] = d2;
    if (sl_cuda_disk_check(sd, p.h, p.w, err)) {
      *n_units = 0;
      g->built_v = 0;
      skip = 1;
    } else {
      skip = g->built_v == v && g->disk[0] == d0 && g->disk[1] == d1 && g->disk[2] == d2 &&
             !(d0 == 0 && d1 == 0 && d2 == 0 && g->built_v == 0);
    }
  }
  __syncthreads();
  if (skip) return;
  const double cr = sd[0], cc = sd[1], radius = sd[2];
  const double inner = p.in_radii ? __dmul_rn(p.inner_p, radius) : p.inner_p;
  const double outer = p.in_radii ? __dmul_rn(p.outer_p, radius) : p.outer_p;
  const double r2 = __dmul_rn(radius, radius), in2 = __dmul_rn(inner, inner),
               out2 = __dmul_rn(outer, outer);
  const int npix = p.h * p.w;
  for (int i = threadIdx.x; i < npix; i += blockDim.x) {
    int r = i / p.w, c = i % p.w;
    double dr = __dsub_rn((double)r, cr), dc = __dsub_rn((double)c, cc);
    double d2 = __dadd_rn(__dmul_rn(dr, dr), __dmul_rn(dc, dc));
    uint8_t k;
    if (p.mode == SL_CUDA_CLASSES_DETECTORS) {
      k = (uint8_t)((d2 <= r2 ? 1 : 0) | (d2 >= in2 && d2 < out2 ? 2 : 0));
    } else { /* 0 bf, 2 df, else a ring (adf, annulus) */
      int in = p.ring_kind == 0 ? d2 <= r2 : p.ring_kind == 2 ? d2 > r2 : (d2 >= in2 && d2 < out2);
      k = (uint8_t)in;
    }
    cls[i] = k;
  }
  __syncthreads();
  compact_units(cls, (uint32_t)npix, v, all, units, n_units);
  if (threadIdx.x == 0) {
    g->disk[0] = cr, g->disk[1] = cc, g->disk[2] = radius;
    g->built_v = v;
  }
}

/* MODE 0: out0 = sum of class-bit-0 pixels. MODE 1: out0 = BF (bit 0),
 * out1 = ADF (bit 1), out2 = DF = total - BF. MODE 2: MODE 1 and the
 * frame's moments from the same read: os = S (the total), osr = Sr, osc =
 * Sc, as frame_moments.cu sums them (a unit lies in one row: V divides W in
 * the vector path; u64 sums of integers, so any order gives its values). */
template <typename T, int V, int MODE>
__global__ void __launch_bounds__(32 * SL_FRAME_WARPS)
    sl_k_masked_sums(const T *__restrict__ x, long long nframes, long long item, int w,
                     const uint8_t *__restrict__ cls, const uint32_t *__restrict__ units,
                     const uint32_t *__restrict__ n_units, int use_list, int split,
                     unsigned long long *__restrict__ o0, unsigned long long *__restrict__ o1,
                     unsigned long long *__restrict__ o2, unsigned long long *__restrict__ os,
                     unsigned long long *__restrict__ osr, unsigned long long *__restrict__ osc) {
  typedef typename unit_sum_type<T>::t A;
  const uint32_t n = *n_units;
  const int lane = threadIdx.x & 31;
  const long long nw = (long long)gridDim.x * SL_FRAME_WARPS;
  /* MODE 2 walks every unit in order (no list): lane's unit i starts at
   * pixel (r, c) and steps 32 V pixels = (sdr, sdc). */
  const uint32_t step = 32u * V, sdr = MODE == 2 ? step / (uint32_t)w : 0, sdc = MODE == 2 ? step % (uint32_t)w : 0;
  for (long long t = (long long)blockIdx.x * SL_FRAME_WARPS + (threadIdx.x >> 5); t < nframes * split; t += nw) {
    long long f;
    uint32_t i0, i1;
    frame_part(t, split, n, &f, &i0, &i1);
    const T *fr = x + f * item;
    unsigned long long a0 = 0, a1 = 0, a2 = 0, sr = 0, sc = 0;
    const uint32_t e0 = (i0 + (uint32_t)lane) * V;
    uint32_t r = MODE == 2 ? e0 / (uint32_t)w : 0, c = MODE == 2 ? e0 % (uint32_t)w : 0;
#pragma unroll 4
    for (uint32_t i = i0 + lane; i < i1; i += 32) {
      const uint32_t u = use_list ? __ldg(units + i) : i;
      T e[V];
      uint8_t cl[V];
      load_unit<T, V>(fr + (size_t)u * V, e);
      load_cls<V>(cls + (size_t)u * V, cl);
      A s0 = 0, s1 = 0, s2 = 0, cu = 0;
#pragma unroll
      for (int k = 0; k < V; k++) {
        const A val = (A)e[k];
        s0 += (cl[k] & 1) ? val : 0;
        if (MODE >= 1) {
          s1 += (cl[k] & 2) ? val : 0;
          s2 += val;
        }
        if (MODE == 2 && V > 1) cu += (A)k * val;
      }
      a0 += s0;
      if (MODE >= 1) a1 += s1, a2 += s2;
      if (MODE == 2) {
        sr += (unsigned long long)r * s2;
        sc += (unsigned long long)c * s2 + cu;
        c += sdc;
        r += sdr;
        if (c >= (uint32_t)w) c -= (uint32_t)w, r++;
      }
    }
    a0 = warp_sum(a0);
    if (MODE >= 1) a1 = warp_sum(a1), a2 = warp_sum(a2);
    if (MODE == 2) sr = warp_sum(sr), sc = warp_sum(sc);
    if (lane == 0 && split == 1) {
      o0[f] = a0;
      if (MODE >= 1) o1[f] = a1, o2[f] = a2 - a0;
      if (MODE == 2) os[f] = a2, osr[f] = sr, osc[f] = sc;
    } else if (lane == 0) { /* parts of a frame into zeroed outputs; DF's wrap back (BF <= total) */
      atomicAdd(o0 + f, a0);
      if (MODE >= 1) atomicAdd(o1 + f, a1), atomicAdd(o2 + f, a2 - a0);
      if (MODE == 2) atomicAdd(os + f, a2), atomicAdd(osr + f, sr), atomicAdd(osc + f, sc);
    }
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel pixel_class_kernels[] = {
    ENTRY("compact_units", sl_k_compact_units),
    ENTRY("disk_classes", sl_k_disk_classes),
    ENTRY("masked_sums_image_u8x16", (sl_k_masked_sums<uint8_t, 16, 0>)),
    ENTRY("masked_sums_image_u8", (sl_k_masked_sums<uint8_t, 1, 0>)),
    ENTRY("masked_sums_image_u16x8", (sl_k_masked_sums<uint16_t, 8, 0>)),
    ENTRY("masked_sums_image_u16", (sl_k_masked_sums<uint16_t, 1, 0>)),
    ENTRY("masked_sums_image_u32x4", (sl_k_masked_sums<uint32_t, 4, 0>)),
    ENTRY("masked_sums_image_u32", (sl_k_masked_sums<uint32_t, 1, 0>)),
    ENTRY("masked_sums_detectors_u8x16", (sl_k_masked_sums<uint8_t, 16, 1>)),
    ENTRY("masked_sums_detectors_u8", (sl_k_masked_sums<uint8_t, 1, 1>)),
    ENTRY("masked_sums_detectors_u16x8", (sl_k_masked_sums<uint16_t, 8, 1>)),
    ENTRY("masked_sums_detectors_u16", (sl_k_masked_sums<uint16_t, 1, 1>)),
    ENTRY("masked_sums_detectors_u32x4", (sl_k_masked_sums<uint32_t, 4, 1>)),
    ENTRY("masked_sums_detectors_u32", (sl_k_masked_sums<uint32_t, 1, 1>)),
    ENTRY("masked_sums_moments_u8x16", (sl_k_masked_sums<uint8_t, 16, 2>)),
    ENTRY("masked_sums_moments_u8", (sl_k_masked_sums<uint8_t, 1, 2>)),
    ENTRY("masked_sums_moments_u16x8", (sl_k_masked_sums<uint16_t, 8, 2>)),
    ENTRY("masked_sums_moments_u16", (sl_k_masked_sums<uint16_t, 1, 2>)),
    ENTRY("masked_sums_moments_u32x4", (sl_k_masked_sums<uint32_t, 4, 2>)),
    ENTRY("masked_sums_moments_u32", (sl_k_masked_sums<uint32_t, 1, 2>)),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(pixel_class_kernels, "virtual_detectors virtual_image")

/* ---- state ----------------------------------------------------------------------- */

/* The node's device table: the error word, the geometry record (disk input
 * only), the unit count, the class table and the unit list. */
static void classes_layout(sl_table *t, int64_t npix, bool use_disk, sl_cuda_error_word **word,
                           sl_cuda_pixel_classes *o) {
  *word = (sl_cuda_error_word *)sl_table_take(t, SL_CUDA_ERROR_WORD_BYTES);
  o->geom = use_disk ? sl_table_take(t, sizeof(sl_cuda_disk_geometry)) : NULL;
  o->n_units = (uint32_t *)sl_table_take(t, 16);
  o->cls = (uint8_t *)sl_table_take(t, npix + 16);
  o->units = (uint32_t *)sl_table_take(t, npix * 4 + 16);
}

extern "C" int64_t sl_cuda_pixel_classes_table_bytes(int64_t height, int64_t width, bool use_disk) {
  sl_table t = sl_table_counter();
  sl_cuda_error_word *word;
  sl_cuda_pixel_classes o;
  classes_layout(&t, height * width, use_disk, &word, &o);
  return t.used;
}

static void pixel_classes_release(void *p) {
  sl_cuda_pixel_classes *s = (sl_cuda_pixel_classes *)p;
  if (!s) return;
  sl_cuda_error_mirror_free(&s->err);
  free(s);
}

/* The node's state over its device table, created on its first call (with
 * its error word; the geometry record starts cleared: no disk seen). */
static sl_code pixel_classes_get(sl_cuda_state_holder holder, sl_kernel_args *a, const sl_cuda_frame_shape *f,
                                 bool use_disk, const char *node, sl_cuda_pixel_classes **out) {
  sl_cuda_pixel_classes *s = (sl_cuda_pixel_classes *)*holder.state;
  if (s) {
    *out = s;
    return SL_OK;
  }
  const int64_t npix = f->height * f->width;
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  sl_table t = sl_table_lent(a);
  sl_cuda_pixel_classes pieces;
  memset(&pieces, 0, sizeof pieces);
  sl_cuda_error_word *word = NULL;
  classes_layout(&t, npix, use_disk, &word, &pieces);
  sl_code rc = sl_table_check(&t, a, node);
  if (rc != SL_OK) return rc;
  if (use_disk) {
    cudaError_t e = cudaMemsetAsync(pieces.geom, 0, sizeof(sl_cuda_disk_geometry), sl_cuda_queue(a));
    if (e != cudaSuccess) return sl_cuda_runtime_fail(a, e, node, "geometry tables");
  }
  s = (sl_cuda_pixel_classes *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  *s = pieces;
  rc = sl_cuda_error_mirror_create(&s->err, word, a, node);
  if (rc != SL_OK) {
    free(s);
    return rc;
  }
  *holder.state = s;
  *holder.release = pixel_classes_release;
  *out = s;
  return SL_OK;
}

/* ---- tables ---------------------------------------------------------------------- */

static sl_code relist_units(sl_kernel_args *a, sl_cuda_pixel_classes *s, int64_t npix, int v, int all) {
  sl_k_compact_units<<<1, 1024, 0, sl_cuda_queue(a)>>>(s->cls, (uint32_t)npix, v, all, s->units, s->n_units);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_compact_units");
  if (rc) return rc;
  s->built_v = v;
  return SL_OK;
}

/* Host class table -> device (once), and its unit list. */
static sl_code classes_from_host(sl_kernel_args *a, sl_cuda_pixel_classes *s, const sl_cuda_class_request *r,
                                 int64_t npix, int v, const char *node) {
  if (s->built_v == v) return SL_OK;
  if (s->uploaded) return relist_units(a, s, npix, v, r->all_units); /* the alignment changed */
  uint8_t *h_cls = (uint8_t *)calloc((size_t)npix, 1);
  if (!h_cls) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for the class table");
  if (!r->host.fill(r->host.ctx, h_cls)) {
    free(h_cls);
    return sl_fail(a->err, SL_ERR_INTERNAL, "%s", r->host.missing);
  }
  /* pageable source: the copy completes before cudaMemcpyAsync returns */
  cudaError_t e = cudaMemcpyAsync(s->cls, h_cls, (size_t)npix, cudaMemcpyHostToDevice, sl_cuda_queue(a));
  free(h_cls);
  if (e != cudaSuccess) return sl_cuda_runtime_fail(a, e, node, "mask tables");
  s->uploaded = true;
  return relist_units(a, s, npix, v, r->all_units);
}

/* disk input: the geometry kernel checks and compares the disk on device. */
static sl_code classes_from_disk(sl_kernel_args *a, sl_cuda_pixel_classes *s, const sl_cuda_class_request *r,
                                 const sl_cuda_frame_shape *f, int v, const char *node) {
  if (!r->disk) return sl_fail(a->err, SL_ERR_INTERNAL, "input 'disk' has no data");
  if (!s->geom) return sl_fail(a->err, SL_ERR_INTERNAL, "%s: no geometry record in the device table", node);
  sl_cuda_disk_geometry p = r->geometry;
  p.h = (int)f->height, p.w = (int)f->width;
  sl_k_disk_classes<<<1, 1024, 0, sl_cuda_queue(a)>>>((sl_cuda_disk_geometry *)s->geom, p, r->disk, s->cls, v,
                                                      r->all_units, s->units, s->n_units, s->err.device);
  return sl_cuda_check_launch(a, "sl_k_disk_classes");
}

/* Builds (first call) or refreshes (new unit width, a disk input) the table
 * and its unit list for units of v pixels. */
static sl_code classes_build(sl_kernel_args *a, sl_cuda_pixel_classes *s, const sl_cuda_class_request *r,
                             const sl_cuda_frame_shape *f, int v, const char *node) {
  const int64_t npix = f->height * f->width;
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  return r->use_disk ? classes_from_disk(a, s, r, f, v, node) : classes_from_host(a, s, r, npix, v, node);
}

sl_cuda_class_request sl_cuda_class_request_make(int mode, const sl_kernel_args *a, bool use_disk, bool in_radii,
                                                 double inner, double outer) {
  sl_cuda_class_request r;
  memset(&r, 0, sizeof r);
  r.all_units = mode == SL_CUDA_CLASSES_DETECTORS; /* DF needs every pixel */
  r.use_disk = use_disk;
  r.disk = (const double *)a->in[1];
  r.geometry.mode = mode;
  r.geometry.in_radii = in_radii;
  r.geometry.inner_p = inner;
  r.geometry.outer_p = outer;
  return r;
}

/* ---- sums and errors ------------------------------------------------------------- */

template <int MODE>
static sl_code launch_masked_sums(sl_kernel_args *a, const sl_cuda_pixel_classes *s, const sl_cuda_frame_shape *f,
                                  int v) {
  const long long item = (long long)(f->height * f->width);
  const long long nf = a->pos_count;
  if (nf <= 0) return SL_OK;
  /* MODE 0 reads a list of the image's units (the BF disk's: a few hundred)
   * and is not split: the zeroing and atomics would cost what they save. */
  const int split = MODE == 0 ? 1 : frame_split(nf, sl_cuda_multiprocessors(a));
  unsigned grid = frame_grid(nf * split, sl_cuda_multiprocessors(a));
  cudaStream_t st = sl_cuda_queue(a);
  unsigned long long *o[6] = {(unsigned long long *)a->out[0]};
  const int n_out = MODE == 0 ? 1 : MODE == 1 ? 3 : 6;
  for (int k = 1; k < n_out; k++) o[k] = (unsigned long long *)a->out[k];
  for (int k = 0; k < n_out && split > 1; k++) { /* the parts add into them */
    sl_code rc = sl_cuda_runtime_fail(a, cudaMemsetAsync(o[k], 0, (size_t)nf * sizeof *o[k], st), "masked sums",
                                      "zeroing the sums");
    if (rc) return rc;
  }
  const int list = MODE == 0;
#define LAUNCH(T, VV)                                                                                   \
  sl_k_masked_sums<T, VV, MODE><<<grid, 32 * SL_FRAME_WARPS, 0, st>>>((const T *)a->in[0], nf, item,        \
                                                                     (int)f->width, s->cls, s->units,     \
                                                                     s->n_units, list, split, o[0], o[1], \
                                                                     o[2], o[3], o[4], o[5])
  switch (f->dtype) {
    case SL_U8: if (v > 1) LAUNCH(uint8_t, 16); else LAUNCH(uint8_t, 1); break;
    case SL_U16: if (v > 1) LAUNCH(uint16_t, 8); else LAUNCH(uint16_t, 1); break;
    default: if (v > 1) LAUNCH(uint32_t, 4); else LAUNCH(uint32_t, 1); break;
  }
#undef LAUNCH
  return sl_cuda_check_launch(a, "sl_k_masked_sums");
}

/* Reports an error the table kernel recorded (bad `disk` values) once its
 * copy to the mirror landed: without `wait` an earlier call's (batches run
 * ahead of the host, so it may show a call or more later); with `wait`
 * (finalize) everything so far. */
static sl_code pixel_classes_check(sl_kernel_args *a, sl_cuda_pixel_classes *s, const sl_cuda_frame_shape *f,
                                   bool wait, const char *node) {
  if (wait) {
    sl_code rc = sl_cuda_error_mirror_pull(&s->err, a, node);
    if (rc) return rc;
    rc = sl_cuda_wait(a);
    if (rc) return rc;
  }
  return sl_cuda_error_disk_fail(s->err.host, a, f->height, f->width);
}

sl_code sl_cuda_pixel_classes_finalize(sl_cuda_state_holder holder, sl_kernel_args *a,
                                       const sl_cuda_frame_shape *f, const char *node) {
  sl_cuda_pixel_classes *s = (sl_cuda_pixel_classes *)*holder.state;
  if (!s) return SL_OK; /* no chunk ran */
  return pixel_classes_check(a, s, f, true, node);
}

sl_code sl_cuda_pixel_class_sums(sl_cuda_state_holder holder, sl_kernel_args *a, const sl_cuda_frame_shape *f,
                                 const sl_cuda_class_request *r, const char *node, sl_cuda_pixel_classes **out) {
  sl_cuda_pixel_classes *s = NULL;
  sl_code rc = pixel_classes_get(holder, a, f, r->use_disk, node, &s);
  if (rc) return rc;
  *out = s;
  if ((rc = pixel_classes_check(a, s, f, false, node))) return rc;
  int v = frame_unit_width(a->in[0], f->width, sl_dtype_size(f->dtype));
  if ((rc = classes_build(a, s, r, f, v, node))) return rc;
  if (r->geometry.mode != SL_CUDA_CLASSES_DETECTORS) return launch_masked_sums<0>(a, s, f, v);
  return r->moments ? launch_masked_sums<2>(a, s, f, v) : launch_masked_sums<1>(a, s, f, v);
}
