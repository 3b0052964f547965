/* How many iterations an until-loop ran the last time the same pipeline ran
 * (same rendered pipeline text: file, --set values and templates), kept in
 * the user's cache (sl_user_cache_dir()/loops) so that the plan estimates
 * such a loop by what it did rather than by its bound (`times`). A loop that
 * never ran is estimated at its bound. Off with the setting loop_history.
 *
 * An entry is a small text file, `loops/<key>.txt`, one "id iterations" line
 * per top-level until-loop; it is replaced whole (written to a temporary
 * file and renamed), and a missing, unreadable or malformed entry counts as
 * none. Nothing here fails a run. */
#ifndef SL_LOOP_HISTORY_H
#define SL_LOOP_HISTORY_H

#include <stdint.h>

#include "engine/graph/graph.h"
#include "engine/pipeline/spec.h"

/* The key of a pipeline run's configuration: FNV-1a 64 of its rendered text
 * (sl_spec_render_string), never 0; 0 when text is NULL. */
uint64_t sl_loop_history_key(const char *rendered_pipeline);
/* The key of spec when graph g has a top-level until-loop, else 0 (nothing
 * to estimate); out of memory rendering the text is an error. */
sl_code sl_loop_history_key_of(const sl_spec *spec, const sl_graph *g, uint64_t *key, sl_error *err);

/* What every top-level until-loop of g ran last time under `key`, read once
 * for the planner (sl_plan_opts.loop_iterations): a malloc'd array indexed
 * like g's nodes, -1 where unknown; NULL when nothing is known (key 0, the
 * setting off, no entry, or no memory: loops are then estimated by their
 * bound). */
int64_t *sl_loop_history_read(uint64_t key, const sl_graph *g);

/* Records the iterations of every top-level until-loop of g after a run
 * (iterations[i] for node i; other nodes ignored). */
void sl_loop_history_put(uint64_t key, const sl_graph *g, const int64_t *iterations);

#endif
