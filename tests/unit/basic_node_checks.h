/* Checks the tests of the basic nodes (test_constant.c, test_ramp.c,
 * test_affine.c, test_sum.c, test_subtract.c, test_clip.c) share, on top of
 * node_harness.h: a node that must build, one that must be refused with a
 * given message, a kernel run in chunks on a given number of threads, and
 * the descriptor's place in the registry. The references stay in the tests. */
#ifndef SL_BASIC_NODE_CHECKS_H
#define SL_BASIC_NODE_CHECKS_H

#include "nodes/registry.h"
#include "tests/unit/node_harness.h"

/* node_make that must succeed (the message is shown if it does not). */
static inline void node_make_ok(sl_node *n, const sl_node_desc *d, const kv *over, int n_over,
                                const sl_tensor_desc *in, int n_in) {
  sl_error e;
  sl_code rc = node_make(n, d, over, n_over, in, n_in, &e);
  if (rc != SL_OK) fail_msg("%s: unexpected error: %s", d->type, e.msg);
}

/* node_make that must fail with SL_ERR_PIPELINE and `needle` in the message. */
static inline void node_make_refused(const sl_node_desc *d, const kv *over, int n_over,
                                     const sl_tensor_desc *in, int n_in, const char *needle) {
  sl_node n;
  sl_error e;
  sl_code rc = node_make(&n, d, over, n_over, in, n_in, &e);
  if (rc != SL_ERR_PIPELINE || !strstr(e.msg, needle))
    fail_msg("%s: expected an error with '%s', got %d '%s'", d->type, needle, rc, e.msg);
  node_free(&n);
}

/* Runs the CPU kernel over npos positions in chunks of `chunk` on `threads`
 * threads: input 0 streamed (NULL for a source), `whole` the one whole
 * input 1 (or NULL), one output. */
static inline void run_chunked(sl_node *n, const void *in0, const void *whole, void *out,
                               int64_t npos, int64_t chunk, int threads) {
  sl_backend *b = backend(threads);
  sl_error e;
  const void *whole_in[1] = {whole};
  void *outs[1] = {out};
  sl_code rc = run_stream(n, b, in0, whole_in, whole ? 1 : 0, outs, npos, chunk, &e);
  if (rc != SL_OK) fail_msg("%s: kernel failed: %s", n->desc->type, e.msg);
  sl_cpu_backend_ops.destroy(b);
}

/* The registry lists the descriptor under its type, with a CPU kernel. */
static inline void check_registered(const sl_node_desc *d, const char *type) {
  assert_string_equal(d->type, type);
  assert_ptr_equal(sl_registry_find(sl_nodes_registry(), type), d);
  assert_non_null(d->kernel[SL_BACKEND_CPU]);
  assert_non_null(d->infer);
  assert_non_null(d->cost);
}

/* The node's cost for `positions` positions. */
static inline sl_node_cost cost_of(const sl_node *n, int64_t positions) {
  sl_node_cost c;
  n->desc->cost(n, positions, &c);
  return c;
}

#endif
