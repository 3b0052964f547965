/* Raw chunk reader for an sl_h5_index: positioned reads (pread) on file
 * descriptors opened once, neighbouring chunks that are adjacent in the same
 * file merged into one read, on a background thread with read-ahead (and a
 * few helper threads that read parts of a window in parallel), or in the
 * waiting thread on its own workers (sl_chunk_reader_opts.run).
 *
 * Window layout: the bytes of chunks [first, first+count) land in the
 * caller's buffer consecutively in chunk order, chunk first+j at
 * offsets[j] from sl_h5_window_offsets() (sl_h5_window_bytes() is the total).
 *
 * Requests form a FIFO of up to SL_CHUNK_READER_DEPTH windows. The usual
 * double-buffered loop:
 *
 *   request(window 0, buf[0]);
 *   for k = 0..: wait();                      // window k is in buf[k % 2]
 *                request(window k+1, buf[(k+1) % 2]);   // reads while we decode
 *                decode(buf[k % 2]);
 *
 * The reader does not copy the index: `ix` must outlive the reader. One
 * thread drives a reader (request / wait / close are not for concurrent use).
 *
 * Parallel reads: a window's merged reads are cut into pieces (of at least
 * piece_bytes, about a quarter of the window's share per thread) that up to
 * `threads` threads read at once (the reader thread and threads - 1 helpers),
 * into disjoint parts of dst. Windows still complete one at a time in FIFO
 * order. When several pieces fail, the error reported is the one of the first
 * failing byte in window order, as with one thread (the same file, offset
 * and chunk). With one thread a window is read exactly as before: one pread
 * per merged run. */
#ifndef SL_HDF5_CHUNK_READER_H
#define SL_HDF5_CHUNK_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"
#include "nodes/hdf5/h5_index.h"

#define SL_CHUNK_READER_DEPTH 4

typedef struct sl_chunk_reader sl_chunk_reader;

typedef struct sl_chunk_reader_stats {
  uint64_t requests;     /* windows completed */
  uint64_t reads;        /* pread calls that returned data */
  uint64_t bytes;        /* bytes read */
  uint64_t pieces;       /* pieces read (merged reads, cut for the threads) */
  double read_seconds;   /* time spent in pread, summed over the threads */
  double window_seconds; /* wall time from starting a window to its end */
  int threads;           /* threads that read (the reader thread included; the
                            caller's workers when they read in the wait) */
} sl_chunk_reader_stats;

/* Threads that read a window at once. */
#define SL_CHUNK_READER_MAX_THREADS 64
/* Default smallest piece a merged read is cut into for the threads. */
#define SL_CHUNK_READER_PIECE_BYTES ((uint64_t)1 << 20)
/* The same when the waiting thread's workers read (sl_chunk_reader_opts.run):
 * a CPU source's window is about 1 MiB, which pieces of 1 MiB would leave
 * to one worker. */
#define SL_CHUNK_READER_WAIT_PIECE_BYTES ((uint64_t)64 << 10)

/* Runs fn over [0, n) on the caller's workers and returns when every range
 * is done (a backend's parallel_for with a grain of 1). */
typedef void (*sl_chunk_reader_run_fn)(void *run_ctx, int64_t n, sl_range_fn fn, void *fn_ctx);

typedef struct sl_chunk_reader_opts {
  /* Threads reading a window (the reader thread included); <= 0: the
   * default, the read_threads setting if set, else min(4, the CPUs this
   * process may use). Capped at SL_CHUNK_READER_MAX_THREADS. */
  int threads;
  /* Smallest piece; 0: SL_CHUNK_READER_PIECE_BYTES (tests use tiny ones). */
  uint64_t piece_bytes;
  /* The chunks the reader will read, [first_chunk, first_chunk +
   * chunk_count): only the data files holding them are opened (a preview's
   * first frames: one file of an acquisition's hundreds); count 0: every
   * chunk, every file. Requests outside them are refused. */
  int64_t first_chunk, chunk_count;
  /* Read in the thread that waits instead of on reader threads: none is
   * started; a request only asks the kernel to read its bytes ahead
   * (POSIX_FADV_WILLNEED, so that a disk's reads still overlap the caller's
   * work) and the wait reads the window, its pieces spread over the
   * caller's `run_workers` workers by `run`. For a caller whose workers
   * already hold every CPU the process may use: reader threads would only
   * take turns with them (hdf5_source on the CPU backend). NULL: threads. */
  sl_chunk_reader_run_fn run;
  void *run_ctx;
  int run_workers;
} sl_chunk_reader_opts;

/* The default thread count (the read_threads setting: SLUICE_READ_THREADS or
 * --setting; else min(4, the CPUs this process may use)). */
