/* sluice run: plan, check the budget, reserve the output directory, run, and
 * publish the results atomically (written under a temporary directory, then
 * renamed; see run_output.h). Ctrl-C or SIGTERM stops the run at the next
 * chunk or file and leaves nothing behind. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/alloc.h"
#include "engine/core/util.h"
#include "engine/exec/report.h"
#include "engine/exec/run.h"
#include "engine/exec/sinks.h"
#include "engine/cli/cli.h"
#include "engine/cli/run_output.h"

const char *const cli_help_run =
    "usage: sluice run FILE [--set NAME=VALUE]... [--out DIR] [--backend auto|cpu|cuda]\n"
    "                       [--memory-limit SIZE] [--chunk N] [--threads N]\n"
    "                       [--shards N] [--setting NAME=VALUE]... [--force] [--json]\n"
    "                       [--quiet]\n"
    "\n"
    "Runs a pipeline. Writes into DIR (default ./sluice-out/<pipeline>-<timestamp>):\n"
    "results.h5 (one dataset per output, with units and provenance), a PNG per\n"
    "2-D output, and report.json (timings, bytes, planned and measured peak\n"
    "memory, resolved pipeline, params, input file identities).\n"
    "\n"
    "  --set NAME=VALUE     override a pipeline param (repeatable)\n"
    "  --out DIR            output directory; an existing one is kept unless --force\n"
    "  --backend B          auto (default: the best available, and says which), cpu\n"
    "                       or cuda (an error when not available: no fallback)\n"
    "  --memory-limit SIZE  budget, e.g. 512M or 8G (default: available memory, or\n"
    "                       device memory for a device backend); exit 3 if the plan\n"
    "                       does not fit, before anything is allocated\n"
    "  --chunk N            scan positions per chunk (default: automatic)\n"
    "  --threads N          CPU worker threads (default: the CPUs this process may\n"
    "                       use: affinity mask and cgroup quota)\n"
    "  --shards N           split the run into N shards of this process, each\n"
    "                       streaming its own chunks with threads/N workers, their\n"
    "                       reductions merged after each pass, each writing its\n"
    "                       own positions of the outputs as they complete; on\n"
    "                       CUDA, shard s runs on device s mod the devices\n"
    "                       (CUDA_VISIBLE_DEVICES picks them): several GPUs of one\n"
    "                       host; on the CPU, not faster than --threads, a check\n"
    "                       that a pipeline splits\n"
    "  --force              replace an existing output directory that sluice wrote\n"
    "                       (one holding a .sluice-output marker; others are refused)\n"
    "  --setting NAME=VALUE a run-time setting (see `sluice settings`), over its\n"
    "                       environment variable; recorded in report.json\n"
    "  --json               print report.json on stdout\n"
    "  --quiet              no progress bar and no summary\n";

typedef struct run_dir_ctx {
  const cli_opts *o;
  sl_run_output *out;
  const char *stamp;
  const char *started;
} run_dir_ctx;

/* Set by SIGINT/SIGTERM; the executor and the writer stop at the next chunk
 * or file, and the run leaves the previous DIR untouched and no DIR.tmp-PID. */
static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig) { g_stop_signal = sig; }

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* What the outputs will take on disk, about: the graph outputs as HDF5
 * datasets (an encoded one: its stored chunks, at most) plus a byte per
 * pixel of each PNG. */
static int64_t expected_output_bytes(const sl_plan *p) {
  int64_t total = 64 << 10;
  for (int o = 0; o < p->graph->n_outputs; o++) {
    const sl_graph_output *go = &p->graph->outputs[o];
    const sl_tensor_desc *d = &p->graph->nodes[go->node].out[go->port];
    if (d->encoding != SL_ENC_NONE) total += sl_desc_encoded_bound(d, sl_desc_positions(d));
    else total += sl_desc_bytes(d) + (sl_output_is_image(d) ? sl_desc_elems(d) : 0);
  }
  return total;
}

/* After planning, before allocating or reading any data: say what auto chose,
 * reserve the output directory (refusing to overwrite, and failing now on
 * a location that cannot be written or has no room) and open results.h5 in
 * it, which the writer nodes then fill as the run goes. */
static sl_code before_alloc(void *vctx, const sl_plan *p, sl_error *err) {
  run_dir_ctx *c = vctx;
  if (c->o->backend == SL_BACKEND_AUTO && !c->o->quiet && !c->o->json)
    fprintf(stderr, "sluice: backend auto: using %s (%s)\n", sl_backend_kind_name(p->caps.kind),
            p->caps.device);
  char dir[4096];
  if (c->o->out_dir) snprintf(dir, sizeof dir, "%s", c->o->out_dir);
  else snprintf(dir, sizeof dir, "sluice-out/%s-%s", p->graph->spec->name, c->stamp);
  sl_code rc = sl_run_output_reserve(c->out, dir, c->o->force, expected_output_bytes(p), err);
  return rc == SL_OK ? sl_run_output_open_results(c->out, p, c->started, err) : rc;
}

/* Notes keyed `key` ("warning", "result") of every node, on `f`. */
static void print_notes(FILE *f, const sl_graph *g, const char *key, const char *prefix) {
  size_t k = strlen(key);
  for (int i = 0; g && i < g->n_nodes; i++)
    for (int j = 0; j < g->nodes[i].n_notes; j++)
      if (!strncmp(g->nodes[i].notes[j], key, k) && g->nodes[i].notes[j][k] == ':')
        fprintf(f, "%snode '%s':%s\n", prefix, g->nodes[i].id, g->nodes[i].notes[j] + k + 1);
}

