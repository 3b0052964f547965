/* Raw chunk reader: pread on a background thread (plus helpers that read
 * pieces of a window in parallel), merged neighbours, FIFO of windows. See
 * chunk_reader.h. */
#include "nodes/hdf5/chunk_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/core/cpus.h"
#include "engine/core/settings.h"
#include "engine/core/util.h"

/* One merged read is capped so that a stop request is noticed quickly and a
 * single pread stays well below the kernel's 2 GiB limit. */
#define MAX_MERGED_READ ((uint64_t)64 << 20)
/* Read-ahead hints given after a window when nothing else is queued. */
#define MAX_HINTS 64
/* Pieces per thread a window is cut into (when large enough): a few, so that
 * threads that finish early take more and the window ends together. */
#define PIECES_PER_THREAD 4

enum { REQ_QUEUED = 1, REQ_READING, REQ_DONE };

typedef struct req {
  int state;
  int64_t first, count;
  uint8_t *dst;
  sl_code rc;
  sl_error err;
} req;

/* A part of a merged read: bytes [off, off + len) of a file into dst. chunk:
 * the stored chunk holding byte off (for error messages). */
typedef struct piece {
  int64_t chunk;
  uint64_t off, len;
  uint8_t *dst;
} piece;

struct sl_chunk_reader {
  const sl_h5_index *ix;
  int *fds;
  int n_fds;
  int64_t first_chunk, end_chunk; /* the chunks it was opened for */
  int64_t max_window;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  req q[SL_CHUNK_READER_DEPTH];
  int head, n; /* outstanding requests q[head], q[head+1], ... (mod depth) */
  bool stop;
  sl_chunk_reader_stats stats;
  /* The pieces of the window being read, shared with the helpers (pmu). */
  int threads;
  uint64_t piece_bytes;
  pthread_t *helpers;
  int n_helpers;
  pthread_mutex_t pmu;
  pthread_cond_t cv_piece, cv_pieces_done;
  piece *pieces;
  int64_t n_pieces, cap_pieces;
  int64_t next_piece, pieces_done;
  int64_t fail_at; /* lowest failing piece, n_pieces when none */
  sl_code fail_rc;
  sl_error fail_err;
  bool quit;
  /* Reading in the wait (sl_chunk_reader_opts.run): no thread of its own. */
  sl_chunk_reader_run_fn run;
  void *run_ctx;
};

/* Reads len bytes at off of chunk-run [i0, ...) into dst. */
static sl_code read_run(sl_chunk_reader *r, int64_t i0, uint8_t *dst, uint64_t off, uint64_t len, sl_error *err) {
  const sl_h5_index *ix = r->ix;
  int f = ix->chunks[i0].file;
  uint64_t done = 0;
  while (done < len) {
    size_t want = (size_t)(len - done);
    double t0 = sl_now();
    ssize_t got = pread(r->fds[f], dst + done, want, (off_t)(off + done));
    double t1 = sl_now();
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int e = errno;
      /* The chunk holding the failing byte. */
      int64_t c = i0;
      uint64_t at = off + done;
      while (c + 1 < ix->n_chunks && ix->chunks[c + 1].file == f && ix->chunks[c + 1].file_offset <= at &&
             ix->chunks[c].file_offset + ix->chunks[c].size <= at)
        c++;
      sl_code rc;
      if (got == 0)
        rc = sl_fail(err, SL_ERR_FORMAT,
                     "unexpected end of file at offset %" PRIu64 " (the chunk has %" PRIu64
                     " bytes at offset %" PRIu64 "): truncated file?",
                     at, ix->chunks[c].size, ix->chunks[c].file_offset);
      else
        rc = sl_fail(err, SL_ERR_IO, "read error at offset %" PRIu64 ": %s", at, strerror(e));
      sl_error_at(err, ix->files[f], 0, 0);
      sl_error_chunk(err, c);
      return rc;
    }
    done += (uint64_t)got;
    pthread_mutex_lock(&r->mu);
    r->stats.reads++;
    r->stats.bytes += (uint64_t)got;
    r->stats.read_seconds += t1 - t0;
    pthread_mutex_unlock(&r->mu);
  }
  return SL_OK;
}

