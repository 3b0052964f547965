/* bin_detector on CUDA. See bin_detector.h. */
#include <stdio.h>
#include <stdlib.h>

#include "shaders/cuda/common/device_error.cuh"
#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/common/warp_reduce.cuh"
#include "shaders/cuda/detector/bin_detector.h"

static const char k_node[] = "bin_detector";

/* The node's device state (only when it audits): host bookkeeping and the
 * pieces of its device table. */
typedef struct bin_device_state {
  unsigned long long *first; /* this call's lowest failing index (SL_CUDA_NO_INDEX: none) */
  sl_cuda_error_mirror err;
} bin_device_state;

/* The device table of an auditing node: the error word, the audit word. */
typedef struct bin_pieces {
  sl_cuda_error_word *word;
  unsigned long long *first;
} bin_pieces;

static void bin_layout(sl_table *t, bin_pieces *o) {
  o->word = (sl_cuda_error_word *)sl_table_take(t, SL_CUDA_ERROR_WORD_BYTES);
  o->first = (unsigned long long *)sl_table_take(t, sizeof(unsigned long long));
}

extern "C" int64_t sl_cuda_bin_detector_table_bytes(bool audit) {
  if (!audit) return 0;
  sl_table t = sl_table_counter();
  bin_pieces o;
  bin_layout(&t, &o);
  return t.used;
}

/* ---- kernels --------------------------------------------------------------------- */

/* One thread per output pixel; sums accumulate in the output type, as the CPU
 * (provably exact: all partial sums <= the full sum, which fits). */
