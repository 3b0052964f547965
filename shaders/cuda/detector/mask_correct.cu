/* mask_correct on CUDA. See mask_correct.h.
 *
 * In place on the frames (out[0] is in[0] when the planner grants it; else
 * the chunk is copied into out[0] first), touching only bad pixels. On the
 * first call the static bad map ((mask input > 0) | file mask) and the list
 * of static bad pixels are built in the node's device table. Per chunk,
 * every correction is first computed from the original frames, then all are
 * written, so no correction ever sees a corrected value:
 *   1. static medians: one thread per (frame, static bad pixel) -> vals;
 *   2. with `flagged`: a scan of every pixel (16-byte units) for the flag
 *      value outside the static map; such a pixel's correction goes to its
 *      place in a shadow chunk and its bit into a per-frame bit set. With
 *      the flag_counts input (the decoder's count per 1024-pixel group),
 *      step 1 also counts the static bad pixels at the flag value per group,
 *      and the scan skips, without reading the frame, every group whose two
 *      counts agree (the CPU kernel's test, same results). Then the scan
 *      walks (frame, group) pairs, a lane each, and a warp walks together
 *      only the groups whose counts disagree (a thread per unit, which
 *      mostly divided 64-bit indices to find its group's counts agree, made
 *      the node 8.5 ms of device time on the H200's 18 GiB acquisition, in
 *      which every group agrees; this way 4.0-4.9 ms);
 *   3. writes: one thread per (frame, static bad pixel), and one per
 *      (frame, 32-pixel word of the bit set) with a bit set (it clears the
 *      word for the next chunk); with the counts, only the words of the
 *      groups the scan walked, a lane each (a group is 32 words). */
#include <stdlib.h>
#include <string.h>

#include "shaders/cuda/common/device_table.h"
#include "shaders/cuda/common/frame_units.cuh"
#include "shaders/cuda/common/kernel_registry.h"
#include "shaders/cuda/common/launch.cuh"
#include "shaders/cuda/detector/mask_correct.h"
#include "shaders/cuda/detector/flag_groups.h"

static const char k_node[] = "mask_correct";

/* The node's device table, in this order (the static part first, then the
 * bit set, so that both start at the same place in every call):
 *   bad, bad_list, count         the static map and list (built on the first call)
 *   bits [positions][words]      with `flagged`: flagged pixels to write; zero between calls
 *   shadow [positions][H*W]      with `flagged`: flagged corrections at their pixels
 *   vals [positions][n_bad]      static corrections
 *   static_flag [positions][groups]  with the flag counts: static bad pixels at the flag value */
typedef struct mask_pieces {
  uint8_t *bad;         /* H*W static bad map (+16: whole 16-byte units) */
  int32_t *bad_list;    /* the static bad pixels' indices (any order) */
  unsigned long long *count; /* their number, while the list is built */
  uint32_t *bits;
  void *shadow;
  uint32_t *vals;
  uint32_t *static_flag;
} mask_pieces;

static void mask_layout(sl_table *t, int64_t npix, int64_t es, bool flagged, bool counts, int64_t positions,
                        int64_t n_bad, mask_pieces *o) {
  const int64_t words = (npix + 31) / 32;
  o->bad = (uint8_t *)sl_table_take(t, npix + 16);
  o->bad_list = (int32_t *)sl_table_take(t, npix * (int64_t)sizeof(int32_t));
  o->count = (unsigned long long *)sl_table_take(t, sizeof(unsigned long long));
  o->bits = flagged ? (uint32_t *)sl_table_take(t, positions * words * (int64_t)sizeof(uint32_t)) : NULL;
  o->shadow = flagged ? sl_table_take(t, positions * npix * es) : NULL;
  o->vals = (uint32_t *)sl_table_take(t, positions * (n_bad ? n_bad : 1) * (int64_t)sizeof(uint32_t));
  o->static_flag = flagged && counts
                       ? (uint32_t *)sl_table_take(t, positions * sl_flag_groups(npix) * (int64_t)sizeof(uint32_t))
                       : NULL;
}

extern "C" int64_t sl_cuda_mask_correct_table_bytes(const sl_cuda_frame_shape *frames, bool flagged,
                                                    bool has_counts, int64_t positions, int64_t n_bad) {
  sl_table t = sl_table_counter();
  mask_pieces o;
  mask_layout(&t, frames->height * frames->width, (int64_t)sl_dtype_size(frames->dtype), flagged, has_counts,
              positions, n_bad, &o);
  return t.used;
}

