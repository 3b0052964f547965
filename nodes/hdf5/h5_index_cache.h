/* A process-wide cache of chunk indexes, so that planning (infer) and running
 * (prepare, kernels) of every node reading one acquisition list its chunks
 * once. Entries are keyed by path, dataset and the master file's identity
 * (device, inode, size, modification time); a changed file is indexed again. */
#ifndef SL_HDF5_H5_INDEX_CACHE_H
#define SL_HDF5_H5_INDEX_CACHE_H

#include "nodes/hdf5/h5_index.h"

/* A shared index; valid until the matching sl_h5_index_put. */
sl_code sl_h5_index_get(const char *path, const char *dataset, const sl_h5_index **out, sl_error *err);
void sl_h5_index_put(const sl_h5_index *ix);

#endif
