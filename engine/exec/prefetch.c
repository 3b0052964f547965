/* The prefetch stage (see prefetch.h). */
#include "engine/exec/prefetch.h"

#include <pthread.h>
#include <stdlib.h>

#include "engine/core/util.h"

struct sl_prefetch {
  sl_prefetch_setup s;
  sl_queue queue; /* where the copies go: COPY with overlap, else COMPUTE */
  /* Overlap: the ring buffer k holds its chunk (copy queue), and its chunk's
   * levels ran (compute queue). */
  sl_event *uploaded[2], *consumed[2];
  /* Per piece of the node's memory: recorded after the copies out of it. */
  sl_event *piece_ev[SL_PRODUCE_PIECES];
  /* Produce's thread only (the helper, or the executor's without overlap):
   * copies emitted since the piece's event was last recorded, and a record
   * not waited for yet; the chunk's ring buffer; produce's time and calls. */
  bool pending[SL_PRODUCE_PIECES], in_flight[SL_PRODUCE_PIECES];
  bool record_lost; /* a record failed: end() syncs the whole backend */
  uint8_t *dst;
  double seconds;
  /* produce's waits for the copies out of its memory (piece_wait): the
   * copies queue behind the consumers of the ring's chunk two back, so this
   * is the consumers' pace, not produce's work (left out of `seconds`) */
  double copy_wait_seconds;
  int64_t calls;
  /* ---- overlap: shared with the helper thread, under mu ---- */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool have_sync, have_thread;
  int64_t produced; /* chunks [first_chunk, produced) are enqueued */
  int64_t given_back; /* `consumed` of chunks [first_chunk, given_back) was recorded */
  int64_t out_bytes[2]; /* what produce said ring buffer k holds */
  bool stop, exited;
  int64_t failed_chunk; /* -1, or the chunk whose produce failed */
  /* gated: recorded on the compute queue after the prologue; gate_open is
   * set then (under mu); gate_passed once the copy queue waits for it (the
   * helper only), gate_seconds the helper's wait for it (not produce's). */
  sl_event *gate_ev;
  bool gate_open, gate_passed;
  double gate_seconds;
  sl_code fail_rc;
  sl_error fail_err;
};

static const sl_backend_ops *ops_of(const sl_prefetch *p) { return p->s.backend->ops; }

static void chunk_range(const sl_prefetch *p, int64_t j, int64_t *start, int64_t *count) {
  *start = j * p->s.chunk_positions;
  *count = p->s.positions - *start < p->s.chunk_positions ? p->s.positions - *start : p->s.chunk_positions;
}

/* ---- what produce calls ---- */

static sl_code check_piece(int piece, sl_error *err) {
  if (piece >= 0 && piece < SL_PRODUCE_PIECES) return SL_OK;
  return sl_fail(err, SL_ERR_INTERNAL, "piece %d of the node's memory is outside [0, %d)", piece,
                 SL_PRODUCE_PIECES);
}

/* A gated stage's first copy: waits until the prologue was enqueued, then
 * makes the copy queue wait for it. */
