/* Output writers: what a run leaves on disk. results.h5 holds one dataset per
 * graph output with units and provenance; every 2-D real output also becomes
 * a PNG. The writing is done by sink nodes in the graph (nodes/io: write_h5,
 * write_png), appended for each output by sl_graph_add_writers and planned
 * like any node; this header is what they write with. */
#ifndef SL_SINKS_H
#define SL_SINKS_H

#include "engine/exec/exec.h"

typedef struct sl_attr {
  const char *key;
  const char *value;
} sl_attr;

/* What the results.h5 writer may hold of each streamed output to write it
 * in larger pieces than one chunk (a chunk of a few frames' scalars would
 * otherwise cost an HDF5 write each): at most this, at most the whole
 * output. write_h5 declares it as its state. */
#define SL_H5_WRITE_BEHIND_BYTES ((int64_t)1 << 20)
/* ... except a streamed image (its PNG reads it back) of at most this, held
 * whole: its PNG is drawn from the buffer instead of from the file, and the
 * file gets it in one write when the run finishes results.h5. */
#define SL_H5_IMAGE_BEHIND_BYTES ((int64_t)16 << 20)

/* Where results.h5 holds an encoded output's stored chunks (one HDF5 chunk
 * each, as many as the acquisition has), what HDF5 may keep in memory for
 * them: the file's metadata cache (the chunk index's pages) and each kind
 * of HDF5's free lists, whatever the number of chunks. */
#define SL_H5_METADATA_CACHE_BYTES ((size_t)1 << 20)
#define SL_H5_FREE_LIST_BYTES ((size_t)256 << 10)
/* What HDF5 keeps in memory while it writes `chunks` stored chunks under
 * those limits (write_h5's library_bytes): process RSS with the writes less
 * without them, repack.yaml on the dev VM with HDF5 1.10.8, was 0.5 MiB for
 * 4,096 chunks and 3.1 MiB for 65,536 and for 262,144 chunks (a 512 x 512
 * scan): a little per chunk up to the limits. */
int64_t sl_h5_stored_library_bytes(int64_t chunks);
/* The write-behind buffer of a streamed output described by d. */
int64_t sl_h5_write_behind_bytes(const sl_tensor_desc *d);

/* results.h5 written as the run goes: streamed outputs chunk by chunk as
 * their positions complete (so they never need to fit in host memory),
 * whole ones when they are made, then every dataset's attributes (unit,
 * source, provenance, ...), which are known only once the run has ended.
 * Datasets are named after the outputs and created at their first write. */
typedef struct sl_h5_writer sl_h5_writer;

/* Whether the HDF5 library was built thread-safe (Debian's is): a run
 * split into shards calls it from several threads (results.h5's writer
 * serialises its own calls, but sources list chunks and read masks with
 * HDF5 at the same time); the library's version into `version`. */
bool sl_h5_threadsafe(char *version, size_t len);
/* Called first by a program that writes results.h5 (before any HDF5 call):
 * HDF5 1.10 crashes in its cleanup at exit when closing a file failed (a
 * write error, a full disk), so the library's exit handler is left out and
 * such a file is left to the OS; every file that did close is complete. */
void sl_h5_writer_process_init(void);
/* Creates `path` with the run's file attributes. */
sl_code sl_h5_writer_open(const char *path, const sl_attr *file_attrs, int n_attrs, sl_h5_writer **w,
                          sl_error *err);
/* Scan positions [start, start + count) of streamed output `name` (its
 * leading stream_rank axes are the scan; d is the whole tensor), chunk
 * `chunk` of the run: count items, contiguous in `data`. */
sl_code sl_h5_writer_positions(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                               int64_t start, int64_t count, const void *data, sl_error *err);
/* Creates the dataset of streamed output `name` (d: as for
 * sl_h5_writer_positions) and its write-behind buffer, every page of it
 * touched, before the stream starts: done at the first write when not
 * before, where the buffer's first touches fell one page at a time among
 * the chunks' calls (a 512 KiB image's 128 faults took 5-6 ms of the
 * writer's 7 ms in resident_products at 256 x 256, streaming 4.8 GB from
 * memory beside it, against 1.5 ms touched at once). `sluice run` calls it
 * when it opens results.h5. */
