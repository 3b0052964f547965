#include "nodes/hdf5/h5_index_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/core/util.h"
#include "nodes/hdf5/h5_index_store.h"

enum { CACHE_ENTRIES = 4 };

typedef struct cache_entry {
  char *path, *dataset;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  sl_h5_index *ix;
  int refs;
  uint64_t last_use;
} cache_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry g_cache[CACHE_ENTRIES];
static uint64_t g_clock;

static void drop(cache_entry *e) {
  sl_h5_index_free(e->ix);
  free(e->path);
  free(e->dataset);
  memset(e, 0, sizeof *e);
}

sl_code sl_h5_index_get(const char *path, const char *dataset, const sl_h5_index **out, sl_error *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    /* Let the index report the problem with its own wording. */
    sl_h5_index *ix = NULL;
    sl_code rc = sl_h5_index_describe(path, dataset, &ix, err);
    if (rc == SL_OK) sl_h5_index_free(ix);
    return rc != SL_OK ? rc : sl_fail(err, SL_ERR_IO, "cannot stat %s", path);
  }
  const char *ds = dataset ? dataset : "";
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < CACHE_ENTRIES; i++) {
    cache_entry *e = &g_cache[i];
    if (e->ix && !strcmp(e->path, path) && !strcmp(e->dataset, ds) && e->dev == st.st_dev &&
        e->ino == st.st_ino && e->size == st.st_size && e->mtime.tv_sec == st.st_mtim.tv_sec &&
        e->mtime.tv_nsec == st.st_mtim.tv_nsec) {
      e->refs++;
      e->last_use = ++g_clock;
      *out = e->ix;
      pthread_mutex_unlock(&g_lock);
      return SL_OK;
    }
  }
  pthread_mutex_unlock(&g_lock);
  /* A listed index from an earlier process (every file unchanged), else
   * described here, which opens every data file: outside the lock. */
  sl_h5_index *ix = sl_h5_index_store_load(path, dataset);
  sl_code rc = ix ? SL_OK : sl_h5_index_describe(path, dataset, &ix, err);
  if (rc != SL_OK) return rc;
  char *path_copy = sl_strdup(path), *ds_copy = sl_strdup(ds);
  if (!path_copy || !ds_copy) {
    free(path_copy);
    free(ds_copy);
    sl_h5_index_free(ix);
    return sl_fail_in(err, SL_ERR_NOMEM, path, "out of memory for an entry of the index cache");
  }
  pthread_mutex_lock(&g_lock);
  cache_entry *slot = NULL;
  for (int i = 0; i < CACHE_ENTRIES; i++)
    if (!g_cache[i].ix) {
      slot = &g_cache[i];
      break;
    }
  if (!slot) /* evict the least recently used entry nobody holds */
    for (int i = 0; i < CACHE_ENTRIES; i++)
      if (g_cache[i].refs == 0 && (!slot || g_cache[i].last_use < slot->last_use)) slot = &g_cache[i];
  if (!slot) {
    pthread_mutex_unlock(&g_lock);
    sl_h5_index_free(ix);
    free(path_copy);
    free(ds_copy);
    return sl_fail(err, SL_ERR_INTERNAL, "more than %d acquisitions open at once", CACHE_ENTRIES);
  }
  if (slot->ix) drop(slot);
  slot->path = path_copy;
  slot->dataset = ds_copy;
  slot->dev = st.st_dev;
  slot->ino = st.st_ino;
  slot->size = st.st_size;
  slot->mtime = st.st_mtim;
  slot->ix = ix;
  slot->refs = 1;
  slot->last_use = ++g_clock;
  *out = ix;
  pthread_mutex_unlock(&g_lock);
  return SL_OK;
}

sl_code sl_h5_index_get_listed(const char *path, const char *dataset, const sl_h5_index **out, sl_error *err) {
  const sl_h5_index *ix = NULL;
  sl_code rc = sl_h5_index_get(path, dataset, &ix, err);
  if (rc != SL_OK) return rc;
  pthread_mutex_lock(&g_lock);
  bool listed = ix->listed;
  pthread_mutex_unlock(&g_lock);
  if (!listed) {
    /* Listing takes a while: outside the lock, into a new array, so that
     * whoever holds the described index meanwhile reads it unchanged. */
    sl_h5_chunk *chunks = NULL;
    uint64_t max = 0;
    if ((rc = sl_h5_index_list_chunks(ix, &chunks, &max, err)) != SL_OK) {
      sl_h5_index_put(ix);
      return rc;
    }
    pthread_mutex_lock(&g_lock);
    bool mine = false;
    for (int i = 0; i < CACHE_ENTRIES; i++)
      if (g_cache[i].ix == ix && !g_cache[i].ix->listed) { /* else another caller listed it first */
        sl_h5_index_set_chunks(g_cache[i].ix, chunks, max);
        chunks = NULL;
        mine = true;
      }
    pthread_mutex_unlock(&g_lock);
    free(chunks);
    /* for the next process (the index is complete and no longer changes) */
    if (mine) sl_h5_index_store_save(path, dataset, ix);
  }
  *out = ix;
  return SL_OK;
}

static _Atomic int64_t g_plan_list_limit = SL_H5_PLAN_LIST_MAX_CHUNKS;

int64_t sl_h5_plan_list_limit(void) { return atomic_load(&g_plan_list_limit); }

void sl_h5_set_plan_list_limit(int64_t chunks) {
  atomic_store(&g_plan_list_limit, chunks < 0 ? SL_H5_PLAN_LIST_MAX_CHUNKS : chunks);
}

bool sl_h5_index_planned_from_listing(const sl_h5_index *ix) { return ix->n_chunks <= sl_h5_plan_list_limit(); }

sl_code sl_h5_index_get_for_plan(const char *path, const char *dataset, const sl_h5_index **out,
                                 sl_error *err) {
  const sl_h5_index *ix = NULL;
  sl_code rc = sl_h5_index_get(path, dataset, &ix, err);
  if (rc != SL_OK || !sl_h5_index_planned_from_listing(ix)) {
    *out = ix;
    return rc;
  }
  sl_h5_index_put(ix);
  return sl_h5_index_get_listed(path, dataset, out, err);
}

void sl_h5_index_put(const sl_h5_index *ix) {
  if (!ix) return;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < CACHE_ENTRIES; i++)
    if (g_cache[i].ix == ix && g_cache[i].refs > 0) g_cache[i].refs--;
  pthread_mutex_unlock(&g_lock);
}
