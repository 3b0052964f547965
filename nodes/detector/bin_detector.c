/* bin_detector: sums factor x factor blocks of detector pixels exactly
 * (REFERENCE.md section 3). Trailing rows/columns that do not fill a whole bin
 * are dropped (recorded in a note).
 *
 * The output dtype must hold factor^2 * max_value, where max_value is the
 * largest value any input pixel can hold (default: the input dtype's maximum).
 * `auto` picks the narrowest unsigned type, no narrower than the input, that
 * does; an explicit dtype that cannot is an error. When max_value is below the
 * input dtype's maximum the result type is only proven if the data respect it,
 * so the kernel audits every input value and fails with SL_ERR_FORMAT naming
 * the chunk, frame and pixel of the first one above it: a narrow result is
 * never silently wrong. Sums accumulate in the output type, which is proven to
 * hold every partial sum (all values are >= 0 and the full sum fits). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/detector/bin_detector.h"

/* The CUDA kernel reads "factor" and "max_value" by name (shaders/cuda/detector.cu). */
#define BIN_DETECTOR_PARAMS(P)                                                                   \
  P(INT, factor, NULL, "bin size: 2, 4 or 8 (factor x factor pixels summed per output pixel)",  \
    NULL)                                                                                        \
  P(ENUM, dtype, "auto",                                                                         \
    "output type: auto (narrowest unsigned type, no narrower than the input, holding "          \
    "factor^2 * max_value), u8, u16, u32 or u64",                                                \
    "auto|u8|u16|u32|u64")                                                                       \
  P(INT, max_value, "0",                                                                         \
    "largest value an input pixel can hold; 0 = the input dtype's maximum. Below it, every "    \
    "value is audited at run time", NULL)
SL_NODE_PARAMS(bin_detector_params, BIN_DETECTOR_PARAMS)

/* The dtype param's choices, in order; after auto, the unsigned types. */
enum { DTYPE_AUTO, DTYPE_U8 };
static const sl_dtype unsigned_types[4] = {SL_U8, SL_U16, SL_U32, SL_U64};

typedef struct bin_cfg {
  int f;
  sl_dtype in, out;
  uint64_t in_max;   /* the input dtype's maximum */
  uint64_t max_value; /* the bound on input values (<= in_max) */
  uint64_t need;     /* f * f * max_value: the largest bin sum */
  bool audit;        /* max_value < in_max: check every value */
  bool explicit_dtype;
  int64_t h, w, ho, wo;
} bin_cfg;

static sl_code bin_resolve(const sl_node *n, bin_cfg *c, sl_error *err) {
  const bin_detector_params *p = bin_detector_params_of(n);
  const sl_tensor_desc *x = &n->in[0];
  memset(c, 0, sizeof *c);
  sl_code rc = sl_frames_check_decoded(x, err);
  if (rc != SL_OK) return rc;
  c->in = x->dtype;
  c->in_max = sl_frame_max(x->dtype);
  c->h = x->dims[x->rank - 2];
  c->w = x->dims[x->rank - 1];

  int64_t f = p->factor;
  if (f != 2 && f != 4 && f != 8)
    return sl_fail(err, SL_ERR_PIPELINE, "param 'factor' must be 2, 4 or 8, got %lld", (long long)f);
  c->f = (int)f;
  if (c->h < f || c->w < f)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "the %lldx%lld detector is smaller than one %lldx%lld bin (param 'factor')",
                   (long long)c->h, (long long)c->w, (long long)f, (long long)f);
  c->ho = c->h / f;
  c->wo = c->w / f;

  int64_t mv = p->max_value;
  if (mv < 0 || (uint64_t)mv > c->in_max)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "param 'max_value' must be 0 (the %s maximum) or 1..%llu, got %lld",
                   sl_dtype_name(c->in), (unsigned long long)c->in_max, (long long)mv);
  c->max_value = mv == 0 ? c->in_max : (uint64_t)mv;
  c->audit = c->max_value < c->in_max;
  c->need = (uint64_t)(f * f) * c->max_value; /* < 2^38 */

  if (p->dtype == DTYPE_AUTO) {
    for (int i = 0; i < SL_COUNT_OF(unsigned_types); i++)
      if (sl_dtype_size(unsigned_types[i]) >= sl_dtype_size(c->in) &&
          sl_frame_max(unsigned_types[i]) >= c->need) {
        c->out = unsigned_types[i];
        break;
      }
  } else {
    sl_dtype t = unsigned_types[p->dtype - DTYPE_U8];
    const char *ds = sl_dtype_name(t);
    if (sl_frame_max(t) < c->need)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "param 'dtype' %s cannot hold the largest bin sum %lld * %llu = %llu (the %s "
                     "maximum is %llu); use auto%s",
                     ds, (long long)(f * f), (unsigned long long)c->max_value,
                     (unsigned long long)c->need, ds, (unsigned long long)sl_frame_max(t),
                     c->audit ? "" : ", or set max_value if the data are known to stay lower");
    c->out = t;
    c->explicit_dtype = true;
  }
  return SL_OK;
}

