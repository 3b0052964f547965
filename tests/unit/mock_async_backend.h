/* A mock asynchronous device backend for tests of the executor's prefetch
 * stage (engine/exec/prefetch.h) without a GPU: caps.device_memory is true
 * but its "device" memory is host memory, and it runs the CPU kernels (its
 * kind is the CPU's). Its compute queue is the caller's thread (everything
 * on it runs at once, in order); its copy queue is a thread of its own that
 * performs each copy_async after a random delay (0-200 us, after a floor a
 * test may set: mock_copy_floor), so a missing
 * wait shows: a kernel reading a ring buffer before its copy landed, a copy
 * overwriting a ring buffer or reading a node's memory too early. Events
 * are counters: record takes a ticket, the queue reaches it in order;
 * queue_wait_event on the copy queue holds the copies behind it until the
 * ticket is reached; on the compute queue (and event_wait) the caller
 * blocks. sync also drains the copy queue. Kernels wait a random delay
 * before each batch commit, so that copies race with them.
 *
 * One mock backend at a time per process (its queue state is static).
 * Header-only: every tests/unit/test_*.c is its own executable. */
#ifndef SL_TESTS_MOCK_ASYNC_BACKEND_H
#define SL_TESTS_MOCK_ASYNC_BACKEND_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend/backend.h"

struct sl_event {
  int64_t recorded; /* tickets handed out */
  int64_t reached;  /* the last ticket its queue passed */
};

typedef enum { MOCK_COPY, MOCK_RECORD, MOCK_WAIT } mock_op_kind;
typedef struct mock_op {
  mock_op_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  sl_event *ev;
  int64_t ticket;
  struct mock_op *next;
} mock_op;

static struct {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool running, stop;
  int users; /* backends made and not destroyed (the shards of a split run share the queue) */
  mock_op *head, *tail;
  int64_t enqueued, done; /* copy-queue ops */
  unsigned seed;
  int64_t copies, waits_on_copy_queue, events_alive;
  int copy_floor_us; /* a copy's least delay (a slow link), 0 unless a test sets it */
} g_mock = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Sets every later copy's least delay (under the mock's lock: the copy
 * queue's thread reads it). */
static inline void mock_copy_floor(int us) {
  pthread_mutex_lock(&g_mock.mu);
  g_mock.copy_floor_us = us;
  pthread_mutex_unlock(&g_mock.mu);
}

/* A random delay of 0-max_us microseconds (rand_r under the mock's lock). */
static inline void mock_delay(int max_us) {
  pthread_mutex_lock(&g_mock.mu);
  int us = (int)(rand_r(&g_mock.seed) % (unsigned)(max_us + 1));
  pthread_mutex_unlock(&g_mock.mu);
  struct timespec ts = {0, (long)us * 1000};
  nanosleep(&ts, NULL);
}

static inline void *mock_copy_queue(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mock.mu);
  for (;;) {
    while (!g_mock.head && !g_mock.stop) pthread_cond_wait(&g_mock.cv, &g_mock.mu);
    if (!g_mock.head) break;
    mock_op *op = g_mock.head;
    if (op->kind == MOCK_WAIT) { /* holds what follows until the ticket is reached */
      while (op->ev->reached < op->ticket) pthread_cond_wait(&g_mock.cv, &g_mock.mu);
    } else if (op->kind == MOCK_COPY) {
      const int floor_us = g_mock.copy_floor_us;
      pthread_mutex_unlock(&g_mock.mu);
      if (floor_us > 0) nanosleep(&(struct timespec){floor_us / 1000000, (long)(floor_us % 1000000) * 1000}, NULL);
      mock_delay(200);
      memcpy(op->dst, op->src, op->bytes);
      pthread_mutex_lock(&g_mock.mu);
    } else {
      op->ev->reached = op->ticket;
    }
    g_mock.head = op->next;
    if (!g_mock.head) g_mock.tail = NULL;
    g_mock.done++;
    free(op);
    pthread_cond_broadcast(&g_mock.cv);
  }
  pthread_mutex_unlock(&g_mock.mu);
  return NULL;
}

static inline sl_code mock_enqueue(mock_op op, sl_error *err) {
  mock_op *o = malloc(sizeof *o);
  if (!o) return sl_fail_nomem(err, "a mock copy-queue op");
  *o = op;
  o->next = NULL;
  pthread_mutex_lock(&g_mock.mu);
  if (g_mock.tail) g_mock.tail->next = o;
  else g_mock.head = o;
  g_mock.tail = o;
  g_mock.enqueued++;
  pthread_cond_broadcast(&g_mock.cv);
  pthread_mutex_unlock(&g_mock.mu);
  return SL_OK;
}

/* Blocks until everything enqueued on the copy queue so far is done. */
static inline void mock_drain(void) {
  pthread_mutex_lock(&g_mock.mu);
  int64_t upto = g_mock.enqueued;
  while (g_mock.done < upto) pthread_cond_wait(&g_mock.cv, &g_mock.mu);
  pthread_mutex_unlock(&g_mock.mu);
}

static inline sl_code mock_probe(sl_backend_caps *caps, sl_error *err) {
  sl_code rc = sl_cpu_backend_ops.probe(caps, err);
  caps->device_memory = true; /* as far as the plan and the executor care */
  return rc;
}

