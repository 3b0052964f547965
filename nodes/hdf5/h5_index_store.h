/* Chunk indexes kept between processes, in the user's cache
 * ($XDG_CACHE_HOME/sluice/index, else ~/.cache/sluice/index; the setting
 * index_store turns it off). Describing and listing an acquisition opens
 * every data file (0.1-0.2 s for 263 files); a stored index is one read.
 *
 * An entry is used only while the master file and every data file it lists
 * are what they were (device, inode, size and modification time to the
 * nanosecond), for the same path and dataset; anything else (another
 * version, a short or corrupt file) is ignored and the acquisition listed
 * again. Entries are written to a temporary name and renamed, so a reader
 * never sees half of one; a failure to write is ignored (the run goes on). */
#ifndef SL_HDF5_H5_INDEX_STORE_H
#define SL_HDF5_H5_INDEX_STORE_H

#include <stdbool.h>

#include "nodes/hdf5/h5_index.h"

/* A listed index of `path` (dataset: NULL for the default) from the store,
 * or NULL. */
sl_h5_index *sl_h5_index_store_load(const char *path, const char *dataset);
/* Stores a listed index (nothing when the setting is off or the index is
 * not listed). */
void sl_h5_index_store_save(const char *path, const char *dataset, const sl_h5_index *ix);
/* Parses an entry's bytes (a fuzz target drives this): the index when the
 * checksum holds, the header names cwd, path and dataset, every field is in
 * bounds and same_file says each file (the master and every data file) is
 * the one recorded (`identity`: the entry's opaque bytes for it); else NULL. */
typedef bool (*sl_h5_store_same_file)(const char *path, const void *identity, size_t identity_bytes);
sl_h5_index *sl_h5_index_store_parse(const void *bytes, size_t n, const char *cwd, const char *path,
                                     const char *dataset, sl_h5_store_same_file same_file);
/* The store's file for path and dataset: false without a cache folder. */
bool sl_h5_index_store_path(const char *path, const char *dataset, char *buf, size_t len);

#endif