static sl_code pass_gate(sl_prefetch *p, sl_error *err) {
  double t0 = sl_now();
  pthread_mutex_lock(&p->mu);
  while (!p->gate_open && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
  bool open = p->gate_open;
  pthread_mutex_unlock(&p->mu);
  p->gate_seconds += sl_now() - t0;
  if (!open) return sl_fail(err, SL_ERR_INTERRUPTED, "the pass ended before its prologue did");
  p->gate_passed = true;
  return ops_of(p)->queue_wait_event(p->s.backend, SL_QUEUE_COPY, p->gate_ev, err);
}

static sl_code emit(sl_produce_args *a, int piece, uint64_t dst_offset, const void *src, uint64_t bytes,
                    sl_error *err) {
  sl_prefetch *p = a->exec;
  sl_code rc = check_piece(piece, err);
  if (rc == SL_OK && p->gate_ev && !p->gate_passed) rc = pass_gate(p, err);
  if (rc != SL_OK) return rc;
  if (dst_offset > (uint64_t)a->out_capacity || bytes > (uint64_t)a->out_capacity - dst_offset)
    return sl_fail(err, SL_ERR_INTERNAL, "%llu bytes at byte %llu of the chunk's output pass its %lld bytes",
                   (unsigned long long)bytes, (unsigned long long)dst_offset, (long long)a->out_capacity);
  if (bytes == 0) return SL_OK;
  p->pending[piece] = true;
  return ops_of(p)->copy_async(p->s.backend, p->queue, p->dst + dst_offset, src, (size_t)bytes, err);
}

/* The piece's event after the copies emitted out of it so far. */
static sl_code record_piece(sl_prefetch *p, int piece, sl_error *err) {
  if (!p->pending[piece]) return SL_OK;
  p->pending[piece] = false;
  sl_code rc = ops_of(p)->event_record(p->s.backend, p->piece_ev[piece], p->queue, err);
  if (rc == SL_OK) p->in_flight[piece] = true;
  else p->record_lost = true;
  return rc;
}

static sl_code piece_wait(sl_produce_args *a, int piece, sl_error *err) {
  sl_prefetch *p = a->exec;
  sl_code rc = check_piece(piece, err);
  if (rc == SL_OK) rc = record_piece(p, piece, err);
  if (rc != SL_OK || !p->in_flight[piece]) return rc;
  p->in_flight[piece] = false;
  double t0 = sl_now();
  rc = ops_of(p)->event_wait(p->s.backend, p->piece_ev[piece], err);
  p->copy_wait_seconds += sl_now() - t0;
  return rc;
}

/* Chunk j: produce, its copies into ring[j % 2], then the pieces' events
 * (also after a failure: some copies may be in flight) and, with overlap,
 * `uploaded`. *bytes: what the chunk holds. */
static sl_code produce_chunk(sl_prefetch *p, int64_t j, int64_t *bytes, sl_error *err) {
  const sl_node *n = p->s.node;
  int k = (int)(j % 2);
  sl_produce_args a = {.node = n, .state = n->state, .chunk = j, .n_chunks = p->s.n_chunks,
                       .backend = p->s.backend, .emit = emit, .piece_wait = piece_wait, .err = err,
                       .exec = p};
  chunk_range(p, j, &a.pos_start, &a.pos_count);
  int64_t bound = sl_node_out_bound(n, 0, a.pos_count);
  a.out_capacity = bound >= 0 ? bound : sl_desc_buffer_bytes(&n->out[0], a.pos_count);
  if (a.out_capacity > p->s.ring_bytes)
    return sl_fail(err, SL_ERR_INTERNAL, "chunk %lld needs %lld bytes, more than the planned %lld", (long long)j,
                   (long long)a.out_capacity, (long long)p->s.ring_bytes);
  a.out_bytes = a.out_capacity;
  p->dst = p->s.ring[k];
  double t0 = sl_now(), gate0 = p->gate_seconds, wait0 = p->copy_wait_seconds;
  sl_code rc = n->desc->produce(&a);
  /* the waits for the prologue and for the copies are not produce's work */
  p->seconds += sl_now() - t0 - (p->gate_seconds - gate0) - (p->copy_wait_seconds - wait0);
  p->calls++;
  if (rc != SL_OK && err->code == SL_OK) sl_fail(err, rc, "produce failed");
  sl_error rec_err;
  sl_error_clear(&rec_err);
  for (int q = 0; q < SL_PRODUCE_PIECES; q++) {
    sl_code r = record_piece(p, q, &rec_err);
    if (rc == SL_OK && r != SL_OK) {
      *err = rec_err;
      rc = r;
    }
  }
  if (rc == SL_OK && (a.out_bytes < 0 || a.out_bytes > a.out_capacity))
    rc = sl_fail(err, SL_ERR_INTERNAL, "produce says chunk %lld holds %lld bytes, outside [0, %lld]", (long long)j,
                 (long long)a.out_bytes, (long long)a.out_capacity);
  if (rc == SL_OK && p->s.overlap)
    rc = ops_of(p)->event_record(p->s.backend, p->uploaded[k], SL_QUEUE_COPY, err);
  *bytes = a.out_bytes;
  return rc;
}

/* ---- the helper thread (overlap) ---- */

static void *helper(void *arg) {
  sl_prefetch *p = arg;
  sl_error err;
  sl_error_clear(&err);
  sl_code rc = ops_of(p)->bind_thread ? ops_of(p)->bind_thread(p->s.backend, &err) : SL_OK;
  int64_t j = p->s.first_chunk;
  for (; rc == SL_OK && j < p->s.end_chunk; j++) {
    int k = (int)(j % 2);
    /* ring[k] is free once chunk j - 2's levels were enqueued (given back),
     * and on the device once they ran (the copy queue waits for it). */
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->given_back < j - 1) pthread_cond_wait(&p->cv, &p->mu);
    bool stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    if (j - p->s.first_chunk >= 2) rc = ops_of(p)->queue_wait_event(p->s.backend, SL_QUEUE_COPY, p->consumed[k], &err);
    int64_t bytes = 0;
    if (rc == SL_OK) rc = produce_chunk(p, j, &bytes, &err);
    pthread_mutex_lock(&p->mu);
    if (rc == SL_OK) {
      p->out_bytes[k] = bytes;
      p->produced = j + 1;
      pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != SL_OK) break;
  }
  pthread_mutex_lock(&p->mu);
  if (rc != SL_OK) {
    p->failed_chunk = j;
    p->fail_rc = rc;
    p->fail_err = err;
    if (p->fail_err.code == SL_OK) sl_fail(&p->fail_err, rc, "the prefetch thread failed");
  }
  p->exited = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- the executor's side ---- */

sl_code sl_prefetch_begin(const sl_prefetch_setup *s, sl_prefetch **out, sl_error *err) {
  *out = NULL;
  const sl_backend_ops *ops = s->backend->ops;
  if (!ops->copy_async || !ops->event_create || !ops->event_record || !ops->event_wait ||
      !ops->queue_wait_event)
    return sl_fail(err, SL_ERR_BACKEND, "the %s backend has no asynchronous copies for produce",
                   sl_backend_kind_name(s->backend->caps.kind));
  sl_prefetch *p = sl_calloc(1, sizeof *p);
  if (!p) return sl_fail_nomem(err, "the prefetch stage");
  p->s = *s;
  p->queue = s->overlap ? SL_QUEUE_COPY : SL_QUEUE_COMPUTE;
  p->failed_chunk = -1;
  p->produced = p->given_back = s->first_chunk;
  sl_code rc = SL_OK;
  if (s->first_chunk < 0 || s->first_chunk > s->end_chunk || s->end_chunk > s->n_chunks)
    rc = sl_fail(err, SL_ERR_INTERNAL, "chunks [%lld, %lld) of %lld", (long long)s->first_chunk,
                 (long long)s->end_chunk, (long long)s->n_chunks);
  for (int q = 0; q < SL_PRODUCE_PIECES && rc == SL_OK; q++)
    rc = ops->event_create(s->backend, &p->piece_ev[q], err);
  for (int k = 0; k < 2 && rc == SL_OK && s->overlap; k++) {
    rc = ops->event_create(s->backend, &p->uploaded[k], err);
    if (rc == SL_OK) rc = ops->event_create(s->backend, &p->consumed[k], err);
  }
  if (rc == SL_OK && s->overlap && s->gated) rc = ops->event_create(s->backend, &p->gate_ev, err);
  if (rc == SL_OK && s->overlap) {
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
      rc = sl_fail(err, SL_ERR_INTERNAL, "cannot create the prefetch stage's mutex");
    } else if (pthread_cond_init(&p->cv, NULL) != 0) {
      pthread_mutex_destroy(&p->mu);
      rc = sl_fail(err, SL_ERR_INTERNAL, "cannot create the prefetch stage's condition variable");
    } else {
      p->have_sync = true;
    }
  }
  if (rc == SL_OK && s->overlap) {
    if (pthread_create(&p->thread, NULL, helper, p) != 0)
      rc = sl_fail(err, SL_ERR_INTERNAL, "cannot start the prefetch thread");
    else
      p->have_thread = true;
  }
  if (rc != SL_OK) {
    sl_prefetch_end(p, NULL, NULL, NULL);
    return rc;
  }
  *out = p;
  return SL_OK;
}

