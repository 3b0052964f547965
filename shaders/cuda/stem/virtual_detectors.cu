/* virtual_detectors on CUDA. See virtual_detectors.h; the table and the
 * masked sums are shared with virtual_image (common/pixel_classes.cuh),
 * which also sums the moments when they are read, in the same sweep. */
#include <string.h>

#include "shaders/cuda/common/pixel_classes.cuh"
#include "shaders/cuda/stem/virtual_detectors.h"

static const char k_node[] = "virtual_detectors";

/* The host runs, in pixel order. */
static bool fill_from_runs(const void *ctx, uint8_t *classes) {
  const sl_cuda_virtual_detectors_params *p = (const sl_cuda_virtual_detectors_params *)ctx;
  if (!p->runs) return false;
  int64_t off = 0;
  for (int64_t k = 0; k < p->n_runs; k++) {
    memset(classes + off, (int)p->runs[2 * k + 1], p->runs[2 * k]);
    off += p->runs[2 * k];
  }
  return true;
}

extern "C" int64_t sl_cuda_virtual_detectors_table_bytes(const sl_cuda_frame_shape *frames, bool use_disk) {
  return sl_cuda_pixel_classes_table_bytes(frames->height, frames->width, use_disk);
}

extern "C" sl_code sl_cuda_virtual_detectors(const sl_cuda_virtual_detectors_params *p, sl_kernel_args *a) {
  sl_cuda_class_request r = sl_cuda_class_request_make(SL_CUDA_CLASSES_DETECTORS, a, p->use_disk, p->ring_in_radii,
                                                        p->inner, p->outer);
  r.host = {fill_from_runs, p, "virtual_detectors: runs not built"};
  r.moments = p->moments_read; /* one read of each frame for every output */
  sl_cuda_pixel_classes *s = NULL;
  sl_code rc = sl_cuda_pixel_class_sums(p->device_state, a, &p->frames, &r, k_node, &s);
  if (rc) return rc;
  return sl_cuda_error_mirror_pull(&s->err, a, k_node);
}

extern "C" sl_code sl_cuda_virtual_detectors_finalize(const sl_cuda_virtual_detectors_params *p,
                                                      sl_kernel_args *a) {
  return sl_cuda_pixel_classes_finalize(p->device_state, a, &p->frames, k_node);
}