static bool stopping(sl_chunk_reader *r) {
  pthread_mutex_lock(&r->mu);
  bool s = r->stop;
  pthread_mutex_unlock(&r->mu);
  return s;
}

/* Reads one piece; the error names the first failing byte's chunk. */
static sl_code read_piece(sl_chunk_reader *r, const piece *p, sl_error *err) {
  if (stopping(r)) return sl_fail(err, SL_ERR_IO, "chunk reader closed");
  return read_run(r, p->chunk, p->dst, p->off, p->len, err);
}

/* Takes pieces of the current window until none is left; the reader thread
 * and the helpers run this. Pieces after a failing one are skipped (counted
 * done): the error kept is the lowest failing piece's, which is the first
 * failing byte in window order, as a single thread would report it. */
static void take_pieces(sl_chunk_reader *r) {
  pthread_mutex_lock(&r->pmu);
  while (r->next_piece < r->n_pieces) {
    int64_t k = r->next_piece++;
    bool skip = k > r->fail_at;
    sl_code rc = SL_OK;
    sl_error e;
    sl_error_clear(&e);
    if (!skip) {
      piece p = r->pieces[k];
      pthread_mutex_unlock(&r->pmu);
      rc = read_piece(r, &p, &e);
      pthread_mutex_lock(&r->pmu);
    }
    if (rc != SL_OK && k < r->fail_at) {
      r->fail_at = k;
      r->fail_rc = rc;
      r->fail_err = e;
    }
    if (++r->pieces_done == r->n_pieces) pthread_cond_broadcast(&r->cv_pieces_done);
  }
  pthread_mutex_unlock(&r->pmu);
}

static void *helper(void *arg) {
  sl_chunk_reader *r = arg;
  pthread_mutex_lock(&r->pmu);
  for (;;) {
    while (!r->quit && r->next_piece >= r->n_pieces) pthread_cond_wait(&r->cv_piece, &r->pmu);
    if (r->quit) break;
    pthread_mutex_unlock(&r->pmu);
    take_pieces(r);
    pthread_mutex_lock(&r->pmu);
  }
  pthread_mutex_unlock(&r->pmu);
  return NULL;
}

/* False when out of memory. */
static bool add_piece(sl_chunk_reader *r, int64_t *np, int64_t chunk, uint64_t off, uint64_t len, uint8_t *dst) {
  if (*np == r->cap_pieces) {
    int64_t cap = r->cap_pieces ? 2 * r->cap_pieces : 64;
    if (!sl_resize(&r->pieces, (size_t)cap, sizeof *r->pieces)) return false;
    r->cap_pieces = cap;
  }
  r->pieces[(*np)++] = (piece){.chunk = chunk, .off = off, .len = len, .dst = dst};
  return true;
}

/* Cuts a window into pieces: its merged reads (neighbouring chunks adjacent
 * in one file), each cut into parts of at most `cap` bytes; returns their
 * count. Called with no window in progress: every piece of the last one was
 * taken (next_piece == n_pieces), so helpers do not look at the array until
 * read_window publishes the new count under pmu. -1 when out of memory. */
