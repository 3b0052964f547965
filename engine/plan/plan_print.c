/* The plan as text (for people) and as JSON (for tools); both say the same. */
#include <string.h>

#include "engine/core/util.h"
#include "engine/plan/plan.h"

static void node_label(const sl_node *n, char *buf, size_t len) {
  snprintf(buf, len, "%s (%s)", n->id, sl_node_type_name(n));
}

/* A buffer's name ("node.port") and its tensor type, for both forms. */
static void buffer_label(const sl_plan *p, const sl_plan_buffer *bf, char *name, size_t name_len,
                         char *desc, size_t desc_len) {
  const sl_node *n = &p->graph->nodes[bf->node];
  snprintf(name, name_len, "%s.%s", n->id, n->out_names[bf->port]);
  sl_desc_format(&n->out[bf->port], desc, desc_len);
}

static void print_indented(FILE *f, const sl_plan *p, const char *ind) {
  const sl_graph *g = p->graph;
  char a[64], b[64], c[64];
  if (p->positions)
    fprintf(f, "%sscan: %lld positions in %lld chunks of up to %lld, %d pass%s over the data\n", ind,
            (long long)p->positions, (long long)p->n_chunks, (long long)p->chunk_positions,
            p->n_passes, p->n_passes > 1 ? "es" : "");
  else
    fprintf(f, "%sscan: none (whole tensors only)\n", ind);
  fprintf(f, "%slevels (each level is one batch%s):\n", ind, p->positions ? " per chunk in the stream phase" : "");
  for (int l = 0; l < p->n_levels; l++) {
    if (p->n_passes > 1)
      fprintf(f, "%s  L%-3d pass %d %-8s", ind, l, p->levels[l].pass + 1, sl_phase_name(p->levels[l].phase));
    else
      fprintf(f, "%s  L%-3d %-8s", ind, l, sl_phase_name(p->levels[l].phase));
    for (int k = 0; k < p->levels[l].n_nodes; k++) {
      char lab[256];
      int i = p->levels[l].nodes[k];
      node_label(&g->nodes[i], lab, sizeof lab);
      fprintf(f, "%s%s", k ? ", " : " ", lab);
      if (p->levels[l].n_nodes > 1) fprintf(f, " ~%.3g s", p->nodes[i].est_seconds);
      if (p->nodes[i].warm_up_wait_seconds > 0)
        fprintf(f, " (~%.3g s of it waiting for a device library's load)", p->nodes[i].warm_up_wait_seconds);
    }
    fprintf(f, "   ~%.3g s\n", p->levels[l].est_seconds);
  }
  fprintf(f, "%sbuffers (lifetime in levels; streamed buffers hold one chunk):\n", ind);
  for (int i = 0; i < p->n_buffers; i++) {
    const sl_plan_buffer *bf = &p->buffers[i];
    char name[192], desc[128];
    buffer_label(p, bf, name, sizeof name, desc, sizeof desc);
    sl_format_bytes((uint64_t)bf->bytes, a, sizeof a);
    char slot[32];
    snprintf(slot, sizeof slot, bf->view ? "view   " : bf->unread ? "unread " : bf->lent ? "lent   " : "slot %d",
             bf->slot);
    fprintf(f, "%s  %-28s %-26s %10s%s  L%d-L%d  %s%s%s%s%s%s\n", ind, name, desc, a,
            bf->streamed ? "/chunk" : "      ", bf->first_level, bf->last_level, slot,
            bf->reduction ? "  reduction" : "", bf->graph_output ? "  output" : "",
            bf->in_place_of >= 0 ? "  in place" : "",
            bf->combine != SL_COMBINE_NONE ? "  combine " : "",
            bf->combine != SL_COMBINE_NONE ? sl_combine_name(bf->combine) : "");
  }
  /* What each node holds for the whole run (the "node state" below, by
   * node): tables, file indexes, the writers' buffers. */
  bool held = false;
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node_cost *nc = &p->nodes[i].cost;
    if (nc->state_bytes <= 0 && nc->decided_state_bytes <= 0 &&
        (nc->device_state_bytes <= 0 || !p->caps.device_memory))
      continue;
    char lab[256];
    node_label(&g->nodes[i], lab, sizeof lab);
    if (!held) fprintf(f, "%snode state (held for the run):\n", ind);
    held = true;
    sl_format_bytes((uint64_t)nc->state_bytes, a, sizeof a);
    fprintf(f, "%s  %-40s %10s host", ind, lab, a);
    if (nc->device_state_bytes > 0 && p->caps.device_memory) {
      sl_format_bytes((uint64_t)nc->device_state_bytes, b, sizeof b);
      fprintf(f, ", %s device", b);
    }
    if (nc->decided_state_bytes > 0) {
      sl_format_bytes((uint64_t)nc->decided_state_bytes, b, sizeof b);
      fprintf(f, ", and %s host if the data decide", b);
    }
    fprintf(f, "%s\n", g->nodes[i].desc && g->nodes[i].desc->sink ? "  (writes an output)" : "");
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (p->nodes[i].body) {
      char est[96] = "";
      if (p->nodes[i].calls_from_history)
        snprintf(est, sizeof est, " (estimated at %lld: its last run)", (long long)p->nodes[i].calls);
      else if (p->nodes[i].calls_expected)
        snprintf(est, sizeof est, " (estimated at %lld: its expect, never ran)", (long long)p->nodes[i].calls);
      else if (g->nodes[i].until_out >= 0)
        snprintf(est, sizeof est, " (estimated at the most: never ran)");
      fprintf(f, "%siterate node '%s': body planned once, run %s%lld times%s%s%s%s:\n", ind,
              g->nodes[i].id, g->nodes[i].until_out >= 0 ? "at most " : "",
              (long long)g->nodes[i].times, g->nodes[i].until_out >= 0 ? ", until '" : "",
              g->nodes[i].until_out >= 0 ? g->nodes[i].out_names[g->nodes[i].until_out] : "",
              g->nodes[i].until_out >= 0 ? "' holds" : "", est);
      char deeper[64];
      snprintf(deeper, sizeof deeper, "%s    ", ind);
      print_indented(f, p->nodes[i].body, deeper);
    }
  sl_format_bytes((uint64_t)p->slot_bytes, a, sizeof a);
  fprintf(f, "%smemory:\n%s  pooled slots       %s in %d slots\n", ind, ind, a, p->n_slots);
  sl_format_bytes((uint64_t)p->live_peak_bytes, a, sizeof a);
  fprintf(f, "%s  live buffers peak  %s\n", ind, a);
  sl_format_bytes((uint64_t)p->workspace_bytes, a, sizeof a);
  fprintf(f, "%s  node workspace     %s\n", ind, a);
  if (p->worker_scratch_bytes) {
    sl_format_bytes((uint64_t)p->worker_scratch_bytes, a, sizeof a);
    fprintf(f, "%s  worker scratch     %s (%lld bytes per worker)\n", ind, a,
            (long long)p->worker_scratch_stride);
  }
  sl_format_bytes((uint64_t)p->state_bytes, a, sizeof a);
  fprintf(f, "%s  node state         %s\n", ind, a);
  if (p->device_state_bytes) {
    sl_format_bytes((uint64_t)p->device_state_bytes, a, sizeof a);
    fprintf(f, "%s  node device state  %s\n", ind, a);
  }
  if (p->decided_state_bytes) {
    sl_format_bytes((uint64_t)p->decided_state_bytes, a, sizeof a);
    fprintf(f, "%s  decided state      %s (host; made only where the data decide, in the budget)\n", ind, a);
  }
  if (p->partial_bytes) {
    sl_format_bytes((uint64_t)p->partial_bytes, a, sizeof a);
    fprintf(f, "%s  reduction partials %s\n", ind, a);
  }
  sl_format_bytes((uint64_t)p->output_bytes, a, sizeof a);
  fprintf(f, "%s  assembled outputs  %s\n", ind, a);
  if (p->process_bytes) {
    sl_format_bytes((uint64_t)p->process_bytes, a, sizeof a);
    fprintf(f, "%s  the process itself %s (libraries, parsing, writer; host)\n", ind, a);
  }
  if (p->body_bytes) {
    sl_format_bytes((uint64_t)p->body_bytes, a, sizeof a);
    fprintf(f, "%s  iterate bodies     %s\n", ind, a);
  }
  if (p->shards > 1) {
    sl_format_bytes((uint64_t)p->shard_exchange_bytes, a, sizeof a);
    fprintf(f, "%s  shards' merge      %s (one of %d shards; host)\n", ind, a, p->shards);
  }
  sl_format_bytes((uint64_t)p->peak_host_bytes, a, sizeof a);
  sl_format_bytes((uint64_t)p->peak_device_bytes, b, sizeof b);
  sl_format_bytes(p->memory_limit, c, sizeof c);
  fprintf(f, "%s  peak host %s, peak device %s, budget %s\n", ind, a, b, c);
  if (p->decided_state_bytes) {
    sl_format_bytes((uint64_t)p->peak_host_bytes_most, a, sizeof a);
    fprintf(f, "%s  peak host with every decided state %s\n", ind, a);
  }
  sl_format_bytes((uint64_t)p->bytes_read, a, sizeof a);
  sl_format_bytes((uint64_t)p->bytes_written, b, sizeof b);
  fprintf(f, "%straffic: read %s, written %s, work %lld ops\n", ind, a, b, (long long)p->ops);
  /* The CPU's device names the machine's CPUs; the plan's workers
   * (--threads) may be fewer, and profiles are calibrated per count. */
  const bool cpu = p->caps.kind == SL_BACKEND_CPU, builtin = sl_cost_profile_is_builtin(&p->profile);
  char workers[48] = "", hint[96] = "";
  if (cpu)
    snprintf(workers, sizeof workers, ", %d worker%s", p->caps.compute_units, p->caps.compute_units == 1 ? "" : "s");
  if (builtin && cpu)
    snprintf(hint, sizeof hint, " guesses, see `sluice calibrate --threads %d`", p->caps.compute_units);
  else if (builtin)
    snprintf(hint, sizeof hint, " guesses, see `sluice calibrate`");
  else if (p->profile.derived_from[0] && p->profile.derived_from[1])
    snprintf(hint, sizeof hint, ", derived from %d and %d threads, calibrated ", p->profile.derived_from[0],
             p->profile.derived_from[1]);
  else if (p->profile.derived_from[0])
    snprintf(hint, sizeof hint, ", derived from %d thread%s, calibrated ", p->profile.derived_from[0],
             p->profile.derived_from[0] == 1 ? "" : "s");
  else
    snprintf(hint, sizeof hint, ", calibrated ");
  fprintf(f, "%sestimated time: %.4g s on %s%s (%lld batches; cost profile: %s%s%s)\n", ind, p->est_seconds,
          p->caps.device, workers, (long long)p->batches, p->profile.source, hint,
          builtin ? "" : p->profile.created);
  for (int i = 0; i < p->graph->n_nodes; i++)
    if (p->nodes[i].decided_seconds_most > 0)
      fprintf(f, "%s  node '%s' may add up to %.3g s, decided from the data (report.json estimates it if it "
              "runs)\n", ind, p->graph->nodes[i].id, p->nodes[i].decided_seconds_most);
}

