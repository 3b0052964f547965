/* See frame_moments.cuh. */
#include "shaders/cuda/common/frame_moments.cuh"

#include <math_constants.h>

#include "shaders/cuda/common/frame_units.cuh"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/common/warp_reduce.cuh"

/* Per frame S, Sr, Sc (u64, any order: integers). A unit lies in one row
 * (V divides W in the vector path): S += s_u, Sr += r * s_u,
 * Sc += c0 * s_u + sum k * v_k. COM: writes Sr/S, Sc/S (f64 division of the
 * same u64 values as the CPU: identical doubles), NaN where S = 0. */
template <typename T, int V, int COM>
__global__ void __launch_bounds__(32 * SL_FRAME_WARPS)
    sl_k_frame_moments(const T *__restrict__ x, long long nframes, int w, long long item,
                       unsigned long long *__restrict__ os, unsigned long long *__restrict__ osr,
                       unsigned long long *__restrict__ osc, double *__restrict__ ocr,
                       double *__restrict__ occ) {
  typedef typename unit_sum_type<T>::t A;
  const int lane = threadIdx.x & 31;
  const long long nw = (long long)gridDim.x * SL_FRAME_WARPS;
  const uint32_t nunits = (uint32_t)(item / V);
  const uint32_t step = 32u * V, sdr = step / (uint32_t)w, sdc = step % (uint32_t)w;
  const uint32_t e0 = (uint32_t)lane * V, r0 = e0 / (uint32_t)w, c0 = e0 % (uint32_t)w;
  for (long long f = (long long)blockIdx.x * SL_FRAME_WARPS + (threadIdx.x >> 5); f < nframes; f += nw) {
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
        if (s > 0) {
          ocr[f] = __ddiv_rn((double)sr, (double)s);
          occ[f] = __ddiv_rn((double)sc, (double)s);
        } else {
          ocr[f] = CUDART_NAN, occ[f] = CUDART_NAN;
        }
      } else {
        os[f] = s, osr[f] = sr, osc[f] = sc;
      }
    }
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel frame_moment_kernels[] = {
    ENTRY("frame_moments_u8x16", (sl_k_frame_moments<uint8_t, 16, 0>)),
    ENTRY("frame_moments_u8", (sl_k_frame_moments<uint8_t, 1, 0>)),
    ENTRY("frame_moments_u16x8", (sl_k_frame_moments<uint16_t, 8, 0>)),
    ENTRY("frame_moments_u16", (sl_k_frame_moments<uint16_t, 1, 0>)),
    ENTRY("frame_moments_u32x4", (sl_k_frame_moments<uint32_t, 4, 0>)),
    ENTRY("frame_moments_u32", (sl_k_frame_moments<uint32_t, 1, 0>)),
    ENTRY("frame_com_u8x16", (sl_k_frame_moments<uint8_t, 16, 1>)),
    ENTRY("frame_com_u8", (sl_k_frame_moments<uint8_t, 1, 1>)),
    ENTRY("frame_com_u16x8", (sl_k_frame_moments<uint16_t, 8, 1>)),
    ENTRY("frame_com_u16", (sl_k_frame_moments<uint16_t, 1, 1>)),
    ENTRY("frame_com_u32x4", (sl_k_frame_moments<uint32_t, 4, 1>)),
    ENTRY("frame_com_u32", (sl_k_frame_moments<uint32_t, 1, 1>)),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(frame_moment_kernels, "com moments")

/* COM 0: S, Sr, Sc into a->out[first_out .. first_out + 2]; COM 1: the CoM. */
template <int COM>
static sl_code launch_moments(sl_kernel_args *a, const sl_cuda_frame_shape *f, int first_out) {
  const int64_t h = f->height, w = f->width;
  const long long item = (long long)(h * w), nf = a->pos_count;
  if (item > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  if (nf <= 0) return SL_OK;
  int v = frame_unit_width(a->in[0], w, sl_dtype_size(f->dtype));
  unsigned grid = frame_grid(nf, sl_cuda_multiprocessors(a));
  cudaStream_t st = sl_cuda_queue(a);
  unsigned long long *o0 = COM ? NULL : (unsigned long long *)a->out[first_out];
  unsigned long long *o1 = COM ? NULL : (unsigned long long *)a->out[first_out + 1];
  unsigned long long *o2 = COM ? NULL : (unsigned long long *)a->out[first_out + 2];
  double *cr = COM ? (double *)a->out[0] : NULL, *cc = COM ? (double *)a->out[1] : NULL;
#define LAUNCH(T, VV)                                                                                     \
  sl_k_frame_moments<T, VV, COM><<<grid, 32 * SL_FRAME_WARPS, 0, st>>>((const T *)a->in[0], nf, (int)w, item, \
                                                                       o0, o1, o2, cr, cc)
  switch (f->dtype) {
    case SL_U8: if (v > 1) LAUNCH(uint8_t, 16); else LAUNCH(uint8_t, 1); break;
    case SL_U16: if (v > 1) LAUNCH(uint16_t, 8); else LAUNCH(uint16_t, 1); break;
    default: if (v > 1) LAUNCH(uint32_t, 4); else LAUNCH(uint32_t, 1); break;
  }
#undef LAUNCH
  return sl_cuda_check_launch(a, "sl_k_frame_moments");
}

sl_code sl_cuda_frame_moments(sl_kernel_args *a, const sl_cuda_frame_shape *f, int first_out) {
  return launch_moments<0>(a, f, first_out);
}

sl_code sl_cuda_frame_centre_of_mass(sl_kernel_args *a, const sl_cuda_frame_shape *f) {
  return launch_moments<1>(a, f, 0);
}
