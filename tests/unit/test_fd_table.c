/* Room for many open files made at start-up (engine/core/fd_table): the
 * kernel's table is grown once while the process has one thread, so that
 * opening an acquisition's data files later, beside other threads, never
 * grows it (each growth then waits for an RCU grace period). Read from
 * the kernel's own account, /proc/self/status "FDSize". */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/core/fd_table.h"

/* The descriptor slots the kernel's table has now (-1: not known). */
static int fd_table_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int size = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "FDSize:", 7)) size = atoi(line + 7);
  fclose(f);
  return size;
}

static int g_slots; /* what sl_fd_table_grow_early returned, first thing in main */

static void t_table_grown_at_start(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  /* the soft limit was raised towards SL_FD_TABLE_SLOTS where the hard one allows */
  rlim_t expect = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > SL_FD_TABLE_SLOTS ? SL_FD_TABLE_SLOTS : rl.rlim_max;
  assert_true(rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= expect);
  assert_true(g_slots >= 64); /* a fresh process has 64 */
  int size = fd_table_size();
  if (size < 0) skip();
  assert_true(size >= g_slots);
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_done;

static void *wait_for_done(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  while (!g_done) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

/* With a second thread alive (as the CUDA warm-up and the readers are),
 * opening 600 files leaves the table as it was: no growth to wait for. */
static void t_many_files_beside_a_thread_need_no_growth(void **state) {
  (void)state;
  enum { FILES = 600 };
  if (g_slots < FILES + 64) skip(); /* a hard limit too low to show it */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, wait_for_done, NULL), 0);
  int before = fd_table_size();
  int fds[FILES];
  for (int i = 0; i < FILES; i++) {
    fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fds[i] >= 0);
  }
  int after = fd_table_size();
  for (int i = 0; i < FILES; i++) close(fds[i]);
  pthread_mutex_lock(&g_mu);
  g_done = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_join(th, NULL);
  if (before < 0) skip();
  assert_int_equal(after, before);
}

int main(void) {
  g_slots = sl_fd_table_grow_early(); /* before cmocka or anything else starts */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_table_grown_at_start),
      cmocka_unit_test(t_many_files_beside_a_thread_need_no_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