void sl_plan_print(FILE *f, const sl_plan *p) {
  sl_plan_print_regions(f, p);
  print_indented(f, p, "");
}

void sl_plan_level_json_keys(sl_json *j, const sl_plan *p, int l) {
  sl_json_kv_int(j, "level", l);
  sl_json_kv_string(j, "phase", sl_phase_name(p->levels[l].phase));
  sl_json_kv_int(j, "pass", p->levels[l].pass);
}

/* Integer members of a JSON object, in order: the plan's objects are mostly
 * counts and byte sizes, written from tables rather than call after call. */
typedef struct json_int {
  const char *key;
  int64_t value;
} json_int;

static void json_ints(sl_json *j, const json_int *fields, size_t n) {
  for (size_t i = 0; i < n; i++) sl_json_kv_int(j, fields[i].key, fields[i].value);
}
#define JSON_INTS(j, ...)                                      \
  do {                                                         \
    const json_int fields_[] = {__VA_ARGS__};                  \
    json_ints(j, fields_, sizeof fields_ / sizeof *fields_);   \
  } while (0)

static void levels_json(sl_json *j, const sl_plan *p) {
  sl_json_begin_array(j);
  for (int l = 0; l < p->n_levels; l++) {
    sl_json_begin_object(j);
    sl_plan_level_json_keys(j, p, l);
    sl_json_key(j, "nodes");
    sl_json_begin_array(j);
    for (int k = 0; k < p->levels[l].n_nodes; k++)
      sl_json_string(j, p->graph->nodes[p->levels[l].nodes[k]].id);
    sl_json_end_array(j);
    sl_json_kv_double(j, "estimated_seconds", p->levels[l].est_seconds);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
}

static void nodes_json(sl_json *j, const sl_plan *p) {
  const sl_graph *g = p->graph;
  sl_json_begin_array(j);
  for (int i = 0; i < g->n_nodes; i++) {
    const sl_node *n = &g->nodes[i];
    const sl_plan_node *pn = &p->nodes[i];
    int passes = __builtin_popcount(n->pass_mask);
    sl_json_begin_object(j);
    sl_json_kv_string(j, "id", n->id);
    sl_json_kv_string(j, "type", sl_node_type_name(n));
    sl_json_kv_string(j, "phase", sl_phase_name(n->phase));
    JSON_INTS(j, {"pass", n->pass}, {"runs_in_passes", passes ? passes : 1},
              {"bytes_read", pn->cost.bytes_read}, {"bytes_written", pn->cost.bytes_written},
              {"ops", pn->cost.ops}, {"workspace_bytes", pn->cost.workspace_bytes},
              {"per_worker_bytes", pn->cost.per_worker_bytes}, {"state_bytes", pn->cost.state_bytes},
              {"device_state_bytes", pn->cost.device_state_bytes});
    if (pn->cost.host_fallback_bytes > 0) sl_json_kv_int(j, "host_fallback_bytes", pn->cost.host_fallback_bytes);
    if (pn->cost.device_host_bytes > 0) sl_json_kv_int(j, "device_host_bytes", pn->cost.device_host_bytes);
    if (pn->cost.decided_state_bytes > 0) sl_json_kv_int(j, "decided_state_bytes", pn->cost.decided_state_bytes);
    sl_json_kv_bool(j, "host", n->desc && (n->desc->host || (p->caps.device_memory && pn->host)));
    sl_json_kv_bool(j, "sink", n->desc && n->desc->sink);
    sl_json_kv_double(j, "estimated_seconds", pn->est_seconds);
    if (pn->warm_up_wait_seconds > 0)
      sl_json_kv_double(j, "estimated_warm_up_wait_seconds", pn->warm_up_wait_seconds);
    if (pn->first_call_seconds > 0) sl_json_kv_double(j, "estimated_first_call_seconds", pn->first_call_seconds);
    if (pn->first_touch_seconds > 0) sl_json_kv_double(j, "estimated_first_touch_seconds", pn->first_touch_seconds);
    if (pn->decided_seconds_most > 0)
      sl_json_kv_double(j, "estimated_decided_seconds_most", pn->decided_seconds_most);
    sl_json_kv_int(j, "estimated_calls", pn->calls);
    if (pn->body) {
      sl_json_kv_int(j, "times", n->times);
      if (n->until_out >= 0) {
        sl_json_kv_string(j, "until", n->out_names[n->until_out]);
        sl_json_kv_bool(j, "estimated_from_last_run", pn->calls_from_history);
        if (n->expect > 0) sl_json_kv_int(j, "expect", n->expect);
        sl_json_kv_bool(j, "estimated_from_expect", pn->calls_expected);
      }
      sl_json_key(j, "body");
      sl_plan_json(j, pn->body);
    }
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
}

static void buffers_json(sl_json *j, const sl_plan *p) {
  sl_json_begin_array(j);
  for (int i = 0; i < p->n_buffers; i++) {
    const sl_plan_buffer *bf = &p->buffers[i];
    char name[192], desc[128];
    buffer_label(p, bf, name, sizeof name, desc, sizeof desc);
    sl_json_begin_object(j);
    sl_json_kv_string(j, "name", name);
    sl_json_kv_string(j, "type", desc);
    sl_json_kv_int(j, "bytes", bf->bytes);
    sl_json_kv_bool(j, "streamed", bf->streamed);
    sl_json_kv_bool(j, "reduction", bf->reduction);
    sl_json_kv_bool(j, "output", bf->graph_output);
    sl_json_kv_bool(j, "in_place", bf->in_place_of >= 0);
    if (bf->combine != SL_COMBINE_NONE) sl_json_kv_string(j, "combine", sl_combine_name(bf->combine));
    if (bf->variable) sl_json_kv_bool(j, "variable_size", true);
    if (bf->view) sl_json_kv_bool(j, "view", true);
    if (bf->lent) sl_json_kv_bool(j, "lent", true);
    if (bf->unread) sl_json_kv_bool(j, "unread", true);
    if (bf->partial_bytes) sl_json_kv_int(j, "partial_bytes", bf->partial_bytes);
    JSON_INTS(j, {"first_level", bf->first_level}, {"last_level", bf->last_level},
              {"slot", bf->slot});
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
}

void sl_plan_json(sl_json *j, const sl_plan *p) {
  sl_json_begin_object(j);
  sl_json_kv_string(j, "backend", sl_backend_kind_name(p->caps.kind));
  sl_json_kv_string(j, "device", p->caps.device);
  JSON_INTS(j, {"positions", p->positions}, {"chunk_positions", p->chunk_positions},
            {"chunks", p->n_chunks}, {"passes", p->n_passes});
  sl_json_key(j, "regions");
  sl_plan_regions_json(j, p);
  sl_json_key(j, "levels");
  levels_json(j, p);
  sl_json_key(j, "nodes");
  nodes_json(j, p);
  sl_json_key(j, "buffers");
  buffers_json(j, p);
  sl_json_key(j, "memory");
  sl_json_begin_object(j);
  JSON_INTS(j, {"slots", p->n_slots}, {"slot_bytes", p->slot_bytes},
            {"live_peak_bytes", p->live_peak_bytes}, {"workspace_bytes", p->workspace_bytes},
            {"worker_scratch_bytes", p->worker_scratch_bytes},
            {"state_bytes", p->state_bytes}, {"device_state_bytes", p->device_state_bytes},
            {"output_bytes", p->output_bytes}, {"partial_bytes", p->partial_bytes},
            {"process_bytes", p->process_bytes},
            {"body_bytes", p->body_bytes}, {"shards", p->shards},
            {"shard_exchange_bytes", p->shard_exchange_bytes},
            {"peak_host_bytes", p->peak_host_bytes}, {"peak_device_bytes", p->peak_device_bytes},
            {"decided_state_bytes", p->decided_state_bytes}, {"peak_host_bytes_most", p->peak_host_bytes_most});
  sl_json_kv_uint(j, "budget_bytes", p->memory_limit);
  sl_json_end_object(j);
  JSON_INTS(j, {"bytes_read", p->bytes_read}, {"bytes_written", p->bytes_written}, {"ops", p->ops});
  sl_json_kv_double(j, "estimated_seconds", p->est_seconds);
  sl_json_kv_int(j, "batches", p->batches);
  sl_json_kv_string(j, "cost_profile", p->profile.source);
  sl_cost_profile_derived_json(j, "cost_profile_derived_from_threads", &p->profile);
  sl_json_end_object(j);
}
