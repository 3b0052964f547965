/* sluice plan: the plan without running anything. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/json.h"
#include "engine/cli/cli.h"
#include "engine/exec/run.h"
#include "engine/exec/sinks.h"
#include "engine/plan/loop_history.h"

const char *const cli_help_plan =
    "usage: sluice plan FILE [--set NAME=VALUE]... [--backend auto|cpu|cuda]\n"
    "                        [--memory-limit SIZE] [--chunk N] [--threads N] [--setting NAME=VALUE]...\n"
    "                        [--shards N] [--json]\n"
    "\n"
    "Plans a pipeline without reading frame data (input files are opened for their\n"
    "metadata only; a detector acquisition's chunk index is listed too when it has\n"
    "at most 2^20 stored chunks, else when a run starts, after the budget check):\n"
    "levels (one batch each per chunk), buffers with lifetimes and pooled slots,\n"
    "peak host and device memory (the chunk index included), bytes read and\n"
    "written, work and an estimated time per node and level for the backend's\n"
    "cost profile (what `sluice calibrate` measured, else built-in guesses).\n"
    "Exits 3 (after printing the plan) when the plan does not fit the budget.\n"
    "\n"
    "  --set NAME=VALUE     override a pipeline param (repeatable)\n"
    "  --backend B          plan for this backend's profile (default: the CPU; planning\n"
    "                       for cuda reads the device's capabilities)\n"
    "  --memory-limit SIZE  budget, e.g. 512M, 8G (default: available memory)\n"
    "  --chunk N            scan positions per chunk (default: automatic)\n"
    "  --threads N          plan for N CPU worker threads, as `sluice run --threads N`\n"
    "                       does (the automatic chunk and the cost profile follow the\n"
    "                       count; default: the CPUs this process may use)\n"
    "  --shards N           plan one shard of `sluice run --shards N`: threads/N\n"
    "                       workers, its share of the budget (on a device, of the\n"
    "                       shards on one device), the merge's host memory,\n"
    "                       and its writer nodes (each shard writes its own\n"
    "                       positions of the streamed outputs)\n"
    "  --setting NAME=VALUE a run-time setting (see `sluice settings`)\n"
    "  --json               the plan as JSON on stdout\n";

int cmd_plan(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv,
                     CLI_SET | CLI_BACKEND | CLI_MEMORY | CLI_CHUNK | CLI_THREADS | CLI_JSON | CLI_SETTING | CLI_SHARDS,
                     true, cli_help_plan, &o);
  if (rc) return rc < 0 ? 0 : rc;
  sl_error err;
  sl_error_clear(&err);
  sl_spec *spec;
  sl_graph *g;
  if ((rc = cli_load(&o, &spec, &g))) return rc;
  const int shards = o.shards > 1 ? o.shards : 0;
  /* The plan of what `sluice run` runs: with its writer nodes. */
  if (sl_graph_add_writers(g, &err) != SL_OK) {
    sl_graph_free(g);
    sl_spec_free(spec);
    return cli_fail(&err);
  }
  sl_backend_kind kind;
  sl_backend_caps caps;
  sl_plan *p = NULL;
  /* Planning touches no GPU: auto plans for the CPU; name a backend to plan
   * for it (its capabilities are then read from the device). */
  if (o.backend == SL_BACKEND_AUTO) o.backend = SL_BACKEND_CPU;
  /* one shard of a split run: its share of the workers (as
   * sl_run_pipeline_shards gives them) */
  const int threads = shards ? sl_shard_threads(o.threads, shards) : o.threads;
  if (sl_backend_select(o.backend, &kind, &err) != SL_OK ||
      sl_run_caps(sl_backend_ops_for(kind), threads, &caps, &err) != SL_OK ||
      sl_graph_check_backend(g, kind, &err) != SL_OK) {
    rc = cli_fail(&err);
  } else {
    sl_plan_opts po;
    cli_plan_opts(&o, &caps, &po);
    if (shards) { /* and of the budget */
      const sl_run_request req = {.backend = o.backend, .memory_limit = o.memory_limit};
      po.shards = shards;
      po.memory_limit = sl_shard_budget(&req, threads, shards);
    }
    sl_cost_profile profile;
    char warning[1200];
    sl_cost_profile_for(&caps, g->registry, &profile, NULL, 0, warning, sizeof warning);
    if (warning[0]) fprintf(stderr, "sluice: warning: %s\n", warning);
    po.profile = &profile;
    uint64_t loop_key = 0;
    int64_t *loops = NULL;
    sl_code prc = sl_loop_history_key_of(spec, g, &loop_key, &err);
    if (prc == SL_OK) {
      loops = sl_loop_history_read(loop_key, g);
      po.loop_iterations = loops;
      prc = sl_plan_build(g, &po, &p, &err);
      free(loops);
    }
    if (prc != SL_OK) {
      rc = cli_fail(&err);
    } else {
      if (o.json) {
        sl_json j;
        sl_json_init(&j, stdout, true);
        sl_json_begin_object(&j);
        sl_json_key(&j, "pipeline");
        sl_json_string(&j, spec->name);
        sl_json_key(&j, "file");
        sl_json_string(&j, spec->file);
        sl_json_key(&j, "plan");
        sl_plan_json(&j, p);
        sl_json_key(&j, "fits_budget");
        sl_json_bool(&j, sl_plan_check_budget(p, NULL) == SL_OK);
        sl_json_end_object(&j);
        sl_json_finish(&j);
      } else {
        printf("pipeline %s (%s)%s\n", spec->name, spec->file, shards ? ", one shard of a split run" : "");
        sl_plan_print(stdout, p);
      }
      if (sl_plan_check_budget(p, &err) != SL_OK) rc = cli_fail(&err);
    }
  }
  sl_plan_free(p);
  sl_graph_free(g);
  sl_spec_free(spec);
  return rc;
}
