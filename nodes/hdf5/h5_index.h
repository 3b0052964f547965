/* Chunk index of a detector acquisition stored in HDF5 (Dectris / Arina
 * layout, or one 3-D dataset). The index lists every chunk of every data file
 * once, in frame order, with its file offset and stored size, so that readers
 * can fetch raw chunk bytes with positioned reads and decode them themselves,
 * bypassing the HDF5 filter pipeline.
 *
 * It is built in two steps. Describing (sl_h5_index_describe) reads only
 * metadata: the datasets that hold the frames, their shapes, dtype, storage
 * and filter, and the detector metadata; what the stored chunks will be is
 * then known from the shapes (their count, the frames of each, a bound on
 * their size) without listing one. Listing (sl_h5_index_list_chunks) reads
 * every dataset's chunk index: time and memory proportional to the stored
 * chunks (35 s and 6 GB for 144 M one-frame chunks), so a planner describes
 * first and lists once the plan is known to fit.
 *
 * Nothing read from a file is trusted: rank, dtype, frame shape, chunk shape,
 * filters, chunk coordinates, offsets and sizes (against the file size) and
 * frame counts are checked when the index is built. See
 * docs/formats/dectris-hdf5.md. */
#ifndef SL_HDF5_H5_INDEX_H
#define SL_HDF5_H5_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"

#define SL_H5_FILTER_NONE 0
#define SL_H5_FILTER_BITSHUFFLE 32008

/* One stored chunk. A chunk always holds frames_per_chunk frames of storage
 * (for an uncompressed chunked dataset: frames_per_chunk * frame bytes; the
 * last chunk of a file may reach past the dataset's extent), of which the
 * first n_frames are frames of the acquisition. Pseudo-chunks of contiguous
 * datasets hold exactly n_frames frames. */
typedef struct sl_h5_chunk {
  uint64_t file_offset;  /* absolute byte offset in files[file] */
  uint64_t size;         /* stored (possibly compressed) bytes */
  uint32_t filter_mask;  /* bit i set: filter i was skipped for this chunk (stored raw) */
  int file;              /* index into sl_h5_index.files */
  uint32_t file_chunk;   /* index of this chunk among the chunks of its file */
  int64_t first_frame;   /* global frame index of the chunk's first frame */
  int64_t n_frames;      /* frames of the acquisition in this chunk, >= 1 */
} sl_h5_chunk;

/* Metadata from /entry/instrument/detector/ (master file, or the single data
 * file). Every field is optional; has_* says whether it was found. */
typedef struct sl_h5_detector_meta {
  int64_t x_pixels, y_pixels;          /* x_pixels_in_detector (cols), y_pixels_in_detector (rows) */
  int64_t nimages, ntrigger;           /* detectorSpecific/nimages, detectorSpecific/ntrigger */
  uint64_t saturation_value;           /* saturation_value, else detectorSpecific/countrate_correction_count_cutoff */
  double count_time, frame_time;       /* seconds */
  bool has_x_pixels, has_y_pixels, has_nimages, has_ntrigger, has_saturation_value,
      has_count_time, has_frame_time, has_pixel_mask;
  const char *saturation_source;       /* path the saturation value came from, NULL if none */
  uint32_t *pixel_mask;                /* frame_rows * frame_cols, row major, > 0 = bad; NULL if absent */
  int64_t n_bad_pixels;                /* pixels with mask > 0 */
  /* The frames' dataset's attribute scan_shape (what sluice's results.h5
   * gives an acquisition's stored chunks: pipelines/repack.yaml), of the
   * first dataset: two positive integers, or has_scan_shape false. */
  int64_t scan_rows, scan_cols;
  bool has_scan_shape;
} sl_h5_detector_meta;

/* One dataset holding a run of consecutive frames (a data file of a master,
 * or the dataset of a single file). */
typedef struct sl_h5_part {
  int file;             /* index into sl_h5_index.files */
  char *object;         /* the dataset's path in that file */
  char *link;           /* where it was found (link in the opened file), for messages */
  int64_t first_frame;  /* global frame index of its first frame */
  int64_t n_frames;
  int64_t first_chunk;  /* index of its first stored chunk in sl_h5_index.chunks */
  int64_t n_chunks;     /* its stored chunks: ceil(n_frames / frames_per_chunk), or n_frames if contiguous */
} sl_h5_part;

typedef struct sl_h5_index {
  int n_files;
  char **files;              /* data files (absolute, or relative to the cwd as the master path was) */
  char *source;              /* the path given to sl_h5_index_open */
  char *layout;              /* "dectris-master", "single" or "dataset:<path>" */
  int64_t n_frames, frame_rows, frame_cols;
  int elem_size;             /* 1, 2 or 4 */
  bool is_signed;
  int64_t frames_per_chunk;  /* storage frames of every chunk (1 for contiguous datasets) */
  uint64_t frame_bytes;      /* frame_rows * frame_cols * elem_size */
  bool contiguous;           /* every data file is contiguous (pseudo-chunks, filter 0) */
  int filter;                /* SL_H5_FILTER_NONE or SL_H5_FILTER_BITSHUFFLE */
  unsigned bs_cd_values[8];  /* the filter's cd_values (of the first dataset) */
  int n_cd_values;
  int n_chunks;              /* stored chunks (known from the shapes before listing) */
  int n_parts;
  sl_h5_part *parts;         /* the datasets, in frame order */
  int64_t min_chunk_frames;  /* fewest frames of the acquisition a stored chunk holds (a file's last) */
  int64_t max_part_chunks;   /* stored chunks of the dataset with the most (listing scratch) */
  /* Filled by listing; NULL / 0 / false while the index is only described. */
  bool listed;
  bool from_store; /* read back from the stored index (h5_index_store.h): no
                      HDF5 file is opened to list it */
  sl_h5_chunk *chunks;       /* in frame order; chunks[i].first_frame is increasing, no gaps */
  uint64_t max_chunk_size;   /* largest chunks[i].size */
  sl_h5_detector_meta meta;
} sl_h5_index;

