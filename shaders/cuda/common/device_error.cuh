/* The device error word of the detector kernels (.cu files only): the first
 * error a kernel found in a run (a `disk` input with bad values, a
 * bin_detector value above max_value), with a pinned host mirror.
 *
 * Kernels record into the word (first error wins). The launcher copies the
 * word to the mirror asynchronously after its kernels; the next call (the
 * executor has waited for the previous batch) and the node's finalize (one
 * queue sync after the last chunk) read the mirror and fail with the CPU's
 * message, naming the chunk/frame/pixel that failed. So an error is
 * reported one chunk late at most, never lost. */
#ifndef SL_CUDA_DEVICE_ERROR_CUH
#define SL_CUDA_DEVICE_ERROR_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "shaders/cuda/common/launcher.h"

/* "No index": the empty value of the word's code and of audit minima. */
#define SL_CUDA_NO_INDEX 0xFFFFFFFFFFFFFFFFull

enum sl_cuda_error_kind {
  SL_CUDA_ERROR_NONE = 0,
  SL_CUDA_ERROR_BIN_AUDIT = 1,   /* a bin_detector value above max_value */
  SL_CUDA_ERROR_DISK_VALUES = 2, /* `disk` centre not finite, or radius <= 0 */
  SL_CUDA_ERROR_DISK_FAR = 3     /* `disk` centre far outside the detector */
};

struct sl_cuda_error_word {
  unsigned long long code;  /* SL_CUDA_NO_INDEX, or the failing index (bin: p * item + pixel) */
  unsigned long long value; /* the failing value */
  long long chunk, pos_start;
  int kind; /* sl_cuda_error_kind */
  int pad;
  double disk[3];
};

struct sl_cuda_error_mirror {
  sl_cuda_error_word *device; /* in the node's device table */
  sl_cuda_error_word *host;   /* pinned host memory (the mirror) */
};

/* Bytes of the word in a device table (sl_table_take). */
#define SL_CUDA_ERROR_WORD_BYTES ((int64_t)sizeof(sl_cuda_error_word))

/* The mirror of `word` (a piece of the node's device table): allocates the
 * pinned host copy and clears the word (on the call's queue). Errors name
 * `node`. */
sl_code sl_cuda_error_mirror_create(sl_cuda_error_mirror *m, sl_cuda_error_word *word, sl_kernel_args *a,
                                    const char *node);
/* Frees the host copy (the word goes with the table). */
void sl_cuda_error_mirror_free(sl_cuda_error_mirror *m);
/* Enqueues the copy of the word to the mirror (after the kernels so far). */
sl_code sl_cuda_error_mirror_pull(sl_cuda_error_mirror *m, sl_kernel_args *a, const char *node);

/* The check of a `disk` input's values (centre_row, centre_col, radius) on
 * the device, as the CPU makes it (nodes/common/disk_geometry.c,
 * sl_disk_values_check) for an h x w detector: SL_CUDA_ERROR_NONE, or
 * SL_CUDA_ERROR_DISK_VALUES / SL_CUDA_ERROR_DISK_FAR, recorded into `err`
 * with the values (first error wins). */
static __device__ inline int sl_cuda_disk_check(const double d[3], long long h, long long w,
                                                sl_cuda_error_word *err) {
  int bad = SL_CUDA_ERROR_NONE;
  if (!isfinite(d[0]) || !isfinite(d[1]) || !isfinite(d[2]) || !(d[2] > 0)) bad = SL_CUDA_ERROR_DISK_VALUES;
  else if (d[0] < -(double)h || d[0] > 2.0 * (double)h || d[1] < -(double)w || d[1] > 2.0 * (double)w)
    bad = SL_CUDA_ERROR_DISK_FAR;
  if (bad && err->kind == SL_CUDA_ERROR_NONE) {
    err->kind = bad;
    err->disk[0] = d[0], err->disk[1] = d[1], err->disk[2] = d[2];
  }
  return bad;
}

/* The CPU's failure (SL_ERR_FORMAT, its message) for a disk error the word
 * `e` holds (a host mirror), for an h x w detector; SL_OK when it holds none. */
sl_code sl_cuda_error_disk_fail(const sl_cuda_error_word *e, sl_kernel_args *a, long long h, long long w);

#endif
