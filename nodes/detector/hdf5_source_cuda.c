/* hdf5_source on CUDA. See hdf5_source_cuda.h.
 *
 * The windows (source_window.c) are allocated with the backend's host_alloc
 * (pinned), so the reader's preads land in memory the copy engine reads
 * directly. The header and entries are packed in front of the window's bytes
 * (the CPU kernel's output layout, from the same code), and header + entries
 * + bytes go up with one cudaMemcpyAsync (plain frames: one per contiguous
 * run). After the copies out of a window an event is recorded; before the
 * reader may write that window again (the read-ahead into it, or freeing it)
 * the event is waited for (cudaEventSynchronize), so a copy still in flight
 * never sees new bytes.
 *
 * Two ways to move a chunk (SLUICE_SOURCE_OVERLAP, read once per node state):
 *
 * - Overlapped (the default; SLUICE_SOURCE_OVERLAP unset or not "0"): an
 *   uploader thread owned by the node state drives the windows in the order
 *   of the scan's chunks (chunk j covers positions [base + j*C, min(base +
 *   (j+1)*C, P)), C = the first call's pos_count) and copies each into one of
 *   two device prefetch buffers (prefetch[j % 2], sized like the output slot)
 *   on the backend's copy stream (sl_cuda_copy_stream), after the copy stream
 *   waited for consumed[j % 2] (the main stream's copy out of that buffer for
 *   chunk j - 2), then records uploaded[j % 2]. The kernel for chunk j waits
 *   (condition variable) until upload j was issued, makes the main stream
 *   wait for uploaded[j % 2], copies prefetch[j % 2] to its output slot
 *   device-to-device (a few microseconds) and records consumed[j % 2]. So
 *   while the main stream runs chunk j's levels the copy stream uploads
 *   chunk j + 1 (and j + 2 once its buffer is free). A call for a chunk that
 *   is not the next one (a second pass, another chunking) stops the thread,
 *   waits for its copies and restarts the sequence there. An error of the
 *   thread (the reader's I/O error, a CUDA error) is kept and returned by the
 *   call for the chunk it happened on, as is.
 * - Direct (SLUICE_SOURCE_OVERLAP=0): the call itself takes the window and
 *   copies it to its output slot on the main stream, in order with the
 *   kernels (so a copy never overlaps them). Kept for comparison on the
 *   device. */
#include "nodes/detector/hdf5_source_cuda.h"

#ifdef SLUICE_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "shaders/cuda/sl_cuda.h"
#include "nodes/hdf5/source_window.h"

typedef struct src_cuda {
  sl_backend *backend; /* allocated the windows; frees them */
  sl_src_state *s;
  cudaEvent_t done[2]; /* recorded after the copies out of window w */
  bool have_event[2];
  bool in_flight[2]; /* copies out of window w were enqueued and not waited for */

  /* ---- overlapped path ---- */
  bool overlap;
  int device;               /* the backend's device (current on the executor's thread) */
  cudaStream_t copy;        /* the backend's copy stream */
  sl_tensor_desc desc;      /* the output's */
  void *pre[2];             /* device prefetch buffers */
  size_t pre_bytes;         /* of each */
  uint64_t pre_len[2];      /* bytes of the chunk in prefetch[k] */
  cudaEvent_t uploaded[2];  /* copy stream: prefetch[k] holds its chunk */
  cudaEvent_t consumed[2];  /* main stream: prefetch[k] was copied out */
  bool have_ov_events;
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

static sl_code cuda_error(sl_error *err, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return sl_fail(err, e == cudaErrorMemoryAllocation ? SL_ERR_NOMEM : SL_ERR_BACKEND, "hdf5_source: %s: %s (%s)",
                 what, cudaGetErrorString(e), cudaGetErrorName(e));
}

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
  cudaError_t e = cudaEventSynchronize(c->done[w]);
  return e == cudaSuccess ? SL_OK : cuda_error(err, e, "waiting for the copies out of a read-ahead window");
}

