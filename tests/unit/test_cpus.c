/* CPUs the process may use (engine/core/cpus): the affinity mask and the
 * cgroup quota, and the CPU backend's default thread count that follows them;
 * its parallel_for's cover and participants, and its zero spread over the
 * workers. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/backend/backend.h"
#include "engine/core/cpus.h"

static void t_cpu_max_text(void **state) {
  (void)state;
  assert_int_equal(sl_cpus_from_cpu_max("max 100000\n"), 0);
  assert_int_equal(sl_cpus_from_cpu_max("100000 100000\n"), 1);
  assert_int_equal(sl_cpus_from_cpu_max("150000 100000\n"), 2); /* 1.5 CPUs: rounded up */
  assert_int_equal(sl_cpus_from_cpu_max("50000 100000"), 1);
  assert_int_equal(sl_cpus_from_cpu_max("400000 100000"), 4);
  assert_int_equal(sl_cpus_from_cpu_max(""), 0);
  assert_int_equal(sl_cpus_from_cpu_max("garbage"), 0);
  assert_int_equal(sl_cpus_from_cpu_max("12x 100000"), 0);
  assert_int_equal(sl_cpus_from_cpu_max("-1 100000"), 0);
}

static void t_cfs(void **state) {
  (void)state;
  assert_int_equal(sl_cpus_from_cfs(-1, 100000), 0);
  assert_int_equal(sl_cpus_from_cfs(250000, 100000), 3);
  assert_int_equal(sl_cpus_from_cfs(100000, 0), 0);
  assert_int_equal(sl_cpus_from_cfs(1, 100000), 1);
}

/* Pinned to one CPU (as `taskset -c 0` does), the process may use one, and a
 * default CPU backend starts one thread. */
static void t_affinity(void **state) {
  (void)state;
  cpu_set_t old;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  int before = sl_usable_cpus();
  assert_true(before >= 1 && before <= CPU_COUNT(&old));
  int first = 0;
  while (!CPU_ISSET(first, &old)) first++;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  assert_int_equal(sl_usable_cpus(), 1);
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(0, &b, &err), SL_OK);
  assert_int_equal(b->ops->workers(b), 1);
  sl_cpu_backend_ops.destroy(b);
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
  assert_int_equal(sl_usable_cpus(), before);
}

/* Oversubscribed (more threads than CPUs): parallel_for still covers every
 * index exactly once, with the waiting threads blocking instead of spinning. */
typedef struct cover {
  _Atomic int *hits;
} cover;

static void mark(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  cover *c = ctx;
  for (int64_t i = begin; i < end; i++) c->hits[i]++;
}

static void t_oversubscribed_cover(void **state) {
  (void)state;
  cpu_set_t old, one;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  int first = 0;
  while (!CPU_ISSET(first, &old)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(4, &b, &err), SL_OK);
  enum { N = 100003 };
  static _Atomic int hits[N];
  cover c = {hits};
  for (int round = 0; round < 200; round++) b->ops->parallel_for(b, N, 64, mark, &c);
  for (int i = 0; i < N; i++) assert_int_equal(hits[i], 200);
  sl_cpu_backend_ops.destroy(b);
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
}

/* The default pool adapts how many workers take part while busy threads
 * compete for the cores; every job still covers each index exactly once,
 * whichever participants it had. */
static _Atomic bool g_stop_busy;
static void *busy(void *p) {
  (void)p;
  while (!atomic_load_explicit(&g_stop_busy, memory_order_relaxed)) {
  }
  return NULL;
}

static void t_adaptive_cover(void **state) {
  (void)state;
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(0, &b, &err), SL_OK);
  int workers = b->ops->workers(b);
  pthread_t spinners[8];
  int n_spin = workers < 8 ? workers : 8;
  atomic_store(&g_stop_busy, false);
  for (int i = 0; i < n_spin; i++) assert_int_equal(pthread_create(&spinners[i], NULL, busy, NULL), 0);
  enum { N = 20011 };
  static _Atomic int hits[N];
  cover c = {hits};
  for (int round = 0; round < 3000; round++) b->ops->parallel_for(b, N, 16, mark, &c);
  atomic_store(&g_stop_busy, true);
  for (int i = 0; i < n_spin; i++) pthread_join(spinners[i], NULL);
  for (int i = 0; i < N; i++) assert_int_equal(hits[i], 3000);
  sl_cpu_backend_ops.destroy(b);
}

