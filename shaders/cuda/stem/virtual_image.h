/* virtual_image on CUDA (virtual_image.cu): per frame, the u64 sum of the
 * selected pixels, equal to the CPU kernel's bit for bit. The selection is
 * the node's host-built spans, or (with a `disk` input) computed on the
 * device from the disk of each call as the CPU computes it. Bad disk values
 * are recorded on the device and reported by a later call or by finalize,
 * with the CPU's message. */
#ifndef SL_CUDA_VIRTUAL_IMAGE_H
#define SL_CUDA_VIRTUAL_IMAGE_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a disk-input selection keeps (the node's `kind`, masks excluded). */
typedef enum sl_cuda_virtual_image_kind {
  SL_CUDA_VIRTUAL_IMAGE_BF = 0,     /* inside the disk */
  SL_CUDA_VIRTUAL_IMAGE_ADF = 1,    /* the ring inner..outer */
  SL_CUDA_VIRTUAL_IMAGE_DF = 2,     /* outside the disk */
  SL_CUDA_VIRTUAL_IMAGE_ANNULUS = 3 /* the ring inner..outer */
} sl_cuda_virtual_image_kind;

typedef struct sl_cuda_virtual_image_params {
  sl_cuda_frame_shape frames; /* input 0 */
  /* Without a disk input: the selected pixels, {offset, length} pairs of
   * flat pixel indices (2 * n_spans values; host memory, read on the first
   * call). NULL means the node did not build them (an error). */
  const int64_t *spans;
  int64_t n_spans;
  /* With a disk input (a->in[1]: f64 centre row, col, radius on the device). */
  bool use_disk;
  int kind;           /* sl_cuda_virtual_image_kind */
  bool ring_in_radii; /* inner/outer in disk radii, else pixels */
  double inner, outer;
  sl_cuda_state_holder device_state;
} sl_cuda_virtual_image_params;

/* Bytes of the node's device table (cost().device_state_bytes): the class
 * table, its unit list and the error word (shaders/cuda/common/pixel_classes.cuh),
 * with a `disk` input also the geometry record. */
int64_t sl_cuda_virtual_image_table_bytes(const sl_cuda_frame_shape *frames, bool use_disk);

/* out[0][p] = the sum of the selected pixels of frame p (u64). */
sl_code sl_cuda_virtual_image(const sl_cuda_virtual_image_params *p, sl_kernel_args *a);
/* After the last chunk: waits once and reports a recorded disk error. */
sl_code sl_cuda_virtual_image_finalize(const sl_cuda_virtual_image_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
