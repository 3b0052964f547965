/* A progress bar with rate and ETA for long runs, drawn on stderr only when it
 * is a terminal and the user did not ask for quiet. */
#ifndef SL_PROGRESS_H
#define SL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_progress {
  bool enabled;
  int64_t total;
  const char *unit;
  double start, last_draw;
  bool staged; /* the line shows a stage, not the bar */
} sl_progress;

/* enabled: the caller's wish (not --quiet); the bar also needs a terminal. */
void sl_progress_begin(sl_progress *p, int64_t total, const char *unit, bool enabled);
void sl_progress_update(sl_progress *p, int64_t done);
/* After the streamed work: says what runs now (e.g. "after the scan: dpc,
 * idpc") on the bar's line, so a bar at 100% never looks stuck. */
void sl_progress_stage(sl_progress *p, const char *stage);
void sl_progress_end(sl_progress *p);

#endif
