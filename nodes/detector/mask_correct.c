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
 * are never called concurrently). The output may be the input's own buffer
 * (in_place_outputs: the planner grants it when nothing else reads the
 * decoded frames), so a frame costs what its bad pixels cost: the static ones
 * are fixed from their lists and, with `flagged`, blocks of the frame are
 * counted for the flag value with a vectorisable test, and only a block
 * holding a flagged pixel outside the static mask is walked pixel by pixel.
 * With the optional `flag_counts` input (bslz4_decode's output of the same
 * frames, flag_counts.h) the counts come from the decoder, which took them
 * while each block was in cache, and the frame is not read at all outside
 * the static bad pixels, their neighbours and the blocks that hold a pixel
 * flagged outside the static mask: same results, bit for bit.
 * Given a buffer of its own, the kernel copies the frame first. Frames are
 * spread over workers with parallel_for. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/simd.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/graph/node_params.h"
#include "nodes/common/frame_ports.h"
#include "nodes/common/mask_file.h"
#include "nodes/common/madd_u16.h"
#include "nodes/common/cuda_glue.h"
#include "nodes/detector/flag_counts.h"
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
    "bad, per frame", NULL)                                                                     \
  P(ENUM, simd, "auto", SL_SIMD_PARAM_DOC, SL_SIMD_CHOICES)
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
  /* The AVX2 medians' gather tables (u8 and u16 frames of at least 4 bytes
   * with the median; else NULL; u16 frames take the window tables below,
   * the gathers serve u8): slot q of bad pixel k at [q * lanes_pitch +
   * k]. A slot gathers the 4 bytes at lane_off (in the frame, never before
   * its start or past its end) and shifts them right by lane_shift bits to
   * bring the neighbour's value to the low bits; lane_ok is -1 for a
   * statically valid neighbour, 0 for an unused slot. */
  int32_t *lane_off, *lane_shift, *lane_ok;
  int64_t lanes_pitch;
  /* The AVX2 medians of u16 frames without gathers (static_medians_u16):
   * win_off[k] is the pixel index of bad pixel k's up-left neighbour, where
   * its 3x3 window's three 4-pixel rows lie in the frame (else -1: done one
   * by one); win_bad[8 k .. 8 k + 8) is 0xFFFF in the window slots that are
   * not statically valid (outside the detector or static bad), 0 in the
   * others, slots in k_window_slots order. In the allocation of lane_off. */
  int32_t *win_off;
  uint16_t *win_bad;
  int es; /* bytes per pixel */
} correct_state;

/* ---- validation -------------------------------------------------------------- */

static bool input_connected(const sl_node *n, int k) {
  if (n->n_in <= k) return false;
  if (n->in_src[k].node == SL_SRC_NONE) return false;
  return n->in[k].dtype != SL_DT_INVALID;
}

static bool mask_connected(const sl_node *n) { return input_connected(n, 1); }
static bool counts_connected(const sl_node *n) { return input_connected(n, 2); }

/* The mask_file param, NULL when not given. */
static const char *mask_file_param(const sl_node *n) {
  const char *path = mask_correct_params_of(n)->mask_file;
  return path && path[0] ? path : NULL;
}

/* The most static bad pixels the lists can hold, known when planning: the
 * mask input's bad-pixel count where its producer knows it (detector_mask:
 * the file's pixel mask, sl_tensor_desc.nonzero_bound), else every pixel;
 * a mask_file is read at prepare, so it may add every pixel. */
