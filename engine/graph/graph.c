/* Graph construction from a spec: node types and params checked against the
 * descriptors, edges resolved, cycles found, types and shapes inferred, phases
 * and levels assigned. Every error carries the place in the pipeline file. */
#include "engine/graph/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"

const char *sl_phase_name(sl_phase p) {
  switch (p) {
    case SL_PHASE_PROLOGUE: return "prologue";
    case SL_PHASE_STREAM: return "stream";
    case SL_PHASE_EPILOGUE: return "epilogue";
  }
  return "?";
}

const char *sl_node_type_name(const sl_node *n) { return n->desc ? n->desc->type : "iterate"; }

static sl_code at(sl_error *err, sl_loc loc, const char *node_id) {
  sl_error_at(err, loc.file, loc.line, loc.col);
  sl_error_node(err, node_id);
  return err->code;
}

int sl_graph_find(const sl_graph *g, const char *id) {
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].id, id)) return i;
  return -1;
}

void sl_node_decided_work(sl_node *n, int64_t ops) { n->decided_ops += ops; }
void sl_node_decided_state(sl_node *n, int64_t bytes) {
  if (bytes > n->decided_state_bytes) n->decided_state_bytes = bytes;
}

void sl_node_note(sl_node *n, const char *key, const char *fmt, ...) {
  char value[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(value, sizeof value, fmt, ap);
  va_end(ap);
  char line[1200];
  snprintf(line, sizeof line, "%s: %s", key, value);
  /* A note set again (a second infer or prepare) replaces the first. */
  size_t klen = strlen(key);
  for (int i = 0; i < n->n_notes; i++)
    if (!strncmp(n->notes[i], key, klen) && n->notes[i][klen] == ':') {
      char *copy = sl_strdup(line);
      if (!copy) {
        n->records_lost = true;
        return;
      }
      free(n->notes[i]);
      n->notes[i] = copy;
      return;
    }
  char *copy = sl_strdup(line);
  if (!copy || !sl_resize(&n->notes, (size_t)n->n_notes + 1, sizeof *n->notes)) {
    free(copy);
    n->records_lost = true;
    return;
  }
  n->notes[n->n_notes++] = copy;
}

sl_code sl_node_records_check(const sl_node *n, sl_error *err) {
  if (!n->records_lost) return SL_OK;
  sl_fail_nomem(err, "a note of the node");
  sl_error_node(err, n->id);
  return SL_ERR_NOMEM;
}

const char *sl_graph_output_unit(const sl_graph *g, int node, int port) {
  for (int hops = 0; hops < g->n_nodes && node >= 0; hops++) {
    const sl_node *n = &g->nodes[node];
    if (!n->desc || port >= n->desc->n_outputs) return NULL;
    const char *unit = n->desc->outputs[port].unit;
    if (!unit || strcmp(unit, SL_UNIT_OF_INPUT)) return unit;
    if (n->n_in < 1) return NULL;
    node = n->in_src[0].node;
    port = n->in_src[0].port;
  }
  return NULL;
}

int sl_graph_output_scan_axes(const sl_graph *g, int node, int port) {
  const sl_node *n = &g->nodes[node];
  if (n->out[port].stream_rank) return n->out[port].stream_rank;
  if (n->desc && (n->desc->scan_image_outputs >> port & 1u) && n->out[port].rank >= g->scan_rank)
    return g->scan_rank;
  return 0;
}

sl_combine sl_node_out_combine(const sl_node *n, int port) {
  if (!n->desc || port >= n->desc->n_outputs || n->phase != SL_PHASE_STREAM || n->out[port].stream_rank)
    return SL_COMBINE_NONE;
  return n->desc->combine[port];
}

/* The node's declared lending of output `port`'s partial per worker, exact
 * or not (check_port_contracts refuses inexact ones). */
static sl_worker_partials declared_worker_partials(const sl_node *n, int port) {
  if (!n->desc) return SL_WORKER_PARTIALS_NONE;
  if (n->desc->worker_partials_of) return n->desc->worker_partials_of(n, port);
  return (n->desc->worker_partial_outputs >> port & 1u) ? SL_WORKER_PARTIALS_CALL : SL_WORKER_PARTIALS_NONE;
}

bool sl_node_worker_partial(const sl_node *n, int port) {
  return declared_worker_partials(n, port) != SL_WORKER_PARTIALS_NONE &&
         sl_combine_exact(sl_node_out_combine(n, port), n->out[port].dtype);
}

bool sl_node_pass_partial(const sl_node *n, int port) {
  return declared_worker_partials(n, port) == SL_WORKER_PARTIALS_PASS && sl_node_worker_partial(n, port);
}

bool sl_node_out_omitted(const sl_node *n, int port) {
  return n->desc && (n->desc->omit_unread_outputs >> port & 1u) && !(n->out_used >> port & 1u);
}

bool sl_node_out_finalize_only(const sl_node *n, int port) {
  return n->desc && (n->desc->finalize_outputs >> port & 1u) && n->phase == SL_PHASE_STREAM;
}

int64_t sl_node_out_bound(const sl_node *n, int port, int64_t positions) {
  if (!n->desc || !n->desc->out_bound) return -1;
  return n->desc->out_bound(n, port, positions);
}

/* A node-supplied merge (SL_COMBINE_MERGE) of output k: a merge kernel for
 * every backend the node has a kernel for, and none of what the executor
 * does only for element-wise combines (a kernel folding into the
 * accumulator, partials per worker), a variable size, or a host node's
 * staging (its CPU merge would need the accumulator on the host). */
static sl_code check_node_merge(const sl_node *n, int k, bool variable, sl_error *err) {
  const sl_node_desc *d = n->desc;
  for (int b = 0; b < SL_BACKEND_COUNT; b++)
    if (d->kernel[b] && !d->merge[b])
      return sl_fail(err, SL_ERR_INTERNAL, "output '%s' combines by the node's merge, which has no %s kernel",
                     n->out_names[k], sl_backend_kind_name((sl_backend_kind)b));
  const char *why = (d->fold_outputs >> k & 1u) ? "is folded by the kernel"
                    : declared_worker_partials(n, k) != SL_WORKER_PARTIALS_NONE ? "asks for per-worker partials"
                    : variable ? "has a variable size"
                    : d->host ? "belongs to a host node"
                    : NULL;
  if (why)
    return sl_fail(err, SL_ERR_INTERNAL, "output '%s' combines by the node's merge but %s", n->out_names[k], why);
  return SL_OK;
}

/* A node's first connected streamed input, or NULL. */
static const sl_tensor_desc *first_streamed_input(const sl_node *n) {
  for (int q = 0; q < n->n_in; q++)
    if (n->in[q].stream_rank && n->in_src[q].node != SL_SRC_NONE) return &n->in[q];
  return NULL;
}

/* The descriptor that carries a streaming node's scan: its first connected
 * streamed input, else (a source) its first streamed output; NULL if none. */
static const sl_tensor_desc *node_scan(const sl_node *n) {
  const sl_tensor_desc *in = first_streamed_input(n);
  if (in) return in;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k].stream_rank) return &n->out[k];
  return NULL;
}

