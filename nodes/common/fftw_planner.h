/* FFTW's planner (plans made and destroyed) is not thread-safe; its
 * execution is. Runs of one process may plan at once (the shards of a
 * split run, engine/exec/shard_local.h, each on a thread of its own), so
 * every node that makes or destroys FFTW plans calls this first: it makes
 * FFTW hold one process-wide lock around its planner, once. */
#ifndef SL_FFTW_PLANNER_H
#define SL_FFTW_PLANNER_H

void sl_fftw_planner_thread_safe(void);

#endif
