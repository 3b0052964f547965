/* Shards of one process: an in-process group whose all-gather is a copy
 * between the members' threads (sl_exec_shard's transport for several
 * devices of one host, and for tests of the merge). Each member runs on a
 * thread of its own; a member that fails aborts the group, so the others'
 * next all-gather fails instead of waiting for it forever. */
#ifndef SL_SHARD_LOCAL_H
#define SL_SHARD_LOCAL_H

#include "engine/exec/shard.h"

typedef struct sl_shard_group sl_shard_group;

/* NULL when out of memory. */
sl_shard_group *sl_shard_group_new(int count);
void sl_shard_group_free(sl_shard_group *g);

/* Member `index`'s view of the group (valid while the group lives). */
sl_exec_shard sl_shard_group_member(sl_shard_group *g, int index);

/* A member failed: every all-gather now fails (those waiting included). */
void sl_shard_group_abort(sl_shard_group *g, int index);

/* The member that aborted first, or -1. */
int sl_shard_group_failed(sl_shard_group *g);

#endif
