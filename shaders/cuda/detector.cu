/* CUDA kernels of the detector and STEM product nodes: virtual_image,
 * virtual_detectors, moments, com (+ finalize), mask_correct, bin_detector and
 * sum. Every launcher has its node's CPU semantics exactly: integer results
 * are equal bit for bit, floating results are computed with the same IEEE
 * operations in the same order (explicit __d*_rn intrinsics, so nvcc never
 * contracts a*b+c into an FMA that the CPU build does not use).
 *
 * Layout of the frame kernels. A frame is cut into "units" of V consecutive
 * pixels: V = 16 / sizeof(T) (one 16-byte load) when rows are a multiple of
 * 16 bytes and the chunk is 16-byte aligned (the pool's buffers are), else
 * V = 1 (scalar loads; odd detector sizes). Per-pixel class bytes (an H*W u8
 * table in device memory, read through L1: 36 KB for 192x192) say which
 * output a pixel counts for, and a compacted list of the units that hold at
 * least one selected pixel lets a small mask (BF disk) read only its rows'
 * 16-byte sectors instead of the whole frame.
 *
 * Masked sums and moments run one WARP per frame (grid-stride over frames):
 * each lane accumulates its units in registers (u32 per unit where provably
 * exact: at most 16 u8 or 8 u16 values; u64 per lane), then a shuffle
 * reduction gives the frame's u64 result: no shared-memory barriers and no
 * global atomics. Several loads are in flight per lane (unrolled loop) and
 * 64 warps per SM keep HBM busy.
 *
 * Device-side errors (a `disk` input with bad values, a bin_detector value
 * above max_value) are recorded in the node's device error word (first error
 * wins). The launcher copies the word to pinned host memory asynchronously
 * after its kernels; the next call (the executor has waited for the previous
 * batch) and the node's CUDA finalize (one stream sync after the last chunk)
 * read it and fail with the CPU's message, naming the chunk/frame/pixel that
 * failed. So an error is reported one chunk late at most, never lost. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "engine/graph/graph.h"
}
#include "shaders/cuda/sl_cuda.h"
#include "shaders/cuda/sl_cuda_detector.h"

/* ---- shared helpers ------------------------------------------------------------ */

#define DD_WARPS 8 /* warps per block of the warp-per-frame kernels */
#define DD_NONE 0xFFFFFFFFFFFFFFFFull

static int dd_sms(void) {
  static int sms = 0;
  if (!sms) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0)
      sms = v;
    else
      sms = 132;
  }
  return sms;
}

static cudaStream_t dd_stream(sl_kernel_args *a) { return (cudaStream_t)sl_cuda_stream(a->backend); }

/* Device error word: the first error of the run. */
typedef struct dd_err {
  unsigned long long code;  /* DD_NONE, or the failing index (bin: p * item + pixel) */
  unsigned long long value; /* the failing value */
  long long chunk, pos_start;
  int kind; /* 1 bin audit, 2 disk values not finite / radius <= 0, 3 disk centre far out */
  int pad;
  double disk[3];
} dd_err;

/* Per-node device state (sl_node.dev_state): tables built on the first call. */
typedef struct dd_state {
  int node_kind;
  uint8_t *cls;       /* H*W class / bad bytes */
  uint32_t *units;    /* compacted unit list */
  uint32_t *n_units;  /* device: units in the list (or all units) */
  void *geom;         /* device: disk-mode geometry record */
  uint8_t *valid;     /* com: per scan position S > 0 */
  double *fin;        /* com finalize: per output {flag, my, mr, mc, b, c}, then block sums */
  dd_err *err;        /* device */
  dd_err *herr;       /* pinned host mirror */
  int built_v;        /* V the unit list was built for (0 = none) */
  int64_t npos;
} dd_state;

static void dd_state_free(void *p) {
  dd_state *s = (dd_state *)p;
  if (!s) return;
  cudaFree(s->cls);
  cudaFree(s->units);
  cudaFree(s->n_units);
  cudaFree(s->geom);
  cudaFree(s->valid);
  cudaFree(s->fin);
  cudaFree(s->err);
  if (s->herr) cudaFreeHost(s->herr);
  free(s);
}

static sl_code dd_cuda(sl_kernel_args *a, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return SL_OK;
  return sl_fail(a->err, SL_ERR_BACKEND, "%s: %s (%s)", a->node->desc ? a->node->desc->type : "?",
                 what, cudaGetErrorString(e));
}

/* The node's dev_state, created on the first call (with its error word). */
static sl_code dd_get(sl_kernel_args *a, int kind, dd_state **out) {
  sl_node *n = (sl_node *)a->node; /* only this node's device state changes */
  dd_state *s = (dd_state *)n->dev_state;
  if (s && s->node_kind == kind) {
    *out = s;
    return SL_OK;
  }
  if (s && n->dev_state_free) n->dev_state_free(s);
  n->dev_state = NULL;
  s = (dd_state *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  s->node_kind = kind;
  cudaError_t e = cudaMalloc((void **)&s->err, sizeof(dd_err));
  if (e == cudaSuccess) e = cudaHostAlloc((void **)&s->herr, sizeof(dd_err), cudaHostAllocDefault);
  if (e == cudaSuccess) {
    memset(s->herr, 0xFF, sizeof(dd_err));
    s->herr->kind = 0;
    e = cudaMemcpyAsync(s->err, s->herr, sizeof(dd_err), cudaMemcpyHostToDevice, dd_stream(a));
  }
  if (e != cudaSuccess) {
    dd_state_free(s);
    return dd_cuda(a, e, "device state");
  }
  n->dev_state = s;
  n->dev_state_free = dd_state_free;
  *out = s;
  return SL_OK;
}

/* Enqueues the copy of the error word to the pinned mirror (after the kernels). */
static sl_code dd_err_pull(sl_kernel_args *a, dd_state *s) {
  return dd_cuda(a, cudaMemcpyAsync(s->herr, s->err, sizeof(dd_err), cudaMemcpyDeviceToHost,
                                    dd_stream(a)),
                 "error word copy");
}

/* Reports an error recorded by an earlier call once its copy to the mirror
 * landed (batches run ahead of the host, so without `sync` it may show a
 * call or more later; with `sync`, at finalize, it waits here). */
static sl_code dd_err_check(sl_kernel_args *a, dd_state *s, bool sync) {
  if (sync) {
    sl_code rc = dd_err_pull(a, s);
    if (rc) return rc;
    rc = sl_cuda_sync(a);
    if (rc) return rc;
  }
  const dd_err *e = s->herr;
  if (e->kind == 2)
    return sl_fail(a->err, SL_ERR_FORMAT,
                   "input 'disk' holds centre (%g, %g) radius %g: needs a finite centre and a "
                   "radius > 0",
                   e->disk[0], e->disk[1], e->disk[2]);
  if (e->kind == 3) {
    const sl_tensor_desc *x = &a->node->in[0];
    return sl_fail(a->err, SL_ERR_FORMAT,
                   "input 'disk': centre (%g, %g) is far outside the %lldx%lld detector",
                   e->disk[0], e->disk[1], (long long)x->dims[x->rank - 2],
                   (long long)x->dims[x->rank - 1]);
  }
  return SL_OK;
}

/* Unit loads: V elements of T (16 bytes, or one element), V class bytes. */
template <typename T, int V>
__device__ __forceinline__ void load_unit(const T *__restrict__ p, T (&e)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    uint4 q = __ldcs(reinterpret_cast<const uint4 *>(p)); /* streamed once: evict first */
    memcpy(e, &q, 16);
  } else {
    e[0] = p[0];
  }
}
template <int V>
__device__ __forceinline__ void load_cls(const uint8_t *__restrict__ p, uint8_t (&c)[V]) {
  if constexpr (V == 16) {
    uint4 q = __ldg(reinterpret_cast<const uint4 *>(p));
    memcpy(c, &q, 16);
  } else if constexpr (V == 8) {
    uint2 q = __ldg(reinterpret_cast<const uint2 *>(p));
    memcpy(c, &q, 8);
  } else if constexpr (V == 4) {
    unsigned q = __ldg(reinterpret_cast<const unsigned *>(p));
    memcpy(c, &q, 4);
  } else {
    c[0] = __ldg(p);
  }
}

