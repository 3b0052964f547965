/* A pipeline specification: the YAML file after parameter resolution, `${}`
 * substitution and template expansion. What remains are primitive nodes (a
 * node type from the registry) and iterate nodes (a body spec run N times).
 * Node types and their params are checked later, by the graph layer, against
 * the node descriptors; this layer checks the structure of the language. */
#ifndef SL_SPEC_H
#define SL_SPEC_H

#include <stdint.h>
#include <stdio.h>

#include "engine/core/status.h"
#include "engine/pipeline/yaml_tree.h"

typedef enum sl_ptype {
  SL_PT_INT, SL_PT_FLOAT, SL_PT_BOOL, SL_PT_STRING, SL_PT_PATH, SL_PT_SHAPE, SL_PT_LIST
} sl_ptype;

const char *sl_ptype_name(sl_ptype t);
int sl_ptype_parse(const char *name, sl_ptype *out); /* 0 ok, -1 unknown */

typedef struct sl_param_decl {
  char *name;
  sl_ptype type;
  char *doc;
  int required;           /* no default; must be given */
  sl_yaml *default_value; /* NULL when required */
  sl_loc loc;
} sl_param_decl;

/* A reference "node.port". node "inputs" means a pipeline input of this spec
 * (used by templates and iterate bodies). */
typedef struct sl_ref {
  char *node;
  char *port;
  sl_loc loc;
} sl_ref;

typedef struct sl_input_binding {
  char *name; /* the consuming node's input port */
  sl_ref ref;
} sl_input_binding;

struct sl_spec;

typedef struct sl_node_spec {
  char *id;   /* unique; template-expanded ids are "outer/inner" */
  char *type; /* node type, or "iterate" for an iterate node */
  sl_loc loc;
  size_t n_inputs;
  sl_input_binding *inputs;
  sl_yaml *params; /* MAP after substitution, or NULL */
  /* iterate nodes only: */
  struct sl_spec *body; /* expanded body spec */
  int64_t times;        /* iteration count (>= 0); with until, the most iterations */
  char *until;          /* NULL, or a body output (u8[1]): the loop stops after an
                           iteration that made it nonzero */
  sl_loc until_loc;
  int64_t expect;       /* with until: the iterations the plan expects where no
                           earlier run's count is known (0: times) */
  size_t n_carry;
  char **carry; /* names that are both body inputs and body outputs */
} sl_node_spec;

typedef struct sl_output_spec {
  char *name;
  sl_ref ref;
} sl_output_spec;

typedef struct sl_spec {
  char *name;
  char *description;
  char *file; /* absolute or as given */
  size_t n_params;
  sl_param_decl *params;
  sl_yaml **values; /* n_params resolved values (after --set / bindings) */
  size_t n_inputs;
  char **inputs; /* pipeline input names (templates, bodies) */
  size_t n_nodes;
  sl_node_spec *nodes;
  size_t n_outputs;
  sl_output_spec *outputs;
  size_t n_sources; /* files this spec was built from (main + templates) */
  char **sources;
} sl_spec;

/* Whether a location is a command-line `--set NAME=VALUE` (file "--set NAME"). */
bool sl_loc_is_setting(sl_loc l);

typedef struct sl_setting {
  const char *name;
  const char *value;
} sl_setting;

/* Loads, resolves and expands a pipeline file. `sets` are command-line
 * `--set name=value` overrides; an unknown name is an error. */
sl_code sl_spec_load(const char *path, const sl_setting *sets, size_t n_sets, sl_spec **out,
                     sl_error *err);
void sl_spec_free(sl_spec *s);
/* Prints the fully resolved pipeline as YAML (params with values, nodes with
 * substituted params, templates expanded); SL_ERR_NOMEM when out of memory. */
sl_code sl_spec_render(FILE *f, const sl_spec *s, sl_error *err);
/* Value of a resolved pipeline param, or NULL. */
const sl_yaml *sl_spec_value(const sl_spec *s, const char *name);

/* ---- added functions ---- */
/* Like sl_spec_load, from text in memory; `name` is the file name used in
 * locations. Templates and iterate bodies resolve relative to ".". */
sl_code sl_spec_load_string(const char *text, size_t len, const char *name,
                            const sl_setting *sets, size_t n_sets, sl_spec **out,
                            sl_error *err);
/* The resolved pipeline as a YAML tree (what sl_spec_render prints); NULL
 * when out of memory. */
sl_yaml *sl_spec_to_yaml(const sl_spec *s);
/* What sl_spec_render prints, as a string the caller frees (NULL when no
 * memory stream could be opened or out of memory). */
char *sl_spec_render_string(const sl_spec *s);

/* Helpers shared by the files of engine/pipeline (param_types.c, subst.c, the spec
 * loader). */
/* All type names, in sl_ptype order. */
const char *const *sl_ptype_names(size_t *n);
/* Checks a value against a param type; the error names the param and points at v. */
sl_code sl_param_check(const char *name, sl_ptype type, const sl_yaml *v, sl_error *err);
/* ${} substitution of scope's params into a copy of a scalar / a whole tree
 * (values only; keys are kept). */
sl_code sl_subst_scalar(const sl_yaml *s, const sl_spec *scope, sl_yaml **out, sl_error *err);
sl_code sl_subst_tree(const sl_yaml *y, const sl_spec *scope, sl_yaml **out, sl_error *err);
/* [A-Za-z_][A-Za-z0-9_-]* */
bool sl_is_identifier(const char *s);
/* Parses "node.port" (the ref owns its strings; free node and port). */
sl_code sl_ref_parse(const sl_yaml *v, sl_ref *out, sl_error *err);

#endif