/* Whether d's last axes are the scan axes of `scan` ([item.., scan..]). */
static bool scan_axes_last(const sl_tensor_desc *d, const sl_tensor_desc *scan) {
  const int s = scan->stream_rank;
  if (d->rank < s) return false;
  for (int i = 0; i < s; i++)
    if (d->dims[d->rank - s + i] != scan->dims[i]) return false;
  return true;
}

/* Declared reductions and variable-size ports must be what the executor can
 * merge: a combine defined for the dtype; a fixed-size CONCAT whose whole
 * output is the scan's positions of an item (like gather's), or
 * CONCAT_SCAN_LAST whose last axes are the scan's; a variable-size
 * port of u8 bytes, one axis per call or whole, or an encoded stream (a
 * variable-size streamed port whose type is that of its decoded data). */
static sl_code check_port_contracts(const sl_graph *g, const sl_node *n, sl_error *err) {
  for (int k = 0; k < n->n_out; k++) {
    const sl_tensor_desc *d = &n->out[k];
    sl_combine c = sl_node_out_combine(n, k);
    bool variable = sl_node_out_bound(n, k, 1) >= 0;
    sl_code rc = sl_combine_check(c, d->dtype, err);
    /* The executor merges what accumulates across chunks, so that it can
     * merge it per device and per rank as well: a node that streams has no
     * whole output outside a declared combine. */
    const bool at_finalize = sl_node_out_finalize_only(n, k);
    if (rc == SL_OK && n->desc && n->phase == SL_PHASE_STREAM && !d->stream_rank && c == SL_COMBINE_NONE &&
        !at_finalize)
      rc = sl_fail(err, SL_ERR_INTERNAL,
                   "whole output '%s' of a node that streams declares no combine (sl_node_desc.combine: "
                   "how the executor merges its chunks' shares; finalize_outputs: written at finalize alone)",
                   n->out_names[k]);
    if (rc == SL_OK && at_finalize && c != SL_COMBINE_NONE)
      rc = sl_fail(err, SL_ERR_INTERNAL, "output '%s' is written at finalize alone but declares combine %s",
                   n->out_names[k], sl_combine_name(c));
    for (int b = 0; rc == SL_OK && at_finalize && b < SL_BACKEND_COUNT; b++)
      if (n->desc->kernel[b] && !n->desc->finalize[b])
        rc = sl_fail(err, SL_ERR_INTERNAL, "output '%s' is written at finalize alone, which has no %s kernel",
                     n->out_names[k], sl_backend_kind_name((sl_backend_kind)b));
    if (rc == SL_OK && declared_worker_partials(n, k) != SL_WORKER_PARTIALS_NONE && sl_combine_elementwise(c) &&
        !sl_combine_exact(c, d->dtype))
      rc = sl_fail(err, SL_ERR_INTERNAL,
                   "output '%s' asks for per-worker partials, but merging %s of %s values depends on how "
                   "the range was split",
                   n->out_names[k], sl_combine_name(c), sl_dtype_name(d->dtype));
    if (rc == SL_OK && c == SL_COMBINE_MERGE) rc = check_node_merge(n, k, variable, err);
    /* An encoded stream is a variable-size output whose descriptor tells
     * what its packed items decode to. */
    bool encoded = d->encoding != SL_ENC_NONE;
    if (rc == SL_OK && encoded && (!variable || !d->stream_rank))
      rc = sl_fail(err, SL_ERR_INTERNAL, "encoded output '%s' must be a streamed variable-size output (out_bound)",
                   n->out_names[k]);
    if (rc == SL_OK && variable && !encoded && (d->dtype != SL_U8 || d->rank != d->stream_rank + 1))
      rc = sl_fail(err, SL_ERR_INTERNAL, "variable-size output '%s' must be u8 bytes with one item axis",
                   n->out_names[k]);
    if (rc == SL_OK && variable && !d->stream_rank && c != SL_COMBINE_CONCAT)
      rc = sl_fail(err, SL_ERR_INTERNAL, "variable-size whole output '%s' must combine by concat",
                   n->out_names[k]);
    if (rc == SL_OK && sl_combine_concat(c) && variable && c != SL_COMBINE_CONCAT)
      rc = sl_fail(err, SL_ERR_INTERNAL, "variable-size output '%s' cannot combine by %s", n->out_names[k],
                   sl_combine_name(c));
    if (rc == SL_OK && sl_combine_concat(c) && !variable) {
      const sl_tensor_desc *scan = node_scan(n);
      int64_t positions = scan ? sl_desc_positions(scan) : 0;
      if (positions <= 0 || sl_desc_elems(d) % positions != 0)
        rc = sl_fail(err, SL_ERR_INTERNAL,
                     "output '%s' combines by %s but does not hold a whole number of items per scan position",
                     n->out_names[k], sl_combine_name(c));
      else if (c == SL_COMBINE_CONCAT_SCAN_LAST && !scan_axes_last(d, scan))
        rc = sl_fail(err, SL_ERR_INTERNAL, "output '%s' combines by %s but its last axes are not the scan's",
                     n->out_names[k], sl_combine_name(c));
    }
    if (rc != SL_OK) {
      sl_error_node(err, n->id);
      return rc;
    }
  }
  (void)g;
  return SL_OK;
}

