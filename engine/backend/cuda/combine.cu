/* The CUDA backend's merges of declared reductions (engine/core/combine.h):
 * identity fills and element-wise merges, enqueued on the backend's stream
 * after the kernels that wrote the partial. Each element is merged by one
 * thread with the same arithmetic as the host merge (sl_combine_merge_host):
 * integer sums wrap, float sums are one IEEE addition, MIN/MAX propagate NaN,
 * so CPU and CUDA give the same bits. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "engine/core/combine.h"
#include "engine/core/kernel_abi.h"
}

template <typename T> __device__ T combine_op(int c, T x, T y) {
  if (c == SL_COMBINE_SUM) return (T)(x + y);
  if (x != x || y != y) return (T)(x + y); /* NaN stays NaN (floats only) */
  if (c == SL_COMBINE_MIN) return y < x ? y : x;
  return y > x ? y : x;
}

template <typename T> __global__ void combine_merge_kernel(int c, T *acc, const T *partial, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    acc[i] = combine_op<T>(c, acc[i], partial[i]);
}

template <typename T> __global__ void combine_fill_kernel(T *dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = value;
}

/* Signed sums wrap like the host's: summed as unsigned of the same width. */
template <typename T> static int merge(cudaStream_t s, int c, void *acc, const void *partial, int64_t n) {
  int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (blocks < 1) return 0;
  combine_merge_kernel<T><<<blocks, 256, 0, s>>>(c, (T *)acc, (const T *)partial, n);
  return (int)cudaGetLastError();
}

template <typename T> static int fill(cudaStream_t s, void *dst, T value, int64_t n) {
  int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (blocks < 1) return 0;
  combine_fill_kernel<T><<<blocks, 256, 0, s>>>((T *)dst, value, n);
  return (int)cudaGetLastError();
}

extern "C" int sl_cuda_combine_merge(void *stream, int c, int dtype, void *acc, const void *partial, int64_t n) {
  cudaStream_t s = (cudaStream_t)stream;
  bool sum = c == SL_COMBINE_SUM;
  switch ((sl_dtype)dtype) {
    case SL_U8: return merge<uint8_t>(s, c, acc, partial, n);
    case SL_U16: return merge<uint16_t>(s, c, acc, partial, n);
    case SL_U32: return merge<uint32_t>(s, c, acc, partial, n);
    case SL_U64: return merge<uint64_t>(s, c, acc, partial, n);
    case SL_I32: return sum ? merge<uint32_t>(s, c, acc, partial, n) : merge<int32_t>(s, c, acc, partial, n);
    case SL_I64: return sum ? merge<uint64_t>(s, c, acc, partial, n) : merge<int64_t>(s, c, acc, partial, n);
    case SL_F32: return merge<float>(s, c, acc, partial, n);
    case SL_F64: return merge<double>(s, c, acc, partial, n);
    case SL_C64: return merge<float>(s, c, acc, partial, 2 * n);
    default: return (int)cudaErrorInvalidValue;
  }
}

/* MIN starts from the largest value, MAX from the smallest; the rest from 0
 * (the caller zeroes those with a memset). */
extern "C" int sl_cuda_combine_identity(void *stream, int c, int dtype, void *dst, int64_t n) {
  cudaStream_t s = (cudaStream_t)stream;
  bool lo = c == SL_COMBINE_MAX;
  switch ((sl_dtype)dtype) {
    case SL_U8: return fill<uint8_t>(s, dst, lo ? 0 : UINT8_MAX, n);
    case SL_U16: return fill<uint16_t>(s, dst, lo ? 0 : UINT16_MAX, n);
    case SL_U32: return fill<uint32_t>(s, dst, lo ? 0 : UINT32_MAX, n);
    case SL_U64: return fill<uint64_t>(s, dst, lo ? 0 : UINT64_MAX, n);
    case SL_I32: return fill<int32_t>(s, dst, lo ? INT32_MIN : INT32_MAX, n);
    case SL_I64: return fill<int64_t>(s, dst, lo ? INT64_MIN : INT64_MAX, n);
    case SL_F32: return fill<float>(s, dst, lo ? -HUGE_VALF : HUGE_VALF, n);
    case SL_F64: return fill<double>(s, dst, lo ? -HUGE_VAL : HUGE_VAL, n);
    default: return (int)cudaErrorInvalidValue;
  }
}