typedef struct copy_ctx {
  uint8_t *dst;
  cudaStream_t stream;
} copy_ctx;

static sl_code copy_up(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  copy_ctx *k = ctx;
  cudaError_t e = cudaMemcpyAsync(k->dst + dst_offset, src, (size_t)bytes, cudaMemcpyHostToDevice, k->stream);
  return e == cudaSuccess ? SL_OK : cuda_error(err, e, "cannot copy a window to the device");
}

/* Window -> dst on `stream` (the output layout), then the window's event.
 * *len: the bytes of dst written. */
static sl_code window_up(src_cuda *c, const sl_src_window *win, int64_t pos_start, int64_t pos_count, void *dst,
                         cudaStream_t stream, uint64_t *len, sl_error *err) {
  sl_src_state *s = c->s;
  const sl_tensor_desc *d = &c->desc;
  copy_ctx k = {.dst = dst, .stream = stream};
  sl_code rc;
  if (d->encoding == SL_ENC_NONE) {
    rc = sl_src_plain(win, s->ix, s->where, pos_start, pos_count, sl_desc_item_bytes(d), copy_up, &k, err);
    *len = (uint64_t)pos_count * (uint64_t)sl_desc_item_bytes(d);
  } else {
    const uint8_t *packed;
    uint64_t bytes = 0;
    rc = sl_src_pack(win, s->ix, s->where, (uint64_t)sl_desc_buffer_bytes(d, pos_count), &packed, &bytes, err);
    if (rc == SL_OK) rc = copy_up(&k, 0, packed, bytes, err);
    *len = bytes;
  }
  /* Even after a failed copy: earlier ones of this call may be in flight. */
  cudaError_t e = cudaEventRecord(c->done[win->buffer], stream);
  if (e == cudaSuccess)
    c->in_flight[win->buffer] = true;
  else if (rc == SL_OK)
    rc = cuda_error(err, e, "cannot record an event");
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
  sl_error err;
  sl_error_clear(&err);
  int64_t n_seq = c->n_seq;
  cudaError_t e = cudaSetDevice(c->device);
  if (e != cudaSuccess) {
    thread_fail(c, cuda_error(&err, e, "the uploader thread cannot use the device"), &err);
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
      e = cudaStreamWaitEvent(c->copy, c->consumed[k], 0);
      if (e != cudaSuccess) {
        thread_fail(c, cuda_error(&err, e, "the copy stream cannot wait for an event"), &err);
        break;
      }
    }
    uint64_t len = 0;
    rc = window_up(c, &win, start, count, c->pre[k], c->copy, &len, &err);
    e = cudaEventRecord(c->uploaded[k], c->copy);
    if (rc == SL_OK && e != cudaSuccess) rc = cuda_error(&err, e, "cannot record an event");
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
  if (c->have_ov_events) {
    for (int k = 0; k < 2; k++) {
      (void)cudaEventSynchronize(c->uploaded[k]);
      (void)cudaEventSynchronize(c->consumed[k]);
    }
    (void)cudaGetLastError();
  }
}

static void stop_hook(void *ctx) { overlap_stop(ctx); }

