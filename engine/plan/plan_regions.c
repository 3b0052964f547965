/* The plan as a tree of schedule regions, for `sluice plan` and the plan's
 * JSON: each pass over the data is a `whole` region (the prologue), a
 * `stream` region over its stream (the scan, or e.g. pixels) in chunks, and
 * a `whole` region (the epilogue); an iterate node is a `loop` region
 * holding its body's regions. A stream that starts from a whole tensor made
 * by an earlier pass over another stream (transpose_scan, then stream) is a
 * `transpose` region: the tensor's bytes, from which pass, to which stream;
 * over the same stream (gather, then stream) it is a `resident` copy.
 * Empty regions are left out. */
#include <string.h>

#include "engine/core/util.h"
#include "engine/plan/plan.h"

typedef struct region {
  const char *kind; /* "whole" or "stream" */
  int first, last;  /* levels */
} region;

/* The non-empty regions of pass `pass`, in order; returns how many. */
static int pass_regions(const sl_plan *p, int pass, region out[3]) {
  const sl_plan_pass *pp = &p->passes[pass];
  const region all[3] = {{"whole", pp->prologue_first, pp->prologue_last},
                         {"stream", pp->stream_first, pp->stream_last},
                         {"whole", pp->epilogue_first, pp->epilogue_last}};
  int n = 0;
  for (int r = 0; r < 3; r++)
    if (all[r].first <= all[r].last && all[r].first >= 0) out[n++] = all[r];
  return n;
}

/* The view buffers (stream nodes) that start pass `pass`'s stream: each is
 * a transpose region when the whole tensor it windows was made by a node
 * streaming over another stream. Calls fn for each. */
typedef void (*transpose_fn)(void *ctx, const sl_plan *p, const sl_node *view, const sl_node *maker,
                             int64_t bytes, int from_pass, bool same_stream);

static void each_transpose(const sl_plan *p, int pass, transpose_fn fn, void *ctx) {
  const sl_graph *g = p->graph;
  for (int b = 0; b < p->n_buffers; b++) {
    const sl_plan_buffer *bf = &p->buffers[b];
    const sl_node *v = &g->nodes[bf->node];
    if (!bf->view || v->pass != pass) continue;
    sl_edge_src src = v->in_src[bf->port];
    if (src.node < 0) continue;
    const sl_node *m = &g->nodes[src.node];
    if (m->phase != SL_PHASE_STREAM) continue;
    const char *made_over = p->passes[m->pass].axis ? p->passes[m->pass].axis : "scan";
    const char *now_over = p->passes[pass].axis ? p->passes[pass].axis : "scan";
    fn(ctx, p, v, m, sl_desc_bytes(&m->out[src.port]), m->pass, !strcmp(made_over, now_over));
  }
}

static const char *pass_axis_name(const sl_plan_pass *pp) { return pp->axis ? pp->axis : "scan"; }

/* Indentation by depth: two spaces a level. */
#define IND(depth) (2 * (depth)), ""

static void print_loop_head(FILE *f, const sl_node *n, int depth) {
  fprintf(f, "%*sloop '%s': %s%lld times", IND(depth), n->id, n->until_out >= 0 ? "at most " : "",
          (long long)n->times);
  if (n->until_out >= 0) fprintf(f, ", until '%s' holds", n->out_names[n->until_out]);
  fprintf(f, "\n");
}

typedef struct print_ctx {
  FILE *f;
  int depth;
  const sl_plan_pass *pp;
} print_ctx;

static void print_transpose(void *ctx, const sl_plan *p, const sl_node *view, const sl_node *maker,
                            int64_t bytes, int from_pass, bool same_stream) {
  const print_ctx *pc = ctx;
  char h[32];
  (void)p;
  sl_format_bytes((uint64_t)bytes, h, sizeof h);
  fprintf(pc->f, "%*s%s: '%s' (%s whole, made in pass %d) streamed over %s by '%s'\n", IND(pc->depth),
          same_stream ? "resident" : "transpose", maker->id, h, from_pass + 1, pass_axis_name(pc->pp), view->id);
}