void sl_node_reads_file(sl_node *n, const char *path) {
  for (int i = 0; i < n->n_reads; i++)
    if (!strcmp(n->reads[i], path)) return;
  char *copy = sl_strdup(path);
  if (!copy || !sl_resize(&n->reads, (size_t)n->n_reads + 1, sizeof *n->reads)) {
    free(copy);
    n->records_lost = true;
    return;
  }
  n->reads[n->n_reads++] = copy;
}

static void param_text(FILE *f, const sl_param_def *def, const sl_param_value *v) {
  switch (v->type) {
    case SL_PT_INT: fprintf(f, "%lld", (long long)v->i); break;
    case SL_PT_FLOAT: fprintf(f, "%.17g", v->f); break;
    case SL_PT_BOOL: fputs(v->b ? "true" : "false", f); break;
    case SL_PT_STRING:
    case SL_PT_PATH: fprintf(f, "\"%s\"", v->s ? v->s : ""); break;
    case SL_PT_SHAPE:
      fputc('[', f);
      for (size_t i = 0; i < v->n; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)v->ints[i]);
      fputc(']', f);
      break;
    case SL_PT_LIST:
      fputc('[', f);
      for (size_t i = 0; i < v->n; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", v->strs[i]);
      fputc(']', f);
      break;
  }
  (void)def;
}

static void provenance_rec(const sl_graph *g, int node, bool *seen, FILE *f) {
  if (node < 0 || seen[node]) return;
  seen[node] = true;
  const sl_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_in; k++) provenance_rec(g, n->in_src[k].node, seen, f);
  fprintf(f, "%s (%s)", n->id, sl_node_type_name(n));
  if (n->desc && n->desc->n_params) {
    fputs(" {", f);
    for (int p = 0; p < n->desc->n_params; p++) {
      fprintf(f, "%s%s: ", p ? ", " : "", n->desc->params[p].name);
      param_text(f, &n->desc->params[p], &n->params[p]);
    }
    fputc('}', f);
  }
  if (n->body) fprintf(f, " {times: %lld}", (long long)n->times);
  for (int i = 0; i < n->n_notes; i++) fprintf(f, "; %s", n->notes[i]);
  fputc('\n', f);
}

char *sl_graph_provenance(const sl_graph *g, int node) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  bool *seen = sl_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *seen);
  if (seen) provenance_rec(g, node, seen, f);
  free(seen);
  if (fclose(f) != 0 || !seen) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void free_node(sl_node *n) {
  for (int i = 0; i < n->n_notes; i++) free(n->notes[i]);
  free(n->notes);
  for (int i = 0; i < n->n_reads; i++) free(n->reads[i]);
  free(n->reads);
  if (n->desc && n->params)
    for (int p = 0; p < n->desc->n_params; p++) sl_param_value_free(&n->params[p]);
  free(n->params);
  free(n->typed_params);
  free(n->id);
  sl_graph_free(n->body);
}

void sl_graph_free(sl_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
  free(g->nodes);
  for (int i = 0; i < g->n_outputs; i++) free(g->outputs[i].name);
  free(g->outputs);
  for (int i = 0; i < g->n_inputs; i++) free(g->input_names[i]);
  free(g->input_names);
  free(g);
}

/* ---- params ------------------------------------------------------------- */

static sl_code bind_params(sl_node *n, const sl_node_spec *ns, sl_error *err) {
  const sl_node_desc *d = n->desc;
  n->params = sl_calloc((size_t)(d->n_params ? d->n_params : 1), sizeof *n->params);
  bool *given = sl_calloc((size_t)(d->n_params ? d->n_params : 1), sizeof *given);
  if (!n->params || !given) {
    free(given);
    sl_fail_nomem(err, "the params of the node");
    return at(err, ns->loc, n->id);
  }
  char base_dir[4096];
  sl_dirname(ns->loc.file ? ns->loc.file : ".", base_dir, sizeof base_dir);
  sl_code rc = SL_OK;
  const sl_yaml *pm = ns->params;
  for (size_t k = 0; pm && k < pm->n && rc == SL_OK; k++) {
    int idx = -1;
    for (int p = 0; p < d->n_params; p++)
      if (!strcmp(d->params[p].name, pm->keys[k])) idx = p;
    if (idx < 0) {
      const char *names[64];
      int nn = d->n_params < 64 ? d->n_params : 64;
      for (int p = 0; p < nn; p++) names[p] = d->params[p].name;
      const char *best = sl_closest(pm->keys[k], names, (size_t)nn);
      sl_fail(err, SL_ERR_PIPELINE, "node type '%s' has no param '%s'%s%s%s", d->type,
              pm->keys[k], best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "");
      rc = at(err, pm->key_locs[k], n->id);
      break;
    }
    rc = sl_param_convert(&d->params[idx], pm->items[k], base_dir, &n->params[idx], err);
    if (rc != SL_OK) {
      at(err, pm->items[k]->loc, n->id);
      break;
    }
    given[idx] = true;
  }
  for (int p = 0; p < d->n_params && rc == SL_OK; p++) {
    if (given[p]) continue;
    if (!d->params[p].default_value) {
      sl_fail(err, SL_ERR_PIPELINE, "node type '%s' needs param '%s' (%s)", d->type,
              d->params[p].name, d->params[p].doc ? d->params[p].doc : "no default");
      rc = at(err, ns->loc, n->id);
      break;
    }
    /* Defaults are YAML text; an empty default is the empty string. */
    sl_yaml *dv = NULL;
    const char *text = d->params[p].default_value;
    sl_loc default_loc = {sl_intern("<default>"), 1, 1};
    if (!default_loc.file || (!text[0] && !(dv = sl_yaml_new_scalar("", default_loc))))
      rc = sl_fail_nomem(err, "a param default");
    else if (text[0])
      rc = sl_yaml_load_string(text, strlen(text), "<default>", &dv, err);
    if (rc == SL_OK) rc = sl_param_convert(&d->params[p], dv, base_dir, &n->params[p], err);
    sl_yaml_free(dv);
    if (rc == SL_ERR_NOMEM) {
      at(err, ns->loc, n->id);
      break;
    }
    if (rc != SL_OK) {
      sl_fail(err, SL_ERR_INTERNAL, "bad default '%s' for param '%s' of node type '%s'",
              text, d->params[p].name, d->type);
      break;
    }
  }
  free(given);
  if (rc == SL_OK && !sl_node_bind_typed_params(n)) {
    sl_fail_nomem(err, "the typed params of the node");
    rc = at(err, ns->loc, n->id);
  }
  return rc;
}