sl_code sl_prefetch_open_gate(sl_prefetch *p, sl_error *err) {
  if (!p || !p->gate_ev) return SL_OK;
  sl_code rc = ops_of(p)->event_record(p->s.backend, p->gate_ev, SL_QUEUE_COMPUTE, err);
  if (rc != SL_OK) return rc; /* the helper is stopped by end() */
  pthread_mutex_lock(&p->mu);
  p->gate_open = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return SL_OK;
}

sl_code sl_prefetch_take(sl_prefetch *p, int64_t j, void **data, int64_t *bytes, sl_error *err) {
  int k = (int)(j % 2);
  *data = p->s.ring[k];
  if (!p->s.overlap) return produce_chunk(p, j, bytes, err);
  sl_code rc = SL_OK;
  pthread_mutex_lock(&p->mu);
  while (p->produced <= j && p->failed_chunk < 0 && !p->exited) pthread_cond_wait(&p->cv, &p->mu);
  if (p->produced <= j && p->failed_chunk >= 0) {
    rc = p->fail_rc;
    *err = p->fail_err;
  } else if (p->produced <= j) {
    rc = sl_fail(err, SL_ERR_INTERNAL, "the prefetch thread stopped before chunk %lld", (long long)j);
  }
  *bytes = p->out_bytes[k];
  pthread_mutex_unlock(&p->mu);
  if (rc != SL_OK) return rc;
  return p->s.backend->ops->queue_wait_event(p->s.backend, SL_QUEUE_COMPUTE, p->uploaded[k], err);
}

