/* The steps of building a chunk index (h5_index.c), one per file:
 *   h5_dataset.c       one 3-D frame dataset: shape, dtype, storage, filters;
 *   h5_chunk_list.c    its stored chunks (B-tree read directly, or the HDF5 API);
 *   h5_detector_meta.c the detector metadata next to the frames.
 * Internal to nodes/hdf5: readers use h5_index.h. */
#ifndef SL_HDF5_H5_DATASET_H
#define SL_HDF5_H5_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include <hdf5.h>

#include "engine/core/status.h"
#include "nodes/hdf5/h5_index.h"

/* Frames of at most this many rows or columns. */
#define SL_H5_MAX_FRAME_DIM 65536

/* One 3-D dataset holding a run of consecutive frames of the acquisition. */
typedef struct sl_h5_dataset {
  char *link;   /* where it was found (link path in the opened file), for messages */
  char *object; /* its path in its own file (the link's target), NULL = link */
  int file;     /* index into sl_h5_index.files */
  hid_t fid, did;
  int64_t n, h, w; /* frames, rows, cols */
  int elem_size;
  bool is_signed;
  bool chunked;
  int64_t frames_per_chunk; /* chunked only */
  int filter;               /* SL_H5_FILTER_* */
  unsigned cd[8];           /* the filter's cd_values */
  int n_cd;
  uint64_t file_size;
} sl_h5_dataset;

/* True when every component of the absolute `path` exists in `loc`
 * (H5Lexists fails on a missing intermediate group). Does not follow the
 * last component when it is a link. */
bool sl_h5_path_exists(hid_t loc, const char *path);
/* "uint16", "float32", "compound (12 bytes)", ... for messages. */
void sl_h5_type_name(hid_t type, char *buf, size_t n);
/* Opens an HDF5 file read-only; a missing file is SL_ERR_IO, a file HDF5
 * cannot read SL_ERR_FORMAT with HDF5's own reason. */
sl_code sl_h5_file_open(const char *path, hid_t *fid, sl_error *err);
/* Rewrites err's message as prefix + message + suffix (truncated to fit),
 * to say where a lower-level error happened. */
void sl_h5_error_wrap(sl_error *err, const char *prefix, const char *suffix);

/* Fills shape, dtype, layout and filter of `d` (its did open) from `file`,
 * refusing what sluice cannot read (rank, dtype, chunk shape, filters). */
sl_code sl_h5_dataset_inspect(sl_h5_dataset *d, const char *file, sl_error *err);
/* The scan's rows and cols from attribute `scan_shape` of `d` (its did
 * open; two positive integers: what sluice's results.h5 gives an
 * acquisition's stored chunks, pipelines/repack.yaml): true when it is
 * there and valid. */
bool sl_h5_dataset_scan_shape(const sl_h5_dataset *d, int64_t *rows, int64_t *cols);
/* The optional Dectris attributes image_nr_low / image_nr_high (1-based,
 * inclusive) must agree with the frames the dataset holds. */
sl_code sl_h5_dataset_check_image_nr(const sl_h5_dataset *d, const char *file, int64_t first_frame,
                                     sl_error *err);

/* The stored chunks of `d` (its frames starting at global frame
 * first_frame) into out[0 .. its chunk count), checking each against the
 * file (h5_chunk_list.c). ix->files and ix->frame_bytes must be set. */
sl_code sl_h5_dataset_list_chunks(const sl_h5_index *ix, const sl_h5_dataset *d, int64_t first_frame,
                                  sl_h5_chunk *out, sl_error *err);
/* Scratch bytes listing a dataset of `chunks` stored chunks allocates
 * (freed when it returns). */
uint64_t sl_h5_dataset_list_scratch_bytes(int64_t chunks);

/* Reads /entry/instrument/detector/... of `fid` into ix->meta and checks the
 * frame count against nimages x ntrigger (h5_detector_meta.c). */
sl_code sl_h5_detector_meta_read(sl_h5_index *ix, hid_t fid, const char *file, sl_error *err);

#endif
