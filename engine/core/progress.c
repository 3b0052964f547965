#include "engine/core/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "engine/core/util.h"

void sl_progress_begin(sl_progress *p, int64_t total, const char *unit, bool enabled) {
  p->enabled = enabled && total > 1 && isatty(STDERR_FILENO);
  p->total = total;
  p->unit = unit;
  p->start = sl_now();
  p->last_draw = 0;
  p->staged = false;
}

void sl_progress_update(sl_progress *p, int64_t done) {
  if (!p->enabled) return;
  double now = sl_now();
  if (done < p->total && now - p->last_draw < 0.1) return; /* at most 10 redraws/s */
  p->last_draw = now;
  double elapsed = now - p->start;
  double rate = elapsed > 0 ? (double)done / elapsed : 0;
  double eta = rate > 0 ? (double)(p->total - done) / rate : 0;
  int width = 30, fill = p->total ? (int)((double)width * (double)done / (double)p->total) : 0;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %3d%% %lld/%lld %s  %.1f %s/s  ETA %.0fs ", bar,
          (int)(100.0 * (double)done / (double)(p->total ? p->total : 1)), (long long)done,
          (long long)p->total, p->unit, rate, p->unit, eta);
  fflush(stderr);
}

void sl_progress_stage(sl_progress *p, const char *stage) {
  if (!p->enabled) return;
  sl_progress_update(p, p->total);
  fprintf(stderr, "\r%-100.100s", "");
  fprintf(stderr, "\r%lld %s streamed in %.1f s; %s ...", (long long)p->total, p->unit,
          sl_now() - p->start, stage);
  fflush(stderr);
  p->staged = true;
}

void sl_progress_end(sl_progress *p) {
  if (!p->enabled) return;
  if (!p->staged) sl_progress_update(p, p->total);
  fputc('\n', stderr);
}

void sl_progress_shared_init(sl_progress_shared *s, bool enabled) {
  pthread_mutex_init(&s->mu, NULL);
  s->wanted = enabled;
  s->begun = false;
  s->done = 0;
  s->bar.enabled = false;
}

void sl_progress_shared_begin(sl_progress_shared *s, int64_t total, const char *unit) {
  pthread_mutex_lock(&s->mu);
  if (!s->begun) sl_progress_begin(&s->bar, total, unit, s->wanted);
  s->begun = true;
  pthread_mutex_unlock(&s->mu);
}

void sl_progress_shared_add(sl_progress_shared *s, int64_t count) {
  pthread_mutex_lock(&s->mu);
  s->done += count;
  sl_progress_update(&s->bar, s->done);
  pthread_mutex_unlock(&s->mu);
}

void sl_progress_shared_stage(sl_progress_shared *s, const char *stage) {
  pthread_mutex_lock(&s->mu);
  sl_progress_stage(&s->bar, stage);
  pthread_mutex_unlock(&s->mu);
}

void sl_progress_shared_end(sl_progress_shared *s) {
  if (s->begun) sl_progress_end(&s->bar);
  pthread_mutex_destroy(&s->mu);
}
