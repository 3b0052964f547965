/* hdf5_source's windows and output layout, shared by its CPU kernel and
 * its produce hook. See source_window.h. */
#include "nodes/hdf5/source_window.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/tensor.h"
#include "engine/core/util.h"

/* Stored chunks [first, first + count) that hold positions [start, start + n). */
static void window_of(const sl_h5_index *ix, int64_t start, int64_t n, int64_t *first, int64_t *count) {
  *first = sl_h5_index_chunk_of_frame(ix, start);
  int64_t last = sl_h5_index_chunk_of_frame(ix, start + n - 1);
  *count = last - *first + 1;
}

/* The most stored chunks any `positions` consecutive frames touch (short
 * chunks at file ends included): a sliding window over the index. */
static int64_t max_chunks_for(const sl_h5_index *ix, int64_t positions) {
  int64_t chunks = 1, frames = 0;
  for (int64_t i = 0, j = 0; i < ix->n_chunks; i++) {
    while (j < ix->n_chunks && frames < positions + (ix->chunks[i].n_frames - 1)) frames += ix->chunks[j++].n_frames;
    if (j - i > chunks) chunks = j - i;
    frames -= ix->chunks[i].n_frames;
  }
  return chunks;
}

/* The most stored bytes of one chunk of the scan, for chunks of `positions`
 * positions from position 0 (how the executor cuts the scan). */
static uint64_t max_bytes_for(const sl_h5_index *ix, int64_t positions, int64_t total) {
  uint64_t most = 0;
  for (int64_t start = 0; start < total; start += positions) {
    int64_t n = total - start < positions ? total - start : positions, first, count;
    window_of(ix, start, n, &first, &count);
    uint64_t b = sl_h5_window_bytes(ix, first, count);
    if (b > most) most = b;
  }
  return most;
}

static sl_code reuse(sl_src_windows *w, int b, sl_error *err) {
  if (!w->al.reuse || !w->base[b]) return SL_OK;
  double t0 = sl_now();
  sl_code rc = w->al.reuse(w->al.ctx, b, err);
  w->wait_reuse_seconds += sl_now() - t0;
  return rc;
}

static void free_window(sl_src_windows *w, int b) {
  if (!w->base[b]) return;
  sl_error ignored;
  sl_error_clear(&ignored);
  (void)reuse(w, b, &ignored);
  if (w->al.free)
    w->al.free(w->al.ctx, w->base[b], w->alloc_bytes);
  else
    free(w->base[b]);
  w->base[b] = NULL;
}

/* Abandons the read-ahead (waits for it when the reader is writing the
 * window; forgets it when no read has started). */
static void drain(sl_src_windows *w) {
  if (!w->pending) return;
  sl_chunk_reader_abandon_oldest(w->reader);
  w->pending = false;
}

/* A window's memory, of w->alloc_bytes: the allocator's (its time added to
 * *seconds) or malloc's. Touches nothing in w: the reader's thread makes
 * window 1 with it while the caller makes window 0 (open_with_windows). */
static sl_code make_window(const sl_src_windows *w, void **p, double *seconds, sl_error *err) {
  *p = NULL;
  if (w->al.alloc) {
    double t0 = sl_now();
    sl_code rc = w->al.alloc(w->al.ctx, w->alloc_bytes, p, err);
    *seconds += sl_now() - t0;
    return rc;
  }
  if ((*p = malloc(w->alloc_bytes))) return SL_OK;
  char h[32];
  sl_format_bytes((uint64_t)w->alloc_bytes, h, sizeof h);
  return sl_fail(err, SL_ERR_NOMEM, "cannot allocate a read-ahead window of %s", h);
}

/* The spare window's thread, joined: its window (or its failure) taken. */
static sl_code join_spare(sl_src_windows *w, sl_error *err) {
  if (!w->spare_started) return SL_OK;
  pthread_join(w->spare_thread, NULL);
  w->spare_started = false;
  w->alloc_seconds += w->spare_seconds;
  if (w->spare) w->base[2] = w->spare;
  w->spare = NULL;
  if (w->spare_rc != SL_OK && err) *err = w->spare_err;
  return w->spare_rc;
}

