/* sluice nodes: lists the node types of the registry, or one type's params,
 * ports and backends, as text or JSON, from the node descriptors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/json.h"
#include "engine/core/util.h"
#include "engine/cli/cli.h"

const char *const cli_help_nodes =
    "usage: sluice nodes [TYPE] [--json]\n"
    "\n"
    "Lists node types, or one type's params, ports and backends, from the node\n"
    "descriptors.\n";

/* The backends with a kernel of the node's (a node with produce runs on
 * every device backend compiled in: the executor copies what it makes); a host node's CPU kernel runs
 * under every backend (the executor stages its data), which the text says
 * (`said`; JSON has "host" for it). */
static const char *backends_of(const sl_node_desc *d, bool said, char *buf, size_t n) {
  buf[0] = 0;
  for (int k = 0; k < SL_BACKEND_COUNT; k++)
    if (d->kernel[k] || (d->produce && k != SL_BACKEND_CPU && sl_backend_ops_for((sl_backend_kind)k))) {
      size_t len = strlen(buf);
      snprintf(buf + len, n - len, "%s%s", len ? ", " : "", sl_backend_kind_name((sl_backend_kind)k));
    }
  if (said && d->host) {
    size_t len = strlen(buf);
    snprintf(buf + len, n - len, " (a host node: runs on the host under every backend)");
  }
  return buf;
}

/* A param's type as the user writes it: an ENUM (a string restricted to
 * choices) shows as "enum". */
static const char *param_type_name(const sl_param_def *p) {
  return p->choices ? "enum" : sl_ptype_name(p->type);
}

static void node_json(sl_json *j, const sl_node_desc *d) {
  char b[128];
  sl_json_begin_object(j);
  sl_json_kv_string(j, "type", d->type);
  sl_json_kv_string(j, "doc", d->doc);
  sl_json_kv_string(j, "backends", backends_of(d, false, b, sizeof b));
  sl_json_kv_bool(j, "host", d->host);
  sl_json_key(j, "params");
  sl_json_begin_array(j);
  for (int i = 0; i < d->n_params; i++) {
    sl_json_begin_object(j);
    sl_json_kv_string(j, "name", d->params[i].name);
    sl_json_kv_string(j, "type", param_type_name(&d->params[i]));
    if (d->params[i].choices) sl_json_kv_string(j, "choices", d->params[i].choices);
    sl_json_key(j, "default");
    if (d->params[i].default_value) sl_json_string(j, d->params[i].default_value);
    else sl_json_null(j);
    sl_json_kv_string(j, "doc", d->params[i].doc);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
  for (int side = 0; side < 2; side++) {
    sl_json_key(j, side ? "outputs" : "inputs");
    sl_json_begin_array(j);
    int n = side ? d->n_outputs : d->n_inputs;
    const sl_port_def *ports = side ? d->outputs : d->inputs;
    for (int i = 0; i < n; i++) {
      sl_json_begin_object(j);
      sl_json_kv_string(j, "name", ports[i].name);
      sl_json_kv_string(j, "doc", ports[i].doc);
      if (ports[i].unit) {
        sl_json_kv_string(j, "unit", ports[i].unit);
      }
      if (!side) {
        sl_json_kv_bool(j, "optional", ports[i].optional);
      }
      sl_json_end_object(j);
    }
    sl_json_end_array(j);
  }
  sl_json_end_object(j);
}

static void node_text(const sl_node_desc *d) {
  char b[128];
  printf("%s: %s\n  backends: %s\n", d->type, d->doc, backends_of(d, true, b, sizeof b));
  printf("  params:\n");
  if (!d->n_params) printf("    (none)\n");
  for (int i = 0; i < d->n_params; i++) {
    const sl_param_def *p = &d->params[i];
    printf("    %-16s %-7s %-18s %s", p->name, param_type_name(p),
           p->default_value ? p->default_value : "(required)", p->doc);
    if (p->choices) printf(" (one of %s)", p->choices);
    printf("\n");
  }
  printf("  inputs:\n");
  if (!d->n_inputs) printf("    (none)\n");
  for (int i = 0; i < d->n_inputs; i++)
    printf("    %-16s %s%s\n", d->inputs[i].name, d->inputs[i].doc, d->inputs[i].optional ? " (optional)" : "");
  printf("  outputs:\n");
  for (int i = 0; i < d->n_outputs; i++)
    printf("    %-16s %s%s%s%s\n", d->outputs[i].name, d->outputs[i].doc,
           d->outputs[i].unit ? " [" : "", d->outputs[i].unit ? d->outputs[i].unit : "",
           d->outputs[i].unit ? "]" : "");
}

int cmd_nodes(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, CLI_JSON, false, cli_help_nodes, &o);
  if (rc) return rc < 0 ? 0 : rc;
  int count;
  const sl_node_desc **all = sl_registry_list(sl_nodes_registry(), &count);
  if (!all) {
    fputs("sluice: error: out of memory for the list of node types\n", stderr);
    return 1;
  }
  const sl_node_desc *d = NULL;
  if (o.file) {
    d = sl_registry_find(sl_nodes_registry(), o.file);
    if (!d) {
      const char *names[256];
      for (int i = 0; i < count && i < 256; i++) names[i] = all[i]->type;
      const char *best = sl_closest(o.file, names, (size_t)count);
      fprintf(stderr, "sluice: error: unknown node type '%s'%s%s%s\n", o.file,
              best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "");
      free(all);
      return 2;
    }
    all[0] = d;
    count = 1;
  }
  if (o.json) {
    sl_json j;
    sl_json_init(&j, stdout, true);
    sl_json_begin_array(&j);
    for (int i = 0; i < count; i++) node_json(&j, all[i]);
    sl_json_end_array(&j);
    sl_json_finish(&j);
  } else if (o.file) {
    node_text(all[0]);
  } else {
    for (int i = 0; i < count; i++) printf("%-20s %s\n", all[i]->type, all[i]->doc);
  }
  free(all);
  return 0;
}
