/* Shards of one process (see shard_local.h). */
#include "engine/exec/shard_local.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/alloc.h"

/* Members wait on a condition variable, never spin: a generation counter
 * lets one all-gather's waiters leave before the next one's arrive. */
struct sl_shard_group {
  int count;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  uint64_t generation;
  int failed; /* the member that aborted, or -1 */
  const void **mine;
  int64_t *bytes;
  sl_exec_shard *members;
  struct member_ctx {
    sl_shard_group *g;
    int index;
  } *ctx;
};

/* Waits until every member arrived in this generation (or one failed).
 * Called with the lock held. */
static int group_wait(sl_shard_group *g) {
  uint64_t gen = g->generation;
  if (++g->arrived == g->count) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  } else {
    while (gen == g->generation && g->failed < 0) pthread_cond_wait(&g->cv, &g->mu);
  }
  return g->failed < 0 || gen != g->generation ? 0 : -1;
}

static sl_code local_allgather(void *ctx, const void *mine, void *all, int64_t bytes, sl_error *err) {
  const struct member_ctx *m = ctx;
  sl_shard_group *g = m->g;
  pthread_mutex_lock(&g->mu);
  g->mine[m->index] = mine;
  g->bytes[m->index] = bytes;
  /* first meeting: every member's buffer is published */
  int rc = group_wait(g);
  int mismatch = -1;
  for (int s = 0; rc == 0 && s < g->count; s++)
    if (g->bytes[s] != bytes) mismatch = s;
  pthread_mutex_unlock(&g->mu);
  if (rc == 0 && mismatch < 0)
    for (int s = 0; s < g->count; s++)
      if (bytes > 0) memcpy((char *)all + (int64_t)s * bytes, g->mine[s], (size_t)bytes);
  /* second meeting: nobody reuses its buffer before every copy of it is made */
  pthread_mutex_lock(&g->mu);
  if (rc == 0) rc = group_wait(g);
  int failed = g->failed;
  pthread_mutex_unlock(&g->mu);
  if (mismatch >= 0)
    return sl_fail(err, SL_ERR_INTERNAL, "shard %d gathers %lld bytes where shard %d gathers %lld", m->index,
                   (long long)bytes, mismatch, (long long)g->bytes[mismatch]);
  if (rc != 0)
    return sl_fail(err, SL_ERR_INTERNAL, "shard %d failed: shard %d stops at its merge", failed, m->index);
  return SL_OK;
}

sl_shard_group *sl_shard_group_new(int count) {
  if (count < 1) return NULL;
  sl_shard_group *g = sl_calloc(1, sizeof *g);
  if (!g) return NULL;
  g->count = count;
  g->failed = -1;
  g->mine = sl_calloc((size_t)count, sizeof *g->mine);
  g->bytes = sl_calloc((size_t)count, sizeof *g->bytes);
  g->members = sl_calloc((size_t)count, sizeof *g->members);
  g->ctx = sl_calloc((size_t)count, sizeof *g->ctx);
  if (!g->mine || !g->bytes || !g->members || !g->ctx) {
    free(g->mine), free(g->bytes), free(g->members), free(g->ctx), free(g);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  for (int s = 0; s < count; s++) {
    g->ctx[s] = (struct member_ctx){g, s};
    g->members[s] = (sl_exec_shard){.index = s, .count = count, .allgather = local_allgather, .ctx = &g->ctx[s],
                                     .device = -1};
  }
  return g;
}

void sl_shard_group_free(sl_shard_group *g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->mine), free(g->bytes), free(g->members), free(g->ctx), free(g);
}

sl_exec_shard sl_shard_group_member(sl_shard_group *g, int index) { return g->members[index]; }

void sl_shard_group_abort(sl_shard_group *g, int index) {
  pthread_mutex_lock(&g->mu);
  if (g->failed < 0) g->failed = index;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

int sl_shard_group_failed(sl_shard_group *g) {
  pthread_mutex_lock(&g->mu);
  int failed = g->failed;
  pthread_mutex_unlock(&g->mu);
  return failed;
}