static int64_t static_bad_bound(const sl_node *n) {
  int64_t item = sl_desc_item_elems(&n->in[0]), bound = 0;
  if (mask_connected(n)) bound += n->in[1].nonzero_known ? n->in[1].nonzero_bound : item;
  if (mask_file_param(n)) bound += item;
  return bound < item ? bound : item;
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
  if (counts_connected(n)) {
    /* the frames' stream axes, then one u32 per group of pixels */
    const sl_tensor_desc *c = &n->in[2];
    const int64_t h = x->dims[x->rank - 2], w = x->dims[x->rank - 1];
    bool ok = c->dtype == SL_U32 && c->stream_rank == x->stream_rank && c->rank == x->stream_rank + 1 &&
              c->dims[c->rank - 1] == sl_flag_groups(h * w);
    for (int k = 0; ok && k < x->stream_rank; k++) ok = c->dims[k] == x->dims[k];
    if (!ok) {
      char want[96];
      snprintf(want, sizeof want, "bslz4_decode's flag_counts of these frames (u32 [scan... | %lld])",
               (long long)sl_flag_groups(h * w));
      return sl_input_refuse(err, "flag_counts", want, c);
    }
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
                 (unsigned long long)sl_frame_max(x->dtype), sl_dtype_name(x->dtype),
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
  if (flagged && counts_connected(n))
    sl_node_note(n, "flag_counts", "from the input (the decoder's counts per %d pixels): frames are "
                 "not scanned for the flag value", SL_FLAG_GROUP_PIXELS);
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
  free(s->lane_off);
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
  s->es = (int)sl_dtype_size(x->dtype);
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

/* Whether the AVX2 medians apply: the median of u8 or u16 pixels (their
 * values and LANE_EMPTY fit 32-bit lanes) in frames of at least 4 bytes (a
 * gather reads 4). */
static bool gather_lanes_fit(correct_policy policy, int64_t es, int64_t frame_bytes) {
  return policy == POLICY_MEDIAN && es < 4 && frame_bytes >= 4 && frame_bytes <= INT32_MAX;
}

/* Bytes of the gather tables for n_bad static bad pixels: three tables of 8
 * slots, each padded by a vector (none without a bad pixel); then u16
 * frames' window tables (win_off, win_bad: 20 bytes a pixel). */
static int64_t gather_lanes_bytes(int64_t n_bad) {
  return n_bad > 0 ? 3 * 8 * (n_bad + 8) * (int64_t)sizeof(int32_t) + 20 * n_bad : 0;
}

/* A 3x3 window's slots, (row, column) from its centre: the order of
 * correct_state.win_bad and of static_medians_u16's window vectors. */
static const int8_t k_window_slots[8][2] = {{-1, -1}, {-1, 0}, {-1, 1}, {0, -1},
                                            {0, 1},   {1, -1}, {1, 0},  {1, 1}};

/* The gather tables (correct_state.lane_off) from the neighbour lists. */
static sl_code build_gather_lanes(correct_state *s, sl_error *err) {
  if (!gather_lanes_fit(s->policy, s->es, s->h * s->w * s->es) || s->n_bad == 0) return SL_OK;
  const int64_t pitch = s->n_bad + 8;
  int32_t *t = calloc((size_t)gather_lanes_bytes(s->n_bad), 1);
  if (!t) return sl_fail(err, SL_ERR_NOMEM, "out of memory for the bad pixels' gather tables");
  s->lane_off = t, s->lane_shift = t + 8 * pitch, s->lane_ok = t + 16 * pitch;
  s->lanes_pitch = pitch;
  s->win_off = t + 24 * pitch;
  s->win_bad = (uint16_t *)(void *)(s->win_off + s->n_bad);
  const int64_t h = s->h, w = s->w;
  for (int64_t k = 0; k < s->n_bad; k++) {
    const int64_t r = s->bad_idx[k] / w, c = s->bad_idx[k] % w;
    /* rows r-1..r+1, columns c-1..c+2 (the 4-pixel loads) inside the frame */
    const bool inside = r >= 1 && r + 1 < h && c >= 1 && (r + 1) * w + c + 2 < h * w;
    s->win_off[k] = inside ? (int32_t)((r - 1) * w + c - 1) : -1;
    for (int q = 0; q < 8; q++) {
      const int64_t rr = r + k_window_slots[q][0], cc = c + k_window_slots[q][1];
      const bool valid = rr >= 0 && rr < h && cc >= 0 && cc < w && !s->bad[rr * w + cc];
      s->win_bad[8 * k + q] = valid ? 0 : 0xFFFF;
    }
  }
  for (int64_t k = 0; k < s->n_bad; k++)
    for (int q = 0; q < s->nb_n[k]; q++) {
      /* the 4 bytes that end with the pixel's, moved to start at the
       * frame's first byte when they would begin before it */
      int64_t at = s->nb[8 * k + q] * s->es, off = at + s->es - 4;
      if (off < 0) off = 0;
      s->lane_off[q * pitch + k] = (int32_t)off;
      s->lane_shift[q * pitch + k] = (int32_t)(8 * (at - off));
      s->lane_ok[q * pitch + k] = -1;
    }
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
  free(s->lane_off);
  s->bad_idx = s->nb = NULL;
  s->nb_n = NULL;
  s->lane_off = s->lane_shift = s->lane_ok = s->win_off = NULL;
  s->win_bad = NULL;
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
  /* The plan counted lists for static_bad_bound pixels. */
  if (s->n_bad > static_bad_bound(n))
    return sl_fail(err, SL_ERR_PIPELINE,
                   "the static mask holds %lld bad pixels, more than the %lld the plan was made for "
                   "(its input changed since planning?)",
                   (long long)s->n_bad, (long long)static_bad_bound(n));
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
  sl_code rc = build_gather_lanes(s, err);
  if (rc != SL_OK) return rc;
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

/* The kernel works in place on the output frame: out[0] is in[0] when the
 * planner lets the node overwrite its input (in_place_outputs), else the
 * frame is copied first. Only bad pixels are written, and every correction
 * must read original values:
 * - a static bad pixel reads its statically valid neighbours, which are
 *   never written (a flagged one among them is skipped by its value), so
 *   its correction is written at once;
 * - a pixel flagged in this frame loses its flag value when corrected, and a
 *   later correction would then take it for a valid neighbour. Pixels are
 *   fixed in raster order and a correction at row r reads rows r-1..r+1, so
 *   a flagged pixel's median waits in a small FIFO until the sweep reaches
 *   row r+2 (at most 2W waiting), and is written then. */

#define MEDIAN_EMPTY UINT64_MAX /* sorts after every pixel value */

/* Batcher's odd-even merge sort of 8 values as compare-exchanges CS(i, j),
 * shared by the scalar and the lane-parallel medians below. */
#define MEDIAN8_NETWORK(CS)                                                      \
  CS(0, 2); CS(1, 3); CS(4, 6); CS(5, 7); CS(0, 4); CS(1, 5); CS(2, 6); CS(3, 7); \
  CS(0, 1); CS(2, 3); CS(4, 5); CS(6, 7); CS(2, 4); CS(3, 5); CS(1, 4); CS(3, 6); \
  CS(1, 2); CS(3, 4); CS(5, 6)

/* Median of the n valid values in v[0..8) (the other slots MEDIAN_EMPTY):
 * odd n -> the middle one; even -> floor of the mean of the middle two;
 * none -> 0. A sorting network: no data-dependent branches. */
static inline uint64_t median8(uint64_t *v, int n) {
#define CS(i, j)                                                       \
  do {                                                                 \
    uint64_t lo_ = v[i] < v[j] ? v[i] : v[j], hi_ = v[i] < v[j] ? v[j] : v[i]; \
    v[i] = lo_, v[j] = hi_;                                            \
  } while (0)
  MEDIAN8_NETWORK(CS);
#undef CS
  if (n == 0) return 0;
  if (n & 1) return v[n / 2];
  return (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The same for MEDIAN_LANES bad pixels at once, on 32-bit values below
 * LANE_EMPTY: v[q][l] is neighbour slot q of lane l (LANE_EMPTY when not
 * valid, sorting last), nv[l] the valid ones; the sorting network runs on
 * vectors of lanes (GCC vector extensions: vpminud/vpmaxud in the AVX2
 * clone), then each lane takes its middle value(s) as median8 does. */
#define MEDIAN_LANES 8
#define LANE_EMPTY UINT32_MAX
typedef uint32_t median_lanes __attribute__((vector_size(4 * MEDIAN_LANES)));
static inline __attribute__((always_inline)) void median8_lanes(uint32_t v[8][MEDIAN_LANES],
                                                                const int nv[MEDIAN_LANES],
                                                                uint32_t out[MEDIAN_LANES]) {
  median_lanes x[8];
  for (int q = 0; q < 8; q++) memcpy(&x[q], v[q], sizeof x[q]);
#define CS(i, j)                                     \
  do {                                               \
    median_lanes lt_ = x[i] < x[j];                  \
    median_lanes lo_ = (x[i] & lt_) | (x[j] & ~lt_); \
    median_lanes hi_ = (x[j] & lt_) | (x[i] & ~lt_); \
    x[i] = lo_, x[j] = hi_;                          \
  } while (0)
  MEDIAN8_NETWORK(CS);
#undef CS
  for (int q = 0; q < 8; q++) memcpy(v[q], &x[q], sizeof x[q]);
  for (int l = 0; l < MEDIAN_LANES; l++) {
    const int n = nv[l];
    out[l] = n == 0 ? 0
             : n & 1 ? v[n / 2][l]
                     : (uint32_t)(((uint64_t)v[n / 2 - 1][l] + v[n / 2][l]) / 2);
  }
}

#if SL_MADD_X86
/* Static bad pixels from k on, eight at a time while eight remain before k1,
 * of a u8 or u16 frame at y (correct_state.lane_off's tables): each of the
 * eight neighbour slots is one gather for the eight pixels, the values at
 * the flag value (with `flagged`) and the unused slots become LANE_EMPTY,
 * and the median is picked from the sorted slots with compares against the
 * valid count, all in vectors: the same values as median8_lanes. Returns
 * the first pixel not done. */
SL_MADD_AVX2 static int64_t static_medians_avx2(uint8_t *y, const correct_state *s, int64_t k,
                                               int64_t k1) {
  const int64_t pitch = s->lanes_pitch;
  const __m256i vmax = _mm256_set1_epi32(s->es == 1 ? 0xFF : 0xFFFF), empty = _mm256_set1_epi32(-1);
  /* a value equal to this is not valid: the flag value, or (without
   * `flagged`) LANE_EMPTY, which no pixel value equals */
  const __m256i flag = s->flagged ? vmax : empty, one = _mm256_set1_epi32(1);
  for (; k + MEDIAN_LANES <= k1; k += MEDIAN_LANES) {
    __m256i x[8], nv = _mm256_setzero_si256();
    for (int q = 0; q < 8; q++) {
      const int64_t at = q * pitch + k;
      const __m256i off = _mm256_loadu_si256((const __m256i *)(s->lane_off + at));
      const __m256i sh = _mm256_loadu_si256((const __m256i *)(s->lane_shift + at));
      __m256i ok = _mm256_loadu_si256((const __m256i *)(s->lane_ok + at));
      __m256i v = _mm256_i32gather_epi32((const int *)(const void *)y, off, 1);
      v = _mm256_and_si256(_mm256_srlv_epi32(v, sh), vmax);
      ok = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, flag), ok);
      x[q] = _mm256_or_si256(v, _mm256_xor_si256(ok, empty)); /* LANE_EMPTY where not valid */
      nv = _mm256_sub_epi32(nv, ok);
    }
#define CS(i, j)                                  \
  do {                                            \
    const __m256i lo_ = _mm256_min_epu32(x[i], x[j]); \
    x[j] = _mm256_max_epu32(x[i], x[j]);          \
    x[i] = lo_;                                   \
  } while (0)
    MEDIAN8_NETWORK(CS);
#undef CS
    /* x[nv / 2] and x[nv / 2 - 1] of each lane */
    const __m256i half = _mm256_srli_epi32(nv, 1);
    __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
    for (int q = 0; q < 8; q++) {
      const __m256i at_hi = _mm256_cmpeq_epi32(half, _mm256_set1_epi32(q));
      const __m256i at_lo = _mm256_cmpeq_epi32(half, _mm256_set1_epi32(q + 1));
      hi = _mm256_or_si256(hi, _mm256_and_si256(x[q], at_hi));
      lo = _mm256_or_si256(lo, _mm256_and_si256(x[q], at_lo));
    }
    /* odd: the middle one; even: floor of the mean of the middle two (both
     * valid, so below 2^16 and their sum fits); none valid: 0 */
    const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(nv, one), one);
    __m256i m = _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_add_epi32(lo, hi), 1), hi, odd);
    m = _mm256_andnot_si256(_mm256_cmpeq_epi32(nv, _mm256_setzero_si256()), m);
    uint32_t out[MEDIAN_LANES];
    _mm256_storeu_si256((__m256i *)out, m);
    uint16_t *y16 = (uint16_t *)(void *)y;
    for (int l = 0; l < MEDIAN_LANES; l++) {
      if (s->es == 1) y[s->bad_idx[k + l]] = (uint8_t)out[l];
      else y16[s->bad_idx[k + l]] = (uint16_t)out[l];
    }
  }
  return k;
}
#endif

