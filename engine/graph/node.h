/* Node descriptors: everything about a node type, written once. The planner,
 * the executor and `sluice nodes` all read these. */
#ifndef SL_NODE_H
#define SL_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../core/status.h"
#include "../core/tensor.h"
#include "../pipeline/spec.h"

typedef struct sl_param_def {
  const char *name;
  sl_ptype type;
  const char *default_value; /* as YAML text; NULL = required */
  const char *doc;
} sl_param_def;

typedef struct sl_port_def {
  const char *name;
  const char *doc;
  const char *unit; /* recorded as an HDF5 attribute; NULL if none */
  bool optional;    /* inputs only */
} sl_port_def;

/* A resolved, typed parameter value. */
typedef struct sl_param_value {
  sl_ptype type;
  int64_t i;     /* INT */
  double f;      /* FLOAT */
  bool b;        /* BOOL */
  char *s;       /* STRING, PATH (PATH resolved relative to the pipeline file) */
  size_t n;      /* SHAPE, LIST */
  int64_t *ints; /* SHAPE */
  char **strs;   /* LIST items as text */
} sl_param_value;

/* Cost of a node for one chunk of `positions` scan positions (whole nodes:
 * positions = 1, for the whole run). */
typedef struct sl_node_cost {
  int64_t bytes_read;
  int64_t bytes_written;
  int64_t ops;
  int64_t workspace_bytes;   /* scratch the executor lends for one call */
  int64_t per_worker_bytes;  /* scratch the kernel allocates per worker thread */
  int64_t state_bytes;       /* what prepare() holds for the whole run */
  int64_t device_state_bytes; /* what the node holds in device memory for the
                                 whole run on a device backend (e.g. prefetch
                                 buffers); ignored on the CPU backend */
} sl_node_cost;

struct sl_node;
struct sl_graph;

typedef struct sl_kernel_args {
  sl_backend *backend;
  const struct sl_node *node;
  void *state;      /* node->state */
  int64_t chunk;    /* chunk index (0 for whole-phase nodes) */
  int64_t n_chunks;
  int64_t pos_start; /* first scan position of this chunk */
  int64_t pos_count; /* positions in this chunk (whole nodes: 1) */
  /* Per input/output port: data pointers. Streamed ports point at this chunk's
   * pos_count items; whole ports at the whole tensor. Unconnected optional
   * inputs are NULL. Reduction outputs (whole, fed by streamed inputs) are
   * zeroed by the executor before the first chunk and accumulate. */
  const void *in[8];
  void *out[8];
  void *workspace; /* cost().workspace_bytes of scratch, or NULL */
  sl_error *err;   /* the kernel fills this on failure */
  /* Where a device backend adds the device time of the kernels this call
   * enqueues, once they completed (CUDA events around the launcher); NULL
   * on the CPU backend, where the call's own time is the kernel time. */
  double *device_seconds;
} sl_kernel_args;

typedef struct sl_node_desc {
  const char *type;
  const char *doc;
  const sl_param_def *params;
  int n_params;
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
  /* The node runs on the host whatever the backend: sources that read files
   * or simulate, and small whole-tensor analyses. On a device backend the
   * executor moves its inputs and outputs through host staging buffers, and
   * the plan and report say so; its CPU kernel is used. */
  bool host;
  /* Optional: ground truth and other provenance written with outputs. */
} sl_node_desc;

/* Lookup in the registry (nodes/registry.c). */
const sl_node_desc *sl_node_find(const char *type);
/* All registered descriptors, sorted by type. */
const sl_node_desc *const *sl_node_all(int *count);

/* Accessors for node code: the value of the param named `name`. They assert the
 * name exists in the descriptor (a programmer error otherwise). */
int64_t sl_param_int(const struct sl_node *n, const char *name);
double sl_param_float(const struct sl_node *n, const char *name);
bool sl_param_bool(const struct sl_node *n, const char *name);
const char *sl_param_str(const struct sl_node *n, const char *name);
const sl_param_value *sl_param(const struct sl_node *n, const char *name);

#endif
