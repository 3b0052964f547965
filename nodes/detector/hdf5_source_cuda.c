/* hdf5_source on CUDA. See hdf5_source_cuda.h.
 *
 * Only the backend interface (engine/backend/backend.h) is used: pinned host
 * memory, asynchronous copies on the backend's queues, events. No CUDA
 * object is held here.
 *
 * The windows (source_window.c) are allocated with the backend's host_alloc
 * (pinned), so the reader's preads land in memory the copy engine reads
 * directly. The header and entries are packed in front of the window's bytes
 * (the CPU kernel's output layout, from the same code), and header + entries
 * + bytes go up with one copy_async (plain frames: one per contiguous run).
 * After the copies out of a window an event is recorded; before the reader
 * may write that window again (the read-ahead into it, or freeing it) the
 * event is waited for (event_wait), so a copy still in flight never sees new
 * bytes.
 *
 * Two ways to move a chunk (SLUICE_SOURCE_OVERLAP, read once per node state):
 *
 * - Overlapped (the default; SLUICE_SOURCE_OVERLAP unset or not "0"): an
 *   uploader thread owned by the node state drives the windows in the order
 *   of the scan's chunks (chunk j covers positions [base + j*C, min(base +
 *   (j+1)*C, P)), C = the first call's pos_count) and copies each into one of
 *   two device prefetch buffers (prefetch[j % 2], sized like the output slot,
 *   pieces of the node's device table) on the backend's copy queue (SL_QUEUE_COPY; the thread calls bind_thread
 *   first), after the copy queue waited for consumed[j % 2] (the main
 *   queue's copy out of that buffer for chunk j - 2), then records
 *   uploaded[j % 2]. The kernel for chunk j waits (condition variable)
 *   until upload j was issued, makes the main queue (SL_QUEUE_COMPUTE) wait
 *   for uploaded[j % 2], copies prefetch[j % 2] to its output slot
 *   device-to-device (a few microseconds) and records consumed[j % 2]. So
 *   while the main queue runs chunk j's levels the copy queue uploads chunk
 *   j + 1 (and j + 2 once its buffer is free). A call for a chunk that
 *   is not the next one (a second pass, another chunking) stops the thread,
 *   waits for its copies and restarts the sequence there. An error of the
 *   thread (the reader's I/O error, a backend error) is kept and returned by
 *   the call for the chunk it happened on, as is.
 * - Direct (SLUICE_SOURCE_OVERLAP=0): the call itself takes the window and
 *   copies it to its output slot on the main queue, in order with the
 *   kernels (so a copy never overlaps them). Kept for comparison on the
 *   device. */
#include "nodes/detector/hdf5_source_cuda.h"

#include "nodes/hdf5/source_window.h"
#include "shaders/cuda/common/device_table.h"

/* The node's device table: the two prefetch buffers, each one output slot
 * of `positions` (the overlapped path; the direct path takes nothing). */
static void prefetch_layout(sl_table *t, const sl_tensor_desc *d, int64_t positions, void *pre[2]) {
  for (int k = 0; k < 2; k++) pre[k] = sl_table_take(t, sl_src_output_bytes(d, positions));
}

int64_t sl_hdf5_source_cuda_table_bytes(const sl_tensor_desc *d, int64_t positions) {
  sl_table t = sl_table_counter();
  void *pre[2];
  prefetch_layout(&t, d, positions, pre);
  return t.used;
}

#ifdef SLUICE_HAVE_CUDA

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/settings.h"
#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "nodes/common/cuda_glue.h"

typedef struct src_cuda {
  sl_backend *backend; /* allocated the windows; frees them */
  sl_src_state *s;
  sl_event *done[2]; /* recorded after the copies out of window w */
  bool in_flight[2]; /* copies out of window w were enqueued and not waited for */

  /* ---- overlapped path ---- */
  bool overlap;
  sl_tensor_desc desc;      /* the output's */
  void *pre[2];             /* device prefetch buffers: pieces of the node's device table */
  uint64_t pre_len[2];      /* bytes of the chunk in prefetch[k] */
  sl_event *uploaded[2];    /* copy queue: prefetch[k] holds its chunk */
  sl_event *consumed[2];    /* main queue: prefetch[k] was copied out */
  bool have_sync;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool have_thread;
  bool need_reset; /* a failed call: restart the sequence at the next one */
  /* The sequence (set before the thread starts, constant while it runs). */
  int64_t base, cpos, total, n_seq;
  int64_t next_chunk; /* executor's thread: the chunk the next call should ask for */
  /* Under mu. */
  int64_t issued;        /* uploads of chunks [0, issued) were enqueued */
  int64_t consumed_upto; /* consumed events of chunks [0, consumed_upto) were recorded */
  bool stop, exited;
  sl_code thread_rc;
  sl_error thread_err;
} src_cuda;

