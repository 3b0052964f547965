/* See loop_history.h. */
#include "engine/plan/loop_history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/settings.h"
#include "engine/core/util.h"

uint64_t sl_loop_history_key(const char *rendered_pipeline) {
  if (!rendered_pipeline) return 0;
  uint64_t h = sl_fnv1a(rendered_pipeline, strlen(rendered_pipeline), SL_FNV1A_START);
  return h ? h : 1;
}

static bool has_until_loop(const sl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].body && g->nodes[i].until_out >= 0) return true;
  return false;
}

sl_code sl_loop_history_key_of(const sl_spec *spec, const sl_graph *g, uint64_t *key, sl_error *err) {
  *key = 0;
  if (!has_until_loop(g) || !sl_setting_bool(SL_SET_LOOP_HISTORY)) return SL_OK;
  char *text = sl_spec_render_string(spec);
  if (!text) return sl_fail_nomem(err, "the pipeline's text (the key of its loop history)");
  *key = sl_loop_history_key(text);
  free(text);
  return SL_OK;
}

static bool entry_path(uint64_t key, char *buf, size_t len) {
  char dir[3000];
  if (!key || !sl_setting_bool(SL_SET_LOOP_HISTORY) || !sl_user_cache_dir(dir, sizeof dir)) return false;
  int n = snprintf(buf, len, "%s/loops/%016llx.txt", dir, (unsigned long long)key);
  return n > 0 && (size_t)n < len;
}

int64_t *sl_loop_history_read(uint64_t key, const sl_graph *g) {
  char path[3100], line[1100], name[1024];
  if (!has_until_loop(g) || !entry_path(key, path, sizeof path)) return NULL;
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  int64_t *it = malloc((size_t)g->n_nodes * sizeof *it);
  for (int i = 0; it && i < g->n_nodes; i++) it[i] = -1;
  long long n;
  while (it && fgets(line, sizeof line, f))
    if (sscanf(line, "%1023s %lld", name, &n) == 2 && n >= 0)
      for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].body && g->nodes[i].until_out >= 0 && it[i] < 0 && !strcmp(g->nodes[i].id, name)) it[i] = n;
  fclose(f);
  return it;
}

void sl_loop_history_put(uint64_t key, const sl_graph *g, const int64_t *iterations) {
  char path[3100], tmp[3200], dir[3100];
  if (!has_until_loop(g) || !iterations || !entry_path(key, path, sizeof path)) return;
  sl_dirname(path, dir, sizeof dir);
  if (!sl_make_dirs(dir)) return;
  snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].body && g->nodes[i].until_out >= 0 && !strpbrk(g->nodes[i].id, " \t\n"))
      fprintf(f, "%s %lld\n", g->nodes[i].id, (long long)iterations[i]);
  bool ok = fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}
