/* hdf5_source's CUDA kernel (hdf5_source_cuda.c): the node's windows in the
 * backend's pinned host memory, sent to the device by cudaMemcpyAsync without
 * host staging or a host copy of the bytes. By default an uploader thread
 * sends the next chunks into two device prefetch buffers on the backend's
 * copy stream while the main stream runs the current chunk (the call copies
 * its chunk to the output slot device-to-device); SLUICE_SOURCE_OVERLAP=0
 * sends each chunk to its slot on the main stream when the call runs. */
#ifndef SL_DETECTOR_HDF5_SOURCE_CUDA_H
#define SL_DETECTOR_HDF5_SOURCE_CUDA_H

#include "engine/graph/node.h"

#ifdef SLUICE_HAVE_CUDA
sl_code sl_hdf5_source_cuda(sl_kernel_args *a);
#endif

#endif