static int64_t plan_pieces(sl_chunk_reader *r, const req *q) {
  const sl_h5_index *ix = r->ix;
  int64_t end = q->first + q->count;
  uint64_t total = sl_h5_window_bytes(ix, q->first, q->count);
  uint64_t cap = MAX_MERGED_READ;
  if (r->threads > 1) {
    uint64_t share = total / ((uint64_t)r->threads * PIECES_PER_THREAD) + 1;
    cap = share > r->piece_bytes ? share : r->piece_bytes;
    if (cap >= 4096) cap = (cap + 4095) & ~(uint64_t)4095; /* whole pages */
    if (cap > MAX_MERGED_READ) cap = MAX_MERGED_READ;
  }
  int64_t np = 0;
  uint64_t pos = 0;
  for (int64_t i = q->first; i < end;) {
    const sl_h5_chunk *c = &ix->chunks[i];
    uint64_t off = c->file_offset, len = c->size;
    int64_t j = i + 1;
    while (j < end && ix->chunks[j].file == c->file && ix->chunks[j].file_offset == off + len &&
           len + ix->chunks[j].size <= MAX_MERGED_READ) {
      len += ix->chunks[j].size;
      j++;
    }
    /* [off, off + len) of chunks [i, j) in cuts of cap; each piece starts at
     * the chunk that holds its first byte. */
    int64_t k = i;
    for (uint64_t at = 0; at < len;) {
      uint64_t n = len - at < cap ? len - at : cap;
      while (k + 1 < j && ix->chunks[k].file_offset + ix->chunks[k].size <= off + at) k++;
      if (!add_piece(r, &np, k, off + at, n, q->dst + pos + at)) return -1;
      at += n;
    }
    pos += len;
    i = j;
  }
  return np;
}

/* The caller's workers each take pieces until none is left. */
static void take_pieces_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)begin, (void)end, (void)worker;
  take_pieces(ctx);
}

