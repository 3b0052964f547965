/* virtual_image on CUDA. See virtual_image.h; the table and the masked sums
 * are shared with virtual_detectors (shaders/cuda/common/pixel_classes.cuh). */
#include <string.h>

#include "shaders/cuda/common/frame_units.cuh"
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

static sl_cuda_class_request class_request(const sl_cuda_virtual_image_params *p, const sl_kernel_args *a) {
  sl_cuda_class_request r;
  memset(&r, 0, sizeof r);
  r.height = p->frames.height;
  r.width = p->frames.width;
  r.all_units = 0;
  r.fill = fill_from_spans;
  r.fill_ctx = p;
  r.fill_missing = "virtual_image: spans not built";
  r.use_disk = p->use_disk;
  r.disk = (const double *)a->in[1];
  r.geometry.mode = SL_CUDA_CLASSES_IMAGE;
  r.geometry.ring_kind = p->kind;
  r.geometry.in_radii = p->ring_in_radii;
  r.geometry.inner_p = p->inner;
  r.geometry.outer_p = p->outer;
  return r;
}

extern "C" sl_code sl_cuda_virtual_image(const sl_cuda_virtual_image_params *p, sl_kernel_args *a) {
  sl_cuda_pixel_classes *s = NULL;
  sl_code rc = sl_cuda_pixel_classes_get(p->device_state, a, k_node, &s);
  if (rc) return rc;
  if ((rc = sl_cuda_pixel_classes_check(a, s, &p->frames, false, k_node))) return rc;
  int v = frame_unit_width(a->in[0], p->frames.width, sl_dtype_size(p->frames.dtype));
  const sl_cuda_class_request r = class_request(p, a);
  if ((rc = sl_cuda_pixel_classes_build(a, s, &r, v, k_node))) return rc;
  if ((rc = sl_cuda_masked_sums(a, s, &p->frames, SL_CUDA_CLASSES_IMAGE, v))) return rc;
  return sl_cuda_error_mirror_pull(&s->err, a, k_node);
}

extern "C" sl_code sl_cuda_virtual_image_finalize(const sl_cuda_virtual_image_params *p, sl_kernel_args *a) {
  return sl_cuda_pixel_classes_finalize(p->device_state, a, &p->frames, k_node);
}
