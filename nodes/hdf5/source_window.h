/* What hdf5_source's CPU kernel and its produce hook (hdf5_source.c) share:
 * the node state, the read-ahead windows fed by the chunk reader, and the
 * layout of the output (packed stored chunks, or plain frames). They differ
 * only in where the windows live (malloc, or the backend's pinned host
 * memory) and how the bytes reach the output (memcpy, or the executor's
 * asynchronous copies: engine/exec/prefetch.h).
 *
 * With malloc'd windows (the CPU kernel) a window holds the stored chunks of
 * several consecutive calls (about SL_SRC_WINDOW_BYTES). An encoded output
 * is lent from the window (sl_node_desc.lends_output): each call's header is
 * written in place just before its bytes (sl_src_pack), over bytes of the
 * window's earlier calls, whose chunks are done by then; a plain one is
 * copied into the output buffer. Windows from an allocator (produce: copied
 * asynchronously) hold one call and get the header in place too.
 *
 * Window layout: each window is one allocation of `prefix + capacity` bytes.
 * The reader writes the stored chunks at base + prefix (chunk first+j at
 * offsets[j]); the packed header and entries of that window are written just
 * before them, so that header + entries + bytes are one contiguous range:
 * exactly the packed buffer (sl_packed_items, engine/core/tensor.h), moved by
 * one copy. Each entry's origin is its stored chunk's index in the
 * acquisition, which sl_src_describe_origin names. */
#ifndef SL_HDF5_SOURCE_WINDOW_H
#define SL_HDF5_SOURCE_WINDOW_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "nodes/hdf5/chunk_reader.h"
#include "nodes/hdf5/h5_index.h"

/* Where windows come from, and what must happen before the reader may write
 * a window again. NULL functions: malloc/free, nothing to wait for. */
typedef struct sl_src_alloc {
  sl_code (*alloc)(void *ctx, size_t bytes, void **ptr, sl_error *err);
  void (*free)(void *ctx, void *ptr, size_t bytes);
  /* Window w is about to be overwritten (a read into it, or freeing it):
   * returns when nothing still reads it (produce waits for the executor's
   * copies out of it). */
  sl_code (*reuse)(void *ctx, int w, sl_error *err);
  void *ctx;
} sl_src_alloc;

/* Stored bytes a spanning (malloc'd) window aims at; it holds at most this
 * plus one call's stored chunks. */
#define SL_SRC_WINDOW_BYTES (1u << 20)

/* Windows, used in turn: the one a call works on, the read-ahead of the next
 * call, and one whose copies (device backends) may still be in flight. With
 * two, the read-ahead of call k + 1 had to wait for the copies out of call
 * k - 1's window, so the reader idled and each copy was issued only after
 * the one before it had ended. */
#define SL_SRC_WINDOWS 3

typedef struct sl_src_windows {
  const sl_h5_index *ix;
  sl_src_alloc al;
  /* Threads of the chunk reader; 0: sl_chunk_reader_default_threads(). */
  int read_threads;
  /* Or, with wait_opts.run set before the first window, no reader
   * threads: each window is read when the call that needs it waits, on
   * the caller's workers (sl_chunk_reader_read_on_workers). */
  sl_chunk_reader_opts wait_opts;
  /* The scan's every position fits the first window (a small acquisition,
   * or on a device one call for the whole scan): there is nothing to read
   * ahead, so no reader thread, no spare window; the window is read in the
   * call's wait (on the caller's workers with wait_opts.run, else in the
   * calling thread). A reader thread's start and hand-over were 0.3-0.9 ms
   * of the H200's 0.5-1.1 ms source of a 24 x 20 scan. */
  bool one_window;
  sl_chunk_reader *reader;
  uint8_t *base[SL_SRC_WINDOWS];
  /* With an allocator (pinned memory, 5-14 ms a window on the H200's host):
   * window 2 made on a thread of its own, started when the reader opens and
   * joined when the window is first read into. */
  pthread_t spare_thread;
  bool spare_started;
  void *spare;
  double spare_seconds;
  sl_code spare_rc;
  sl_error spare_err;
  size_t alloc_bytes;      /* of each window: prefix + capacity */
  size_t prefix;           /* room for the header and max_chunks entries */
  size_t capacity;         /* stored bytes a window holds */
  int64_t max_chunks;      /* stored chunks a window holds */
  int64_t sized_positions; /* the chunk of the scan the sizes were computed for */
  /* The read-ahead in flight, if any. */
  bool pending;
  int64_t pending_first, pending_count;
  int pending_buffer;
  uint64_t *offsets; /* max_chunks + 1: the calls' window (relative offsets) */
  /* Malloc'd windows (the CPU kernel, which copies a call's bytes out before
   * it returns) span several calls of small chunks: one read and one wait per
   * window instead of per call (a reader wake-up costs as much as decoding a
   * few frames). The window last read: buffer, stored chunks, offsets. */
  int64_t call_positions, window_positions; /* positions of a call -> of a window */
  bool cur_valid;
  int cur_buffer;
  int64_t cur_first, cur_count;
  /* The first stored chunk of the current window whose bytes are intact: a
   * lent call's header (sl_src_lend) is written over the bytes before its
   * own, so a later call that needs earlier chunks (a second pass over a
   * scan that fits one window) reads them again. */
  int64_t cur_intact_first;
  uint64_t *cur_offsets; /* max_chunks + 1 */
  /* Where the calls waited (seconds, summed since the windows were made):
   * for the reader to finish a window, and in the reuse hook for the copies
   * out of a window before it is read into again. */
  double wait_read_seconds, wait_reuse_seconds;
  double alloc_seconds; /* allocating the windows (pinned memory is slow) */
  double sizing_seconds; /* sizing the windows, opening the reader */
  double get_seconds;    /* in sl_src_windows_get, all of the above included */
  sl_chunk_reader_stats closed; /* of the readers closed when windows grew */
} sl_src_windows;

