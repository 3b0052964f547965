/* Raw chunk reader for an sl_h5_index: positioned reads (pread) on file
 * descriptors opened once, neighbouring chunks that are adjacent in the same
 * file merged into one read, on a background thread with read-ahead.
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
 * thread drives a reader (request / wait / close are not for concurrent use). */
#ifndef SL_DETECTOR_CHUNK_READER_H
#define SL_DETECTOR_CHUNK_READER_H

#include <stddef.h>
#include <stdint.h>

#include "../../engine/core/status.h"
#include "h5_index.h"

#define SL_CHUNK_READER_DEPTH 4

typedef struct sl_chunk_reader sl_chunk_reader;

typedef struct sl_chunk_reader_stats {
  uint64_t requests;   /* windows completed */
  uint64_t reads;      /* pread calls that returned data */
  uint64_t bytes;      /* bytes read */
  double read_seconds; /* time the reader thread spent in pread */
} sl_chunk_reader_stats;

/* Opens every data file of `ix` once (O_RDONLY, POSIX_FADV_SEQUENTIAL) and
 * starts the reader thread. max_window_chunks bounds the chunk count of one
 * request (> 0). Errors: SL_ERR_IO naming the file that cannot be opened. */
sl_code sl_chunk_reader_open(const sl_h5_index *ix, int64_t max_window_chunks, sl_chunk_reader **out,
                             sl_error *err);

/* Queues the read of chunks [first, first+count) into dst (dst_capacity >=
 * sl_h5_window_bytes(ix, first, count)) and returns at once. dst must stay
 * valid until the matching wait returns (or close). Errors (synchronous, the
 * request is not queued): SL_ERR_USAGE for a bad range, a window larger than
 * max_window_chunks, a buffer too small, or SL_CHUNK_READER_DEPTH requests
 * already outstanding. */
sl_code sl_chunk_reader_request(sl_chunk_reader *r, int64_t first, int64_t count, uint8_t *dst,
                                size_t dst_capacity, sl_error *err);

/* Waits for the oldest outstanding request (with one outstanding: the last
 * one) and returns its status. I/O errors (SL_ERR_IO, or SL_ERR_FORMAT for a
 * short read at end of file) name the file, the offset and the chunk
 * (err->file, err->chunk). Optional out parameters (may be NULL) say which
 * window finished. SL_ERR_USAGE when nothing is outstanding. */
sl_code sl_chunk_reader_wait_window(sl_chunk_reader *r, int64_t *first, int64_t *count, uint8_t **dst,
                                    sl_error *err);
sl_code sl_chunk_reader_wait(sl_chunk_reader *r, sl_error *err);

/* Requests queued and not yet waited for. */
int sl_chunk_reader_pending(const sl_chunk_reader *r);
void sl_chunk_reader_get_stats(sl_chunk_reader *r, sl_chunk_reader_stats *s);

/* Abandons outstanding requests (the request being read stops at its next
 * read), joins the thread and closes the files. NULL is a no-op. */
void sl_chunk_reader_close(sl_chunk_reader *r);

#endif
