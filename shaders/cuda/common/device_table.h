/* A node's device table carved into pieces (plain C: launchers in .cu files,
 * and node code that says how many bytes a launcher needs).
 *
 * A CUDA launcher never allocates device memory. Everything it keeps on the
 * device (tables, lists, error words, work areas) lies in its node's device
 * table: cost().device_state_bytes of device memory that the executor lends
 * from the run's pool, zeroed, for the whole run (sl_kernel_args.device_table,
 * engine/core/kernel_abi.h). So the plan counts every byte, and the report's
 * measured device peak holds it.
 *
 * Cost and launcher cannot disagree because one layout function does both:
 * the launcher writes `static void X_layout(sl_table *t, <shape>, X_pieces *o)`
 * that takes each piece with sl_table_take, in a fixed order. Run on
 * sl_table_counter() it only counts (the host-callable X_table_bytes that the
 * node's cost() returns as device_state_bytes); run on sl_table_lent(a) it
 * hands out the pointers, and sl_table_check fails, naming the node, when the
 * table lent is smaller than what was taken (cost and launcher disagree).
 *
 * Every piece starts SL_TABLE_ALIGN bytes apart from the table's start (the
 * pool's blocks come from cudaMalloc, aligned at least as much), so the
 * padding is part of the count and the same on every call. */
#ifndef SL_CUDA_DEVICE_TABLE_H
#define SL_CUDA_DEVICE_TABLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"

#ifdef __cplusplus
}
#endif

/* cudaMalloc's own alignment; cuFFT and 16-byte vector loads need no more. */
#define SL_TABLE_ALIGN 256

typedef struct sl_table {
  char *base;       /* NULL: counting only */
  int64_t capacity; /* bytes lent (counting: INT64_MAX) */
  int64_t used;     /* bytes taken so far, every piece rounded up to SL_TABLE_ALIGN */
} sl_table;

/* `bytes` rounded up to a whole number of SL_TABLE_ALIGN. */
static inline int64_t sl_table_round(int64_t bytes) {
  return (bytes + SL_TABLE_ALIGN - 1) / SL_TABLE_ALIGN * SL_TABLE_ALIGN;
}

/* A table that only counts what a layout takes. */
static inline sl_table sl_table_counter(void) {
  sl_table t = {0, INT64_MAX, 0};
  return t;
}

/* The table the executor lent the call (capacity 0 when it lent none). */
static inline sl_table sl_table_lent(const sl_kernel_args *a) {
  sl_table t = {(char *)a->device_table, a->device_table ? a->device_table_bytes : 0, 0};
  return t;
}

/* The next piece of `bytes` (> 0): its place in the table, or NULL when
 * counting or when the table is too small (sl_table_check says so). Pieces
 * of 0 bytes take nothing and are NULL. */
static inline void *sl_table_take(sl_table *t, int64_t bytes) {
  if (bytes <= 0) return 0;
  int64_t at = t->used;
  t->used += sl_table_round(bytes);
  if (!t->base || t->used > t->capacity) return 0;
  return t->base + at;
}

/* After a layout on a lent table: SL_OK, or SL_ERR_INTERNAL naming the node
 * when the table was too small for what the launcher took or is not aligned. */
static inline sl_code sl_table_check(const sl_table *t, sl_kernel_args *a, const char *node) {
  if (t->used > t->capacity)
    return sl_fail(a->err, SL_ERR_INTERNAL,
                   "%s: the launcher takes %lld bytes of device table, the node's cost() declared %lld "
                   "(cost and launcher disagree)",
                   node, (long long)t->used, (long long)t->capacity);
  if (t->base && (uintptr_t)t->base % SL_TABLE_ALIGN)
    return sl_fail(a->err, SL_ERR_INTERNAL, "%s: the device table lent is not aligned to %d bytes", node,
                   SL_TABLE_ALIGN);
  return SL_OK;
}

#endif
