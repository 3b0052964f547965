/* variance: per element of a streamed tensor's item, the count, mean and
 * variance over the scan positions, and the variance over the squared mean
 * (fluctuation electron microscopy's normalized variance V(k) of a
 * diffraction pattern: 1 / mean for pure shot noise). A reduction the
 * executor merges with the node's own merge (SL_COMBINE_MERGE): each chunk
 * writes its count, mean and sum of squared deviations from its mean (two
 * passes over the chunk's positions, which stay in cache), and merge()
 * folds that partial into the run's by Chan, Golub and LeVeque's formula,
 * which keeps the precision that a running sum of squares loses when the
 * mean is large against the spread. finalize() turns the merged moments
 * into the mean, the variance and the normalized variance. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "nodes/basic/tensor_helpers.h"
#include "shaders/cuda/basic/variance.h"

#define VARIANCE_PARAMS(P)                                                                          \
  P(INT, ddof, "0",                                                                                 \
    "delta degrees of freedom: the variance divides by count - ddof (0: of the scan's values, "     \
    "1: the unbiased estimate of a population's); 0 or 1",                                          \
    NULL)
SL_NODE_PARAMS(variance_params, VARIANCE_PARAMS)

/* Output ports, in order. */
enum { VAR_MOMENTS, VAR_MEAN, VAR_VARIANCE, VAR_NORMALIZED };

static bool summable(sl_dtype t) {
  return t == SL_U8 || t == SL_U16 || t == SL_U32 || t == SL_U64 || t == SL_I32 || t == SL_I64 ||
         t == SL_F32 || t == SL_F64;
}

static sl_code variance_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  int64_t ddof = variance_params_of(n)->ddof;
  if (ddof != 0 && ddof != 1)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'ddof' must be 0 or 1, got %lld", (long long)ddof);
  if (x->stream_rank == 0)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' must be streamed: variance is over scan positions");
  if (!summable(x->dtype)) return sl_basic_input_error(err, "x", "integer or float data (not complex)", x);
  int64_t dims[SL_MAX_RANK + 1];
  int rank = x->rank - x->stream_rank;
  for (int i = 0; i < rank; i++) dims[i + 1] = x->dims[x->stream_rank + i];
  if (rank == 0) rank = 1, dims[1] = 1;
  if (rank + 1 > SL_MAX_RANK)
    return sl_fail(err, SL_ERR_PIPELINE, "input 'x' has %d item axes; variance keeps at most %d", rank,
                   SL_MAX_RANK - 1);
  dims[0] = 3;
  n->out[VAR_MOMENTS] = sl_desc_make(SL_F64, rank + 1, dims, 0);
  for (int k = VAR_MEAN; k <= VAR_NORMALIZED; k++) n->out[k] = sl_desc_make(SL_F64, rank, dims + 1, 0);
  return SL_OK;
}

static void variance_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const int64_t item = sl_desc_item_elems(&n->in[0]);
  /* two passes over the chunk (the second from cache), then the merge
   * reads the partial and the accumulator and writes the accumulator */
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]) + 2 * 3 * item * 8;
  c->bytes_written = 2 * 3 * item * 8;
  c->ops = positions * item * 4 + item * 8;
}

/* Elements per tile: a tile's partial moments (3 x 8 KB) and one position's
 * slice stay in L1 while the chunk's positions stream by. */
#define VAR_TILE 1024

typedef struct variance_job {
  const sl_kernel_args *a;
  sl_dtype t;
  int64_t item;
} variance_job;

/* Elements [e0, e0 + n) of position row `p` of x as doubles. */
static void load_doubles(sl_dtype t, const void *x, int64_t at, int64_t n, double *dst) {
#define VAR_LOAD(T)                                             \
  for (int64_t i = 0; i < n; i++) dst[i] = (double)((const T *)x)[at + i]; \
  break;
  switch (t) {
    case SL_U8: VAR_LOAD(uint8_t)
    case SL_U16: VAR_LOAD(uint16_t)
    case SL_U32: VAR_LOAD(uint32_t)
    case SL_U64: VAR_LOAD(uint64_t)
    case SL_I32: VAR_LOAD(int32_t)
    case SL_I64: VAR_LOAD(int64_t)
    case SL_F32: VAR_LOAD(float)
    case SL_F64: VAR_LOAD(double)
    default: memset(dst, 0, (size_t)n * sizeof *dst); break;
  }
#undef VAR_LOAD
}

/* Tiles [begin, end) of the item: the chunk's count, mean (sum, then one
 * division) and squared deviations from that mean, positions in scan order
 * (the CUDA kernel adds in the same order). */