/* Starts the sequence of chunks of `count` positions from position `start`. */
static sl_code overlap_start(src_cuda *c, int64_t start, int64_t count, sl_error *err) {
  size_t need = (size_t)sl_desc_buffer_bytes(&c->desc, count);
  if (need > c->pre_bytes) {
    for (int k = 0; k < 2; k++) {
      if (c->pre[k]) c->backend->ops->free(c->backend, c->pre[k], c->pre_bytes);
      c->pre[k] = NULL;
    }
    c->pre_bytes = 0;
    for (int k = 0; k < 2; k++) {
      sl_code rc = c->backend->ops->alloc(c->backend, need, &c->pre[k], err);
      if (rc != SL_OK) {
        if (k == 1) {
          c->backend->ops->free(c->backend, c->pre[0], need);
          c->pre[0] = NULL;
        }
        return rc;
      }
    }
    c->pre_bytes = need;
  }
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

static sl_code overlap_setup(src_cuda *c, sl_error *err) {
  cudaError_t e = cudaGetDevice(&c->device);
  if (e != cudaSuccess) return cuda_error(err, e, "cannot read the current device");
  for (int k = 0; k < 2; k++) {
    e = cudaEventCreateWithFlags(&c->uploaded[k], cudaEventDisableTiming);
    if (e == cudaSuccess) {
      e = cudaEventCreateWithFlags(&c->consumed[k], cudaEventDisableTiming);
      if (e != cudaSuccess) (void)cudaEventDestroy(c->uploaded[k]);
    }
    if (e != cudaSuccess) {
      if (k == 1) {
        (void)cudaEventDestroy(c->uploaded[0]);
        (void)cudaEventDestroy(c->consumed[0]);
      }
      return cuda_error(err, e, "cannot create an event");
    }
  }
  c->have_ov_events = true;
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
    if ((rc = overlap_start(c, a->pos_start, a->pos_count, a->err)) != SL_OK) {
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
  cudaStream_t ms = (cudaStream_t)sl_cuda_stream(a->backend);
  cudaError_t e = cudaStreamWaitEvent(ms, c->uploaded[k], 0);
  if (e == cudaSuccess && len)
    e = cudaMemcpyAsync(a->out[0], c->pre[k], (size_t)len, cudaMemcpyDeviceToDevice, ms);
  cudaError_t er = cudaEventRecord(c->consumed[k], ms);
  if (e == cudaSuccess) e = er;
  if (e != cudaSuccess) {
    c->need_reset = true;
    return cuda_error(a->err, e, "cannot copy a prefetched chunk to its slot");
  }
  pthread_mutex_lock(&c->mu);
  c->consumed_upto = j + 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  c->next_chunk = j + 1;
  return SL_OK;
}

/* ---- state ---- */

static void dev_free(sl_src_state *s) {
  src_cuda *c = s->dev;
  if (!c) return;
  if (c->have_sync) overlap_stop(c); /* the windows' stop hook did it already */
  for (int w = 0; w < 2; w++) {
    if (!c->have_event[w]) continue;
    if (c->in_flight[w]) (void)cudaEventSynchronize(c->done[w]);
    (void)cudaEventDestroy(c->done[w]);
  }
  if (c->have_ov_events)
    for (int k = 0; k < 2; k++) {
      (void)cudaEventDestroy(c->uploaded[k]);
      (void)cudaEventDestroy(c->consumed[k]);
    }
  for (int k = 0; k < 2; k++)
    if (c->pre[k]) c->backend->ops->free(c->backend, c->pre[k], c->pre_bytes);
  if (c->have_sync) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
  }
  (void)cudaGetLastError();
  free(c);
  s->dev = NULL;
  s->dev_free = NULL;
}

/* On unless SLUICE_SOURCE_OVERLAP=0 (the direct path, kept for comparison). */
static bool overlap_wanted(void) {
  const char *v = getenv("SLUICE_SOURCE_OVERLAP");
  return !v || strcmp(v, "0") != 0;
}

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
  src_cuda *c = sl_xcalloc(1, sizeof *c);
  c->backend = b;
  c->s = s;
  c->desc = a->node->out[0];
  s->dev = c;
  s->dev_free = dev_free;
  for (int w = 0; w < 2; w++) {
    cudaError_t e = cudaEventCreateWithFlags(&c->done[w], cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_error(err, e, "cannot create an event");
    c->have_event[w] = true;
  }
  s->win.al = (sl_src_alloc){.alloc = win_alloc, .free = win_free, .reuse = win_reuse, .ctx = c};
  c->copy = (cudaStream_t)sl_cuda_copy_stream(b);
  if (overlap_wanted() && c->copy) {
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
  uint64_t len;
  return window_up(c, &win, a->pos_start, a->pos_count, a->out[0], (cudaStream_t)sl_cuda_stream(a->backend), &len,
                   a->err);
}

#endif