sl_code sl_h5_writer_reserve(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, sl_error *err);
/* Sets w up for the many HDF5 chunks of encoded output `name` (see
 * sl_h5_writer_stored) or of a ragged one (sl_h5_writer_ragged); done
 * there at the first write when not before: HDF5's limits on what it keeps
 * for many chunks, and whether the bitshuffle plugin is there (loading it
 * takes 0.3-0.7 ms on the dev VM). `sluice run` calls it when it opens
 * results.h5, so that this happens before any data is read. */
sl_code sl_h5_writer_expect_chunked(sl_h5_writer *w, const char *name, sl_error *err);
/* The stored blocks of encoded output `name` (d: its decoded dtype and
 * shape, its encoding) that begin in scan positions [start, start + count),
 * chunk `chunk` of the run, from `packed`, the call's packed buffer of
 * `bytes` bytes (sl_packed_items): each is written as it is, as one HDF5
 * chunk (no decoding, no encoding again), of a dataset of positions x item
 * made with the encoding's filter (bitshuffle, HDF5 filter 32008), so that
 * the dataset reads like the acquisition's own (attributes `scan_shape`
 * and `encoding`). A block that is not one chunk of that dataset (a data
 * file's last block of fewer positions, in the middle of the scan) is
 * SL_ERR_FORMAT, naming it. */
sl_code sl_h5_writer_stored(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                            int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err);
/* A stream of variable-size items (a plain variable-size streamed output,
 * sl_tensor_desc.variable, d its descriptor): the items of the call's
 * packed buffer (`packed`, `bytes` as its producer wrote them,
 * sl_packed_items) whose first position is in [start, start + count),
 * chunk `chunk` of the run, appended to output `name`'s ragged layout: a
 * group NAME holding `bytes` (u8, every item's bytes in stream order),
 * `offsets` (u64, items + 1: item k is bytes[offsets[k]:offsets[k+1]]),
 * `first_position` and `n_positions` (i64, the stream positions each item
 * holds), with attributes `layout` ("ragged") and `scan_shape`. Items come
 * in stream order: the item the previous call ended with, sent again
 * because it runs into this call, is skipped; any other that begins before
 * the call or after it, or overlaps positions written before, is
 * SL_ERR_INTERNAL naming it. Consecutive items wait in write-behind buffers
 * (sl_h5_ragged_behind_bytes). */
sl_code sl_h5_writer_ragged(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, int64_t chunk,
                            int64_t start, int64_t count, const void *packed, int64_t bytes, sl_error *err);
/* The write-behind buffers of ragged output d: its items' bytes, at most
 * SL_H5_WRITE_BEHIND_BYTES, and their entries, at most
 * SL_H5_RAGGED_BEHIND_ITEMS (each at most what the whole output holds). */
#define SL_H5_RAGGED_BEHIND_ITEMS 4096
int64_t sl_h5_ragged_behind_bytes(const sl_tensor_desc *d);
/* The HDF5 chunks a ragged output d may take at most (for what HDF5 keeps
 * while writing them: sl_h5_stored_library_bytes). */
int64_t sl_h5_ragged_chunks(const sl_tensor_desc *d);
/* All of output `name` (d: its dtype and shape) from data. */
sl_code sl_h5_writer_whole(sl_h5_writer *w, const char *name, const sl_tensor_desc *d, const void *data,
                           sl_error *err);
/* The smallest and largest finite values of streamed image `name` (a 2-D
 * real output, sl_output_is_image), folded as its positions passed through
 * sl_h5_writer_positions: true once every position has, else false (the
 * caller reads the rows back for them). */
bool sl_h5_writer_range(sl_h5_writer *w, const char *name, double *lo, double *hi);
/* Rows [row0, row0 + n_rows) of 2-D output `name` where the write-behind
 * buffer holds them (valid until the dataset's next write), else NULL. */
const void *sl_h5_writer_rows_held(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows);
/* Rows [row0, row0 + n_rows) of 2-D output `name` as written so far (its
 * waiting positions are written first), into data in the output's dtype. */
