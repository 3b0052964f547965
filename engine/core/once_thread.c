/* See once_thread.h. */
#include "engine/core/once_thread.h"

#include <string.h>

/* The thread: fn on its copy of the argument, then the flag. */
static void *trampoline(void *self) {
  sl_once_thread *t = self;
  void *out = t->fn(t->arg);
  atomic_store(&t->finished, true);
  return out;
}

void sl_once_thread_start(sl_once_thread *t, void *(*fn)(void *), const void *arg, size_t arg_size) {
  pthread_mutex_lock(&t->mu);
  if (!t->started && arg_size <= sizeof t->arg) {
    t->started = true;
    t->fn = fn;
    if (arg_size) memcpy(t->arg, arg, arg_size);
    t->running = pthread_create(&t->thread, NULL, trampoline, t) == 0;
  }
  pthread_mutex_unlock(&t->mu);
}

bool sl_once_thread_finished(sl_once_thread *t) { return atomic_load(&t->finished); }

void sl_once_thread_join(sl_once_thread *t) {
  pthread_mutex_lock(&t->mu);
  if (t->running) {
    pthread_join(t->thread, NULL);
    t->running = false;
  }
  pthread_mutex_unlock(&t->mu);
}
