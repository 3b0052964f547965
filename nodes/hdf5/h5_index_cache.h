/* A process-wide cache of chunk indexes, so that planning (infer) and running
 * (prepare, kernels) of every node reading one acquisition describe it once
 * and list its chunks at most once. Entries are keyed by path, dataset and
 * the master file's identity (device, inode, size, modification time); a
 * changed file is described again. */
#ifndef SL_HDF5_H5_INDEX_CACHE_H
#define SL_HDF5_H5_INDEX_CACHE_H

#include "nodes/hdf5/h5_index.h"

/* A shared index, described (sl_h5_index_describe) and perhaps already
 * listed: read its chunks only through sl_h5_index_get_listed. Valid until
 * the matching sl_h5_index_put. */
sl_code sl_h5_index_get(const char *path, const char *dataset, const sl_h5_index **out, sl_error *err);
/* The same, listed: its chunks are listed now unless they already were (the
 * time and memory the plan counted: sl_h5_index_host_bytes). */
sl_code sl_h5_index_get_listed(const char *path, const char *dataset, const sl_h5_index **out, sl_error *err);
/* What planning reads: the index described, and listed too when it has at
 * most sl_h5_plan_list_limit() stored chunks (then the plan sizes buffers by
 * the largest real chunk, and errors a chunk shows are found while
 * planning). A larger acquisition is planned from its metadata alone and
 * listed when the run starts, after the budget check: a plan that does not
 * fit is refused before anything proportional to the acquisition is built. */
sl_code sl_h5_index_get_for_plan(const char *path, const char *dataset, const sl_h5_index **out,
                                 sl_error *err);
/* Whether planning lists `ix` (it has at most sl_h5_plan_list_limit() stored
 * chunks): then sizes come from its listing, else from its metadata, even
 * when this process has listed it since (a plan depends on the files and
 * the limit only). */
bool sl_h5_index_planned_from_listing(const sl_h5_index *ix);
void sl_h5_index_put(const sl_h5_index *ix);

/* Stored chunks an acquisition may have to be listed while planning: 2^20
 * (48 MiB of entries, about a second to list). */
#define SL_H5_PLAN_LIST_MAX_CHUNKS ((int64_t)1 << 20)
int64_t sl_h5_plan_list_limit(void);
/* Sets it (tests plan small acquisitions as large ones); < 0 restores the
 * default. */
void sl_h5_set_plan_list_limit(int64_t chunks);

#endif
