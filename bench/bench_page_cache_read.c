/* The host's own bound on reading files that sit in the page cache: plain
 * pread of whole files in PIECE-byte pieces, the pieces dealt to T threads,
 * into one pre-faulted buffer per thread (or pinned host memory from the
 * CUDA backend). No HDF5, no chunk index, no decoding: what no reader of
 * these files can beat on this machine, beside which bench_chunk_reader and
 * hdf5_source's `seconds` are read (issue 12: "the source at the copy
 * limit").
 *
 *   bench_page_cache_read [--pinned] [--piece BYTES] [--threads "1 2 4 8 16"]
 *                         [--reps N] FILE...
 *
 * Each thread count reads every file REPS times (default 3) after one warming
 * pass; the best and the median rep are printed with GB/s. With --pinned it
 * also times the other half of the source's path, the copies from pinned
 * host memory to the device: as many bytes as the files hold, in copies of
 * 32 MiB (about a window of the source) on one copy queue. Never asserts on
 * time. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"

typedef struct piece {
  int file;
  off_t off;
  size_t len;
} piece;

typedef struct job {
  const int *fds;
  const piece *pieces;
  int64_t n_pieces;
  int64_t next; /* atomic: the next piece to read */
  int failed;
} job;

typedef struct worker {
  job *j;
  char *buf;
} worker;

