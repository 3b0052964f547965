/* sluice render: prints the fully resolved pipeline (params, substitutions,
 * templates expanded). */
#include <stdio.h>

#include "engine/cli/cli.h"

const char *const cli_help_render =
    "usage: sluice render FILE [--set NAME=VALUE]...\n"
    "\n"
    "Prints the fully resolved pipeline: param values, substitutions done,\n"
    "templates expanded (node ids 'outer/inner').\n";

int cmd_render(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, CLI_SET, true, cli_help_render, &o);
  if (rc) return rc < 0 ? 0 : rc;
  sl_spec *spec = NULL;
  sl_error err;
  sl_error_clear(&err);
  if (sl_spec_load(o.file, o.sets, (size_t)o.n_sets, &spec, &err) != SL_OK) return cli_fail(&err);
  sl_code code = sl_spec_render(stdout, spec, &err);
  sl_spec_free(spec);
  return code ? cli_fail(&err) : 0;
}
