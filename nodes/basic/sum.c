/* sum: the sum over scan positions of a streamed tensor, item-shaped: a
 * reduction that accumulates across chunks. Unsigned integers sum exactly in
 * u64 (a declared SUM, which the kernel folds into the run's accumulator:
 * fold_outputs; small totals through each worker's partial kept for the
 * pass), floats in f64, each element adding its positions in scan order in
 * the kernel (no declared combine). */
#include <stdint.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"
#include "nodes/common/madd_u16.h"
#include "shaders/cuda/basic/sum.h"

static sl_code sum_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: sum adds over scan positions");
  sl_tensor_desc *d = &n->out[0];
  memset(d, 0, sizeof *d);
  switch (x->dtype) {
    case SL_U8: case SL_U16: case SL_U32: case SL_U64: d->dtype = SL_U64; break;
    case SL_F32: case SL_F64: d->dtype = SL_F64; break;
    default: return sl_basic_input_error(err, "x", "unsigned or float data", x);
  }
  d->rank = x->rank - x->stream_rank;
  for (int i = 0; i < d->rank; i++) d->dims[i] = x->dims[x->stream_rank + i];
  if (d->rank == 0) d->rank = 1, d->dims[0] = 1;
  return SL_OK;
}

static void sum_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]);
  c->ops = positions * sl_desc_item_elems(&n->in[0]);
}

/* Adds positions [p0, p1) of elements [e0, e1) of x (a chunk of items of
 * `item` elements, input dtype t) into y[e0, e1): u64 for integers, f64 for
 * floats. Each element adds its positions in scan order (floats are
 * bit-identical to a plain loop). The range is cut into blocks whose
 * accumulators stay in L1; each block streams its slice of every position,
 * four positions per sweep of y so y is loaded and stored a quarter as
 * often, and x is read in runs of up to SUM_BLOCK elements. u8 and u16
 * positions go into u32 sums of the block first (exact for up to
 * UINT32_MAX / max positions), added into y after each group of
 * positions: a widening add to 32 bits holds twice the elements of one to
 * 64 (mean_pattern's sum of 16,384 frames of 192 x 192 u16 took 0.12 s at
 * 1 thread, 57% on top of reading and decoding them). Built for AVX2 and
 * AVX-512 too (SL_HOT_CLONES_512): the baseline's SSE2 has no widening
 * load, and 32-lane widening adds took 26 ms where 16-lane ones took 38. */