static void *read_pieces(void *arg) {
  worker *w = arg;
  job *j = w->j;
  for (;;) {
    int64_t k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (k >= j->n_pieces) break;
    const piece *p = &j->pieces[k];
    size_t done = 0;
    while (done < p->len) {
      ssize_t got = pread(j->fds[p->file], w->buf + done, p->len - done, p->off + (off_t)done);
      if (got <= 0) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return NULL;
      }
      done += (size_t)got;
    }
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  bool pinned = false;
  size_t piece_bytes = 4u << 20;
  const char *threads_list = "1 2 4 8 16";
  int reps = 3, first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "--pinned")) pinned = true;
    else if (!strcmp(argv[first], "--piece") && first + 1 < argc) piece_bytes = (size_t)atoll(argv[++first]);
    else if (!strcmp(argv[first], "--threads") && first + 1 < argc) threads_list = argv[++first];
    else if (!strcmp(argv[first], "--reps") && first + 1 < argc) reps = atoi(argv[++first]);
    else {
      fprintf(stderr, "usage: bench_page_cache_read [--pinned] [--piece BYTES] [--threads \"1 2 4\"] [--reps N] FILE...\n");
      return 2;
    }
  }
  int n_files = argc - first;
  if (n_files < 1 || piece_bytes < 4096 || reps < 1) {
    fprintf(stderr, "bench_page_cache_read: give at least one file (and a piece of at least 4096 bytes)\n");
    return 2;
  }
  int *fds = calloc((size_t)n_files, sizeof *fds);
  int64_t total = 0, n_pieces = 0;
  for (int f = 0; f < n_files; f++) {
    struct stat st;
    fds[f] = open(argv[first + f], O_RDONLY);
    if (fds[f] < 0 || fstat(fds[f], &st) != 0) {
      perror(argv[first + f]);
      return 1;
    }
    total += st.st_size;
    n_pieces += (st.st_size + (off_t)piece_bytes - 1) / (off_t)piece_bytes;
  }
  piece *pieces = calloc((size_t)n_pieces, sizeof *pieces);
  int64_t k = 0;
  for (int f = 0; f < n_files; f++) {
    struct stat st;
    fstat(fds[f], &st);
    for (off_t o = 0; o < st.st_size; o += (off_t)piece_bytes, k++)
      pieces[k] = (piece){f, o, (size_t)(st.st_size - o < (off_t)piece_bytes ? st.st_size - o : (off_t)piece_bytes)};
  }
  sl_backend *b = NULL;
  sl_error e;
  sl_error_clear(&e);
  if (pinned) {
#ifdef SLUICE_HAVE_CUDA
    if (sl_cuda_backend_ops.create(1, &b, &e)) {
      fprintf(stderr, "bench_page_cache_read: --pinned: %s\n", e.msg);
      return 1;
    }
#else
    fprintf(stderr, "bench_page_cache_read: --pinned needs the CUDA backend (not built in)\n");
    return 1;
#endif
  }
  printf("page-cache read bound: %d files, %.3f GB, pieces of %zu bytes, %s buffers, best and median of %d\n",
         n_files, total / 1e9, piece_bytes, pinned ? "pinned" : "pageable (pre-faulted)", reps);
  printf("%8s %10s %10s %10s %10s\n", "threads", "best s", "median s", "best GB/s", "median GB/s");
  char list[256];
  snprintf(list, sizeof list, "%s", threads_list);
  for (char *tok = strtok(list, " ,"); tok; tok = strtok(NULL, " ,")) {
    int t = atoi(tok);
    if (t < 1) continue;
    worker *w = calloc((size_t)t, sizeof *w);
    pthread_t *th = calloc((size_t)t, sizeof *th);
    for (int i = 0; i < t; i++) {
      if (pinned) {
        if (b->ops->host_alloc(b, piece_bytes, (void **)&w[i].buf, &e)) w[i].buf = NULL;
      } else {
        w[i].buf = malloc(piece_bytes);
      }
      if (!w[i].buf) {
        fprintf(stderr, "bench_page_cache_read: no memory for %d buffers\n", t);
        return 1;
      }
      memset(w[i].buf, 1, piece_bytes); /* faulted in before the clock starts */
    }
    double *secs = calloc((size_t)reps + 1, sizeof *secs);
    for (int r = 0; r <= reps; r++) { /* rep 0 warms the page cache */
      job j = {.fds = fds, .pieces = pieces, .n_pieces = n_pieces};
      double t0 = sl_now();
      for (int i = 0; i < t; i++) {
        w[i].j = &j;
        pthread_create(&th[i], NULL, read_pieces, &w[i]);
      }
      for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
      secs[r] = sl_now() - t0;
      if (j.failed) {
        fprintf(stderr, "bench_page_cache_read: a read failed\n");
        return 1;
      }
    }
    qsort(secs + 1, (size_t)reps, sizeof *secs, cmp_double);
    double best = secs[1], med = secs[1 + reps / 2];
    printf("%8d %10.4f %10.4f %10.2f %10.2f\n", t, best, med, total / best / 1e9, total / med / 1e9);
    for (int i = 0; i < t; i++) {
      if (pinned) b->ops->host_free(b, w[i].buf, piece_bytes);
      else free(w[i].buf);
    }
    free(w);
    free(th);
    free(secs);
  }
  if (b) { /* making pinned memory: the source's two read windows (pinned_memory setting) */
    for (int r = 0; r < 3; r++) {
      void *w2[2] = {NULL, NULL};
      double t0 = sl_now();
      for (int w = 0; w < 2; w++)
        if (b->ops->host_alloc(b, 25u << 20, &w2[w], &e)) {
          fprintf(stderr, "bench_page_cache_read: %s\n", e.msg);
          return 1;
        }
      double t1 = sl_now();
      for (int w = 0; w < 2; w++) b->ops->host_free(b, w2[w], 25u << 20);
      printf("pinned_memory=%s: two windows of 25 MiB made in %.4f s, freed in %.4f s\n",
             getenv("SLUICE_PINNED_MEMORY") ? getenv("SLUICE_PINNED_MEMORY") : "runtime", t1 - t0, sl_now() - t1);
    }
  }
  if (b) { /* pinned host -> device, the copy half of the source's path */
    size_t win = 32u << 20;
    void *host = NULL, *dev = NULL;
    sl_event *done_ev = NULL;
    if (b->ops->host_alloc(b, win, &host, &e) || b->ops->alloc(b, win, &dev, &e) ||
        b->ops->event_create(b, &done_ev, &e)) {
      fprintf(stderr, "bench_page_cache_read: %s\n", e.msg);
      return 1;
    }
    memset(host, 1, win);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
      double t0 = sl_now();
      for (int64_t done = 0; done < total; done += (int64_t)win)
        if (b->ops->copy_async(b, SL_QUEUE_COPY, dev, host, win, &e)) {
          fprintf(stderr, "bench_page_cache_read: %s\n", e.msg);
          return 1;
        }
      if (b->ops->event_record(b, done_ev, SL_QUEUE_COPY, &e) || b->ops->event_wait(b, done_ev, &e)) {
        fprintf(stderr, "bench_page_cache_read: %s\n", e.msg);
        return 1;
      }
      double t = sl_now() - t0;
      if (r > 0 && t < best) best = t;
    }
    printf("pinned host -> device: %.3f GB in copies of %zu bytes: best %.4f s (%.2f GB/s)\n", total / 1e9, win,
           best, total / best / 1e9);
    b->ops->event_destroy(b, done_ev);
    b->ops->free(b, dev, win);
    b->ops->host_free(b, host, win);
    b->ops->destroy(b);
  }
  for (int f = 0; f < n_files; f++) close(fds[f]);
  free(fds);
  free(pieces);
  return 0;
}
