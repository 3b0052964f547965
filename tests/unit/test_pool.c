/* The buffer pool (engine/exec/pool.h) over a backend whose allocator is
 * watched: blocks are reused best fit; an arena reserved first is one
 * allocation that the next acquisitions are carved from, SL_PLAN_ARENA_ALIGN
 * apart and inside it, until it is used up (then blocks of their own); the
 * pool counts what it holds and its peak as the backend sees it, and gives
 * every allocation back once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/exec/pool.h"
#include "engine/plan/plan.h"

/* The watched allocator: live allocations, their bytes and the peak. */
typedef struct watch {
  int allocs, frees, live;
  int64_t live_bytes, peak_bytes;
  int fail_after; /* allocations that succeed before one fails; <0 never */
} watch;
static watch g_w;

static sl_code w_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  (void)b;
  if (g_w.fail_after == 0) return sl_fail(err, SL_ERR_NOMEM, "watched allocator: refused");
  if (g_w.fail_after > 0) g_w.fail_after--;
  *ptr = aligned_alloc(SL_PLAN_ARENA_ALIGN, (bytes + SL_PLAN_ARENA_ALIGN - 1) / SL_PLAN_ARENA_ALIGN * SL_PLAN_ARENA_ALIGN);
  assert_non_null(*ptr);
  memset(*ptr, 0xA5, bytes); /* every byte writable */
  g_w.allocs++, g_w.live++;
  g_w.live_bytes += (int64_t)bytes;
  if (g_w.live_bytes > g_w.peak_bytes) g_w.peak_bytes = g_w.live_bytes;
  return SL_OK;
}

static void w_free(sl_backend *b, void *ptr, size_t bytes) {
  (void)b;
  g_w.frees++, g_w.live--;
  g_w.live_bytes -= (int64_t)bytes;
  free(ptr);
}

static const sl_backend_ops k_ops = {.kind = SL_BACKEND_CPU, .alloc = w_alloc, .free = w_free};
static sl_backend g_backend = {.ops = &k_ops};
static sl_error g_err;

/* Each test: a fresh watch and error, and a pool over the watched backend. */
static int reset(void **state) {
  (void)state;
  memset(&g_w, 0, sizeof g_w);
  g_w.fail_after = -1;
  sl_error_clear(&g_err);
  return 0;
}

/* Destroys the pool: every allocation given back, once. */
static void pool_end(sl_pool *p) {
  sl_pool_destroy(p);
  assert_int_equal(g_w.frees, g_w.allocs);
  assert_int_equal(g_w.live, 0);
  assert_int_equal(g_w.live_bytes, 0);
}

/* Without an arena: a block per request, reused best fit once released. */
static void test_blocks_reused_best_fit(void **state) {
  (void)state;
  sl_pool p;
  sl_pool_init(&p, &g_backend);
  void *big, *small, *again;
  assert_int_equal(sl_pool_acquire(&p, 4000, &big, &g_err), SL_OK);
  assert_int_equal(sl_pool_acquire(&p, 100, &small, &g_err), SL_OK);
  sl_pool_release(&p, big);
  sl_pool_release(&p, small);
  assert_int_equal(sl_pool_acquire(&p, 90, &again, &g_err), SL_OK);
  assert_ptr_equal(again, small); /* the smallest free block that holds it */
  assert_int_equal(g_w.allocs, 2);
  assert_int_equal(sl_pool_allocations(&p), 2);
  assert_int_equal(p.peak_bytes, sl_size_class(4000) + sl_size_class(100));
  assert_int_equal(p.peak_bytes, g_w.peak_bytes);
  sl_pool_release(&p, again);
  pool_end(&p);
}

/* An arena: one allocation; blocks carved from it in order, aligned, inside
 * it and apart; the next request that does not fit takes a block of its own;
 * destroy gives back the arena and that block, once each. */