/* Opens `path` and builds the index: described and listed.
 * dataset == NULL: auto layout. A master file with /entry/data/data_000001,
 *   data_000002, ... (6 digits, consecutive; external links resolved relative
 *   to the master's folder, or links inside the file), else /entry/data/data.
 * dataset != NULL: that dataset of the file (an external link is resolved
 *   the same way).
 * Errors: SL_ERR_IO (a file cannot be opened or is missing; the message names
 * the master, the link and the missing path), SL_ERR_FORMAT (anything
 * malformed or unsupported). The error's file is the file at fault. */
sl_code sl_h5_index_open(const char *path, const char *dataset, sl_h5_index **out, sl_error *err);
/* The same without listing the chunks: every file is opened (one at a time)
 * for its metadata, n_chunks, parts, min_chunk_frames and max_part_chunks
 * are set, chunks is NULL and listed false. Errors as sl_h5_index_open's,
 * except those only a chunk shows (missing or truncated chunks). */
sl_code sl_h5_index_describe(const char *path, const char *dataset, sl_h5_index **out, sl_error *err);
/* Lists the stored chunks of a described index into a new array of
 * ix->n_chunks entries (*chunks, the caller frees it) and their largest size,
 * without changing ix (a shared index stays readable meanwhile). Each dataset
 * is opened again and must still be what describing found (SL_ERR_IO "changed
 * since" otherwise). Errors: as sl_h5_index_open's, SL_ERR_NOMEM. */
sl_code sl_h5_index_list_chunks(const sl_h5_index *ix, sl_h5_chunk **chunks, uint64_t *max_chunk_size,
                                sl_error *err);
/* Makes a described index listed with what sl_h5_index_list_chunks gave
 * (it takes the array). */
void sl_h5_index_set_chunks(sl_h5_index *ix, sl_h5_chunk *chunks, uint64_t max_chunk_size);
/* How many times this process has listed an acquisition's chunks (tests
 * check that planning did not). */
uint64_t sl_h5_index_listings(void);
void sl_h5_index_free(sl_h5_index *ix);

/* The most stored bytes one chunk of a described index can have, known
 * without listing: a chunk without a filter (or bitshuffle without
 * compression) holds its frames as they are; a bitshuffle-LZ4 chunk at most
 * the codec's worst case for the dataset's block size (12-byte header, each
 * block's 4-byte length and LZ4's bound on incompressible data), and never
 * more than listing accepts (sl_h5_stored_chunk_cap). */
uint64_t sl_h5_index_chunk_bound(const sl_h5_index *ix);
/* The largest stored size listing accepts for a filtered chunk of `raw`
 * bytes (larger: a malformed file). */
uint64_t sl_h5_stored_chunk_cap(uint64_t raw);
/* Host bytes the index holds once listed (entries, file names, dataset
 * records, pixel mask), plus the scratch of listing its largest dataset:
 * known from a described index. */
uint64_t sl_h5_index_host_bytes(const sl_h5_index *ix);

/* How the stored chunks are encoded: SL_ENC_NONE (no filter: plain frames),
 * SL_ENC_BSLZ4 or SL_ENC_BITSHUFFLE, with the bitshuffle block size in
 * elements (0 = the default); SL_ERR_FORMAT for another bitshuffle
 * compression. */
/* The scan's shape as the frames' dataset stores it (meta.scan_rows and
 * scan_cols): true for a single dataset that has a valid one. */
bool sl_h5_index_scan_shape(const sl_h5_index *ix, int64_t *rows, int64_t *cols);
sl_code sl_h5_index_encoding(const sl_h5_index *ix, sl_encoding *enc, int64_t *block_elems, sl_error *err);

/* The frames' dtype: u8, u16 or u32 by elem_size. */
static inline sl_dtype sl_h5_index_dtype(const sl_h5_index *ix) {
  return ix->elem_size == 1 ? SL_U8 : ix->elem_size == 2 ? SL_U16 : SL_U32;
}

/* Chunk index holding global frame `frame`, or -1 when out of range. */
int64_t sl_h5_index_chunk_of_frame(const sl_h5_index *ix, int64_t frame);

/* Bytes of chunks [first, first+count) packed consecutively in chunk order
 * (the layout sl_chunk_reader writes). 0 for an empty or invalid range. */
uint64_t sl_h5_window_bytes(const sl_h5_index *ix, int64_t first, int64_t count);
/* offsets[j] = byte offset of chunk first+j in that packed window, for
 * j = 0..count; offsets[count] is the total. */
void sl_h5_window_offsets(const sl_h5_index *ix, int64_t first, int64_t count, uint64_t *offsets);

#endif