static inline sl_code mock_create(int threads, sl_backend **out, sl_error *err) {
  sl_code rc = sl_cpu_backend_ops.create(threads, out, err);
  if (rc != SL_OK) return rc;
  (*out)->caps.device_memory = true;
  pthread_mutex_lock(&g_mock.mu);
  const bool first = g_mock.users++ == 0;
  if (first) {
    g_mock.stop = false;
    g_mock.seed = 12345u;
  }
  pthread_mutex_unlock(&g_mock.mu);
  if (first && pthread_create(&g_mock.thread, NULL, mock_copy_queue, NULL) != 0) {
    pthread_mutex_lock(&g_mock.mu);
    g_mock.users--;
    pthread_mutex_unlock(&g_mock.mu);
    sl_cpu_backend_ops.destroy(*out);
    return sl_fail(err, SL_ERR_BACKEND, "mock: cannot start the copy queue");
  }
  if (first) g_mock.running = true;
  return SL_OK;
}

static inline void mock_destroy(sl_backend *b) {
  pthread_mutex_lock(&g_mock.mu);
  const bool last = --g_mock.users == 0;
  pthread_mutex_unlock(&g_mock.mu);
  if (!last) mock_drain(); /* the others' copies go on */
  if (last && g_mock.running) {
    mock_drain();
    pthread_mutex_lock(&g_mock.mu);
    g_mock.stop = true;
    pthread_cond_broadcast(&g_mock.cv);
    pthread_mutex_unlock(&g_mock.mu);
    pthread_join(g_mock.thread, NULL);
    g_mock.running = false;
  }
  sl_cpu_backend_ops.destroy(b);
}

static inline sl_code mock_sync(sl_backend *b, sl_error *err) {
  mock_drain();
  return sl_cpu_backend_ops.sync(b, err);
}

static inline sl_code mock_batch_commit(sl_backend *b, sl_error *err) {
  mock_delay(100);
  return sl_cpu_backend_ops.batch_commit(b, err);
}

static inline sl_code mock_bind_thread(sl_backend *b, sl_error *err) {
  (void)b;
  (void)err;
  return SL_OK;
}

static inline sl_code mock_event_create(sl_backend *b, sl_event **ev, sl_error *err) {
  (void)b;
  *ev = calloc(1, sizeof **ev);
  if (!*ev) return sl_fail_nomem(err, "a mock event");
  pthread_mutex_lock(&g_mock.mu);
  g_mock.events_alive++;
  pthread_mutex_unlock(&g_mock.mu);
  return SL_OK;
}

static inline void mock_event_destroy(sl_backend *b, sl_event *ev) {
  (void)b;
  pthread_mutex_lock(&g_mock.mu);
  g_mock.events_alive--;
  pthread_mutex_unlock(&g_mock.mu);
  free(ev);
}

static inline sl_code mock_event_record(sl_backend *b, sl_event *ev, sl_queue q, sl_error *err) {
  (void)b;
  pthread_mutex_lock(&g_mock.mu);
  int64_t ticket = ++ev->recorded;
  if (q == SL_QUEUE_COMPUTE) { /* everything on the compute queue is done already */
    ev->reached = ticket;
    pthread_cond_broadcast(&g_mock.cv);
  }
  pthread_mutex_unlock(&g_mock.mu);
  if (q == SL_QUEUE_COMPUTE) return SL_OK;
  return mock_enqueue((mock_op){.kind = MOCK_RECORD, .ev = ev, .ticket = ticket}, err);
}

static inline sl_code mock_event_wait(sl_backend *b, sl_event *ev, sl_error *err) {
  (void)b;
  (void)err;
  pthread_mutex_lock(&g_mock.mu);
  int64_t ticket = ev->recorded;
  while (ev->reached < ticket) pthread_cond_wait(&g_mock.cv, &g_mock.mu);
  pthread_mutex_unlock(&g_mock.mu);
  return SL_OK;
}

static inline sl_code mock_queue_wait_event(sl_backend *b, sl_queue q, sl_event *ev, sl_error *err) {
  if (q == SL_QUEUE_COMPUTE) return mock_event_wait(b, ev, err);
  pthread_mutex_lock(&g_mock.mu);
  int64_t ticket = ev->recorded;
  g_mock.waits_on_copy_queue++;
  pthread_mutex_unlock(&g_mock.mu);
  return mock_enqueue((mock_op){.kind = MOCK_WAIT, .ev = ev, .ticket = ticket}, err);
}

static inline sl_code mock_copy_async(sl_backend *b, sl_queue q, void *dst, const void *src, size_t bytes,
                                      sl_error *err) {
  (void)b;
  if (q == SL_QUEUE_COMPUTE) {
    memcpy(dst, src, bytes);
    return SL_OK;
  }
  pthread_mutex_lock(&g_mock.mu);
  g_mock.copies++;
  pthread_mutex_unlock(&g_mock.mu);
  return mock_enqueue((mock_op){.kind = MOCK_COPY, .dst = dst, .src = src, .bytes = bytes}, err);
}

static inline sl_backend_ops mock_async_ops(void) {
  sl_backend_ops o = sl_cpu_backend_ops;
  o.probe = mock_probe;
  o.create = mock_create;
  o.destroy = mock_destroy;
  o.sync = mock_sync;
  o.batch_commit = mock_batch_commit;
  o.bind_thread = mock_bind_thread;
  o.event_create = mock_event_create;
  o.event_destroy = mock_event_destroy;
  o.event_record = mock_event_record;
  o.queue_wait_event = mock_queue_wait_event;
  o.event_wait = mock_event_wait;
  o.copy_async = mock_copy_async;
  return o;
}

#endif