sl_code sl_h5_writer_read_rows(sl_h5_writer *w, const char *name, int64_t row0, int64_t n_rows, void *data,
                               sl_error *err);
/* Every dataset's attributes from `outs` (n of them, one dataset each), and
 * the file closed; frees w. */
sl_code sl_h5_writer_finish(sl_h5_writer *w, const sl_output_data *outs, int n, sl_error *err);
/* Closes what is open without finishing (the caller removes the file). */
void sl_h5_writer_abandon(sl_h5_writer *w);

/* Where a run's writer nodes put the outputs: a folder being written (the
 * run's DIR.tmp-PID, published by a rename once everything is in it) and
 * results.h5 open there. The run's setup owns it and opens results.h5
 * before the run; every writer node's state points at it. */
typedef struct sl_output_target {
  char dir[4200];
  sl_h5_writer *results;
} sl_output_target;

/* Appends the run's writer nodes to a built top-level graph: a write_h5 for
 * every graph output and a write_png for every 2-D real one (types from the
 * graph's registry), each reading its output like any consumer. */
sl_code sl_graph_add_writers(sl_graph *g, sl_error *err);
/* Points every writer node of g at t (their state for the run). */
void sl_graph_bind_writers(sl_graph *g, sl_output_target *t);

/* Is an output of this type drawn as a PNG? (rank 2, real, not empty) */
bool sl_output_is_image(const sl_tensor_desc *d);

/* The workers that draw a PNG's bands: the backend's parallel_for and each
 * worker's lent scratch (sl_png_worker_bytes at scratch + worker * stride). */
typedef struct sl_png_workers {
  sl_backend *backend;
  void *scratch;
  int64_t stride;
} sl_png_workers;

/* An 8-bit grayscale PNG of a 2-D real tensor described by d, scaled from
 * lo to hi (its smallest and largest finite values; non-finite values are
 * black), written to `path`. Rows come from `rows` in strips of at most
 * sl_png_strip_rows(d) rows: rows(ctx, row0, n, &ptr, err) points ptr at
 * rows [row0, row0 + n) in d's dtype. Each strip's rows are drawn and
 * deflated in bands, in parallel on `workers`; the file's bytes depend on
 * the image only. */
typedef sl_code (*sl_png_rows_fn)(void *ctx, int64_t row0, int64_t n_rows, const void **rows, sl_error *err);
/* Where a PNG's time went (seconds): getting its rows, drawing and
 * deflating them (on the workers), writing the file. */
typedef struct sl_png_times {
  double rows, draw, file;
} sl_png_times;
/* times: added to when not NULL. */
sl_code sl_png_write(const char *path, const sl_tensor_desc *d, double lo, double hi, sl_png_rows_fn rows,
                     void *ctx, const sl_png_workers *workers, sl_png_times *times, sl_error *err);
/* The rows of one strip: as many as fit SL_PNG_STRIP_BYTES, at least one. */
#define SL_PNG_STRIP_BYTES ((int64_t)1 << 20)
int64_t sl_png_strip_rows(const sl_tensor_desc *d);
/* Host scratch per worker while drawing a PNG of width w: zlib's deflate
 * state, a band of filtered rows and its deflated bytes. */
int64_t sl_png_worker_bytes(int64_t w);
/* Host memory of one PNG while it is drawn: a strip's bands and their
 * deflated bytes, written in order once the strip's bands are done. */
int64_t sl_png_bands_bytes(const sl_tensor_desc *d);
/* The smallest and largest finite values among n values of dtype t, folded
 * into *lo and *hi (left as they are when there are none). */
void sl_values_range(sl_dtype t, const void *data, int64_t n, double *lo, double *hi);
/* The same over backend b's workers (parallel_for) when n is large (a 512 x
 * 512 f64 image took 0.5-0.7 ms on one of the H200 host's threads, five
 * of them in stem_products' epilogue); the same values whatever the split
 * (min and max do not depend on the order). */
struct sl_backend;
void sl_values_range_on(struct sl_backend *b, sl_dtype t, const void *data, int64_t n, double *lo, double *hi);

#endif
