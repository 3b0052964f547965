/* mask_correct: replaces bad detector pixels in every frame (REFERENCE.md
 * section 3). Bad pixels are the static mask (the optional whole `mask` input,
 * e.g. the detector file's pixel mask, united with an optional .npy
 * `mask_file`) and, when `flagged` is on, the pixels of each frame that hold
 * the dtype's maximum (the detector's flag value).
 *
 * Policies: median (median of the valid 3x3 neighbours; even count: floor of
 * the mean of the two middle values; none valid: 0), zero, none (copy).
 * A neighbour is valid when it is inside the detector, not in the static mask
 * and, with `flagged`, not at the flag value in this frame. Bad pixels never
 * serve as neighbours, so a correction only ever reads original values.
 *
 * The mask input reaches the node only through the kernel arguments, so the
 * bad-pixel list and each bad pixel's static neighbour list are built on the
 * first kernel call into the state that prepare() allocated (a node's kernels
 * are never called concurrently). Per frame the kernel copies, fixes the static
 * bad pixels from their lists, then (flagged) scans blocks of the frame for
 * the flag value with a vectorisable test and fixes the pixels found. Frames
 * are spread over workers with parallel_for. The output buffer must be
 * distinct from the input buffer (the executor gives every port its own). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/mask_file.h"
#include "nodes/common/cuda_glue.h"
#include "shaders/cuda/detector/mask_correct.h"

/* The CUDA kernel reads "policy" and "flagged" by name (shaders/cuda/detector.cu). */
#define MASK_CORRECT_PARAMS(P)                                                                  \
  P(ENUM, policy, "median",                                                                     \
    "median (3x3 median of valid neighbours), zero (set to 0) or none (copy unchanged)",        \
    "median|zero|none")                                                                         \
  P(PATH, mask_file, "",                                                                        \
    "extra static mask, H x W, nonzero = bad: .npy (u1/b1/u2/i4/f4/f8, C order), grayscale "    \
    "PNG, or file.h5:/dataset", NULL)                                                           \
  P(BOOL, flagged, "true",                                                                      \
    "also treat pixels at the dtype maximum (the detector's flag value, 0xFFFF for u16) as "    \
    "bad, per frame", NULL)
SL_NODE_PARAMS(mask_correct_params, MASK_CORRECT_PARAMS)

/* The policy choices, in the order of the param's choices. */
typedef enum correct_policy { POLICY_MEDIAN, POLICY_ZERO, POLICY_NONE } correct_policy;

typedef struct correct_state {
  int64_t h, w;
  correct_policy policy;
  bool flagged;
  bool has_input_mask; /* the optional 'mask' input is connected */
  uint8_t *file_mask;  /* H*W 0/1 from mask_file, or NULL */
  int64_t file_bad;    /* pixels set in file_mask */
  /* Built on the first kernel call: */
  bool built;
  uint8_t *bad;     /* H*W: 1 = static bad pixel */
  int64_t n_bad;
  int64_t *bad_idx; /* n_bad pixel indices r*W + c, ascending */
  int64_t *nb;      /* 8 per bad pixel: its statically valid neighbours */
  uint8_t *nb_n;    /* how many of the 8 are used */
} correct_state;

/* ---- validation -------------------------------------------------------------- */

static bool mask_connected(const sl_node *n) {
  if (n->n_in < 2) return false;
  if (n->in_src[1].node == SL_SRC_NONE) return false;
  return n->in[1].dtype != SL_DT_INVALID;
}

/* The mask_file param, NULL when not given. */
static const char *mask_file_param(const sl_node *n) {
  const char *path = mask_correct_params_of(n)->mask_file;
  return path && path[0] ? path : NULL;
}