/* The per-unit partial sum type: u32 holds 16 u8 or 8 u16 values exactly. */
template <typename T> struct acc_of { typedef uint32_t t; };
template <> struct acc_of<uint32_t> { typedef unsigned long long t; };

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
  return v;
}

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

__global__ void k_units(const uint8_t *cls, uint32_t npix, int v, int all, uint32_t *units,
                        uint32_t *n_out) {
  compact_units(cls, npix, v, all, units, n_out);
}

/* ---- virtual_image / virtual_detectors -------------------------------------------- */

/* Disk-mode geometry, as the CPU computes it (stem_geom.h, vi_geom_from_disk,
 * vd_build): d2 = dr*dr + dc*dc in double, radii scaled by `units`. */
typedef struct dd_geom {
  int mode;    /* 0 virtual_image, 1 virtual_detectors */
  int vi_kind; /* 0 bf, 1 adf, 2 df, 3 annulus */
  int in_radii;
  int h, w;
  double inner_p, outer_p;
  /* device record */
  double disk[3];
  int built_v;
} dd_geom;

__global__ void k_geom(dd_geom *g, dd_geom p, const double *disk, uint8_t *cls, int v, int all,
                       uint32_t *units, uint32_t *n_units, dd_err *err) {
  __shared__ int skip;
  __shared__ double sd[3];
  if (threadIdx.x == 0) {
    double d0 = disk[0], d1 = disk[1], d2 = disk[2];
    sd[0] = d0, sd[1] = d1, sd[2] = d2;
    int bad = 0;
    if (!isfinite(d0) || !isfinite(d1) || !isfinite(d2) || !(d2 > 0)) bad = 2;
    else if (d0 < -(double)p.h || d0 > 2.0 * (double)p.h || d1 < -(double)p.w ||
             d1 > 2.0 * (double)p.w)
      bad = 3;
    if (bad) {
      if (err->kind == 0) {
        err->kind = bad;
        err->disk[0] = d0, err->disk[1] = d1, err->disk[2] = d2;
      }
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
    if (p.mode == 1) {
      k = (uint8_t)((d2 <= r2 ? 1 : 0) | (d2 >= in2 && d2 < out2 ? 2 : 0));
    } else {
      int in = p.vi_kind == 0 ? d2 <= r2 : p.vi_kind == 2 ? d2 > r2 : (d2 >= in2 && d2 < out2);
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
 * out1 = ADF (bit 1), out2 = DF = total - BF (the complement of BF, exact). */
template <typename T, int V, int MODE>
__global__ void __launch_bounds__(32 * DD_WARPS)
    k_vsum(const T *__restrict__ x, long long nframes, long long item,
           const uint8_t *__restrict__ cls, const uint32_t *__restrict__ units,
           const uint32_t *__restrict__ n_units, int use_list, unsigned long long *__restrict__ o0,
           unsigned long long *__restrict__ o1, unsigned long long *__restrict__ o2) {
  typedef typename acc_of<T>::t A;
  const uint32_t n = *n_units;
  const int lane = threadIdx.x & 31;
  const long long nw = (long long)gridDim.x * DD_WARPS;
  for (long long f = (long long)blockIdx.x * DD_WARPS + (threadIdx.x >> 5); f < nframes; f += nw) {
    const T *fr = x + f * item;
    unsigned long long a0 = 0, a1 = 0, a2 = 0;
#pragma unroll 4
    for (uint32_t i = lane; i < n; i += 32) {
      const uint32_t u = use_list ? __ldg(units + i) : i;
      T e[V];
      uint8_t c[V];
      load_unit<T, V>(fr + (size_t)u * V, e);
      load_cls<V>(cls + (size_t)u * V, c);
      A s0 = 0, s1 = 0, s2 = 0;
#pragma unroll
      for (int k = 0; k < V; k++) {
        const A val = (A)e[k];
        if (MODE == 0) {
          s0 += (c[k] & 1) ? val : 0;
        } else {
          s0 += (c[k] & 1) ? val : 0;
          s1 += (c[k] & 2) ? val : 0;
          s2 += val;
        }
      }
      a0 += s0;
      if (MODE == 1) a1 += s1, a2 += s2;
    }
    a0 = warp_sum(a0);
    if (MODE == 1) a1 = warp_sum(a1), a2 = warp_sum(a2);
    if (lane == 0) {
      o0[f] = a0;
      if (MODE == 1) o1[f] = a1, o2[f] = a2 - a0;
    }
  }
}

static int dd_vec(const sl_kernel_args *a, int64_t w, size_t es) {
  /* 16-byte units when every row starts 16-byte aligned. */
  int v = (int)(16 / es);
  if (((uintptr_t)a->in[0] & 15) == 0 && ((size_t)w * es) % 16 == 0) return v;
  return 1;
}

static unsigned dd_grid_frames(int64_t frames) {
  int64_t g = (frames + DD_WARPS - 1) / DD_WARPS, cap = (int64_t)dd_sms() * 8;
  if (g > cap) g = cap;
  return (unsigned)(g < 1 ? 1 : g);
}

/* Host class table -> device, and its unit list. */
static sl_code dd_upload_cls(sl_kernel_args *a, dd_state *s, const uint8_t *hcls, int64_t npix,
                             int v, int all) {
  cudaStream_t st = dd_stream(a);
  cudaError_t e = cudaSuccess;
  if (!s->cls) {
    e = cudaMalloc((void **)&s->cls, (size_t)npix + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->units, (size_t)npix * 4 + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->n_units, 16);
    if (e == cudaSuccess) e = cudaMemcpyAsync(s->cls, hcls, (size_t)npix, cudaMemcpyHostToDevice, st);
    /* pageable source: the copy completes before cudaMemcpyAsync returns */
    if (e != cudaSuccess) return dd_cuda(a, e, "mask tables");
  }
  k_units<<<1, 1024, 0, st>>>(s->cls, (uint32_t)npix, v, all, s->units, s->n_units);
  sl_code rc = sl_cuda_check_launch(a, "k_units");
  if (rc) return rc;
  s->built_v = v;
  return SL_OK;
}

enum { DD_VI = 1, DD_VD, DD_MO, DD_COM, DD_MC, DD_BIN };

/* Builds (first call) or refreshes (disk input) the class table and units. */
static sl_code dd_tables(sl_kernel_args *a, dd_state *s, int mode, int v) {
  const sl_node *n = a->node;
  const sl_tensor_desc *x = &n->in[0];
  const int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1], npix = h * w;
  const int all = mode == 1; /* DF needs every pixel */
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  bool use_disk = n->n_in > 1 && n->in[1].dtype != SL_DT_INVALID;
  if (!use_disk) {
    if (s->built_v == v) return SL_OK;
    if (s->cls) { /* the alignment changed: only the unit list is rebuilt */
      k_units<<<1, 1024, 0, dd_stream(a)>>>(s->cls, (uint32_t)npix, v, all, s->units, s->n_units);
      s->built_v = v;
      return sl_cuda_check_launch(a, "k_units");
    }
    uint8_t *h_cls = (uint8_t *)calloc((size_t)npix, 1);
    if (!h_cls) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for the class table");
    if (mode == 0) {
      int64_t ns = 0;
      const int64_t *sp = sl_virtual_image_spans(n, &ns);
      if (!sp) {
        free(h_cls);
        return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_image: spans not built");
      }
      for (int64_t k = 0; k < ns; k++) memset(h_cls + sp[2 * k], 1, (size_t)sp[2 * k + 1]);
    } else {
      int64_t nr = 0, off = 0;
      const uint32_t *runs = sl_virtual_detectors_runs(n, &nr);
      if (!runs) {
        free(h_cls);
        return sl_fail(a->err, SL_ERR_INTERNAL, "virtual_detectors: runs not built");
      }
      for (int64_t k = 0; k < nr; k++) {
        memset(h_cls + off, (int)runs[2 * k + 1], runs[2 * k]);
        off += runs[2 * k];
      }
    }
    sl_code rc = dd_upload_cls(a, s, h_cls, npix, v, all);
    free(h_cls);
    return rc;
  }
  /* disk input: the geometry kernel checks and compares the disk on device. */
  cudaError_t e = cudaSuccess;
  if (!s->cls) {
    e = cudaMalloc((void **)&s->cls, (size_t)npix + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->units, (size_t)npix * 4 + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->n_units, 16);
    if (e == cudaSuccess) e = cudaMalloc(&s->geom, sizeof(dd_geom));
    if (e == cudaSuccess) e = cudaMemsetAsync(s->geom, 0, sizeof(dd_geom), dd_stream(a));
    if (e != cudaSuccess) return dd_cuda(a, e, "geometry tables");
  }
  if (!a->in[1]) return sl_fail(a->err, SL_ERR_INTERNAL, "input 'disk' has no data");
  dd_geom p;
  memset(&p, 0, sizeof p);
  p.mode = mode;
  p.h = (int)h, p.w = (int)w;
  p.in_radii = !strcmp(sl_param_str(n, "units"), "radii");
  p.inner_p = sl_param_float(n, "inner");
  p.outer_p = sl_param_float(n, "outer");
  if (mode == 0) {
    const char *k = sl_param_str(n, "kind");
    p.vi_kind = !strcmp(k, "bf") ? 0 : !strcmp(k, "adf") ? 1 : !strcmp(k, "df") ? 2 : 3;
  }
  k_geom<<<1, 1024, 0, dd_stream(a)>>>((dd_geom *)s->geom, p, (const double *)a->in[1], s->cls, v,
                                       all, s->units, s->n_units, s->err);
  return sl_cuda_check_launch(a, "k_geom");
}

template <int MODE>
static sl_code dd_vsum_launch(sl_kernel_args *a, dd_state *s, int v) {
  const sl_tensor_desc *x = &a->node->in[0];
  const long long item = (long long)(x->dims[x->rank - 2] * x->dims[x->rank - 1]);
  const long long nf = a->pos_count;
  if (nf <= 0) return SL_OK;
  unsigned grid = dd_grid_frames(nf);
  cudaStream_t st = dd_stream(a);
  unsigned long long *o0 = (unsigned long long *)a->out[0];
  unsigned long long *o1 = MODE ? (unsigned long long *)a->out[1] : NULL;
  unsigned long long *o2 = MODE ? (unsigned long long *)a->out[2] : NULL;
  const int list = MODE == 0;
#define DD_L(T, VV)                                                                          \
  k_vsum<T, VV, MODE><<<grid, 32 * DD_WARPS, 0, st>>>((const T *)a->in[0], nf, item, s->cls, \
                                                      s->units, s->n_units, list, o0, o1, o2)
  switch (x->dtype) {
    case SL_U8: if (v > 1) DD_L(uint8_t, 16); else DD_L(uint8_t, 1); break;
    case SL_U16: if (v > 1) DD_L(uint16_t, 8); else DD_L(uint16_t, 1); break;
    default: if (v > 1) DD_L(uint32_t, 4); else DD_L(uint32_t, 1); break;
  }
#undef DD_L
  return sl_cuda_check_launch(a, MODE ? "k_vsum_vd" : "k_vsum_vi");
}

template <int COM>
static sl_code dd_mom_launch(sl_kernel_args *a, uint8_t *valid, int first_out);

static sl_code dd_virtual(sl_kernel_args *a, int mode) {
  dd_state *s = NULL;
  sl_code rc = dd_get(a, mode ? DD_VD : DD_VI, &s);
  if (rc) return rc;
  if ((rc = dd_err_check(a, s, false))) return rc;
  const sl_tensor_desc *x = &a->node->in[0];
  int v = dd_vec(a, x->dims[x->rank - 1], sl_dtype_size(x->dtype));
  if ((rc = dd_tables(a, s, mode, v))) return rc;
  rc = mode ? dd_vsum_launch<1>(a, s, v) : dd_vsum_launch<0>(a, s, v);
  if (rc) return rc;
  /* virtual_detectors' moments outputs s, sr, sc (ports 3..5), when read */
  if (mode && (a->node->out_used & (7u << 3)) && (rc = dd_mom_launch<0>(a, NULL, 3))) return rc;
  return dd_err_pull(a, s);
}

extern "C" sl_code sl_cuda_virtual_image(sl_kernel_args *a) { return dd_virtual(a, 0); }
extern "C" sl_code sl_cuda_virtual_detectors(sl_kernel_args *a) { return dd_virtual(a, 1); }

static sl_code dd_finalize_check(sl_kernel_args *a) {
  dd_state *s = (dd_state *)a->node->dev_state;
  if (!s) return SL_OK; /* no chunk ran */
  return dd_err_check(a, s, true);
}
extern "C" sl_code sl_cuda_virtual_image_finalize(sl_kernel_args *a) { return dd_finalize_check(a); }
extern "C" sl_code sl_cuda_virtual_detectors_finalize(sl_kernel_args *a) {
  return dd_finalize_check(a);
}

/* ---- moments / com ------------------------------------------------------------------ */

/* Per frame S, Sr, Sc (u64, any order: integers). A unit lies in one row
 * (V divides W in the vector path): S += s_u, Sr += r * s_u,
 * Sc += c0 * s_u + sum k * v_k. COM: writes Sr/S, Sc/S (f64 division of the
 * same u64 values as the CPU: identical doubles) and the valid flag. */
template <typename T, int V, int COM>
__global__ void __launch_bounds__(32 * DD_WARPS)
    k_mom(const T *__restrict__ x, long long nframes, int w, long long item,
          unsigned long long *__restrict__ os, unsigned long long *__restrict__ osr,
          unsigned long long *__restrict__ osc, double *__restrict__ ocr,
          double *__restrict__ occ, uint8_t *__restrict__ valid, long long pos_start) {
  typedef typename acc_of<T>::t A;
  const int lane = threadIdx.x & 31;
  const long long nw = (long long)gridDim.x * DD_WARPS;
  const uint32_t nunits = (uint32_t)(item / V);
  const uint32_t step = 32u * V, sdr = step / (uint32_t)w, sdc = step % (uint32_t)w;
  const uint32_t e0 = (uint32_t)lane * V, r0 = e0 / (uint32_t)w, c0 = e0 % (uint32_t)w;
  for (long long f = (long long)blockIdx.x * DD_WARPS + (threadIdx.x >> 5); f < nframes; f += nw) {
    const T *fr = x + f * item;
    unsigned long long s = 0, sr = 0, sc = 0;
    uint32_t r = r0, c = c0;
#pragma unroll 4
    for (uint32_t u = lane; u < nunits; u += 32) {
      T e[V];
      load_unit<T, V>(fr + (size_t)u * V, e);
      A su = 0, cu = 0;
#pragma unroll
      for (int k = 0; k < V; k++) {
        su += (A)e[k];
        if (V > 1) cu += (A)k * (A)e[k];
      }
      s += su;
      sr += (unsigned long long)r * su;
      sc += (unsigned long long)c * su + cu;
      c += sdc;
      r += sdr;
      if (c >= (uint32_t)w) c -= (uint32_t)w, r++;
    }
    s = warp_sum(s);
    sr = warp_sum(sr);
    sc = warp_sum(sc);
    if (lane == 0) {
      if (COM) {
        long long gp = pos_start + f;
        if (s > 0) {
          ocr[gp] = __ddiv_rn((double)sr, (double)s);
          occ[gp] = __ddiv_rn((double)sc, (double)s);
          valid[gp] = 1;
        } else {
          ocr[gp] = 0, occ[gp] = 0, valid[gp] = 0;
        }
      } else {
        os[f] = s, osr[f] = sr, osc[f] = sc;
      }
    }
  }
}

/* com from moments another node computed (inputs s, sr, sc): the same
 * division of the same u64 values as k_mom<.., 1> and the CPU. */
__global__ void k_com_moments(const unsigned long long *__restrict__ s,
                              const unsigned long long *__restrict__ sr,
                              const unsigned long long *__restrict__ sc, long long n,
                              double *__restrict__ ocr, double *__restrict__ occ,
                              uint8_t *__restrict__ valid, long long pos_start) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long gp = pos_start + i;
    if (s[i] > 0) {
      ocr[gp] = __ddiv_rn((double)sr[i], (double)s[i]);
      occ[gp] = __ddiv_rn((double)sc[i], (double)s[i]);
      valid[gp] = 1;
    } else {
      ocr[gp] = 0, occ[gp] = 0, valid[gp] = 0;
    }
  }
}

/* COM 0: S, Sr, Sc into a->out[first_out .. first_out + 2]; COM 1: the CoM. */
template <int COM>
static sl_code dd_mom_launch(sl_kernel_args *a, uint8_t *valid, int first_out) {
  const sl_tensor_desc *x = &a->node->in[0];
  const int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  const long long item = (long long)(h * w), nf = a->pos_count;
  if (item > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  if (nf <= 0) return SL_OK;
  int v = dd_vec(a, w, sl_dtype_size(x->dtype));
  unsigned grid = dd_grid_frames(nf);
  cudaStream_t st = dd_stream(a);
  unsigned long long *o0 = COM ? NULL : (unsigned long long *)a->out[first_out];
  unsigned long long *o1 = COM ? NULL : (unsigned long long *)a->out[first_out + 1];
  unsigned long long *o2 = COM ? NULL : (unsigned long long *)a->out[first_out + 2];
  double *cr = COM ? (double *)a->out[0] : NULL, *cc = COM ? (double *)a->out[1] : NULL;
#define DD_L(T, VV)                                                                         \
  k_mom<T, VV, COM><<<grid, 32 * DD_WARPS, 0, st>>>((const T *)a->in[0], nf, (int)w, item, o0, \
                                                    o1, o2, cr, cc, valid, (long long)a->pos_start)
  switch (x->dtype) {
    case SL_U8: if (v > 1) DD_L(uint8_t, 16); else DD_L(uint8_t, 1); break;
    case SL_U16: if (v > 1) DD_L(uint16_t, 8); else DD_L(uint16_t, 1); break;
    default: if (v > 1) DD_L(uint32_t, 4); else DD_L(uint32_t, 1); break;
  }
#undef DD_L
  return sl_cuda_check_launch(a, COM ? "k_mom_com" : "k_mom");
}

extern "C" sl_code sl_cuda_moments(sl_kernel_args *a) { return dd_mom_launch<0>(a, NULL, 0); }

/* com finalize: blocks of the descan sums (see k_descan_blocks). */
#define DD_DESCAN_BLOCK 256 /* = COM_DESCAN_BLOCK in nodes/stem/com.c */
static long long dd_descan_blocks(long long npos) {
  long long nb = (npos + DD_DESCAN_BLOCK - 1) / DD_DESCAN_BLOCK;
  return nb < 1 ? 1 : nb;
}

extern "C" sl_code sl_cuda_com(sl_kernel_args *a) {
  dd_state *s = NULL;
  sl_code rc = dd_get(a, DD_COM, &s);
  if (rc) return rc;
  int64_t npos = sl_desc_positions(sl_com_scan_desc(a->node));
  if (!s->valid) {
    cudaError_t e = cudaMalloc((void **)&s->valid, (size_t)(npos ? npos : 1));
    if (e == cudaSuccess) e = cudaMemsetAsync(s->valid, 0, (size_t)(npos ? npos : 1), dd_stream(a));
    if (e == cudaSuccess)
      e = cudaMalloc((void **)&s->fin, (16 + 16 * (size_t)dd_descan_blocks(npos)) * sizeof(double));
    if (e != cudaSuccess) return dd_cuda(a, e, "com valid flags");
    s->npos = npos;
  }
  if (a->pos_start < 0 || a->pos_start + a->pos_count > s->npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com: positions [%lld, %lld) outside the scan of %lld",
                   (long long)a->pos_start, (long long)(a->pos_start + a->pos_count),
                   (long long)s->npos);
  if (a->node->in[0].dtype != SL_DT_INVALID) return dd_mom_launch<1>(a, s->valid, 0);
  const long long n = a->pos_count;
  if (n <= 0) return SL_OK;
  k_com_moments<<<(unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535), 256, 0, dd_stream(a)>>>(
      (const unsigned long long *)a->in[1], (const unsigned long long *)a->in[2],
      (const unsigned long long *)a->in[3], n, (double *)a->out[0], (double *)a->out[1], s->valid,
      (long long)a->pos_start);
  return sl_cuda_check_launch(a, "k_com_moments");
}

/* remove_descan (com.c) exactly: the same two-level sums (blocks of
 * DD_DESCAN_BLOCK positions summed in position order from 0, then the block
 * sums in block order from 0), the same expressions, no contraction (__d*_rn),
 * so the doubles equal the CPU's.
 *  k_descan_blocks<0>: one thread per (block, output): n, sy, sr, sc of the block;
 *  k_descan_reduce<0>: one thread per output: the totals, then my, mr, mc;
 *  k_descan_blocks<1>, k_descan_reduce<1> (plane): rr, cc, rc, ry, cy, then b, c;
 *  k_descan_apply: every position in parallel.
 * fin: per output k, fin[8k..8k+5] = {no valid position, my, mr, mc, b, c};
 * block sums at fin[16 + (k * nb + block) * 8 + j]. */
template <int PASS>
__global__ void k_descan_blocks(const double *v0, const double *v1, const uint8_t *__restrict__ valid,
                                long long npos, long long cols, double *fin, long long nb) {
  const long long blk = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (blk >= nb) return;
  const int k = blockIdx.y;
  const double *v = k ? v1 : v0;
  const long long b0 = blk * DD_DESCAN_BLOCK;
  const long long b1 = npos - b0 < DD_DESCAN_BLOCK ? npos : b0 + DD_DESCAN_BLOCK;
  long long r = b0 / cols, c = b0 - r * cols; /* row and column of position i, kept up to date */
  double *out = fin + 16 + (k * nb + blk) * 8;
  if (PASS == 0) {
    double pn = 0, py = 0, pr = 0, pc = 0;
    for (long long i = b0; i < b1; i++) {
      if (valid[i]) {
        pn = __dadd_rn(pn, 1.0);
        py = __dadd_rn(py, v[i]);
        pr = __dadd_rn(pr, (double)r);
        pc = __dadd_rn(pc, (double)c);
      }
      if (++c == cols) c = 0, r++;
    }
    out[0] = pn, out[1] = py, out[2] = pr, out[3] = pc;
  } else {
    const double *o = fin + 8 * k;
    if (o[0] != 0) return; /* no valid position */
    const double my = o[1], mr = o[2], mc = o[3];
    double prr = 0, pcc = 0, prc = 0, pry = 0, pcy = 0;
    for (long long i = b0; i < b1; i++) {
      if (valid[i]) {
        const double dr = __dsub_rn((double)r, mr), dc = __dsub_rn((double)c, mc), dy = __dsub_rn(v[i], my);
        prr = __dadd_rn(prr, __dmul_rn(dr, dr));
        pcc = __dadd_rn(pcc, __dmul_rn(dc, dc));
        prc = __dadd_rn(prc, __dmul_rn(dr, dc));
        pry = __dadd_rn(pry, __dmul_rn(dr, dy));
        pcy = __dadd_rn(pcy, __dmul_rn(dc, dy));
      }
      if (++c == cols) c = 0, r++;
    }
    out[0] = prr, out[1] = pcc, out[2] = prc, out[3] = pry, out[4] = pcy;
  }
}

template <int PASS>
__global__ void k_descan_reduce(double *fin, long long nb) {
  if (threadIdx.x != 0) return;
  const int k = blockIdx.x;
  double *o = fin + 8 * k;
  const double *part = fin + 16 + k * nb * 8;
  if (PASS == 0) {
    double n = 0, sy = 0, sr = 0, sc = 0;
    for (long long b = 0; b < nb; b++) {
      const double *q = part + b * 8;
      n = __dadd_rn(n, q[0]);
      sy = __dadd_rn(sy, q[1]);
      sr = __dadd_rn(sr, q[2]);
      sc = __dadd_rn(sc, q[3]);
    }
    if (n == 0) {
      o[0] = 1; /* "no valid position": zero everything */
      return;
    }
    o[0] = 0, o[1] = __ddiv_rn(sy, n), o[2] = __ddiv_rn(sr, n), o[3] = __ddiv_rn(sc, n), o[4] = 0, o[5] = 0;
  } else {
    if (o[0] != 0) return;
    double rr = 0, cc = 0, rc = 0, ry = 0, cy = 0, b = 0, c = 0;
    for (long long j = 0; j < nb; j++) {
      const double *q = part + j * 8;
      rr = __dadd_rn(rr, q[0]);
      cc = __dadd_rn(cc, q[1]);
      rc = __dadd_rn(rc, q[2]);
      ry = __dadd_rn(ry, q[3]);
      cy = __dadd_rn(cy, q[4]);
    }
    double det = __dsub_rn(__dmul_rn(rr, cc), __dmul_rn(rc, rc));
    if (rr > 0 && cc > 0 && det > __dmul_rn(__dmul_rn(1e-12, rr), cc)) {
      b = __ddiv_rn(__dsub_rn(__dmul_rn(ry, cc), __dmul_rn(cy, rc)), det);
      c = __ddiv_rn(__dsub_rn(__dmul_rn(cy, rr), __dmul_rn(ry, rc)), det);
    } else if (rr > 0) {
      b = __ddiv_rn(ry, rr);
    } else if (cc > 0) {
      c = __ddiv_rn(cy, cc);
    }
    o[4] = b, o[5] = c;
  }
}

__global__ void k_descan_apply(double *v0, double *v1, const uint8_t *__restrict__ valid,
                               long long npos, long long cols, const double *fin) {
  const double *o = fin + 8 * blockIdx.y;
  double *v = blockIdx.y ? v1 : v0;
  const bool none = o[0] != 0;
  const double my = o[1], mr = o[2], mc = o[3], b = o[4], c = o[5];
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npos;
       i += (long long)gridDim.x * blockDim.x) {
    if (none || !valid[i]) {
      v[i] = 0;
      continue;
    }
    double t = __dsub_rn(v[i], my);
    t = __dsub_rn(t, __dmul_rn(b, __dsub_rn((double)(i / cols), mr)));
    t = __dsub_rn(t, __dmul_rn(c, __dsub_rn((double)(i % cols), mc)));
    v[i] = t;
  }
}

extern "C" sl_code sl_cuda_com_finalize(sl_kernel_args *a) {
  dd_state *s = (dd_state *)a->node->dev_state;
  const sl_tensor_desc *x = sl_com_scan_desc(a->node);
  const int64_t npos = sl_desc_positions(x), cols = x->dims[x->stream_rank - 1];
  const char *mode = sl_param_str(a->node, "descan");
  int plane;
  if (!strcmp(mode, "none")) plane = 0;
  else if (!strcmp(mode, "plane")) plane = 1;
  else return sl_fail(a->err, SL_ERR_PIPELINE, "param 'descan' must be none or plane, got '%s'", mode);
  if (!s || !s->valid) { /* no chunk ran: every position invalid -> 0 */
    cudaStream_t st = dd_stream(a);
    cudaError_t e = cudaMemsetAsync(a->out[0], 0, (size_t)npos * 8, st);
    if (e == cudaSuccess) e = cudaMemsetAsync(a->out[1], 0, (size_t)npos * 8, st);
    return dd_cuda(a, e, "com finalize");
  }
  if (npos != s->npos)
    return sl_fail(a->err, SL_ERR_INTERNAL, "com finalize: %lld positions, the state has %lld", (long long)npos,
                   (long long)s->npos);
  cudaStream_t st = dd_stream(a);
  double *v0 = (double *)a->out[0], *v1 = (double *)a->out[1];
  const long long nb = dd_descan_blocks(npos);
  const dim3 bg((unsigned)((nb + 127) / 128), 2);
  k_descan_blocks<0><<<bg, 128, 0, st>>>(v0, v1, s->valid, npos, cols, s->fin, nb);
  sl_code rc = sl_cuda_check_launch(a, "k_descan_blocks");
  if (rc) return rc;
  k_descan_reduce<0><<<2, 32, 0, st>>>(s->fin, nb);
  if ((rc = sl_cuda_check_launch(a, "k_descan_reduce"))) return rc;
  if (plane) {
    k_descan_blocks<1><<<bg, 128, 0, st>>>(v0, v1, s->valid, npos, cols, s->fin, nb);
    if ((rc = sl_cuda_check_launch(a, "k_descan_blocks"))) return rc;
    k_descan_reduce<1><<<2, 32, 0, st>>>(s->fin, nb);
    if ((rc = sl_cuda_check_launch(a, "k_descan_reduce"))) return rc;
  }
  int64_t g = (npos + 255) / 256;
  if (g > 4096) g = 4096;
  if (g < 1) g = 1;
  k_descan_apply<<<dim3((unsigned)g, 2), 256, 0, st>>>(v0, v1, s->valid, npos, cols, s->fin);
  return sl_cuda_check_launch(a, "k_descan_apply");
}

/* ---- mask_correct -------------------------------------------------------------------- */

/* Static bad map: (mask input > 0) | file mask. */
template <typename M>
__global__ void k_mc_bad(const M *mask, const uint8_t *file, uint8_t *bad, long long npix) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
       i += (long long)gridDim.x * blockDim.x)
    bad[i] = (uint8_t)(((mask && mask[i] != 0) ? 1 : 0) | ((file && file[i]) ? 1 : 0));
}

