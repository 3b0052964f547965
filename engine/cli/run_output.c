/* The output directory of `sluice run`. See run_output.h. */
#include "engine/cli/run_output.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/core/alloc.h"
#include "engine/core/util.h"
#include "engine/exec/sinks.h"

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* A directory that holds the marker: something sluice published. */
static bool is_sluice_output(const char *dir) {
  struct stat st;
  char marker[4200];
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  snprintf(marker, sizeof marker, "%s/%s", dir, SL_OUTPUT_MARKER);
  return lstat(marker, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folders above `dir` (not dir itself). */
static sl_code make_parents(const char *dir, sl_error *err) {
  char parent[4096];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (!slash || slash == parent) return SL_OK;
  *slash = 0;
  return sl_make_dirs(parent) ? SL_OK
                              : sl_fail(err, SL_ERR_IO, "cannot create directory %s: %s", parent, strerror(errno));
}

static sl_code refuse_existing(const char *dir, bool force, sl_error *err) {
  if (!exists(dir)) return SL_OK;
  if (!force)
    return sl_fail(err, SL_ERR_USAGE,
                   "output directory %s exists (use --force to replace it, or --out DIR)", dir);
  if (!is_sluice_output(dir))
    return sl_fail(err, SL_ERR_USAGE,
                   "refusing to replace %s with --force: it is not a directory sluice wrote (no %s "
                   "marker in it); move it away or choose another --out",
                   dir, SL_OUTPUT_MARKER);
  return SL_OK;
}

sl_code sl_run_output_reserve(sl_run_output *o, const char *dir, bool force, int64_t expected_bytes,
                              sl_error *err) {
  memset(o, 0, sizeof *o);
  o->force = force;
  snprintf(o->dir, sizeof o->dir, "%s", dir);
  size_t len = strlen(o->dir);
  while (len > 1 && o->dir[len - 1] == '/') o->dir[--len] = 0;
  sl_code rc = refuse_existing(o->dir, force, err);
  if (rc == SL_OK) rc = make_parents(o->dir, err);
  if (rc != SL_OK) return rc;
  char tmp[sizeof o->tmp];
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", o->dir, (int)getpid());
  if (mkdir(tmp, 0777) != 0)
    return sl_fail(err, SL_ERR_IO, "cannot write the output directory: cannot create %s: %s", tmp,
                   strerror(errno));
  snprintf(o->tmp, sizeof o->tmp, "%s", tmp);
  struct statvfs vfs;
  if (statvfs(o->tmp, &vfs) == 0) {
    uint64_t room = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    uint64_t need = (uint64_t)(expected_bytes > 0 ? expected_bytes : 0) + (1u << 20);
    if (room < need) {
      char h_need[32], h_room[32];
      sl_format_bytes(need, h_need, sizeof h_need);
      sl_format_bytes(room, h_room, sizeof h_room);
      sl_run_output_abandon(o);
      return sl_fail(err, SL_ERR_IO, "not enough room for the outputs in %s: about %s needed, %s free",
                     o->dir, h_need, h_room);
    }
  }
  return SL_OK;
}

static bool safe_name(const char *name) {
  if (!name[0] || name[0] == '.') return false;
  for (const char *c = name; *c; c++)
    if (*c == '/' || *c == '\\') return false;
  return true;
}

static sl_code interrupted(const volatile sig_atomic_t *cancel, sl_error *err) {
  if (cancel && *cancel) return sl_fail(err, SL_ERR_INTERRUPTED, "interrupted while writing the outputs");
  return SL_OK;
}

static sl_code write_marker(const char *tmp, const sl_run_info *info, sl_error *err) {
  char path[4352];
  snprintf(path, sizeof path, "%s/%s", tmp, SL_OUTPUT_MARKER);
  FILE *f = fopen(path, "w");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  fprintf(f, "written by sluice %s, pipeline %s, started %s\n", SLUICE_VERSION, info->spec->name,
          info->started_at);
  if (fclose(f) != 0) return sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return SL_OK;
}

sl_code sl_run_output_open_results(sl_run_output *o, const sl_plan *plan, const char *started_at,
                                   sl_error *err) {
  const sl_graph *g = plan->graph;
  const sl_spec *spec = g->spec;
  for (int k = 0; k < g->n_outputs; k++)
    if (!safe_name(g->outputs[k].name))
      return sl_fail(err, SL_ERR_PIPELINE, "output name '%s' cannot be a file name", g->outputs[k].name);
  char path[4352];
  char *rendered = sl_spec_render_string(spec);
  sl_attr attrs[] = {
      {"sluice_version", SLUICE_VERSION},
      {"pipeline", spec->name},
      {"pipeline_file", spec->file},
      {"started_at", started_at},
      {"backend", sl_backend_kind_name(plan->caps.kind)},
      {"device", plan->caps.device},
      {"resolved_pipeline", rendered ? rendered : ""},
  };
  snprintf(path, sizeof path, "%s/results.h5", o->tmp);
  snprintf(o->target.dir, sizeof o->target.dir, "%s", o->tmp);
  sl_code rc = sl_h5_writer_open(path, attrs, SL_COUNT_OF(attrs), &o->target.results, err);
  free(rendered);
  /* the file set up for many chunks (stored or ragged), or a streamed output's dataset and
   * write-behind buffer made, now, before any data is read: for the outputs the plan's
   * writer nodes write, which count that buffer */
  for (int k = 0; k < g->n_outputs && rc == SL_OK; k++) {
    if (!sl_graph_output_written(g, k)) continue;
    const sl_graph_output *go = &g->outputs[k];
    const sl_tensor_desc *d = &g->nodes[go->node].out[go->port];
    if (d->encoding != SL_ENC_NONE || sl_desc_is_ragged(d))
      rc = sl_h5_writer_expect_chunked(o->target.results, go->name, err);
    else if (d->stream_rank)
      rc = sl_h5_writer_reserve(o->target.results, go->name, d, err);
  }
  return rc;
}

/* Every dataset's attributes; the file is closed. */
static sl_code finish_results(sl_run_output *o, const sl_exec_result *r, sl_error *err) {
  sl_h5_writer *w = o->target.results;
  o->target.results = NULL;
  return sl_h5_writer_finish(w, r->outputs, r->n_outputs, err);
}

sl_code sl_run_output_write(sl_run_output *o, const sl_run_info *info,
                            const volatile sig_atomic_t *cancel, sl_error *err) {
  const sl_exec_result *r = info->result;
  char path[4352];
  sl_code rc = interrupted(cancel, err);
  if (rc == SL_OK) rc = write_marker(o->tmp, info, err);
  if (rc == SL_OK) rc = finish_results(o, r, err);
  if (rc == SL_OK) rc = interrupted(cancel, err);
  if (rc != SL_OK) return rc;
  snprintf(path, sizeof path, "%s/report.json", o->tmp);
  FILE *f = fopen(path, "w");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  sl_json j;
  sl_json_init(&j, f, true);
  sl_report_json(&j, info);
  sl_json_finish(&j);
  if (fclose(f) != 0) return sl_fail(err, SL_ERR_IO, "cannot finish writing %s", path);
  return interrupted(cancel, err);
}

sl_code sl_run_output_publish(sl_run_output *o, sl_error *err) {
  char old[4200] = "";
  /* Checked again: something may have appeared at DIR while the run ran. */
  sl_code rc = refuse_existing(o->dir, o->force, err);
  if (rc != SL_OK) return rc;
  if (exists(o->dir)) {
    snprintf(old, sizeof old, "%s.old-%d", o->dir, (int)getpid());
    if (rename(o->dir, old) != 0)
      return sl_fail(err, SL_ERR_IO, "cannot move %s aside: %s", o->dir, strerror(errno));
  }
  if (rename(o->tmp, o->dir) != 0) {
    int e = errno;
    if (old[0]) rename(old, o->dir);
    return sl_fail(err, SL_ERR_IO, "cannot move results into %s: %s", o->dir, strerror(e));
  }
  o->tmp[0] = 0;
  if (old[0]) remove_tree(old); /* a sluice output, checked above */
  return SL_OK;
}

void sl_run_output_abandon(sl_run_output *o) {
  sl_h5_writer_abandon(o->target.results);
  o->target.results = NULL;
  if (o->tmp[0]) remove_tree(o->tmp);
  o->tmp[0] = 0;
}
