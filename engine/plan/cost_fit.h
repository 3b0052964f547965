/* Fitting a node type's rate (sl_cost_rate) to what calibrate measured:
 * each sample one node of the type in one calibration run (its calls, its
 * declared work, its seconds). sluice calibrate (engine/cli/cmd_calibrate.c)
 * gathers the samples; the fit is here so that tests can give it samples
 * whose answer they know. */
#ifndef SL_COST_FIT_H
#define SL_COST_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/graph/node.h"
#include "engine/plan/cost_profile.h"

typedef struct sl_cost_sample {
  char type[48];      /* the rate key ("type/dtype") */
  int64_t calls;
  sl_node_cost cost;  /* over all its calls */
  double seconds;
} sl_cost_sample;

/* r's run_seconds, call_seconds, seconds_per_unit and run_work_least from
 * n samples: of every combination of a setup once per run, a cost per call
 * and a cost per unit of work (ops with per_op, else bytes moved), the
 * non-negative weighted least-squares fit with the least relative error
 * (see cost_fit.c). call_default and bytes_per_second: the profile's
 * generic call cost and copy bandwidth (0: none). False when out of
 * memory. */
bool sl_cost_fit_rate(const sl_cost_sample *s, int n, bool per_op, double call_default, double bytes_per_second,
                      sl_cost_rate *r);

#endif
