/* Node descriptors: everything about a node type, written once. The planner,
 * the executor and `sluice nodes` all read these. */
#ifndef SL_NODE_H
#define SL_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/combine.h"
#include "engine/core/kernel_abi.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/pipeline/spec.h"
#include "engine/graph/node_params.h"

/* A port's unit that is the unit of what feeds the node's input 0 (a sum of
 * counts is counts). */
#define SL_UNIT_OF_INPUT "(unit of the input)"

typedef struct sl_port_def {
  const char *name;
  const char *doc;
  const char *unit; /* recorded as an HDF5 attribute; NULL if none; SL_UNIT_OF_INPUT */
  bool optional;    /* inputs only */
} sl_port_def;

/* Cost of a node for one chunk of `positions` scan positions (whole nodes:
 * positions = 1, for the whole run). */
typedef struct sl_node_cost {
  int64_t bytes_read;
  int64_t bytes_written;
  int64_t ops;
  int64_t workspace_bytes;   /* scratch the executor lends for one call */
  int64_t per_worker_bytes;  /* host scratch per parallel_for worker, lent
                                by the executor (sl_worker_scratch) */
  int64_t state_bytes;       /* what prepare() holds for the whole run */
  int64_t library_bytes;     /* what a library the node uses makes once per
                                process at its first use (FFTW's planner
                                tables); the plan counts the largest once */
  int64_t device_library_bytes; /* host memory a library the node's device
                                   kernel loads takes once per process
                                   (cuFFT); device backends only, counted
                                   like library_bytes */
  int64_t device_state_bytes; /* what the node holds in device memory for the
                                 whole run on a device backend (its device
                                 table); ignored on the CPU backend */
  int64_t host_fallback_bytes; /* the part of state_bytes that only the
                                  node's host path uses, made when it first
                                  runs: on a device backend, where the device
                                  kernel does that work, it is not planned
                                  (made only if the device path cannot run,
                                  which the node notes) */
  int64_t device_host_bytes;   /* host state that only the node's device
                                  path makes (a device's results read back
                                  for a host step): planned where its device
                                  kernel runs, not on the CPU backend */
  int64_t decided_ops_most;    /* work a kernel may decide on from the data
                                  (sl_node_decided_work), at most: not in ops
                                  nor the estimate; `sluice plan` shows it */
  const char *decided_variant; /* its rate's variant (a static string) */
  int64_t decided_state_bytes; /* host state a kernel makes only where it
                                  decides on work from the data, at most
                                  (sl_node_decided_state records what it
                                  made): not in state_bytes; the budget
                                  holds it (sl_plan.peak_host_bytes_most),
                                  report.json's planned peak what was made */
  int64_t device_decided_state_bytes; /* the part of it only the node's
                                  device path makes (a device's results read
                                  back for a host step the data decide on):
                                  planned where its device kernel runs */
} sl_node_cost;

struct sl_node;
struct sl_graph;
struct sl_backend;

/* Parts of a node's own host memory that it rewrites as a whole (e.g. its
 * read-ahead windows): sl_produce_args.emit names the one a copy reads. */
#define SL_PRODUCE_PIECES 4

/* One call of a node's produce hook (sl_node_desc.produce): the chunk whose
 * streamed output 0 the node makes on the host. The executor calls it for
 * chunks 0, 1, ..., n_chunks - 1 of each pass, in order, on a helper thread
 * of its own (or in the chunk's place on the executor's thread when the
 * setting source_overlap is false). */
typedef struct sl_produce_args {
  const struct sl_node *node;
  void *state; /* the node's per-run state (prepare) */
  int64_t chunk, n_chunks;
  int64_t pos_start, pos_count;
  /* Bytes of the output buffer for this chunk: what the pieces may cover. */
  int64_t out_capacity;
  /* Set by produce: the bytes of output the chunk holds (a variable-size
   * port's size); out_capacity when produce leaves it. */
  int64_t out_bytes;
  /* The backend: host memory a node emits from comes from its host_alloc
   * (pinned on CUDA: the copies run asynchronously at full speed) and goes
   * back with host_free, in memory the node owns for its whole run. */
  struct sl_backend *backend;
  /* Sends `bytes` at src (in piece `piece` of the node's memory, 0 <=
   * piece < SL_PRODUCE_PIECES) to byte dst_offset of the chunk's output.
   * Returns at once: the bytes at src must stay as they are until
   * piece_wait(piece) returns. SL_ERR_INTERNAL past out_capacity. */
  sl_code (*emit)(struct sl_produce_args *a, int piece, uint64_t dst_offset, const void *src,
                  uint64_t bytes, sl_error *err);
  /* Returns when every copy emitted so far out of `piece` is done: the node
   * calls it before it rewrites the piece. */
  sl_code (*piece_wait)(struct sl_produce_args *a, int piece, sl_error *err);
  sl_error *err; /* produce fills this on failure */
  void *exec;    /* the executor's; nodes leave it alone */
} sl_produce_args;

