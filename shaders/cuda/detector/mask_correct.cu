/* mask_correct on CUDA. See mask_correct.h.
 *
 * The static bad map ((mask input > 0) | file mask) is built on the device on
 * the first call and kept in the node's device state. Frames run one block
 * per frame (grid-stride): units (common/frame_units.cuh) are copied with
 * 16-byte loads and stores; a unit with a bad or flagged pixel takes the
 * per-pixel path. Corrections read only the input frame, so they never see
 * corrected values. */
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/frame_units.cuh"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/detector/mask_correct.h"

static const char k_node[] = "mask_correct";

typedef struct mask_device_state {
  uint8_t *bad; /* H*W static bad map */
} mask_device_state;

/* ---- kernels --------------------------------------------------------------------- */

/* Static bad map: (mask input > 0) | file mask. */
template <typename M>
__global__ void sl_k_static_bad_map(const M *mask, const uint8_t *file, uint8_t *bad, long long npix) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
       i += (long long)gridDim.x * blockDim.x)
    bad[i] = (uint8_t)(((mask && mask[i] != 0) ? 1 : 0) | ((file && file[i]) ? 1 : 0));
}

/* Median of the valid 3x3 neighbours of pixel (r, c) of frame fr, as
 * small_median: sorted, odd -> middle, even -> floor((a + b) / 2), none -> 0. */
template <typename T>
__device__ T neighbour_median(const T *__restrict__ fr, const uint8_t *__restrict__ bad, int h, int w, int r,
                              int c, bool flagged, T tmax) {
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

template <typename T, int V>
__global__ void __launch_bounds__(256)
    sl_k_mask_correct(const T *__restrict__ x, T *__restrict__ y, long long nframes, int h, int w,
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
            e[k] = neighbour_median<T>(fr, bad, h, w, i / w, i % w, flagged, tmax);
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

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel mask_correct_kernels[] = {
    ENTRY("static_bad_map_u8", sl_k_static_bad_map<uint8_t>),
    ENTRY("static_bad_map_u16", sl_k_static_bad_map<uint16_t>),
    ENTRY("static_bad_map_u32", sl_k_static_bad_map<uint32_t>),
    ENTRY("mask_correct_u8x16", (sl_k_mask_correct<uint8_t, 16>)),
    ENTRY("mask_correct_u8", (sl_k_mask_correct<uint8_t, 1>)),
    ENTRY("mask_correct_u16x8", (sl_k_mask_correct<uint16_t, 8>)),
    ENTRY("mask_correct_u16", (sl_k_mask_correct<uint16_t, 1>)),
    ENTRY("mask_correct_u32x4", (sl_k_mask_correct<uint32_t, 4>)),
    ENTRY("mask_correct_u32", (sl_k_mask_correct<uint32_t, 1>)),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(mask_correct_kernels)

/* ---- launcher -------------------------------------------------------------------- */

static void mask_state_release(void *p) {
  mask_device_state *s = (mask_device_state *)p;
  if (!s) return;
  cudaFree(s->bad);
  free(s);
}

/* The static bad map of the first call. */
static sl_code build_bad_map(const sl_cuda_mask_correct_params *p, sl_kernel_args *a, mask_device_state *s,
                             int64_t npix) {
  cudaStream_t st = sl_cuda_queue(a);
  if (p->has_mask && !a->in[1])
    return sl_fail(a->err, SL_ERR_INTERNAL, "mask_correct: input 'mask' is connected but has no data");
  const uint8_t *fm = p->file_mask;
  uint8_t *dfile = NULL;
  cudaError_t e = cudaMalloc((void **)&s->bad, (size_t)npix + 16);
  if (e == cudaSuccess && fm) {
    e = cudaMalloc((void **)&dfile, (size_t)npix);
    if (e == cudaSuccess) e = cudaMemcpy(dfile, fm, (size_t)npix, cudaMemcpyHostToDevice);
  }
  if (e != cudaSuccess) {
    cudaFree(dfile);
    return sl_cuda_runtime_fail(a, e, k_node, "static mask");
  }
  unsigned g = (unsigned)((npix + 255) / 256);
  const void *m = p->has_mask ? a->in[1] : NULL;
  switch (p->has_mask ? p->mask_dtype : SL_U8) {
    case SL_U16: sl_k_static_bad_map<uint16_t><<<g, 256, 0, st>>>((const uint16_t *)m, dfile, s->bad, npix); break;
    case SL_U32: sl_k_static_bad_map<uint32_t><<<g, 256, 0, st>>>((const uint32_t *)m, dfile, s->bad, npix); break;
    default: sl_k_static_bad_map<uint8_t><<<g, 256, 0, st>>>((const uint8_t *)m, dfile, s->bad, npix); break;
  }
  sl_code rc = sl_cuda_check_launch(a, "sl_k_static_bad_map");
  if (dfile) cudaFreeAsync(dfile, st);
  return rc;
}

extern "C" sl_code sl_cuda_mask_correct(const sl_cuda_mask_correct_params *p, sl_kernel_args *a) {
  const int64_t h = p->frames.height, w = p->frames.width, npix = h * w;
  const size_t es = sl_dtype_size(p->frames.dtype);
  cudaStream_t st = sl_cuda_queue(a);
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  const int median = p->policy == SL_CUDA_MASK_MEDIAN;
  if (p->policy == SL_CUDA_MASK_NONE) /* copy */
    return sl_cuda_runtime_fail(a,
                                cudaMemcpyAsync(a->out[0], a->in[0], (size_t)(a->pos_count * npix) * es,
                                                cudaMemcpyDeviceToDevice, st),
                                k_node, "copy");
  mask_device_state *s = (mask_device_state *)*p->device_state.state;
  if (!s) {
    s = (mask_device_state *)calloc(1, sizeof *s);
    if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
    *p->device_state.state = s;
    *p->device_state.release = mask_state_release;
  }
  sl_code rc;
  if (!s->bad && (rc = build_bad_map(p, a, s, npix))) return rc;
  if (a->pos_count <= 0) return SL_OK;
  int v = (((uintptr_t)a->in[0] | (uintptr_t)a->out[0]) & 15) == 0 && ((size_t)w * es) % 16 == 0
              ? (int)(16 / es) : 1;
  int64_t grid = a->pos_count, cap = (int64_t)sl_cuda_multiprocessors(a) * 8;
  if (grid > cap) grid = cap;
#define LAUNCH(T, VV)                                                                                  \
  sl_k_mask_correct<T, VV><<<(unsigned)grid, 256, 0, st>>>((const T *)a->in[0], (T *)a->out[0], a->pos_count, \
                                                           (int)h, (int)w, s->bad, median, p->flagged)
  switch (p->frames.dtype) {
    case SL_U8: if (v > 1) LAUNCH(uint8_t, 16); else LAUNCH(uint8_t, 1); break;
    case SL_U16: if (v > 1) LAUNCH(uint16_t, 8); else LAUNCH(uint16_t, 1); break;
    default: if (v > 1) LAUNCH(uint32_t, 4); else LAUNCH(uint32_t, 1); break;
  }
#undef LAUNCH
  return sl_cuda_check_launch(a, "sl_k_mask_correct");
}
