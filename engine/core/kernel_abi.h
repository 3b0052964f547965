/* The kernel ABI: what a kernel call receives and what a device kernel file
 * exports. It is the one header that the graph layer (node descriptors name
 * kernels), the backends (they run them) and the device kernels in shaders/
 * (they implement them) all include, so none of them has to include another's
 * headers. Plain C, no CUDA types: native handles are opaque pointers.
 *
 * A kernel never sees a backend's native objects except through
 * `sl_device_env`, which a device backend fills for its launchers (the queue
 * to enqueue on, its limits, and how to wait or check a launch). */
#ifndef SL_KERNEL_ABI_H
#define SL_KERNEL_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this ABI compiled into each device kernel file. A device
 * backend refuses to start when a kernel was built for another one. */
#define SL_KERNEL_ABI_VERSION 9

/* The most input and the most output ports a node has (a pipeline's inputs
 * and an iterate body's too): a port is a bit of the descriptors' unsigned
 * port masks (in_place_outputs, fold_outputs, ...), so at most 32. */
#define SL_MAX_PORTS 32

typedef enum sl_backend_kind { SL_BACKEND_CPU = 0, SL_BACKEND_CUDA, SL_BACKEND_COUNT } sl_backend_kind;

/* "cpu", "cuda", or "unknown". */
const char *sl_backend_kind_name(sl_backend_kind k);

struct sl_backend;
struct sl_node;
struct sl_kernel_args;

/* What a device backend lends its launchers for one call. */
typedef struct sl_device_env {
  void *queue;      /* where the call's kernels go (a cudaStream_t on CUDA) */
  void *copy_queue; /* a second queue for copies that overlap the kernels */
  int device;       /* the device ordinal, current on the calling thread */
  int compute_capability;        /* major * 10 + minor */
  int multiprocessors;
  size_t shared_memory_per_block; /* with opt-in */
  /* Waits for everything enqueued so far; a device error is reported in
   * a->err with the batch (nodes, chunk) it happened in, which need not be
   * the caller's. Launchers call it when they must read results on the host. */
  sl_code (*sync)(struct sl_kernel_args *a);
  /* After a launch: SL_OK, or SL_ERR_BACKEND naming the kernel, the node and
   * the chunk (an earlier batch's fault surfacing here names that batch). */
  sl_code (*check_launch)(struct sl_kernel_args *a, const char *kernel);
} sl_device_env;

