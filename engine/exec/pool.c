#include "engine/exec/pool.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/plan/plan.h"

void sl_pool_init(sl_pool *p, sl_backend *b) {
  memset(p, 0, sizeof *p);
  p->backend = b;
}

sl_code sl_pool_reserve(sl_pool *p, int64_t bytes, sl_error *err) {
  if (p->arena || p->n_blocks || bytes <= 0 || bytes % SL_PLAN_ARENA_ALIGN)
    return sl_fail(err, SL_ERR_INTERNAL, "the buffer pool's arena must come first, a positive multiple of %d bytes",
                   SL_PLAN_ARENA_ALIGN);
  void *mem = NULL;
  sl_code rc = p->backend->ops->alloc(p->backend, (size_t)bytes, &mem, err);
  if (rc != SL_OK) return rc;
  p->arena = mem;
  p->arena_bytes = bytes;
  p->held_bytes += bytes;
  if (p->held_bytes > p->peak_bytes) p->peak_bytes = p->held_bytes;
  return SL_OK;
}

/* Records a block (an allocation of its own or carved from the arena). */
static sl_code add_block(sl_pool *p, void *mem, int64_t cls, bool carved, sl_error *err) {
  if (p->n_blocks == p->cap_blocks) {
    int cap = p->cap_blocks ? 2 * p->cap_blocks : 16;
    if (!sl_resize(&p->blocks, (size_t)cap, sizeof *p->blocks)) return sl_fail_nomem(err, "the buffer pool's list of blocks");
    p->cap_blocks = cap;
  }
  p->blocks[p->n_blocks++] = (sl_pool_block){mem, cls, true, carved};
  return SL_OK;
}

sl_code sl_pool_acquire(sl_pool *p, int64_t bytes, void **ptr, sl_error *err) {
  int64_t cls = sl_size_class(bytes);
  /* Best fit among the free blocks large enough. */
  int best = -1;
  for (int i = 0; i < p->n_blocks; i++)
    if (!p->blocks[i].in_use && p->blocks[i].bytes >= cls &&
        (best < 0 || p->blocks[i].bytes < p->blocks[best].bytes))
      best = i;
  if (best >= 0) {
    p->blocks[best].in_use = true;
    *ptr = p->blocks[best].ptr;
    return SL_OK;
  }
  const int64_t carve = sl_plan_arena_block(cls);
  if (p->arena && p->arena_bytes - p->arena_used >= carve) { /* held already, with the arena */
    sl_code rc = add_block(p, p->arena + p->arena_used, cls, true, err);
    if (rc != SL_OK) return rc;
    *ptr = p->arena + p->arena_used;
    p->arena_used += carve;
    return SL_OK;
  }
  void *mem = NULL;
  sl_code rc = p->backend->ops->alloc(p->backend, (size_t)cls, &mem, err);
  if (rc != SL_OK) return rc;
  if ((rc = add_block(p, mem, cls, false, err)) != SL_OK) {
    p->backend->ops->free(p->backend, mem, (size_t)cls);
    return rc;
  }
  p->held_bytes += cls;
  if (p->held_bytes > p->peak_bytes) p->peak_bytes = p->held_bytes;
  *ptr = mem;
  return SL_OK;
}

void sl_pool_release(sl_pool *p, void *ptr) {
  for (int i = 0; i < p->n_blocks; i++)
    if (p->blocks[i].ptr == ptr) {
      assert(p->blocks[i].in_use);
      p->blocks[i].in_use = false;
      return;
    }
  assert(!"released a buffer the pool does not own");
}

int sl_pool_allocations(const sl_pool *p) {
  int n = p->arena != NULL;
  for (int i = 0; i < p->n_blocks; i++) n += !p->blocks[i].carved;
  return n;
}

void sl_pool_destroy(sl_pool *p) {
  for (int i = 0; i < p->n_blocks; i++) {
    assert(!p->blocks[i].in_use);
    if (!p->blocks[i].carved) p->backend->ops->free(p->backend, p->blocks[i].ptr, (size_t)p->blocks[i].bytes);
  }
  if (p->arena) p->backend->ops->free(p->backend, p->arena, (size_t)p->arena_bytes);
  free(p->blocks);
  p->blocks = NULL;
  p->n_blocks = p->cap_blocks = 0;
  p->held_bytes = 0;
  p->arena = NULL;
  p->arena_bytes = p->arena_used = 0;
}