typedef struct mask_device_state {
  mask_pieces at; /* this call's pieces */
  int64_t n_bad;
  /* Frames whose words of the bit set are known to be zero: a call of n
   * frames leaves its n zeroed, and its shadow and vals may lie over the
   * words of later frames (a smaller last chunk), which a larger call after
   * it clears first. The table starts zeroed. */
  int64_t bits_zero_frames;
} mask_device_state;

/* ---- kernels --------------------------------------------------------------------- */

/* Static bad map: (mask input > 0) | file mask. */
template <typename M>
__global__ void sl_k_static_bad_map(const M *mask, const uint8_t *file, uint8_t *bad, long long npix) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
       i += (long long)gridDim.x * blockDim.x)
    bad[i] = (uint8_t)(((mask && mask[i] != 0) ? 1 : 0) | ((file && file[i]) ? 1 : 0));
}

/* The static bad pixels' indices, compacted in any order; *count their number. */
__global__ void sl_k_bad_list(const uint8_t *bad, long long npix, int32_t *list, unsigned long long *count) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < npix;
       i += (long long)gridDim.x * blockDim.x)
    if (bad[i]) list[atomicAdd(count, 1ull)] = (int32_t)i;
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

/* 1. Static bad pixel k of frame f (one thread each): its correction from
 * the original frame; with static_flag (the flag counts are an input), a
 * static bad pixel at the flag value counts in its frame's group. */
template <typename T>
__global__ void sl_k_static_fix(const T *__restrict__ x, long long nframes, int h, int w,
                                const uint8_t *__restrict__ bad, const int32_t *__restrict__ list,
                                long long n_bad, int median, int flagged, uint32_t *__restrict__ vals,
                                uint32_t *__restrict__ static_flag) {
  const long long item = (long long)h * w, total = nframes * n_bad;
  const long long groups = (item + SL_FLAG_GROUP_PIXELS - 1) / SL_FLAG_GROUP_PIXELS;
  const T tmax = (T)~(T)0;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
       t += (long long)gridDim.x * blockDim.x) {
    long long f = t / n_bad;
    int i = list[t - f * n_bad];
    vals[t] = median ? (uint32_t)neighbour_median<T>(x + f * item, bad, h, w, i / w, i % w, flagged != 0, tmax)
                     : 0u;
    if (static_flag && x[f * item + i] == tmax) atomicAdd(&static_flag[f * groups + i / SL_FLAG_GROUP_PIXELS], 1u);
  }
}

/* 2. The flagged pixels of unit u of frame f: pixels at the flag value
 * outside the static map get their correction in `shadow` and their bit. */
template <typename T, int V>
__device__ __forceinline__ void flag_unit(const T *__restrict__ x, long long f, long long u, int h, int w,
                                          const uint8_t *__restrict__ bad, int median, T *__restrict__ shadow,
                                          uint32_t *__restrict__ bits) {
  const long long item = (long long)h * w, words = (item + 31) / 32;
  const T tmax = (T)~(T)0;
  T e[V];
  uint8_t b[V];
  load_unit<T, V>(x + f * item + u * V, e);
  load_cls<V>(bad + u * V, b);
  bool any = false;
#pragma unroll
  for (int k = 0; k < V; k++) any |= !b[k] && e[k] == tmax;
  if (!any) return;
#pragma unroll
  for (int k = 0; k < V; k++) {
    if (b[k] || e[k] != tmax) continue;
    int i = (int)(u * V + k);
    shadow[f * item + i] = median ? neighbour_median<T>(x + f * item, bad, h, w, i / w, i % w, true, tmax) : (T)0;
    atomicOr(&bits[f * words + i / 32], 1u << (i % 32));
  }
}

/* 2 without the counts: every unit of every frame (grid-stride). */
template <typename T, int V>
__global__ void __launch_bounds__(256)
    sl_k_flag_scan(const T *__restrict__ x, long long nframes, int h, int w, const uint8_t *__restrict__ bad,
                   int median, T *__restrict__ shadow, uint32_t *__restrict__ bits) {
  const long long units = (long long)h * w / V;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < nframes * units;
       t += (long long)gridDim.x * blockDim.x) {
    long long f = t / units;
    flag_unit<T, V>(x, f, t - f * units, h, w, bad, median, shadow, bits);
  }
}

