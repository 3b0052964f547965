/* sum: the sum over scan positions of a streamed tensor, item-shaped: a
 * reduction that accumulates across chunks, a declared SUM that the kernel
 * folds into the run's accumulator (fold_outputs). Unsigned integers sum
 * exactly in u64 (small totals through each worker's partial kept for the
 * pass), floats in f64, each element adding its positions in scan order
 * into the accumulator (no partials per worker: their grouping would
 * change the bits). */
#include <stdint.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"
#include "nodes/common/positions_sum.h"
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

static bool is_integer(sl_dtype t) { return t == SL_U8 || t == SL_U16 || t == SL_U32 || t == SL_U64; }

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
  sl_positions_fold(j->t, j->a->in[0], j->item, j->a->out[0], 0, j->a->pos_count, begin, end);
}

/* A worker's positions into its partial (sum_worker_partials_of). */
static void sum_positions(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  sl_positions_sum(j->t, j->a->in[0], j->item, sl_worker_partial(j->a, 0, worker), begin, end);
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
    sl_positions_fold(j->t, j->a->in[0], j->item, j->a->out[0], j->p0, j->p1, e0, e1);
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
    /* A SUM for every dtype: the kernel folds its chunk into out[0], the
     * run's accumulator. Integer sums are exact in any order, so they also
     * go through each worker's partial (sum_worker_partials_of) and merge
     * across devices and ranks to the same bits. Float sums add every
     * position in scan order into the accumulator; merged across devices or
     * ranks they round as that grouping does (the graph lends floats no
     * worker partials). */
    .combine = {SL_COMBINE_SUM},
    .worker_partials_of = sum_worker_partials_of,
    /* integers: the CPU tiles add into out[0], the CUDA blocks atomicAdd;
     * floats: each element adds its positions in scan order */
    .fold_outputs = 1u,
};
