/* Internal to engine/pipeline: what the files of the spec loader share.
 *   spec.c         files: loading, the top-level structure, freeing
 *   spec_checks.c  structure checks and error messages with places
 *   param_decls.c  a file's `params:` and `inputs:` declarations and values
 *   spec_expand.c  node entries: primitive nodes, `use:` templates, `iterate:`
 *                  bodies, and references through expanded templates
 * Every error carries the file:line:col of the text at fault. */
#ifndef SL_SPEC_LOADER_H
#define SL_SPEC_LOADER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/pipeline/spec.h"

enum { SL_SPEC_MAX_DEPTH = 16 };

/* Element count of a static table of allowed keys. */
#define SL_SPEC_COUNT(a) (sizeof(a) / sizeof *(a))

/* The chain of files being loaded, to report template recursion. */
typedef struct sl_spec_loader {
  char *chain[SL_SPEC_MAX_DEPTH + 2];      /* canonical paths being loaded */
  char *chain_show[SL_SPEC_MAX_DEPTH + 2]; /* as the user wrote them */
  int depth;
} sl_spec_loader;

/* How the params of a file get their values. */
typedef struct sl_spec_bindings {
  int is_top;
  const sl_setting *sets; /* top level: --set */
  size_t n_sets;
  const sl_yaml *params; /* template / body: the entry's params (substituted) */
  const char *entry_id;
  const char *what; /* "pipeline", "template" or "iterate body" */
  sl_loc entry_loc;
} sl_spec_bindings;

/* An expanded `use:` entry: outer refs "<id>.<out>" resolve to refs[k]. */
typedef struct sl_alias {
  char *id;
  char *file; /* template path, for messages */
  size_t n;
  char **outs;
  sl_ref *refs;
} sl_alias;

typedef struct sl_aliases {
  sl_alias *a;
  size_t n;
} sl_aliases;

/* ---- spec_checks.c ---- */
/* Puts location l on err; returns err's code. */
sl_code sl_spec_fail_at(sl_error *err, sl_loc l);
/* " (did you mean 'x'?)" or "" into buf. */
void sl_spec_did_you_mean(const char *word, const char *const *cands, size_t n, char *buf,
                          size_t bn);
/* "a, b, c" (or "(none)") into buf. */
void sl_spec_join_list(const char *const *items, size_t n, char *buf, size_t bn);
/* "a mapping", "a sequence" or "text", for messages. */
const char *sl_yaml_kind_name(const sl_yaml *y);
/* Every key of map is one of allowed; `where` names the map in the error. */
sl_code sl_spec_check_keys(const sl_yaml *map, const char *const *allowed, size_t n,
                           const char *where, sl_error *err);
sl_code sl_spec_want_scalar(const sl_yaml *v, const char *what, sl_error *err);
sl_code sl_spec_want_map(const sl_yaml *v, const char *what, sl_error *err);
/* Node ids: letters, digits, '_' and '-' ('.' and '/' are reserved). */
bool sl_spec_valid_id(const char *s);
/* Is name one of names[0..n)? */
bool sl_spec_has_name(const char *const *names, size_t n, const char *name);
/* Records a file the spec was built from (once). */
sl_code sl_spec_add_source(sl_spec *s, const char *file, sl_error *err);
/* a b c joined; NULL when out of memory. */
char *sl_str_concat3(const char *a, const char *b, const char *c);
void sl_ref_free(sl_ref *r);
/* *out is a copy of r, or all NULL when out of memory (SL_ERR_NOMEM). */
sl_code sl_ref_copy(const sl_ref *r, sl_ref *out, sl_error *err);
/* Fails with SL_ERR_NOMEM for `what` at l. */
sl_code sl_spec_nomem_at(sl_error *err, const char *what, sl_loc l);

/* ---- param_decls.c ---- */
sl_code sl_spec_parse_decls(sl_spec *s, const sl_yaml *params, sl_error *err);
sl_code sl_spec_parse_inputs_decl(sl_spec *s, const sl_yaml *in, sl_error *err);
/* s->values from the defaults and b (--set, or the entry's params), checked
 * against the declared types; paths resolved where they were written. */
sl_code sl_spec_resolve_values(sl_spec *s, const sl_spec_bindings *b, sl_error *err);

/* ---- spec_expand.c ---- */
/* Adds the node(s) of one `nodes:` entry to s: a primitive node, a template's
 * nodes under "<id>/" (and its outputs to as), or an iterate node. */
sl_code sl_spec_expand_entry(sl_spec_loader *L, sl_spec *s, sl_aliases *as, const char *id,
                             sl_loc id_loc, const sl_yaml *raw, const char *base_dir,
                             sl_error *err);
/* Resolves r through template outputs to a node of s or a pipeline input. */
sl_code sl_spec_resolve_ref(const sl_spec *s, const sl_aliases *as, sl_ref *r, sl_error *err);
void sl_aliases_free(sl_aliases *as);

/* ---- spec.c ---- */
/* Loads the file at path with bindings b; use_loc is where a template or
 * body names it (NULL at the top level). */
sl_code sl_spec_load_path(sl_spec_loader *L, const char *path, const sl_loc *use_loc,
                          const sl_spec_bindings *b, sl_spec **out, sl_error *err);

#endif