/* ---- edges ---------------------------------------------------------------- */

static int find_output_port(const sl_node *n, const char *port) {
  for (int k = 0; k < n->n_out; k++)
    if (!strcmp(n->out_names[k], port)) return k;
  return -1;
}

static sl_code no_such_port(sl_error *err, const sl_node *n, const char *port, const char *what,
                            const char *const *names, int count, sl_loc loc, const char *user) {
  const char *best = sl_closest(port, names, (size_t)count);
  sl_fail(err, SL_ERR_PIPELINE, "node '%s' (%s) has no %s port '%s'%s%s%s", n->id,
          sl_node_type_name(n), what, port, best ? " (did you mean '" : "",
          best ? best : "", best ? "'?)" : "");
  return at(err, loc, user);
}

/* Resolves a reference to (node, port) or (SL_SRC_INPUT, index). */
static sl_code resolve_ref(sl_graph *g, const sl_ref *r, const char *user, sl_edge_src *src,
                           sl_error *err) {
  if (!strcmp(r->node, "inputs")) {
    for (int i = 0; i < g->n_inputs; i++)
      if (!strcmp(g->input_names[i], r->port)) {
        src->node = SL_SRC_INPUT;
        src->port = i;
        return SL_OK;
      }
    sl_fail(err, SL_ERR_PIPELINE, "'inputs.%s' is not a declared pipeline input", r->port);
    return at(err, r->loc, user);
  }
  int ni = sl_graph_find(g, r->node);
  if (ni < 0) {
    sl_fail(err, SL_ERR_PIPELINE, "reference to unknown node '%s'", r->node);
    return at(err, r->loc, user);
  }
  int port = find_output_port(&g->nodes[ni], r->port);
  if (port < 0)
    return no_such_port(err, &g->nodes[ni], r->port, "output", g->nodes[ni].out_names,
                        g->nodes[ni].n_out, r->loc, user);
  src->node = ni;
  src->port = port;
  return SL_OK;
}

/* ---- building ---------------------------------------------------------------- */

/* A node of a registered type: its ports as the descriptor declares them. */
static void take_desc(sl_node *n, const sl_node_desc *d) {
  n->desc = d;
  n->n_in = d->n_inputs;
  n->n_out = d->n_outputs;
  for (int k = 0; k < n->n_out; k++) n->out_names[k] = d->outputs[k].name;
}

static sl_code make_node(sl_graph *g, int i, const sl_node_spec *ns, sl_error *err) {
  sl_node *n = &g->nodes[i];
  n->id = sl_strdup(ns->id);
  n->loc = ns->loc;
  if (!n->id) {
    sl_fail_nomem(err, "a node id");
    return at(err, ns->loc, ns->id);
  }
  for (int k = 0; k < SL_MAX_PORTS; k++) n->in_src[k] = (sl_edge_src){SL_SRC_NONE, 0};
  if (!strcmp(ns->type, "iterate")) {
    n->times = ns->times;
    n->expect = ns->expect;
    n->n_in = (int)ns->body->n_inputs;
    n->n_out = (int)ns->body->n_outputs;
    if (n->n_in > SL_MAX_PORTS || n->n_out > SL_MAX_PORTS) {
      sl_fail(err, SL_ERR_PIPELINE, "an iterate body has at most %d inputs and %d outputs, this one %d and %d",
              SL_MAX_PORTS, SL_MAX_PORTS, n->n_in, n->n_out);
      return at(err, ns->loc, n->id);
    }
    for (int k = 0; k < n->n_out; k++) n->out_names[k] = ns->body->outputs[k].name;
    return SL_OK;
  }
  n->desc = sl_registry_find(g->registry, ns->type);
  if (!n->desc) {
    int count;
    const sl_node_desc **all = sl_registry_list(g->registry, &count);
    const char *names[256];
    for (int k = 0; k < count && k < 256; k++) names[k] = all[k]->type;
    const char *best = sl_closest(ns->type, names, (size_t)(count < 256 ? count : 256));
    free(all); /* NULL (count 0) when out of memory: no suggestion */
    sl_fail(err, SL_ERR_PIPELINE, "unknown node type '%s'%s%s%s (see `sluice nodes`)", ns->type,
            best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "");
    return at(err, ns->loc, n->id);
  }
  if (n->desc->n_inputs > SL_MAX_PORTS || n->desc->n_outputs > SL_MAX_PORTS) {
    sl_fail(err, SL_ERR_INTERNAL, "node type '%s' declares %d inputs and %d outputs; a node has at most %d of each",
            ns->type, n->desc->n_inputs, n->desc->n_outputs, SL_MAX_PORTS);
    return at(err, ns->loc, n->id);
  }
  /* The writers are the run's: one per output, bound to its results.h5 and
   * folder (sl_graph_add_writers); a pipeline names outputs instead. */
  if (n->desc->sink) {
    sl_fail(err, SL_ERR_PIPELINE,
            "'%s' nodes are added by `sluice run` for each output; name the port under `outputs:` instead",
            ns->type);
    return at(err, ns->loc, n->id);
  }
  take_desc(n, n->desc);
  return bind_params(n, ns, err);
}

