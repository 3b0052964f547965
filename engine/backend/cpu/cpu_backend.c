/* The CPU backend: a fixed pool of worker threads. Buffers are host memory.
 * A batch records kernels; commit runs them in order (each kernel spreads its
 * own work over the pool with parallel_for), and wait reports the first
 * failure with its node and chunk. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/cpus.h"
#include "engine/core/util.h"
#include "engine/backend/backend.h"

typedef struct cpu_job {
  sl_range_fn fn;
  void *ctx;
  int64_t n, grain;
  int participants; /* workers [0, participants) take part */
} cpu_job;

/* Participation that follows the machine (default thread count only). The
 * caller measures how long it waits for the other participants after its own
 * work ran out; on a machine where other jobs take the cores, a preempted
 * worker holding a range keeps the whole level waiting for a time slice, and
 * this share grows. Past a threshold one participant fewer takes part; now
 * and then one more is tried again, less often after each try that failed. */
typedef struct cpu_adapt {
  bool on;
  int active;              /* participants now, 1..n_threads */
  double wait_share;       /* moving average of wait / job time */
  int64_t jobs;            /* measured jobs since the last change */
  int64_t probe_after;     /* jobs before trying one more participant */
  bool probing;            /* the last change added one */
} cpu_adapt;

/* One worker's share of a job: [next, end), claimed `grain` at a time. */
typedef struct cpu_share {
  _Atomic int64_t next;
  int64_t end;
  char pad[64 - 2 * sizeof(int64_t)]; /* one cache line per worker */
} cpu_share;

/* Waiting is fair to a shared machine: a worker waiting for the next job and
 * the caller waiting for the last participant spin for a bounded time (the
 * kernels of one level follow each other within microseconds), then block on
 * a condition variable, so that on an oversubscribed core (taskset, a CPU
 * quota, other jobs) the thread that has work gets the core. They do not spin
 * at all when the pool has more threads than the process may use. Worker w owns the w-th contiguous share of [0, n), the same for
 * every job of the same n whatever its grain, so the kernels of successive
 * levels of a chunk find the positions they read in the cache of the core
 * that wrote them; a worker that finishes its share takes ranges from the
 * others' (dynamic balance). The caller works too (as worker 0) and waits
 * until every participant has finished. */
typedef struct cpu_impl {
  int n_threads; /* including the calling thread */
  pthread_t *threads;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  cpu_job job;
  /* Job counter << 16 | participants of that job: a worker that sits a job
   * out decides from this word alone, never from `job`, which the caller may
   * already be rewriting for the next one. */
  _Atomic uint64_t generation;
  cpu_share *share;            /* per worker, n_threads of them */
  _Atomic int outstanding;     /* participants still working on the job */
  /* Job counter << 32 | CLOSED | workers that joined the job. A worker joins
   * before it touches the job; once the caller has run out of ranges it
   * closes the job, and a worker that wakes later sits it out, so the
   * caller waits only for workers that hold ranges, never for one still
   * waking (on the 2-CPU dev VM a wake-up now and then took a 4-5 ms time
   * slice: dpc's 0.1 ms of row loops on a 24 x 20 scan took 5 ms in about
   * one run of twelve). */
  _Atomic uint64_t entry;
  _Atomic int sleepers;
  _Atomic bool caller_waiting; /* the caller sleeps on `done` */
  pthread_cond_t done;
  int spin_limit;              /* pause iterations before blocking (0 = block at once) */
  cpu_adapt adapt;
  _Atomic bool stop;
  /* batch */
  sl_kernel_fn *fns;
  sl_kernel_args **args;
  int n_encoded, cap_encoded;
  sl_code batch_status;
  bool in_batch;
} cpu_impl;