#define SUM_BLOCK 1024
SL_HOT_CLONES_512 static void sum_fold(sl_dtype t, const void *x_, int64_t item, void *y_, int64_t p0,
                                   int64_t p1, int64_t e0, int64_t e1) {
  switch (t) {
#define SUM_NARROW_CASE(T, TMAX)                                                       \
  {                                                                                    \
    const T *restrict x = x_;                                                          \
    uint64_t *restrict y = y_;                                                         \
    const int64_t group_max = (int64_t)(UINT32_MAX / (TMAX));                          \
    uint32_t acc[SUM_BLOCK];                                                           \
    for (int64_t b = e0; b < e1; b += SUM_BLOCK) {                                     \
      int64_t n = e1 - b < SUM_BLOCK ? e1 - b : SUM_BLOCK;                             \
      for (int64_t g0 = p0; g0 < p1; g0 += group_max) {                                \
        int64_t g1 = p1 - g0 < group_max ? p1 : g0 + group_max, p = g0;                \
        memset(acc, 0, (size_t)n * sizeof acc[0]);                                     \
        for (; p + 4 <= g1; p += 4) {                                                  \
          const T *restrict q0 = x + p * item + b, *restrict q1 = q0 + item;           \
          const T *restrict q2 = q1 + item, *restrict q3 = q2 + item;                  \
          for (int64_t e = 0; e < n; e++)                                              \
            acc[e] += ((uint32_t)q0[e] + q1[e]) + ((uint32_t)q2[e] + q3[e]);           \
        }                                                                              \
        for (; p < g1; p++) {                                                          \
          const T *restrict q = x + p * item + b;                                      \
          for (int64_t e = 0; e < n; e++) acc[e] += q[e];                              \
        }                                                                              \
        for (int64_t e = 0; e < n; e++) y[b + e] += acc[e];                            \
      }                                                                                \
    }                                                                                  \
    break;                                                                             \
  }
#define SUM_CASE(T, ACC)                                                         \
  {                                                                              \
    const T *restrict x = x_;                                                    \
    ACC *restrict y = y_;                                                        \
    for (int64_t b = e0; b < e1; b += SUM_BLOCK) {                               \
      int64_t n = e1 - b < SUM_BLOCK ? e1 - b : SUM_BLOCK;                       \
      ACC *restrict yb = y + b;                                                  \
      int64_t p = p0;                                                            \
      for (; p + 4 <= p1; p += 4) {                                              \
        const T *restrict q0 = x + p * item + b, *restrict q1 = q0 + item;       \
        const T *restrict q2 = q1 + item, *restrict q3 = q2 + item;              \
        for (int64_t e = 0; e < n; e++)                                          \
          yb[e] = (((yb[e] + (ACC)q0[e]) + (ACC)q1[e]) + (ACC)q2[e]) + (ACC)q3[e]; \
      }                                                                          \
      for (; p < p1; p++) {                                                      \
        const T *restrict q = x + p * item + b;                                  \
        for (int64_t e = 0; e < n; e++) yb[e] += (ACC)q[e];                      \
      }                                                                          \
    }                                                                            \
    break;                                                                       \
  }
    case SL_U8: SUM_NARROW_CASE(uint8_t, 0xFFu)
    case SL_U16: SUM_NARROW_CASE(uint16_t, 0xFFFFu)
    case SL_U32: SUM_CASE(uint32_t, uint64_t)
    case SL_U64: SUM_CASE(uint64_t, uint64_t)
    case SL_F32: SUM_CASE(float, double)
    case SL_F64: SUM_CASE(double, double)
#undef SUM_CASE
#undef SUM_NARROW_CASE
    default: break;
  }
}

#if SL_MADD_X86
/* u16 positions into y[e0, e1) (a multiple of 256 elements) on AVX-512 (where
 * sl_madd_avx512_used): 256 elements a tile, their sixteen u32 sums held in
 * registers over every position of a group (at most 65,537 positions: exact
 * in u32), then added into y. Over 14 frames of 192 x 192 in L2 it took
 * 1.1-1.4 us a frame where sum_fold, four positions a sweep of its
 * accumulator in L1, took 1.8 (a harness of both). It runs over a worker's
 * own frames (sum_positions): over every frame of a chunk (sum_tiles, half
 * of them in the other core's cache at 2 threads) it was slower than
 * sum_fold, 24.5 ms against 21.8 for mean_pattern's sum. */
#define SUM_REG_TILE 256
SL_MADD_AVX512 static void sum_u16_tiles512(const uint16_t *x, int64_t item, uint64_t *y, int64_t p0,
                                            int64_t p1, int64_t e0, int64_t e1) {
  const int64_t group_max = (int64_t)(UINT32_MAX / 0xFFFFu);
  for (int64_t b = e0; b + SUM_REG_TILE <= e1; b += SUM_REG_TILE)
    for (int64_t g0 = p0; g0 < p1; g0 += group_max) {
      const int64_t g1 = p1 - g0 < group_max ? p1 : g0 + group_max;
      __m512i acc[16];
      for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
      for (int64_t p = g0; p < g1; p++) {
        const uint16_t *q = x + p * item + b;
        for (int i = 0; i < 16; i++)
          acc[i] = _mm512_add_epi32(acc[i], _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(q + 16 * i))));
      }
      for (int i = 0; i < 16; i++) {
        uint64_t *d = y + b + 16 * i;
        const __m512i lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(acc[i]));
        const __m512i hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(acc[i], 1));
        _mm512_storeu_si512(d, _mm512_add_epi64(_mm512_loadu_si512(d), lo));
        _mm512_storeu_si512(d + 8, _mm512_add_epi64(_mm512_loadu_si512(d + 8), hi));
      }
    }
}
#endif