/* Median of the valid 3x3 neighbours of pixel (r, c) of frame fr, as
 * small_median: sorted, odd -> middle, even -> floor((a + b) / 2), none -> 0. */
template <typename T>
__device__ T mc_median(const T *__restrict__ fr, const uint8_t *__restrict__ bad, int h, int w,
                       int r, int c, bool flagged, T tmax) {
  uint32_t v[8];
  int n = 0;
#pragma unroll
  for (int k = 0; k < 8; k++) v[k] = 0xFFFFFFFFu;
#pragma unroll
  for (int k = 0; k < 9; k++) {
    if (k == 4) continue;
    int rr = r + k / 3 - 1, cc = c + k % 3 - 1;
    bool ok = rr >= 0 && rr < h && cc >= 0 && cc < w;
    T t = 0;
    if (ok) {
      int q = rr * w + cc;
      t = fr[q];
      ok = !bad[q] && !(flagged && t == tmax);
    }
    /* place the valid value in slot n (fixed slots, no local memory) */
#pragma unroll
    for (int j = 0; j < 8; j++)
      if (ok && j == n) v[j] = (uint32_t)t;
    n += ok;
  }
  if (n == 0) return 0;
  /* sorting network for 8 (invalid slots hold 0xFFFFFFFF and sort last; a valid
   * value equal to it sorts among them, which does not change the result). */
#define CS(i, j)                                          \
  {                                                       \
    uint32_t lo = min(v[i], v[j]), hi = max(v[i], v[j]);  \
    v[i] = lo, v[j] = hi;                                 \
  }
  CS(0, 2) CS(1, 3) CS(4, 6) CS(5, 7) CS(0, 4) CS(1, 5) CS(2, 6) CS(3, 7)
  CS(0, 1) CS(2, 3) CS(4, 5) CS(6, 7) CS(2, 4) CS(3, 5) CS(1, 4) CS(3, 6)
  CS(1, 2) CS(3, 4) CS(5, 6)
#undef CS
  uint32_t m1 = 0, m2 = 0;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    if (j == n / 2) m2 = v[j];
    if (j == n / 2 - 1) m1 = v[j];
  }
  if (n & 1) return (T)m2;
  return (T)(((unsigned long long)m1 + m2) / 2);
}