static void *make_spare(void *arg) {
  sl_src_windows *w = arg;
  sl_error_clear(&w->spare_err);
  w->spare_rc = make_window(w, &w->spare, &w->spare_seconds, &w->spare_err);
  return NULL;
}

/* Starts making window 2 on a thread of its own (when no thread starts, it
 * is made when first read into, like any window). Nothing else touches
 * w->spare* until join_spare. */
static void start_spare(sl_src_windows *w) {
  if (w->base[2] || w->spare_started) return;
  w->spare = NULL;
  w->spare_seconds = 0;
  w->spare_rc = SL_OK;
  w->spare_started = pthread_create(&w->spare_thread, NULL, make_spare, w) == 0;
}

/* Window b, allocated if it is not yet (pinned memory takes time: windows 1
 * and 2 are made while window 0 is, beside the reader's opening, and while
 * the first windows are read). */
static sl_code alloc_window(sl_src_windows *w, int b, sl_error *err) {
  if (w->base[b]) return SL_OK;
  if (b == 2 && w->spare_started) {
    sl_code rc = join_spare(w, err);
    if (rc != SL_OK || w->base[b]) return rc;
  }
  void *p = NULL;
  sl_code rc = make_window(w, &p, &w->alloc_seconds, err);
  if (rc == SL_OK) w->base[b] = p;
  return rc;
}

/* Opening the reader, then making window 1, on a thread of its own
 * (open_with_windows). */
typedef struct reader_open {
  sl_src_windows *w;
  sl_chunk_reader_opts opts;
  sl_chunk_reader *reader;
  sl_code rc;
  sl_error err;
  void *window1;
  double alloc_seconds;
} reader_open;

static void *open_reader(void *arg) {
  reader_open *j = arg;
  sl_src_windows *w = j->w;
  sl_error_clear(&j->err);
  j->rc = sl_chunk_reader_open_opts(w->ix, w->max_chunks, &j->opts, &j->reader, &j->err);
  if (j->rc == SL_OK) j->rc = make_window(w, &j->window1, &j->alloc_seconds, &j->err);
  return NULL;
}

/* A new reader, and with an allocator of the backend's (pinned memory: a
 * device backend) the first windows made while it opens: window 0 here,
 * window 1 on the reader's thread after it opened, window 2 started on a
 * thread of its own after that (start_spare). On the H200's host the reader's
 * files and threads took 7-9 ms and each window 5-14 ms, one after the
 * other, inside the source's first call. With malloc'd windows (the CPU)
 * they are made when first read into. */
static sl_code open_with_windows(sl_src_windows *w, const sl_chunk_reader_opts *opts, sl_error *err) {
  /* malloc'd windows (made when first read into), or window 0 alone with
   * nothing to overlap it with: opened here */
  if (!w->al.alloc || w->one_window) {
    sl_code rc = sl_chunk_reader_open_opts(w->ix, w->max_chunks, opts, &w->reader, err);
    return rc == SL_OK && w->al.alloc ? alloc_window(w, 0, err) : rc;
  }
  reader_open j = {.w = w, .opts = *opts};
  pthread_t th;
  bool started = pthread_create(&th, NULL, open_reader, &j) == 0;
  if (!started) open_reader(&j);
  sl_code rc = alloc_window(w, 0, err);
  if (started) pthread_join(th, NULL);
  /* what the thread made is kept either way: freed with the windows */
  if (j.reader) w->reader = j.reader;
  if (j.window1) w->base[1] = j.window1;
  w->alloc_seconds += j.alloc_seconds;
  if (rc == SL_OK && j.rc != SL_OK) {
    *err = j.err;
    rc = j.rc;
  }
  if (rc == SL_OK) start_spare(w);
  return rc;
}

/* Every window freed (the spare's thread joined first). */
static void free_windows(sl_src_windows *w) {
  (void)join_spare(w, NULL);
  for (int b = 0; b < SL_SRC_WINDOWS; b++) free_window(w, b);
}

/* (Re)allocates the windows for at least `chunks` chunks of `bytes` bytes in
 * all; the reader is reopened when the chunk count grows. */
