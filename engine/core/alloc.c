#define _POSIX_C_SOURCE 200809L
#include "engine/core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One counter for the whole process (workers allocate too); an atomic add per
 * allocation of control data is nothing beside the allocation itself. */
static atomic_long g_count, g_fail_at;

static bool injected_fault(void) {
  long n = atomic_fetch_add(&g_count, 1) + 1;
  return n == atomic_load(&g_fail_at);
}

void sl_alloc_fail_nth(long n) {
  atomic_store(&g_fail_at, 0);
  atomic_store(&g_count, 0);
  atomic_store(&g_fail_at, n);
}

long sl_alloc_count(void) { return atomic_load(&g_count); }

void *sl_malloc(size_t size) {
  if (injected_fault()) return NULL;
  return malloc(size ? size : 1);
}

void *sl_calloc(size_t n, size_t size) {
  if (injected_fault()) return NULL;
  return calloc(n ? n : 1, size ? size : 1);
}

void *sl_realloc(void *p, size_t size) {
  if (injected_fault()) return NULL;
  return realloc(p, size ? size : 1);
}

bool sl_resize(void *pp, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return false;
  void *old;
  memcpy(&old, pp, sizeof old);
  void *p = sl_realloc(old, n * size);
  if (!p) return false;
  memcpy(pp, &p, sizeof p);
  return true;
}

char *sl_strdup(const char *s) {
  if (!s || injected_fault()) return NULL;
  return strdup(s);
}

char *sl_strndup(const char *s, size_t n) {
  if (!s || injected_fault()) return NULL;
  return strndup(s, n);
}
