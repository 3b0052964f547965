/* See once_thread.h. */
#include "engine/core/once_thread.h"

#include <string.h>

void sl_once_thread_start(sl_once_thread *t, void *(*fn)(void *), const void *arg, size_t arg_size) {
  pthread_mutex_lock(&t->mu);
  if (!t->started && arg_size <= sizeof t->arg) {
    t->started = true;
    if (arg_size) memcpy(t->arg, arg, arg_size);
    t->running = pthread_create(&t->thread, NULL, fn, t->arg) == 0;
  }
  pthread_mutex_unlock(&t->mu);
}

void sl_once_thread_join(sl_once_thread *t) {
  pthread_mutex_lock(&t->mu);
  if (t->running) {
    pthread_join(t->thread, NULL);
    t->running = false;
  }
  pthread_mutex_unlock(&t->mu);
}