/* With the counts: each (frame, group) pair of nframes frames of `item`
 * pixels whose two counts disagree, as visit(f, g, lane) by the whole warp. Lane l of a warp tests pair p0 + l
 * of its 32 consecutive pairs (grid-stride); the warp then visits each pair
 * that disagrees, one after the other. */
template <typename Visit>
__device__ __forceinline__ void walk_disagreeing(long long nframes, long long item, const uint32_t *__restrict__ counts,
                                                 const uint32_t *__restrict__ static_flag, Visit visit) {
  const long long groups = (item + SL_FLAG_GROUP_PIXELS - 1) / SL_FLAG_GROUP_PIXELS, pairs = nframes * groups;
  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
  for (long long p0 = ((long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * 32; p0 < pairs;
       p0 += warps * 32) {
    const long long p = p0 + lane;
    unsigned walk = __ballot_sync(0xFFFFFFFFu, p < pairs && counts[p] != static_flag[p]);
    while (walk) {
      const long long q = p0 + __ffs(walk) - 1;
      walk &= walk - 1;
      const long long f = q / groups;
      visit(f, q - f * groups, lane);
    }
  }
}

/* 2 with the counts (step 1 counted static_flag): a unit whose group's
 * counts agree holds no such pixel and is not read (V divides the group
 * size, so a unit lies in one group); the warp walks each group that
 * disagrees, its lanes over the group's units. */
template <typename T, int V>
__global__ void __launch_bounds__(256)
    sl_k_flag_scan_groups(const T *__restrict__ x, long long nframes, int h, int w,
                          const uint8_t *__restrict__ bad, int median, T *__restrict__ shadow,
                          uint32_t *__restrict__ bits, const uint32_t *__restrict__ counts,
                          const uint32_t *__restrict__ static_flag) {
  static_assert(SL_FLAG_GROUP_PIXELS % V == 0, "a unit lies in one flag group");
  const long long item = (long long)h * w, units = item / V;
  const long long per_group = SL_FLAG_GROUP_PIXELS / V;
  walk_disagreeing(nframes, item, counts, static_flag, [&](long long f, long long g, int lane) {
    const long long u1 = (g + 1) * per_group < units ? (g + 1) * per_group : units;
    for (long long u = g * per_group + lane; u < u1; u += 32) flag_unit<T, V>(x, f, u, h, w, bad, median, shadow, bits);
  });
}

/* 3a. Writes the static corrections (one thread per (frame, bad pixel)). */
template <typename T>
__global__ void sl_k_static_write(T *__restrict__ y, long long nframes, long long item,
                                  const int32_t *__restrict__ list, long long n_bad,
                                  const uint32_t *__restrict__ vals) {
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < nframes * n_bad;
       t += (long long)gridDim.x * blockDim.x) {
    long long f = t / n_bad;
    y[f * item + list[t - f * n_bad]] = (T)vals[t];
  }
}

/* 3b. Writes the flagged corrections of 32-pixel word wd of frame f and
 * clears the word. */
template <typename T>
__device__ __forceinline__ void write_word(T *__restrict__ y, long long f, long long wd, long long item,
                                           const T *__restrict__ shadow, uint32_t *__restrict__ bits) {
  const long long t = f * ((item + 31) / 32) + wd;
  uint32_t m = bits[t];
  if (!m) return;
  bits[t] = 0;
  const long long base = f * item + wd * 32;
  while (m) {
    int k = __ffs(m) - 1;
    m &= m - 1;
    y[base + k] = shadow[base + k];
  }
}

/* 3b without the counts: every word of every frame (grid-stride). */
template <typename T>
__global__ void sl_k_flag_write(T *__restrict__ y, long long nframes, long long item,
                                const T *__restrict__ shadow, uint32_t *__restrict__ bits) {
  const long long words = (item + 31) / 32;
  for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < nframes * words;
       t += (long long)gridDim.x * blockDim.x) {
    long long f = t / words;
    write_word<T>(y, f, t - f * words, item, shadow, bits);
  }
}

