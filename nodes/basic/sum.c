/* sum: the sum over scan positions of a streamed tensor, item-shaped: a
 * reduction that accumulates across chunks. Unsigned integers sum exactly in
 * u64 (a declared SUM: the executor merges the chunks' and the workers'
 * partials), floats in f64, each element adding its positions in scan order
 * in the kernel (no declared combine). */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"
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
 * often, and x is read in runs of up to SUM_BLOCK elements. */
#define SUM_BLOCK 1024
static void sum_fold(sl_dtype t, const void *x_, int64_t item, void *y_, int64_t p0, int64_t p1,
                     int64_t e0, int64_t e1) {
  switch (t) {
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
    case SL_U8: SUM_CASE(uint8_t, uint64_t)
    case SL_U16: SUM_CASE(uint16_t, uint64_t)
    case SL_U32: SUM_CASE(uint32_t, uint64_t)
    case SL_U64: SUM_CASE(uint64_t, uint64_t)
    case SL_F32: SUM_CASE(float, double)
    case SL_F64: SUM_CASE(double, double)
#undef SUM_CASE
    default: break;
  }
}

static bool is_integer(sl_dtype t) { return t == SL_U8 || t == SL_U16 || t == SL_U32 || t == SL_U64; }

/* Integer sums are exact in any order, so the executor merges them: the
 * kernel folds only its chunk, and each worker of parallel_for folds its
 * share into a partial of its own. Float sums add every position in scan
 * order, which no merge of partials gives back: the kernel keeps them in
 * the whole output itself. */
static sl_combine sum_combine_of(const sl_node *n, int port) {
  return port == 0 && is_integer(n->in[0].dtype) ? SL_COMBINE_SUM : SL_COMBINE_NONE;
}

typedef struct sum_job {
  const sl_kernel_args *a;
  sl_dtype t;
  int64_t item;
  /* Tiles of the integer sum: groups of `group` positions times blocks of
   * `tile` elements, element blocks fastest. */
  int64_t group, blocks, tile;
} sum_job;

/* Elements split among the workers, each summing all the chunk's positions
 * into out[0] (floats: the run's total, in scan order). */
static void sum_elements(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  (void)worker;
  sum_fold(j->t, j->a->in[0], j->item, j->a->out[0], 0, j->a->pos_count, begin, end);
}

/* Tiles split among the workers, each adding into its own partial. A tile
 * reads its positions' slices and reads and writes its slice of the u64
 * partial, so it should hold many positions: the item is cut into blocks
 * first (down to SUM_TILE_MIN elements, about four a worker), and positions
 * are split only when the blocks are still too few (short items). With
 * 4096-element blocks and positions split to make up four tiles a worker,
 * 16 workers took 2 of a 14-frame chunk's positions a tile for 192 x 192
 * frames: each 16 KB read moved 64 KB of partial, and mean_pattern's sum ran
 * at 3.1x its estimate on the H200's host (0.036 s for 4096 frames). */
#define SUM_TILE 4096
#define SUM_TILE_MIN 512
static void sum_tiles(void *ctx, int64_t begin, int64_t end, int worker) {
  const sum_job *j = ctx;
  void *y = sl_worker_partial(j->a, 0, worker);
  for (int64_t t = begin; t < end; t++) {
    int64_t p0 = t / j->blocks * j->group, e0 = t % j->blocks * j->tile;
    int64_t p1 = p0 + j->group < j->a->pos_count ? p0 + j->group : j->a->pos_count;
    int64_t e1 = e0 + j->tile < j->item ? e0 + j->tile : j->item;
    sum_fold(j->t, j->a->in[0], j->item, y, p0, p1, e0, e1);
  }
}

static sl_code sum_cpu(sl_kernel_args *a) {
  sl_backend *b = a->backend;
  sum_job j = {a, a->node->in[0].dtype, sl_desc_item_elems(&a->node->in[0]), 0, 0, 0};
  if (!sl_worker_partial(a, 0, 0) || a->pos_count <= 0) {
    b->ops->parallel_for(b, j.item, SUM_TILE, sum_elements, &j);
    return SL_OK;
  }
  /* About four tiles per worker: element blocks of SUM_TILE_MIN..SUM_TILE
   * (a multiple of SUM_TILE_MIN), then as many position groups as that
   * still needs. */
  int64_t workers = b->ops->workers(b), npos = a->pos_count;
  j.tile = j.item / (4 * workers) / SUM_TILE_MIN * SUM_TILE_MIN;
  if (j.tile < SUM_TILE_MIN) j.tile = SUM_TILE_MIN;
  if (j.tile > SUM_TILE) j.tile = SUM_TILE;
  j.blocks = (j.item + j.tile - 1) / j.tile;
  int64_t groups = (4 * workers + j.blocks - 1) / j.blocks;
  if (groups > npos) groups = npos;
  if (groups < 1) groups = 1;
  j.group = (npos + groups - 1) / groups;
  groups = (npos + j.group - 1) / j.group;
  b->ops->parallel_for(b, groups * j.blocks, 1, sum_tiles, &j);
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
    .worker_partial_outputs = 1u,
};
