/* sluice settings: the run-time settings, their values and where they came
 * from (engine/core/settings.h). */
#include <stdio.h>

#include "engine/cli/cli.h"
#include "engine/core/json.h"
#include "engine/core/settings.h"

const char *const cli_help_settings =
    "usage: sluice settings [--setting NAME=VALUE]... [--json]\n"
    "\n"
    "Lists the run-time settings: choices that change how sluice computes, never\n"
    "what (every choice gives the same bytes). Each is set by its environment\n"
    "variable or, winning over it, by --setting NAME=VALUE on run, plan, devices\n"
    "and settings; run records them in report.json.\n";

int cmd_settings(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, CLI_JSON | CLI_SETTING, false, cli_help_settings, &o);
  if (rc) return rc < 0 ? 0 : rc;
  int n;
  const sl_setting_info *t = sl_setting_table(&n);
  if (o.json) {
    sl_json j;
    sl_json_init(&j, stdout, true);
    sl_json_begin_array(&j);
    for (int i = 0; i < n; i++) {
      sl_json_begin_object(&j);
      sl_json_kv_string(&j, "name", t[i].name);
      sl_json_kv_string(&j, "value", sl_setting_text((sl_setting_id)i));
      sl_json_kv_string(&j, "from", sl_setting_origin((sl_setting_id)i));
      sl_json_kv_string(&j, "environment", t[i].env);
      sl_json_kv_string(&j, "choices", t[i].choices ? t[i].choices : "integer >= 0");
      sl_json_kv_string(&j, "doc", t[i].doc);
      sl_json_end_object(&j);
    }
    sl_json_end_array(&j);
    sl_json_finish(&j);
    return 0;
  }
  for (int i = 0; i < n; i++)
    printf("%-15s %-8s (%s; %s: %s)\n  %s\n", t[i].name, sl_setting_text((sl_setting_id)i),
           sl_setting_origin((sl_setting_id)i), t[i].env, t[i].choices ? t[i].choices : "integer >= 0",
           t[i].doc);
  return 0;
}