/* One block per frame (grid-stride): units copied with 16-byte loads/stores;
 * a unit with a bad or flagged pixel takes the per-pixel path. Corrections
 * read only the input frame, so they never see corrected values. */
template <typename T, int V>
__global__ void __launch_bounds__(256)
    k_mc(const T *__restrict__ x, T *__restrict__ y, long long nframes, int h, int w,
         const uint8_t *__restrict__ bad, int median, int flagged) {
  const long long item = (long long)h * w;
  const uint32_t nunits = (uint32_t)(item / V);
  const T tmax = (T)~(T)0;
  for (long long f = blockIdx.x; f < nframes; f += gridDim.x) {
    const T *fr = x + f * item;
    T *fo = y + f * item;
#pragma unroll 2
    for (uint32_t u = threadIdx.x; u < nunits; u += blockDim.x) {
      T e[V];
      uint8_t b[V];
      load_unit<T, V>(fr + (size_t)u * V, e);
      load_cls<V>(bad + (size_t)u * V, b);
      bool any = false;
#pragma unroll
      for (int k = 0; k < V; k++) any |= b[k] || (flagged && e[k] == tmax);
      if (any) {
#pragma unroll
        for (int k = 0; k < V; k++) {
          if (!(b[k] || (flagged && e[k] == tmax))) continue;
          if (!median) {
            e[k] = 0;
          } else {
            int i = (int)(u * V + k);
            e[k] = mc_median<T>(fr, bad, h, w, i / w, i % w, flagged, tmax);
          }
        }
      }
      if constexpr (V * sizeof(T) == 16) {
        uint4 q;
        memcpy(&q, e, 16);
        __stcs(reinterpret_cast<uint4 *>(fo + (size_t)u * V), q);
      } else {
        fo[u] = e[0];
      }
    }
  }
}