static void variance_tiles(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const variance_job *j = ctx;
  const sl_kernel_args *a = j->a;
  double *cnt = a->out[VAR_MOMENTS], *mean = cnt + j->item, *m2 = mean + j->item;
  const int64_t npos = a->pos_count;
  double row[VAR_TILE];
  for (int64_t t = begin; t < end; t++) {
    const int64_t e0 = t * VAR_TILE, ne = e0 + VAR_TILE < j->item ? VAR_TILE : j->item - e0;
    double s[VAR_TILE] = {0}, q[VAR_TILE] = {0};
    for (int64_t p = 0; p < npos; p++) {
      load_doubles(j->t, a->in[0], p * j->item + e0, ne, row);
      for (int64_t e = 0; e < ne; e++) s[e] += row[e];
    }
    for (int64_t e = 0; e < ne; e++) s[e] /= (double)npos;
    for (int64_t p = 0; p < npos; p++) {
      load_doubles(j->t, a->in[0], p * j->item + e0, ne, row);
      for (int64_t e = 0; e < ne; e++) {
        const double d = row[e] - s[e];
        q[e] += d * d;
      }
    }
    for (int64_t e = 0; e < ne; e++) cnt[e0 + e] = (double)npos, mean[e0 + e] = s[e], m2[e0 + e] = q[e];
  }
}

/* u8 and u16 (detector counts): one pass of exact integer sums of the
 * values and their squares per element, then sl_variance_from_sums: exact
 * up to one rounding of each moment, and faster than the two passes (no
 * conversion to double, no second pass; vector clones chosen at load). The
 * one double sum of products it rounds (sl_variance_from_sums) gives the
 * same bits fused or not. */
#define VAR_EXACT_TILES(T)                                                          \
  SL_HOT_CLONES_512 static void variance_exact_tiles_##T(void *ctx, int64_t begin, int64_t end, int worker) { \
    (void)worker;                                                                   \
    const variance_job *j = ctx;                                                    \
    const sl_kernel_args *a = j->a;                                                 \
    double *cnt = a->out[VAR_MOMENTS], *mean = cnt + j->item, *m2 = mean + j->item; \
    const int64_t npos = a->pos_count;                                              \
    for (int64_t t = begin; t < end; t++) {                                         \
      const int64_t e0 = t * VAR_TILE, ne = e0 + VAR_TILE < j->item ? VAR_TILE : j->item - e0; \
      uint64_t s[VAR_TILE] = {0}, q[VAR_TILE] = {0};                                \
      for (int64_t p = 0; p < npos; p++) {                                          \
        const T *row = (const T *)a->in[0] + p * j->item + e0;                      \
        for (int64_t e = 0; e < ne; e++) {                                          \
          const uint32_t v = row[e];                                                \
          s[e] += v;                                                                \
          q[e] += v * v;                                                            \
        }                                                                           \
      }                                                                             \
      for (int64_t e = 0; e < ne; e++) {                                            \
        cnt[e0 + e] = (double)npos;                                                 \
        sl_variance_from_sums((uint64_t)npos, s[e], q[e], &mean[e0 + e], &m2[e0 + e]); \
      }                                                                             \
    }                                                                               \
  }
VAR_EXACT_TILES(uint8_t)
VAR_EXACT_TILES(uint16_t)
#undef VAR_EXACT_TILES

static sl_code variance_cpu(sl_kernel_args *a) {
  sl_backend *b = a->backend;
  variance_job j = {a, a->node->in[0].dtype, sl_desc_item_elems(&a->node->in[0])};
  if (a->pos_count <= 0) return SL_OK; /* the partial stays the identity: nothing seen */
  const sl_range_fn tiles = j.t == SL_U8    ? variance_exact_tiles_uint8_t
                           : j.t == SL_U16 ? variance_exact_tiles_uint16_t
                                           : variance_tiles;
  b->ops->parallel_for(b, (j.item + VAR_TILE - 1) / VAR_TILE, 1, tiles, &j);
  return SL_OK;
}

/* acc = acc merged with the chunk's partial: counts add; the mean moves by
 * the difference of the means weighted by the partial's share; the squared
 * deviations add, plus the difference's share (Chan et al. 1979). A side
 * with count 0 (the identity) leaves the other as it is. */