static sl_code connect_node(sl_graph *g, int i, const sl_node_spec *ns, sl_error *err) {
  sl_node *n = &g->nodes[i];
  for (size_t b = 0; b < ns->n_inputs; b++) {
    const sl_input_binding *ib = &ns->inputs[b];
    int k = -1;
    const char *names[SL_MAX_PORTS];
    for (int p = 0; p < n->n_in; p++) {
      names[p] = n->desc ? n->desc->inputs[p].name : ns->body->inputs[p];
      if (!strcmp(names[p], ib->name)) k = p;
    }
    if (k < 0) return no_such_port(err, n, ib->name, "input", names, n->n_in, ib->ref.loc, n->id);
    sl_code rc = resolve_ref(g, &ib->ref, n->id, &n->in_src[k], err);
    if (rc != SL_OK) return rc;
  }
  for (int p = 0; p < n->n_in; p++) {
    bool optional = n->desc && n->desc->inputs[p].optional;
    if (n->in_src[p].node == SL_SRC_NONE && !optional) {
      sl_fail(err, SL_ERR_PIPELINE, "input '%s' of node '%s' is not connected",
              n->desc ? n->desc->inputs[p].name : ns->body->inputs[p], n->id);
      return at(err, ns->loc, n->id);
    }
  }
  return SL_OK;
}

/* Kahn's algorithm; on a cycle, names the nodes that are part of it. */
static sl_code topo_order(sl_graph *g, int *order, sl_error *err) {
  int n = g->n_nodes;
  int *indeg = sl_calloc((size_t)n, sizeof *indeg);
  if (!indeg) return sl_fail_nomem(err, "the order of the nodes");
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in_src[k].node >= 0) indeg[i]++;
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) order[tail++] = i;
  while (head < tail) {
    int u = order[head++];
    for (int i = 0; i < n; i++)
      for (int k = 0; k < g->nodes[i].n_in; k++)
        if (g->nodes[i].in_src[k].node == u && --indeg[i] == 0) order[tail++] = i;
  }
  sl_code rc = SL_OK;
  if (tail < n) {
    char names[512] = "";
    int first = -1;
    for (int i = 0; i < n; i++)
      if (indeg[i] > 0) {
        if (first < 0) first = i;
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s'%s'", len ? ", " : "", g->nodes[i].id);
      }
    sl_fail(err, SL_ERR_PIPELINE, "the graph has a cycle through nodes %s", names);
    rc = at(err, g->nodes[first].loc, NULL);
  }
  free(indeg);
  return rc;
}

static bool same_stream(const sl_tensor_desc *a, const sl_tensor_desc *b) {
  if (a->stream_rank != b->stream_rank || !sl_desc_same_axis(a, b)) return false;
  for (int i = 0; i < a->stream_rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static sl_code infer_iterate(sl_graph *g, sl_node *n, const sl_node_spec *ns, sl_error *err) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k].stream_rank) {
      sl_fail(err, SL_ERR_PIPELINE, "iterate body input '%s' is streamed; iterate works on whole tensors",
              ns->body->inputs[k]);
      return at(err, ns->loc, n->id);
    }
  sl_code rc = sl_graph_build(ns->body, n->in, g->registry, &n->body, err);
  if (rc != SL_OK) {
    sl_error_node(err, n->id);
    return rc;
  }
  /* A body may stream (each iteration is then passes over its own scan, e.g.
   * k passes of a running statistic over a table), but what leaves an
   * iteration is whole: carried values and the loop's results. */
  for (int k = 0; k < n->n_out; k++) {
    const sl_graph_output *o = &n->body->outputs[k];
    n->out[k] = o->node == SL_SRC_INPUT ? n->in[o->port] : n->body->nodes[o->node].out[o->port];
    if (n->out[k].stream_rank) {
      sl_fail(err, SL_ERR_PIPELINE,
              "iterate body output '%s' is streamed; what leaves a loop is whole (e.g. a sum over "
              "the body's scan)",
              n->out_names[k]);
      return at(err, o->loc, n->id);
    }
  }
  n->until_out = -1;
  if (ns->until) {
    for (int k = 0; k < n->n_out; k++)
      if (!strcmp(n->out_names[k], ns->until)) n->until_out = k;
    const sl_tensor_desc *u = n->until_out >= 0 ? &n->out[n->until_out] : NULL;
    if (!u || u->dtype != SL_U8 || sl_desc_elems(u) != 1) {
      char a[128] = "nothing";
      if (u) sl_desc_format(u, a, sizeof a);
      sl_fail(err, SL_ERR_PIPELINE,
              "until '%s' must be a one-element u8 flag (e.g. a converged node's output), found %s",
              ns->until, a);
      return at(err, ns->until_loc, n->id);
    }
  }
  n->n_carry = (int)ns->n_carry;
  for (size_t c = 0; c < ns->n_carry; c++) {
    int ci = -1, co = -1;
    for (int k = 0; k < n->n_in; k++)
      if (!strcmp(ns->body->inputs[k], ns->carry[c])) ci = k;
    for (int k = 0; k < n->n_out; k++)
      if (!strcmp(n->out_names[k], ns->carry[c])) co = k;
    if (ci < 0 || co < 0) {
      sl_fail(err, SL_ERR_PIPELINE, "carried value '%s' must be both a body input and a body output",
              ns->carry[c]);
      return at(err, ns->loc, n->id);
    }
    if (n->out[co].dtype != n->in[ci].dtype || !sl_desc_equal_shape(&n->out[co], &n->in[ci])) {
      char a[128], b[128];
      sl_desc_format(&n->in[ci], a, sizeof a);
      sl_desc_format(&n->out[co], b, sizeof b);
      sl_fail(err, SL_ERR_PIPELINE, "carried value '%s' enters the body as %s but leaves as %s",
              ns->carry[c], a, b);
      return at(err, ns->loc, n->id);
    }
    n->carry_in[c] = ci;
    n->carry_out[c] = co;
  }
  (void)g;
  return SL_OK;
}

/* When a node runs: a (pass, phase) pair, ordered pass first. Anything
 * touching a streamed port runs per chunk (stream). A whole node runs as soon
 * as its inputs exist: before the stream (prologue) or after it (epilogue).
 * A stream node that reads a whole result made after a pass (a reduction or an
 * epilogue result) runs in the next pass over the data; the stream nodes that
 * feed it run again in that pass. */
static int time_of(sl_phase phase, int pass) { return pass * 3 + (int)phase; }

/* The streams met so far: one reference descriptor per stream (axis name),
 * whose scan axes every later port on that stream must repeat. */
typedef struct stream_refs {
  const sl_tensor_desc *ref[SL_MAX_PASSES];
  int n;
} stream_refs;

/* A node's streamed outputs belong to the stream of its streamed inputs
 * (nodes build descriptors without naming streams); a node without
 * streamed inputs (a source, the stream node) names its own. */