static sl_code win_alloc(void *ctx, size_t bytes, void **ptr, sl_error *err) {
  src_cuda *c = ctx;
  return c->backend->ops->host_alloc(c->backend, bytes, ptr, err);
}

static void win_free(void *ctx, void *ptr, size_t bytes) {
  src_cuda *c = ctx;
  c->backend->ops->host_free(c->backend, ptr, bytes);
}

/* Window w is about to be overwritten: its copies must be over. */
static sl_code win_reuse(void *ctx, int w, sl_error *err) {
  src_cuda *c = ctx;
  if (!c->in_flight[w]) return SL_OK;
  c->in_flight[w] = false;
  return c->backend->ops->event_wait(c->backend, c->done[w], err);
}

typedef struct copy_ctx {
  sl_backend *backend;
  uint8_t *dst;
  sl_queue queue;
} copy_ctx;

static sl_code copy_up(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  copy_ctx *k = ctx;
  return k->backend->ops->copy_async(k->backend, k->queue, k->dst + dst_offset, src, (size_t)bytes, err);
}

/* Window -> dst on queue q (the output layout), then the window's event.
 * *len: the bytes of dst written. */
static sl_code window_up(src_cuda *c, const sl_src_window *win, int64_t pos_start, int64_t pos_count, void *dst,
                         sl_queue q, uint64_t *len, sl_error *err) {
  sl_src_state *s = c->s;
  const sl_tensor_desc *d = &c->desc;
  copy_ctx k = {.backend = c->backend, .dst = dst, .queue = q};
  sl_code rc;
  if (d->encoding == SL_ENC_NONE) {
    rc = sl_src_plain(win, s->ix, s->where, pos_start, pos_count, sl_desc_item_bytes(d), copy_up, &k, err);
    *len = (uint64_t)pos_count * (uint64_t)sl_desc_item_bytes(d);
  } else {
    const uint8_t *packed;
    uint64_t bytes = 0;
    rc = sl_src_pack(win, s->ix, (uint64_t)sl_src_output_bytes(d, pos_count), &packed, &bytes, err);
    if (rc == SL_OK) rc = copy_up(&k, 0, packed, bytes, err);
    *len = bytes;
  }
  /* Even after a failed copy: earlier ones of this call may be in flight. */
  sl_error rec_err;
  sl_error_clear(&rec_err);
  sl_code rec = c->backend->ops->event_record(c->backend, c->done[win->buffer], q, &rec_err);
  if (rec == SL_OK)
    c->in_flight[win->buffer] = true;
  else if (rc == SL_OK) {
    *err = rec_err;
    rc = rec;
  }
  return rc;
}

/* ---- overlapped path: the uploader thread ---- */

static void chunk_range(const src_cuda *c, int64_t j, int64_t *start, int64_t *count) {
  *start = c->base + j * c->cpos;
  *count = c->total - *start < c->cpos ? c->total - *start : c->cpos;
}