static sl_code resize(sl_src_windows *w, int64_t chunks, uint64_t bytes, sl_error *err) {
  drain(w);
  if (chunks < w->max_chunks) chunks = w->max_chunks;
  if (bytes < w->capacity) bytes = w->capacity;
  if (chunks > w->max_chunks && w->reader) {
    sl_chunk_reader_stats st;
    sl_src_windows_stats(w, &st);
    w->closed = st;
    sl_chunk_reader_close(w->reader);
    w->reader = NULL;
  }
  free_windows(w);
  w->max_chunks = chunks;
  w->capacity = (size_t)bytes;
  size_t hdr = sizeof(sl_packed_items) + (size_t)chunks * sizeof(sl_packed_entry);
  w->prefix = (hdr + 63) & ~(size_t)63;
  w->alloc_bytes = w->prefix + w->capacity;
  w->cur_valid = false;
  if (!sl_resize(&w->offsets, (size_t)chunks + 1, sizeof *w->offsets) ||
      !sl_resize(&w->cur_offsets, (size_t)chunks + 1, sizeof *w->cur_offsets)) {
    w->max_chunks = 0; /* the offsets may be short: resized again before use */
    return sl_fail_nomem(err, "the offsets of the source's windows");
  }
  /* No more threads than the pieces of the windows in flight can keep busy:
   * a small acquisition's window of 0.1 MB was read by one thread of the
   * H200 host's 16, after all 16 had been started (about half of its 1.2 ms
   * source). */
  int threads = w->read_threads > 0 ? w->read_threads : sl_chunk_reader_default_threads();
  uint64_t piece = sl_chunk_reader_piece_bytes(), pieces = (SL_SRC_WINDOWS * w->capacity + piece - 1) / piece;
  if (pieces < (uint64_t)threads) threads = pieces > 0 ? (int)pieces : 1;
  sl_chunk_reader_opts opts = w->wait_opts.run ? w->wait_opts : (sl_chunk_reader_opts){.threads = threads};
  if (w->one_window && !opts.run) sl_chunk_reader_read_in_caller(&opts);
  if (!w->reader) return open_with_windows(w, &opts, err);
  return SL_OK; /* the windows are made when first read into (alloc_window) */
}

/* Starts reading chunks [first, first + count) into window b. */
static sl_code start_read(sl_src_windows *w, int64_t first, int64_t count, int b, sl_error *err) {
  sl_code rc = alloc_window(w, b, err);
  if (rc == SL_OK) rc = reuse(w, b, err);
  if (rc == SL_OK)
    rc = sl_chunk_reader_request(w->reader, first, count, w->base[b] + w->prefix, w->capacity, err);
  if (rc != SL_OK) return rc;
  w->pending = true;
  w->pending_first = first;
  w->pending_count = count;
  w->pending_buffer = b;
  return SL_OK;
}

/* Positions a window holds for calls of pos_count positions: one call's, or
 * (malloc'd windows) as many calls as fit in about SL_SRC_WINDOW_BYTES. */
static int64_t window_positions(sl_src_windows *w, int64_t pos_count, int64_t total) {
  if (w->al.alloc) return pos_count;
  if (pos_count != w->call_positions) {
    uint64_t per_call = max_bytes_for(w->ix, pos_count, total);
    int64_t calls = per_call ? (int64_t)(SL_SRC_WINDOW_BYTES / per_call) : 1;
    if (calls < 1) calls = 1;
    w->call_positions = pos_count;
    w->window_positions = pos_count * calls < total ? pos_count * calls : total;
  }
  return w->window_positions;
}

/* The call's stored chunks [first, first + count) inside the current window. */
static void sub_window(sl_src_windows *w, int64_t first, int64_t count, sl_src_window *out) {
  const uint64_t *o = w->cur_offsets + (first - w->cur_first);
  for (int64_t j = 0; j <= count; j++) w->offsets[j] = o[j] - o[0];
  out->buffer = w->cur_buffer;
  out->first = first;
  out->count = count;
  out->data = w->base[w->cur_buffer] + w->prefix + o[0];
  out->offsets = w->offsets;
}

