/* sluice run: plan, check the budget, run, and publish the results
 * atomically (written under a temporary directory, then renamed). */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/util.h"
#include "engine/exec/report.h"
#include "engine/exec/run.h"
#include "engine/exec/sinks.h"
#include "engine/cli/cli.h"

const char *const cli_help_run =
    "usage: sluice run FILE [--set NAME=VALUE]... [--out DIR] [--backend auto|cpu|cuda]\n"
    "                       [--memory-limit SIZE] [--chunk N] [--threads N]\n"
    "                       [--force] [--json] [--quiet]\n"
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
    "  --threads N          CPU worker threads (default: all cores)\n"
    "  --force              replace an existing output directory\n"
    "  --json               print report.json on stdout\n"
    "  --quiet              no progress bar and no summary\n";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static sl_code make_parents(const char *dir, sl_error *err) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return sl_fail(err, SL_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
    *p = '/';
  }
  return SL_OK;
}

static bool safe_name(const char *name) {
  if (!name[0] || name[0] == '.') return false;
  for (const char *c = name; *c; c++)
    if (*c == '/' || *c == '\\') return false;
  return true;
}

/* Everything the run leaves, into a fresh temporary directory. */
static sl_code write_outputs(const char *tmp, const sl_run_info *info, sl_error *err) {
  const sl_exec_result *r = info->result;
  char path[4352];
  if (mkdir(tmp, 0777) != 0)
    return sl_fail(err, SL_ERR_IO, "cannot create directory %s: %s", tmp, strerror(errno));
  for (int o = 0; o < r->n_outputs; o++)
    if (!safe_name(r->outputs[o].name))
      return sl_fail(err, SL_ERR_PIPELINE, "output name '%s' cannot be a file name", r->outputs[o].name);
  char *rendered = NULL;
  size_t rlen = 0;
  FILE *mf = open_memstream(&rendered, &rlen);
  if (mf) {
    sl_spec_render(mf, info->spec);
    fclose(mf);
  }
  sl_attr attrs[] = {
      {"sluice_version", SLUICE_VERSION},
      {"pipeline", info->spec->name},
      {"pipeline_file", info->spec->file},
      {"started_at", info->started_at},
      {"backend", sl_backend_kind_name(info->plan->caps.kind)},
      {"device", info->plan->caps.device},
      {"resolved_pipeline", rendered ? rendered : ""},
  };
  snprintf(path, sizeof path, "%s/results.h5", tmp);
  sl_code rc = sl_write_results_h5(path, r->outputs, r->n_outputs, attrs,
                                   (int)(sizeof attrs / sizeof attrs[0]), err);
  free(rendered);
  for (int o = 0; o < r->n_outputs && rc == SL_OK; o++) {
    if (!sl_output_is_image(&r->outputs[o])) continue;
    snprintf(path, sizeof path, "%s/%s.png", tmp, r->outputs[o].name);
    rc = sl_write_png(path, &r->outputs[o], err);
  }
  if (rc != SL_OK) return rc;
  snprintf(path, sizeof path, "%s/report.json", tmp);
  FILE *f = fopen(path, "w");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  sl_json j;
  sl_json_init(&j, f, true);
  sl_report_json(&j, info);
  sl_json_finish(&j);
  if (fclose(f) != 0) return sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return SL_OK;
}

/* Renames tmp to dir; with force an existing dir is moved aside first and
 * removed only once the new one is in place. */
static sl_code publish(const char *tmp, const char *dir, bool force, sl_error *err) {
  char old[4200] = "";
  if (exists(dir)) {
    if (!force) return sl_fail(err, SL_ERR_USAGE, "output directory %s exists (use --force to replace it)", dir);
    snprintf(old, sizeof old, "%s.old-%d", dir, (int)getpid());
    if (rename(dir, old) != 0) return sl_fail(err, SL_ERR_IO, "cannot move %s aside: %s", dir, strerror(errno));
  }
  if (rename(tmp, dir) != 0) {
    int e = errno;
    if (old[0]) rename(old, dir);
    return sl_fail(err, SL_ERR_IO, "cannot move results into %s: %s", dir, strerror(e));
  }
  if (old[0]) remove_tree(old);
  return SL_OK;
}