/* 3b with the counts: the words of the groups the scan walked (a group's
 * 32 words, a lane each), written and cleared. */
template <typename T>
__global__ void __launch_bounds__(256)
    sl_k_flag_write_groups(T *__restrict__ y, long long nframes, long long item, const T *__restrict__ shadow,
                           uint32_t *__restrict__ bits, const uint32_t *__restrict__ counts,
                           const uint32_t *__restrict__ static_flag) {
  static_assert(SL_FLAG_GROUP_PIXELS == 32 * 32, "a group's words are a warp's lanes");
  const long long words = (item + 31) / 32;
  walk_disagreeing(nframes, item, counts, static_flag, [&](long long f, long long g, int lane) {
    const long long wd = g * 32 + lane;
    if (wd < words) write_word<T>(y, f, wd, item, shadow, bits);
  });
}

#define ENTRY SL_CUDA_KERNEL_ENTRY
#define PER_TYPE(S, T)                                                      \
  ENTRY("static_bad_map_" S, sl_k_static_bad_map<T>),                       \
  ENTRY("mask_static_fix_" S, sl_k_static_fix<T>),                          \
  ENTRY("mask_flag_scan_" S, (sl_k_flag_scan<T, 1>)),                       \
  ENTRY("mask_flag_scan_" S "x16B", (sl_k_flag_scan<T, 16 / sizeof(T)>)),   \
  ENTRY("mask_static_write_" S, sl_k_static_write<T>),                      \
  ENTRY("mask_flag_write_" S, sl_k_flag_write<T>),                         \
  ENTRY("mask_flag_scan_groups_" S, (sl_k_flag_scan_groups<T, 1>)),         \
  ENTRY("mask_flag_scan_groups_" S "x16B", (sl_k_flag_scan_groups<T, 16 / sizeof(T)>)), \
  ENTRY("mask_flag_write_groups_" S, sl_k_flag_write_groups<T>)
static const sl_device_kernel mask_correct_kernels[] = {
    ENTRY("mask_bad_list", sl_k_bad_list),
    PER_TYPE("u8", uint8_t),
    PER_TYPE("u16", uint16_t),
    PER_TYPE("u32", uint32_t),
};
#undef PER_TYPE
#undef ENTRY
SL_CUDA_REGISTER_KERNELS(mask_correct_kernels, "mask_correct")

/* ---- launcher -------------------------------------------------------------------- */

static void mask_state_release(void *p) { free(p); }

/* The static bad map and list of the first call (the list's length is read
 * back once: it sizes the per-chunk launches). The file mask goes up into
 * the map's place and the map kernel ORs the mask input into it. */
static sl_code build_bad_map(const sl_cuda_mask_correct_params *p, sl_kernel_args *a, mask_device_state *s,
                             int64_t npix) {
  cudaStream_t st = sl_cuda_queue(a);
  if (p->has_mask && !a->in[1])
    return sl_fail(a->err, SL_ERR_INTERNAL, "mask_correct: input 'mask' is connected but has no data");
  const uint8_t *fm = p->file_mask;
  uint8_t *bad = s->at.bad;
  unsigned long long count = 0;
  cudaError_t e = cudaMemsetAsync(s->at.count, 0, sizeof count, st);
  /* pageable source: the copy completes before cudaMemcpyAsync returns */
  if (e == cudaSuccess && fm) e = cudaMemcpyAsync(bad, fm, (size_t)npix, cudaMemcpyHostToDevice, st);
  if (e != cudaSuccess) return sl_cuda_runtime_fail(a, e, k_node, "static mask");
  const uint8_t *file = fm ? bad : NULL; /* each thread reads its pixel, then writes it */
  unsigned g = (unsigned)((npix + 255) / 256);
  const void *m = p->has_mask ? a->in[1] : NULL;
  switch (p->has_mask ? p->mask_dtype : SL_U8) {
    case SL_U16: sl_k_static_bad_map<uint16_t><<<g, 256, 0, st>>>((const uint16_t *)m, file, bad, npix); break;
    case SL_U32: sl_k_static_bad_map<uint32_t><<<g, 256, 0, st>>>((const uint32_t *)m, file, bad, npix); break;
    default: sl_k_static_bad_map<uint8_t><<<g, 256, 0, st>>>((const uint8_t *)m, file, bad, npix); break;
  }
  sl_code rc = sl_cuda_check_launch(a, "sl_k_static_bad_map");
  if (rc == SL_OK) {
    sl_k_bad_list<<<g, 256, 0, st>>>(bad, npix, s->at.bad_list, s->at.count);
    rc = sl_cuda_check_launch(a, "sl_k_bad_list");
  }
  if (rc == SL_OK)
    rc = sl_cuda_runtime_fail(a, cudaMemcpyAsync(&count, s->at.count, sizeof count, cudaMemcpyDeviceToHost, st),
                              k_node, "bad-pixel count");
  if (rc == SL_OK) rc = sl_cuda_wait(a);
  s->n_bad = (int64_t)count;
  return rc;
}

