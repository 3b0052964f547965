/* Allocation of control data (specs, graphs, plans, notes, executor tables).
 * Nothing here aborts: every failure is NULL (or false), which the caller turns
 * into SL_ERR_NOMEM with sl_fail_nomem, releasing what it already holds.
 * A fault injector lets tests fail any one of these allocations. */
#ifndef SL_ALLOC_H
#define SL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

/* A zero count or size allocates one byte, so that NULL always means failure. */
void *sl_malloc(size_t size);
void *sl_calloc(size_t n, size_t size);
/* NULL on failure, and `p` is left as it was (still owned by the caller). */
void *sl_realloc(void *p, size_t size);
/* `*pp` (any object pointer, passed as its address) becomes an array of `n`
 * elements of `size` bytes, keeping its contents; false on failure or overflow,
 * and then `*pp` is unchanged. */
bool sl_resize(void *pp, size_t n, size_t size);
/* NULL when `s` is NULL or on failure. */
char *sl_strdup(const char *s);
char *sl_strndup(const char *s, size_t n);

/* Fault injection, for tests: the `n`th allocation through the functions above
 * (counted from this call, 1-based) fails; 0 turns it off. */
void sl_alloc_fail_nth(long n);
/* Allocations counted since the last sl_alloc_fail_nth. */
long sl_alloc_count(void);

#endif