static void inherit_stream_axis(sl_node *n) {
  const sl_tensor_desc *in = first_streamed_input(n);
  for (int k = 0; k < n->n_out && in; k++)
    if (n->out[k].stream_rank) n->out[k].stream_axis = in->stream_axis;
}

/* Which outputs are variable-size (out_bound), in their descriptors, so
 * that consumers see it in their inputs; set for every port both ways, as
 * an infer may copy a variable-size input's descriptor to a fixed output. */
static void mark_variable_outputs(sl_node *n) {
  for (int k = 0; k < n->n_out; k++) n->out[k].variable = sl_node_out_bound(n, k, 1) >= 0;
}

/* Every streamed port of the node is on one stream, with that stream's scan
 * axes; *axis is the stream's descriptor (NULL when nothing streams). */
static sl_code check_streams(sl_node *n, stream_refs *refs, const sl_tensor_desc **axis,
                             sl_error *err) {
  *axis = NULL;
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    const sl_tensor_desc *d = k < n->n_in ? &n->in[k] : &n->out[k - n->n_in];
    if (k < n->n_in && n->in_src[k].node == SL_SRC_NONE) continue;
    if (!d->stream_rank) continue;
    if (*axis && !sl_desc_same_axis(*axis, d)) {
      sl_fail(err, SL_ERR_PIPELINE, "node mixes data streamed over '%s' and over '%s'",
              sl_desc_axis_name(*axis), sl_desc_axis_name(d));
      return at(err, n->loc, n->id);
    }
    if (!*axis) *axis = d;
    int r = 0;
    while (r < refs->n && !sl_desc_same_axis(refs->ref[r], d)) r++;
    if (r == refs->n) {
      if (refs->n == SL_MAX_PASSES) {
        sl_fail(err, SL_ERR_PIPELINE, "more than %d streams", SL_MAX_PASSES);
        return at(err, n->loc, n->id);
      }
      refs->ref[refs->n++] = d;
    } else if (!same_stream(refs->ref[r], d)) {
      char a[128], b[128];
      sl_desc_format(refs->ref[r], a, sizeof a);
      sl_desc_format(d, b, sizeof b);
      sl_fail(err, SL_ERR_PIPELINE,
              "all streamed data must share one scan: %s does not match the scan of %s", b, a);
      return at(err, n->loc, n->id);
    }
  }
  return SL_OK;
}

static sl_code assign_phase(sl_graph *g, sl_node *n, stream_refs *refs, bool pass_taken[],
                            sl_error *err) {
  bool streamed = false;
  for (int k = 0; k < n->n_out; k++) streamed |= n->out[k].stream_rank > 0;
  int pass = 0, ready = time_of(SL_PHASE_PROLOGUE, 0); /* when every input exists */
  for (int k = 0; k < n->n_in; k++) {
    const sl_edge_src s = n->in_src[k];
    if (s.node == SL_SRC_NONE) continue;
    streamed |= n->in[k].stream_rank > 0;
    if (s.node < 0) continue;
    const sl_node *p = &g->nodes[s.node];
    int t;
    if (p->out[s.port].stream_rank) {
      t = time_of(SL_PHASE_STREAM, p->pass);
      if (p->pass > pass) pass = p->pass;
    } else if (p->phase == SL_PHASE_PROLOGUE) {
      t = time_of(SL_PHASE_PROLOGUE, p->pass);
      if (p->pass > pass) pass = p->pass;
    } else { /* a reduction or an epilogue result: after pass p->pass */
      t = time_of(SL_PHASE_EPILOGUE, p->pass);
      if (p->pass + 1 > pass) pass = p->pass + 1;
    }
    if (t > ready) ready = t;
  }
  const sl_tensor_desc *axis = NULL;
  sl_code rc = check_streams(n, refs, &axis, err);
  if (rc != SL_OK) return rc;
  /* A pass streams one stream: a node on another goes to a later pass. */
  while (axis && pass < SL_MAX_PASSES && pass_taken[pass] &&
         strcmp(g->pass_axis[pass] ? g->pass_axis[pass] : "scan", sl_desc_axis_name(axis)))
    pass++;
  if (axis && pass < SL_MAX_PASSES && !pass_taken[pass]) {
    pass_taken[pass] = true;
    g->pass_axis[pass] = axis->stream_axis;
  }
  if (n->body && streamed) {
    sl_fail(err, SL_ERR_PIPELINE, "iterate nodes work on whole tensors, not streamed ones");
    return at(err, n->loc, n->id);
  }
  if (streamed) {
    n->phase = SL_PHASE_STREAM;
    n->pass = pass;
  } else {
    n->phase = (sl_phase)(ready % 3 == SL_PHASE_STREAM ? SL_PHASE_EPILOGUE : ready % 3);
    n->pass = ready / 3;
  }
  if (n->pass >= SL_MAX_PASSES) {
    sl_fail(err, SL_ERR_PIPELINE, "node '%s' would need pass %d over the data (at most %d)",
            n->id, n->pass + 1, SL_MAX_PASSES);
    return at(err, n->loc, n->id);
  }
  if (n->pass + 1 > g->n_passes) g->n_passes = n->pass + 1;
  return SL_OK;
}

/* After sorting: which passes each stream node runs in. Consumers come after
 * producers, so one backward sweep carries every pass to the ancestors. */
static void assign_pass_masks(sl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    g->nodes[i].pass_mask = g->nodes[i].phase == SL_PHASE_STREAM ? 1u << g->nodes[i].pass : 0;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const sl_node *n = &g->nodes[i];
    if (n->phase != SL_PHASE_STREAM) continue;
    for (int k = 0; k < n->n_in; k++) {
      sl_edge_src s = n->in_src[k];
      if (s.node >= 0 && g->nodes[s.node].phase == SL_PHASE_STREAM && n->in[k].stream_rank)
        g->nodes[s.node].pass_mask |= n->pass_mask;
    }
  }
}

