/* The typed graph: nodes with resolved params, edges from (node, output port)
 * to (node, input port), inferred tensor descriptors on every port, and the
 * phase each node runs in. Built from a spec; cycles, dangling references,
 * unknown types/params/ports and type mismatches are errors with location. */
#ifndef SL_GRAPH_H
#define SL_GRAPH_H

#include "engine/graph/node.h"

/* When a node runs relative to the stream of chunks. */
typedef enum sl_phase {
  SL_PHASE_PROLOGUE = 0, /* whole inputs only, before the first chunk */
  SL_PHASE_STREAM = 1,   /* once per chunk */
  SL_PHASE_EPILOGUE = 2  /* after the last chunk (reads reduction results) */
} sl_phase;

const char *sl_phase_name(sl_phase p);

#define SL_SRC_NONE (-1)  /* optional input left unconnected */
#define SL_SRC_INPUT (-2) /* a graph input (iterate bodies); port = input index */

typedef struct sl_edge_src {
  int node; /* producing node index, or SL_SRC_NONE / SL_SRC_INPUT */
  int port; /* output port of that node, or graph input index */
} sl_edge_src;

typedef struct sl_node {
  const sl_node_desc *desc; /* NULL for iterate nodes */
  char *id;
  sl_loc loc;
  sl_param_value *params; /* desc->n_params entries, in descriptor order */
  void *typed_params;     /* desc->params_size bytes filled by desc->params_bind */
  int n_in, n_out;
  sl_edge_src in_src[SL_MAX_PORTS];
  sl_tensor_desc in[SL_MAX_PORTS];
  sl_tensor_desc out[SL_MAX_PORTS];
  const char *out_names[SL_MAX_PORTS]; /* port names (descriptor's, or body outputs) */
  sl_phase phase; /* of the node's home pass */
  int pass;       /* home pass over the data (0 = first) */
  /* Stream nodes: the passes the node runs in. Its home pass, plus every later
   * pass in which a streamed consumer runs (the data is streamed again). */
  unsigned pass_mask;
  int level; /* topological level within its (pass, phase) */
  /* Bit k: output k is read by a node or is a graph output (set once the
   * graph is built, after infer): a kernel may skip work for unread ports. */
  unsigned out_used;
  /* Set by infer: bit k, input k is connected but the node will not read it
   * with these params (dpc's segments without the probe's params), so the
   * edge does not make its producer's output used. */
  unsigned in_unread;
  /* Set by infer: the kernel does nothing for a chunk of a stream, its
   * finalize does the work (write_png of a streamed image: drawn from
   * results.h5 after the last chunk). The executor skips those calls (and a
   * device backend the copies of their input) and the plan stages nothing
   * for them. */
  bool chunks_idle;
  void *state;
  /* What a device launcher keeps between the calls of one run (host-side
   * bookkeeping and pointers into the node's device table), built on its
   * first call; freed with dev_state_free when the executor takes the
   * node's device table back (the end of the run or of the iterate body's
   * run), or else by sl_graph_release. */
  void *dev_state;
  void (*dev_state_free)(void *dev_state);
  /* Provenance notes ("key: value") a node records about what it did, e.g.
   * the mask policy or why a dtype was widened; written with the outputs.
   * Two keys are also shown to the user by the command line: "warning"
   * (something looks wrong but the run went on) and "result" (a value the
   * run found that the user should see, e.g. a fitted disk). */
  int n_notes;
  char **notes;
  /* The files the node reads (a master file and each of its data files),
   * recorded by infer or prepare for report.json's input_files. */
  int n_reads;
  char **reads;
  /* A note or a read file could not be recorded (out of memory): the
   * callers of infer and prepare turn it into SL_ERR_NOMEM
   * (sl_node_records_check), so that the nodes' many notes need no error
   * path of their own. */
  bool records_lost;
  /* Work a kernel decided on from the data, which no plan could count
   * (dpc's parallax without the probe's params runs only where the CoM's
   * angle is weak): operations at the rate of the variant the node's cost
   * declares (sl_node_cost.decided_variant). report.json estimates them
   * once known, beside the plan's estimate (sl_node_decided_work). */
  int64_t decided_ops;
  /* The most of the state it makes only where the data decide
   * (sl_node_cost.decided_state_bytes) the kernel held at once, in the
   * bytes its cost counts (sl_node_decided_state). */
  int64_t decided_state_bytes;
  /* iterate nodes only */
  struct sl_graph *body;
  int64_t times;  /* iterations; with until_out, the most */
  int until_out;  /* body output (u8[1]) that stops the loop once nonzero, or -1 */
  int64_t expect; /* with until_out: the iterations the plan expects where no
                     earlier run's count is known (0: times) */
  int n_carry;
  int carry_in[SL_MAX_PORTS];  /* body input index fed by ... */
  int carry_out[SL_MAX_PORTS]; /* ... this body output on the next iteration */
} sl_node;

typedef struct sl_graph_output {
  char *name;
  int node, port;
  sl_loc loc;
} sl_graph_output;

#define SL_MAX_PASSES 32 /* a node's passes are bits of its unsigned pass_mask */

