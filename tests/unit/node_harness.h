/* Harness shared by the node unit tests: builds an sl_node by hand (params
 * converted from YAML text, inputs connected, infer run) and calls a node's
 * CPU kernel the way the executor would (streamed input 0 in chunks of scan
 * positions, reduction outputs zeroed first, finalize after). Also the test
 * data helpers the tests have in common: the check of an expected error, a
 * xorshift generator, random frames
 * with values at the dtype max, pixel access and a synthetic_4dstem run.
 * Header-only: every tests/unit/test_*.c is its own executable.
 *
 * A test file may #define NH_RNG_SEED before including this to start rnd()
 * from another seed. The references stay in the test files. */
#ifndef SL_NODE_HARNESS_H
#define SL_NODE_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"
#include "engine/plan/plan.h"
#include "engine/pipeline/yaml_tree.h"
#include "tests/unit/lend_scratch.h"

#ifndef NH_RNG_SEED
#define NH_RNG_SEED 88172645463325252ULL
#endif

extern const sl_node_desc sl_node_synthetic_4dstem;

/* ---- nodes ----------------------------------------------------------------- */

/* A parameter given as YAML text; "" is an empty scalar. */
typedef struct kv {
  const char *name, *yaml;
} kv;

/* Builds a node of `d` with params from `over` (YAML text) or the defaults and
 * the first n_in input descriptors of `in` connected (in_src[k] = {k, 0}); the
 * rest are unconnected (SL_SRC_NONE). Runs infer; the node is usable for
 * prepare and the kernels when the result is SL_OK. Free with node_free in
 * every case. */
static inline sl_code node_make(sl_node *n, const sl_node_desc *d, const kv *over, int n_over,
                                const sl_tensor_desc *in, int n_in, sl_error *e) {
  memset(n, 0, sizeof *n);
  sl_error_clear(e);
  n->desc = d;
  n->id = "node";
  for (int k = 0; k < SL_MAX_PORTS; k++) n->in_src[k] = (sl_edge_src){SL_SRC_NONE, 0};
  n->params = calloc((size_t)(d->n_params ? d->n_params : 1), sizeof *n->params);
  for (int i = 0; i < d->n_params; i++) {
    const char *text = d->params[i].default_value;
    for (int k = 0; k < n_over; k++)
      if (!strcmp(over[k].name, d->params[i].name)) text = over[k].yaml;
    assert_non_null(text); /* required params are given by the test */
    sl_yaml *y = NULL;
    if (text[0] == 0) {
      sl_loc loc = {"test", 1, 1};
      y = sl_yaml_new_scalar("", loc);
    } else {
      assert_int_equal(sl_yaml_load_string(text, strlen(text), "test", &y, e), SL_OK);
    }
    sl_code rc = sl_param_convert(&d->params[i], y, ".", &n->params[i], e);
    sl_yaml_free(y);
    if (rc) return rc;
  }
  sl_node_bind_typed_params(n);
  n->n_in = d->n_inputs;
  n->n_out = d->n_outputs;
  for (int k = 0; k < n_in; k++) {
    n->in[k] = in[k];
    n->in_src[k] = (sl_edge_src){k, 0};
  }
  return d->infer(n, e);
}

static inline void node_free(sl_node *n) {
  if (n->dev_state && n->dev_state_free) n->dev_state_free(n->dev_state); /* device kernels' state */
  n->dev_state = NULL;
  if (n->desc->release && n->state) n->desc->release(n);
  for (int i = 0; i < n->desc->n_params; i++) sl_param_value_free(&n->params[i]);
  free(n->params);
  free(n->typed_params);
  n->typed_params = NULL;
  for (int i = 0; i < n->n_notes; i++) free(n->notes[i]);
  free(n->notes);
  for (int i = 0; i < n->n_reads; i++) free(n->reads[i]);
  free(n->reads);
}

/* The note "key: ..." of a node, or NULL. */
static inline const char *note(const sl_node *n, const char *key) {
  size_t k = strlen(key);
  for (int i = 0; i < n->n_notes; i++)
    if (!strncmp(n->notes[i], key, k) && n->notes[i][k] == ':') return n->notes[i];
  return NULL;
}

/* ---- expected errors ----------------------------------------------------------- */

