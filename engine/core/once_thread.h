/* A helper thread started at most once per process and joined later: the
 * background warm-ups (the CUDA context, engine/backend/cuda/cuda_warm_up.c;
 * cuFFT, shaders/cuda/common/cufft_warm_up.c). Start copies `arg` into the
 * thread's own storage under the lock, so a second start (a no-op) never
 * changes what a running thread reads; join waits for it, if it runs. Both
 * are safe from any thread, any number of times. */
#ifndef SL_ONCE_THREAD_H
#define SL_ONCE_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct sl_once_thread {
  pthread_mutex_t mu;
  pthread_t thread;
  bool started; /* once per process */
  bool running; /* started and not joined */
  void *(*fn)(void *);
  atomic_bool finished; /* fn has returned */
  _Alignas(16) unsigned char arg[64];
} sl_once_thread;

#define SL_ONCE_THREAD_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

/* Runs fn(copy of arg) on a new thread unless one was started before;
 * arg_size at most sizeof t->arg. A thread that cannot be created counts
 * as started (the warm-up is then simply not done). */
void sl_once_thread_start(sl_once_thread *t, void *(*fn)(void *), const void *arg, size_t arg_size);
void sl_once_thread_join(sl_once_thread *t);
/* Whether a thread was started and its function has returned (joined or
 * not): the plan's estimate of a wait for it is then 0. Never blocks. */
bool sl_once_thread_finished(sl_once_thread *t);

#endif
