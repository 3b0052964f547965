/* The compute backend interface: a small table of functions plus a context
 * (after ggml-backend). Nodes never see a backend's native objects: they get
 * host or device pointers through sl_kernel_args and use parallel_for.
 * A batch holds the kernels of one level of one chunk: begin, encode..., commit,
 * wait. On the CPU backend wait returns when the batch's work is done; a
 * device backend's wait may return while its kernels still run (the device
 * runs batches in order on one stream, so a pooled buffer handed to a later
 * batch is never touched early), and `sync` drains it: the executor syncs
 * only at phase boundaries and for results the host reads. Errors name the
 * kernel's node and chunk, at wait or at the sync that finds them. */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/combine.h"
#include "engine/core/device_caps.h"
#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"

typedef struct sl_backend sl_backend;

/* The queues of a device backend: kernels and in-order transfers go on the
 * compute queue; the copy queue carries transfers that overlap them, ordered
 * with the compute queue only by events. */
typedef enum sl_queue { SL_QUEUE_COMPUTE = 0, SL_QUEUE_COPY = 1 } sl_queue;
/* A point in a queue's work (a cudaEvent_t on CUDA); opaque. */
typedef struct sl_event sl_event;

/* The most node types a run hands warm_up_nodes (the rest load lazily). */
#define SL_WARM_UP_TYPES_MAX 64

