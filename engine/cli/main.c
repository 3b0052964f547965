/* sluice: the command line. */
#include <stdio.h>
#include <string.h>

#include "engine/core/fd_table.h"
#include "engine/cli/cli.h"
#include "engine/exec/sinks.h"

static const cli_command k_commands[] = {
    {"run", "run a pipeline and write its results", NULL, cmd_run},
    {"plan", "plan memory, levels and cost without running", NULL, cmd_plan},
    {"validate", "check a pipeline file", NULL, cmd_validate},
    {"render", "print the fully resolved pipeline", NULL, cmd_render},
    {"nodes", "list node types, or describe one", NULL, cmd_nodes},
    {"devices", "summarise compute backends and devices", NULL, cmd_devices},
    {"settings", "list run-time settings (SIMD path, CUDA device, ...) and their values", NULL,
     cmd_settings},
    {"calibrate", "measure this machine's cost profile for plan and run estimates", NULL,
     cmd_calibrate},
};

static void help(FILE *f) {
  fprintf(f,
          "sluice %s: declarative dataflow pipelines on CPUs and GPUs\n"
          "\n"
          "usage: sluice COMMAND [ARGS]   (sluice COMMAND --help for each)\n"
          "\n"
          "commands:\n",
          SLUICE_VERSION);
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].summary);
  fprintf(f,
          "\n"
          "exit codes:\n"
          "  0  success\n"
          "  1  runtime error (I/O, malformed input data, backend failure)\n"
          "  2  usage or pipeline error (bad option, YAML, node, param, port, type)\n"
          "  3  over the memory budget (nothing was allocated)\n");
}

int main(int argc, char **argv) {
  sl_fd_table_grow_early(); /* before any thread: engine/core/fd_table.h says why */
  sl_h5_writer_process_init(); /* before anything touches HDF5 */
  if (argc < 2) {
    help(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    help(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    printf("sluice %s\n", SLUICE_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "sluice: error: unknown command '%s' (see sluice --help)\n", argv[1]);
  return 2;
}
