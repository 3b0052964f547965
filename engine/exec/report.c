#include "engine/exec/report.h"

#include "engine/core/settings.h"
#include "engine/core/util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int64_t sl_report_measured_host_bytes(const sl_exec_result *r, bool device) {
  /* What the engine counted, or the process's growth from before the
   * pipeline was loaded to its peak when that is more (the OS's view:
   * everything the run made resident). */
  int64_t engine_host = device ? r->measured_host_bytes : r->measured_peak_bytes;
  int64_t growth = r->process_rss_before_load_bytes > 0 ? r->process_rss_peak_bytes - r->process_rss_before_load_bytes : 0;
  return growth > engine_host ? growth : engine_host;
}

bool sl_file_fnv1a(const char *path, uint64_t *hash) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  uint64_t h = SL_FNV1A_START;
  unsigned char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = sl_fnv1a(buf, n, h);
  bool ok = !ferror(f);
  fclose(f);
  *hash = h;
  return ok;
}

/* The identity of a file: path, size, modification time; a content hash for
 * pipeline files (small), not for data files (they can be tens of GiB). */
static void file_identity(sl_json *j, const char *path, bool hash) {
  struct stat st;
  sl_json_begin_object(j);
  sl_json_kv_string(j, "path", path);
  bool exists = stat(path, &st) == 0;
  sl_json_kv_bool(j, "exists", exists);
  if (exists) {
    sl_json_kv_int(j, "bytes", (int64_t)st.st_size);
    sl_json_kv_int(j, "mtime", (int64_t)st.st_mtime);
    uint64_t h;
    if (hash && S_ISREG(st.st_mode) && sl_file_fnv1a(path, &h)) {
      char hex[24];
      snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
      sl_json_kv_string(j, "fnv1a64", hex);
    }
  }
  sl_json_end_object(j);
}

/* The files the run read: what nodes recorded (a master file and each of
 * its data files), then path params no node recorded; each file once (by
 * its resolved path), in that order. */
typedef struct file_list {
  char **paths;
  int n;
} file_list;

/* False when out of memory (the file is then missing from the list). */
static bool file_list_add(file_list *l, const char *path) {
  char resolved[PATH_MAX];
  const char *key = realpath(path, resolved) ? resolved : path;
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->paths[i], key)) return true;
  char *copy = sl_strdup(key);
  if (!copy || !sl_resize(&l->paths, (size_t)l->n + 1, sizeof *l->paths)) {
    free(copy);
    return false;
  }
  l->paths[l->n++] = copy;
  return true;
}

static bool collect_files(file_list *l, const sl_graph *g, bool params) {
  bool ok = true;
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    if (n->body) {
      ok &= collect_files(l, n->body, params);
      continue;
    }
    if (!params) {
      for (int k = 0; k < n->n_reads; k++) ok &= file_list_add(l, n->reads[k]);
      continue;
    }
    for (int p = 0; p < n->desc->n_params; p++)
      if (n->desc->params[p].type == SL_PT_PATH && n->params[p].s && n->params[p].s[0])
        ok &= file_list_add(l, n->params[p].s);
  }
  return ok;
}

static bool input_files(sl_json *j, const sl_graph *g) {
  file_list l = {NULL, 0};
  bool ok = collect_files(&l, g, false);
  ok &= collect_files(&l, g, true);
  for (int i = 0; i < l.n; i++) {
    file_identity(j, l.paths[i], false);
    free(l.paths[i]);
  }
  free(l.paths);
  return ok;
}

static char *yaml_text(const sl_yaml *y) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  if (y->kind == SL_Y_SCALAR) fputs(y->scalar, f);
  else sl_yaml_emit(f, y, 0);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  while (len > 0 && buf[len - 1] == '\n') buf[--len] = 0;
  return buf;
}

/* Where the results came from: the params' values, the --set options, the
 * resolved pipeline, and the identity of the pipeline and input files. */