/* How a reduction's partial is lent per worker of parallel_for
 * (sl_node_desc.worker_partials_of). */
typedef enum sl_worker_partials {
  SL_WORKER_PARTIALS_NONE = 0,
  SL_WORKER_PARTIALS_CALL, /* from the identity before each call, merged after it */
  SL_WORKER_PARTIALS_PASS  /* from the identity at a pass's start, merged after its last chunk */
} sl_worker_partials;

typedef struct sl_node_desc {
  const char *type;
  const char *doc;
  const sl_param_def *params;
  int n_params;
  /* The typed params (node_params.h): size of the struct and the generated
   * function that fills it from the converted values; 0/NULL for a node
   * without params. */
  size_t params_size;
  void (*params_bind)(const sl_param_value *values, void *out);
  const sl_port_def *inputs;
  int n_inputs;
  const sl_port_def *outputs;
  int n_outputs;
  /* Fills node->out[] from node->in[] and node->params; checks params.
   * Errors are reported against the node (the graph layer adds location). */
  sl_code (*infer)(struct sl_node *node, sl_error *err);
  void (*cost)(const struct sl_node *node, int64_t positions, sl_node_cost *cost);
  /* Optional: per-run state (tables, masks read from files); release frees it. */
  sl_code (*prepare)(struct sl_node *node, sl_error *err);
  void (*release)(struct sl_node *node);
  /* Kernel per backend; NULL where the backend has none (the graph refuses to
   * bind such a node to that backend: no silent host fallback). */
  sl_kernel_fn kernel[SL_BACKEND_COUNT];
  /* Optional: after the last chunk, for nodes with reduction outputs; per
   * backend like the kernels. */
  sl_kernel_fn finalize[SL_BACKEND_COUNT];
  /* Bit k: whole output k is an image over the scan (its leading axes are
   * the graph's scan axes, e.g. a centre of mass per probe position), so
   * the outputs record those axes as scan axes like a streamed port's. */
  unsigned scan_image_outputs;
  /* The node runs on the host whatever the backend: sources that read files
   * or simulate, and small whole-tensor analyses. On a device backend the
   * executor moves its inputs and outputs through host staging buffers, and
   * the plan and report say so; its CPU kernel is used. */
  bool host;
  /* Its CPU kernel runs on the calling thread alone (never parallel_for: a
   * fit, a file written, a source whose reads run on its own threads), so
   * its time does not follow the worker count: a cost profile derived for
   * another thread count keeps its rate (engine/plan/cost_threads.h). */
  bool cpu_serial;
  /* Optional: start in the background what the node's device kernel loads
   * at its first call (a library such as cuFFT), called by the run once a
   * device backend is chosen, so that it overlaps loading, planning and
   * the streamed passes; wait joins it (the run calls it before it returns,
   * whatever happened; both idempotent, process-wide). */
  void (*device_warm_up_begin)(void);
  void (*device_warm_up_wait)(void);
  /* Optional, with them: whether the background load has finished
   * (never blocks; the run's plan then expects no wait for it). */
  bool (*device_warm_up_done)(void);
  /* Optional: a variant of the node's rate key (sl_cost_rate_key appends
   * "/variant") when its work is of another kind than its plain calls',
   * so that calibrate fits it a rate of its own (dpc with the probe params
   * fits the BF segments' parallax: on a device its transforms and
   * searches run at another rate per operation than the rotation's). NULL,
   * or a NULL return: the plain key. */
  const char *(*rate_variant)(const struct sl_node *n);
  /* The node writes a graph output where the run keeps it (results.h5, a
   * PNG: nodes/io, appended by the run for each output). The executor does
   * not assemble an output that a sink reads, and the plan does not count
   * it as an assembled output. */
  bool sink;
  /* Bit k: streamed output k may take the buffer of input k (same dtype and
   * shape), so the kernel rewrites only what changes instead of copying. The
   * planner grants it when input k comes from a streamed output that nothing
   * else reads and that is not a graph output; the kernel then sees
   * out[k] == in[k], otherwise distinct buffers, and must be right in both. */
  unsigned in_place_outputs;
  /* Bit k: streamed output k is a window of whole input k: the chunk's
   * positions of its leading axes (the stream node, which starts a new
   * stream over a whole tensor). The executor points out[k] there and the
   * planner gives it no buffer of its own; the kernel does nothing. */
  unsigned view_outputs;
  /* Whether streamed output `port` is lent from the node's own memory on
   * the CPU backend, and on a device backend where host nodes alone read
   * every output the node makes (its CPU kernel then runs on the host:
   * sl_plan_node.host): the kernel then gets out[port] == NULL and points it at
   * the chunk's bytes it holds (out_bytes[port]: their size, within the
   * port's bound), which stay as they are until its next call; the planner
   * gives the port no buffer and the executor hands that pointer to its
   * readers. A kernel must also work when given a buffer (out[port] !=
   * NULL: another backend's plan). NULL: never. (hdf5_source: the packed
   * stored chunks in its read-ahead window, not copied: one pass over the
   * compressed bytes fewer.) */
  bool (*lends_output)(const struct sl_node *n, int port);
  /* Bit k: a promise that, while output k is unread (its sl_node.out_used
   * bit is clear), none of the node's kernels and finalizes on any backend
   * reads or writes it. The planner then gives it no buffer (0 bytes, no
   * slot, no partial, no staging) and the executor passes out[k] == NULL
   * and out_bytes[k] == 0 (sl_node_out_omitted). Opt-in, port by port: a
   * kernel that merely skips work for an unread port but may still touch
   * its pointer (e.g. writes several ports when any one is read) must not
   * set it. */
  unsigned omit_unread_outputs;
  /* Per output port: the combine of a reduction (a whole output of a node
   * that streams; engine/core/combine.h). Declared, the kernel writes this
   * chunk's partial into a buffer holding the combine's identity (a
   * fixed-size concat: the chunk's positions of the output) and the executor
   * merges it (unless the kernel folds into the run's result itself:
   * fold_outputs). A whole output of a node that streams must declare one
   * (the graph refuses SL_COMBINE_NONE there) unless finalize alone writes
   * it (finalize_outputs). */
  sl_combine combine[SL_MAX_PORTS];
  /* Bit k: output k's element-wise combine, where it is exact for the
   * port's dtype (sl_combine_exact: integers), is also lent per worker of
   * parallel_for (sl_worker_partial): each worker folds its ranges into
   * its own partial, starting from the identity, and the executor merges
   * them after the call in worker order. Float combines are refused (their
   * bits would follow how parallel_for split the range); a port whose
   * combine is NONE for the node's types gets none. CPU kernels only. */
  unsigned worker_partial_outputs;
  /* Optional: how output `port`'s combine is lent per worker for this
   * node's inferred types, in place of worker_partial_outputs (exact
   * combines only, as there): none, for one call (as the bits above), or
   * kept for the whole pass (SL_WORKER_PARTIALS_PASS: where the node's CPU
   * kernel runs on the CPU backend in a pass's stream, each worker's
   * partial starts from the identity when the pass starts, gathers every
   * chunk's ranges of that worker, and is merged into the run's result once
   * after the pass's last chunk; elsewhere it is lent per call). A pass's
   * partials take their own place in each worker's scratch for the whole
   * run, so a node asks for them only where the partial is small: sum's
   * u64 frame sums, each worker adding the positions it decoded, which
   * then stay in its core's cache. */
  sl_worker_partials (*worker_partials_of)(const struct sl_node *n, int port);
  /* Bit k: output k's element-wise combine is folded by the kernel itself:
   * it combines its chunk's share into out[k] (out[k] = combine(out[k],
   * share)) whatever out[k] holds, on every backend it has a kernel for. The
   * executor then hands it the run's accumulator (at the identity from the
   * pass's start) instead of a chunk's partial at the identity that it
   * fills and merges at every chunk: for an item-shaped sum of 192 x 192
   * frames that was 295 KB filled and 590 KB merged per 28-frame chunk,
   * 17 ms of mean_pattern's 55 at 1 thread. Worker partials, if also
   * declared, are merged into the accumulator. */
  unsigned fold_outputs;
  /* Bit k: whole output k of a node that streams is written by its finalize
   * alone, from what its declared reductions gathered (variance's mean,
   * from its merged moments); it accumulates nothing, so it declares no
   * combine. The chunks' calls get out[k] == NULL and out_bytes[k] == 0,
   * and the executor does not fill it at the pass's start: finalize writes
   * every element. The graph refuses such a port on a node without a
   * finalize for each backend it has a kernel for. Every other whole output
   * of a node that streams must declare its combine. */
  unsigned finalize_outputs;
  /* The node's own merge of the outputs whose combine is SL_COMBINE_MERGE,
   * per backend it has a kernel for (the graph refuses a node without
   * one). After each chunk's kernel the executor calls it once with, for
   * every such port k, in[k] the chunk's partial (all-zero bytes before the
   * kernel wrote it: the merge's identity) and out[k] the run's accumulator
   * (all-zero bytes before the pass's first chunk); every other port is
   * NULL. pos_start and pos_count are the chunk's, whose partial is merged:
   * chunks come in scan order, one at a time, so a merge of floats gives
   * the same bits for the same chunking. In a run split into shards
   * (engine/exec/shard.h) it also merges each shard's accumulator, in shard
   * order from zero bytes, with pos_start and pos_count the positions that
   * shard streamed (several chunks). Its time is the node's. Not for
   * host nodes, folded outputs or worker partials. */
  sl_kernel_fn merge[SL_BACKEND_COUNT];
  /* Optional: variable-size outputs. For output `port` and a call over
   * `positions` scan positions, the most bytes the kernel may write (like
   * ZSTD_compressBound), or -1 for a fixed-size port. The kernel writes the
   * actual size into args.out_bytes[port]; consumers read it in
   * args.in_bytes. A whole output with combine CONCAT appends each chunk's
   * bytes; the planner sizes it from the bounds of all chunks, and the run's
   * output holds only what was written. The port's dtype is u8 (one item
   * axis), except an encoded stream's (sl_tensor_desc.encoding): its type is
   * that of the decoded data, its buffers hold the packed layout (tensor.h,
   * sl_packed_items) and its bound is sl_desc_encoded_bound. A streamed
   * variable-size port may hold several items per call in that layout too,
   * and must when it is a graph output: results.h5 keeps its items
   * (sl_h5_writer_ragged); its item axis is then the bound's bytes for one
   * position. The graph marks the port (sl_tensor_desc.variable). */
  int64_t (*out_bound)(const struct sl_node *n, int port, int64_t positions);
  /* Optional, for a stream source (a node with no inputs and one streamed
   * output): it can make its output's chunks on the host ahead of the
   * kernels, as ranges of memory it owns (sl_produce_args). On a device
   * backend the executor then runs produce in place of the node's kernel,
   * on a helper thread, and copies each chunk into a ring of two device
   * buffers that the plan holds (engine/exec/prefetch.h), so the copies
   * overlap the kernels of earlier chunks; a node with produce therefore
   * runs on every device backend without a kernel of its own there. The
   * CPU backend calls kernel[SL_BACKEND_CPU] as for any node. */
  sl_code (*produce)(sl_produce_args *a);
  /* Optional: ground truth and other provenance written with outputs. */
} sl_node_desc;