static sl_code windows_get(sl_src_windows *w, int64_t pos_start, int64_t pos_count, int64_t total_positions,
                           sl_src_window *out, sl_error *err);

sl_code sl_src_windows_get(sl_src_windows *w, int64_t pos_start, int64_t pos_count, int64_t total_positions,
                           sl_src_window *out, sl_error *err) {
  double t0 = sl_now();
  sl_code rc = windows_get(w, pos_start, pos_count, total_positions, out, err);
  w->get_seconds += sl_now() - t0;
  return rc;
}

static sl_code windows_get(sl_src_windows *w, int64_t pos_start, int64_t pos_count, int64_t total_positions,
                           sl_src_window *out, sl_error *err) {
  const sl_h5_index *ix = w->ix;
  sl_code rc = SL_OK;
  int64_t call_first, call_count;
  window_of(ix, pos_start, pos_count, &call_first, &call_count);
  /* Only malloc'd windows serve a later call: a pinned window may still be
   * copied from asynchronously, and its header is rewritten per call. */
  if (!w->al.alloc && w->cur_valid && call_first >= w->cur_intact_first &&
      call_first + call_count <= w->cur_first + w->cur_count) {
    sub_window(w, call_first, call_count, out); /* read with an earlier call's window */
    return SL_OK;
  }
  const int64_t wpos = window_positions(w, pos_count, total_positions);
  if (wpos != w->sized_positions) {
    double t0 = sl_now();
    int64_t chunks = max_chunks_for(ix, wpos);
    uint64_t bytes = max_bytes_for(ix, wpos, total_positions);
    w->sized_positions = wpos;
    w->one_window = wpos >= total_positions;
    if (chunks > w->max_chunks || bytes > w->capacity || !w->reader) rc = resize(w, chunks, bytes, err);
    w->sizing_seconds += sl_now() - t0;
    if (rc != SL_OK) return rc;
  }
  /* This call's window: positions [pos_start, pos_start + n). */
  const int64_t n = total_positions - pos_start < wpos ? total_positions - pos_start : wpos;
  int64_t first, count;
  window_of(ix, pos_start, n > pos_count ? n : pos_count, &first, &count);
  uint64_t need = sl_h5_window_bytes(ix, first, count);
  if (count > w->max_chunks || need > w->capacity) { /* a chunk of the scan cut otherwise */
    if ((rc = resize(w, count, need, err)) != SL_OK) return rc;
  }
  /* The window this chunk needs: the read-ahead, or a read now. */
  int b = 0;
  if (w->pending && w->pending_first == first && w->pending_count == count) {
    b = w->pending_buffer;
  } else {
    drain(w); /* a read-ahead we no longer need (a new pass) */
    rc = start_read(w, first, count, 0, err);
    /* The next window (first call) while this one is read. */
    if (rc == SL_OK && !w->one_window && pos_start + pos_count < total_positions) rc = alloc_window(w, 1, err);
    if (rc != SL_OK) {
      drain(w);
      return rc;
    }
  }
  /* Read ahead: the next window of the scan into the next buffer (when it
   * fits; one that does not is read when asked for), queued behind this
   * one before waiting for it, so that the reader goes from one to the next
   * without waiting for this thread to wake up and ask. The next buffer's
   * copies (device backends) are those of the call two before, long done. */
  bool queued = false;
  int64_t next_start = pos_start + (n > pos_count ? n : pos_count);
  int64_t next_n = total_positions - next_start;
  if (next_n > wpos) next_n = wpos;
  if (next_n > 0) {
    int64_t nf, nc;
    window_of(ix, next_start, next_n, &nf, &nc);
    if (nc <= w->max_chunks && sl_h5_window_bytes(ix, nf, nc) <= w->capacity) {
      rc = start_read(w, nf, nc, (b + 1) % SL_SRC_WINDOWS, err); /* now the one pending */
      queued = rc == SL_OK;
    }
  }
  /* This call's window: the reader's oldest request. */
  sl_error wait_err;
  sl_error_clear(&wait_err);
  double t0 = sl_now();
  sl_code wrc = sl_chunk_reader_wait(w->reader, rc == SL_OK ? err : &wait_err);
  w->wait_read_seconds += sl_now() - t0;
  if (rc == SL_OK) rc = wrc;
  if (!queued) w->pending = false;
  if (rc != SL_OK) {
    drain(w); /* the read-ahead queued behind it */
    return rc;
  }
  sl_h5_window_offsets(ix, first, count, w->cur_offsets);
  w->cur_valid = true;
  w->cur_buffer = b;
  w->cur_first = first;
  w->cur_count = count;
  w->cur_intact_first = first;
  sub_window(w, call_first, call_count, out);
  return SL_OK;
}