static sl_code check_inputs(const sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  sl_code rc = sl_frames_check_decoded(x, err);
  if (rc != SL_OK) return rc;
  if (mask_connected(n)) {
    const sl_tensor_desc *m = &n->in[1];
    char buf[160];
    int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
    sl_desc_format(m, buf, sizeof buf);
    if (m->dtype != SL_U8 && m->dtype != SL_U16 && m->dtype != SL_U32)
      return sl_fail(err, SL_ERR_PIPELINE, "input 'mask' expects u8, u16 or u32 (> 0 = bad), got %s",
                     buf);
    if (m->stream_rank != 0)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "input 'mask' must be a whole [H, W] tensor, not streamed; got %s", buf);
    if (m->rank != 2 || m->dims[0] != h || m->dims[1] != w)
      return sl_fail(err, SL_ERR_PIPELINE,
                     "input 'mask' has shape %s but the frames are %lldx%lld (the mask must be "
                     "[%lld, %lld])",
                     buf, (long long)h, (long long)w, (long long)h, (long long)w);
  }
  return SL_OK;
}

/* Reads (mask != NULL) or only checks the mask file (.npy, PNG or
 * file.h5:/dataset, through the shared reader); errors name the param and
 * the file. */
static sl_code read_mask_file(const sl_node *n, int64_t h, int64_t w, uint8_t **mask, sl_error *err) {
  const char *path = mask_file_param(n);
  sl_code rc = sl_mask_file_read(path, h, w, mask, err);
  if (rc != SL_OK) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    sl_fail(err, rc, "param 'mask_file': %s", msg);
  }
  return rc;
}

static const char *policy_text(correct_policy p) {
  switch (p) {
    case POLICY_MEDIAN:
      return "median (3x3 median of valid neighbours; even count: floor of the mean of the two "
             "middle values; no valid neighbour: 0)";
    case POLICY_ZERO: return "zero (bad pixels set to 0)";
    default: return "none (frames copied unchanged)";
  }
}

static uint64_t dtype_max(sl_dtype t) {
  return t == SL_U8 ? 0xFFu : t == SL_U16 ? 0xFFFFu : 0xFFFFFFFFu;
}

static sl_code correct_infer(sl_node *n, sl_error *err) {
  const mask_correct_params *p = mask_correct_params_of(n);
  correct_policy policy = (correct_policy)p->policy;
  sl_code rc = check_inputs(n, err);
  if (rc != SL_OK) return rc;
  const sl_tensor_desc *x = &n->in[0];
  int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
  const char *path = mask_file_param(n);
  bool has_file = path != NULL;
  if (has_file && (rc = read_mask_file(n, h, w, NULL, err)) != SL_OK) return rc;
  n->out[0] = *x;

  bool flagged = p->flagged;
  bool has_input = mask_connected(n);
  sl_node_note(n, "policy", "%s", policy_text(policy));
  if (flagged)
    sl_node_note(n, "flagged", "pixels equal to %llu (the %s maximum) are bad in the frame that holds "
                 "them%s",
                 (unsigned long long)dtype_max(x->dtype), sl_dtype_name(x->dtype),
                 policy == POLICY_NONE ? " (policy none: left as they are)" : "");
  else
    sl_node_note(n, "flagged", "off: pixels at the %s maximum are kept as values",
                 sl_dtype_name(x->dtype));
  if (has_input && has_file)
    sl_node_note(n, "mask_sources", "input 'mask' and file '%s' (union)", path);
  else if (has_input)
    sl_node_note(n, "mask_sources", "input 'mask'");
  else if (has_file)
    sl_node_note(n, "mask_sources", "file '%s'", path);
  else
    sl_node_note(n, "mask_sources", "none (no static mask)");
  return SL_OK;
}

/* ---- state --------------------------------------------------------------------- */

static void correct_release(sl_node *n) {
  correct_state *s = n->state;
  if (!s) return;
  free(s->file_mask);
  free(s->bad);
  free(s->bad_idx);
  free(s->nb);
  free(s->nb_n);
  free(s);
  n->state = NULL;
}

