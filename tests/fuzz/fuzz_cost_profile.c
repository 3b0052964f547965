/* Fuzz target for the cost profile's reader (engine/plan/cost_profile.c,
 * sl_cost_profile_parse): the profile cache and a `cost_profile` file given
 * by the user are read with it. Any bytes must give a profile or an error,
 * never a read out of bounds; a profile it accepts must write back
 * (sl_cost_profile_json) as text it reads again to the same numbers. The
 * corpus holds profiles calibrate wrote (CPU, with first calls) and cut,
 * nested and misspelt ones. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/json.h"
#include "engine/plan/cost_profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl_cost_profile p;
  sl_error err;
  sl_error_clear(&err);
  if (sl_cost_profile_parse((const char *)data, size, &p, &err) != SL_OK) return 0;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return 0;
  sl_json j;
  sl_json_init(&j, f, false);
  sl_cost_profile_json(&j, &p);
  sl_json_finish(&j);
  fclose(f);
  sl_cost_profile q;
  sl_error_clear(&err);
  if (sl_cost_profile_parse(buf, len, &q, &err) != SL_OK || q.n_rates != p.n_rates || q.kind != p.kind ||
      q.threads != p.threads) {
    fprintf(stderr, "fuzz_cost_profile: an accepted profile did not read back: %s\n", err.msg);
    abort();
  }
  for (int i = 0; i < p.n_rates; i++)
    if (strcmp(q.rates[i].type, p.rates[i].type) || q.rates[i].per_op != p.rates[i].per_op) abort();
  free(buf);
  return 0;
}