#if SL_MADD_X86
/* (CORRECT_FUNCS(u16, ...) below) */
static inline uint16_t static_median_u16(const uint16_t *y, const correct_state *s, int64_t k);

/* Static bad pixels [k, k1) of a u16 frame, sixteen at a time (the last
 * batch with unused lanes), without gathers: each pixel's 3x3 window is
 * three 8-byte loads (its rows, columns c-1..c+2) shuffled into one vector
 * of its 8 neighbours (k_window_slots order), the statically invalid slots
 * set to 0xFFFF (win_bad); sixteen such vectors transposed (8x8 u16 in each
 * 128-bit half) give the slot vectors that the same sorting network sorts
 * with vpminuw/vpmaxuw, sixteen pixels a lane each. 0xFFFF is the flag
 * value: with `flagged` a neighbour at it is not valid and sorts last with
 * the invalid slots, so the valid count is the slots below 0xFFFF; without,
 * it is valid, the count is the static one (nb_n), and a median index that
 * reaches the 0xFFFF values reads 0xFFFF either way. A pixel whose window
 * leaves the frame (win_off -1) is done by static_median_u16 afterwards.
 * The same values as median8. Returns k1 (every pixel done). */
#define U16_WINDOW_LANES 16
SL_MADD_AVX2 static int64_t static_medians_u16(uint16_t *y, const correct_state *s, int64_t k,
                                              int64_t k1) {
  const int64_t w = s->w;
  /* window rows a (r-1), b (r), c (r+1), pixels 0..3 from column c-1:
   * slots a0 a1 a2 | b0 b2 | c0 c1 c2 (bytes; 0x80 = zero) */
  const __m128i pick_ac = _mm_setr_epi8(0, 1, 2, 3, 4, 5, -128, -128, -128, -128, 8, 9, 10, 11, 12, 13);
  const __m128i pick_b = _mm_setr_epi8(-128, -128, -128, -128, -128, -128, 0, 1, 4, 5, -128, -128,
                                       -128, -128, -128, -128);
  const __m256i empty = _mm256_set1_epi16(-1), one = _mm256_set1_epi16(1);
  for (; k < k1; k += U16_WINDOW_LANES) {
    const int n = k1 - k < U16_WINDOW_LANES ? (int)(k1 - k) : U16_WINDOW_LANES;
    __m128i v[U16_WINDOW_LANES];
    for (int l = 0; l < U16_WINDOW_LANES; l++) {
      const int32_t off = l < n ? s->win_off[k + l] : -1;
      if (off < 0) {
        v[l] = _mm_set1_epi16(-1);
        continue;
      }
      const __m128i bad = _mm_loadu_si128((const __m128i *)(s->win_bad + 8 * (k + l)));
      const uint16_t *p = y + off;
      const __m128i a = _mm_loadl_epi64((const __m128i *)p);
      const __m128i b = _mm_loadl_epi64((const __m128i *)(p + w));
      const __m128i c = _mm_loadl_epi64((const __m128i *)(p + 2 * w));
      const __m128i ac = _mm_shuffle_epi8(_mm_unpacklo_epi64(a, c), pick_ac);
      v[l] = _mm_or_si128(_mm_or_si128(ac, _mm_shuffle_epi8(b, pick_b)), bad);
    }
    /* pixels 0..7 in the low halves, 8..15 in the high; transposed: x[q]
     * holds slot q of every pixel */
    __m256i y8[8], t[8], u[8], x[8];
    for (int i = 0; i < 8; i++) y8[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(v[i]), v[i + 8], 1);
    for (int i = 0; i < 4; i++) {
      t[2 * i] = _mm256_unpacklo_epi16(y8[2 * i], y8[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi16(y8[2 * i], y8[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
      u[4 * i] = _mm256_unpacklo_epi32(t[4 * i], t[4 * i + 2]);
      u[4 * i + 1] = _mm256_unpackhi_epi32(t[4 * i], t[4 * i + 2]);
      u[4 * i + 2] = _mm256_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
      u[4 * i + 3] = _mm256_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
      x[2 * i] = _mm256_unpacklo_epi64(u[i], u[i + 4]);
      x[2 * i + 1] = _mm256_unpackhi_epi64(u[i], u[i + 4]);
    }
#define CS(i, j)                                      \
  do {                                                \
    const __m256i lo_ = _mm256_min_epu16(x[i], x[j]); \
    x[j] = _mm256_max_epu16(x[i], x[j]);              \
    x[i] = lo_;                                       \
  } while (0)
    MEDIAN8_NETWORK(CS);
#undef CS
    __m256i nv;
    if (s->flagged) { /* the slots below 0xFFFF */
      nv = _mm256_set1_epi16(8);
      for (int q = 0; q < 8; q++) nv = _mm256_add_epi16(nv, _mm256_cmpeq_epi16(x[q], empty));
    } else {
      uint8_t cnt[U16_WINDOW_LANES] = {0};
      memcpy(cnt, s->nb_n + k, (size_t)n);
      nv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)cnt));
    }
    /* x[nv / 2] and x[nv / 2 - 1] of each lane */
    const __m256i half = _mm256_srli_epi16(nv, 1);
    __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
    for (int q = 0; q < 8; q++) {
      hi = _mm256_or_si256(hi, _mm256_and_si256(x[q], _mm256_cmpeq_epi16(half, _mm256_set1_epi16((short)q))));
      lo = _mm256_or_si256(lo, _mm256_and_si256(x[q], _mm256_cmpeq_epi16(half, _mm256_set1_epi16((short)(q + 1)))));
    }
    /* odd: the middle one; even: floor of the mean of the two, without
     * leaving 16 bits; none valid: 0 */
    const __m256i mean = _mm256_add_epi16(_mm256_and_si256(lo, hi),
                                          _mm256_srli_epi16(_mm256_xor_si256(lo, hi), 1));
    const __m256i odd = _mm256_cmpeq_epi16(_mm256_and_si256(nv, one), one);
    __m256i m = _mm256_blendv_epi8(mean, hi, odd);
    m = _mm256_andnot_si256(_mm256_cmpeq_epi16(nv, _mm256_setzero_si256()), m);
    uint16_t out[U16_WINDOW_LANES];
    _mm256_storeu_si256((__m256i *)out, m);
    for (int l = 0; l < n; l++)
      if (s->win_off[k + l] >= 0) y[s->bad_idx[k + l]] = out[l];
    for (int l = 0; l < n; l++)
      if (s->win_off[k + l] < 0) y[s->bad_idx[k + l]] = static_median_u16(y, s, k + l);
  }
  return k1;
}
#endif

/* Corrections of flagged pixels waiting to be written, oldest first. */
typedef struct pending_fix {
  int64_t idx;
  uint64_t value;
} pending_fix;

typedef struct pending_fifo {
  pending_fix *e;
  int64_t cap, head, n;
} pending_fifo;

typedef struct correct_job {
  const sl_kernel_args *a;
  const correct_state *s;
  bool gather; /* the static medians through static_medians_avx2 */
  const uint32_t *counts; /* the flag_counts input, or NULL */
  int failed; /* a worker could not allocate its FIFO */
} correct_job;

/* The flag scan's blocks are the flag-count groups, so that a block's count
 * comes from the input when it is connected. */
#define FLAG_SCAN_BLOCK SL_FLAG_GROUP_PIXELS

/* Per dtype: the medians, the FIFO's write-back and the frame sweep. */
_Static_assert(FLAG_SCAN_BLOCK <= 65535, "a block's flag count fits 16 bits");
_Static_assert(FLAG_SCAN_BLOCK % 8 == 0, "blocks start at whole bytes of a ones bitmap");
#define CORRECT_FUNCS(S, T, TMAX, ACC)                                                           \
  /* Static bad pixel k: median of its statically valid neighbours that do not               \
   * hold the flag value (with flagged). */                                                  \
  static inline T static_median_##S(const T *y, const correct_state *s, int64_t k) {         \
    uint64_t v[8] = {MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY,                 \
                     MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY};                \
    const int64_t *nb = s->nb + 8 * k;                                                       \
    int nv = 0;                                                                              \
    for (int q = 0; q < s->nb_n[k]; q++) {                                                   \
      T t = y[nb[q]];                                                                        \
      int ok = !(s->flagged && t == (T)(TMAX));                                              \
      v[nv] = ok ? (uint64_t)t : MEDIAN_EMPTY;                                               \
      nv += ok;                                                                              \
    }                                                                                        \
    return (T)median8(v, nv);                                                                \
  }                                                                                          \
  /* Static bad pixels [k, k1), each from its statically valid neighbours: with             \
   * the median, eight at a time through median8_lanes (values below 2^32 - 1:              \
   * u8 and u16 frames), the rest one by one. Static corrections never read                 \
   * each other (a static bad pixel is nobody's neighbour), so computing eight               \
   * before writing them gives the same bytes as one at a time. */                           \
  static inline __attribute__((always_inline)) void fix_static_run_##S(                       \
      T *y, const correct_state *s, int64_t k, int64_t k1, bool gather) {                    \
    if (s->policy != POLICY_MEDIAN) {                                                        \
      for (; k < k1; k++) y[s->bad_idx[k]] = 0;                                              \
      return;                                                                                \
    }                                                                                        \
    if (gather) k = STATIC_MEDIANS_GATHER(y, s, k, k1);                                      \
    if (sizeof(T) < 4)                                                                       \
      for (; k + MEDIAN_LANES <= k1; k += MEDIAN_LANES) {                                    \
        uint32_t v[8][MEDIAN_LANES], out[MEDIAN_LANES];                                      \
        int nv[MEDIAN_LANES];                                                                \
        for (int l = 0; l < MEDIAN_LANES; l++) {                                             \
          const int64_t *nb = s->nb + 8 * (k + l);                                           \
          const int cnt = s->nb_n[k + l];                                                    \
          nv[l] = 0;                                                                         \
          for (int q = 0; q < 8; q++) {                                                      \
            T t = q < cnt ? y[nb[q]] : (T)(TMAX);                                            \
            int ok = q < cnt && !(s->flagged && t == (T)(TMAX));                             \
            v[q][l] = ok ? (uint32_t)t : LANE_EMPTY;                                         \
            nv[l] += ok;                                                                     \
          }                                                                                  \
        }                                                                                    \
        median8_lanes(v, nv, out);                                                           \
        for (int l = 0; l < MEDIAN_LANES; l++) y[s->bad_idx[k + l]] = (T)out[l];             \
      }                                                                                      \
    for (; k < k1; k++) y[s->bad_idx[k]] = static_median_##S(y, s, k);                       \
  }                                                                                          \
  /* Pixel i, flagged in this frame: median of its 3x3 neighbours inside the                 \
   * detector, not static bad and not at the flag value. */                                  \
  static inline T flagged_median_##S(const T *y, const correct_state *s, int64_t i) {        \
    uint64_t v[8] = {MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY,                 \
                     MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY, MEDIAN_EMPTY};                \
    const int64_t w = s->w, r = i / w, c = i % w;                                            \
    int nv = 0;                                                                              \
    for (int64_t rr = r - 1; rr <= r + 1; rr++) {                                            \
      if (rr < 0 || rr >= s->h) continue;                                                    \
      for (int64_t cc = c - 1; cc <= c + 1; cc++) {                                          \
        if (cc < 0 || cc >= w || (rr == r && cc == c)) continue;                             \
        int64_t q = rr * w + cc;                                                             \
        if (s->bad[q] || y[q] == (T)(TMAX)) continue;                                        \
        v[nv++] = y[q];                                                                      \
      }                                                                                      \
    }                                                                                        \
    return (T)median8(v, nv);                                                                \
  }                                                                                          \
  /* Writes the waiting corrections before index `before`. */                                \
  static inline void write_back_##S(T *y, pending_fifo *f, int64_t before) {                 \
    while (f->n > 0 && f->e[f->head].idx < before) {                                         \
      y[f->e[f->head].idx] = (T)f->e[f->head].value;                                         \
      f->head = f->head + 1 == f->cap ? 0 : f->head + 1;                                     \
      f->n--;                                                                                \
    }                                                                                        \
  }                                                                                          \
  /* Pixel i of block [b0, b1) is flagged and not static bad. */                             \
  static inline void fix_flagged_##S(T *y, const correct_state *s, pending_fifo *f,          \
                                     int64_t i) {                                            \
    if (s->policy != POLICY_MEDIAN) {                                                        \
      y[i] = 0; /* no correction reads neighbour values */                                   \
      return;                                                                                \
    }                                                                                        \
    T m = flagged_median_##S(y, s, i);                                                       \
    write_back_##S(y, f, (i / s->w - 1) * s->w);                                             \
    int64_t at = f->head + f->n < f->cap ? f->head + f->n : f->head + f->n - f->cap;         \
    f->e[at] = (pending_fix){i, m};                                                          \
    f->n++;                                                                                  \
  }                                                                                          \
  /* One frame, in place (inlined into the range function and its AVX2 clone);             \
   * counts: the frame's flag counts per block, or NULL to count here. */                    \
  static inline __attribute__((always_inline)) void fix_frame_##S(                           \
      T *restrict y, const correct_state *s, pending_fifo *f, const uint32_t *counts,        \
      bool gather) {                                                                         \
    const bool median = s->policy == POLICY_MEDIAN;                                          \
    const int64_t item = s->h * s->w, n_bad = s->n_bad;                                      \
    int64_t k = 0; /* next static bad pixel */                                               \
    if (!s->flagged) {                                                                       \
      fix_static_run_##S(y, s, 0, n_bad, gather);                                                    \
      return;                                                                                \
    }                                                                                        \
    if (counts) { /* a pixel at the flag value is static bad (the usual frame): one run */   \
      uint64_t at_flag = 0, static_at_flag = 0;                                              \
      for (int64_t g = 0; g * FLAG_SCAN_BLOCK < item; g++) at_flag += counts[g];             \
      for (int64_t q = 0; q < n_bad; q++) static_at_flag += y[s->bad_idx[q]] == (T)(TMAX);   \
      if (at_flag == static_at_flag) {                                                       \
        fix_static_run_##S(y, s, 0, n_bad, gather);                                                  \
        return;                                                                              \
      }                                                                                      \
    }                                                                                        \
    f->head = f->n = 0;                                                                      \
    for (int64_t b0 = 0; b0 < item; b0 += FLAG_SCAN_BLOCK) {                                 \
      int64_t b1 = b0 + FLAG_SCAN_BLOCK < item ? b0 + FLAG_SCAN_BLOCK : item;                \
      ACC at_flag = 0, static_at_flag = 0;                                                   \
      if (counts)                                                                            \
        at_flag = (ACC)counts[b0 / FLAG_SCAN_BLOCK];                                         \
      else                                                                                   \
        for (int64_t i = b0; i < b1; i++) at_flag += (ACC)(y[i] == (T)(TMAX));               \
      int64_t k1 = k;                                                                        \
      for (; k1 < n_bad && s->bad_idx[k1] < b1; k1++)                                        \
        static_at_flag += y[s->bad_idx[k1]] == (T)(TMAX);                                    \
      if (at_flag == static_at_flag) { /* only static bad pixels here */                     \
        fix_static_run_##S(y, s, k, k1, gather);                                                     \
        k = k1;                                                                              \
        continue;                                                                            \
      }                                                                                      \
      for (int64_t i = b0; i < b1; i++) {                                                    \
        if (s->bad[i]) {                                                                     \
          y[i] = median ? static_median_##S(y, s, k) : 0;                                    \
          k++;                                                                               \
        } else if (y[i] == (T)(TMAX)) {                                                      \
          fix_flagged_##S(y, s, f, i);                                                       \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    write_back_##S(y, f, item);                                                              \
  }                                                                                          \
  SL_HOT_CLONES static void correct_range_##S(void *ctx, int64_t begin, int64_t end,         \
                                              int worker) {                                  \
    (void)worker;                                                                            \
    correct_job *j = ctx;                                                                    \
    const correct_state *s = j->s;                                                           \
    const int64_t item = s->h * s->w;                                                        \
    pending_fifo f = {NULL, 2 * s->w, 0, 0};                                                 \
    if (s->policy == POLICY_MEDIAN && s->flagged) {                                          \
      f.e = malloc((size_t)f.cap * sizeof *f.e);                                             \
      if (!f.e) {                                                                            \
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);                                   \
        return;                                                                              \
      }                                                                                      \
    }                                                                                        \
    const uint32_t *counts = j->counts;                                                      \
    const int64_t groups = sl_flag_groups(item);                                             \
    for (int64_t p = begin; p < end; p++) {                                                  \
      const T *x = (const T *)j->a->in[0] + p * item;                                        \
      T *y = (T *)j->a->out[0] + p * item;                                                   \
      if (y != x) memcpy(y, x, (size_t)item * sizeof(T));                                   \
      if (s->policy != POLICY_NONE)                                                          \
        fix_frame_##S(y, s, &f, counts ? counts + p * groups : NULL, j->gather);             \
    }                                                                                        \
    free(f.e);                                                                               \
  }
/* (the AVX2 medians where the build has them; `gather` is false otherwise) */
#if SL_MADD_X86
/* (u16: sixteen at a time from their windows; u8: eight by gathers) */
#define STATIC_MEDIANS_GATHER(y, s, k, k1)                                                   \
  static_medians_avx2((uint8_t *)(y), s,                                                   \
                      sizeof *(y) == 2 ? static_medians_u16((uint16_t *)(void *)(y), s, k, k1) \
                                       : (k),                                              \
                      k1)
#else
#define STATIC_MEDIANS_GATHER(y, s, k, k1) (k)
#endif
/* ACC counts a block's pixels at the flag value: as narrow as holds
 * FLAG_SCAN_BLOCK, so the count vectorises at the pixels' width. */
CORRECT_FUNCS(u8, uint8_t, 0xFFu, uint16_t)
CORRECT_FUNCS(u16, uint16_t, 0xFFFFu, uint16_t)
CORRECT_FUNCS(u32, uint32_t, 0xFFFFFFFFu, uint32_t)
#undef CORRECT_FUNCS
#undef STATIC_MEDIANS_GATHER

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
  if (s->policy == POLICY_NONE && a->out[0] == a->in[0]) return SL_OK; /* in place: nothing to do */
  sl_simd path;
  sl_code rc = sl_simd_resolve((sl_simd)mask_correct_params_of(a->node)->simd, &path, a->err);
  if (rc != SL_OK) return rc;
  correct_job j = {a, s, path == SL_SIMD_AVX2 && s->lane_off,
                   counts_connected(a->node) ? a->in[2] : NULL, 0};
  sl_dtype t = a->node->in[0].dtype;
  sl_range_fn fn = t == SL_U8 ? correct_range_u8 : t == SL_U16 ? correct_range_u16 : correct_range_u32;
  int64_t item = s->h * s->w;
  /* Frames a range: about 64k pixels where every pixel is read (the copy,
   * the flag scan); with the decoder's flag counts a frame costs its bad
   * pixels, not its size, and ranges of ~1k of them: 73 bad pixels of 192 x
   * 192 frames made ranges of 2 frames at 2 threads (0.8 us each), and
   * virtual_image's mask took 4.14-4.52 ms against 3.90-4.33 with 13
   * frames a range (dev VM, 16,384 frames, five alternated runs each). */
  const bool by_bad = j.counts && a->out[0] == a->in[0] && s->flagged;
  int64_t grain = by_bad ? 1024 / (s->n_bad + 1) + 1 : 65536 / (item + 1) + 1;
  a->backend->ops->parallel_for(a->backend, a->pos_count, grain, fn, &j);
  if (j.failed)
    return sl_fail(a->err, SL_ERR_NOMEM, "mask_correct: out of memory for %lld bytes of scratch",
                   (long long)(2 * s->w * (int64_t)sizeof(pending_fix)));
  return SL_OK;
}