/* About 80-400 microseconds of pause instructions, depending on the CPU.
 * On the 2-core dev VM a sleeping worker took about 60 us to wake (with no
 * spin, mask_correct's 1,170 short jobs took 70-99 ms instead of 1-2). In
 * back-to-back batches of eight virtual_image runs (128 x 128, 2 threads),
 * 2000 pauses let a worker fall asleep between a chunk's levels now and then
 * (runs 0.18-0.27 s, mask_correct 1.2-10.5 ms), 8000 less often (0.17-0.20
 * s, 1.1-2.0 ms); the VM's own spread is larger than either on a busy day.
 * Still bounded: bench_cpu_share.sh gave 1.08 (taskset -c 0) and 1.07 (a
 * busy process on each CPU) against the best --threads. */
enum { SPIN_LIMIT = 8000 };

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* A participant is done with the job; the last one wakes a sleeping caller.
 * (The caller sets caller_waiting before it checks `outstanding` under the
 * lock, so either this sees the flag or the caller sees zero.) */
static void finish_share(cpu_impl *c) {
  if (atomic_fetch_sub(&c->outstanding, 1) == 1 && atomic_load(&c->caller_waiting)) {
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->done);
    pthread_mutex_unlock(&c->lock);
  }
}

/* The caller waits until every participant has finished the job. */
static void wait_for_participants(cpu_impl *c) {
  for (int spins = 0; spins < c->spin_limit; spins++) {
    if (atomic_load_explicit(&c->outstanding, memory_order_acquire) == 0) return;
    cpu_relax();
  }
  pthread_mutex_lock(&c->lock);
  atomic_store(&c->caller_waiting, true);
  while (atomic_load(&c->outstanding) > 0) pthread_cond_wait(&c->done, &c->lock);
  atomic_store(&c->caller_waiting, false);
  pthread_mutex_unlock(&c->lock);
}

#define ENTRY_CLOSED (1ull << 31)

/* A worker's join of job `job` (the generation's counter): false when the
 * caller has closed it or already moved on. */
static bool join_job(cpu_impl *c, uint64_t job) {
  uint64_t e = atomic_load(&c->entry);
  for (;;) {
    if (e >> 32 != (job & 0xFFFFFFFFu) || (e & ENTRY_CLOSED)) return false;
    if (atomic_compare_exchange_weak(&c->entry, &e, e + 1)) return true;
  }
}

static void run_ranges(cpu_impl *c, int worker) {
  const cpu_job *j = &c->job;
  for (int k = 0; k < j->participants; k++) {
    cpu_share *sh = &c->share[(worker + k) % j->participants]; /* own share first */
    for (;;) {
      int64_t begin = atomic_fetch_add_explicit(&sh->next, j->grain, memory_order_relaxed);
      if (begin >= sh->end) break;
      int64_t end = begin + j->grain < sh->end ? begin + j->grain : sh->end;
      j->fn(j->ctx, begin, end, worker);
    }
  }
}

typedef struct worker_arg {
  cpu_impl *c;
  int index;
} worker_arg;

static void *worker_main(void *p) {
  worker_arg *wa = p;
  cpu_impl *c = wa->c;
  int index = wa->index;
  free(wa);
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = atomic_load_explicit(&c->generation, memory_order_acquire)) == seen &&
           !atomic_load(&c->stop)) {
      if (++spins < c->spin_limit) {
        cpu_relax();
        continue;
      }
      pthread_mutex_lock(&c->lock);
      atomic_fetch_add(&c->sleepers, 1);
      while (atomic_load(&c->generation) == seen && !atomic_load(&c->stop))
        pthread_cond_wait(&c->wake, &c->lock);
      atomic_fetch_sub(&c->sleepers, 1);
      pthread_mutex_unlock(&c->lock);
    }
    if (atomic_load(&c->stop)) return NULL;
    seen = gen;
    if (index >= (int)(gen & 0xFFFF)) continue; /* sits this job out */
    if (!join_job(c, gen >> 16)) continue;      /* closed: the caller did the work */
    run_ranges(c, index);
    finish_share(c);
  }
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { PROBE_FIRST = 64, PROBE_MAX = 1 << 16 };
#define WAIT_SHARE_HIGH 0.35 /* balanced jobs wait for at most one range (~1/8) */
#define WAIT_SHARE_OK 0.15

