/* Fuzz target: `--set NAME=VALUE` overrides (one per input line) applied to
 * shipped pipelines that read no files, then graph building and planning.
 * Any value -- huge or negative sizes, malformed lists, wrong types -- must
 * end in a clean error with a message or a valid plan: no crash, no overflow
 * (UBSan), no leak. Pipelines are found under SLUICE_SOURCE_DIR (ctest sets
 * it), else the current directory. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "engine/pipeline/spec.h"
#include "engine/plan/plan.h"
#include "nodes/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_SETS = 6 };

static const char *const k_pipelines[] = {
    "pipelines/synthetic_virtual_image.yaml",
    "pipelines/iterate_affine.yaml",
    "tests/data/pipelines/clip_ramp.yaml",
};

static void check_failure(const sl_error *err) {
  if (err->code == SL_OK || !err->msg[0]) {
    fprintf(stderr, "failure without an error message\n");
    abort();
  }
}

/* Keeps the settings whose names the pipeline declares (the others would
 * only test the unknown-name error, every time). */
static size_t known_sets(const char *path, const sl_setting *sets, size_t n, sl_setting *out) {
  sl_error err;
  sl_error_clear(&err);
  sl_spec *plain = NULL;
  size_t kept = 0;
  if (sl_spec_load(path, NULL, 0, &plain, &err) != SL_OK) return 0;
  for (size_t k = 0; k < n; k++)
    if (sl_spec_value(plain, sets[k].name)) out[kept++] = sets[k];
  sl_spec_free(plain);
  return kept;
}

static void try_pipeline(const char *path, const sl_setting *all_sets, size_t n_all) {
  sl_error err;
  sl_error_clear(&err);
  sl_setting sets[MAX_SETS];
  size_t n_sets = known_sets(path, all_sets, n_all, sets);
  if (n_all && !n_sets) sets[n_sets++] = all_sets[0]; /* the unknown-name path, once */
  sl_spec *spec = NULL;
  if (sl_spec_load(path, sets, n_sets, &spec, &err) != SL_OK) {
    check_failure(&err);
    return;
  }
  sl_graph *g = NULL;
  if (sl_graph_build(spec, NULL, sl_nodes_registry(), &g, &err) == SL_OK) {
    sl_plan_opts po;
    memset(&po, 0, sizeof po);
    sl_cpu_backend_ops.probe(&po.caps, &err);
    po.caps.compute_units = 2;
    po.memory_limit = (uint64_t)1 << 30;
    sl_plan *p = NULL;
    sl_error_clear(&err);
    if (sl_plan_build(g, &po, &p, &err) == SL_OK) {
      sl_plan_check_budget(p, &err);
      sl_plan_free(p);
    } else {
      check_failure(&err);
    }
    sl_graph_free(g);
  } else {
    check_failure(&err);
  }
  sl_spec_free(spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  sl_setting sets[MAX_SETS];
  size_t n = 0;
  for (char *line = strtok(text, "\n"); line && n < MAX_SETS; line = strtok(NULL, "\n")) {
    char *eq = strchr(line, '=');
    if (!eq || eq == line) continue;
    *eq = 0;
    sets[n++] = (sl_setting){line, eq + 1};
  }
  const char *root = getenv("SLUICE_SOURCE_DIR");
  char path[4096];
  for (size_t k = 0; k < sizeof k_pipelines / sizeof k_pipelines[0]; k++) {
    snprintf(path, sizeof path, "%s/%s", root ? root : ".", k_pipelines[k]);
    try_pipeline(path, sets, n);
  }
  free(text);
  return 0;
}