extern "C" sl_code sl_cuda_mask_correct(sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *x = &n->in[0];
  const int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1], npix = h * w;
  const size_t es = sl_dtype_size(x->dtype);
  cudaStream_t st = dd_stream(a);
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  const char *pol = sl_param_str(n, "policy");
  int median = !strcmp(pol, "median");
  if (!strcmp(pol, "none")) /* copy */
    return dd_cuda(a, cudaMemcpyAsync(a->out[0], a->in[0], (size_t)(a->pos_count * npix) * es,
                                      cudaMemcpyDeviceToDevice, st),
                   "copy");
  dd_state *s = NULL;
  sl_code rc = dd_get(a, DD_MC, &s);
  if (rc) return rc;
  if (!s->cls) {
    bool has_mask = n->n_in > 1 && n->in_src[1].node != SL_SRC_NONE &&
                    n->in[1].dtype != SL_DT_INVALID;
    if (has_mask && !a->in[1])
      return sl_fail(a->err, SL_ERR_INTERNAL, "mask_correct: input 'mask' is connected but has no data");
    const uint8_t *fm = sl_mask_correct_file_mask(n);
    uint8_t *dfile = NULL;
    cudaError_t e = cudaMalloc((void **)&s->cls, (size_t)npix + 16);
    if (e == cudaSuccess && fm) {
      e = cudaMalloc((void **)&dfile, (size_t)npix);
      if (e == cudaSuccess) e = cudaMemcpy(dfile, fm, (size_t)npix, cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess) {
      cudaFree(dfile);
      return dd_cuda(a, e, "static mask");
    }
    unsigned g = (unsigned)((npix + 255) / 256);
    const void *m = has_mask ? a->in[1] : NULL;
    switch (has_mask ? n->in[1].dtype : SL_U8) {
      case SL_U16: k_mc_bad<uint16_t><<<g, 256, 0, st>>>((const uint16_t *)m, dfile, s->cls, npix); break;
      case SL_U32: k_mc_bad<uint32_t><<<g, 256, 0, st>>>((const uint32_t *)m, dfile, s->cls, npix); break;
      default: k_mc_bad<uint8_t><<<g, 256, 0, st>>>((const uint8_t *)m, dfile, s->cls, npix); break;
    }
    rc = sl_cuda_check_launch(a, "k_mc_bad");
    if (dfile) cudaFreeAsync(dfile, st);
    if (rc) return rc;
  }
  if (a->pos_count <= 0) return SL_OK;
  int v = (((uintptr_t)a->in[0] | (uintptr_t)a->out[0]) & 15) == 0 && ((size_t)w * es) % 16 == 0
              ? (int)(16 / es) : 1;
  int64_t grid = a->pos_count, cap = (int64_t)dd_sms() * 8;
  if (grid > cap) grid = cap;
  int flagged = sl_param_bool(n, "flagged");
#define DD_L(T, VV)                                                                              \
  k_mc<T, VV><<<(unsigned)grid, 256, 0, st>>>((const T *)a->in[0], (T *)a->out[0], a->pos_count, \
                                              (int)h, (int)w, s->cls, median, flagged)
  switch (x->dtype) {
    case SL_U8: if (v > 1) DD_L(uint8_t, 16); else DD_L(uint8_t, 1); break;
    case SL_U16: if (v > 1) DD_L(uint16_t, 8); else DD_L(uint16_t, 1); break;
    default: if (v > 1) DD_L(uint32_t, 4); else DD_L(uint32_t, 1); break;
  }
#undef DD_L
  return sl_cuda_check_launch(a, "k_mc");
}