/* Reorders nodes by (phase, level, original order) and remaps edges. */
static sl_code sort_nodes(sl_graph *g, sl_error *err) {
  int n = g->n_nodes;
  int *perm = sl_calloc((size_t)n, sizeof *perm), *inv = sl_calloc((size_t)n, sizeof *inv);
  sl_node *nodes = sl_calloc((size_t)n, sizeof *nodes);
  if (!perm || !inv || !nodes) {
    free(perm);
    free(inv);
    free(nodes);
    return sl_fail_nomem(err, "the order of the nodes");
  }
  for (int i = 0; i < n; i++) perm[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort: stable, n is small */
    for (int j = i; j > 0; j--) {
      const sl_node *a = &g->nodes[perm[j - 1]], *b = &g->nodes[perm[j]];
      int ta = time_of(a->phase, a->pass), tb = time_of(b->phase, b->pass);
      bool swap = ta > tb || (ta == tb && a->level > b->level);
      if (!swap) break;
      int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  for (int i = 0; i < n; i++) inv[perm[i]] = i;
  for (int i = 0; i < n; i++) {
    nodes[i] = g->nodes[perm[i]];
    for (int k = 0; k < nodes[i].n_in; k++)
      if (nodes[i].in_src[k].node >= 0) nodes[i].in_src[k].node = inv[nodes[i].in_src[k].node];
  }
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].node >= 0) g->outputs[o].node = inv[g->outputs[o].node];
  free(g->nodes);
  g->nodes = nodes;
  free(perm);
  free(inv);
  return SL_OK;
}

static void mark_used_outputs(sl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      sl_edge_src s = g->nodes[i].in_src[k];
      if (s.node >= 0 && !(g->nodes[i].in_unread & (1u << k))) g->nodes[s.node].out_used |= 1u << s.port;
    }
  for (int o = 0; o < g->n_outputs; o++)
    if (g->outputs[o].node >= 0) g->nodes[g->outputs[o].node].out_used |= 1u << g->outputs[o].port;
}

/* Where an infer error belongs: at the --set that gave the value of a param
 * the message names ("param 'NAME'"), else at the node. */
static sl_loc infer_error_loc(const sl_node *n, const sl_node_spec *ns, const sl_error *err) {
  const sl_yaml *pm = ns->params;
  for (size_t k = 0; pm && k < pm->n; k++) {
    char needle[160];
    snprintf(needle, sizeof needle, "param '%s'", pm->keys[k]);
    if (strstr(err->msg, needle) && sl_loc_is_setting(pm->items[k]->loc)) return pm->items[k]->loc;
  }
  return n->loc;
}

sl_code sl_graph_build(const sl_spec *spec, const sl_tensor_desc *inputs,
                       const sl_node_registry *registry, sl_graph **out, sl_error *err) {
  sl_graph *g = sl_calloc(1, sizeof *g);
  if (!g) return sl_fail_nomem(err, "a graph");
  g->spec = spec;
  g->registry = registry;
  g->n_passes = 1;
  g->nodes = sl_calloc(spec->n_nodes, sizeof *g->nodes);
  g->input_names = sl_calloc(spec->n_inputs, sizeof *g->input_names);
  g->outputs = sl_calloc(spec->n_outputs, sizeof *g->outputs);
  int *order = sl_calloc(spec->n_nodes, sizeof *order);
  if (!g->nodes || !g->input_names || !g->outputs || !order) {
    free(order);
    sl_graph_free(g);
    sl_fail_nomem(err, "a graph");
    sl_error_at(err, spec->file, 0, 0);
    return SL_ERR_NOMEM;
  }
  g->n_nodes = (int)spec->n_nodes;
  g->n_inputs = (int)spec->n_inputs;
  g->n_outputs = (int)spec->n_outputs;
  sl_code rc = SL_OK;
  if (g->n_inputs > SL_MAX_PORTS)
    rc = sl_fail(err, SL_ERR_PIPELINE, "a pipeline has at most %d inputs, this one %d", SL_MAX_PORTS, g->n_inputs);
  for (int i = 0; i < g->n_inputs; i++) {
    g->input_names[i] = sl_strdup(spec->inputs[i]);
    if (rc == SL_OK && !g->input_names[i]) rc = sl_fail_nomem(err, "an input name");
    if (rc == SL_OK && !inputs)
      rc = sl_fail(err, SL_ERR_PIPELINE,
                   "pipeline input '%s' is not bound: this file is a template or iterate body; "
                   "`use` it from another pipeline",
                   spec->inputs[i]);
    if (rc == SL_OK) g->input_desc[i] = inputs[i];
  }
  if (rc != SL_OK) sl_error_at(err, spec->file, 0, 0);
  for (int i = 0; i < g->n_nodes && rc == SL_OK; i++) rc = make_node(g, i, &spec->nodes[i], err);
  for (int i = 0; i < g->n_nodes && rc == SL_OK; i++)
    rc = connect_node(g, i, &spec->nodes[i], err);
  if (rc == SL_OK) rc = topo_order(g, order, err);
  stream_refs refs = {{0}, 0};
  bool pass_taken[SL_MAX_PASSES] = {false};
  for (int oi = 0; oi < g->n_nodes && rc == SL_OK; oi++) {
    int i = order[oi];
    sl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      sl_edge_src s = n->in_src[k];
      if (s.node >= 0) n->in[k] = g->nodes[s.node].out[s.port];
      else if (s.node == SL_SRC_INPUT) n->in[k] = g->input_desc[s.port];
    }
    if (n->desc) {
      rc = n->desc->infer(n, err);
      for (int k = 0; k < n->n_out && rc == SL_OK; k++) rc = sl_desc_check_size(&n->out[k], err);
      if (rc == SL_OK) rc = sl_node_records_check(n, err);
      if (rc == SL_ERR_NOMEM) {
        at(err, n->loc, n->id);
        break;
      }
      if (rc != SL_OK) {
        if (err->code == SL_ERR_INTERNAL || err->code == SL_OK) err->code = SL_ERR_PIPELINE;
        at(err, infer_error_loc(n, &spec->nodes[i], err), n->id);
        rc = err->code;
        break;
      }
    } else {
      rc = infer_iterate(g, n, &spec->nodes[i], err);
      if (rc != SL_OK) break;
    }
    inherit_stream_axis(n);
    mark_variable_outputs(n);
    rc = assign_phase(g, n, &refs, pass_taken, err);
    if (rc == SL_OK) rc = check_port_contracts(g, n, err);
    if (rc != SL_OK) break;
    n->level = 0;
    for (int k = 0; k < n->n_in; k++) {
      sl_edge_src s = n->in_src[k];
      if (s.node >= 0 && g->nodes[s.node].phase == n->phase && g->nodes[s.node].pass == n->pass &&
          g->nodes[s.node].level + 1 > n->level)
        n->level = g->nodes[s.node].level + 1;
    }
  }
  free(order);
  for (int r = 0; r < refs.n; r++)
    if (!refs.ref[r]->stream_axis) g->scan_rank = refs.ref[r]->stream_rank;
  for (int o = 0; o < g->n_outputs; o++) {
    g->outputs[o].name = sl_strdup(spec->outputs[o].name);
    g->outputs[o].loc = spec->outputs[o].ref.loc;
    g->outputs[o].node = SL_SRC_NONE;
    if (rc == SL_OK && !g->outputs[o].name) {
      sl_fail_nomem(err, "an output name");
      rc = at(err, spec->outputs[o].ref.loc, NULL);
    }
  }
  for (int o = 0; o < g->n_outputs && rc == SL_OK; o++) {
    sl_edge_src s;
    rc = resolve_ref(g, &spec->outputs[o].ref, NULL, &s, err);
    g->outputs[o].node = s.node;
    g->outputs[o].port = s.port;
  }
  if (rc == SL_OK) rc = sort_nodes(g, err);
  if (rc == SL_OK) {
    assign_pass_masks(g);
    mark_used_outputs(g);
  }
  if (rc != SL_OK) {
    sl_graph_free(g);
    return rc;
  }
  *out = g;
  return SL_OK;
}