static void print_summary(const sl_run *run, const char *dir) {
  const sl_exec_result *res = &run->result;
  char planned[32], measured[32];
  /* As report.json's memory block: on a device backend its device memory;
   * on the host the process's, its own memory included in both. */
  bool dev = run->plan->caps.device_memory;
  sl_format_bytes((uint64_t)res->planned_peak_bytes, planned, sizeof planned);
  sl_format_bytes((uint64_t)(dev ? res->measured_peak_bytes : sl_report_measured_host_bytes(res, false)), measured,
                  sizeof measured);
  char shards[48] = "";
  if (run->plan->shards > 1) snprintf(shards, sizeof shards, " (each of %d shards)", run->plan->shards);
  printf("%s: %lld chunks in %.3f s on %s%s; peak %s memory %s (planned %s)\n", run->spec->name,
         (long long)res->chunks, res->seconds, run->plan->caps.device, shards, dev ? "device" : "host", measured,
         planned);
  print_notes(stdout, run->graph, "result", "");
  printf("wrote %s/\n  results.h5:", dir);
  for (int k = 0; k < res->n_outputs; k++) printf(" %s", res->outputs[k].name);
  printf("\n");
  for (int k = 0; k < res->n_outputs; k++)
    if (sl_output_is_image(&res->outputs[k].desc)) printf("  %s.png\n", res->outputs[k].name);
  printf("  report.json\n");
}

int cmd_run(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv,
                     CLI_SET | CLI_OUT | CLI_BACKEND | CLI_MEMORY | CLI_FORCE | CLI_JSON | CLI_QUIET |
                         CLI_CHUNK | CLI_THREADS | CLI_SETTING | CLI_SHARDS,
                     true, cli_help_run, &o);
  if (rc) return rc < 0 ? 0 : rc;
  sl_error err;
  sl_error_clear(&err);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  char started[32], stamp[32];
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  sl_run_output out;
  memset(&out, 0, sizeof out);
  run_dir_ctx dctx = {&o, &out, stamp, started};
  catch_stop_signals();
  sl_run_request req = {
      .registry = sl_nodes_registry(),
      .file = o.file, .sets = o.sets, .n_sets = (size_t)o.n_sets, .backend = o.backend,
      .memory_limit = o.memory_limit, .chunk_positions = o.chunk_positions, .threads = o.threads,
      .progress = !o.quiet && !o.json, .before_alloc = before_alloc, .ctx = &dctx,
      .cancel = &g_stop_signal, .outputs = &out.target,
  };
  sl_run run;
  const int n_shards = o.shards > 1 ? o.shards : 0;
  sl_code st;
  if (n_shards) {
    /* every shard's writer nodes write into out.target: its own positions
     * of the streamed outputs as they complete, shard 0 the rest */
    sl_run *shards = sl_calloc((size_t)n_shards, sizeof *shards);
    memset(&run, 0, sizeof run);
    st = shards ? sl_run_pipeline_shards(&req, n_shards, shards, &err) : sl_fail_nomem(&err, "the shards");
    if (shards) {
      run = shards[0]; /* shard 0's result describes every output */
      for (int s = 1; s < n_shards; s++) sl_run_free(&shards[s]);
      free(shards);
    }
  } else {
    st = sl_run_pipeline(&req, &run, &err);
  }
  if (run.cost_warning[0]) fprintf(stderr, "sluice: warning: %s\n", run.cost_warning);
  sl_run_info info = {run.spec, run.plan, &run.result, out.dir, started, o.sets, o.n_sets};
  if (st == SL_OK && !o.quiet && !o.json && isatty(STDERR_FILENO))
    fprintf(stderr, "sluice: writing the outputs into %s.tmp-%d, then %s ...\n", out.dir,
            (int)getpid(), out.dir);
  if (st == SL_OK) st = sl_run_output_write(&out, &info, &g_stop_signal, &err);
  if (st == SL_OK && g_stop_signal)
    st = sl_fail(&err, SL_ERR_INTERRUPTED, "interrupted before the outputs were published");
  if (st == SL_OK) st = sl_run_output_publish(&out, &err);
  sl_run_output_abandon(&out);
  if (st == SL_OK) print_notes(stderr, run.graph, "warning", "sluice: warning: ");
  if (st == SL_ERR_INTERRUPTED) {
    fprintf(stderr, "sluice: interrupted by %s: nothing was written%s%s%s\n",
            g_stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", out.dir[0] ? "; " : "", out.dir,
            out.dir[0] ? (o.force ? " is as it was" : " was not created") : "");
    rc = sl_exit_code(SL_ERR_INTERRUPTED);
  } else if (st == SL_OK && o.json) {
    sl_json j;
    sl_json_init(&j, stdout, true);
    bool whole = sl_report_json(&j, &info);
    sl_json_finish(&j);
    if (!whole) st = sl_fail_nomem(&err, "part of the report (what was printed is incomplete)");
  } else if (st == SL_OK && !o.quiet) {
    print_summary(&run, out.dir);
  }
  if (st != SL_ERR_INTERRUPTED) rc = st == SL_OK ? 0 : cli_fail(&err);
  sl_run_free(&run);
  return rc;
}
