/* Running a pipeline file in a test (test_exec.c, test_exec_loops.c): the
 * whole of `sluice run` short of writing files, on the CPU backend, and
 * finding an output by name. */
#ifndef SL_TESTS_RUN_SUPPORT_H
#define SL_TESTS_RUN_SUPPORT_H

#include <stdio.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/exec/run.h"
#include "nodes/registry.h"

/* The ramp node's element e of position p with `item` elements a
 * position: (p item + e) mod 1024 (docs/nodes/ramp.md). */
static inline double ramp_expected(int64_t p, int64_t item, int64_t e) { return (double)((p * item + e) % 1024); }

static inline sl_code run_file(const char *path, const sl_setting *sets, size_t n_sets, int64_t chunk,
                               int threads, uint64_t limit, const sl_backend_ops *ops, sl_run *run,
                               sl_error *err) {
  sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .sets = sets,
                        .n_sets = n_sets, .backend = SL_BACKEND_CPU, .chunk_positions = chunk,
                        .threads = threads, .memory_limit = limit, .ops_override = ops};
  sl_error_clear(err);
  return sl_run_pipeline(&req, run, err);
}

/* The built-in nodes and a test's own family (once per test program). */
static inline const sl_node_registry *registry_with(const sl_node_family *family) {
  static const sl_node_family *families[32];
  static sl_node_registry r;
  if (!r.n_families) {
    const sl_node_registry *base = sl_nodes_registry();
    if (base->n_families >= 31) fail_msg("too many node families for the test registry");
    for (int i = 0; i < base->n_families; i++) families[i] = base->families[i];
    families[base->n_families] = family;
    r.families = families;
    r.n_families = base->n_families + 1;
  }
  return &r;
}

static inline const sl_output_data *output(const sl_run *r, const char *name) {
  for (int i = 0; i < r->result.n_outputs; i++)
    if (!strcmp(r->result.outputs[i].name, name)) return &r->result.outputs[i];
  fail_msg("no output %s", name);
  return NULL;
}

/* The CPU backend with device memory as far as the plan and the executor
 * care (sl_run_request.ops_override): host nodes (sl_node_desc.host) have
 * their inputs and outputs staged, and nodes' device-path costs count. */
static inline sl_code device_like_probe(sl_backend_caps *caps, sl_error *err) {
  sl_code rc = sl_cpu_backend_ops.probe(caps, err);
  caps->device_memory = true;
  return rc;
}

static inline sl_code device_like_create(int threads, sl_backend **out, sl_error *err) {
  sl_code rc = sl_cpu_backend_ops.create(threads, out, err);
  if (rc == SL_OK) (*out)->caps.device_memory = true;
  return rc;
}

static inline const sl_backend_ops *device_like_ops(void) {
  static sl_backend_ops ops;
  ops = sl_cpu_backend_ops;
  ops.probe = device_like_probe, ops.create = device_like_create;
  return &ops;
}

/* What `sluice plan` prints of a run's plan (sl_plan_print), into *text,
 * a string the caller frees. */
static inline void plan_text(const sl_run *r, char **text) {
  size_t len = 0;
  FILE *f = open_memstream(text, &len);
  if (!f) fail_msg("open_memstream failed");
  sl_plan_print(f, r->plan);
  fclose(f);
}

/* The note `key` of node `id` ("key: value"), or NULL. */
static inline const char *node_note(const sl_run *r, const char *id, const char *key) {
  int i = sl_graph_find(r->graph, id);
  if (i < 0) return NULL;
  size_t k = strlen(key);
  const sl_node *n = &r->graph->nodes[i];
  for (int j = 0; j < n->n_notes; j++)
    if (!strncmp(n->notes[j], key, k) && n->notes[j][k] == ':') return n->notes[j];
  return NULL;
}

#endif
