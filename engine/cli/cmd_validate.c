/* sluice validate: loads a pipeline and builds its typed graph, reporting
 * the first error with its place. */
#include <stdio.h>

#include "engine/cli/cli.h"

const char *const cli_help_validate =
    "usage: sluice validate FILE [--set NAME=VALUE]...\n"
    "\n"
    "Parses the pipeline, expands templates, checks node types, params, ports,\n"
    "types and shapes. Prints 'ok' or the first error with file:line:column.\n";

int cmd_validate(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, CLI_SET, true, cli_help_validate, &o);
  if (rc) return rc < 0 ? 0 : rc;
  sl_spec *spec;
  sl_graph *g;
  if ((rc = cli_load(&o, &spec, &g))) return rc;
  printf("ok: %s (%d nodes, %d outputs)\n", o.file, g->n_nodes, g->n_outputs);
  sl_graph_free(g);
  sl_spec_free(spec);
  return 0;
}
