/* Shared pieces of the command-line commands. */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/exec/exec.h"
#include "nodes/registry.h"
#include "engine/pipeline/spec.h"

enum {
  CLI_SET = 1 << 0,
  CLI_OUT = 1 << 1,
  CLI_BACKEND = 1 << 2,
  CLI_MEMORY = 1 << 3,
  CLI_FORCE = 1 << 4,
  CLI_JSON = 1 << 5,
  CLI_QUIET = 1 << 6,
  CLI_CHUNK = 1 << 7,
  CLI_THREADS = 1 << 8,
  CLI_SETTING = 1 << 9,
  CLI_SHARDS = 1 << 10,
};

#define CLI_MAX_SETS 128

typedef struct cli_opts {
  const char *file;
  sl_setting sets[CLI_MAX_SETS];
  int n_sets;
  const char *out_dir;
  int backend; /* sl_backend_kind or SL_BACKEND_AUTO */
  uint64_t memory_limit;
  int64_t chunk_positions;
  int threads;
  int shards; /* --shards N: 0 when not given */
  bool force, json, quiet;
  const char *settings[32]; /* --setting NAME=VALUE, applied by cli_parse */
  int n_settings;
} cli_opts;

typedef struct cli_command {
  const char *name;
  const char *summary;
  const char *usage; /* full --help text */
  int (*run)(int argc, char **argv);
} cli_command;

/* Parses options allowed by `flags`; a positional FILE when need_file.
 * Returns 0, or an exit code after printing the problem. `help` is printed on
 * --help (then returns -1: exit 0). */
int cli_parse(int argc, char **argv, unsigned flags, bool need_file, const char *help,
              cli_opts *o);
/* Prints "sluice: error: ..." with location and returns the exit code. */
int cli_fail(const sl_error *err);
/* Spec + graph for a file with the command line's --set values. */
int cli_load(const cli_opts *o, sl_spec **spec, sl_graph **graph);
/* Plan options for a backend's capabilities and the command line. */
void cli_plan_opts(const cli_opts *o, const sl_backend_caps *caps, sl_plan_opts *po);

int cmd_run(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_nodes(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_settings(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

extern const char *const cli_help_run, *const cli_help_plan, *const cli_help_validate,
    *const cli_help_render, *const cli_help_nodes, *const cli_help_devices, *const cli_help_settings,
    *const cli_help_calibrate;

#endif
