/* The CUDA tests that call a node's launcher themselves lend it its device
 * table as the executor does (engine/exec/exec.c): cost().device_state_bytes
 * of device memory for calls of up to the chunk's positions, zeroed, the
 * same table for every call of the node's run; when the run is over the
 * launcher's device state (node->dev_state, which points into the table)
 * is freed first, then the table goes back. Header-only; the CUDA benches
 * use it too. */
#ifndef SL_TEST_DEVICE_TABLE_LEND_H
#define SL_TEST_DEVICE_TABLE_LEND_H

#include <stdint.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"

typedef struct test_table {
  sl_backend *b;
  void *ptr; /* NULL: none lent */
  int64_t bytes;
} test_table;

/* What node n's cost declares for calls of `positions` and of `last`
 * positions (a shorter last chunk): the larger, as the planner takes it. */
static inline int64_t test_table_bytes(const sl_node *n, int64_t positions, int64_t last) {
  sl_node_cost c;
  n->desc->cost(n, positions, &c);
  int64_t bytes = c.device_state_bytes;
  n->desc->cost(n, last, &c);
  return c.device_state_bytes > bytes ? c.device_state_bytes : bytes;
}

/* Lends `bytes` of zeroed device memory on b, unless a table is lent
 * already; nothing on a backend without device memory or for 0 bytes. */
static inline sl_code test_table_lend(test_table *t, sl_backend *b, int64_t bytes, sl_error *e) {
  if (t->ptr || bytes <= 0 || !b->caps.device_memory) return SL_OK;
  sl_code rc = b->ops->alloc(b, (size_t)bytes, &t->ptr, e);
  if (rc != SL_OK) return rc;
  t->b = b;
  t->bytes = bytes;
  return b->ops->zero(b, t->ptr, (size_t)bytes, e);
}

/* The table in a call's args. */
static inline void test_table_args(const test_table *t, sl_kernel_args *a) {
  a->device_table = t->ptr;
  a->device_table_bytes = t->ptr ? t->bytes : 0;
}

/* The end of the node's run: its launcher's device state, then the table. */
static inline void test_table_give_back(test_table *t, void **dev_state, void (**dev_state_free)(void *)) {
  if (*dev_state && *dev_state_free) (*dev_state_free)(*dev_state);
  *dev_state = NULL;
  if (t->ptr) {
    sl_error e;
    sl_error_clear(&e);
    (void)t->b->ops->sync(t->b, &e);
    t->b->ops->free(t->b, t->ptr, (size_t)t->bytes);
  }
  memset(t, 0, sizeof *t);
}

/* One whole-node call of n's kernel for b's backend as one batch, with
 * the node's device table lent into *table (the caller gives it back with
 * test_table_give_back): lend, begin, encode, commit, wait, sync; the
 * first failing code (e filled). */
static inline sl_code test_run_whole_call(sl_backend *b, const sl_node *n, sl_kernel_args *a, test_table *table,
                                          sl_error *e) {
  const sl_backend_ops *o = b->ops;
  sl_code rc = test_table_lend(table, b, test_table_bytes(n, 1, 1), e);
  if (rc != SL_OK) return rc;
  test_table_args(table, a);
  rc = o->batch_begin(b, e);
  if (rc == SL_OK) rc = o->batch_encode(b, n->desc->kernel[b->caps.kind], a, e);
  if (rc == SL_OK) rc = o->batch_commit(b, e);
  sl_code w = o->batch_wait(b, e);
  if (rc == SL_OK) rc = w;
  if (rc == SL_OK) rc = o->sync(b, e);
  return rc;
}

#endif
