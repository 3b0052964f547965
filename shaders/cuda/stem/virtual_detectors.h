/* virtual_detectors on CUDA (virtual_detectors.cu): BF, ADF and DF of each
 * frame in one sweep (u64, equal to the CPU bit for bit), and the moments
 * s, sr, sc when those outputs are read. The pixel classes are the node's
 * host-built runs, or (with a `disk` input) computed on the device from the
 * disk of each call; bad disk values are reported by a later call or by
 * finalize, with the CPU's message. */
#ifndef SL_CUDA_VIRTUAL_DETECTORS_H
#define SL_CUDA_VIRTUAL_DETECTORS_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_cuda_virtual_detectors_params {
  sl_cuda_frame_shape frames; /* input 0 */
  /* Without a disk input: the pixel classes in pixel order as {length,
   * class} pairs (2 * n_runs values; class bit 0 BF, bit 1 ADF; host memory,
   * read on the first call). NULL means the node did not build them. */
  const uint32_t *runs;
  int64_t n_runs;
  /* With a disk input (a->in[1]: f64 centre row, col, radius on the device). */
  bool use_disk;
  bool ring_in_radii; /* inner/outer (the ADF ring) in disk radii, else pixels */
  double inner, outer;
  bool moments_read; /* outputs 3..5 (s, sr, sc) are read: compute them */
  sl_cuda_state_holder device_state;
} sl_cuda_virtual_detectors_params;

/* Bytes of the node's device table (cost().device_state_bytes): the class
 * table, its unit list and the error word (shaders/cuda/common/pixel_classes.cuh),
 * with a `disk` input also the geometry record. */
int64_t sl_cuda_virtual_detectors_table_bytes(const sl_cuda_frame_shape *frames, bool use_disk);

/* out[0] BF, out[1] ADF, out[2] DF, and (moments_read) out[3..5] S, Sr, Sc. */
sl_code sl_cuda_virtual_detectors(const sl_cuda_virtual_detectors_params *p, sl_kernel_args *a);
/* After the last chunk: waits once and reports a recorded disk error. */
sl_code sl_cuda_virtual_detectors_finalize(const sl_cuda_virtual_detectors_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