static sl_code read_window(sl_chunk_reader *r, const req *q, sl_error *err) {
  if (stopping(r)) return sl_fail(err, SL_ERR_IO, "chunk reader closed");
  double t0 = sl_now();
  int64_t np = plan_pieces(r, q);
  if (np < 0) return sl_fail_nomem(err, "the pieces of a read");
  pthread_mutex_lock(&r->pmu);
  r->n_pieces = np;
  r->next_piece = 0;
  r->pieces_done = 0;
  r->fail_at = r->n_pieces;
  r->fail_rc = SL_OK;
  if (r->n_helpers > 0 && r->n_pieces > 1) pthread_cond_broadcast(&r->cv_piece);
  pthread_mutex_unlock(&r->pmu);
  if (r->run && np > 1)
    r->run(r->run_ctx, np, take_pieces_range, r);
  else
    take_pieces(r);
  pthread_mutex_lock(&r->pmu);
  while (r->pieces_done < r->n_pieces) pthread_cond_wait(&r->cv_pieces_done, &r->pmu);
  sl_code rc = r->fail_rc;
  if (rc != SL_OK) *err = r->fail_err;
  int64_t n = r->n_pieces;
  pthread_mutex_unlock(&r->pmu);
  double t1 = sl_now();
  pthread_mutex_lock(&r->mu);
  r->stats.pieces += (uint64_t)n;
  r->stats.window_seconds += t1 - t0;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

/* Tells the kernel which bytes chunks [first, first + count) hold: the next
 * window of the same size, or (reading in the wait) a request's own. */
static void hint_next(sl_chunk_reader *r, int64_t first, int64_t count) {
  const sl_h5_index *ix = r->ix;
  int64_t end = first + count < ix->n_chunks ? first + count : ix->n_chunks;
  int hints = 0;
  for (int64_t i = first; i < end && hints < MAX_HINTS; hints++) {
    const sl_h5_chunk *c = &ix->chunks[i];
    uint64_t off = c->file_offset, len = c->size;
    int64_t j = i + 1;
    while (j < end && ix->chunks[j].file == c->file && ix->chunks[j].file_offset == off + len) {
      len += ix->chunks[j].size;
      j++;
    }
    (void)posix_fadvise(r->fds[c->file], (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    i = j;
  }
}

/* Reads queued request q (called with mu held, which it releases while
 * reading) and marks it done with its status, which it returns. */
static sl_code read_request(sl_chunk_reader *r, req *q) {
  q->state = REQ_READING;
  req work = *q;
  pthread_mutex_unlock(&r->mu);
  sl_error e;
  sl_error_clear(&e);
  sl_code rc = read_window(r, &work, &e);
  pthread_mutex_lock(&r->mu);
  q->rc = rc;
  q->err = e;
  q->state = REQ_DONE;
  r->stats.requests++;
  return rc;
}

static void *worker(void *arg) {
  sl_chunk_reader *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    req *q = NULL;
    while (!r->stop) {
      for (int k = 0; k < r->n; k++) {
        req *c = &r->q[(r->head + k) % SL_CHUNK_READER_DEPTH];
        if (c->state == REQ_QUEUED) {
          q = c;
          break;
        }
      }
      if (q) break;
      pthread_cond_wait(&r->cv_work, &r->mu);
    }
    if (r->stop) break;
    req work = *q;
    sl_code rc = read_request(r, q);
    bool more = false;
    for (int k = 0; k < r->n; k++)
      if (r->q[(r->head + k) % SL_CHUNK_READER_DEPTH].state == REQ_QUEUED) more = true;
    pthread_cond_broadcast(&r->cv_done);
    if (!more && rc == SL_OK && !r->stop) {
      pthread_mutex_unlock(&r->mu);
      hint_next(r, work.first + work.count, work.count);
      pthread_mutex_lock(&r->mu);
    }
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

bool sl_chunk_reader_reads_in_wait(int workers) {
  return sl_setting_int(SL_SET_READ_THREADS) <= 0 && workers >= sl_usable_cpus();
}

static void run_on_backend(void *run_ctx, int64_t n, sl_range_fn fn, void *fn_ctx) {
  sl_backend *b = run_ctx;
  b->ops->parallel_for(b, n, 1, fn, fn_ctx);
}

static void run_in_caller(void *run_ctx, int64_t n, sl_range_fn fn, void *fn_ctx) {
  (void)run_ctx;
  fn(fn_ctx, 0, n, 0);
}

void sl_chunk_reader_read_in_caller(sl_chunk_reader_opts *o) {
  o->run = run_in_caller;
  o->run_ctx = NULL;
  o->run_workers = 1;
}

void sl_chunk_reader_read_on_workers(sl_chunk_reader_opts *o, sl_backend *b) {
  const int workers = b->ops->workers(b) > 0 ? b->ops->workers(b) : 1;
  if (!sl_chunk_reader_reads_in_wait(workers)) return;
  o->run = run_on_backend;
  o->run_ctx = b;
  o->run_workers = workers;
}

int sl_chunk_reader_default_threads(void) {
  int64_t t = sl_setting_int(SL_SET_READ_THREADS); /* SLUICE_READ_THREADS, --setting read_threads */
  if (t > 0) return t > SL_CHUNK_READER_MAX_THREADS ? SL_CHUNK_READER_MAX_THREADS : (int)t;
  int cpus = sl_usable_cpus(); /* the affinity mask and CPU quota */
  return cpus < 4 ? cpus : 4;
}

uint64_t sl_chunk_reader_piece_bytes(void) {
  int64_t b = sl_setting_int(SL_SET_READ_PIECE);
  return b > 0 ? (uint64_t)b : SL_CHUNK_READER_PIECE_BYTES;
}

int sl_chunk_reader_device_threads(void) {
  int64_t t = sl_setting_int(SL_SET_READ_THREADS);
  if (t > 0) return sl_chunk_reader_default_threads();
  int cpus = sl_usable_cpus();
  return cpus < 16 ? cpus : 16;
}

/* Opens the data files holding chunks [first_chunk, end_chunk), on up to
 * OPEN_THREADS threads at once. Opening an acquisition's 263 files one after
 * the other took 15-30 ms on the H200's host; most of it was the kernel
 * growing the descriptor table in a process with threads (engine/core/
 * fd_table.h: grown at start-up now), so a few threads suffice and the
 * reader's own threads are not doubled by openers while the pinned windows
 * are made beside it. Each file is opened now, so that a missing one fails
 * here, before any work. On failure, the error of the first file (in index
 * order) that failed. */
#define OPEN_THREADS 4
typedef struct open_job {
  sl_chunk_reader *r;
  const bool *wanted;
  int *errnos;
  int t, stride;
} open_job;

static void *open_some(void *arg) {
  open_job *j = arg;
  const sl_h5_index *ix = j->r->ix;
  for (int i = j->t; i < ix->n_files; i += j->stride) {
    if (!j->wanted[i]) continue;
    int fd = open(ix->files[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      j->errnos[i] = errno;
      continue;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    j->r->fds[i] = fd;
  }
  return NULL;
}

static sl_code open_files(sl_chunk_reader *r, sl_error *err) {
  const sl_h5_index *ix = r->ix;
  bool *wanted = sl_calloc((size_t)(ix->n_files > 0 ? ix->n_files : 1), sizeof *wanted);
  int *errnos = sl_calloc((size_t)(ix->n_files > 0 ? ix->n_files : 1), sizeof *errnos);
  open_job *jobs = sl_calloc((size_t)r->threads, sizeof *jobs);
  pthread_t *th = sl_calloc((size_t)r->threads, sizeof *th);
  if (!wanted || !errnos || !jobs || !th) {
    free(wanted), free(errnos), free(jobs), free(th);
    return sl_fail_nomem(err, "a chunk reader");
  }
  int n_wanted = 0;
  if (r->first_chunk == 0 && r->end_chunk == ix->n_chunks) /* every file: a missing one fails now */
    for (int i = 0; i < ix->n_files; i++) wanted[i] = true, n_wanted++;
  else
    for (int64_t c = r->first_chunk; c < r->end_chunk; c++)
      if (!wanted[ix->chunks[c].file]) wanted[ix->chunks[c].file] = true, n_wanted++;
  int most = r->threads < OPEN_THREADS ? r->threads : OPEN_THREADS;
  int threads = n_wanted < most ? (n_wanted > 0 ? n_wanted : 1) : most, started = 0;
  for (int t = 0; t < threads; t++) jobs[t] = (open_job){r, wanted, errnos, t, threads};
  for (int t = 1; t < threads; t++)
    if (pthread_create(&th[t], NULL, open_some, &jobs[t]) == 0) started = t;
    else break;
  /* the files of threads that did not start: opened here */
  for (int t = started + 1; t < threads; t++) open_some(&jobs[t]);
  open_some(&jobs[0]);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  sl_code rc = SL_OK;
  for (int i = 0; i < ix->n_files && rc == SL_OK; i++)
    if (wanted[i] && errnos[i]) {
      rc = sl_fail(err, SL_ERR_IO, "cannot open data file: %s", strerror(errnos[i]));
      sl_error_at(err, ix->files[i], 0, 0);
    }
  free(wanted), free(errnos), free(jobs), free(th);
  return rc;
}

sl_code sl_chunk_reader_open(const sl_h5_index *ix, int64_t max_window_chunks, sl_chunk_reader **out,
                             sl_error *err) {
  return sl_chunk_reader_open_opts(ix, max_window_chunks, NULL, out, err);
}

sl_code sl_chunk_reader_open_opts(const sl_h5_index *ix, int64_t max_window_chunks,
                                  const sl_chunk_reader_opts *opts, sl_chunk_reader **out, sl_error *err) {
  *out = NULL;
  if (!ix || max_window_chunks <= 0)
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: max_window_chunks must be > 0 (got %lld)",
                   (long long)max_window_chunks);
  sl_chunk_reader *r = sl_calloc(1, sizeof *r);
  if (!r) return sl_fail_nomem(err, "a chunk reader");
  r->ix = ix;
  r->max_window = max_window_chunks;
  r->threads = opts && opts->threads > 0 ? opts->threads : sl_chunk_reader_default_threads();
  if (r->threads > SL_CHUNK_READER_MAX_THREADS) r->threads = SL_CHUNK_READER_MAX_THREADS;
  if (opts && opts->run) {
    r->run = opts->run;
    r->run_ctx = opts->run_ctx;
    r->threads = opts->run_workers > 0 ? opts->run_workers : 1;
  }
  r->piece_bytes = opts && opts->piece_bytes > 0 ? opts->piece_bytes
                   : r->run && sl_setting_int(SL_SET_READ_PIECE) <= 0 ? SL_CHUNK_READER_WAIT_PIECE_BYTES
                                                                      : sl_chunk_reader_piece_bytes();
  r->stats.threads = r->threads;
  r->fds = sl_calloc((size_t)(ix->n_files > 0 ? ix->n_files : 1), sizeof *r->fds);
  r->helpers = sl_calloc((size_t)r->threads, sizeof *r->helpers);
  if (!r->fds || !r->helpers) {
    free(r->fds);
    free(r->helpers);
    free(r);
    return sl_fail_nomem(err, "a chunk reader");
  }
  for (int i = 0; i < ix->n_files; i++) r->fds[i] = -1;
  r->n_fds = ix->n_files;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv_work, NULL);
  pthread_cond_init(&r->cv_done, NULL);
  pthread_mutex_init(&r->pmu, NULL);
  pthread_cond_init(&r->cv_piece, NULL);
  pthread_cond_init(&r->cv_pieces_done, NULL);
  r->first_chunk = opts && opts->chunk_count > 0 ? opts->first_chunk : 0;
  r->end_chunk = opts && opts->chunk_count > 0 ? opts->first_chunk + opts->chunk_count : ix->n_chunks;
  if (r->first_chunk < 0 || r->end_chunk > ix->n_chunks || r->end_chunk < r->first_chunk) {
    sl_chunk_reader_close(r);
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: chunks [%lld, %lld) are outside [0, %d)",
                   (long long)(opts ? opts->first_chunk : 0), (long long)(opts ? opts->first_chunk + opts->chunk_count : 0),
                   ix->n_chunks);
  }
  sl_code rc = open_files(r, err);
  if (rc != SL_OK) {
    sl_chunk_reader_close(r);
    return rc;
  }
  if (r->run) { /* reads in the wait: no thread */
    *out = r;
    return SL_OK;
  }
  for (int t = 0; t + 1 < r->threads; t++) {
    int e = pthread_create(&r->helpers[t], NULL, helper, r);
    if (e) {
      sl_chunk_reader_close(r);
      return sl_fail(err, SL_ERR_INTERNAL, "cannot start a chunk reader thread: %s", strerror(e));
    }
    r->n_helpers++;
  }
  int e = pthread_create(&r->thread, NULL, worker, r);
  if (e) {
    sl_chunk_reader_close(r);
    return sl_fail(err, SL_ERR_INTERNAL, "cannot start the chunk reader thread: %s", strerror(e));
  }
  r->thread_started = true;
  *out = r;
  return SL_OK;
}

sl_code sl_chunk_reader_request(sl_chunk_reader *r, int64_t first, int64_t count, uint8_t *dst,
                                size_t dst_capacity, sl_error *err) {
  const sl_h5_index *ix = r->ix;
  if (first < r->first_chunk || count <= 0 || first > r->end_chunk || count > r->end_chunk - first)
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: chunks [%lld, %lld) are outside [%lld, %lld)", (long long)first,
                   (long long)(first + count), (long long)r->first_chunk, (long long)r->end_chunk);
  if (count > r->max_window)
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: a window of %lld chunks exceeds the maximum of %lld",
                   (long long)count, (long long)r->max_window);
  uint64_t need = sl_h5_window_bytes(ix, first, count);
  if (!dst || need > dst_capacity)
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: chunks [%lld, %lld) need %" PRIu64 " bytes, buffer holds %zu",
                   (long long)first, (long long)(first + count), need, dst ? dst_capacity : 0);
  pthread_mutex_lock(&r->mu);
  if (r->n == SL_CHUNK_READER_DEPTH) {
    pthread_mutex_unlock(&r->mu);
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: %d requests already outstanding; wait first",
                   SL_CHUNK_READER_DEPTH);
  }
  req *q = &r->q[(r->head + r->n) % SL_CHUNK_READER_DEPTH];
  memset(q, 0, sizeof *q);
  q->state = REQ_QUEUED;
  q->first = first;
  q->count = count;
  q->dst = dst;
  r->n++;
  pthread_cond_signal(&r->cv_work);
  pthread_mutex_unlock(&r->mu);
  if (r->run) hint_next(r, first, count); /* read in the wait: the kernel reads ahead */
  return SL_OK;
}