static void thread_fail(src_cuda *c, sl_code rc, const sl_error *err) {
  pthread_mutex_lock(&c->mu);
  c->thread_rc = rc;
  c->thread_err = *err;
  if (c->thread_err.code == SL_OK) sl_fail(&c->thread_err, rc, "hdf5_source: the uploader failed");
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void *uploader(void *arg) {
  src_cuda *c = arg;
  const sl_backend_ops *ops = c->backend->ops;
  sl_error err;
  sl_error_clear(&err);
  int64_t n_seq = c->n_seq;
  sl_code brc = ops->bind_thread(c->backend, &err);
  if (brc != SL_OK) {
    thread_fail(c, brc, &err);
    n_seq = 0;
  }
  for (int64_t j = 0; j < n_seq; j++) {
    pthread_mutex_lock(&c->mu);
    bool stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    if (stop) break;
    int64_t start, count;
    chunk_range(c, j, &start, &count);
    sl_src_window win;
    sl_code rc = sl_src_windows_get(&c->s->win, start, count, c->total, &win, &err);
    if (rc != SL_OK) {
      thread_fail(c, rc, &err);
      break;
    }
    int k = (int)(j % 2);
    if (j >= 2) {
      /* prefetch[k] is free once the main stream copied chunk j - 2 out. */
      pthread_mutex_lock(&c->mu);
      while (!c->stop && c->consumed_upto < j - 1) pthread_cond_wait(&c->cv, &c->mu);
      stop = c->stop;
      pthread_mutex_unlock(&c->mu);
      if (stop) break;
      rc = ops->queue_wait_event(c->backend, SL_QUEUE_COPY, c->consumed[k], &err);
      if (rc != SL_OK) {
        thread_fail(c, rc, &err);
        break;
      }
    }
    uint64_t len = 0;
    rc = window_up(c, &win, start, count, c->pre[k], SL_QUEUE_COPY, &len, &err);
    sl_error rec_err;
    sl_error_clear(&rec_err);
    sl_code rec = ops->event_record(c->backend, c->uploaded[k], SL_QUEUE_COPY, &rec_err);
    if (rc == SL_OK && rec != SL_OK) {
      err = rec_err;
      rc = rec;
    }
    if (rc != SL_OK) {
      thread_fail(c, rc, &err);
      break;
    }
    pthread_mutex_lock(&c->mu);
    c->pre_len[k] = len;
    c->issued = j + 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  pthread_mutex_lock(&c->mu);
  c->exited = true;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Stops the thread and waits for every copy it and the calls enqueued into
 * or out of the prefetch buffers. The windows' own events are waited for by
 * their reuse hook. */
static void overlap_stop(src_cuda *c) {
  if (c->have_thread) {
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    c->have_thread = false;
  }
  sl_error ignored;
  sl_error_clear(&ignored);
  for (int k = 0; k < 2; k++) {
    if (c->uploaded[k]) (void)c->backend->ops->event_wait(c->backend, c->uploaded[k], &ignored);
    if (c->consumed[k]) (void)c->backend->ops->event_wait(c->backend, c->consumed[k], &ignored);
  }
}

static void stop_hook(void *ctx) { overlap_stop(ctx); }

/* The node's device table went back (the executor's run context ended):
 * the thread stops, and the next call restarts the sequence in the table of
 * its own run. Registered as the node's device state; the state itself
 * stays with the node's state (dev_free). */
static void table_gone(void *ctx) {
  src_cuda *c = ctx;
  overlap_stop(c);
  c->pre[0] = c->pre[1] = NULL;
  c->need_reset = true;
}

/* Starts the sequence of chunks of `count` positions from position `start`,
 * into prefetch buffers taken from the call's device table. */
static sl_code overlap_start(src_cuda *c, sl_kernel_args *a, int64_t start, int64_t count) {
  sl_table t = sl_table_lent(a);
  prefetch_layout(&t, &c->desc, count, c->pre);
  sl_code rc = sl_table_check(&t, a, "hdf5_source");
  if (rc != SL_OK) return rc;
  sl_cuda_state_holder slot = sl_glue_device_state(a);
  if (!*slot.state) {
    *slot.state = c;
    *slot.release = table_gone;
  }
  sl_error *err = a->err;
  c->base = start;
  c->cpos = count;
  c->total = sl_desc_positions(&c->desc);
  c->n_seq = (c->total - start + count - 1) / count;
  c->next_chunk = 0;
  c->issued = 0;
  c->consumed_upto = 0;
  c->stop = false;
  c->exited = false;
  c->thread_rc = SL_OK;
  sl_error_clear(&c->thread_err);
  c->need_reset = false;
  if (pthread_create(&c->thread, NULL, uploader, c) != 0)
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: cannot start the uploader thread");
  c->have_thread = true;
  return SL_OK;
}

/* Events made here are destroyed by dev_free, also after a failure. */
static sl_code overlap_setup(src_cuda *c, sl_error *err) {
  const sl_backend_ops *ops = c->backend->ops;
  for (int k = 0; k < 2; k++) {
    sl_code rc = ops->event_create(c->backend, &c->uploaded[k], err);
    if (rc == SL_OK) rc = ops->event_create(c->backend, &c->consumed[k], err);
    if (rc != SL_OK) return rc;
  }
  if (pthread_mutex_init(&c->mu, NULL) != 0)
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: cannot create a mutex");
  if (pthread_cond_init(&c->cv, NULL) != 0) {
    pthread_mutex_destroy(&c->mu);
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: cannot create a condition variable");
  }
  c->have_sync = true;
  return SL_OK;
}

/* The call for positions [pos_start, pos_start + pos_count) on the
 * overlapped path. */
static sl_code overlap_call(src_cuda *c, sl_kernel_args *a) {
  sl_code rc = SL_OK;
  int64_t start, count;
  if (c->have_thread && !c->need_reset && c->next_chunk < c->n_seq) {
    chunk_range(c, c->next_chunk, &start, &count);
  } else {
    start = count = -1;
  }
  if (start != a->pos_start || count != a->pos_count) {
    /* Not the next chunk of the sequence: a new pass, or another chunking. */
    overlap_stop(c);
    if ((rc = overlap_start(c, a, a->pos_start, a->pos_count)) != SL_OK) {
      c->need_reset = true;
      return rc;
    }
  }
  int64_t j = c->next_chunk;
  pthread_mutex_lock(&c->mu);
  while (c->issued <= j && c->thread_rc == SL_OK && !c->exited) pthread_cond_wait(&c->cv, &c->mu);
  if (c->issued <= j) {
    if (c->thread_rc != SL_OK) {
      rc = c->thread_rc;
      *a->err = c->thread_err;
    } else {
      rc = sl_fail(a->err, SL_ERR_INTERNAL, "hdf5_source: the uploader stopped before chunk %lld",
                   (long long)a->chunk);
    }
  }
  uint64_t len = c->pre_len[j % 2];
  pthread_mutex_unlock(&c->mu);
  if (rc != SL_OK) {
    c->need_reset = true;
    return rc;
  }
  int k = (int)(j % 2);
  const sl_backend_ops *ops = c->backend->ops;
  rc = ops->queue_wait_event(c->backend, SL_QUEUE_COMPUTE, c->uploaded[k], a->err);
  if (rc == SL_OK && len)
    rc = ops->copy_async(c->backend, SL_QUEUE_COMPUTE, a->out[0], c->pre[k], (size_t)len, a->err);
  sl_error rec_err;
  sl_error_clear(&rec_err);
  sl_code rec = ops->event_record(c->backend, c->consumed[k], SL_QUEUE_COMPUTE, &rec_err);
  if (rc == SL_OK && rec != SL_OK) {
    *a->err = rec_err;
    rc = rec;
  }
  if (rc != SL_OK) {
    c->need_reset = true;
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  c->consumed_upto = j + 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  c->next_chunk = j + 1;
  if (c->desc.encoding != SL_ENC_NONE) a->out_bytes[0] = (int64_t)len; /* what was written */
  return SL_OK;
}

/* ---- state ---- */

static void dev_free(sl_src_state *s) {
  src_cuda *c = s->dev;
  if (!c) return;
  sl_backend *b = c->backend;
  if (c->have_sync) overlap_stop(c); /* the windows' stop hook did it already */
  sl_error ignored;
  sl_error_clear(&ignored);
  for (int w = 0; w < 2; w++) {
    if (!c->done[w]) continue;
    if (c->in_flight[w]) (void)b->ops->event_wait(b, c->done[w], &ignored);
    b->ops->event_destroy(b, c->done[w]);
  }
  for (int k = 0; k < 2; k++) {
    if (c->uploaded[k]) b->ops->event_destroy(b, c->uploaded[k]);
    if (c->consumed[k]) b->ops->event_destroy(b, c->consumed[k]);
  }
  if (c->have_sync) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
  }
  free(c);
  s->dev = NULL;
  s->dev_free = NULL;
}

/* On unless the setting source_overlap is false (SLUICE_SOURCE_OVERLAP=0 or
 * --setting source_overlap=false: the direct path, kept for comparison). */
static bool overlap_wanted(void) { return sl_setting_bool(SL_SET_SOURCE_OVERLAP); }

/* The CUDA part of the state, made on the first call (the backend is known
 * only then); the windows are allocated through it. */
static sl_code setup(sl_src_state *s, sl_kernel_args *a, sl_error *err) {
  sl_backend *b = a->backend;
  if (s->dev) {
    src_cuda *c = s->dev;
    if (c->backend == b) return SL_OK;
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: the node's state belongs to another backend");
  }
  if (s->win.base[0] || s->win.reader)
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: the windows were made for another backend");
  src_cuda *c = sl_calloc(1, sizeof *c);
  if (!c) return sl_fail_nomem(err, "the source's device state");
  c->backend = b;
  c->s = s;
  c->desc = a->node->out[0];
  s->dev = c;
  s->dev_free = dev_free;
  for (int w = 0; w < 2; w++) {
    sl_code rc = b->ops->event_create(b, &c->done[w], err);
    if (rc != SL_OK) return rc;
  }
  s->win.al = (sl_src_alloc){.alloc = win_alloc, .free = win_free, .reuse = win_reuse, .ctx = c};
  const sl_device_env *env = b->ops->device_env ? b->ops->device_env(b) : NULL;
  if (overlap_wanted() && env && env->copy_queue) {
    sl_code rc = overlap_setup(c, err);
    if (rc != SL_OK) return rc;
    c->overlap = true;
    s->win.al.stop = stop_hook;
  }
  return SL_OK;
}

sl_code sl_hdf5_source_cuda(sl_kernel_args *a) {
  sl_src_state *s = a->state;
  sl_code rc = setup(s, a, a->err);
  if (rc != SL_OK) return rc;
  src_cuda *c = s->dev;
  if (c->overlap) return overlap_call(c, a);
  sl_src_window win;
  rc = sl_src_windows_get(&s->win, a->pos_start, a->pos_count, sl_desc_positions(&c->desc), &win, a->err);
  if (rc != SL_OK) return rc;
  uint64_t len = 0;
  rc = window_up(c, &win, a->pos_start, a->pos_count, a->out[0], SL_QUEUE_COMPUTE, &len, a->err);
  if (rc == SL_OK && c->desc.encoding != SL_ENC_NONE) a->out_bytes[0] = (int64_t)len; /* what was written */
  return rc;
}

#endif