/* ---- bin_detector -------------------------------------------------------------------- */

/* One thread per output pixel; sums accumulate in the output type, as the CPU
 * (provably exact: all partial sums <= the full sum, which fits). */
template <typename TI, typename TO>
__global__ void k_bin(const TI *__restrict__ x, TO *__restrict__ y, long long nframes, int w,
                      int ho, int wo, int f, long long item) {
  const long long oitem = (long long)ho * wo, total = nframes * oitem;
  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
       o += (long long)gridDim.x * blockDim.x) {
    long long p = o / oitem;
    int rem = (int)(o - p * oitem), orow = rem / wo, oc = rem % wo;
    const TI *src = x + p * item + (long long)orow * f * w + (long long)oc * f;
    TO s = 0;
    for (int dr = 0; dr < f; dr++) {
      TO rs = 0;
      for (int dc = 0; dc < f; dc++) rs += (TO)src[(long long)dr * w + dc];
      s += rs;
    }
    y[o] = s;
  }
}

/* max_value audit: lowest p * item + pixel whose value exceeds `bound`. */
template <typename T>
__global__ void k_audit(const T *__restrict__ x, long long n, unsigned long long bound,
                        unsigned long long *first) {
  unsigned long long best = DD_NONE;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    if ((unsigned long long)x[i] > bound && (unsigned long long)i < best) best = (unsigned long long)i;
  for (int o = 16; o > 0; o >>= 1) {
    unsigned long long t = __shfl_down_sync(0xFFFFFFFFu, best, o);
    best = t < best ? t : best;
  }
  if ((threadIdx.x & 31) == 0 && best != DD_NONE) atomicMin(first, best);
}