static sl_code bin_infer(sl_node *n, sl_error *err) {
  bin_cfg c;
  sl_code rc = bin_resolve(n, &c, err);
  if (rc != SL_OK) return rc;
  const sl_tensor_desc *x = &n->in[0];
  sl_tensor_desc *d = &n->out[0];
  *d = *x;
  d->dtype = c.out;
  d->dims[d->rank - 2] = c.ho;
  d->dims[d->rank - 1] = c.wo;

  char a[160], b[160];
  sl_desc_format(x, a, sizeof a);
  sl_desc_format(d, b, sizeof b);
  sl_node_note(n, "input", "%s", a);
  sl_node_note(n, "output", "%s", b);
  sl_node_note(n, "factor", "%d (each output pixel is the exact sum of %dx%d input pixels)", c.f,
               c.f, c.f);
  int64_t dr = c.h - c.ho * c.f, dc = c.w - c.wo * c.f;
  if (dr || dc)
    sl_node_note(n, "dropped",
                 "%lld trailing row(s) and %lld trailing column(s) of the %lldx%lld detector do "
                 "not fill a bin and are not summed",
                 (long long)dr, (long long)dc, (long long)c.h, (long long)c.w);
  else
    sl_node_note(n, "dropped", "none (%lldx%lld divides by %d)", (long long)c.h, (long long)c.w,
                 c.f);
  char bound[96];
  if (c.audit)
    snprintf(bound, sizeof bound, "max_value %llu", (unsigned long long)c.max_value);
  else
    snprintf(bound, sizeof bound, "the %s maximum", sl_dtype_name(c.in));
  const char *on = sl_dtype_name(c.out);
  if (c.explicit_dtype) {
    sl_node_note(n, "dtype", "%s (requested): %d * %llu = %llu fits %s (%s)", on, c.f * c.f,
                 (unsigned long long)c.max_value, (unsigned long long)c.need, on, bound);
  } else if (c.out == c.in || sl_dtype_size(c.out) == sl_dtype_size(c.in)) {
    sl_node_note(n, "dtype", "%s (auto): %d * %llu = %llu fits %s (%s)", on, c.f * c.f,
                 (unsigned long long)c.max_value, (unsigned long long)c.need, on, bound);
  } else {
    sl_dtype below = c.out == SL_U64 ? SL_U32 : c.out == SL_U32 ? SL_U16 : SL_U8;
    sl_node_note(n, "dtype", "%s (auto): %d * %llu = %llu does not fit %s (%s)", on, c.f * c.f,
                 (unsigned long long)c.max_value, (unsigned long long)c.need,
                 sl_dtype_name(below), bound);
  }
  if (c.audit)
    sl_node_note(n, "audit",
                 "every input value is checked <= %llu at run time (the %s result is proven only "
                 "under that bound)",
                 (unsigned long long)c.max_value, on);
  else
    sl_node_note(n, "audit", "not needed: max_value is the %s maximum", sl_dtype_name(c.in));
  return SL_OK;
}

static void bin_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  int64_t item = sl_desc_item_elems(&n->in[0]);
  c->bytes_read = positions * sl_desc_item_bytes(&n->in[0]);
  c->bytes_written = positions * sl_desc_item_bytes(&n->out[0]);
  int64_t mv = bin_detector_params_of(n)->max_value;
  bool audit = mv > 0 && (uint64_t)mv < sl_frame_max(n->in[0].dtype);
  c->ops = positions * item * (audit ? 2 : 1);
#ifdef SLUICE_HAVE_CUDA
  c->device_state_bytes = sl_cuda_bin_detector_table_bytes(audit); /* CUDA: error and audit words */
#endif
}

/* ---- kernel ------------------------------------------------------------------------ */

typedef void (*bin_frame_fn)(const void *src, void *dst, int64_t w, int64_t ho, int64_t wo, int f);