/* A call gave `rc` and `e`: it must have failed with `code`, the message
 * holding `needle` and, when not NULL, `needle2` (printed when not). */
static inline void expect_failed(sl_code rc, const sl_error *e, sl_code code, const char *needle,
                                const char *needle2) {
  if (rc != code || !strstr(e->msg, needle) || (needle2 && !strstr(e->msg, needle2)))
    fprintf(stderr, "rc %d msg '%s' (want %d with '%s'%s%s)\n", rc, e->msg, code, needle,
            needle2 ? " and " : "", needle2 ? needle2 : "");
  assert_int_equal(rc, code);
  assert_non_null(strstr(e->msg, needle));
  if (needle2) assert_non_null(strstr(e->msg, needle2));
}

/* node_make of `d` (params `over`, the first n_in descriptors of `in`) must
 * fail as expect_failed says. */
static inline void expect_node_error(const sl_node_desc *d, const kv *over, int n_over,
                                     const sl_tensor_desc *in, int n_in, sl_code code,
                                     const char *needle, const char *needle2) {
  sl_node n;
  sl_error e;
  sl_code rc = node_make(&n, d, over, n_over, in, n_in, &e);
  expect_failed(rc, &e, code, needle, needle2);
  node_free(&n);
}

/* ---- running kernels ---------------------------------------------------------- */

static inline sl_backend *backend(int threads) {
  sl_backend *b = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_cpu_backend_ops.create(threads, &b, &e), SL_OK);
  return b;
}

/* Worker partials of a call (sl_kernel_args.worker_partial) as the executor
 * treats them: before the call (!merge) each set to the combine's identity;
 * after it merged into out[k], worker 0, 1, ... in order. */
static inline void worker_partials(const sl_node *n, sl_backend *b, const sl_kernel_args *a, bool merge) {
  for (int k = 0; k < n->n_out; k++)
    for (int w = 0; a->worker_partial[k] && w < b->ops->workers(b); w++) {
      sl_combine c = sl_node_out_combine(n, k);
      if (merge) sl_combine_merge_host(c, n->out[k].dtype, a->out[k], sl_worker_partial(a, k, w), 0,
                                       sl_desc_elems(&n->out[k]));
      else sl_combine_identity_host(c, n->out[k].dtype, sl_worker_partial(a, k, w), 0, sl_desc_elems(&n->out[k]));
    }
}

/* Where the executor points whole output k (`whole`: all of it) of a node
 * that streams in its call over positions [s, ...) of a scan of npos: a
 * concat's chunk place (scan axes last: element (0, .., 0, s)), NULL for an
 * output finalize alone writes, else the whole buffer. n->phase must be
 * SL_PHASE_STREAM (the declared combines are its reductions'). */
static inline void *chunk_out(const sl_node *n, int k, void *whole, int64_t s, int64_t npos) {
  const sl_combine c = sl_node_out_combine(n, k);
  if (sl_node_out_finalize_only(n, k)) return NULL;
  if (c == SL_COMBINE_CONCAT) return (char *)whole + s * (sl_desc_bytes(&n->out[k]) / npos);
  if (c == SL_COMBINE_CONCAT_SCAN_LAST) return (char *)whole + s * (int64_t)sl_dtype_size(n->out[k].dtype);
  return whole;
}

/* Runs a stream node over `npos` positions in chunks of `chunk`: input 0 is
 * streamed (`in0`, item_bytes per position; NULL for a source), inputs 1..
 * are whole (`whole_in`); streamed outputs advance with the chunk, whole
 * outputs (reductions) start from their combine's identity (zero when none
 * is declared) and are merged as the executor merges declared combines;
 * then finalize.
 * Returns the first failing code (e filled). */
