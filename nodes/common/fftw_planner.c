/* One lock around FFTW's planner (see fftw_planner.h), through its planner
 * hooks: what fftw_make_planner_thread_safe does, without linking FFTW's
 * threads library for it. */
#include "nodes/common/fftw_planner.h"

#include <fftw3.h>
#include <pthread.h>

/* Exported by libfftw3 since 3.3.5 (its threads library installs its lock
 * through it) but left out of fftw3.h. */
void fftw_set_planner_hooks(void (*before)(void), void (*after)(void));

static pthread_mutex_t planner = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t hooks_set = PTHREAD_ONCE_INIT;

static void planner_lock(void) { pthread_mutex_lock(&planner); }
static void planner_unlock(void) { pthread_mutex_unlock(&planner); }
static void set_hooks(void) { fftw_set_planner_hooks(planner_lock, planner_unlock); }

void sl_fftw_planner_thread_safe(void) { pthread_once(&hooks_set, set_hooks); }
