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

#define SL_OUTPUT_MARKER ".sluice-output"

typedef struct sl_run_output {
  char dir[4096];  /* where the results go */
  char tmp[4200];  /* DIR.tmp-PID while they are written; "" once gone */
  bool force;
} sl_run_output;

/* Before any data is read: refuses an existing `dir` unless force and it is a
 * sluice output; creates the parents and the temporary directory (so an
 * unwritable or missing location fails now, not after the computation), and
 * checks that the file system has room for about `expected_bytes`. */
sl_code sl_run_output_reserve(sl_run_output *o, const char *dir, bool force, int64_t expected_bytes,
                              sl_error *err);

/* Writes results.h5, the PNGs, report.json and the marker into o->tmp.
 * Stops with SL_ERR_INTERRUPTED between files when *cancel is set. */
sl_code sl_run_output_write(sl_run_output *o, const sl_run_info *info,
                            const volatile sig_atomic_t *cancel, sl_error *err);

/* Renames o->tmp to o->dir; with force a previous sluice output is moved
 * aside first and removed only once the new one is in place. */
sl_code sl_run_output_publish(sl_run_output *o, sl_error *err);

/* Removes o->tmp and everything in it (only what this run created). */
void sl_run_output_abandon(sl_run_output *o);

#endif