typedef struct sl_graph {
  int n_passes; /* passes over the streamed data (1 when nothing streams) */
  int n_nodes;
  sl_node *nodes; /* in a topological order */
  int n_outputs;
  sl_graph_output *outputs;
  int n_inputs; /* bodies: graph inputs */
  char **input_names;
  sl_tensor_desc input_desc[SL_MAX_PORTS];
  int n_levels;
  int scan_rank; /* axes of the acquisition's scan (0: nothing streams over it) */
  /* The stream each pass goes over (sl_tensor_desc.stream_axis: NULL is the
   * scan); a pass whose nodes stream nothing has NULL too. */
  const char *pass_axis[SL_MAX_PASSES];
  const sl_spec *spec; /* not owned */
  const sl_node_registry *registry; /* the node types it was built from; not owned */
} sl_graph;

/* Builds and type-checks the graph of a spec. `inputs` gives the descriptors
 * of graph inputs (for iterate bodies), NULL for a top-level pipeline. */
sl_code sl_graph_build(const sl_spec *spec, const sl_tensor_desc *inputs,
                       const sl_node_registry *registry, sl_graph **out, sl_error *err);
void sl_graph_free(sl_graph *g);
int sl_graph_find(const sl_graph *g, const char *id);
/* The node's type, or "iterate" for an iterate node. */
const char *sl_node_type_name(const sl_node *n);
/* Does every node (and body node) have a kernel for this backend? */
sl_code sl_graph_check_backend(const sl_graph *g, sl_backend_kind k, sl_error *err);

/* Records a provenance note on a node (from infer or prepare). Out of memory
 * sets n->records_lost. */
void sl_node_note(sl_node *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The unit of output `port` of node `node` (following SL_UNIT_OF_INPUT up
 * the edges), or NULL. */
const char *sl_graph_output_unit(const sl_graph *g, int node, int port);
/* How many leading axes of output `port` of node `node` index scan
 * positions: the stream axes, or for a scan image (scan_image_outputs) the
 * graph's scan axes. */
int sl_graph_output_scan_axes(const sl_graph *g, int node, int port);

/* The declared combine of output `port` when it is a reduction (a whole
 * output of a node that streams), else SL_COMBINE_NONE. */
sl_combine sl_node_out_combine(const sl_node *n, int port);
/* Whether output `port`'s declared combine is lent per worker of
 * parallel_for (sl_node_desc.worker_partial_outputs or worker_partials_of,
 * exact combines only). */
bool sl_node_worker_partial(const sl_node *n, int port);
/* Whether that partial is asked to be kept for a whole pass
 * (SL_WORKER_PARTIALS_PASS; the plan decides where it is). */
bool sl_node_pass_partial(const sl_node *n, int port);
/* Whether output `port` has no buffer: nothing reads it (sl_node.out_used)
 * and its node leaves it alone then (sl_node_desc.omit_unread_outputs).
 * The plan gives it 0 bytes and no slot; kernels see out[port] == NULL. */
bool sl_node_out_omitted(const sl_node *n, int port);
/* Whether output `port` of a node that streams is written by its finalize
 * alone (sl_node_desc.finalize_outputs): no chunk's call sees it. */
bool sl_node_out_finalize_only(const sl_node *n, int port);
/* The most bytes variable-size output `port` holds for `positions` scan
 * positions (sl_node_desc.out_bound), or -1 for a fixed-size port. */
int64_t sl_node_out_bound(const sl_node *n, int port, int64_t positions);

/* Appends a node of type `desc` with id `id` to a built graph, reading graph
 * output `output` on its input 0 like any consumer (its param `output` is
 * the output's name, the others their defaults): typed, phased and ordered
 * as sl_graph_build does. The run's writer nodes come in this way. */
sl_code sl_graph_add_output_reader(sl_graph *g, const sl_node_desc *desc, const char *id, int output,
                                   sl_error *err);
/* Does a sink node (sl_node_desc.sink) read graph output o? */
bool sl_graph_output_written(const sl_graph *g, int o);

/* Records operations a kernel decided on from the data (sl_node.decided_ops);
 * its cost declares the most of them and their rate's variant
 * (sl_node_cost.decided_ops_most, decided_variant). */
void sl_node_decided_work(sl_node *n, int64_t ops);
/* Records that the kernel holds `bytes` (as its cost counts them) of the
 * state its cost declares as decided from the data
 * (sl_node_cost.decided_state_bytes, at most): report.json's planned peak
 * counts the most it held. */
void sl_node_decided_state(sl_node *n, int64_t bytes);

/* Records that the node reads `path` (once per path). Out of memory sets
 * n->records_lost. */
void sl_node_reads_file(sl_node *n, const char *path);
/* SL_ERR_NOMEM naming the node when one of its notes or read files was lost. */
sl_code sl_node_records_check(const sl_node *n, sl_error *err);

/* The provenance of one output: every node it depends on, upstream first,
 * with type, params and notes, one line each. Caller frees; NULL when out of
 * memory. */
char *sl_graph_provenance(const sl_graph *g, int node);

/* Typed param access used by descriptors' infer; also exposed for tests. */
sl_code sl_param_convert(const sl_param_def *def, const sl_yaml *value, const char *base_dir,
                         sl_param_value *out, sl_error *err);
void sl_param_value_free(sl_param_value *v);
/* Fills node->typed_params from node->params with the descriptor's generated
 * params_bind (graph building and test harnesses call it after conversion);
 * false when out of memory. */
bool sl_node_bind_typed_params(sl_node *n);

#endif
