/* Lookup in a node registry: the per-family tables a graph builder is handed. */
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/graph/node.h"

const sl_node_desc *sl_registry_find(const sl_node_registry *r, const char *type) {
  for (int f = 0; r && f < r->n_families; f++)
    for (int i = 0; i < r->families[f]->count; i++)
      if (!strcmp(r->families[f]->nodes[i]->type, type)) return r->families[f]->nodes[i];
  return NULL;
}

static int by_type(const void *a, const void *b) {
  return strcmp((*(const sl_node_desc *const *)a)->type, (*(const sl_node_desc *const *)b)->type);
}

const sl_node_desc **sl_registry_list(const sl_node_registry *r, int *count) {
  int n = 0;
  for (int f = 0; r && f < r->n_families; f++) n += r->families[f]->count;
  const sl_node_desc **all = sl_calloc((size_t)(n ? n : 1), sizeof *all);
  *count = 0;
  if (!all) return NULL;
  n = 0;
  for (int f = 0; r && f < r->n_families; f++)
    for (int i = 0; i < r->families[f]->count; i++) all[n++] = r->families[f]->nodes[i];
  qsort(all, (size_t)n, sizeof *all, by_type);
  *count = n;
  return all;
}