template <typename TI, typename TO>
__global__ void sl_k_bin(const TI *__restrict__ x, TO *__restrict__ y, long long nframes, int w, int ho, int wo,
                         int f, long long item) {
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
__global__ void sl_k_bin_audit(const T *__restrict__ x, long long n, unsigned long long bound,
                               unsigned long long *first) {
  unsigned long long best = SL_CUDA_NO_INDEX;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    if ((unsigned long long)x[i] > bound && (unsigned long long)i < best) best = (unsigned long long)i;
  best = warp_min(best);
  if ((threadIdx.x & 31) == 0 && best != SL_CUDA_NO_INDEX) atomicMin(first, best);
}

/* Moves this call's audit result into the sticky error word (first wins). */
template <typename T>
__global__ void sl_k_bin_audit_commit(const T *x, unsigned long long *first, sl_cuda_error_word *err,
                                      long long chunk, long long pos_start) {
  unsigned long long c = *first;
  if (c != SL_CUDA_NO_INDEX && err->kind == 0) {
    err->kind = SL_CUDA_ERROR_BIN_AUDIT;
    err->code = c;
    err->value = (unsigned long long)x[c];
    err->chunk = chunk;
    err->pos_start = pos_start;
  }
  *first = SL_CUDA_NO_INDEX;
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
static const sl_device_kernel bin_detector_kernels[] = {
    ENTRY("bin_u16_u16", (sl_k_bin<uint16_t, uint16_t>)),
    ENTRY("bin_u16_u32", (sl_k_bin<uint16_t, uint32_t>)),
    ENTRY("bin_u8_u8", (sl_k_bin<uint8_t, uint8_t>)),
    ENTRY("bin_u8_u16", (sl_k_bin<uint8_t, uint16_t>)),
    ENTRY("bin_u32_u32", (sl_k_bin<uint32_t, uint32_t>)),
    ENTRY("bin_u32_u64", (sl_k_bin<uint32_t, unsigned long long>)),
    ENTRY("bin_audit_u8", sl_k_bin_audit<uint8_t>),
    ENTRY("bin_audit_u16", sl_k_bin_audit<uint16_t>),
    ENTRY("bin_audit_u32", sl_k_bin_audit<uint32_t>),
    ENTRY("bin_audit_commit_u8", sl_k_bin_audit_commit<uint8_t>),
    ENTRY("bin_audit_commit_u16", sl_k_bin_audit_commit<uint16_t>),
    ENTRY("bin_audit_commit_u32", sl_k_bin_audit_commit<uint32_t>),
};
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(bin_detector_kernels, "bin_detector")

/* ---- state and errors ------------------------------------------------------------ */

static void bin_state_release(void *p) {
  bin_device_state *s = (bin_device_state *)p;
  if (!s) return;
  sl_cuda_error_mirror_free(&s->err);
  free(s);
}

/* The state with its error word and audit word (in the device table), made
 * on the first call. */
static sl_code bin_state_get(const sl_cuda_bin_detector_params *p, sl_kernel_args *a, bin_device_state **out) {
  bin_device_state *s = (bin_device_state *)*p->device_state.state;
  if (!s) {
    sl_table t = sl_table_lent(a);
    bin_pieces o;
    bin_layout(&t, &o);
    sl_code rc = sl_table_check(&t, a, k_node);
    if (rc != SL_OK) return rc;
    s = (bin_device_state *)calloc(1, sizeof *s);
    if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
    rc = sl_cuda_error_mirror_create(&s->err, o.word, a, k_node);
    if (rc != SL_OK) {
      free(s);
      return rc;
    }
    *p->device_state.state = s;
    *p->device_state.release = bin_state_release;
    s->first = o.first;
    cudaError_t e = cudaMemsetAsync(s->first, 0xFF, 8, sl_cuda_queue(a));
    if (e != cudaSuccess) return sl_cuda_runtime_fail(a, e, k_node, "audit word");
  }
  *out = s;
  return SL_OK;
}

/* The CPU's message for an audit failure. */
static sl_code bin_report(const sl_cuda_bin_detector_params *p, sl_kernel_args *a, const sl_cuda_error_word *e) {
  const int64_t w = p->frames.width, item = p->frames.height * w;
  int64_t fr = (int64_t)(e->code / (unsigned long long)item), px = (int64_t)(e->code % (unsigned long long)item);
  int64_t pos = e->pos_start + fr, rem = pos, coords[SL_MAX_RANK];
  for (int k = p->scan_rank - 1; k >= 0; k--) {
    coords[k] = p->scan_dims[k] ? rem % p->scan_dims[k] : 0;
    rem = p->scan_dims[k] ? rem / p->scan_dims[k] : 0;
  }
  char where[160];
  size_t o = (size_t)snprintf(where, sizeof where, "[");
  for (int k = 0; k < p->scan_rank && o < sizeof where; k++)
    o += (size_t)snprintf(where + o, sizeof where - o, "%s%lld", k ? ", " : "", (long long)coords[k]);
  if (o < sizeof where) snprintf(where + o, sizeof where - o, "]");
  sl_error_chunk(a->err, e->chunk);
  return sl_fail(a->err, SL_ERR_FORMAT,
                 "chunk %lld, frame %lld (scan position %s), pixel (row %lld, col %lld): value %llu "
                 "exceeds max_value %llu, so the %s result would not be proven; raise max_value "
                 "or use dtype auto with max_value 0",
                 (long long)e->chunk, (long long)pos, where, (long long)(px / w), (long long)(px % w),
                 (unsigned long long)e->value, (unsigned long long)p->max_value,
                 sl_dtype_name(p->binned.dtype));
}

/* ---- launchers ------------------------------------------------------------------- */

static sl_code launch_bin(const sl_cuda_bin_detector_params *p, sl_kernel_args *a, long long nf) {
  const int64_t h = p->frames.height, w = p->frames.width, ho = p->binned.height, wo = p->binned.width;
  const int f = p->factor;
  const unsigned grid = sl_cuda_stride_grid(a, nf * ho * wo, 16);
  cudaStream_t st = sl_cuda_queue(a);
#define BIN(TI, TO)                                                                                        \
  sl_k_bin<TI, TO><<<grid, 256, 0, st>>>((const TI *)a->in[0], (TO *)a->out[0], nf, (int)w, (int)ho, \
                                                   (int)wo, f, (long long)(h * w))
#define BIN_TO(TI)                                 \
  switch (p->binned.dtype) {                       \
    case SL_U8: BIN(TI, uint8_t); break;           \
    case SL_U16: BIN(TI, uint16_t); break;         \
    case SL_U32: BIN(TI, uint32_t); break;         \
    default: BIN(TI, unsigned long long); break;   \
  }
  switch (p->frames.dtype) {
    case SL_U8: BIN_TO(uint8_t) break;
    case SL_U16: BIN_TO(uint16_t) break;
    default: BIN_TO(uint32_t) break;
  }
#undef BIN_TO
#undef BIN
  return sl_cuda_check_launch(a, "sl_k_bin");
}

template <typename T>
static void launch_audit(sl_kernel_args *a, bin_device_state *s, long long nel, int64_t max_value) {
  cudaStream_t st = sl_cuda_queue(a);
  sl_k_bin_audit<T><<<sl_cuda_stride_grid(a, nel, 16), 256, 0, st>>>((const T *)a->in[0], nel, (unsigned long long)max_value,
                                                    s->first);
  sl_k_bin_audit_commit<T><<<1, 1, 0, st>>>((const T *)a->in[0], s->first, s->err.device, a->chunk, a->pos_start);
}

extern "C" sl_code sl_cuda_bin_detector(const sl_cuda_bin_detector_params *p, sl_kernel_args *a) {
  const sl_dtype in_dtype = p->frames.dtype;
  const uint64_t in_max = in_dtype == SL_U8 ? 0xFFu : in_dtype == SL_U16 ? 0xFFFFu : 0xFFFFFFFFu;
  const int64_t mv = p->max_value;
  const bool audit = mv > 0 && (uint64_t)mv < in_max;
  bin_device_state *s = NULL;
  sl_code rc = SL_OK;
  if (audit) {
    if ((rc = bin_state_get(p, a, &s))) return rc;
    if (s->err.host->kind == SL_CUDA_ERROR_BIN_AUDIT) return bin_report(p, a, s->err.host);
  }
  const long long nf = a->pos_count;
  if (nf <= 0) return SL_OK;
  if ((rc = launch_bin(p, a, nf))) return rc;
  if (!audit) return SL_OK;
  const long long nel = nf * p->frames.height * p->frames.width;
  switch (in_dtype) {
    case SL_U8: launch_audit<uint8_t>(a, s, nel, mv); break;
    case SL_U16: launch_audit<uint16_t>(a, s, nel, mv); break;
    default: launch_audit<uint32_t>(a, s, nel, mv); break;
  }
  if ((rc = sl_cuda_check_launch(a, "sl_k_bin_audit"))) return rc;
  return sl_cuda_error_mirror_pull(&s->err, a, k_node);
}

extern "C" sl_code sl_cuda_bin_detector_finalize(const sl_cuda_bin_detector_params *p, sl_kernel_args *a) {
  bin_device_state *s = (bin_device_state *)*p->device_state.state;
  if (!s) return SL_OK; /* no audit ran */
  sl_code rc = sl_cuda_error_mirror_pull(&s->err, a, k_node);
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  if (rc == SL_OK && s->err.host->kind == SL_CUDA_ERROR_BIN_AUDIT) rc = bin_report(p, a, s->err.host);
  return rc;
}