/* The cost of the in-place kernel (the plan grants it on the shipped
 * pipelines); given a buffer of its own, the node also copies each frame. */
static void correct_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const correct_state *s = n->state;
  const mask_correct_params *p = mask_correct_params_of(n);
  int64_t item = sl_desc_item_elems(&n->in[0]), es = (int64_t)sl_dtype_size(n->in[0].dtype);
  /* Before the mask is read, the static list is bounded by what planning
   * knows of it (static_bad_bound). */
  int64_t n_bad = s && s->built ? s->n_bad : static_bad_bound(n);
  if (p->policy != POLICY_NONE) {
    /* a bad pixel and its 8 neighbours; overlapping neighbourhoods are read
     * from cache, so at most the whole frame comes from memory */
    int64_t touched = n_bad * (p->policy == POLICY_MEDIAN ? 9 : 1);
    if (touched > item) touched = item;
    /* with flag_counts, the frame is not scanned: its counts are read instead */
    const bool scan = p->flagged && !counts_connected(n);
    const int64_t counts_bytes = p->flagged && counts_connected(n) ? sl_desc_item_bytes(&n->in[2]) : 0;
    c->bytes_read = positions * (es * (scan ? item : touched) + counts_bytes);
    c->bytes_written = positions * es * n_bad;
    /* Work in units of about a third of a nanosecond, weighted by what each
     * part took on the build VM (Zen 3, 1 thread, 192 x 192 u16 frames with
     * 0, 73 and 1000 bad pixels): a bad pixel's median 10 ns (30), a frame's
     * flag counts summed and compared with the static list's 100 ns (8 a
     * 1024-pixel group, 36 groups), a frame scanned for the flag value
     * instead 1.8 us (a seventh of a unit a pixel). calibrate fits one rate
     * to their sum, so the weights must hold relative to each other: with a
     * count a group, an acquisition without bad pixels calibrated a rate
     * that overstated a bad pixel 7x. */
    const int64_t per_frame = (scan ? item / 7 : 8 * (counts_bytes / 4)) + 16;
    c->ops = positions * (per_frame + 30 * n_bad);
  }
  /* State: file mask and bad map (H*W each), and per bad pixel its index, 8
   * neighbour indices and a count. */
  c->state_bytes = 2 * item + n_bad * (int64_t)(sizeof(int64_t) * 9 + 1);
  if (gather_lanes_fit((correct_policy)p->policy, es, item * es)) c->state_bytes += gather_lanes_bytes(n_bad);
  /* CUDA (mask_correct.cu): bad map and list, a u32 correction per (frame,
   * static bad pixel), and with `flagged` a shadow chunk and a bit per pixel
   * for the flagged corrections (and with flag_counts, a u32 per group). */
#ifdef SLUICE_HAVE_CUDA
  if (p->policy != POLICY_NONE) {
    const sl_cuda_frame_shape f = sl_glue_frame_shape(&n->in[0]);
    c->device_state_bytes = sl_cuda_mask_correct_table_bytes(&f, p->flagged, counts_connected(n), positions, n_bad);
  }
#endif
}

static const sl_port_def correct_in[] = {
    {"frames", "streamed detector frames u8/u16/u32 [scan... | H, W]", "counts", false},
    {"mask", "optional whole [H, W] u8/u16/u32 pixel mask, > 0 = bad (e.g. the detector's "
             "pixel_mask)",
     NULL, true},
    {"flag_counts", "optional: bslz4_decode's flag_counts of the same frames (with `flagged`, "
                    "the frames are then not scanned for the flag value)",
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
      .has_counts = counts_connected(n),
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
    .in_place_outputs = 1u << 0, /* corrected frames over the input frames */
    .kernel = {[SL_BACKEND_CPU] = correct_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(correct_cuda)},
};