static bool provenance_json(sl_json *j, const sl_run_info *info) {
  const sl_spec *s = info->spec;
  bool ok = true;
  sl_json_key(j, "params");
  sl_json_begin_object(j);
  for (size_t i = 0; i < s->n_params; i++) {
    sl_json_key(j, s->params[i].name);
    char *t = s->values[i] ? yaml_text(s->values[i]) : NULL;
    ok &= t || !s->values[i];
    if (t) sl_json_string(j, t);
    else sl_json_null(j);
    free(t);
  }
  sl_json_end_object(j);
  sl_json_key(j, "set");
  sl_json_begin_array(j);
  for (int i = 0; i < info->n_sets; i++) {
    char kv[1024];
    snprintf(kv, sizeof kv, "%s=%s", info->sets[i].name, info->sets[i].value);
    sl_json_string(j, kv);
  }
  sl_json_end_array(j);
  sl_json_key(j, "resolved_pipeline");
  char *rendered = sl_spec_render_string(s);
  ok &= rendered != NULL;
  sl_json_string(j, rendered ? rendered : "");
  free(rendered);
  sl_json_key(j, "pipeline_files");
  sl_json_begin_array(j);
  for (size_t i = 0; i < s->n_sources; i++) file_identity(j, s->sources[i], true);
  sl_json_end_array(j);
  sl_json_key(j, "input_files");
  sl_json_begin_array(j);
  ok &= input_files(j, info->plan->graph);
  sl_json_end_array(j);
  return ok;
}

/* A node whose kernels run on the device: not one on the host
 * (sl_plan_node.host), nor a node with produce (the executor runs that on
 * the host and copies what it makes). */
static bool is_device_node(const sl_plan *p, const sl_exec_result *r, int node) {
  const sl_node *n = &p->graph->nodes[node];
  return p->caps.device_memory && n->desc && !p->nodes[node].host && !n->desc->produce && r->node_device_seconds;
}

double sl_report_node_seconds(const sl_plan *p, const sl_exec_result *r, int node) {
  return is_device_node(p, r, node) ? r->node_device_seconds[node] : r->node_seconds[node];
}

void sl_report_cost_profile_json(sl_json *j, const sl_plan *p) {
  const sl_cost_profile *cp = &p->profile;
  sl_json_begin_object(j);
  sl_json_kv_string(j, "profile", cp->source);
  if (cp->created[0]) sl_json_kv_string(j, "created", cp->created);
  else {
    sl_json_key(j, "created");
    sl_json_null(j);
  }
  sl_cost_profile_derived_json(j, "derived_from_threads", cp);
  sl_json_kv_int(j, "calibrated_node_types", cp->n_rates);
  sl_json_kv_double(j, "bytes_per_second", cp->bytes_per_second);
  if (cp->read_bytes_per_second > 0) sl_json_kv_double(j, "read_bytes_per_second", cp->read_bytes_per_second);
  sl_json_kv_double(j, "call_seconds", cp->call_seconds);
  sl_json_kv_double(j, "batch_seconds", cp->batch_seconds);
  sl_json_kv_double(j, "run_seconds", cp->run_seconds);
  sl_json_kv_double(j, "pool_seconds_per_byte", cp->pool_seconds_per_byte);
  sl_json_kv_double(j, "first_touch_seconds_per_byte", cp->first_touch_seconds_per_byte);
  if (p->caps.kind != SL_BACKEND_CPU) {
    sl_json_kv_double(j, "host_first_touch_seconds_per_byte", cp->host_first_touch_seconds_per_byte);
    sl_json_kv_double(j, "library_load_seconds", cp->library_load_seconds);
  }
  sl_json_kv_int(j, "batches", p->batches);
  sl_json_end_object(j);
}

static double decided_seconds_all(const sl_plan *p);

/* Node i's decided rate key (its rate key and "/" variant); false when it
 * decided on no work. */
static bool decided_key(const sl_plan *p, int i, char *buf, size_t len) {
  const sl_node *n = &p->graph->nodes[i];
  if (!(n->decided_ops > 0) || p->nodes[i].body) return false;
  sl_cost_decided_key(n, p->nodes[i].cost.decided_variant, buf, len);
  return true;
}

/* The estimate of the work node i decided on from the data
 * (sl_node_decided_work), at the rate of the variant its cost declares; 0
 * when none; an iterate node's is its body's nodes' over every iteration
 * (they ran in the body's graph, which holds their records). Known only
 * once it ran: report.json adds it to the plan's. */