static inline sl_code run_stream(sl_node *n, sl_backend *b, const void *in0,
                                 const void *const *whole_in, int n_whole_in, void *const *out,
                                 int64_t npos, int64_t chunk, sl_error *e) {
  sl_error_clear(e);
  n->phase = SL_PHASE_STREAM; /* as the graph makes it: the declared combines are its reductions' */
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k].stream_rank == 0)
      sl_combine_identity_host(sl_node_out_combine(n, k), n->out[k].dtype, out[k], 0, sl_desc_elems(&n->out[k]));
  int64_t ib = in0 ? sl_desc_item_bytes(&n->in[0]) : 0;
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  void *scratch = lend_scratch(n, b, chunk < npos ? chunk : npos, &a);
  const sl_kernel_args lent = a;
  for (int64_t s = 0; s < npos; s += chunk) {
    memset(&a, 0, sizeof a);
    a.workspace = lent.workspace;
    a.worker_scratch = lent.worker_scratch, a.worker_scratch_stride = lent.worker_scratch_stride;
    memcpy(a.worker_partial, lent.worker_partial, sizeof a.worker_partial);
    a.backend = b;
    a.node = n;
    a.state = n->state;
    a.pos_start = s;
    a.pos_count = npos - s < chunk ? npos - s : chunk;
    a.chunk = s / chunk;
    a.n_chunks = (npos + chunk - 1) / chunk;
    if (in0) a.in[0] = (const char *)in0 + s * ib;
    for (int k = 0; k < n_whole_in; k++) a.in[1 + k] = whole_in[k];
    /* Whole outputs with a declared combine, as the executor does it: a
     * concat's chunk is written at its positions (scan axes last: from
     * element (0, .., 0, s), rows a scan apart), an element-wise
     * reduction's partial starts from the identity and is merged after
     * (one the kernel folds is handed the accumulator itself). */
    void *partial[SL_MAX_PORTS] = {0};
    for (int k = 0; k < n->n_out; k++) {
      sl_combine c = sl_node_out_combine(n, k);
      if (n->out[k].stream_rank) a.out[k] = (char *)out[k] + s * sl_desc_item_bytes(&n->out[k]);
      else a.out[k] = chunk_out(n, k, out[k], s, npos);
      if (sl_combine_elementwise(c) && !(n->desc->fold_outputs >> k & 1u)) { /* a fold: the accumulator */
        partial[k] = malloc((size_t)sl_desc_bytes(&n->out[k]));
        sl_combine_identity_host(c, n->out[k].dtype, partial[k], 0, sl_desc_elems(&n->out[k]));
        a.out[k] = partial[k];
      }
    }
    a.err = e;
    worker_partials(n, b, &a, false);
    sl_code rc = n->desc->kernel[SL_BACKEND_CPU](&a);
    if (!rc) worker_partials(n, b, &a, true);
    for (int k = 0; k < n->n_out; k++) {
      if (!partial[k]) continue;
      if (!rc) sl_combine_merge_host(sl_node_out_combine(n, k), n->out[k].dtype, out[k], partial[k], 0,
                                     sl_desc_elems(&n->out[k]));
      free(partial[k]);
    }
    if (rc) {
      free(scratch);
      return rc;
    }
  }
  free(scratch);
  if (n->desc->finalize[SL_BACKEND_CPU]) {
    memset(&a, 0, sizeof a);
    a.backend = b;
    a.node = n;
    a.state = n->state;
    a.pos_count = npos;
    for (int k = 0; k < n_whole_in; k++) a.in[1 + k] = whole_in[k];
    for (int k = 0; k < n->n_out; k++) a.out[k] = out[k];
    a.err = e;
    return n->desc->finalize[SL_BACKEND_CPU](&a);
  }
  return SL_OK;
}

/* Runs a whole node once on a backend of `threads` workers (run_whole: 1): in[k] and out[k] (caller
 * sized) are the ports; outputs are not zeroed. */
static inline sl_code run_whole_threads(sl_node *n, int threads, const void *const *in, int n_in,
                                        void *const *out, sl_error *e) {
  sl_backend *b = backend(threads);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b, a.node = n, a.state = n->state, a.pos_count = 1, a.n_chunks = 1, a.err = e;
  for (int k = 0; k < n_in; k++) a.in[k] = in[k];
  for (int k = 0; k < n->n_out; k++) a.out[k] = out[k];
  void *scratch = lend_scratch(n, b, 1, &a);
  sl_code rc = n->desc->kernel[SL_BACKEND_CPU](&a);
  free(scratch);
  sl_cpu_backend_ops.destroy(b);
  return rc;
}