static void print_tree(FILE *f, const sl_plan *p, int depth) {
  const sl_graph *g = p->graph;
  for (int pass = 0; pass < p->n_passes; pass++) {
    region rs[3];
    int nr = pass_regions(p, pass, rs);
    if (p->n_passes > 1) fprintf(f, "%*spass %d over the data:\n", IND(depth), pass + 1);
    int rd = p->n_passes > 1 ? depth + 1 : depth;
    for (int r = 0; r < nr; r++) {
      const sl_plan_pass *pp = &p->passes[pass];
      if (!strcmp(rs[r].kind, "stream")) {
        print_ctx pc = {f, depth + (p->n_passes > 1), pp};
        each_transpose(p, pass, print_transpose, &pc);
        fprintf(f, "%*sstream over %lld %s positions in %lld chunk%s of up to %lld:", IND(rd),
                (long long)pp->positions, pass_axis_name(pp), (long long)pp->n_chunks,
                pp->n_chunks == 1 ? "" : "s", (long long)pp->chunk_positions);
      } else
        fprintf(f, "%*swhole:", IND(rd));
      int listed = 0;
      for (int l = rs[r].first; l <= rs[r].last; l++)
        for (int k = 0; k < p->levels[l].n_nodes; k++)
          fprintf(f, "%s %s", listed++ ? "," : "", g->nodes[p->levels[l].nodes[k]].id);
      fprintf(f, "\n");
      for (int l = rs[r].first; l <= rs[r].last; l++)
        for (int k = 0; k < p->levels[l].n_nodes; k++) {
          int i = p->levels[l].nodes[k];
          if (!p->nodes[i].body) continue;
          print_loop_head(f, &g->nodes[i], rd + 1);
          print_tree(f, p->nodes[i].body, rd + 2);
        }
    }
  }
}

void sl_plan_print_regions(FILE *f, const sl_plan *p) {
  fprintf(f, "regions:\n");
  print_tree(f, p, 1);
}

static void json_transpose(void *ctx, const sl_plan *p, const sl_node *view, const sl_node *maker,
                           int64_t bytes, int from_pass, bool same_stream) {
  sl_json *j = ctx;
  (void)p;
  sl_json_begin_object(j);
  sl_json_kv_string(j, "kind", same_stream ? "resident" : "transpose");
  sl_json_kv_string(j, "whole", maker->id);
  sl_json_kv_string(j, "view", view->id);
  sl_json_kv_int(j, "bytes", bytes);
  sl_json_kv_int(j, "from_pass", from_pass);
  sl_json_end_object(j);
}

static void tree_json(sl_json *j, const sl_plan *p) {
  const sl_graph *g = p->graph;
  sl_json_begin_array(j);
  for (int pass = 0; pass < p->n_passes; pass++) {
    region rs[3];
    int nr = pass_regions(p, pass, rs);
    for (int r = 0; r < nr; r++) {
      sl_json_begin_object(j);
      sl_json_kv_string(j, "kind", rs[r].kind);
      sl_json_kv_int(j, "pass", pass);
      if (!strcmp(rs[r].kind, "stream")) {
        const sl_plan_pass *pp = &p->passes[pass];
        sl_json_kv_string(j, "axis", pass_axis_name(pp));
        sl_json_kv_int(j, "positions", pp->positions);
        sl_json_kv_int(j, "chunks", pp->n_chunks);
        sl_json_kv_int(j, "chunk_positions", pp->chunk_positions);
        sl_json_key(j, "transposes");
        sl_json_begin_array(j);
        each_transpose(p, pass, json_transpose, j);
        sl_json_end_array(j);
      }
      sl_json_key(j, "nodes");
      sl_json_begin_array(j);
      for (int l = rs[r].first; l <= rs[r].last; l++)
        for (int k = 0; k < p->levels[l].n_nodes; k++)
          sl_json_string(j, g->nodes[p->levels[l].nodes[k]].id);
      sl_json_end_array(j);
      sl_json_key(j, "loops");
      sl_json_begin_array(j);
      for (int l = rs[r].first; l <= rs[r].last; l++)
        for (int k = 0; k < p->levels[l].n_nodes; k++) {
          int i = p->levels[l].nodes[k];
          if (!p->nodes[i].body) continue;
          const sl_node *n = &g->nodes[i];
          sl_json_begin_object(j);
          sl_json_kv_string(j, "kind", "loop");
          sl_json_kv_string(j, "node", n->id);
          sl_json_kv_int(j, "times", n->times);
          if (n->until_out >= 0) sl_json_kv_string(j, "until", n->out_names[n->until_out]);
          sl_json_key(j, "regions");
          tree_json(j, p->nodes[i].body);
          sl_json_end_object(j);
        }
      sl_json_end_array(j);
      sl_json_end_object(j);
    }
  }
  sl_json_end_array(j);
}

void sl_plan_regions_json(sl_json *j, const sl_plan *p) { tree_json(j, p); }