/* Positions [p0, p1) of every element into y (a worker's partial): u16 on
 * the AVX-512 path where it runs, the rest by sum_fold. */
static void sum_all_elements(sl_dtype t, const void *x, int64_t item, uint64_t *y, int64_t p0, int64_t p1) {
  int64_t e0 = 0;
#if SL_MADD_X86
  if (t == SL_U16 && sl_madd_avx512_used()) {
    e0 = item / SUM_REG_TILE * SUM_REG_TILE;
    sum_u16_tiles512(x, item, y, p0, p1, 0, e0);
  }
#endif
  if (e0 < item) sum_fold(t, x, item, y, p0, p1, e0, item);
}

static bool is_integer(sl_dtype t) { return t == SL_U8 || t == SL_U16 || t == SL_U32 || t == SL_U64; }

/* Integer sums are exact in any order, so the executor merges them (across
 * workers, devices and ranks): the kernel folds its chunk into out[0], the
 * run's accumulator (fold_outputs), each tile of positions and elements
 * into its own elements, or into each worker's partial
 * (sum_worker_partials_of). Float sums add every position in scan order, which no merge of
 * partials gives back: the kernel keeps them in the whole output itself. */
static sl_combine sum_combine_of(const sl_node *n, int port) {
  return port == 0 && is_integer(n->in[0].dtype) ? SL_COMBINE_SUM : SL_COMBINE_NONE;
}

/* Where a worker's u64 partial of the total is at most this (half a core's
 * L2 on the dev VM; 192 x 192 frames: 295 KB), each worker sums the
 * positions parallel_for gives it into a partial kept for the pass
 * (SL_WORKER_PARTIALS_PASS): the positions the decoder and the mask gave
 * the same worker, so their frames are in its core's cache, where summing
 * tiles of elements over every position read half of each chunk's frames
 * from the other core's (mean_pattern's sum at 2 threads: 12.5 ms against
 * 20.5-21.5). Larger items keep the tiles: a partial per worker of a
 * 4 Mpixel detector's u64 sums would be 36 MB. */
#define SUM_PASS_PARTIAL_MAX ((int64_t)1 << 20)
static sl_worker_partials sum_worker_partials_of(const sl_node *n, int port) {
  return port == 0 && is_integer(n->in[0].dtype) && sl_desc_bytes(&n->out[0]) <= SUM_PASS_PARTIAL_MAX
             ? SL_WORKER_PARTIALS_PASS
             : SL_WORKER_PARTIALS_NONE;
}

typedef struct sum_job {
  const sl_kernel_args *a;
  sl_dtype t;
  int64_t item;
  /* The integer sum's tiles: positions [p0, p1) of the chunk times blocks
   * of `tile` elements. */
  int64_t p0, p1, tile;
} sum_job;

/* Elements split among the workers, each summing all the chunk's positions
 * into out[0] (floats: the run's total, in scan order). */
static void sum_elements(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  (void)worker;
  sum_fold(j->t, j->a->in[0], j->item, j->a->out[0], 0, j->a->pos_count, begin, end);
}

/* A worker's positions into its partial (sum_worker_partials_of). */
static void sum_positions(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  sum_all_elements(j->t, j->a->in[0], j->item, sl_worker_partial(j->a, 0, worker), begin, end);
}

/* Element blocks split among the workers, each adding its positions into
 * its blocks of out[0]: no two tiles of a call share an element, so no
 * worker needs a partial of its own (per worker and chunk, the executor
 * zeroed and merged a whole item: 295 KB each for 192 x 192 frames, a
 * fifth of what the chunk's frames are). */