/* Jobs with pauses between them, so that the workers go to sleep and must be
 * woken for each job (the wake-up a release store once lost: the run hung).
 * A lost wake-up hangs this test (ctest's timeout catches it). */
static void t_sleep_wake(void **state) {
  (void)state;
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(0, &b, &err), SL_OK);
  enum { N = 4099 };
  static _Atomic int hits[N];
  cover c = {hits};
  /* Pauses from 5 to 160 microseconds: around the end of the workers' spin,
   * where a worker decides to sleep just as the next job is published. */
  enum { ROUNDS = 6000 };
  for (int round = 0; round < ROUNDS; round++) {
    b->ops->parallel_for(b, N, 1, mark, &c);
    struct timespec pause = {0, (long)(5 + (round * 37) % 156) * 1000};
    nanosleep(&pause, NULL);
  }
  for (int i = 0; i < N; i++) assert_int_equal(hits[i], ROUNDS);
  sl_cpu_backend_ops.destroy(b);
}

/* A job of fewer ranges of its grain than there are workers takes only as
 * many participants as ranges: each range is a whole grain (the last may be
 * shorter) and the workers beyond sit it out, so the caller does not wait
 * for them to wake. 32 positions of grain 16 on 4 threads: two ranges of
 * 16, on workers 0 and 1 (before: four shares of 8, one on each worker). */
typedef struct ranges_seen {
  _Atomic int64_t shortest, widest_worker;
} ranges_seen;

/* *a = min(*a, v) / max(*a, v), from any worker. */
static void atomic_lower(_Atomic int64_t *a, int64_t v) {
  int64_t cur = atomic_load(a);
  while (v < cur && !atomic_compare_exchange_weak(a, &cur, v)) {
  }
}
static void atomic_raise(_Atomic int64_t *a, int64_t v) {
  int64_t cur = atomic_load(a);
  while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
  }
}

static void note_range(void *ctx, int64_t begin, int64_t end, int worker) {
  ranges_seen *r = ctx;
  atomic_lower(&r->shortest, end - begin);
  atomic_raise(&r->widest_worker, worker);
}

/* A CPU backend of `threads` workers (the test fails if it cannot be made). */
static sl_backend *cpu_backend(int threads) {
  sl_backend *b = NULL;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cpu_backend_ops.create(threads, &b, &err), SL_OK);
  return b;
}

static void t_participants_at_most_ranges(void **state) {
  (void)state;
  sl_backend *b = cpu_backend(4);
  for (int round = 0; round < 200; round++) {
    ranges_seen r = {INT64_MAX, -1};
    b->ops->parallel_for(b, 32, 16, note_range, &r);
    assert_int_equal(atomic_load(&r.shortest), 16);
    assert_true(atomic_load(&r.widest_worker) <= 1);
    ranges_seen q = {INT64_MAX, -1};
    b->ops->parallel_for(b, 40, 16, note_range, &q); /* 3 ranges: 16, 16, 8 at most */
    assert_true(atomic_load(&q.shortest) >= 8);
    assert_true(atomic_load(&q.widest_worker) <= 2);
  }
  sl_cpu_backend_ops.destroy(b);
}

/* A participant's share is cut into about 8 ranges (never below the grain),
 * so that the last range a participant waits for at the join is short: 14
 * positions of grain 1 on 2 workers run a position a range (in ranges of 2
 * with 4 a participant), and 64 of grain 1 in ranges of 4. */
typedef struct longest_seen {
  _Atomic int64_t longest;
} longest_seen;