typedef struct sl_kernel_args {
  struct sl_backend *backend;
  /* The node being run. Opaque here: node code reads its own node
   * (engine/graph/graph.h); backends and device kernels never do. */
  const struct sl_node *node;
  const char *node_id; /* for errors: the executor sets it, backends use it */
  void *state;      /* the node's per-run state (prepare) */
  int64_t chunk;    /* chunk index (0 for whole-phase nodes) */
  int64_t n_chunks;
  int64_t pos_start; /* first scan position of this chunk */
  int64_t pos_count; /* positions in this chunk (whole nodes: 1) */
  /* Inside an iterate body: the iteration being run (0, 1, ...), of the
   * innermost loop; 0 outside loops. */
  int64_t iteration;
  /* Per input/output port: data pointers. Streamed ports point at this chunk's
   * pos_count items; whole ports at the whole tensor. Unconnected optional
   * inputs are NULL. Reduction outputs (whole, fed by streamed inputs)
   * declare their combine (sl_node_desc.combine): out[k] is this chunk's
   * partial, from the combine's identity, which the executor merges; the
   * run's accumulator for a folded one; the chunk's place for a concat; NULL
   * in a chunk's call for an output finalize alone writes. */
  const void *in[SL_MAX_PORTS];
  void *out[SL_MAX_PORTS];
  /* Bytes of each port's data in this call. For variable-size ports
   * (sl_node_desc.out_bound) out_bytes[k] holds the bound when the kernel is
   * called and the kernel sets what it wrote; in_bytes[k] is what the
   * producer wrote. For every other port, the buffer's bytes for this call. */
  int64_t in_bytes[SL_MAX_PORTS];
  int64_t out_bytes[SL_MAX_PORTS];
  void *workspace; /* cost().workspace_bytes of scratch, or NULL */
  /* Host scratch of each worker of parallel_for: cost().per_worker_bytes at
   * worker_scratch + worker * worker_scratch_stride (sl_worker_scratch),
   * lent by the executor for the whole run and counted in the plan, so a
   * kernel's ranges never malloc (a worker thread that mallocs gets a heap
   * arena of its own that the process keeps: memory the plan cannot see).
   * NULL when the node declared none. The stride is the plan's block per
   * worker: a node's scratch, then its partials per worker
   * (worker_partial; engine/plan/plan.h sl_plan_worker_layout). */
  void *worker_scratch;
  int64_t worker_scratch_stride;
  /* On a device backend: the node's device table, cost().device_state_bytes
   * of device memory lent from the run's pool for the whole run (the same
   * pointer in every call, zeroed before the first), or NULL when the node
   * declared none. Launchers keep their tables, lists and work areas here
   * (sl_table_take, shaders/cuda/common/device_table.h) and never allocate
   * device memory themselves, so the plan counts every device byte. When
   * the executor takes the table back it frees the node's dev_state (the
   * launcher's pointers into it). */
  void *device_table;
  int64_t device_table_bytes;
  sl_error *err;   /* the kernel fills this on failure */
  /* Where a device backend adds the device time of the kernels this call
   * enqueues, once they completed (CUDA events around the launcher); NULL
   * on the CPU backend, where the call's own time is the kernel time. */
  double *device_seconds;
  /* Set by a device backend when it runs the call; NULL on the CPU. */
  const sl_device_env *dev;
  /* Per output port: worker 0's partial of a declared reduction lent per
   * worker of parallel_for (sl_node_desc.worker_partial_outputs; integer
   * combines only), or NULL. Worker w's is worker_scratch_stride bytes
   * further (sl_worker_partial). Each holds the whole output's elements
   * and starts every call from the combine's identity; a worker folds what
   * its ranges reduce into its own, with no atomics. After the call the
   * executor merges them, worker 0, 1, ... in order, into out[k] (itself
   * the chunk's partial, which the kernel may also write), then out[k]
   * into the run's result (for a folded output, fold_outputs, out[k] is
   * the run's result). A partial kept for the pass
   * (SL_WORKER_PARTIALS_PASS, sl_plan_node.pass_partials) starts from the
   * identity at the pass's start instead and is merged into the run's
   * result after its last chunk; the kernel treats both the same. Lent on
   * the host only (CPU kernels; NULL in finalize calls and on device
   * backends' device kernels). */
  void *worker_partial[SL_MAX_PORTS];
} sl_kernel_args;

typedef sl_code (*sl_kernel_fn)(sl_kernel_args *args);

/* Worker `worker`'s cost().per_worker_bytes of host scratch (see
 * sl_kernel_args.worker_scratch). */
static inline void *sl_worker_scratch(const sl_kernel_args *a, int worker) {
  return a->worker_scratch ? (char *)a->worker_scratch + (int64_t)worker * a->worker_scratch_stride
                           : NULL;
}
/* Worker `worker`'s partial of output `port` (see
 * sl_kernel_args.worker_partial), or NULL when none is lent: the kernel
 * then folds into out[port] itself. */
static inline void *sl_worker_partial(const sl_kernel_args *a, int port, int worker) {
  return a->worker_partial[port]
             ? (char *)a->worker_partial[port] + (int64_t)worker * a->worker_scratch_stride
             : NULL;
}
typedef void (*sl_range_fn)(void *ctx, int64_t begin, int64_t end, int worker);

/* One device kernel compiled into the binary: its name, the __global__
 * function's address (the backend asks the driver whether code for the
 * device exists), the ABI version it was built with, and the node types
 * that launch it (space-separated; set by the registry from the kernel
 * file's registration: the backend loads a run's kernels before its first
 * call, sl_backend_ops.warm_up_nodes). */
typedef struct sl_device_kernel {
  const char *name;
  const void *func;
  int abi;
  const char *nodes;
} sl_device_kernel;

/* Every CUDA kernel compiled into the binary (shaders/cuda/registry.cu;
 * each kernel file adds its table there when it is linked in). */
const sl_device_kernel *sl_cuda_kernels(int *count);
/* Whether k's `nodes` names node type `type` (a whole word). */
bool sl_device_kernel_serves(const sl_device_kernel *k, const char *type);

#ifdef __cplusplus
}
#endif

#endif
