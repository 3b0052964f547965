/* A CPU cost profile for a thread count that was never calibrated, derived
 * from the profiles the same CPU was calibrated with at other counts.
 *
 * calibrate measures a profile per thread count (cost_profile.h), and a run
 * at another count (`--threads 1` after a calibration at the default, a
 * container with a smaller CPU quota) used to fall back on the built-in
 * guesses: on the dev VM stem_products at 1 thread was estimated at 1.87 s
 * against 0.32 s measured. A node type's seconds per unit of work at t
 * threads is taken as a + b / t (a part that does not spread over the
 * workers, and one that does):
 *   - with profiles at two other counts, a and b are fitted through both
 *     (the two nearest to t, in ratio), clamped to a, b >= 0;
 *   - with one, the work spreads evenly: b / t, a = 0.
 * A node type whose CPU kernel runs on one thread (sl_node_desc.cpu_serial:
 * a fit, a file written, a source reading on its own threads) keeps the
 * nearest profile's rate. What does not grow with the work (per call, per
 * batch, per run, first calls, memory beyond the plan) is the nearest
 * profile's. The copy and read bandwidths scale down with fewer threads
 * and are never extrapolated up. Only profiles of the same backend and device are used (on the CPU
 * the device string names the CPUs the process may use, whatever the
 * workers: the same machine, or the same quota). */
#ifndef SL_COST_THREADS_H
#define SL_COST_THREADS_H

#include <stdbool.h>

#include "engine/graph/node.h"
#include "engine/plan/cost_profile.h"

/* The profile for `threads` from `near` (the nearest calibrated count) and
 * optionally `far` (another; NULL: none), as above; `reg` tells the serial
 * node types (NULL: none known). out->source is near's file,
 * out->derived_from their counts. */
void sl_cost_profile_derive(const sl_cost_profile *near, const sl_cost_profile *far, int threads,
                            const sl_node_registry *reg, sl_cost_profile *out);

/* Looks in folder `dir` for cached CPU profiles of caps' device at other
 * thread counts and derives the one for caps' count from the two nearest
 * (in ratio) that load. False when there is none (out untouched). */
bool sl_cost_profile_derived_for(const char *dir, const sl_backend_caps *caps, const sl_node_registry *reg,
                                 sl_cost_profile *out);

#endif
