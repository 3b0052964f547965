/* The plan as a tree of schedule regions, for `sluice plan` and the plan's
 * JSON: each pass over the data is a `whole` region (the prologue), a
 * `stream` region over the scan in chunks, and a `whole` region (the
 * epilogue); an iterate node is a `loop` region holding its body's regions.
 * Empty regions are left out. */
#include <string.h>

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

/* Indentation by depth: two spaces a level. */
#define IND(depth) (2 * (depth)), ""

static void print_loop_head(FILE *f, const sl_node *n, int depth) {
  fprintf(f, "%*sloop '%s': %s%lld times", IND(depth), n->id, n->until_out >= 0 ? "at most " : "",
          (long long)n->times);
  if (n->until_out >= 0) fprintf(f, ", until '%s' holds", n->out_names[n->until_out]);
  fprintf(f, "\n");
}

static void print_tree(FILE *f, const sl_plan *p, int depth) {
  const sl_graph *g = p->graph;
  for (int pass = 0; pass < p->n_passes; pass++) {
    region rs[3];
    int nr = pass_regions(p, pass, rs);
    if (p->n_passes > 1) fprintf(f, "%*spass %d over the data:\n", IND(depth), pass + 1);
    int rd = p->n_passes > 1 ? depth + 1 : depth;
    for (int r = 0; r < nr; r++) {
      if (!strcmp(rs[r].kind, "stream"))
        fprintf(f, "%*sstream over %lld scan positions in %lld chunk%s of up to %lld:", IND(rd),
                (long long)p->positions, (long long)p->n_chunks, p->n_chunks == 1 ? "" : "s",
                (long long)p->chunk_positions);
      else
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
        sl_json_kv_int(j, "positions", p->positions);
        sl_json_kv_int(j, "chunks", p->n_chunks);
        sl_json_kv_int(j, "chunk_positions", p->chunk_positions);
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