static sl_code correct_prepare(sl_node *n, sl_error *err) {
  const mask_correct_params *p = mask_correct_params_of(n);
  sl_code rc = check_inputs(n, err);
  if (rc != SL_OK) return rc;
  if (n->state) correct_release(n);
  const sl_tensor_desc *x = &n->in[0];
  correct_state *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(err, SL_ERR_NOMEM, "out of memory for the mask_correct state");
  s->h = x->dims[x->rank - 2];
  s->w = x->dims[x->rank - 1];
  s->policy = (correct_policy)p->policy;
  s->flagged = p->flagged;
  s->has_input_mask = mask_connected(n);
  if (mask_file_param(n)) {
    if ((rc = read_mask_file(n, s->h, s->w, &s->file_mask, err)) != SL_OK) {
      free(s);
      return rc;
    }
    for (int64_t i = 0; i < s->h * s->w; i++) s->file_bad += s->file_mask[i] != 0;
  }
  n->state = s;
  if (s->has_input_mask)
    sl_node_note(n, "static_bad_pixels",
                 "%lld from the file, plus input 'mask' (counted at the first chunk)",
                 (long long)s->file_bad);
  else
    sl_node_note(n, "static_bad_pixels", "%lld", (long long)s->file_bad);
  return SL_OK;
}

/* Static mask and neighbour lists from the mask input (may be NULL when not
 * connected) and the file mask. */
static sl_code build_neighbour_lists(correct_state *s, sl_node *n, const void *mask, sl_error *err) {
  int64_t h = s->h, w = s->w, item = h * w;
  int64_t from_input = 0, both = 0;
  free(s->bad);
  free(s->bad_idx);
  free(s->nb);
  free(s->nb_n);
  s->bad_idx = s->nb = NULL;
  s->nb_n = NULL;
  s->n_bad = 0;
  s->bad = calloc((size_t)item, 1);
  if (!s->bad) return sl_fail(err, SL_ERR_NOMEM, "out of memory for the static mask");
  for (int64_t i = 0; i < item; i++) {
    uint8_t in = mask ? sl_frame_value_at(mask, n->in[1].dtype, i) != 0 : 0;
    uint8_t fi = s->file_mask ? s->file_mask[i] != 0 : 0;
    from_input += in;
    both += in & fi;
    s->bad[i] = in | fi;
    s->n_bad += s->bad[i];
  }
  size_t nb = (size_t)(s->n_bad ? s->n_bad : 1);
  s->bad_idx = malloc(nb * sizeof *s->bad_idx);
  s->nb = malloc(8 * nb * sizeof *s->nb);
  s->nb_n = malloc(nb);
  if (!s->bad_idx || !s->nb || !s->nb_n)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld bad-pixel neighbour lists",
                   (long long)s->n_bad);
  int64_t k = 0;
  for (int64_t r = 0; r < h; r++)
    for (int64_t c = 0; c < w; c++) {
      if (!s->bad[r * w + c]) continue;
      s->bad_idx[k] = r * w + c;
      int cnt = 0;
      for (int64_t dr = -1; dr <= 1; dr++)
        for (int64_t dc = -1; dc <= 1; dc++) {
          int64_t rr = r + dr, cc = c + dc;
          if ((dr == 0 && dc == 0) || rr < 0 || rr >= h || cc < 0 || cc >= w) continue;
          if (s->bad[rr * w + cc]) continue;
          s->nb[8 * k + cnt++] = rr * w + cc;
        }
      s->nb_n[k] = (uint8_t)cnt;
      k++;
    }
  s->built = true;
  if (s->has_input_mask && s->file_mask)
    sl_node_note(n, "static_bad_pixels", "%lld (input 'mask': %lld, file: %lld, in both: %lld)",
                 (long long)s->n_bad, (long long)from_input, (long long)s->file_bad,
                 (long long)both);
  else if (s->has_input_mask)
    sl_node_note(n, "static_bad_pixels", "%lld (input 'mask')", (long long)s->n_bad);
  return SL_OK;
}

/* ---- kernel ---------------------------------------------------------------------- */

/* Median of v[0..n) (n <= 8): even count -> floor of the mean of the middle two;
 * empty -> 0. Sorts v. */
