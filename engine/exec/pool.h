/* A buffer pool over a backend's allocator (blocks of 64-byte multiples,
 * reused best fit). It counts the bytes
 * it holds and their peak, which the report sets beside the planned peak.
 * Whoever acquires releases, and only after the batch that used the buffer
 * has completed. */
#ifndef SL_POOL_H
#define SL_POOL_H

#include "engine/backend/backend.h"

typedef struct sl_pool_block {
  void *ptr;
  int64_t bytes; /* sl_size_class of the first request */
  bool in_use;
} sl_pool_block;

typedef struct sl_pool {
  sl_backend *backend;
  sl_pool_block *blocks;
  int n_blocks, cap_blocks;
  int64_t held_bytes, peak_bytes;
} sl_pool;

void sl_pool_init(sl_pool *p, sl_backend *b);
/* A buffer of at least `bytes`, reusing the smallest free block that holds it. */
sl_code sl_pool_acquire(sl_pool *p, int64_t bytes, void **ptr, sl_error *err);
void sl_pool_release(sl_pool *p, void *ptr);
/* Returns every block to the backend (all must be released). */
void sl_pool_destroy(sl_pool *p);

#endif