static double decided_seconds(const sl_plan *p, int i) {
  if (p->nodes[i].body) return decided_seconds_all(p->nodes[i].body);
  const sl_node *n = &p->graph->nodes[i];
  /* the variant's first call is paid by the first node that decided on it */
  char key[128], other[128];
  bool first = decided_key(p, i, key, sizeof key);
  for (int q = 0; q < i && first; q++) first = !decided_key(p, q, other, sizeof other) || strcmp(key, other);
  return sl_cost_decided_seconds(&p->profile, n, p->nodes[i].cost.decided_variant, n->decided_ops,
                                 &p->nodes[i].cost, first, p->caps.device_memory && n->desc && !p->nodes[i].host);
}

static double decided_seconds_all(const sl_plan *p) {
  double s = 0;
  for (int i = 0; i < p->graph->n_nodes; i++) s += decided_seconds(p, i);
  return s;
}

/* Per node: what it is, where it ran, its measured time and calls beside the
 * plan's cost and estimate (with the work it decided on from the data), and
 * its provenance notes. */
static void nodes_json(sl_json *j, const sl_run_info *info) {
  const sl_plan *p = info->plan;
  const sl_graph *g = p->graph;
  const sl_exec_result *r = info->result;
  sl_json_begin_array(j);
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    sl_json_begin_object(j);
    sl_json_kv_string(j, "id", n->id);
    sl_json_kv_string(j, "type", sl_node_type_name(n));
    sl_json_kv_int(j, "level", n->level);
    sl_json_kv_string(j, "phase", sl_phase_name(n->phase));
    sl_json_kv_int(j, "pass", n->pass);
    /* On a device backend a device node's time is its kernels' device time
     * (events); the host time of its launchers is reported beside it. */
    double measured = sl_report_node_seconds(p, r, i);
    sl_json_kv_double(j, "seconds", measured);
    if (is_device_node(p, r, i)) sl_json_kv_double(j, "launch_seconds", r->node_seconds[i]);
    /* a producer's waits for its copies, not in its seconds (exec.h) */
    if (r->node_copy_wait_seconds && r->node_copy_wait_seconds[i] > 0)
      sl_json_kv_double(j, "copy_wait_seconds", r->node_copy_wait_seconds[i]);
    sl_json_kv_int(j, "calls", r->node_calls[i]);
    sl_json_kv_int(j, "estimated_calls", p->nodes[i].calls);
    sl_json_kv_int(j, "bytes_read", p->nodes[i].cost.bytes_read);
    sl_json_kv_int(j, "bytes_written", p->nodes[i].cost.bytes_written);
    const double decided = decided_seconds(p, i), est = p->nodes[i].est_seconds + decided;
    sl_json_kv_double(j, "estimated_seconds", est);
    if (decided > 0) sl_json_kv_double(j, "estimated_decided_seconds", decided);
    /* of which the wait for a device library's load (sl_cost_warm_up_wait) */
    if (p->nodes[i].warm_up_wait_seconds > 0)
      sl_json_kv_double(j, "estimated_warm_up_wait_seconds", p->nodes[i].warm_up_wait_seconds);
    if (p->nodes[i].first_call_seconds > 0)
      sl_json_kv_double(j, "estimated_first_call_seconds", p->nodes[i].first_call_seconds);
    if (p->nodes[i].first_touch_seconds > 0)
      sl_json_kv_double(j, "estimated_first_touch_seconds", p->nodes[i].first_touch_seconds);
    /* measured / estimated: the cost model holds where this is near 1 */
    if (est > 0) sl_json_kv_double(j, "measured_over_estimated", measured / est);
    sl_json_key(j, "notes");
    sl_json_begin_array(j);
    for (int k = 0; k < n->n_notes; k++) sl_json_string(j, n->notes[k]);
    sl_json_end_array(j);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
}

