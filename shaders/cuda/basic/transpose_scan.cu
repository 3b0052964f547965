/* transpose_scan on CUDA. See transpose_scan.h. A 32 x 32 tile per block:
 * threads read 32 consecutive elements of a position, and write 32
 * consecutive positions of an element (the tile is padded against bank
 * conflicts). Elements move as unsigned integers of their width: bits are
 * copied, never converted. */
#include "shaders/cuda/basic/transpose_scan.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"

#define TT 32

template <typename T>
__global__ void sl_k_transpose_scan(const T *__restrict__ x, T *__restrict__ y, long long npos,
                                    long long item, long long scan) {
  __shared__ T tile[TT][TT + 1];
  long long e0 = (long long)blockIdx.x * TT, p0 = (long long)blockIdx.y * TT;
  for (int r = threadIdx.y; r < TT; r += blockDim.y) {
    long long p = p0 + r, e = e0 + threadIdx.x;
    if (p < npos && e < item) tile[r][threadIdx.x] = x[p * item + e];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < TT; r += blockDim.y) {
    long long e = e0 + r, p = p0 + threadIdx.x;
    if (p < npos && e < item) y[e * scan + p] = tile[threadIdx.x][r];
  }
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel transpose_kernels[] = {
    ENTRY("transpose_scan_1", sl_k_transpose_scan<unsigned char>),
    ENTRY("transpose_scan_2", sl_k_transpose_scan<unsigned short>),
    ENTRY("transpose_scan_4", sl_k_transpose_scan<unsigned int>),
    ENTRY("transpose_scan_8", sl_k_transpose_scan<unsigned long long>),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(transpose_kernels, "transpose_scan")

template <typename T>
static void launch(const sl_cuda_transpose_scan_params *p, sl_kernel_args *a, dim3 grid, cudaStream_t st) {
  sl_k_transpose_scan<T><<<grid, dim3(TT, 8), 0, st>>>((const T *)a->in[0], (T *)a->out[0], a->pos_count,
                                                       p->item_elems, p->scan_positions);
}

extern "C" sl_code sl_cuda_transpose_scan(const sl_cuda_transpose_scan_params *p, sl_kernel_args *a) {
  if (a->pos_count <= 0 || p->item_elems <= 0) return SL_OK;
  long long gx = (p->item_elems + TT - 1) / TT, gy = (a->pos_count + TT - 1) / TT;
  if (gx > 0x7FFFFFFF || gy > 65535)
    return sl_fail(a->err, SL_ERR_FORMAT, "transpose_scan: %lld elements x %lld positions per chunk is too large",
                   (long long)p->item_elems, (long long)a->pos_count);
  dim3 grid((unsigned)gx, (unsigned)gy);
  cudaStream_t st = sl_cuda_queue(a);
  switch (p->elem_bytes) {
    case 1: launch<unsigned char>(p, a, grid, st); break;
    case 2: launch<unsigned short>(p, a, grid, st); break;
    case 4: launch<unsigned int>(p, a, grid, st); break;
    case 8: launch<unsigned long long>(p, a, grid, st); break;
    default: return sl_fail(a->err, SL_ERR_FORMAT, "transpose_scan: %d-byte elements", p->elem_bytes);
  }
  return sl_cuda_check_launch(a, "sl_k_transpose_scan");
}