void sl_src_windows_stats(sl_src_windows *w, sl_chunk_reader_stats *st) {
  *st = w->closed;
  if (!w->reader) return;
  sl_chunk_reader_stats now;
  sl_chunk_reader_get_stats(w->reader, &now);
  st->requests += now.requests;
  st->reads += now.reads;
  st->bytes += now.bytes;
  st->pieces += now.pieces;
  st->read_seconds += now.read_seconds;
  st->window_seconds += now.window_seconds;
  st->threads = now.threads;
}

void sl_src_windows_free(sl_src_windows *w) {
  sl_chunk_reader_close(w->reader); /* abandons the read-ahead */
  w->reader = NULL;
  w->pending = false;
  free_windows(w);
  free(w->offsets);
  w->offsets = NULL;
  free(w->cur_offsets);
  w->cur_offsets = NULL;
  w->cur_valid = false;
  w->call_positions = w->window_positions = 0;
  w->max_chunks = 0;
  w->capacity = 0;
  w->sized_positions = 0;
}

/* The packed header and entries of the window's chunks at pk, for bytes that
 * follow them (header + entries + stored bytes: one packed buffer). */
static void fill_header(sl_packed_items *pk, uint64_t data, const sl_src_window *win, const sl_h5_index *ix) {
  memset(pk, 0, (size_t)data);
  pk->n = (uint64_t)win->count;
  for (int64_t j = 0; j < win->count; j++) {
    const sl_h5_chunk *ch = &ix->chunks[win->first + j];
    sl_packed_entry *e = &pk->entries[j];
    e->offset = data + win->offsets[j];
    e->size = ch->size;
    /* HDF5 sets bit 0 of a chunk's filter mask when the (first) filter was
     * skipped: the bytes are stored as they are. */
    e->flags = (ch->filter_mask & 1u) ? SL_PACKED_STORED_RAW : 0;
    e->first_position = ch->first_frame;
    e->n_positions = ch->n_frames;
    e->origin = (uint64_t)(win->first + j); /* sl_src_describe_origin names it */
  }
}

static sl_code check_capacity(const sl_src_window *win, uint64_t data, uint64_t capacity, sl_error *err) {
  if (data + win->offsets[win->count] > capacity)
    return sl_fail(err, SL_ERR_INTERNAL, "stored chunks of this scan chunk exceed the planned buffer");
  return SL_OK;
}

sl_code sl_src_pack(const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity, const uint8_t **packed,
                    uint64_t *bytes, sl_error *err) {
  /* The header's fields are 8-byte words: aligned down (a call inside a
   * spanning window starts at any byte); the entries' offsets skip the gap,
   * which the bound's 8 bytes of slack an item cover. The window's prefix
   * holds a header of its most chunks, so the header stays inside it. */
  uint64_t hdr = sizeof(sl_packed_items) + (uint64_t)win->count * sizeof(sl_packed_entry);
  uintptr_t at = ((uintptr_t)win->data - (uintptr_t)hdr) & ~(uintptr_t)7;
  uint64_t data = (uint64_t)((uintptr_t)win->data - at);
  sl_code rc = check_capacity(win, data, capacity, err);
  if (rc != SL_OK) return rc;
  sl_packed_items *pk = (sl_packed_items *)at;
  fill_header(pk, data, win, ix);
  *packed = (const uint8_t *)pk;
  *bytes = data + win->offsets[win->count];
  return SL_OK;
}

