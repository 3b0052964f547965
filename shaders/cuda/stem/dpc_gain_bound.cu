/* The gain bound's integer sums on the device: see dpc_gain_bound.h. */
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/stem/dpc_gain_bound.h"

static const char k_node[] = "dpc";

#define GAIN_THREADS 256 /* a power of two: the blocks' tree sums */

/* One block a segment: the sum of its counts and of their squares over the
 * window (the squares 128-bit: a count of a segment reaches 2^32), zeros for
 * a segment not used. Integer additions, so any order gives the host's. */
__global__ void sl_k_dpc_gain_segment_sums(const unsigned long long *__restrict__ window, long long row_stride,
                                           long long segment_stride, long long wr, long long wc,
                                           const double *__restrict__ offsets, unsigned long long *__restrict__ out) {
  __shared__ unsigned long long s1[GAIN_THREADS], lo[GAIN_THREADS], hi[GAIN_THREADS];
  const int u = blockIdx.x, t = threadIdx.x;
  unsigned long long a = 0, l = 0, h = 0;
  if (offsets[3 * u + 2] > 0) {
    const unsigned long long *s = window + (long long)u * segment_stride;
    for (long long q = t; q < wr * wc; q += GAIN_THREADS) {
      const unsigned long long v = s[(q / wc) * row_stride + q % wc], p = v * v;
      a += v, l += p, h += __umul64hi(v, v) + (l < p);
    }
  }
  s1[t] = a, lo[t] = l, hi[t] = h;
  __syncthreads();
  for (int k = GAIN_THREADS / 2; k > 0; k >>= 1) {
    if (t < k) {
      const unsigned long long x = lo[t] + lo[t + k];
      hi[t] += hi[t + k] + (x < lo[t]);
      lo[t] = x, s1[t] += s1[t + k];
    }
    __syncthreads();
  }
  if (t == 0) out[3 * u] = s1[0], out[3 * u + 1] = lo[0], out[3 * u + 2] = hi[0];
}

/* One thread a position: the sum over the used segments. */
__global__ void sl_k_dpc_gain_position_sums(const unsigned long long *__restrict__ window, long long row_stride,
                                            long long segment_stride, int n, long long wr, long long wc,
                                            const double *__restrict__ offsets, unsigned long long *__restrict__ out) {
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < wr * wc;
       q += (long long)gridDim.x * blockDim.x) {
    const long long at = (q / wc) * row_stride + q % wc;
    unsigned long long sum = 0;
    for (int u = 0; u < n; u++)
      if (offsets[3 * u + 2] > 0) sum += window[(long long)u * segment_stride + at];
    out[q] = sum;
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel gain_kernels[] = {
    ENTRY("dpc_gain_segment_sums", sl_k_dpc_gain_segment_sums),
    ENTRY("dpc_gain_position_sums", sl_k_dpc_gain_position_sums),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(gain_kernels, "dpc")

extern "C" int64_t sl_cuda_dpc_gain_sums_bytes(int n, int64_t wr, int64_t wc) {
  return ((int64_t)n * SL_DPC_GAIN_SEGMENT_SUMS + wr * wc) * (int64_t)sizeof(uint64_t);
}

extern "C" sl_code sl_cuda_dpc_gain_sums(sl_kernel_args *a, const uint64_t *window, int64_t row_stride,
                                         int64_t segment_stride, int n, int64_t wr, int64_t wc, const double *offsets,
                                         uint64_t *scratch, uint64_t *segment_sums, uint64_t *position_sums) {
  if (n <= 0) return SL_OK;
  cudaStream_t st = sl_cuda_queue(a);
  unsigned long long *seg = (unsigned long long *)scratch, *pos = seg + (size_t)n * SL_DPC_GAIN_SEGMENT_SUMS;
  const unsigned long long *w = (const unsigned long long *)window;
  sl_k_dpc_gain_segment_sums<<<n, GAIN_THREADS, 0, st>>>(w, row_stride, segment_stride, wr, wc, offsets, seg);
  sl_code rc = sl_cuda_check_launch(a, "sl_k_dpc_gain_segment_sums");
  if (rc != SL_OK) return rc;
  sl_k_dpc_gain_position_sums<<<sl_cuda_stride_grid(a, wr * wc, 4), 256, 0, st>>>(w, row_stride, segment_stride, n,
                                                                                   wr, wc, offsets, pos);
  if ((rc = sl_cuda_check_launch(a, "sl_k_dpc_gain_position_sums"))) return rc;
  const size_t seg_bytes = (size_t)n * SL_DPC_GAIN_SEGMENT_SUMS * sizeof(uint64_t);
  rc = sl_cuda_runtime_fail(a, cudaMemcpyAsync(segment_sums, seg, seg_bytes, cudaMemcpyDeviceToHost, st), k_node,
                            "reading the gain bound's segment sums back");
  if (rc == SL_OK)
    rc = sl_cuda_runtime_fail(a, cudaMemcpyAsync(position_sums, pos, (size_t)(wr * wc) * sizeof(uint64_t),
                                                 cudaMemcpyDeviceToHost, st),
                              k_node, "reading the gain bound's position sums back");
  return rc == SL_OK ? sl_cuda_wait(a) : rc;
}
