/* com on CUDA (com.cu): the centre of mass Sr/S, Sc/S of each frame (or of
 * moments another node computed), then at finalize the descan removal (mean
 * or plane) over the whole scan, with the CPU's two-level sums and
 * operations: identical doubles. */
#ifndef SL_CUDA_COM_H
#define SL_CUDA_COM_H

#include "shaders/cuda/common/launcher.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The node's `descan` param. */
typedef enum sl_cuda_com_descan { SL_CUDA_COM_DESCAN_NONE = 0, SL_CUDA_COM_DESCAN_PLANE = 1 } sl_cuda_com_descan;

typedef struct sl_cuda_com_params {
  /* Input 0 (frames) is connected; else inputs 1..3 carry S, Sr, Sc (u64). */
  bool from_frames;
  sl_cuda_frame_shape frames;
  int64_t positions; /* of the whole scan */
  int64_t scan_cols; /* length of the last scan axis */
  int descan;        /* sl_cuda_com_descan */
  sl_cuda_state_holder device_state;
} sl_cuda_com_params;

/* Bytes of the node's device table (cost().device_state_bytes) for a scan of
 * `positions`: the descan sums of finalize. */
int64_t sl_cuda_com_table_bytes(int64_t positions);

/* out[0] com_row, out[1] com_col (whole f64 [scan], a declared concat: out[]
 * points at this chunk's positions), NaN where S = 0. */
sl_code sl_cuda_com(const sl_cuda_com_params *p, sl_kernel_args *a);
/* After the last chunk: removes the descan over the positions that are not
 * NaN, in place, and sets the NaN ones (S = 0) to 0. */
sl_code sl_cuda_com_finalize(const sl_cuda_com_params *p, sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
