/* What every CUDA launcher header shares (plain C, no CUDA types): node
 * files include the launcher headers of their own family without CUDA
 * headers, fill a plain parameter struct and call the launcher.
 *
 * A launcher takes its node's description as a plain struct (dims, dtypes,
 * flags, host tables) and everything else from sl_kernel_args: the data
 * pointers, the chunk, and in a->dev the backend's queue, limits and the
 * sync / launch-check services. It never sees a graph node. */
#ifndef SL_CUDA_LAUNCHER_H
#define SL_CUDA_LAUNCHER_H

#include <stdbool.h>
#include <stdint.h>

/* The core headers declare C functions (sl_fail, sl_dtype_size ...) without
 * C++ guards of their own: the .cu files see them through this block. */
#ifdef __cplusplus
extern "C" {
#endif

#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"

/* For node descriptors: the CUDA launcher when the backend is built in. */
#ifndef SL_CUDA_KERNEL
#ifdef SLUICE_HAVE_CUDA
#define SL_CUDA_KERNEL(fn) fn
#else
#define SL_CUDA_KERNEL(fn) NULL
#endif
#endif

/* Where a launcher keeps its host-side state between the calls of one run
 * (made on its first call: pointers into the node's device table,
 * a->device_table, what it built there, e.g. a pixel class table). The
 * caller owns the slot: when it takes the device table back (the executor,
 * at the end of the run) it calls (*release)(*state) if both are set. A
 * launcher stores its state and release function there on its first call. */
typedef struct sl_cuda_state_holder {
  void **state;
  void (**release)(void *state);
} sl_cuda_state_holder;

/* Detector frames: the item of a streamed frames port. */
typedef struct sl_cuda_frame_shape {
  sl_dtype dtype; /* SL_U8, SL_U16 or SL_U32 */
  int64_t height, width;
} sl_cuda_frame_shape;

#ifdef __cplusplus
}
#endif

#endif
