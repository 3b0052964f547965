/* The output directory of `sluice run`: checked and reserved before any data
 * is read, written under a temporary name, published by one rename, and
 * never replacing what sluice did not write.
 *
 * Every directory sluice publishes holds a marker file (SL_OUTPUT_MARKER);
 * --force replaces an existing directory only when it holds one. */
#ifndef SL_RUN_OUTPUT_H
#define SL_RUN_OUTPUT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/exec/report.h"
#include "engine/exec/sinks.h"

#define SL_OUTPUT_MARKER ".sluice-output"

typedef struct sl_run_output {
  char dir[4096];  /* where the results go */
  char tmp[4200];  /* DIR.tmp-PID while they are written; "" once gone */
  bool force;
  /* What the run's writer nodes write into: tmp, and results.h5 in it,
   * open from before the run until the outputs are written. */
  sl_output_target target;
} sl_run_output;

/* Before any data is read: refuses an existing `dir` unless force and it is a
 * sluice output; creates the parents and the temporary directory (so an
 * unwritable or missing location fails now, not after the computation), and
 * checks that the file system has room for about `expected_bytes`. */
sl_code sl_run_output_reserve(sl_run_output *o, const char *dir, bool force, int64_t expected_bytes,
                              sl_error *err);

/* Opens results.h5 in o->tmp with the run's file attributes (after
 * reserve, before the run), for the run's writer nodes (o->target): they
 * write streamed outputs into it as their chunks complete, whole ones when
 * they are made, and the PNGs into o->tmp. Refuses an output name that
 * cannot be a file name. */
sl_code sl_run_output_open_results(sl_run_output *o, const sl_plan *plan, const char *started_at,
                                   sl_error *err);

/* After the run: finishes results.h5 (every dataset's attributes, known
 * only now), writes report.json and the marker into o->tmp.
 * Stops with SL_ERR_INTERRUPTED between files when *cancel is set. */
sl_code sl_run_output_write(sl_run_output *o, const sl_run_info *info,
                            const volatile sig_atomic_t *cancel, sl_error *err);

/* Renames o->tmp to o->dir; with force a previous sluice output is moved
 * aside first and removed only once the new one is in place. */
sl_code sl_run_output_publish(sl_run_output *o, sl_error *err);

/* Removes o->tmp and everything in it (only what this run created). */
void sl_run_output_abandon(sl_run_output *o);

#endif