static inline sl_code run_whole(sl_node *n, const void *const *in, int n_in, void *const *out,
                                sl_error *e) {
  return run_whole_threads(n, 1, in, n_in, out, e);
}

/* ---- test data ---------------------------------------------------------------- */

static inline uint64_t rnd(void) {
  static uint64_t g_rng = NH_RNG_SEED;
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static inline uint64_t dmax(sl_dtype t) {
  switch (t) {
    case SL_U8: return 0xFFu;
    case SL_U16: return 0xFFFFu;
    case SL_U32: return 0xFFFFFFFFu;
    default: return UINT64_MAX;
  }
}

/* Pixel i of u8/u16/u32/u64 data as u64. */
static inline uint64_t pix(const void *f, sl_dtype t, int64_t i) {
  switch (t) {
    case SL_U8: return ((const uint8_t *)f)[i];
    case SL_U16: return ((const uint16_t *)f)[i];
    case SL_U32: return ((const uint32_t *)f)[i];
    default: return ((const uint64_t *)f)[i];
  }
}

/* Sets pixel i of u8/u16/u32 data. */
static inline void set_pix(void *f, sl_dtype t, int64_t i, uint64_t x) {
  if (t == SL_U8) ((uint8_t *)f)[i] = (uint8_t)x;
  else if (t == SL_U16) ((uint16_t *)f)[i] = (uint16_t)x;
  else ((uint32_t *)f)[i] = (uint32_t)x;
}

/* Random frames; about 1 in 16 pixels at the dtype max (the flag value). */
static inline void *random_frames(sl_dtype t, int64_t n) {
  void *f = malloc((size_t)n * sl_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    uint64_t v = rnd();
    set_pix(f, t, i, (v & 15) == 0 ? dmax(t) : (v >> 8) & dmax(t));
  }
  return f;
}

/* Streamed frames [rows, cols | h, w]. */
static inline sl_tensor_desc frames_desc(sl_dtype t, int64_t rows, int64_t cols, int64_t h,
                                         int64_t w) {
  int64_t d[4] = {rows, cols, h, w};
  return sl_desc_make(t, 4, d, 2);
}

/* ---- synthetic_4dstem ------------------------------------------------------------ */

/* One synthetic_4dstem acquisition: its output descriptors, the frames as
 * produced (dtype out[0].dtype; prefilled with 0xCD bytes), phase [R, C] and
 * com_expected [R, C, 2]. */
typedef struct synth_data {
  sl_tensor_desc out[3];
  int64_t rows, cols, h, w, npos;
  void *frames;
  double *phase, *com;
} synth_data;

static inline void synth_free(synth_data *s) {
  free(s->frames);
  free(s->phase);
  free(s->com);
}

/* Makes, prepares and runs synthetic_4dstem with params `over` in chunks of
 * `chunk` positions (all of them when chunk >= npos) on `threads` threads. */
static inline synth_data synth_run(const kv *over, int n_over, int64_t chunk, int threads) {
  sl_node n;
  sl_error e;
  sl_code rc = node_make(&n, &sl_node_synthetic_4dstem, over, n_over, NULL, 0, &e);
  if (rc) fprintf(stderr, "unexpected: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  synth_data s;
  memset(&s, 0, sizeof s);
  for (int k = 0; k < 3; k++) s.out[k] = n.out[k];
  s.rows = n.out[0].dims[0], s.cols = n.out[0].dims[1];
  s.h = n.out[0].dims[2], s.w = n.out[0].dims[3];
  s.npos = s.rows * s.cols;
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  size_t bytes = (size_t)sl_desc_bytes(&n.out[0]);
  s.frames = malloc(bytes);
  memset(s.frames, 0xCD, bytes);
  s.phase = malloc((size_t)sl_desc_bytes(&n.out[1]));
  s.com = malloc((size_t)sl_desc_bytes(&n.out[2]));
  void *outs[3] = {s.frames, s.phase, s.com};
  sl_backend *b = backend(threads);
  rc = run_stream(&n, b, NULL, NULL, 0, outs, s.npos, chunk < s.npos ? chunk : s.npos, &e);
  if (rc) fprintf(stderr, "synthetic_4dstem: %s\n", e.msg);
  assert_int_equal(rc, SL_OK);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  return s;
}

#endif