/* The state, with the static map built on the first call. */
static sl_code mask_state_get(const sl_cuda_mask_correct_params *p, sl_kernel_args *a, int64_t npix, size_t es,
                              mask_device_state **out) {
  mask_device_state *s = (mask_device_state *)*p->device_state.state;
  if (s) {
    *out = s;
    return SL_OK;
  }
  sl_table t = sl_table_lent(a);
  mask_pieces at;
  mask_layout(&t, npix, (int64_t)es, p->flagged, p->has_counts, 0, 0, &at); /* the static part */
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc != SL_OK) return rc;
  s = (mask_device_state *)calloc(1, sizeof *s);
  if (!s) return sl_fail(a->err, SL_ERR_NOMEM, "out of memory for device state");
  s->at = at;
  s->bits_zero_frames = INT64_MAX;
  if ((rc = build_bad_map(p, a, s, npix)) != SL_OK) {
    free(s);
    return rc;
  }
  *p->device_state.state = s;
  *p->device_state.release = mask_state_release;
  *out = s;
  return SL_OK;
}

/* This call's pieces for `positions` frames; with `flagged`, the words of
 * the bit set a smaller call before it may have left dirty are cleared. */
static sl_code chunk_pieces(const sl_cuda_mask_correct_params *p, sl_kernel_args *a, mask_device_state *s,
                            int64_t positions, int64_t npix, size_t es) {
  sl_table t = sl_table_lent(a);
  mask_layout(&t, npix, (int64_t)es, p->flagged, p->has_counts, positions, s->n_bad, &s->at);
  sl_code rc = sl_table_check(&t, a, k_node);
  if (rc == SL_OK && s->at.static_flag) /* counted afresh by step 1 of this call */
    rc = sl_cuda_runtime_fail(a,
                              cudaMemsetAsync(s->at.static_flag, 0,
                                              (size_t)(positions * sl_flag_groups(npix)) * sizeof(uint32_t),
                                              sl_cuda_queue(a)),
                              k_node, "static flag counts");
  if (rc != SL_OK || !p->flagged) return rc;
  const int64_t words = (npix + 31) / 32;
  if (positions > s->bits_zero_frames) {
    const int64_t from = s->bits_zero_frames * words;
    rc = sl_cuda_runtime_fail(a,
                              cudaMemsetAsync(s->at.bits + from, 0,
                                              (size_t)(positions * words - from) * sizeof(uint32_t),
                                              sl_cuda_queue(a)),
                              k_node, "flag bits");
  }
  s->bits_zero_frames = positions;
  return rc;
}

