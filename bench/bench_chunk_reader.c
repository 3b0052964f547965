/* The chunk reader's throughput against its thread count: the whole
 * acquisition read in double-buffered windows (as hdf5_source reads it), from
 * the page cache after a first warming pass.
 *
 *   bench_chunk_reader MASTER [WINDOW_CHUNKS] [MAX_THREADS] [REPS] [PINNED]
 *
 * MASTER: a master file (bench/make_acquisition, tests/data/make_dectris.py).
 * WINDOW_CHUNKS (default 8192): stored chunks per window. MAX_THREADS
 * (default 8): thread counts 1, 2, 4, ... up to it. REPS (default 3): passes
 * per count, the best printed. PINNED (default 0): 1 = windows in pinned host
 * memory (the CUDA backend's host_alloc; needs a GPU), as on the CUDA path.
 * Never asserts on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "nodes/hdf5/chunk_reader.h"
#include "nodes/hdf5/h5_index.h"

static int read_all(const sl_h5_index *ix, int64_t win, int threads, uint8_t *buf[2], size_t cap, double *secs,
                    sl_chunk_reader_stats *st) {
  sl_chunk_reader *r = NULL;
  sl_error e;
  sl_error_clear(&e);
  sl_chunk_reader_opts o = {.threads = threads};
  if (sl_chunk_reader_open_opts(ix, win, &o, &r, &e)) {
    fprintf(stderr, "open: %s: %s\n", e.file, e.msg);
    return 1;
  }
  double t0 = sl_now();
  int64_t nwin = (ix->n_chunks + win - 1) / win;
  int rc = sl_chunk_reader_request(r, 0, win < ix->n_chunks ? win : ix->n_chunks, buf[0], cap, &e);
  for (int64_t k = 0; k < nwin && !rc; k++) {
    rc = sl_chunk_reader_wait(r, &e);
    if (!rc && k + 1 < nwin) {
      int64_t f = (k + 1) * win, c = f + win <= ix->n_chunks ? win : ix->n_chunks - f;
      rc = sl_chunk_reader_request(r, f, c, buf[(k + 1) % 2], cap, &e);
    }
  }
  *secs = sl_now() - t0;
  if (rc) fprintf(stderr, "read: %s: %s\n", e.file, e.msg);
  sl_chunk_reader_get_stats(r, st);
  sl_chunk_reader_close(r);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MASTER [WINDOW_CHUNKS] [MAX_THREADS] [REPS] [PINNED]\n", argv[0]);
    return 2;
  }
  int64_t win = argc > 2 ? atoll(argv[2]) : 8192;
  int max_threads = argc > 3 ? atoi(argv[3]) : 8;
  int reps = argc > 4 ? atoi(argv[4]) : 3;
  int pinned = argc > 5 ? atoi(argv[5]) : 0;
  sl_h5_index *ix = NULL;
  sl_error e;
  sl_error_clear(&e);
  double t0 = sl_now();
  if (sl_h5_index_open(argv[1], NULL, &ix, &e)) {
    fprintf(stderr, "index: %s: %s\n", e.file, e.msg);
    return 1;
  }
  double t_index = sl_now() - t0;
  if (win > ix->n_chunks) win = ix->n_chunks;
  uint64_t total = sl_h5_window_bytes(ix, 0, ix->n_chunks);
  size_t cap = 0;
  for (int64_t f = 0; f < ix->n_chunks; f += win) {
    int64_t c = f + win <= ix->n_chunks ? win : ix->n_chunks - f;
    uint64_t b = sl_h5_window_bytes(ix, f, c);
    if (b > cap) cap = (size_t)b;
  }
  uint8_t *buf[2] = {NULL, NULL};
  sl_backend *b = NULL;
  if (pinned) {
#ifdef SLUICE_HAVE_CUDA
    if (sl_cuda_backend_ops.create(1, &b, &e) || b->ops->host_alloc(b, cap, (void **)&buf[0], &e) ||
        b->ops->host_alloc(b, cap, (void **)&buf[1], &e)) {
      fprintf(stderr, "pinned windows: %s\n", e.msg);
      return 1;
    }
#else
    fprintf(stderr, "pinned windows need the CUDA backend (not built in)\n");
    return 1;
#endif
  } else {
    buf[0] = malloc(cap);
    buf[1] = malloc(cap);
  }
  printf("acquisition: %s: %d files, %d stored chunks, %.3f GB stored (index %.3f s)\n", argv[1], ix->n_files,
         ix->n_chunks, (double)total / 1e9, t_index);
  printf("windows: %lld chunks, %.1f MB each (%s), cpus online: %ld\n", (long long)win, (double)cap / 1e6,
         pinned ? "pinned" : "malloc", sysconf(_SC_NPROCESSORS_ONLN));
  double secs;
  sl_chunk_reader_stats st;
  if (read_all(ix, win, 1, buf, cap, &secs, &st)) return 1; /* warm the page cache and the buffers */
  printf("%8s %10s %10s %8s %8s %12s\n", "threads", "seconds", "GB/s", "reads", "pieces", "pread s");
  for (int t = 1; t <= max_threads; t = t < max_threads && t * 2 > max_threads ? max_threads : t * 2) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
      if (read_all(ix, win, t, buf, cap, &secs, &st)) return 1;
      if (secs < best) best = secs;
    }
    printf("%8d %10.4f %10.2f %8llu %8llu %12.4f\n", t, best, (double)total / best / 1e9,
           (unsigned long long)st.reads, (unsigned long long)st.pieces, st.read_seconds);
    if (t == max_threads) break;
  }
  if (b) {
    b->ops->host_free(b, buf[0], cap);
    b->ops->host_free(b, buf[1], cap);
    b->ops->destroy(b);
  } else {
    free(buf[0]);
    free(buf[1]);
  }
  sl_h5_index_free(ix);
  return 0;
}
