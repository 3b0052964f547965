/* A progress bar with rate and ETA for long runs, drawn on stderr only when it
 * is a terminal and the user did not ask for quiet. */
#ifndef SL_PROGRESS_H
#define SL_PROGRESS_H

#include <pthread.h>
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

/* One bar for the shards of a split run (threads of one process): each
 * shard adds the positions it streamed, so the bar counts the whole run's;
 * the first shard to begin begins it (every shard has the same total),
 * stages and updates draw as for one run, and the caller ends it once the
 * shards are done. Every call takes the lock. */
typedef struct sl_progress_shared {
  pthread_mutex_t mu;
  sl_progress bar;
  bool wanted, begun;
  int64_t done;
} sl_progress_shared;

void sl_progress_shared_init(sl_progress_shared *s, bool enabled);
void sl_progress_shared_begin(sl_progress_shared *s, int64_t total, const char *unit);
void sl_progress_shared_add(sl_progress_shared *s, int64_t count);
void sl_progress_shared_stage(sl_progress_shared *s, const char *stage);
/* Ends the bar (if begun) and frees the lock. */
void sl_progress_shared_end(sl_progress_shared *s);

#endif
