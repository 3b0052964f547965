/* sum on CUDA. See sum.h. */
#include "shaders/cuda/basic/sum.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"

/* Integers: blocks split elements (x) and positions (y); u64 partial sums,
 * one atomicAdd per thread and slice (any order is exact). */
template <typename T>
__global__ void sl_k_sum_int(const T *__restrict__ x, unsigned long long *y, long long npos, long long item,
                             long long per) {
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
__global__ void sl_k_sum_float(const T *__restrict__ x, double *y, long long npos, long long item) {
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

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel sum_kernels[] = {
    ENTRY("sum_u8", sl_k_sum_int<uint8_t>),   ENTRY("sum_u16", sl_k_sum_int<uint16_t>),
    ENTRY("sum_u32", sl_k_sum_int<uint32_t>), ENTRY("sum_u64", sl_k_sum_int<unsigned long long>),
    ENTRY("sum_f32", sl_k_sum_float<float>),  ENTRY("sum_f64", sl_k_sum_float<double>),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(sum_kernels, "sum")

extern "C" sl_code sl_cuda_sum(const sl_cuda_sum_params *p, sl_kernel_args *a) {
  const long long item = p->item_elems, npos = a->pos_count;
  if (npos <= 0 || item <= 0) return SL_OK;
  cudaStream_t st = sl_cuda_queue(a);
  long long gx = (item + 255) / 256;
  if (p->dtype == SL_F32 || p->dtype == SL_F64) {
    long long g = gx < 65535 ? gx : 65535;
    if (p->dtype == SL_F32)
      sl_k_sum_float<float><<<(unsigned)g, 256, 0, st>>>((const float *)a->in[0], (double *)a->out[0], npos, item);
    else
      sl_k_sum_float<double><<<(unsigned)g, 256, 0, st>>>((const double *)a->in[0], (double *)a->out[0], npos, item);
    return sl_cuda_check_launch(a, "sl_k_sum_float");
  }
  /* enough blocks to fill the GPU: split positions */
  long long want = (long long)sl_cuda_multiprocessors(a) * 16, gy = (want + gx - 1) / gx;
  if (gy > npos) gy = npos;
  if (gy > 65535) gy = 65535;
  if (gy < 1) gy = 1;
  long long per = (npos + gy - 1) / gy;
  gy = (npos + per - 1) / per;
  if (gx > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "sum: item too large");
  dim3 grid((unsigned)gx, (unsigned)gy);
  unsigned long long *y = (unsigned long long *)a->out[0];
  const void *x = a->in[0];
  switch (p->dtype) {
    case SL_U8: sl_k_sum_int<uint8_t><<<grid, 256, 0, st>>>((const uint8_t *)x, y, npos, item, per); break;
    case SL_U16: sl_k_sum_int<uint16_t><<<grid, 256, 0, st>>>((const uint16_t *)x, y, npos, item, per); break;
    case SL_U32: sl_k_sum_int<uint32_t><<<grid, 256, 0, st>>>((const uint32_t *)x, y, npos, item, per); break;
    case SL_U64:
      sl_k_sum_int<unsigned long long><<<grid, 256, 0, st>>>((const unsigned long long *)x, y, npos, item, per);
      break;
    default:
      return sl_fail(a->err, SL_ERR_PIPELINE, "sum: dtype %s has no CUDA kernel", sl_dtype_name(p->dtype));
  }
  return sl_cuda_check_launch(a, "sl_k_sum_int");
}