/* Steps 1-3 of the file comment on the frames at y (pos_count of them). */
template <typename T>
static sl_code correct_in_place(const sl_cuda_mask_correct_params *p, sl_kernel_args *a,
                                const mask_device_state *s, T *y, int v) {
  const mask_pieces *at = &s->at;
  cudaStream_t st = sl_cuda_queue(a);
  const int h = (int)p->frames.height, w = (int)p->frames.width;
  const int64_t n = a->pos_count, item = (int64_t)h * w;
  const int median = p->policy == SL_CUDA_MASK_MEDIAN;
  sl_code rc = SL_OK;
  if (s->n_bad > 0) {
    sl_k_static_fix<T><<<sl_cuda_stride_grid(a, n * s->n_bad, 16), 256, 0, st>>>(y, n, h, w, at->bad, at->bad_list, s->n_bad,
                                                                  median, p->flagged, at->vals, at->static_flag);
    if ((rc = sl_cuda_check_launch(a, "sl_k_static_fix"))) return rc;
  }
  const uint32_t *counts = p->flagged && at->static_flag ? (const uint32_t *)a->in[2] : NULL;
  const long long pair_threads = n * sl_flag_groups(item);
  if (counts) {
    constexpr int VV = (int)(16 / sizeof(T));
    if (v > 1)
      sl_k_flag_scan_groups<T, VV><<<sl_cuda_stride_grid(a, pair_threads, 16), 256, 0, st>>>(
          y, n, h, w, at->bad, median, (T *)at->shadow, at->bits, counts, at->static_flag);
    else
      sl_k_flag_scan_groups<T, 1><<<sl_cuda_stride_grid(a, pair_threads, 16), 256, 0, st>>>(
          y, n, h, w, at->bad, median, (T *)at->shadow, at->bits, counts, at->static_flag);
    if ((rc = sl_cuda_check_launch(a, "sl_k_flag_scan_groups"))) return rc;
  } else if (p->flagged) {
    constexpr int VV = (int)(16 / sizeof(T));
    if (v > 1)
      sl_k_flag_scan<T, VV><<<sl_cuda_stride_grid(a, n * item / VV, 16), 256, 0, st>>>(y, n, h, w, at->bad, median,
                                                                           (T *)at->shadow, at->bits);
    else
      sl_k_flag_scan<T, 1><<<sl_cuda_stride_grid(a, n * item, 16), 256, 0, st>>>(y, n, h, w, at->bad, median, (T *)at->shadow,
                                                                    at->bits);
    if ((rc = sl_cuda_check_launch(a, "sl_k_flag_scan"))) return rc;
  }
  if (s->n_bad > 0) {
    sl_k_static_write<T><<<sl_cuda_stride_grid(a, n * s->n_bad, 16), 256, 0, st>>>(y, n, item, at->bad_list, s->n_bad, at->vals);
    if ((rc = sl_cuda_check_launch(a, "sl_k_static_write"))) return rc;
  }
  if (counts) {
    sl_k_flag_write_groups<T><<<sl_cuda_stride_grid(a, pair_threads, 16), 256, 0, st>>>(
        y, n, item, (const T *)at->shadow, at->bits, counts, at->static_flag);
    rc = sl_cuda_check_launch(a, "sl_k_flag_write_groups");
  } else if (p->flagged) {
    sl_k_flag_write<T><<<sl_cuda_stride_grid(a, n * ((item + 31) / 32), 16), 256, 0, st>>>(y, n, item, (const T *)at->shadow,
                                                                             at->bits);
    rc = sl_cuda_check_launch(a, "sl_k_flag_write");
  }
  return rc;
}

extern "C" sl_code sl_cuda_mask_correct(const sl_cuda_mask_correct_params *p, sl_kernel_args *a) {
  const int64_t h = p->frames.height, w = p->frames.width, npix = h * w;
  const size_t es = sl_dtype_size(p->frames.dtype);
  cudaStream_t st = sl_cuda_queue(a);
  if (npix > 0x7FFFFFFF) return sl_fail(a->err, SL_ERR_FORMAT, "detector frames above 2^31 pixels");
  if (a->out[0] != a->in[0]) { /* a buffer of its own: copy, then correct there */
    sl_code rc = sl_cuda_runtime_fail(a,
                                      cudaMemcpyAsync(a->out[0], a->in[0], (size_t)(a->pos_count * npix) * es,
                                                      cudaMemcpyDeviceToDevice, st),
                                      k_node, "copy");
    if (rc != SL_OK) return rc;
  }
  if (p->policy == SL_CUDA_MASK_NONE) return SL_OK;
  mask_device_state *s = NULL;
  sl_code rc;
  if ((rc = mask_state_get(p, a, npix, es, &s))) return rc;
  if (a->pos_count <= 0) return SL_OK;
  if ((rc = chunk_pieces(p, a, s, a->pos_count, npix, es))) return rc;
  int v = frame_unit_width(a->out[0], w, es);
  switch (p->frames.dtype) {
    case SL_U8: return correct_in_place<uint8_t>(p, a, s, (uint8_t *)a->out[0], v);
    case SL_U16: return correct_in_place<uint16_t>(p, a, s, (uint16_t *)a->out[0], v);
    default: return correct_in_place<uint32_t>(p, a, s, (uint32_t *)a->out[0], v);
  }
}