/* ---- nodes added to a built graph ---------------------------------------- */

/* The streams and passes of a built graph, as its building left them. */
static void built_streams(const sl_graph *g, stream_refs *refs, bool pass_taken[]) {
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    if (n->phase == SL_PHASE_STREAM && n->pass < SL_MAX_PASSES) pass_taken[n->pass] = true;
    for (int k = 0; k < n->n_out; k++) {
      const sl_tensor_desc *d = &n->out[k];
      int r = 0;
      while (d->stream_rank && r < refs->n && !sl_desc_same_axis(refs->ref[r], d)) r++;
      if (d->stream_rank && r == refs->n && refs->n < SL_MAX_PASSES) refs->ref[refs->n++] = d;
    }
  }
}

sl_code sl_graph_add_output_reader(sl_graph *g, const sl_node_desc *desc, const char *id, int output,
                                   sl_error *err) {
  const sl_graph_output *go = &g->outputs[output];
  if (go->node < 0 || desc->n_inputs < 1)
    return sl_fail(err, SL_ERR_INTERNAL, "output '%s' cannot be read by a '%s' node", go->name, desc->type);
  if (!sl_resize(&g->nodes, (size_t)(g->n_nodes + 1), sizeof *g->nodes)) return sl_fail_nomem(err, "a writer node");
  sl_node *n = &g->nodes[g->n_nodes++];
  memset(n, 0, sizeof *n);
  if (!(n->id = sl_strdup(id))) return sl_fail_nomem(err, "a writer node's id");
  n->loc = go->loc;
  for (int k = 0; k < SL_MAX_PORTS; k++) n->in_src[k] = (sl_edge_src){SL_SRC_NONE, 0};
  take_desc(n, desc);
  sl_node_spec ns;
  memset(&ns, 0, sizeof ns);
  ns.loc = go->loc;
  ns.params = sl_yaml_new_map(go->loc);
  sl_yaml *name = ns.params ? sl_yaml_new_scalar(go->name, go->loc) : NULL;
  if (!name || !sl_yaml_append(ns.params, "output", name)) {
    sl_yaml_free(ns.params); /* an append that failed freed the item */
    return sl_fail_nomem(err, "a writer node's params");
  }
  sl_code rc = bind_params(n, &ns, err);
  sl_yaml_free(ns.params);
  n->in_src[0] = (sl_edge_src){go->node, go->port};
  n->in[0] = g->nodes[go->node].out[go->port];
  if (rc == SL_OK) rc = desc->infer(n, err);
  for (int k = 0; k < n->n_out && rc == SL_OK; k++) rc = sl_desc_check_size(&n->out[k], err);
  if (rc != SL_OK) return at(err, go->loc, n->id);
  inherit_stream_axis(n);
  mark_variable_outputs(n);
  stream_refs refs = {{0}, 0};
  bool pass_taken[SL_MAX_PASSES] = {false};
  built_streams(g, &refs, pass_taken);
  rc = assign_phase(g, n, &refs, pass_taken, err);
  if (rc == SL_OK) rc = check_port_contracts(g, n, err);
  if (rc != SL_OK) return rc;
  const sl_node *src = &g->nodes[go->node];
  n->level = src->phase == n->phase && src->pass == n->pass ? src->level + 1 : 0;
  if ((rc = sort_nodes(g, err)) != SL_OK) return rc;
  assign_pass_masks(g);
  mark_used_outputs(g);
  return SL_OK;
}

bool sl_graph_output_written(const sl_graph *g, int o) {
  const sl_graph_output *go = &g->outputs[o];
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; g->nodes[i].desc && g->nodes[i].desc->sink && k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in_src[k].node == go->node && g->nodes[i].in_src[k].port == go->port) return true;
  return false;
}

sl_code sl_graph_check_backend(const sl_graph *g, sl_backend_kind k, sl_error *err) {
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    if (n->body) {
      sl_code rc = sl_graph_check_backend(n->body, k, err);
      if (rc != SL_OK) return rc;
    } else if (!n->desc->kernel[k] && !(n->desc->host && n->desc->kernel[SL_BACKEND_CPU]) &&
               !(n->desc->produce && k != SL_BACKEND_CPU)) { /* produce: every device backend */
      sl_fail(err, SL_ERR_BACKEND, "node type '%s' has no kernel for the %s backend",
              n->desc->type, sl_backend_kind_name(k));
      return at(err, n->loc, n->id);
    }
  }
  return SL_OK;
}