sl_code sl_chunk_reader_wait_window(sl_chunk_reader *r, int64_t *first, int64_t *count, uint8_t **dst,
                                    sl_error *err) {
  pthread_mutex_lock(&r->mu);
  if (r->n == 0) {
    pthread_mutex_unlock(&r->mu);
    return sl_fail(err, SL_ERR_USAGE, "chunk reader: nothing requested");
  }
  req *q = &r->q[r->head];
  if (r->run && q->state == REQ_QUEUED) (void)read_request(r, q); /* no reader thread: read it now */
  while (q->state != REQ_DONE) pthread_cond_wait(&r->cv_done, &r->mu);
  req done = *q;
  q->state = 0;
  r->head = (r->head + 1) % SL_CHUNK_READER_DEPTH;
  r->n--;
  pthread_mutex_unlock(&r->mu);
  if (first) *first = done.first;
  if (count) *count = done.count;
  if (dst) *dst = done.dst;
  if (done.rc && err) {
    sl_fail(err, done.rc, "%s", done.err.msg);
    sl_error_at(err, done.err.file, 0, 0);
    sl_error_chunk(err, done.err.chunk);
  }
  return done.rc;
}

sl_code sl_chunk_reader_wait(sl_chunk_reader *r, sl_error *err) {
  return sl_chunk_reader_wait_window(r, NULL, NULL, NULL, err);
}