static void test_arena_carves_then_overflows(void **state) {
  (void)state;
  sl_pool p;
  sl_pool_init(&p, &g_backend);
  const int64_t sizes[] = {1000, 64, 7, 4096, 300};
  int64_t arena = 0;
  for (size_t k = 0; k < 5; k++)
    arena += (sl_size_class(sizes[k]) + SL_PLAN_ARENA_ALIGN - 1) / SL_PLAN_ARENA_ALIGN * SL_PLAN_ARENA_ALIGN;
  assert_int_equal(sl_pool_reserve(&p, arena, &g_err), SL_OK);
  assert_int_equal(g_w.allocs, 1);
  assert_int_equal(p.held_bytes, arena); /* held from the reservation on */
  char *ptr[5];
  for (size_t k = 0; k < 5; k++) {
    assert_int_equal(sl_pool_acquire(&p, sizes[k], (void **)&ptr[k], &g_err), SL_OK);
    assert_true(ptr[k] >= p.arena && ptr[k] + sizes[k] <= p.arena + p.arena_bytes);
    assert_int_equal((uintptr_t)ptr[k] % SL_PLAN_ARENA_ALIGN, 0);
    if (k) assert_true(ptr[k] >= ptr[k - 1] + sizes[k - 1]); /* apart, in order */
    memset(ptr[k], (int)k, (size_t)sizes[k]);
  }
  assert_int_equal(g_w.allocs, 1); /* all five carved */
  assert_int_equal(p.arena_used, arena);
  for (size_t k = 0; k < 5; k++) /* none overwrote another */
    for (int64_t i = 0; i < sizes[k]; i++) assert_int_equal((unsigned char)ptr[k][i], k);
  void *extra;
  assert_int_equal(sl_pool_acquire(&p, 64, &extra, &g_err), SL_OK);
  assert_true((char *)extra < p.arena || (char *)extra >= p.arena + p.arena_bytes);
  assert_int_equal(g_w.allocs, 2);
  assert_int_equal(sl_pool_allocations(&p), 2);
  assert_int_equal(p.held_bytes, arena + 64);
  assert_int_equal(p.peak_bytes, g_w.peak_bytes);
  /* a released carved block is reused like any other */
  sl_pool_release(&p, ptr[3]);
  void *reuse;
  assert_int_equal(sl_pool_acquire(&p, 4000, &reuse, &g_err), SL_OK);
  assert_ptr_equal(reuse, ptr[3]);
  assert_int_equal(g_w.allocs, 2);
  sl_pool_release(&p, reuse);
  for (size_t k = 0; k < 5; k++)
    if (k != 3) sl_pool_release(&p, ptr[k]);
  sl_pool_release(&p, extra);
  pool_end(&p);
  assert_int_equal(g_w.frees, 2); /* the arena and the block of its own */
}

/* An arena comes first and is a positive multiple of the alignment; a
 * refused one is an error the caller sees, and nothing is held. */
static void test_arena_misuse_and_refusal(void **state) {
  (void)state;
  sl_pool p;
  sl_pool_init(&p, &g_backend);
  assert_int_equal(sl_pool_reserve(&p, 100, &g_err), SL_ERR_INTERNAL);
  assert_int_equal(sl_pool_reserve(&p, 0, &g_err), SL_ERR_INTERNAL);
  void *x;
  assert_int_equal(sl_pool_acquire(&p, 10, &x, &g_err), SL_OK);
  assert_int_equal(sl_pool_reserve(&p, SL_PLAN_ARENA_ALIGN, &g_err), SL_ERR_INTERNAL); /* not first */
  sl_pool_release(&p, x);
  pool_end(&p);
  sl_pool_init(&p, &g_backend);
  g_w.fail_after = 0;
  assert_int_equal(sl_pool_reserve(&p, 4 * SL_PLAN_ARENA_ALIGN, &g_err), SL_ERR_NOMEM);
  assert_int_equal(p.held_bytes, 0);
  assert_null(p.arena);
  pool_end(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_blocks_reused_best_fit, reset),
      cmocka_unit_test_setup(test_arena_carves_then_overflows, reset),
      cmocka_unit_test_setup(test_arena_misuse_and_refusal, reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