/* After a job of `total` seconds in which the caller waited `waited`. */
static void adapt_after_job(cpu_impl *c, double total, double waited) {
  cpu_adapt *ad = &c->adapt;
  if (total < 20e-6) return; /* too short to tell */
  ad->wait_share = ad->jobs ? 0.9 * ad->wait_share + 0.1 * (waited / total) : waited / total;
  ad->jobs++;
  if (ad->active > 1 && ad->jobs >= 8 && ad->wait_share > WAIT_SHARE_HIGH) {
    ad->active--;
    /* A failed try waits twice as long before the next one. */
    ad->probe_after = ad->probing ? (ad->probe_after * 2 < PROBE_MAX ? ad->probe_after * 2 : PROBE_MAX)
                                  : PROBE_FIRST;
    ad->probing = false;
    ad->jobs = 0;
  } else if (ad->probing && ad->jobs >= 64 && ad->wait_share < WAIT_SHARE_OK) {
    ad->probing = false; /* the added participant stays */
    ad->probe_after = PROBE_FIRST;
  }
}

/* Before a job: try one more participant when it is time. */
static void adapt_before_job(cpu_impl *c) {
  cpu_adapt *ad = &c->adapt;
  if (ad->active < c->n_threads && ++ad->jobs >= ad->probe_after) {
    ad->active++;
    ad->probing = true;
    ad->jobs = 0;
  }
}

/* Ranges a participant's share is cut into. A participant that runs out of
 * work waits at the join for the others' last range, so finer ranges waste
 * less there (each range costs one atomic add): with 8 a 14-frame chunk on
 * two workers is decoded a frame a range, and the decode's median over ten
 * alternated 2-thread runs fell from 0.205 to 0.196 s (ranges of two frames
 * at 4). */
#define RANGES_PER_PARTICIPANT 8

static void cpu_parallel_for(sl_backend *b, int64_t n, int64_t grain, sl_range_fn fn, void *ctx) {
  cpu_impl *c = b->impl;
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (c->adapt.on) adapt_before_job(c);
  int parts = c->adapt.on ? c->adapt.active : c->n_threads;
  /* Small jobs, or one participant: run inline, no hand-off cost. */
  if (parts == 1 || n <= grain) {
    fn(ctx, 0, n, 0);
    return;
  }
  /* No more participants than ranges of `grain`: the others could take
   * nothing, and the caller would still wait for each of them to wake and
   * find that out (dpc's row loops of a 64 x 64 scan, 4 ranges of 16 rows:
   * 4.2 ms with 16 participants on the H200's host, against 0.3 ms
   * estimated from runs that did not wake them). */
  if ((n + grain - 1) / grain < parts) parts = (int)((n + grain - 1) / grain);
  /* About RANGES_PER_PARTICIPANT ranges per participant for balance, never
   * below grain. */
  int64_t want = (n + RANGES_PER_PARTICIPANT * (int64_t)parts - 1) / (RANGES_PER_PARTICIPANT * (int64_t)parts);
  if (want > grain) grain = want;
  c->job = (cpu_job){fn, ctx, n, grain, parts};
  for (int w = 0; w < parts; w++) {
    atomic_store_explicit(&c->share[w].next, n * w / parts, memory_order_relaxed);
    c->share[w].end = n * (w + 1) / parts;
  }
  double t0 = c->adapt.on ? now_seconds() : 0;
  atomic_store_explicit(&c->outstanding, parts, memory_order_relaxed);
  uint64_t next = ((atomic_load_explicit(&c->generation, memory_order_relaxed) >> 16) + 1) << 16;
  atomic_store(&c->entry, ((next >> 16) & 0xFFFFFFFFu) << 32);
  /* Sequentially consistent, like the load of `sleepers` below and the
   * worker's increment of it before it re-reads the generation (a Dekker
   * pair): a release store could pass the load and lose a wake-up. */
  atomic_store(&c->generation, next | (uint64_t)parts);
  if (atomic_load(&c->sleepers) > 0) {
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
  }
  run_ranges(c, 0);
  /* Every range is taken: close the job. The caller and the workers that
   * never joined leave `outstanding` at once; those that joined leave it
   * when their ranges are done. */
  const int joined = (int)(atomic_fetch_or(&c->entry, ENTRY_CLOSED) & 0xFFFF);
  atomic_fetch_sub_explicit(&c->outstanding, parts - joined, memory_order_acq_rel);
  double t1 = c->adapt.on ? now_seconds() : 0;
  wait_for_participants(c);
  if (c->adapt.on) {
    double t2 = now_seconds();
    adapt_after_job(c, t2 - t0, t2 - t1);
  }
}

