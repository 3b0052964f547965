/* variance on CUDA. See variance.h. Explicitly rounded operations (no
 * contraction into fused multiply-adds), in the CPU kernel's order. */
#include "shaders/cuda/basic/variance.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"

template <typename T>
__global__ void sl_k_variance_chunk(const T *__restrict__ x, double *m, long long npos, long long item) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < item;
       e += (long long)gridDim.x * blockDim.x) {
    double s = 0, q = 0;
    for (long long p = 0; p < npos; p++) s = __dadd_rn(s, (double)x[p * item + e]);
    const double mu = __ddiv_rn(s, (double)npos);
    for (long long p = 0; p < npos; p++) {
      const double d = __dsub_rn((double)x[p * item + e], mu);
      q = __dadd_rn(q, __dmul_rn(d, d));
    }
    m[e] = (double)npos, m[item + e] = mu, m[2 * item + e] = q;
  }
}

/* u8 and u16: exact integer sums of the values and their squares, then
 * sl_variance_from_sums (the CPU's arithmetic). */
template <typename T>
__global__ void sl_k_variance_exact(const T *__restrict__ x, double *m, long long npos, long long item) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < item;
       e += (long long)gridDim.x * blockDim.x) {
    unsigned long long s = 0, q = 0;
    for (long long p = 0; p < npos; p++) {
      const unsigned v = x[p * item + e];
      s += v;
      q += v * v;
    }
    double mean, m2;
    sl_variance_from_sums((uint64_t)npos, s, q, &mean, &m2);
    m[e] = (double)npos, m[item + e] = mean, m[2 * item + e] = m2;
  }
}

__global__ void sl_k_variance_merge(double *m, const double *__restrict__ pm, long long item) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < item;
       e += (long long)gridDim.x * blockDim.x) {
    const double n = m[e], pn = pm[e];
    if (pn == 0) continue;
    const double total = __dadd_rn(n, pn), mean = m[item + e];
    const double d = __dsub_rn(pm[item + e], mean), share = __ddiv_rn(pn, total);
    m[item + e] = __dadd_rn(mean, __dmul_rn(d, share));
    m[2 * item + e] = __dadd_rn(__dadd_rn(m[2 * item + e], pm[2 * item + e]),
                                __dmul_rn(__dmul_rn(__dmul_rn(d, d), n), share));
    m[e] = total;
  }
}

__global__ void sl_k_variance_finalize(const double *__restrict__ m, double *om, double *ov, double *on,
                                       long long item, double ddof) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < item;
       e += (long long)gridDim.x * blockDim.x) {
    const double n = m[e], mean = m[item + e];
    const double var = n > ddof ? __ddiv_rn(m[2 * item + e], __dsub_rn(n, ddof)) : __longlong_as_double(0x7ff8000000000000LL);
    if (om) om[e] = mean;
    if (ov) ov[e] = var;
    if (on) on[e] = mean != 0 ? __ddiv_rn(var, __dmul_rn(mean, mean)) : 0;
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel variance_kernels[] = {
    ENTRY("variance_u8", sl_k_variance_exact<uint8_t>),
    ENTRY("variance_u16", sl_k_variance_exact<uint16_t>),
    ENTRY("variance_u32", sl_k_variance_chunk<uint32_t>),
    ENTRY("variance_u64", sl_k_variance_chunk<unsigned long long>),
    ENTRY("variance_i32", sl_k_variance_chunk<int32_t>),
    ENTRY("variance_i64", sl_k_variance_chunk<long long>),
    ENTRY("variance_f32", sl_k_variance_chunk<float>),
    ENTRY("variance_f64", sl_k_variance_chunk<double>),
    ENTRY("variance_merge", sl_k_variance_merge),
    ENTRY("variance_finalize", sl_k_variance_finalize),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(variance_kernels, "variance")

extern "C" sl_code sl_cuda_variance_chunk(const sl_cuda_variance_params *p, sl_kernel_args *a) {
  const long long item = p->item_elems, npos = a->pos_count;
  if (npos <= 0 || item <= 0) return SL_OK;
  cudaStream_t st = sl_cuda_queue(a);
  const unsigned g = sl_cuda_stride_grid(a, item, 8);
  double *m = (double *)a->out[0];
  const void *x = a->in[0];
  switch (p->dtype) {
#define VAR_LAUNCH(DT, T) \
  case DT: sl_k_variance_chunk<T><<<g, 256, 0, st>>>((const T *)x, m, npos, item); break;
    case SL_U8: sl_k_variance_exact<uint8_t><<<g, 256, 0, st>>>((const uint8_t *)x, m, npos, item); break;
    case SL_U16: sl_k_variance_exact<uint16_t><<<g, 256, 0, st>>>((const uint16_t *)x, m, npos, item); break;
    VAR_LAUNCH(SL_U32, uint32_t)
    VAR_LAUNCH(SL_U64, unsigned long long)
    VAR_LAUNCH(SL_I32, int32_t)
    VAR_LAUNCH(SL_I64, long long)
    VAR_LAUNCH(SL_F32, float)
    VAR_LAUNCH(SL_F64, double)
#undef VAR_LAUNCH
    default:
      return sl_fail(a->err, SL_ERR_PIPELINE, "variance: dtype %s has no CUDA kernel", sl_dtype_name(p->dtype));
  }
  return sl_cuda_check_launch(a, "sl_k_variance_chunk");
}

extern "C" sl_code sl_cuda_variance_merge(const sl_cuda_variance_params *p, sl_kernel_args *a) {
  const long long item = p->item_elems;
  if (item <= 0) return SL_OK;
  sl_k_variance_merge<<<sl_cuda_stride_grid(a, item, 8), 256, 0, sl_cuda_queue(a)>>>(
      (double *)a->out[0], (const double *)a->in[0], item);
  return sl_cuda_check_launch(a, "sl_k_variance_merge");
}

extern "C" sl_code sl_cuda_variance_finalize(const sl_cuda_variance_params *p, sl_kernel_args *a) {
  const long long item = p->item_elems;
  if (item <= 0) return SL_OK;
  sl_k_variance_finalize<<<sl_cuda_stride_grid(a, item, 8), 256, 0, sl_cuda_queue(a)>>>(
      (const double *)a->out[0], (double *)a->out[1], (double *)a->out[2], (double *)a->out[3], item,
      (double)p->ddof);
  return sl_cuda_check_launch(a, "sl_k_variance_finalize");
}