/* Moves this call's audit result into the sticky error word (first wins). */
template <typename T>
__global__ void k_audit_commit(const T *x, unsigned long long *first, dd_err *err, long long chunk,
                               long long pos_start) {
  unsigned long long c = *first;
  if (c != DD_NONE && err->kind == 0) {
    err->kind = 1;
    err->code = c;
    err->value = (unsigned long long)x[c];
    err->chunk = chunk;
    err->pos_start = pos_start;
  }
  *first = DD_NONE;
}

static sl_code bin_report(sl_kernel_args *a, const dd_err *e) {
  const sl_node *n = a->node;
  const sl_tensor_desc *d = &n->in[0];
  const int64_t h = d->dims[d->rank - 2], w = d->dims[d->rank - 1], item = h * w;
  int64_t p = (int64_t)(e->code / (unsigned long long)item), px = (int64_t)(e->code % (unsigned long long)item);
  int64_t pos = e->pos_start + p, rem = pos, coords[SL_MAX_RANK];
  for (int k = d->stream_rank - 1; k >= 0; k--) {
    coords[k] = d->dims[k] ? rem % d->dims[k] : 0;
    rem = d->dims[k] ? rem / d->dims[k] : 0;
  }
  char where[160];
  size_t o = (size_t)snprintf(where, sizeof where, "[");
  for (int k = 0; k < d->stream_rank && o < sizeof where; k++)
    o += (size_t)snprintf(where + o, sizeof where - o, "%s%lld", k ? ", " : "", (long long)coords[k]);
  if (o < sizeof where) snprintf(where + o, sizeof where - o, "]");
  int64_t mv = sl_param_int(n, "max_value");
  sl_error_chunk(a->err, e->chunk);
  return sl_fail(a->err, SL_ERR_FORMAT,
                 "chunk %lld, frame %lld (scan position %s), pixel (row %lld, col %lld): value %llu "
                 "exceeds max_value %llu, so the %s result would not be proven; raise max_value "
                 "or use dtype auto with max_value 0",
                 (long long)e->chunk, (long long)pos, where, (long long)(px / w),
                 (long long)(px % w), (unsigned long long)e->value, (unsigned long long)mv,
                 sl_dtype_name(n->out[0].dtype));
}

extern "C" sl_code sl_cuda_bin_detector(sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *x = &n->in[0], *yd = &n->out[0];
  const int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  const int64_t ho = yd->dims[yd->rank - 2], wo = yd->dims[yd->rank - 1];
  const int f = (int)sl_param_int(n, "factor");
  const uint64_t in_max = x->dtype == SL_U8 ? 0xFFu : x->dtype == SL_U16 ? 0xFFFFu : 0xFFFFFFFFu;
  const int64_t mv = sl_param_int(n, "max_value");
  const bool audit = mv > 0 && (uint64_t)mv < in_max;
  cudaStream_t st = dd_stream(a);
  dd_state *s = NULL;
  sl_code rc = SL_OK;
  if (audit) {
    if ((rc = dd_get(a, DD_BIN, &s))) return rc;
    if (s->herr->kind == 1) return bin_report(a, s->herr);
    if (!s->units) { /* reused as the per-call audit word */
      cudaError_t e = cudaMalloc((void **)&s->units, 8);
      if (e == cudaSuccess) e = cudaMemsetAsync(s->units, 0xFF, 8, st);
      if (e != cudaSuccess) return dd_cuda(a, e, "audit word");
    }
  }
  const long long nf = a->pos_count;
  if (nf <= 0) return SL_OK;
  const long long total = nf * ho * wo;
  int64_t grid = (total + 255) / 256, cap = (int64_t)dd_sms() * 16;
  if (grid > cap) grid = cap;
  if (grid < 1) grid = 1;
#define DD_B(TI, TO)                                                                          \
  k_bin<TI, TO><<<(unsigned)grid, 256, 0, st>>>((const TI *)a->in[0], (TO *)a->out[0], nf, (int)w, \
                                                (int)ho, (int)wo, f, (long long)(h * w))
#define DD_BO(TI)                                 \
  switch (yd->dtype) {                            \
    case SL_U8: DD_B(TI, uint8_t); break;         \
    case SL_U16: DD_B(TI, uint16_t); break;       \
    case SL_U32: DD_B(TI, uint32_t); break;       \
    default: DD_B(TI, unsigned long long); break; \
  }
  switch (x->dtype) {
    case SL_U8: DD_BO(uint8_t) break;
    case SL_U16: DD_BO(uint16_t) break;
    default: DD_BO(uint32_t) break;
  }
#undef DD_BO
#undef DD_B
  if ((rc = sl_cuda_check_launch(a, "k_bin"))) return rc;
  if (!audit) return SL_OK;
  const long long nel = nf * h * w;
  int64_t ag = (nel + 255) / 256;
  if (ag > cap) ag = cap;
  unsigned long long *first = (unsigned long long *)s->units;
  switch (x->dtype) {
    case SL_U8:
      k_audit<uint8_t><<<(unsigned)ag, 256, 0, st>>>((const uint8_t *)a->in[0], nel, (unsigned long long)mv, first);
      k_audit_commit<uint8_t><<<1, 1, 0, st>>>((const uint8_t *)a->in[0], first, s->err, a->chunk, a->pos_start);
      break;
    case SL_U16:
      k_audit<uint16_t><<<(unsigned)ag, 256, 0, st>>>((const uint16_t *)a->in[0], nel, (unsigned long long)mv, first);
      k_audit_commit<uint16_t><<<1, 1, 0, st>>>((const uint16_t *)a->in[0], first, s->err, a->chunk, a->pos_start);
      break;
    default:
      k_audit<uint32_t><<<(unsigned)ag, 256, 0, st>>>((const uint32_t *)a->in[0], nel, (unsigned long long)mv, first);
      k_audit_commit<uint32_t><<<1, 1, 0, st>>>((const uint32_t *)a->in[0], first, s->err, a->chunk, a->pos_start);
      break;
  }
  if ((rc = sl_cuda_check_launch(a, "k_audit"))) return rc;
  return dd_err_pull(a, s);
}

extern "C" sl_code sl_cuda_bin_detector_finalize(sl_kernel_args *a) {
  dd_state *s = (dd_state *)a->node->dev_state;
  if (!s) return SL_OK; /* no audit ran */
  sl_code rc = dd_err_pull(a, s);
  if (rc == SL_OK) rc = sl_cuda_sync(a);
  if (rc == SL_OK && s->herr->kind == 1) rc = bin_report(a, s->herr);
  return rc;
}

/* ---- sum ----------------------------------------------------------------------------- */

/* Integers: blocks split elements (x) and positions (y); u64 partial sums,
 * one atomicAdd per thread and slice (any order is exact). */