static int cpu_workers(const sl_backend *b) { return ((const cpu_impl *)b->impl)->n_threads; }

static sl_code cpu_probe(sl_backend_caps *caps, sl_error *err) {
  memset(caps, 0, sizeof *caps);
  caps->kind = SL_BACKEND_CPU;
  caps->compute_units = sl_usable_cpus();
  caps->host_workers = caps->compute_units;
  snprintf(caps->device, sizeof caps->device, "host CPU, %d threads", caps->compute_units);
  caps->memory_bytes = sl_available_memory();
  caps->device_memory = false;
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  caps->cache_bytes = l2 > 0 ? l2 : 0;
  /* Conservative per-core streaming figures; the planner's estimate scales
   * them by the thread count. */
  caps->bytes_per_second = 4e9 * caps->compute_units;
  caps->ops_per_second = 2e9 * caps->compute_units;
  return SL_OK;
}

static void cpu_destroy(sl_backend *b);

static sl_code cpu_create(int threads, sl_backend **out, sl_error *err) {
  sl_backend *b = sl_calloc(1, sizeof *b);
  cpu_impl *c = sl_calloc(1, sizeof *c);
  if (!b || !c) {
    free(b);
    free(c);
    return sl_fail_nomem(err, "the cpu backend");
  }
  b->ops = &sl_cpu_backend_ops;
  b->impl = c;
  cpu_probe(&b->caps, err);
  int usable = b->caps.compute_units;
  c->n_threads = threads > 0 ? threads : usable;
  if (c->n_threads > 4096) c->n_threads = 4096; /* fits the generation word */
  c->spin_limit = c->n_threads > usable ? 0 : SPIN_LIMIT;
  /* An explicit --threads is taken as asked; the default adapts. */
  c->adapt = (cpu_adapt){.on = threads <= 0 && c->n_threads > 1, .active = c->n_threads,
                         .probe_after = PROBE_FIRST};
  b->caps.compute_units = c->n_threads;
  b->caps.host_workers = c->n_threads;
  snprintf(b->caps.device, sizeof b->caps.device, "host CPU, %d threads", c->n_threads);
  b->caps.bytes_per_second = 4e9 * c->n_threads;
  b->caps.ops_per_second = 2e9 * c->n_threads;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->wake, NULL);
  pthread_cond_init(&c->done, NULL);
  c->threads = sl_calloc((size_t)c->n_threads, sizeof *c->threads);
  c->share = sl_calloc((size_t)c->n_threads, sizeof *c->share);
  if (!c->threads || !c->share) {
    c->n_threads = 1; /* no worker to stop */
    cpu_destroy(b);
    return sl_fail_nomem(err, "the cpu backend's threads");
  }
  for (int i = 1; i < c->n_threads; i++) {
    worker_arg *wa = sl_calloc(1, sizeof *wa);
    if (!wa) {
      c->n_threads = i;
      cpu_destroy(b);
      return sl_fail_nomem(err, "the cpu backend's threads");
    }
    wa->c = c;
    wa->index = i;
    if (pthread_create(&c->threads[i], NULL, worker_main, wa) != 0) {
      free(wa);
      c->n_threads = i;
      cpu_destroy(b);
      return sl_fail(err, SL_ERR_BACKEND, "cpu backend: cannot start worker thread %d", i);
    }
  }
  *out = b;
  return SL_OK;
}