/* The node types a graph may use: per-family tables (nodes/<family>/
 * <family>_nodes.c), gathered by whoever builds graphs (the command line hands
 * nodes/registry.c's to sl_graph_build), so the engine never links to a node
 * by name. */
typedef struct sl_node_family {
  const char *name;
  const sl_node_desc *const *nodes;
  int count;
} sl_node_family;

typedef struct sl_node_registry {
  const sl_node_family *const *families;
  int n_families;
} sl_node_registry;

/* A family's table from its list of node names, one X(name) per node:
 *   #define BASIC_NODES(X) X(affine) X(clip) ...
 *   SL_NODE_FAMILY(basic, BASIC_NODES)
 * declares each sl_node_<name> (defined in nodes/<family>/<name>.c) and
 * defines sl_family_<family>. Adding a node is one X(name) line. */
#define SL_NODE_DECLARE_(name) extern const sl_node_desc sl_node_##name;
#define SL_NODE_ENTRY_(name) &sl_node_##name,
#define SL_NODE_FAMILY(family, LIST)                                                      \
  LIST(SL_NODE_DECLARE_)                                                                  \
  static const sl_node_desc *const family##_nodes[] = {LIST(SL_NODE_ENTRY_)};             \
  const sl_node_family sl_family_##family = {#family, family##_nodes, SL_COUNT_OF(family##_nodes)};

/* The descriptor of `type`, or NULL. */
const sl_node_desc *sl_registry_find(const sl_node_registry *r, const char *type);
/* Every descriptor, sorted by type; *count set. Caller frees the array.
 * NULL (and *count 0) when out of memory. */
const sl_node_desc **sl_registry_list(const sl_node_registry *r, int *count);

#endif