static void merge_elements(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const sl_kernel_args *a = ctx;
  const int64_t item = a->out_bytes[VAR_MOMENTS] / 24;
  double *n = a->out[VAR_MOMENTS], *mean = n + item, *m2 = mean + item;
  const double *pn = a->in[VAR_MOMENTS], *pmean = pn + item, *pm2 = pmean + item;
  for (int64_t e = begin; e < end; e++) {
    const double total = n[e] + pn[e];
    if (pn[e] == 0) continue;
    const double d = pmean[e] - mean[e], share = pn[e] / total;
    mean[e] = mean[e] + d * share;
    m2[e] = m2[e] + pm2[e] + d * d * n[e] * share;
    n[e] = total;
  }
}

static sl_code variance_merge_cpu(sl_kernel_args *a) {
  sl_backend *b = a->backend;
  b->ops->parallel_for(b, a->out_bytes[VAR_MOMENTS] / 24, 4096, merge_elements, a);
  return SL_OK;
}

/* The mean, the variance M2 / (count - ddof) (NaN where count <= ddof) and
 * the variance over the squared mean (0 where the mean is 0) of each
 * element; unread outputs are not written (omit_unread_outputs). */
static sl_code variance_finalize_cpu(sl_kernel_args *a) {
  const int64_t item = sl_desc_item_elems(&a->node->out[VAR_MEAN]);
  const double ddof = (double)variance_params_of(a->node)->ddof;
  const double *n = a->out[VAR_MOMENTS], *mean = n + item, *m2 = mean + item;
  double *om = a->out[VAR_MEAN], *ov = a->out[VAR_VARIANCE], *on = a->out[VAR_NORMALIZED];
  for (int64_t e = 0; e < item; e++) {
    const double var = n[e] > ddof ? m2[e] / (n[e] - ddof) : NAN;
    if (om) om[e] = mean[e];
    if (ov) ov[e] = var;
    if (on) on[e] = mean[e] != 0 ? var / (mean[e] * mean[e]) : 0;
  }
  return SL_OK;
}

#ifdef SLUICE_HAVE_CUDA
static sl_cuda_variance_params variance_cuda_params(const sl_kernel_args *a) {
  return (sl_cuda_variance_params){.dtype = a->node->in[0].dtype,
                                   .item_elems = sl_desc_item_elems(&a->node->in[0]),
                                   .ddof = (int)variance_params_of(a->node)->ddof};
}
static sl_code variance_cuda(sl_kernel_args *a) {
  const sl_cuda_variance_params p = variance_cuda_params(a);
  return sl_cuda_variance_chunk(&p, a);
}
static sl_code variance_merge_cuda(sl_kernel_args *a) {
  const sl_cuda_variance_params p = variance_cuda_params(a);
  return sl_cuda_variance_merge(&p, a);
}
static sl_code variance_finalize_cuda(sl_kernel_args *a) {
  const sl_cuda_variance_params p = variance_cuda_params(a);
  return sl_cuda_variance_finalize(&p, a);
}
#endif

static const sl_port_def variance_in[] = {{"x", "streamed tensor (integers or floats)", NULL, false}};
static const sl_port_def variance_out[] = {
    {"moments", "f64 [3, item...]: per element the count, the mean and the sum of squared deviations "
                "from the mean (merged across chunks by the node)",
     NULL, false},
    {"mean", "f64 [item...]: the mean over the scan", SL_UNIT_OF_INPUT, false},
    {"variance", "f64 [item...]: the sum of squared deviations over count - ddof", NULL, false},
    {"normalized", "f64 [item...]: variance / mean^2 (0 where the mean is 0): FEM's V(k)", NULL, false}};

const sl_node_desc sl_node_variance = {
    .type = "variance",
    .doc = "Mean and variance over scan positions of each element (FEM's normalized variance): "
           "chunks merged by Chan's formula.",
    SL_PARAMS_DESC(variance_params),
    .inputs = variance_in, .n_inputs = SL_COUNT_OF(variance_in),
    .outputs = variance_out, .n_outputs = SL_COUNT_OF(variance_out),
    .infer = variance_infer, .cost = variance_cost,
    .kernel = {[SL_BACKEND_CPU] = variance_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(variance_cuda)},
    .merge = {[SL_BACKEND_CPU] = variance_merge_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(variance_merge_cuda)},
    .finalize = {[SL_BACKEND_CPU] = variance_finalize_cpu,
                 [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(variance_finalize_cuda)},
    .combine = {SL_COMBINE_MERGE},
    .finalize_outputs = (1u << VAR_MEAN) | (1u << VAR_VARIANCE) | (1u << VAR_NORMALIZED),
    .omit_unread_outputs = (1u << VAR_MEAN) | (1u << VAR_VARIANCE) | (1u << VAR_NORMALIZED),
};