static inline uint64_t small_median(uint64_t *v, int n) {
  if (n == 0) return 0;
  for (int i = 1; i < n; i++) {
    uint64_t t = v[i];
    int k = i - 1;
    while (k >= 0 && v[k] > t) {
      v[k + 1] = v[k];
      k--;
    }
    v[k + 1] = t;
  }
  if (n & 1) return v[n / 2];
  return (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct correct_job {
  const sl_kernel_args *a;
  const correct_state *s;
} correct_job;

#define FLAG_SCAN_BLOCK 256

#define CORRECT_RANGE(NAME, T, TMAX)                                                            \
  static void NAME(void *ctx, int64_t begin, int64_t end, int worker) {                    \
    const correct_job *j = ctx;                                                                 \
    const correct_state *s = j->s;                                                              \
    const int64_t h = s->h, w = s->w, item = h * w;                                        \
    const bool flagged = s->flagged;                                                       \
    const bool median = s->policy == POLICY_MEDIAN;                                            \
    for (int64_t p = begin; p < end; p++) {                                                \
      const T *x = (const T *)j->a->in[0] + p * item;                                      \
      T *y = (T *)j->a->out[0] + p * item;                                                 \
      memcpy(y, x, (size_t)item * sizeof(T));                                              \
      if (s->policy == POLICY_NONE) continue;                                                  \
      for (int64_t k = 0; k < s->n_bad; k++) {                                             \
        int64_t idx = s->bad_idx[k];                                                       \
        if (!median) {                                                                     \
          y[idx] = 0;                                                                      \
          continue;                                                                        \
        }                                                                                  \
        uint64_t v[8];                                                                     \
        int nv = 0;                                                                        \
        const int64_t *nb = s->nb + 8 * k;                                                 \
        for (int q = 0; q < s->nb_n[k]; q++) {                                             \
          T t = x[nb[q]];                                                                  \
          if (flagged && t == (T)(TMAX)) continue;                                         \
          v[nv++] = t;                                                                     \
        }                                                                                  \
        y[idx] = (T)small_median(v, nv);                                                   \
      }                                                                                    \
      if (!flagged) continue;                                                              \
      for (int64_t b0 = 0; b0 < item; b0 += FLAG_SCAN_BLOCK) {                                    \
        int64_t b1 = b0 + FLAG_SCAN_BLOCK < item ? b0 + FLAG_SCAN_BLOCK : item;                          \
        unsigned any = 0;                                                                  \
        for (int64_t i = b0; i < b1; i++) any |= x[i] == (T)(TMAX);                        \
        if (!any) continue;                                                                \
        for (int64_t i = b0; i < b1; i++) {                                                \
          if (x[i] != (T)(TMAX) || s->bad[i]) continue;                                    \
          if (!median) {                                                                   \
            y[i] = 0;                                                                      \
            continue;                                                                      \
          }                                                                                \
          int64_t r = i / w, c = i % w;                                                    \
          uint64_t v[8];                                                                   \
          int nv = 0;                                                                      \
          for (int64_t rr = r - 1; rr <= r + 1; rr++) {                                    \
            if (rr < 0 || rr >= h) continue;                                               \
            for (int64_t cc = c - 1; cc <= c + 1; cc++) {                                  \
              if (cc < 0 || cc >= w || (rr == r && cc == c)) continue;                     \
              int64_t q = rr * w + cc;                                                     \
              if (s->bad[q] || x[q] == (T)(TMAX)) continue;                                \
              v[nv++] = x[q];                                                              \
            }                                                                              \
          }                                                                                \
          y[i] = (T)small_median(v, nv);                                                   \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
  }
CORRECT_RANGE(correct_range_u8, uint8_t, 0xFFu)
CORRECT_RANGE(correct_range_u16, uint16_t, 0xFFFFu)
CORRECT_RANGE(correct_range_u32, uint32_t, 0xFFFFFFFFu)
#undef CORRECT_RANGE

static sl_code correct_cpu(sl_kernel_args *a) {
  correct_state *s = a->state ? a->state : a->node->state;
  if (!s) return sl_fail(a->err, SL_ERR_INTERNAL, "mask_correct: kernel called before prepare");
  if (!s->built) {
    if (s->has_input_mask && !a->in[1])
      return sl_fail(a->err, SL_ERR_INTERNAL, "mask_correct: input 'mask' is connected but has no data");
    /* The node is the graph's (non-const) node; only this node's notes change,
     * and a node's kernels never run concurrently. */
    sl_code rc = build_neighbour_lists(s, (sl_node *)a->node, s->has_input_mask ? a->in[1] : NULL, a->err);
    if (rc != SL_OK) return rc;
  }
  correct_job j = {a, s};
  sl_dtype t = a->node->in[0].dtype;
  sl_range_fn fn = t == SL_U8 ? correct_range_u8 : t == SL_U16 ? correct_range_u16 : correct_range_u32;
  int64_t item = s->h * s->w;
  int64_t grain = 65536 / (item + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  return SL_OK;
}

static void correct_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const correct_state *s = n->state;
  int64_t item = sl_desc_item_elems(&n->in[0]);
  int64_t bytes = positions * sl_desc_item_bytes(&n->in[0]);
  c->bytes_read = bytes;
  c->bytes_written = bytes;
  int64_t per = item; /* copy */
  if (mask_correct_params_of(n)->flagged) per += item; /* the scan for the flag value */
  if (s && s->built) per += 9 * s->n_bad;
  c->ops = positions * per;
  /* State: file mask and bad map (H*W each), and per bad pixel its index, 8
   * neighbour indices and a count; before the mask is known, every pixel bad
   * bounds it. */
  int64_t n_bad = s && s->built ? s->n_bad : item;
  c->state_bytes = 2 * item + n_bad * (int64_t)(sizeof(int64_t) * 9 + 1);
}

static const sl_port_def correct_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false},
    {"mask", "optional whole [H, W] u8/u16/u32 pixel mask, > 0 = bad (e.g. the detector's "
             "pixel_mask)",
     NULL, true},
};
static const sl_port_def correct_out[] = {
    {"frames", "corrected frames: same dtype and shape as the input", "counts", false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node and the mask file its
 * prepare() read. */
static sl_code correct_cuda(sl_kernel_args *a) {
  const sl_node *n = a->node;
  const mask_correct_params *mp = mask_correct_params_of(n);
  const correct_state *s = n->state;
  static const int cuda_policy[] = {[POLICY_MEDIAN] = SL_CUDA_MASK_MEDIAN,
                                    [POLICY_ZERO] = SL_CUDA_MASK_ZERO,
                                    [POLICY_NONE] = SL_CUDA_MASK_NONE};
  const sl_cuda_mask_correct_params p = {
      .frames = sl_glue_frame_shape(&n->in[0]),
      .policy = cuda_policy[mp->policy],
      .flagged = mp->flagged,
      .has_mask = sl_glue_input_present(n, 1),
      .mask_dtype = sl_glue_input_present(n, 1) ? n->in[1].dtype : SL_DT_INVALID,
      .file_mask = s ? s->file_mask : NULL,
      .device_state = sl_glue_device_state(a)};
  return sl_cuda_mask_correct(&p, a);
}
#endif

const sl_node_desc sl_node_mask_correct = {
    .type = "mask_correct",
    .doc = "Replaces bad detector pixels (static mask from an input and/or a .npy file, and pixels "
           "at the flag value) by the median of their valid 3x3 neighbours, by 0, or not at all.",
    SL_PARAMS_DESC(mask_correct_params),
    .inputs = correct_in, .n_inputs = SL_COUNT_OF(correct_in),
    .outputs = correct_out, .n_outputs = SL_COUNT_OF(correct_out),
    .infer = correct_infer, .cost = correct_cost,
    .prepare = correct_prepare, .release = correct_release,
    .kernel = {[SL_BACKEND_CPU] = correct_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(correct_cuda)},
};
