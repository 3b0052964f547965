/* report.json: what ran, where, how long, how much memory, from what. */
#ifndef SL_REPORT_H
#define SL_REPORT_H

#include "engine/core/json.h"
#include "engine/exec/exec.h"

typedef struct sl_run_info {
  const sl_spec *spec;
  const sl_plan *plan;
  const sl_exec_result *result;
  const char *out_dir;
  const char *started_at; /* ISO 8601 UTC */
  const sl_setting *sets;
  int n_sets;
} sl_run_info;

/* False when out of memory left a part of the report out (a param's value,
 * the resolved pipeline, an input file): the report is then incomplete. */
bool sl_report_json(sl_json *j, const sl_run_info *info);
/* A node's measured seconds as report.json gives them: on a device backend
 * a device node's kernels' device time, otherwise the host time around its
 * calls (an iterate node: its whole loop). */
double sl_report_node_seconds(const sl_plan *p, const sl_exec_result *r, int node);
/* The cost model's profile a plan used: where from, when measured. */
void sl_report_cost_profile_json(sl_json *j, const sl_plan *p);
/* 64-bit FNV-1a of a file's bytes (identity of small inputs such as pipeline
 * files); false when it cannot be read. */
bool sl_file_fnv1a(const char *path, uint64_t *hash);
/* report.json's memory.measured_peak_host_bytes: the larger of the engine's
 * host count and the process's growth from before loading to its peak. */
int64_t sl_report_measured_host_bytes(const sl_exec_result *r, bool device);

#endif