static void cpu_destroy(sl_backend *b) {
  if (!b) return;
  cpu_impl *c = b->impl;
  pthread_mutex_lock(&c->lock);
  atomic_store(&c->stop, true);
  pthread_cond_broadcast(&c->wake);
  pthread_mutex_unlock(&c->lock);
  for (int i = 1; i < c->n_threads; i++) pthread_join(c->threads[i], NULL);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->wake);
  pthread_cond_destroy(&c->done);
  free(c->threads);
  free(c->share);
  free(c->fns);
  free(c->args);
  free(c);
  free(b);
}

static sl_code cpu_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  /* 64-byte alignment for vector loads; size rounded up as aligned_alloc needs. */
  size_t rounded = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) {
    char h[32];
    sl_format_bytes(bytes, h, sizeof h);
    return sl_fail(err, SL_ERR_NOMEM, "cpu backend: cannot allocate %s", h);
  }
  *ptr = p;
  return SL_OK;
}

static void cpu_free(sl_backend *b, void *ptr, size_t bytes) { free(ptr); }

/* The zero's and the copy's grain: a buffer of at most this is done by the
 * caller alone, a larger one by at most one participant per this many
 * bytes (cpu_parallel_for). */
#define SPREAD_GRAIN ((int64_t)256 << 10)

typedef struct copy_job {
  uint8_t *dst;
  const uint8_t *src;
} copy_job;

static void copy_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const copy_job *j = ctx;
  memcpy(j->dst + begin, j->src + begin, (size_t)(end - begin));
}

/* Spread over the workers like the zero below: a copy into a fresh buffer
 * (gather's resident acquisition, 4.8 GB for a 256 x 256 scan) is mostly
 * its pages' first touch, one fault a 4 KiB page, which the workers' cores
 * take in parallel (2.89 s on one thread of the H200's host, whose
 * calibration timed the first touch spread). Overlapping ranges keep one
 * memmove. */
static sl_code cpu_copy(sl_backend *b, void *dst, const void *src, size_t bytes, sl_error *err) {
  (void)err;
  if (!bytes) return SL_OK;
  const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d + bytes <= s || s + bytes <= d) {
    copy_job j = {dst, src};
    cpu_parallel_for(b, (int64_t)bytes, SPREAD_GRAIN, copy_range, &j);
  } else {
    memmove(dst, src, bytes);
  }
  return SL_OK;
}

static void zero_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  memset((uint8_t *)ctx + begin, 0, (size_t)(end - begin));
}

/* Spread over the workers, as the combines' identities are: a large buffer
 * zeroed when a pass starts is mostly its pages' first touch (bf_segments'
 * 2.75 MB on a 128 x 128 scan, 1.25 ms on one thread of the dev VM), which
 * the workers' cores take in parallel. */
static sl_code cpu_zero(sl_backend *b, void *dst, size_t bytes, sl_error *err) {
  (void)err;
  if (bytes) cpu_parallel_for(b, (int64_t)bytes, SPREAD_GRAIN, zero_range, dst);
  return SL_OK;
}

/* Declared reductions: the host merges, spread over the workers in ranges
 * (each element is merged by exactly one worker and in the same way, so
 * the bits do not depend on the thread count). */
typedef struct combine_job {
  sl_combine c;
  sl_dtype t;
  void *dst;
  const void *src;
} combine_job;

