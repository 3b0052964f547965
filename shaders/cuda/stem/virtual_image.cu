/* virtual_image on CUDA. See virtual_image.h; the table and the masked sums
 * are shared with virtual_detectors (shaders/cuda/common/pixel_classes.cuh). */
#include <string.h>

#include "shaders/cuda/common/pixel_classes.cuh"
#include "shaders/cuda/stem/virtual_image.h"

static const char k_node[] = "virtual_image";

/* Class 1 on the host spans. */
static bool fill_from_spans(const void *ctx, uint8_t *classes) {
  const sl_cuda_virtual_image_params *p = (const sl_cuda_virtual_image_params *)ctx;
  if (!p->spans) return false;
  for (int64_t k = 0; k < p->n_spans; k++) memset(classes + p->spans[2 * k], 1, (size_t)p->spans[2 * k + 1]);
  return true;
}

extern "C" int64_t sl_cuda_virtual_image_table_bytes(const sl_cuda_frame_shape *frames, bool use_disk) {
  return sl_cuda_pixel_classes_table_bytes(frames->height, frames->width, use_disk);
}

extern "C" sl_code sl_cuda_virtual_image(const sl_cuda_virtual_image_params *p, sl_kernel_args *a) {
  sl_cuda_class_request r = sl_cuda_class_request_make(SL_CUDA_CLASSES_IMAGE, a, p->use_disk, p->ring_in_radii,
                                                        p->inner, p->outer);
  r.geometry.ring_kind = p->kind;
  r.host = {fill_from_spans, p, "virtual_image: spans not built"};
  sl_cuda_pixel_classes *s = NULL;
  sl_code rc = sl_cuda_pixel_class_sums(p->device_state, a, &p->frames, &r, k_node, &s);
  if (rc) return rc;
  return sl_cuda_error_mirror_pull(&s->err, a, k_node);
}

extern "C" sl_code sl_cuda_virtual_image_finalize(const sl_cuda_virtual_image_params *p, sl_kernel_args *a) {
  return sl_cuda_pixel_classes_finalize(p->device_state, a, &p->frames, k_node);
}