template <typename T>
__global__ void k_sum_int(const T *__restrict__ x, unsigned long long *y, long long npos,
                          long long item, long long per) {
  long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= item) return;
  long long p0 = (long long)blockIdx.y * per, p1 = p0 + per < npos ? p0 + per : npos;
  unsigned long long s = 0;
  for (long long p = p0; p < p1; p++) s += (unsigned long long)x[p * item + e];
  if (s) atomicAdd(y + e, s);
}

/* Floats: one thread per element, positions in order (the CPU's order), so
 * the f64 result is identical. */
template <typename T>
__global__ void k_sum_float(const T *__restrict__ x, double *y, long long npos, long long item) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < item;
       e += (long long)gridDim.x * blockDim.x) {
    double s = y[e];
    long long p = 0;
    for (; p + 4 <= npos; p += 4) { /* loads ahead, adds in order */
      double a0 = (double)x[p * item + e], a1 = (double)x[(p + 1) * item + e];
      double a2 = (double)x[(p + 2) * item + e], a3 = (double)x[(p + 3) * item + e];
      s = __dadd_rn(s, a0);
      s = __dadd_rn(s, a1);
      s = __dadd_rn(s, a2);
      s = __dadd_rn(s, a3);
    }
    for (; p < npos; p++) s = __dadd_rn(s, (double)x[p * item + e]);
    y[e] = s;
  }
}

extern "C" sl_code sl_cuda_sum(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  const long long item = sl_desc_item_elems(x), npos = a->pos_count;
  if (npos <= 0 || item <= 0) return SL_OK;
  cudaStream_t st = dd_stream(a);
  long long gx = (item + 255) / 256;
  if (x->dtype == SL_F32 || x->dtype == SL_F64) {
    long long g = gx < 65535 ? gx : 65535;
    if (x->dtype == SL_F32)
      k_sum_float<float><<<(unsigned)g, 256, 0, st>>>((const float *)a->in[0], (double *)a->out[0], npos, item);
    else
      k_sum_float<double><<<(unsigned)g, 256, 0, st>>>((const double *)a->in[0], (double *)a->out[0], npos, item);
    return sl_cuda_check_launch(a, "k_sum_float");
  }
  /* enough blocks to fill the GPU: split positions */
  long long want = (long long)dd_sms() * 16, gy = (want + gx - 1) / gx;
  if (gy > npos) gy = npos;
  if (gy > 65535) gy = 65535;
  if (gy < 1) gy = 1;
  long long per = (npos + gy - 1) / gy;
  gy = (npos + per - 1) / per;
  if (gx > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "sum: item too large");
  dim3 grid((unsigned)gx, (unsigned)gy);
  unsigned long long *y = (unsigned long long *)a->out[0];
  switch (x->dtype) {
    case SL_U8: k_sum_int<uint8_t><<<grid, 256, 0, st>>>((const uint8_t *)a->in[0], y, npos, item, per); break;
    case SL_U16: k_sum_int<uint16_t><<<grid, 256, 0, st>>>((const uint16_t *)a->in[0], y, npos, item, per); break;
    case SL_U32: k_sum_int<uint32_t><<<grid, 256, 0, st>>>((const uint32_t *)a->in[0], y, npos, item, per); break;
    case SL_U64: k_sum_int<unsigned long long><<<grid, 256, 0, st>>>((const unsigned long long *)a->in[0], y, npos, item, per); break;
    default: return sl_fail(a->err, SL_ERR_PIPELINE, "sum: dtype %s has no CUDA kernel", sl_dtype_name(x->dtype));
  }
  return sl_cuda_check_launch(a, "k_sum_int");
}

/* ---- registry ------------------------------------------------------------------------ */

#define K(name, fn) {name, (const void *)(fn), SL_KERNEL_ABI_VERSION}
extern "C" const sl_device_kernel sl_cuda_kernels_detector[] = {
    K("units", k_units),
    K("geom", k_geom),
    K("vsum_vi_u8x16", (k_vsum<uint8_t, 16, 0>)), K("vsum_vi_u8", (k_vsum<uint8_t, 1, 0>)),
    K("vsum_vi_u16x8", (k_vsum<uint16_t, 8, 0>)), K("vsum_vi_u16", (k_vsum<uint16_t, 1, 0>)),
    K("vsum_vi_u32x4", (k_vsum<uint32_t, 4, 0>)), K("vsum_vi_u32", (k_vsum<uint32_t, 1, 0>)),
    K("vsum_vd_u8x16", (k_vsum<uint8_t, 16, 1>)), K("vsum_vd_u8", (k_vsum<uint8_t, 1, 1>)),
    K("vsum_vd_u16x8", (k_vsum<uint16_t, 8, 1>)), K("vsum_vd_u16", (k_vsum<uint16_t, 1, 1>)),
    K("vsum_vd_u32x4", (k_vsum<uint32_t, 4, 1>)), K("vsum_vd_u32", (k_vsum<uint32_t, 1, 1>)),
    K("mom_u8x16", (k_mom<uint8_t, 16, 0>)), K("mom_u8", (k_mom<uint8_t, 1, 0>)),
    K("mom_u16x8", (k_mom<uint16_t, 8, 0>)), K("mom_u16", (k_mom<uint16_t, 1, 0>)),
    K("mom_u32x4", (k_mom<uint32_t, 4, 0>)), K("mom_u32", (k_mom<uint32_t, 1, 0>)),
    K("com_u8x16", (k_mom<uint8_t, 16, 1>)), K("com_u8", (k_mom<uint8_t, 1, 1>)),
    K("com_u16x8", (k_mom<uint16_t, 8, 1>)), K("com_u16", (k_mom<uint16_t, 1, 1>)),
    K("com_u32x4", (k_mom<uint32_t, 4, 1>)), K("com_u32", (k_mom<uint32_t, 1, 1>)),
    K("com_moments", k_com_moments),
    K("descan_blocks0", k_descan_blocks<0>), K("descan_reduce0", k_descan_reduce<0>),
    K("descan_blocks1", k_descan_blocks<1>), K("descan_reduce1", k_descan_reduce<1>),
    K("descan_apply", k_descan_apply),
    K("mc_bad_u8", k_mc_bad<uint8_t>), K("mc_bad_u16", k_mc_bad<uint16_t>),
    K("mc_bad_u32", k_mc_bad<uint32_t>),
    K("mc_u8x16", (k_mc<uint8_t, 16>)), K("mc_u8", (k_mc<uint8_t, 1>)),
    K("mc_u16x8", (k_mc<uint16_t, 8>)), K("mc_u16", (k_mc<uint16_t, 1>)),
    K("mc_u32x4", (k_mc<uint32_t, 4>)), K("mc_u32", (k_mc<uint32_t, 1>)),
    K("bin_u16_u16", (k_bin<uint16_t, uint16_t>)), K("bin_u16_u32", (k_bin<uint16_t, uint32_t>)),
    K("bin_u8_u8", (k_bin<uint8_t, uint8_t>)), K("bin_u8_u16", (k_bin<uint8_t, uint16_t>)),
    K("bin_u32_u32", (k_bin<uint32_t, uint32_t>)),
    K("bin_u32_u64", (k_bin<uint32_t, unsigned long long>)),
    K("audit_u8", k_audit<uint8_t>), K("audit_u16", k_audit<uint16_t>),
    K("audit_u32", k_audit<uint32_t>),
    K("sum_u8", k_sum_int<uint8_t>), K("sum_u16", k_sum_int<uint16_t>),
    K("sum_u32", k_sum_int<uint32_t>), K("sum_u64", k_sum_int<unsigned long long>),
    K("sum_f32", k_sum_float<float>), K("sum_f64", k_sum_float<double>),
};
#undef K
extern "C" const int sl_cuda_kernels_detector_count =
    (int)(sizeof sl_cuda_kernels_detector / sizeof sl_cuda_kernels_detector[0]);