static void combine_identity_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const combine_job *j = ctx;
  (void)worker;
  sl_combine_identity_host(j->c, j->t, j->dst, begin, end);
}

static void combine_merge_range(void *ctx, int64_t begin, int64_t end, int worker) {
  const combine_job *j = ctx;
  (void)worker;
  sl_combine_merge_host(j->c, j->t, j->dst, j->src, begin, end);
}

/* Below this many elements one thread merges (waking workers costs more). */
#define COMBINE_GRAIN 16384

static sl_code cpu_combine_identity(sl_backend *b, sl_combine c, sl_dtype t, void *dst, int64_t n,
                                    sl_error *err) {
  (void)err;
  combine_job j = {c, t, dst, NULL};
  cpu_parallel_for(b, n, COMBINE_GRAIN, combine_identity_range, &j);
  return SL_OK;
}

static sl_code cpu_combine_merge(sl_backend *b, sl_combine c, sl_dtype t, void *acc,
                                 const void *partial, int64_t n, sl_error *err) {
  (void)err;
  combine_job j = {c, t, acc, partial};
  cpu_parallel_for(b, n, COMBINE_GRAIN, combine_merge_range, &j);
  return SL_OK;
}

static sl_code cpu_batch_begin(sl_backend *b, sl_error *err) {
  cpu_impl *c = b->impl;
  if (c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cpu backend: batch already open");
  c->in_batch = true;
  c->n_encoded = 0;
  c->batch_status = SL_OK;
  return SL_OK;
}

static sl_code cpu_batch_encode(sl_backend *b, sl_kernel_fn fn, sl_kernel_args *args, sl_error *err) {
  cpu_impl *c = b->impl;
  if (!c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cpu backend: encode outside a batch");
  if (c->n_encoded == c->cap_encoded) {
    size_t cap = c->cap_encoded ? 2 * (size_t)c->cap_encoded : 16;
    if (!sl_resize(&c->fns, cap, sizeof *c->fns) || !sl_resize(&c->args, cap, sizeof *c->args))
      return sl_fail_nomem(err, "the cpu backend's batch");
    c->cap_encoded = (int)cap;
  }
  c->fns[c->n_encoded] = fn;
  c->args[c->n_encoded] = args;
  c->n_encoded++;
  return SL_OK;
}

static sl_code cpu_batch_commit(sl_backend *b, sl_error *err) {
  cpu_impl *c = b->impl;
  for (int i = 0; i < c->n_encoded; i++) {
    sl_kernel_args *a = c->args[i];
    sl_code rc = c->fns[i](a);
    if (rc != SL_OK) {
      if (a->err != err && a->err) *err = *a->err;
      if (err->code == SL_OK) sl_fail(err, rc, "kernel failed");
      if (a->node_id) sl_error_node(err, a->node_id);
      sl_error_chunk(err, a->chunk);
      c->batch_status = rc;
      break;
    }
  }
  return SL_OK;
}

/* Batches complete in wait: nothing is ever outstanding. */
static sl_code cpu_sync(sl_backend *b, sl_error *err) {
  (void)b;
  (void)err;
  return SL_OK;
}

static sl_code cpu_batch_wait(sl_backend *b, sl_error *err) {
  cpu_impl *c = b->impl;
  c->in_batch = false;
  return c->batch_status;
}

const sl_backend_ops sl_cpu_backend_ops = {
    .kind = SL_BACKEND_CPU,
    .probe = cpu_probe,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .combine_identity = cpu_combine_identity,
    .combine_merge = cpu_combine_merge,
    .batch_begin = cpu_batch_begin,
    .batch_encode = cpu_batch_encode,
    .batch_commit = cpu_batch_commit,
    .batch_wait = cpu_batch_wait,
    .sync = cpu_sync,
    .parallel_for = cpu_parallel_for,
    .workers = cpu_workers,
};
