/* Per-pixel classes of virtual_image and virtual_detectors (.cu files only):
 * an H*W u8 table in device memory says which outputs a pixel counts for
 * (bit 0: the image / BF; bit 1: ADF), and a compacted list of the units
 * (frame_units.cuh) that hold at least one selected pixel lets a small mask
 * (BF disk) read only its rows' 16-byte sectors instead of the whole frame.
 *
 * The table comes from the host (the node's prepare built the selection) or,
 * with a `disk` input, is computed on the device from the disk of each call
 * (as the CPU computes it: d2 = dr*dr + dc*dc in double, radii scaled by
 * `units`), checked there (bad values go to the device error word), and kept
 * while the disk does not change.
 *
 * The masked sums run one warp per frame: MODE 0 (virtual_image) out0 = the
 * sum of class-bit-0 pixels; MODE 1 (virtual_detectors) out0 = BF (bit 0),
 * out1 = ADF (bit 1), out2 = DF = total - BF (the complement of BF, exact);
 * with the request's `moments`, also S, Sr, Sc (frame_moments.cuh's sums)
 * into out3..out5 from the same read of the frame. */
#ifndef SL_CUDA_PIXEL_CLASSES_CUH
#define SL_CUDA_PIXEL_CLASSES_CUH

#include <stdint.h>

#include "shaders/cuda/common/device_error.cuh"
#include "shaders/cuda/common/launcher.h"

enum sl_cuda_class_mode { SL_CUDA_CLASSES_IMAGE = 0, SL_CUDA_CLASSES_DETECTORS = 1 };

/* The disk geometry of the device-built table; also the device record of the
 * disk it was last built from (disk, built_v). */
struct sl_cuda_disk_geometry {
  int mode; /* sl_cuda_class_mode */
  int ring_kind; /* image mode: sl_cuda_virtual_image_kind (shaders/cuda/stem/virtual_image.h) */
  int in_radii;  /* inner/outer are in disk radii (else pixels) */
  int h, w;
  double inner_p, outer_p; /* as given */
  /* device record */
  double disk[3];
  int built_v;
};

/* A node's device state (in its sl_cuda_state_holder): the pieces of its
 * device table (pixel_classes.cu, classes_layout) and what the host knows. */
struct sl_cuda_pixel_classes {
  uint8_t *cls;      /* H*W class bytes */
  uint32_t *units;   /* compacted unit list */
  uint32_t *n_units; /* device: units in the list (or all units) */
  void *geom;        /* device: sl_cuda_disk_geometry record (disk input only) */
  bool uploaded;     /* the host's table went up */
  int built_v;       /* unit width the list was built for (0 = none) */
  sl_cuda_error_mirror err;
};

/* Bytes of the device table of a node with h x w frames (cost().device_state_bytes):
 * the error word, the class table and its unit list, and with a `disk`
 * input the geometry record. */
extern "C" int64_t sl_cuda_pixel_classes_table_bytes(int64_t height, int64_t width, bool use_disk);

/* Fills host_classes (npix bytes, zeroed) from the node's host-built
 * selection; false when it was not built. */
typedef bool (*sl_cuda_class_fill)(const void *ctx, uint8_t *host_classes);

/* The table from the host: fill(ctx, ...), or the error `missing` when it
 * returns false. */
struct sl_cuda_class_host_fill {
  sl_cuda_class_fill fill;
  const void *ctx;
  const char *missing;
};

/* Where a call's class table comes from. */
struct sl_cuda_class_request {
  int all_units; /* list every unit (virtual_detectors: DF reads every pixel) */
  sl_cuda_class_host_fill host; /* from the host (built once) */
  /* or from the `disk` input (device pointer: centre row, col, radius) */
  bool use_disk;
  const double *disk;
  sl_cuda_disk_geometry geometry; /* its mode also selects the sums */
  bool moments; /* detectors: S, Sr, Sc into out[3..5] too */
};

/* A request of `mode` for the disk input a->in[1] (used when use_disk) and
 * the ring inner..outer (in disk radii when in_radii, else pixels). */
sl_cuda_class_request sl_cuda_class_request_make(int mode, const sl_kernel_args *a, bool use_disk, bool in_radii,
                                                 double inner, double outer);

/* One call's class table and masked sums: the node's state (created on its
 * first call over its device table, with its error word; returned in *out), an error an earlier
 * call recorded, the table for this call's unit width (built on the first
 * call, refreshed for a new width or disk), then the sums of the request's
 * mode over a->pos_count frames of a->in[0] into a->out[0] (and out[1],
 * out[2] for detectors; out[3..5] with `moments`). The caller pulls the error word after its kernels
 * (sl_cuda_error_mirror_pull). */
sl_code sl_cuda_pixel_class_sums(sl_cuda_state_holder holder, sl_kernel_args *a, const sl_cuda_frame_shape *f,
                                 const sl_cuda_class_request *r, const char *node, sl_cuda_pixel_classes **out);
/* The finalize of both nodes: the last check, after a wait. */
sl_code sl_cuda_pixel_classes_finalize(sl_cuda_state_holder holder, sl_kernel_args *a,
                                       const sl_cuda_frame_shape *f, const char *node);

#endif