/* Measured seconds per level beside the estimate, and the outputs written. */
static void measured_json(sl_json *j, const sl_run_info *info) {
  const sl_plan *p = info->plan;
  const sl_exec_result *r = info->result;
  sl_json_key(j, "levels");
  sl_json_begin_array(j);
  for (int l = 0; l < p->n_levels; l++) {
    sl_json_begin_object(j);
    sl_plan_level_json_keys(j, p, l);
    sl_json_kv_double(j, "seconds", r->level_seconds[l]);
    sl_json_kv_double(j, "estimated_seconds", p->levels[l].est_seconds);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
  /* What the run spent outside its passes: setting up (the pool's blocks,
   * tables) and finishing (the final sync, outputs, blocks given back). */
  sl_json_key(j, "outside_passes_seconds");
  sl_json_begin_object(j);
  sl_json_kv_double(j, "setup", r->setup_seconds);
  sl_json_kv_double(j, "finish", r->finish_seconds);
  sl_json_end_object(j);
  sl_json_kv_int(j, "pool_allocations", r->pool_allocations);
  /* When each pass's results were usable, from the start of execution
   * (the resident acquisition's "first usable" is pass 0's). */
  sl_json_key(j, "passes");
  sl_json_begin_array(j);
  for (int k = 0; k < r->n_passes && r->pass_end_seconds; k++) {
    sl_json_begin_object(j);
    sl_json_kv_int(j, "pass", k);
    sl_json_kv_double(j, "ends_at_seconds", r->pass_end_seconds[k]);
    /* where its time outside the levels went */
    if (r->pass_outside_seconds) {
      sl_json_key(j, "outside_levels_seconds");
      sl_json_begin_object(j);
      for (int i = 0; i < SL_PASS_OUTSIDE_N; i++)
        sl_json_kv_double(j, sl_pass_outside_names[i], r->pass_outside_seconds[k * SL_PASS_OUTSIDE_N + i]);
      sl_json_end_object(j);
    }
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
  sl_json_key(j, "outputs");
  sl_json_begin_array(j);
  for (int o = 0; o < r->n_outputs; o++) {
    char d[128];
    sl_desc_format(&r->outputs[o].desc, d, sizeof d);
    sl_json_begin_object(j);
    sl_json_kv_string(j, "name", r->outputs[o].name);
    sl_json_kv_string(j, "type", d);
    sl_json_key(j, "source");
    char src[256];
    snprintf(src, sizeof src, "%s.%s", r->outputs[o].node_id, r->outputs[o].port);
    sl_json_string(j, src);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
}

/* sl_run_pipeline's phases (seconds) as members of the open object. */
static void phases_json(sl_json *j, double load, double plan, double backend, double prepare, double execute,
                        double release) {
  sl_json_kv_double(j, "load_seconds", load);
  sl_json_kv_double(j, "plan_seconds", plan);
  sl_json_kv_double(j, "backend_seconds", backend);
  sl_json_kv_double(j, "prepare_seconds", prepare);
  sl_json_kv_double(j, "execute_seconds", execute);
  sl_json_kv_double(j, "release_seconds", release);
}


bool sl_report_json(sl_json *j, const sl_run_info *info) {
  const sl_spec *s = info->spec;
  const sl_plan *p = info->plan;
  const sl_exec_result *r = info->result;
  sl_json_begin_object(j);
  sl_json_kv_string(j, "engine", "sluice");
  sl_json_kv_string(j, "version", SLUICE_VERSION);
  sl_json_kv_string(j, "pipeline", s->name);
  sl_json_kv_string(j, "file", s->file);
  sl_json_kv_string(j, "started_at", info->started_at);
  sl_json_kv_string(j, "out_dir", info->out_dir);
  sl_json_kv_string(j, "backend", sl_backend_kind_name(p->caps.kind));
  sl_json_kv_string(j, "device", p->caps.device);
  bool ok = provenance_json(j, info);
  sl_json_kv_double(j, "seconds", r->seconds);
  /* the plan's estimate, plus the work nodes decided on from the data */
  const double decided = decided_seconds_all(p), est = p->est_seconds + decided;
  sl_json_kv_double(j, "estimated_seconds", est);
  if (decided > 0) sl_json_kv_double(j, "estimated_decided_seconds", decided);
  if (est > 0) sl_json_kv_double(j, "measured_over_estimated", r->seconds / est);
  sl_json_key(j, "cost_model");
  sl_report_cost_profile_json(j, p);
  sl_json_kv_int(j, "chunks", r->chunks);
  sl_json_kv_int(j, "chunk_positions", p->chunk_positions);
  /* a split run (engine/exec/shard.h): the report is shard 0's, whose
   * nodes streamed its chunks only */
  sl_json_kv_int(j, "shards", p->shards);
  if (r->n_shard_timings > 0) { /* each shard as it went (sl_shard_timing) */
    sl_json_key(j, "shard_runs");
    sl_json_begin_array(j);
    for (int k = 0; k < r->n_shard_timings; k++) {
      const sl_shard_timing *t = &r->shard_timings[k];
      sl_json_begin_object(j);
      sl_json_kv_int(j, "shard", k);
      if (t->device >= 0) sl_json_kv_int(j, "device", t->device);
      sl_json_kv_double(j, "began_after_seconds", t->began_after_seconds);
      phases_json(j, t->load_seconds, t->plan_seconds, t->backend_seconds, t->prepare_seconds, t->execute_seconds,
                  t->release_seconds);
      sl_json_kv_double(j, "merge_seconds", t->merge_seconds);
      sl_json_end_object(j);
    }
    sl_json_end_array(j);
  }
  sl_json_key(j, "settings");
  sl_json_begin_object(j);
  int n_settings;
  const sl_setting_info *st = sl_setting_table(&n_settings);
  for (int i = 0; i < n_settings; i++) {
    sl_json_key(j, st[i].name);
    sl_json_begin_object(j);
    sl_json_kv_string(j, "value", sl_setting_text((sl_setting_id)i));
    sl_json_kv_string(j, "from", sl_setting_origin((sl_setting_id)i));
    sl_json_end_object(j);
  }
  sl_json_end_object(j);
  /* where the wall time went outside execution (sl_run_pipeline's phases) */
  sl_json_key(j, "phases");
  sl_json_begin_object(j);
  phases_json(j, r->load_seconds, r->plan_seconds, r->backend_seconds, r->prepare_seconds, r->seconds,
              r->release_seconds);
  sl_json_end_object(j);
  sl_json_key(j, "memory");
  sl_json_begin_object(j);
  sl_json_kv_int(j, "planned_peak_bytes", r->planned_peak_bytes);
  sl_json_kv_int(j, "measured_peak_bytes", r->measured_peak_bytes);
  sl_json_kv_uint(j, "budget_bytes", p->memory_limit);
  sl_json_kv_string(j, "budgeted", p->caps.device_memory ? "device" : "host");
  if (p->caps.device_memory) {
    sl_json_kv_int(j, "planned_host_bytes", r->planned_host_bytes);
    sl_json_kv_int(j, "measured_host_bytes", r->measured_host_bytes);
  }
  /* The same by memory, named alike for host and device: the engine's
   * buffers (planned and measured by the pool) and, for the host, the whole
   * process as the OS counts it. */
  bool dev = p->caps.device_memory;
  sl_json_kv_int(j, "planned_peak_host_bytes", r->planned_host_bytes);
  /* state nodes made because the data decided (in the planned peak above),
   * and the planned peak had every node decided so (what the budget held) */
  if (r->planned_most_host_bytes > r->planned_host_bytes - r->planned_decided_host_bytes) {
    sl_json_kv_int(j, "planned_decided_host_bytes", r->planned_decided_host_bytes);
    sl_json_kv_int(j, "planned_most_host_bytes", r->planned_most_host_bytes);
  }
  int64_t engine_host = dev ? r->measured_host_bytes : r->measured_peak_bytes;
  sl_json_kv_int(j, "measured_peak_host_bytes", sl_report_measured_host_bytes(r, dev));
  sl_json_kv_int(j, "measured_engine_host_bytes", engine_host);
  sl_json_kv_int(j, "planned_peak_device_bytes", dev ? r->planned_peak_bytes : 0);
  sl_json_kv_int(j, "measured_peak_device_bytes", dev ? r->measured_peak_bytes : 0);
  sl_json_kv_int(j, "process_rss_start_bytes", r->process_rss_start_bytes);
  sl_json_kv_int(j, "process_rss_peak_bytes", r->process_rss_peak_bytes);
  if (r->process_rss_before_load_bytes > 0)
    sl_json_kv_int(j, "process_rss_before_load_bytes", r->process_rss_before_load_bytes);
  if (p->shards > 1) { /* the shards' merge buffers, over every shard (in the peaks above) */
    sl_json_kv_int(j, "planned_exchange_bytes", p->shard_exchange_bytes * p->shards);
    sl_json_kv_int(j, "measured_exchange_bytes", r->measured_exchange_bytes);
  }
  sl_json_end_object(j);
  sl_json_key(j, "nodes");
  nodes_json(j, info);
  measured_json(j, info);
  sl_json_key(j, "plan");
  sl_plan_json(j, p);
  sl_json_end_object(j);
  return ok;
}