int sl_chunk_reader_default_threads(void);
/* Whether a caller whose `workers` run its kernels should read in its wait
 * (sl_chunk_reader_opts.run) rather than on reader threads: when the
 * read_threads setting is not set and the workers hold every CPU this
 * process may use (on the 2-CPU dev VM at 2 workers, two reader threads
 * took turns with them: the source's waits 1.9-8.5 ms a run of the same
 * 64 x 64 acquisition, the decode slower by as much). */
bool sl_chunk_reader_reads_in_wait(int workers);
struct sl_backend;
/* Sets o's run, run_ctx and run_workers to read on backend b's workers
 * (its parallel_for) where sl_chunk_reader_reads_in_wait says so, else
 * leaves o as it is (reader threads). */
void sl_chunk_reader_read_on_workers(sl_chunk_reader_opts *o, struct sl_backend *b);
/* Sets o to read in the waiting thread alone (no reader thread, no
 * workers): for a caller with nothing to read ahead (hdf5_source's scan in
 * one window), where a thread's start and hand-over cost more than the
 * read. */
void sl_chunk_reader_read_in_caller(sl_chunk_reader_opts *o);
/* The same for a source feeding a device backend, whose host CPUs have
 * nothing else to do while the device decodes: the read_threads setting if
 * set, else every CPU this process may use, at most 16 (the H200 host read
 * 1.6 GB from the page cache in 0.17 s with 4 threads, 0.09 s with 8). */
int sl_chunk_reader_device_threads(void);
/* The smallest piece: the read_piece setting if set, else
 * SL_CHUNK_READER_PIECE_BYTES. (On the H200, 64 KiB, 256 KiB and 1 MiB
 * pieces read the 512 x 512 acquisition equally fast, within the host's
 * run-to-run spread.) */
uint64_t sl_chunk_reader_piece_bytes(void);

/* Opens every data file of `ix` once (O_RDONLY, POSIX_FADV_SEQUENTIAL) and
 * starts the reader thread. max_window_chunks bounds the chunk count of one
 * request (> 0). Errors: SL_ERR_IO naming the file that cannot be opened. */
sl_code sl_chunk_reader_open(const sl_h5_index *ix, int64_t max_window_chunks, sl_chunk_reader **out,
                             sl_error *err);
/* The same with options (NULL: defaults). Errors also: SL_ERR_INTERNAL when a
 * thread cannot start. */
sl_code sl_chunk_reader_open_opts(const sl_h5_index *ix, int64_t max_window_chunks,
                                  const sl_chunk_reader_opts *opts, sl_chunk_reader **out, sl_error *err);

/* Queues the read of chunks [first, first+count) into dst (dst_capacity >=
 * sl_h5_window_bytes(ix, first, count)) and returns at once. dst must stay
 * valid until the matching wait returns (or close). Errors (synchronous, the
 * request is not queued): SL_ERR_USAGE for a bad range, a window larger than
 * max_window_chunks, a buffer too small, or SL_CHUNK_READER_DEPTH requests
 * already outstanding. */
sl_code sl_chunk_reader_request(sl_chunk_reader *r, int64_t first, int64_t count, uint8_t *dst,
                                size_t dst_capacity, sl_error *err);

/* Waits for the oldest outstanding request (with one outstanding: the last
 * one; read now by the caller's workers when the reader reads in the wait)
 * and returns its status. I/O errors (SL_ERR_IO, or SL_ERR_FORMAT for a
 * short read at end of file) name the file, the offset and the chunk
 * (err->file, err->chunk). Optional out parameters (may be NULL) say which
 * window finished. SL_ERR_USAGE when nothing is outstanding. */
sl_code sl_chunk_reader_wait_window(sl_chunk_reader *r, int64_t *first, int64_t *count, uint8_t **dst,
                                    sl_error *err);
sl_code sl_chunk_reader_wait(sl_chunk_reader *r, sl_error *err);

/* Gives up the oldest outstanding request: forgotten when no thread has
 * started reading it (always so when the reader reads in the wait), else
 * waited for, its error ignored. No-op when nothing is outstanding. */
void sl_chunk_reader_abandon_oldest(sl_chunk_reader *r);

/* Requests queued and not yet waited for. */
int sl_chunk_reader_pending(const sl_chunk_reader *r);
void sl_chunk_reader_get_stats(sl_chunk_reader *r, sl_chunk_reader_stats *s);

/* Abandons outstanding requests (the request being read stops at its next
 * read), joins the thread and closes the files. NULL is a no-op. */
void sl_chunk_reader_close(sl_chunk_reader *r);

#endif
