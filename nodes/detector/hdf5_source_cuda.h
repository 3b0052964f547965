/* hdf5_source's CUDA kernel (hdf5_source_cuda.c): the node's windows in the
 * backend's pinned host memory, sent to the device with the backend's
 * asynchronous copies (no host staging, no host copy of the bytes). By
 * default an uploader thread sends the next chunks into two device prefetch
 * buffers (pieces of the node's device table) on the backend's copy queue while the compute queue runs the
 * current chunk (the call copies its chunk to the output slot
 * device-to-device); SLUICE_SOURCE_OVERLAP=0 sends each chunk to its slot on
 * the compute queue when the call runs. Only backend.h is used: no CUDA
 * object is held. */
#ifndef SL_DETECTOR_HDF5_SOURCE_CUDA_H
#define SL_DETECTOR_HDF5_SOURCE_CUDA_H

#include "engine/graph/node.h"

/* Bytes of the node's device table on a device backend (cost().device_state_bytes)
 * for calls of up to `positions` positions of the output `d`: the two
 * prefetch buffers of the overlapped path, each one output slot. */
int64_t sl_hdf5_source_cuda_table_bytes(const sl_tensor_desc *d, int64_t positions);

#ifdef SLUICE_HAVE_CUDA
sl_code sl_hdf5_source_cuda(sl_kernel_args *a);
#endif

#endif