static void note_longest(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  atomic_raise(&((longest_seen *)ctx)->longest, end - begin);
}

static void t_ranges_per_participant(void **state) {
  (void)state;
  sl_backend *b = cpu_backend(2);
  for (int round = 0; round < 50; round++) {
    longest_seen a = {0}, c = {0}, g = {0};
    b->ops->parallel_for(b, 14, 1, note_longest, &a);
    assert_int_equal(atomic_load(&a.longest), 1);
    b->ops->parallel_for(b, 64, 1, note_longest, &c);
    assert_int_equal(atomic_load(&c.longest), 4);
    b->ops->parallel_for(b, 64, 16, note_longest, &g); /* the grain wins */
    assert_int_equal(atomic_load(&g.longest), 16);
  }
  sl_cpu_backend_ops.destroy(b);
}

/* Sizes below, at and above the backend's spread (ranges of at least 256
 * KiB a worker) at 1-3 workers, each checked by `check`. */
static void each_spread_case(void (*check)(sl_backend *b, size_t n, int threads)) {
  const size_t sizes[] = {1, 255 << 10, (512 << 10) + 13, (3 << 20) + 7};
  for (int threads = 1; threads <= 3; threads++) {
    sl_backend *b = NULL;
    sl_error err;
    assert_int_equal(sl_cpu_backend_ops.create(threads, &b, &err), SL_OK);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check(b, sizes[k], threads);
    sl_cpu_backend_ops.destroy(b);
  }
}

/* The zero spread over the workers: every byte zeroed, none around it. */
static void check_zero(sl_backend *b, size_t n, int threads) {
  sl_error err;
  uint8_t *m = malloc(n + 128);
  assert_non_null(m);
  memset(m, 0xAB, n + 128);
  assert_int_equal(b->ops->zero(b, m + 64, n, &err), SL_OK);
  for (size_t i = 0; i < n + 128; i++)
    if (m[i] != (i < 64 || i >= n + 64 ? 0xAB : 0))
      fail_msg("%d threads, %zu bytes: byte %zu is %d", threads, n, i, m[i]);
  free(m);
}

/* The copy spread likewise: every byte copied, none around it touched;
 * overlapping buffers still copied as by memmove. */
static void check_copy(sl_backend *b, size_t n, int threads) {
  sl_error err;
  uint8_t *src = malloc(n), *m = malloc(n + 128);
  assert_non_null(src);
  assert_non_null(m);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + i / 251);
  memset(m, 0xAB, n + 128);
  assert_int_equal(b->ops->copy(b, m + 64, src, n, &err), SL_OK);
  for (size_t i = 0; i < n + 128; i++)
    if (m[i] != (i < 64 || i >= n + 64 ? 0xAB : src[i - 64]))
      fail_msg("%d threads, %zu bytes: byte %zu is %d", threads, n, i, m[i]);
  /* overlapping: m[0..n) moved up by 64 bytes within m */
  for (size_t i = 0; i < n; i++) m[i] = src[i];
  assert_int_equal(b->ops->copy(b, m + 64, m, n, &err), SL_OK);
  for (size_t i = 0; i < n; i++)
    if (m[i + 64] != src[i]) fail_msg("%d threads, %zu bytes overlapping: byte %zu is %d", threads, n, i, m[i + 64]);
  free(src);
  free(m);
}

static void t_zero_spread(void **state) {
  (void)state;
  each_spread_case(check_zero);
}

static void t_copy_spread(void **state) {
  (void)state;
  each_spread_case(check_copy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_cpu_max_text),
      cmocka_unit_test(t_cfs),
      cmocka_unit_test(t_affinity),
      cmocka_unit_test(t_oversubscribed_cover),
      cmocka_unit_test(t_adaptive_cover),
      cmocka_unit_test(t_sleep_wake),
      cmocka_unit_test(t_participants_at_most_ranges),
      cmocka_unit_test(t_ranges_per_participant),
      cmocka_unit_test(t_zero_spread),
      cmocka_unit_test(t_copy_spread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