typedef struct sl_backend_ops {
  sl_backend_kind kind;
  /* Capabilities without creating a context; may touch the device (only
   * `sluice devices` and backend selection call it). */
  sl_code (*probe)(sl_backend_caps *caps, sl_error *err);
  /* Optional (NULL on the CPU): start the device's initialisation (the
   * context) in the background, so that it overlaps loading and planning
   * the pipeline; wait joins it (and warm_up_nodes' loads). create waits
   * for the context by itself. */
  void (*warm_up_begin)(void);
  void (*warm_up_wait)(void);
  /* Optional: also load, in the background once the context is made, the
   * device code of these node types (the kernels their launchers run), in
   * their order, so that no node's first call waits for it; create does
   * not wait for it, warm_up_wait joins it. At most SL_WARM_UP_TYPES_MAX
   * types; the strings must outlive the run (node descriptors' types). */
  void (*warm_up_nodes)(const char *const *types, int n);
  /* threads: 0 = all available. */
  sl_code (*create)(int threads, sl_backend **out, sl_error *err);
  /* Optional (NULL on the CPU): the devices this backend can run on, 0
   * when none is usable; and create on device `device` (0 <= device <
   * device_count()) instead of the backend's own choice (a split run puts
   * its shards on the devices in turn, engine/exec/run_shards.c). */
  int (*device_count)(void);
  sl_code (*create_on)(int device, int threads, sl_backend **out, sl_error *err);
  void (*destroy)(sl_backend *b);
  /* Data buffers (the pool calls these; nothing else should). */
  sl_code (*alloc)(sl_backend *b, size_t bytes, void **ptr, sl_error *err);
  void (*free)(sl_backend *b, void *ptr, size_t bytes);
  /* Host memory for staging host nodes' data on device backends (pinned on
   * CUDA, so that transfers run at full speed and asynchronously). */
  sl_code (*host_alloc)(sl_backend *b, size_t bytes, void **ptr, sl_error *err);
  /* bytes: what host_alloc was given (how the memory was made may follow
   * from its size: CUDA's huge-page registrations). */
  void (*host_free)(sl_backend *b, void *ptr, size_t bytes);
  /* Transfers, outside batches (phase boundaries only). Device backends move
   * between host and device memory; the CPU backend copies. */
  sl_code (*upload)(sl_backend *b, void *dst, const void *host_src, size_t bytes, sl_error *err);
  sl_code (*download)(sl_backend *b, void *host_dst, const void *src, size_t bytes, sl_error *err);
  sl_code (*copy)(sl_backend *b, void *dst, const void *src, size_t bytes, sl_error *err);
  sl_code (*zero)(sl_backend *b, void *dst, size_t bytes, sl_error *err);
  /* Declared reductions (engine/core/combine.h), in order after what was
   * enqueued before: n elements of dst set to the combine's identity, and
   * acc = acc op partial over n elements. The CPU backend runs the host
   * merges (sl_combine_merge_host); a device backend must give the same bits. */
  sl_code (*combine_identity)(sl_backend *b, sl_combine c, sl_dtype t, void *dst, int64_t n,
                              sl_error *err);
  sl_code (*combine_merge)(sl_backend *b, sl_combine c, sl_dtype t, void *acc, const void *partial,
                           int64_t n, sl_error *err);
  /* One batch at a time per backend. */
  sl_code (*batch_begin)(sl_backend *b, sl_error *err);
  sl_code (*batch_encode)(sl_backend *b, sl_kernel_fn fn, struct sl_kernel_args *args,
                          sl_error *err);
  sl_code (*batch_commit)(sl_backend *b, sl_error *err);
  sl_code (*batch_wait)(sl_backend *b, sl_error *err);
  /* Waits until every batch and transfer enqueued so far has completed;
   * an asynchronous device error is reported with the batch (nodes, chunk)
   * it happened in. */
  sl_code (*sync)(sl_backend *b, sl_error *err);
  /* Runs fn over [0, n) split into ranges of at least `grain`, on all workers;
   * returns when every range is done. `worker` is in [0, workers). */
  void (*parallel_for)(sl_backend *b, int64_t n, int64_t grain, sl_range_fn fn, void *ctx);
  int (*workers)(const sl_backend *b);

  /* ---- asynchronous transfers and events (device backends; NULL on the CPU
   * backend, whose memory is the host's). Stages that overlap copies with
   * kernels (prefetch of stream inputs) use these, never native objects. */
  /* What launchers get in sl_kernel_args.dev (also for tests that call a
   * launcher directly). */
  const sl_device_env *(*device_env)(sl_backend *b);
  /* Makes the backend's device current on the calling thread (a helper
   * thread that enqueues copies calls it first). */
  sl_code (*bind_thread)(sl_backend *b, sl_error *err);
  sl_code (*event_create)(sl_backend *b, sl_event **ev, sl_error *err);
  void (*event_destroy)(sl_backend *b, sl_event *ev);
  /* Marks the point after everything enqueued so far on queue q. */
  sl_code (*event_record)(sl_backend *b, sl_event *ev, sl_queue q, sl_error *err);
  /* Work enqueued on q after this starts only once ev's point was reached. */
  sl_code (*queue_wait_event)(sl_backend *b, sl_queue q, sl_event *ev, sl_error *err);
  /* The host blocks until ev's point was reached. */
  sl_code (*event_wait)(sl_backend *b, sl_event *ev, sl_error *err);
  /* Enqueues a copy of bytes (host<->device or device<->device, pinned host
   * memory for overlap) on q; returns at once. */
  sl_code (*copy_async)(sl_backend *b, sl_queue q, void *dst, const void *src, size_t bytes,
                        sl_error *err);
} sl_backend_ops;

struct sl_backend {
  const sl_backend_ops *ops;
  sl_backend_caps caps;
  void *impl;
};

/* The backend table for a kind, or NULL when it is not compiled in. */
const sl_backend_ops *sl_backend_ops_for(sl_backend_kind k);
/* Parses "auto", "cpu", "cuda". */
sl_code sl_backend_parse(const char *name, int *kind_or_auto, sl_error *err);
#define SL_BACKEND_AUTO (-1)
/* Resolves auto to the best available backend; an explicit kind that is not
 * available is an error (no silent fallback). */
sl_code sl_backend_select(int kind_or_auto, sl_backend_kind *out, sl_error *err);

extern const sl_backend_ops sl_cpu_backend_ops;
#ifdef SLUICE_HAVE_CUDA
extern const sl_backend_ops sl_cuda_backend_ops;
#endif

#endif