#define BIN_ROW(F)                                                    \
  for (int64_t oc = 0; oc < wo; oc++) {                               \
    TO s = 0;                                                         \
    for (int dc = 0; dc < (F); dc++) s += (TO)xr[oc * (F) + dc];      \
    yr[oc] += s;                                                      \
  }                                                                   \
  break;

#define BIN_FN(NAME, TI, TO_)                                                          \
  static void NAME(const void *src, void *dst, int64_t w, int64_t ho, int64_t wo, int f) { \
    typedef TO_ TO;                                                                    \
    const TI *x = src;                                                                 \
    TO *y = dst;                                                                       \
    for (int64_t orow = 0; orow < ho; orow++) {                                        \
      TO *yr = y + orow * wo;                                                          \
      memset(yr, 0, (size_t)wo * sizeof(TO));                                          \
      for (int dr = 0; dr < f; dr++) {                                                 \
        const TI *xr = x + (orow * f + dr) * w;                                        \
        switch (f) {                                                                   \
          case 2: BIN_ROW(2)                                                           \
          case 4: BIN_ROW(4)                                                           \
          default: BIN_ROW(8)                                                          \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
  }

/* bin_<in>_<out> for every output type of one input type. */
#define BIN_FNS_FROM(IN, TI)             \
  BIN_FN(bin_##IN##_u8, TI, uint8_t)     \
  BIN_FN(bin_##IN##_u16, TI, uint16_t)   \
  BIN_FN(bin_##IN##_u32, TI, uint32_t)   \
  BIN_FN(bin_##IN##_u64, TI, uint64_t)
BIN_FNS_FROM(u8, uint8_t)
BIN_FNS_FROM(u16, uint16_t)
BIN_FNS_FROM(u32, uint32_t)
#undef BIN_FNS_FROM
#undef BIN_FN
#undef BIN_ROW

static bin_frame_fn bin_pick(sl_dtype in, sl_dtype out) {
  static const bin_frame_fn table[3][4] = {
      {bin_u8_u8, bin_u8_u16, bin_u8_u32, bin_u8_u64},
      {bin_u16_u8, bin_u16_u16, bin_u16_u32, bin_u16_u64},
      {bin_u32_u8, bin_u32_u16, bin_u32_u32, bin_u32_u64},
  };
  int i = in == SL_U8 ? 0 : in == SL_U16 ? 1 : 2;
  int o = out == SL_U8 ? 0 : out == SL_U16 ? 1 : out == SL_U32 ? 2 : 3;
  return table[i][o];
}

/* Index of the first value > bound in x[0..n), or -1. The max scan vectorises;
 * the search runs only on a failing frame. */
#define AUDIT_FN(NAME, T)                                                     \
  static int64_t NAME(const void *src, int64_t n, uint64_t bound) {          \
    const T *x = src;                                                         \
    T m = 0;                                                                  \
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;                  \
    if ((uint64_t)m <= bound) return -1;                                      \
    for (int64_t i = 0; i < n; i++)                                           \
      if ((uint64_t)x[i] > bound) return i;                                   \
    return -1;                                                                \
  }
AUDIT_FN(audit_u8, uint8_t)
AUDIT_FN(audit_u16, uint16_t)
AUDIT_FN(audit_u32, uint32_t)
#undef AUDIT_FN

typedef struct bin_job {
  const sl_kernel_args *a;
  bin_cfg c;
  bin_frame_fn fn;
  int64_t (*audit)(const void *, int64_t, uint64_t);
  _Atomic int64_t first_bad; /* lowest p * item + pixel over the chunk; INT64_MAX if none */
} bin_job;

static void bin_range(void *ctx, int64_t begin, int64_t end, int worker) {
  bin_job *j = ctx;
  const bin_cfg *c = &j->c;
  int64_t item = c->h * c->w, oitem = c->ho * c->wo;
  size_t isz = sl_dtype_size(c->in), osz = sl_dtype_size(c->out);
  const char *x = j->a->in[0];
  char *y = j->a->out[0];
  for (int64_t p = begin; p < end; p++) {
    const void *src = x + (size_t)(p * item) * isz;
    if (c->audit) {
      int64_t i = j->audit(src, item, c->max_value);
      if (i >= 0) {
        int64_t code = p * item + i;
        int64_t cur = atomic_load(&j->first_bad);
        while (code < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, code)) {
        }
        return; /* the chunk fails; later frames of this range do not matter */
      }
    }
    j->fn(src, y + (size_t)(p * oitem) * osz, c->w, c->ho, c->wo, c->f);
  }
}

static sl_code bin_cpu(sl_kernel_args *a) {
  bin_job j;
  memset(&j, 0, sizeof j);
  j.a = a;
  sl_code rc = bin_resolve(a->node, &j.c, a->err);
  if (rc != SL_OK) return rc;
  j.fn = bin_pick(j.c.in, j.c.out);
  j.audit = j.c.in == SL_U8 ? audit_u8 : j.c.in == SL_U16 ? audit_u16 : audit_u32;
  atomic_init(&j.first_bad, INT64_MAX);
  int64_t item = j.c.h * j.c.w;
  int64_t grain = 65536 / (item + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, bin_range, &j);
  int64_t bad = atomic_load(&j.first_bad);
  if (bad == INT64_MAX) return SL_OK;
  int64_t p = bad / item, px = bad % item;
  int64_t pos = a->pos_start + p;
  /* The position as scan coordinates. */
  const sl_tensor_desc *d = &a->node->in[0];
  char where[160];
  size_t o = 0;
  int64_t rem = pos, coords[SL_MAX_RANK];
  for (int k = d->stream_rank - 1; k >= 0; k--) {
    coords[k] = d->dims[k] ? rem % d->dims[k] : 0;
    rem = d->dims[k] ? rem / d->dims[k] : 0;
  }
  o += (size_t)snprintf(where, sizeof where, "[");
  for (int k = 0; k < d->stream_rank && o < sizeof where; k++)
    o += (size_t)snprintf(where + o, sizeof where - o, "%s%lld", k ? ", " : "", (long long)coords[k]);
  if (o < sizeof where) snprintf(where + o, sizeof where - o, "]");
  const char *src = (const char *)a->in[0] + (size_t)(p * item) * sl_dtype_size(j.c.in);
  sl_error_chunk(a->err, a->chunk);
  return sl_fail(a->err, SL_ERR_FORMAT,
                 "chunk %lld, frame %lld (scan position %s), pixel (row %lld, col %lld): value %llu "
                 "exceeds max_value %llu, so the %s result would not be proven; raise max_value "
                 "or use dtype auto with max_value 0",
                 (long long)a->chunk, (long long)pos, where, (long long)(px / j.c.w),
                 (long long)(px % j.c.w), (unsigned long long)sl_frame_value_at(src, j.c.in, px),
                 (unsigned long long)j.c.max_value, sl_dtype_name(j.c.out));
}

static const sl_port_def bin_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false}};
static const sl_port_def bin_out[] = {
    {"frames",
     "binned frames [scan... | floor(H/factor), floor(W/factor)]: exact sums; trailing rows and "
     "columns that do not fill a bin are dropped",
     "counts", false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_cuda_bin_detector_params bin_cuda_params(const sl_kernel_args *a) {
  const sl_node *n = a->node;
  const sl_tensor_desc *x = &n->in[0];
  const bin_detector_params *bp = bin_detector_params_of(n);
  sl_cuda_bin_detector_params p = {.frames = sl_glue_frame_shape(x),
                                   .binned = sl_glue_frame_shape(&n->out[0]),
                                   .factor = (int)bp->factor,
                                   .max_value = bp->max_value,
                                   .scan_rank = x->stream_rank,
                                   .device_state = sl_glue_device_state(a)};
  for (int k = 0; k < x->stream_rank && k < SL_MAX_RANK; k++) p.scan_dims[k] = x->dims[k];
  return p;
}

static sl_code bin_cuda(sl_kernel_args *a) {
  const sl_cuda_bin_detector_params p = bin_cuda_params(a);
  return sl_cuda_bin_detector(&p, a);
}

static sl_code bin_cuda_finalize(sl_kernel_args *a) {
  const sl_cuda_bin_detector_params p = bin_cuda_params(a);
  return sl_cuda_bin_detector_finalize(&p, a);
}
#endif

const sl_node_desc sl_node_bin_detector = {
    .type = "bin_detector",
    .doc = "Detector binning by 2, 4 or 8: exact sums in a dtype proven to hold them (widened "
           "automatically, or narrowed only under an audited max_value).",
    SL_PARAMS_DESC(bin_detector_params),
    .inputs = bin_in, .n_inputs = SL_COUNT_OF(bin_in),
    .outputs = bin_out, .n_outputs = SL_COUNT_OF(bin_out),
    .infer = bin_infer, .cost = bin_cost,
    .kernel = {[SL_BACKEND_CPU] = bin_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(bin_cuda)},
    /* CUDA: reports a max_value audit failure of the last chunk (see detector.cu). */
    .finalize = {[SL_BACKEND_CUDA] = SL_CUDA_KERNEL(bin_cuda_finalize)},
};