sl_code sl_src_lend(sl_src_windows *w, const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity,
                    const uint8_t **packed, uint64_t *bytes, sl_error *err) {
  sl_code rc = sl_src_pack(win, ix, capacity, packed, bytes, err);
  if (rc == SL_OK && w->cur_valid && win->buffer == w->cur_buffer && win->first > w->cur_intact_first)
    w->cur_intact_first = win->first;
  return rc;
}

sl_code sl_src_pack_to(const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity, void *dst,
                       uint64_t *bytes, sl_error *err) {
  uint64_t data = sizeof(sl_packed_items) + (uint64_t)win->count * sizeof(sl_packed_entry);
  sl_code rc = check_capacity(win, data, capacity, err);
  if (rc != SL_OK) return rc;
  fill_header(dst, data, win, ix);
  memcpy((uint8_t *)dst + data, win->data, (size_t)win->offsets[win->count]);
  *bytes = data + win->offsets[win->count];
  return SL_OK;
}

sl_code sl_src_plain(const sl_src_window *win, const sl_h5_index *ix, const char *const *where, int64_t pos_start,
                     int64_t pos_count, int64_t frame_bytes, sl_src_copy_fn copy, void *ctx, sl_error *err) {
  const uint8_t *run_src = NULL;
  uint64_t run_dst = 0, run_len = 0;
  for (int64_t j = 0; j < win->count; j++) {
    const sl_h5_chunk *ch = &ix->chunks[win->first + j];
    int64_t lo = ch->first_frame > pos_start ? ch->first_frame : pos_start;
    int64_t hi = ch->first_frame + ch->n_frames;
    if (hi > pos_start + pos_count) hi = pos_start + pos_count;
    if (hi <= lo) continue;
    uint64_t skip = (uint64_t)(lo - ch->first_frame) * (uint64_t)frame_bytes;
    uint64_t bytes = (uint64_t)(hi - lo) * (uint64_t)frame_bytes;
    if (skip + bytes > ch->size)
      return sl_fail(err, SL_ERR_FORMAT, "%s: stored chunk %lld holds %llu bytes, fewer than its frames need",
                     where[ch->file], (long long)(win->first + j), (unsigned long long)ch->size);
    const uint8_t *src = win->data + win->offsets[j] + skip;
    uint64_t dst = (uint64_t)(lo - pos_start) * (uint64_t)frame_bytes;
    if (run_len && run_src + run_len == src && run_dst + run_len == dst) {
      run_len += bytes; /* continues the run: one copy for both */
      continue;
    }
    if (run_len) {
      sl_code rc = copy(ctx, run_dst, run_src, run_len, err);
      if (rc != SL_OK) return rc;
    }
    run_src = src;
    run_dst = dst;
    run_len = bytes;
  }
  return run_len ? copy(ctx, run_dst, run_src, run_len, err) : SL_OK;
}

void sl_src_describe_chunk(const char *where, int64_t stored_chunk, int64_t file_chunk, int64_t first_frame,
                           int64_t n_frames, char *buf, size_t n) {
  long long last = (long long)(first_frame + n_frames - 1);
  if (file_chunk == stored_chunk)
    snprintf(buf, n, "%s, stored chunk %lld (frames %lld-%lld)", where, (long long)stored_chunk,
             (long long)first_frame, last);
  else
    snprintf(buf, n, "%s, stored chunk %lld of that file (chunk %lld of the acquisition, frames %lld-%lld)",
             where, (long long)file_chunk, (long long)stored_chunk, (long long)first_frame, last);
}

void sl_src_describe_origin(const void *ctx, uint64_t origin, int64_t first_position, int64_t n_positions,
                            char *buf, size_t n) {
  const sl_src_state *const *run = ctx;
  const sl_src_state *s = run ? *run : NULL;
  if (!s || !s->ix || !s->where || origin >= (uint64_t)s->ix->n_chunks) {
    snprintf(buf, n, "stored chunk %llu (frames %lld-%lld)", (unsigned long long)origin, (long long)first_position,
             (long long)(first_position + n_positions - 1));
    return;
  }
  const sl_h5_chunk *ch = &s->ix->chunks[origin];
  sl_src_describe_chunk(s->where[ch->file], (int64_t)origin, (int64_t)ch->file_chunk, first_position, n_positions,
                        buf, n);
}
