/* A buffer pool over a backend's allocator (blocks of 64-byte multiples,
 * reused best fit). It counts the bytes
 * it holds and their peak, which the report sets beside the planned peak.
 * Whoever acquires releases, and only after the batch that used the buffer
 * has completed.
 *
 * A pool may first reserve an arena (sl_pool_reserve): one allocation of
 * the backend that the next acquisitions are carved from, SL_PLAN_ARENA_ALIGN
 * (cudaMalloc's alignment) apart, until it is used up; later ones take
 * blocks of their own. On a device each allocation costs the driver tens
 * of microseconds (the H200: the test set's stem_products took 0.9-1.1 ms
 * to set up its 23 blocks, 0.3 with one arena), so the executor reserves
 * the run's buffers, workspace, partials and tables at once
 * (sl_plan_arena_bytes). */
#ifndef SL_POOL_H
#define SL_POOL_H

#include "engine/backend/backend.h"

typedef struct sl_pool_block {
  void *ptr;
  int64_t bytes; /* sl_size_class of the first request */
  bool in_use;
  bool carved; /* from the arena: not given back on its own */
} sl_pool_block;

typedef struct sl_pool {
  sl_backend *backend;
  sl_pool_block *blocks;
  int n_blocks, cap_blocks;
  int64_t held_bytes, peak_bytes;
  char *arena;                  /* NULL: none reserved */
  int64_t arena_bytes, arena_used;
} sl_pool;

void sl_pool_init(sl_pool *p, sl_backend *b);
/* Reserves an arena of `bytes` (a multiple of SL_PLAN_ARENA_ALIGN) before
 * any acquisition; held from now on. */
sl_code sl_pool_reserve(sl_pool *p, int64_t bytes, sl_error *err);
/* A buffer of at least `bytes`, reusing the smallest free block that holds it. */
sl_code sl_pool_acquire(sl_pool *p, int64_t bytes, void **ptr, sl_error *err);
void sl_pool_release(sl_pool *p, void *ptr);
/* The backend's allocations the pool holds: its blocks of their own and
 * the arena. */
int sl_pool_allocations(const sl_pool *p);
/* Returns every block to the backend (all must be released). */
void sl_pool_destroy(sl_pool *p);

#endif