static void sum_tiles(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  (void)worker;
  for (int64_t t = begin; t < end; t++) {
    int64_t e0 = t * j->tile, e1 = e0 + j->tile < j->item ? e0 + j->tile : j->item;
    sum_fold(j->t, j->a->in[0], j->item, j->a->out[0], j->p0, j->p1, e0, e1);
  }
}

/* The item is cut into about four blocks a worker (SUM_TILE_MIN..SUM_TILE
 * elements, a multiple of SUM_TILE_MIN), each summing a group of positions;
 * where the blocks are still too few for the workers (short items), the
 * chunk's positions are cut into groups, one after the other. With
 * 4096-element blocks and positions split to make up four tiles a worker,
 * 16 workers took 2 of a 14-frame chunk's positions a tile for 192 x 192
 * frames: each 16 KB read moved 64 KB of partial, and mean_pattern's sum ran
 * at 3.1x its estimate on the H200's host (0.036 s for 4096 frames). */
#define SUM_TILE 4096
#define SUM_TILE_MIN 512
static sl_code sum_cpu(sl_kernel_args *a) {
  sl_backend *b = a->backend;
  sum_job j = {a, a->node->in[0].dtype, sl_desc_item_elems(&a->node->in[0]), 0, 0, 0};
  if (!is_integer(j.t) || a->pos_count <= 0) {
    b->ops->parallel_for(b, j.item, SUM_TILE, sum_elements, &j);
    return SL_OK;
  }
  const int64_t workers = b->ops->workers(b) > 0 ? b->ops->workers(b) : 1, npos = a->pos_count;
  if (a->worker_partial[0]) {
    /* one range a worker: each range adds its sums into the partial once */
    b->ops->parallel_for(b, npos, (npos + workers - 1) / workers, sum_positions, &j);
    return SL_OK;
  }
  j.tile = j.item / (4 * workers) / SUM_TILE_MIN * SUM_TILE_MIN;
  if (j.tile < SUM_TILE_MIN) j.tile = SUM_TILE_MIN;
  if (j.tile > SUM_TILE) j.tile = SUM_TILE;
  const int64_t blocks = (j.item + j.tile - 1) / j.tile;
  int64_t groups = (4 * workers + blocks - 1) / blocks;
  if (groups > npos) groups = npos;
  if (groups < 1) groups = 1;
  const int64_t group = (npos + groups - 1) / groups;
  for (j.p0 = 0; j.p0 < npos; j.p0 += group) {
    j.p1 = j.p0 + group < npos ? j.p0 + group : npos;
    b->ops->parallel_for(b, blocks, 1, sum_tiles, &j);
  }
  return SL_OK;
}

static const sl_port_def sum_in[] = {{"x", "streamed tensor", NULL, false}};
static const sl_port_def sum_out[] = {
    {"total", "sum over all scan positions, item-shaped (u64 for integers, f64 for floats)",
     SL_UNIT_OF_INPUT, false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code sum_cuda(sl_kernel_args *a) {
  const sl_tensor_desc *x = &a->node->in[0];
  const sl_cuda_sum_params p = {.dtype = x->dtype, .item_elems = sl_desc_item_elems(x)};
  return sl_cuda_sum(&p, a);
}
#endif

const sl_node_desc sl_node_sum = {
    .type = "sum",
    .doc = "Sum over scan positions: a reduction that accumulates across chunks.",
    .inputs = sum_in, .n_inputs = SL_COUNT_OF(sum_in),
    .outputs = sum_out, .n_outputs = SL_COUNT_OF(sum_out),
    .infer = sum_infer, .cost = sum_cost,
    .kernel = {[SL_BACKEND_CPU] = sum_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(sum_cuda)},
    .combine_of = sum_combine_of,
    .worker_partials_of = sum_worker_partials_of,
    /* integers: the CPU tiles add into out[0], the CUDA blocks atomicAdd */
    .fold_outputs = 1u,
};