sl_code sl_prefetch_give_back(sl_prefetch *p, int64_t j, sl_error *err) {
  if (!p->s.overlap) return SL_OK; /* the copies run in order with the kernels */
  sl_code rc = ops_of(p)->event_record(p->s.backend, p->consumed[j % 2], SL_QUEUE_COMPUTE, err);
  if (rc != SL_OK) return rc; /* the helper is stopped by end() */
  pthread_mutex_lock(&p->mu);
  p->given_back = j + 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return SL_OK;
}

void sl_prefetch_end(sl_prefetch *p, double *seconds, int64_t *calls, double *copy_wait_seconds) {
  if (!p) return;
  const sl_backend_ops *ops = ops_of(p);
  sl_backend *b = p->s.backend;
  if (p->have_thread) {
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  /* Nothing the stage enqueued may still write the ring or read the node's
   * memory once it is gone (an unrecorded event is reached at once). */
  sl_error ignored;
  sl_error_clear(&ignored);
  sl_event *all[2 * 2 + SL_PRODUCE_PIECES + 1] = {p->uploaded[0], p->uploaded[1], p->consumed[0], p->consumed[1]};
  for (int q = 0; q < SL_PRODUCE_PIECES; q++) all[4 + q] = p->piece_ev[q];
  all[4 + SL_PRODUCE_PIECES] = p->gate_ev;
  for (int e = 0; e < (int)SL_COUNT_OF(all); e++)
    if (all[e]) (void)ops->event_wait(b, all[e], &ignored);
  if (p->record_lost) (void)ops->sync(b, &ignored);
  for (int e = 0; e < (int)SL_COUNT_OF(all); e++)
    if (all[e]) ops->event_destroy(b, all[e]);
  if (p->have_sync) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
  }
  if (seconds) *seconds += p->seconds;
  if (calls) *calls += p->calls;
  if (copy_wait_seconds) *copy_wait_seconds += p->copy_wait_seconds;
  free(p);
}
