#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/settings.h"
#include "engine/core/util.h"
#include "engine/cli/cli.h"

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "sluice: error: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see --help)\n");
  return 2;
}

/* Value of "--opt VALUE" or "--opt=VALUE". */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  size_t len = strlen(name);
  if (!strncmp(argv[*i], name, len) && argv[*i][len] == '=') return argv[*i] + len + 1;
  if (!strcmp(argv[*i], name)) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
  }
  return NULL;
}

static bool is_opt(const char *arg, const char *name) {
  size_t len = strlen(name);
  return !strncmp(arg, name, len) && (arg[len] == 0 || arg[len] == '=');
}

int cli_parse(int argc, char **argv, unsigned flags, bool need_file, const char *help,
              cli_opts *o) {
  memset(o, 0, sizeof *o);
  o->backend = SL_BACKEND_AUTO;
  sl_error err;
  sl_error_clear(&err);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return -1;
    } else if ((flags & CLI_SET) && is_opt(a, "--set")) {
      if (!(v = opt_value(argc, argv, &i, "--set"))) return usage_error("--set needs NAME=VALUE%s", "");
      const char *eq = strchr(v, '=');
      if (!eq || eq == v) return usage_error("--set needs NAME=VALUE, got '%s'", v);
      if (o->n_sets == CLI_MAX_SETS) return usage_error("too many --set options%s", "");
      /* argv lives for the whole process: split in place. */
      char *name = (char *)v;
      name[eq - v] = 0;
      o->sets[o->n_sets++] = (sl_setting){name, eq + 1};
    } else if ((flags & CLI_OUT) && is_opt(a, "--out")) {
      if (!(o->out_dir = opt_value(argc, argv, &i, "--out"))) return usage_error("--out needs a directory%s", "");
    } else if ((flags & CLI_BACKEND) && is_opt(a, "--backend")) {
      if (!(v = opt_value(argc, argv, &i, "--backend"))) return usage_error("--backend needs auto, cpu or cuda%s", "");
      if (sl_backend_parse(v, &o->backend, &err) != SL_OK) return cli_fail(&err);
    } else if ((flags & CLI_MEMORY) && is_opt(a, "--memory-limit")) {
      if (!(v = opt_value(argc, argv, &i, "--memory-limit"))) return usage_error("--memory-limit needs a size%s", "");
      if (sl_parse_size(v, &o->memory_limit, &err) != SL_OK) return cli_fail(&err);
      if (o->memory_limit == 0) return usage_error("--memory-limit must be positive, got '%s'", v);
    } else if ((flags & CLI_CHUNK) && is_opt(a, "--chunk")) {
      if (!(v = opt_value(argc, argv, &i, "--chunk")) || !sl_parse_i64(v, &o->chunk_positions) ||
          o->chunk_positions <= 0)
        return usage_error("--chunk needs a positive number of scan positions%s", "");
    } else if ((flags & CLI_THREADS) && is_opt(a, "--threads")) {
      int64_t t;
      if (!(v = opt_value(argc, argv, &i, "--threads")) || !sl_parse_i64(v, &t) || t <= 0 || t > 4096)
        return usage_error("--threads needs a positive number%s", "");
      o->threads = (int)t;
    } else if ((flags & CLI_SHARDS) && is_opt(a, "--shards")) {
      int64_t n;
      if (!(v = opt_value(argc, argv, &i, "--shards")) || !sl_parse_i64(v, &n) || n <= 0 || n > 64)
        return usage_error("--shards needs a number from 1 to 64%s", "");
      o->shards = (int)n;
    } else if ((flags & CLI_FORCE) && !strcmp(a, "--force")) {
      o->force = true;
    } else if ((flags & CLI_JSON) && !strcmp(a, "--json")) {
      o->json = true;
    } else if ((flags & CLI_QUIET) && !strcmp(a, "--quiet")) {
      o->quiet = true;
    } else if ((flags & CLI_SETTING) && is_opt(a, "--setting")) {
      if (!(v = opt_value(argc, argv, &i, "--setting")))
        return usage_error("--setting needs NAME=VALUE%s", "");
      if (o->n_settings == 32) return usage_error("too many --setting options%s", "");
      o->settings[o->n_settings++] = v;
    } else if (a[0] == '-' && a[1] != 0) {
      return usage_error("unknown option '%s'", a);
    } else if (!o->file) {
      o->file = a;
    } else {
      return usage_error("unexpected argument '%s'", a);
    }
  }
  if (need_file && !o->file) return usage_error("a pipeline FILE is required%s", "");
  /* Settings from the environment and --setting, checked before anything runs. */
  if (sl_settings_init(o->settings, o->n_settings, &err) != SL_OK) return cli_fail(&err);
  return 0;
}

int cli_fail(const sl_error *err) {
  char buf[2048];
  sl_error_format(err, buf, sizeof buf);
  fprintf(stderr, "sluice: error: %s\n", buf);
  return sl_exit_code(err->code ? err->code : SL_ERR_INTERNAL);
}

int cli_load(const cli_opts *o, sl_spec **spec, sl_graph **graph) {
  sl_error err;
  sl_error_clear(&err);
  *spec = NULL;
  *graph = NULL;
  if (sl_spec_load(o->file, o->sets, (size_t)o->n_sets, spec, &err) != SL_OK) return cli_fail(&err);
  if (sl_graph_build(*spec, NULL, sl_nodes_registry(), graph, &err) != SL_OK) {
    sl_spec_free(*spec);
    *spec = NULL;
    return cli_fail(&err);
  }
  return 0;
}

void cli_plan_opts(const cli_opts *o, const sl_backend_caps *caps, sl_plan_opts *po) {
  memset(po, 0, sizeof *po);
  po->caps = *caps;
  po->chunk_positions = o->chunk_positions;
  po->memory_limit = o->memory_limit;
}