/* The window one call works on. */
typedef struct sl_src_window {
  int buffer;              /* the window: 0 .. SL_SRC_WINDOWS - 1 */
  int64_t first, count;    /* stored chunks [first, first + count) */
  uint8_t *data;           /* their bytes, chunk first + j at offsets[j] */
  const uint64_t *offsets; /* count + 1 (offsets[count]: the total) */
} sl_src_window;

struct sl_backend;
struct sl_produce_args;

/* hdf5_source's node state. */
typedef struct sl_src_state {
  const sl_h5_index *ix;
  const char **where; /* interned "file:dataset" per data file */
  sl_src_windows win;
  /* produce (device backends): the backend whose host memory (pinned) the
   * windows are, and the call running now, whose piece_wait the windows'
   * reuse hook calls (NULL between calls: the executor waited for every
   * copy when its stage ended). */
  struct sl_backend *host_backend;
  struct sl_produce_args *producing;
  double emit_seconds; /* produce: handing the executor its copies */
} sl_src_state;

/* The window holding scan positions [pos_start, pos_start + pos_count) of a
 * scan of total_positions: the read-ahead when it is that one, else read now;
 * then the read-ahead of the next positions (as many) into the other window.
 * Windows are sized on the first call for chunks of the scan of pos_count
 * positions (and grown, after the reader is drained, should a later call
 * need more). Errors: the reader's (file, offset, chunk), SL_ERR_NOMEM, or the
 * allocator's and reuse hook's. */
sl_code sl_src_windows_get(sl_src_windows *w, int64_t pos_start, int64_t pos_count, int64_t total_positions,
                           sl_src_window *out, sl_error *err);
/* The reading so far: the readers' stats, those closed when windows grew
 * included. */
void sl_src_windows_stats(sl_src_windows *w, sl_chunk_reader_stats *st);
/* Closes the reader (abandoning the read-ahead), waits
 * for each window's reuse hook and frees them. Safe on a zeroed struct. */
void sl_src_windows_free(sl_src_windows *w);

/* Encoded output: writes the packed header and entries just before the
 * call's bytes in the window (at the 8-byte boundary at or below; in a window
 * that spans calls, over the end of the call before, which must be done
 * with); *packed and *bytes are the whole packed buffer (header, entries,
 * stored bytes) for the output. SL_ERR_INTERNAL when it exceeds capacity
 * (the port's bound). */
sl_code sl_src_pack(const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity, const uint8_t **packed,
                    uint64_t *bytes, sl_error *err);
/* sl_src_pack for an output lent from the current window (the CPU kernel):
 * the window's chunks before this call's are no longer served (their bytes
 * are under the header). */
sl_code sl_src_lend(sl_src_windows *w, const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity,
                    const uint8_t **packed, uint64_t *bytes, sl_error *err);
/* Encoded output into dst (the output buffer): the packed header and entries,
 * then a copy of the window's bytes; *bytes: what was written. Same errors as
 * sl_src_pack. */
sl_code sl_src_pack_to(const sl_src_window *win, const sl_h5_index *ix, uint64_t capacity, void *dst,
                       uint64_t *bytes, sl_error *err);

/* "WHERE, stored chunk K (frames A-B)" for an acquisition's stored chunk K
 * (where: "file:dataset"); when it spans several files and the chunk's
 * index in its file differs from its index in the acquisition, both:
 * "WHERE, stored chunk K of that file (chunk G of the acquisition, frames A-B)". */
void sl_src_describe_chunk(const char *where, int64_t stored_chunk, int64_t file_chunk, int64_t first_frame,
                           int64_t n_frames, char *buf, size_t n);
/* The encoded stream's describe_origin (sl_tensor_desc): ctx points at the
 * node's state pointer (a sl_src_state *, NULL before prepare and after
 * release), and the origin is the stored chunk's index in the acquisition,
 * named by the index's file and chunk in that file. */
void sl_src_describe_origin(const void *ctx, uint64_t origin, int64_t first_position, int64_t n_positions,
                            char *buf, size_t n);

/* Plain output (uncompressed files): the frames of positions [pos_start,
 * pos_start + pos_count) from the window, as copies of contiguous runs (the
 * frames of neighbouring chunks merged): copy(ctx, byte offset in the output,
 * source, bytes). SL_ERR_FORMAT naming the file when a stored chunk holds
 * fewer bytes than its frames need. */
typedef sl_code (*sl_src_copy_fn)(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes,
                                  sl_error *err);
sl_code sl_src_plain(const sl_src_window *win, const sl_h5_index *ix, const char *const *where, int64_t pos_start,
                     int64_t pos_count, int64_t frame_bytes, sl_src_copy_fn copy, void *ctx, sl_error *err);

#endif