typedef struct run_dir_ctx {
  const cli_opts *o;
  char *dir;
  size_t dir_len;
  const char *stamp;
} run_dir_ctx;

/* After planning, before allocating: say what auto chose and refuse to
 * overwrite an existing output directory. */
static sl_code before_alloc(void *vctx, const sl_plan *p, sl_error *err) {
  run_dir_ctx *c = vctx;
  if (c->o->backend == SL_BACKEND_AUTO && !c->o->quiet && !c->o->json)
    fprintf(stderr, "sluice: backend auto: using %s (%s)\n", sl_backend_kind_name(p->caps.kind),
            p->caps.device);
  if (c->o->out_dir) snprintf(c->dir, c->dir_len, "%s", c->o->out_dir);
  else snprintf(c->dir, c->dir_len, "sluice-out/%s-%s", p->graph->spec->name, c->stamp);
  size_t len = strlen(c->dir);
  while (len > 1 && c->dir[len - 1] == '/') c->dir[--len] = 0;
  if (exists(c->dir) && !c->o->force)
    return sl_fail(err, SL_ERR_USAGE,
                   "output directory %s exists (use --force to replace it, or --out DIR)", c->dir);
  return make_parents(c->dir, err);
}

int cmd_run(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv,
                     CLI_SET | CLI_OUT | CLI_BACKEND | CLI_MEMORY | CLI_FORCE | CLI_JSON | CLI_QUIET |
                         CLI_CHUNK | CLI_THREADS,
                     true, cli_help_run, &o);
  if (rc) return rc < 0 ? 0 : rc;
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  char started[32], stamp[32];
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  char dir[4096] = "", tmp[4200] = "";
  run_dir_ctx dctx = {&o, dir, sizeof dir, stamp};
  sl_run_request req = {
      .registry = sl_nodes_registry(),
      .file = o.file, .sets = o.sets, .n_sets = (size_t)o.n_sets, .backend = o.backend,
      .memory_limit = o.memory_limit, .chunk_positions = o.chunk_positions, .threads = o.threads,
      .progress = !o.quiet && !o.json, .before_alloc = before_alloc, .ctx = &dctx,
  };
  sl_run run;
  sl_error err;
  sl_error_clear(&err);
  sl_code st = sl_run_pipeline(&req, &run, &err);
  if (st == SL_OK) {
    sl_run_info info = {run.spec, run.plan, &run.result, dir, started, o.sets, o.n_sets};
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", dir, (int)getpid());
    st = write_outputs(tmp, &info, &err);
    if (st == SL_OK) st = publish(tmp, dir, o.force, &err);
    if (st != SL_OK) remove_tree(tmp);
    const sl_exec_result *res = &run.result;
    if (st == SL_OK && o.json) {
      sl_json j;
      sl_json_init(&j, stdout, true);
      sl_report_json(&j, &info);
      sl_json_finish(&j);
    } else if (st == SL_OK && !o.quiet) {
      char planned[32], measured[32];
      sl_format_bytes((uint64_t)res->planned_peak_bytes, planned, sizeof planned);
      sl_format_bytes((uint64_t)res->measured_peak_bytes, measured, sizeof measured);
      printf("%s: %lld chunks in %.3f s on %s; peak %s memory %s (planned %s)\n", run.spec->name,
             (long long)res->chunks, res->seconds, run.plan->caps.device,
             run.plan->caps.device_memory ? "device" : "host", measured, planned);
      printf("wrote %s/\n  results.h5:", dir);
      for (int k = 0; k < res->n_outputs; k++) printf(" %s", res->outputs[k].name);
      printf("\n");
      for (int k = 0; k < res->n_outputs; k++)
        if (sl_output_is_image(&res->outputs[k])) printf("  %s.png\n", res->outputs[k].name);
      printf("  report.json\n");
    }
  }
  rc = st == SL_OK ? 0 : cli_fail(&err);
  sl_run_free(&run);
  return rc;
}