void sl_chunk_reader_abandon_oldest(sl_chunk_reader *r) {
  pthread_mutex_lock(&r->mu);
  if (r->n > 0 && r->q[r->head].state == REQ_QUEUED) {
    r->q[r->head].state = 0;
    r->head = (r->head + 1) % SL_CHUNK_READER_DEPTH;
    r->n--;
    pthread_mutex_unlock(&r->mu);
    return;
  }
  bool waiting = r->n > 0;
  pthread_mutex_unlock(&r->mu);
  if (waiting) {
    sl_error ignored;
    sl_error_clear(&ignored);
    (void)sl_chunk_reader_wait(r, &ignored);
  }
}

int sl_chunk_reader_pending(const sl_chunk_reader *r) {
  return r->n;
}

void sl_chunk_reader_get_stats(sl_chunk_reader *r, sl_chunk_reader_stats *s) {
  pthread_mutex_lock(&r->mu);
  *s = r->stats;
  pthread_mutex_unlock(&r->mu);
}

void sl_chunk_reader_close(sl_chunk_reader *r) {
  if (!r) return;
  if (r->thread_started) {
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv_work);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
  }
  /* The reader thread is gone, so no window is in progress: stop the helpers. */
  pthread_mutex_lock(&r->pmu);
  r->quit = true;
  pthread_cond_broadcast(&r->cv_piece);
  pthread_mutex_unlock(&r->pmu);
  for (int t = 0; t < r->n_helpers; t++) pthread_join(r->helpers[t], NULL);
  free(r->helpers);
  free(r->pieces);
  for (int i = 0; i < r->n_fds; i++)
    if (r->fds[i] >= 0) close(r->fds[i]);
  free(r->fds);
  pthread_cond_destroy(&r->cv_done);
  pthread_cond_destroy(&r->cv_work);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv_pieces_done);
  pthread_cond_destroy(&r->cv_piece);
  pthread_mutex_destroy(&r->pmu);
  free(r);
}
