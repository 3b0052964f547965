/* hdf5_source's CUDA kernel (hdf5_source_cuda.c): the node's windows in the
 * backend's pinned host memory, sent to the device slot by cudaMemcpyAsync on
 * the backend's stream, without host staging or a host copy of the bytes. */
#ifndef SL_DETECTOR_HDF5_SOURCE_CUDA_H
#define SL_DETECTOR_HDF5_SOURCE_CUDA_H

#include "../../engine/graph/node.h"

#ifdef SLUICE_HAVE_CUDA
sl_code sl_hdf5_source_cuda(sl_kernel_args *a);
#endif

#endif
