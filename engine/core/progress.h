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
} sl_progress;

/* enabled: the caller's wish (not --quiet); the bar also needs a terminal. */
void sl_progress_begin(sl_progress *p, int64_t total, const char *unit, bool enabled);
void sl_progress_update(sl_progress *p, int64_t done);
void sl_progress_end(sl_progress *p);

#endif
