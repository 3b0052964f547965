/* Pipeline file -> sl_spec: structure checks, parameter resolution (defaults,
 * --set, template bindings), `${}` substitution, template (`use:`) expansion
 * and iterate bodies. Every error carries the file:line:col of the text at
 * fault. */
#define _POSIX_C_SOURCE 200809L
#include "engine/pipeline/spec.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/util.h"

enum { SL_SPEC_MAX_DEPTH = 16 };

static const char *const k_top_keys[] = {"pipeline", "description", "params",
                                         "inputs",   "nodes",       "outputs"};
static const char *const k_node_keys[] = {"type",   "use",   "iterate", "inputs",
                                          "params", "times", "carry"};
static const char *const k_decl_keys[] = {"type", "doc", "default", "required"};
#define COUNT(a) (sizeof(a) / sizeof *(a))

typedef struct loader {
  char *chain[SL_SPEC_MAX_DEPTH + 2];      /* canonical paths being loaded */
  char *chain_show[SL_SPEC_MAX_DEPTH + 2]; /* as the user wrote them */
  int depth;
} loader;

/* How the params of a file get their values. */
typedef struct bindings {
  int is_top;
  const sl_setting *sets; /* top level: --set */
  size_t n_sets;
  const sl_yaml *params; /* template / body: the entry's params (substituted) */
  const char *entry_id;
  const char *what; /* "template" or "iterate body" */
  sl_loc entry_loc;
} bindings;

/* An expanded `use:` entry: outer refs "<id>.<out>" resolve to refs[k]. */
typedef struct alias {
  char *id;
  char *file; /* template path, for messages */
  size_t n;
  char **outs;
  sl_ref *refs;
} alias;

typedef struct aliases {
  alias *a;
  size_t n;
} aliases;

/* ---- small helpers ----------------------------------------------------- */

static sl_code fail_at_loc(sl_error *err, sl_loc l) {
  sl_error_at(err, l.file, l.line, l.col);
  return err ? err->code : SL_ERR_PIPELINE;
}

/* " (did you mean 'x'?)" or "" */
static void did_you_mean(const char *word, const char *const *cands, size_t n, char *buf,
                         size_t bn) {
  const char *best = sl_closest(word, cands, n);
  if (best)
    snprintf(buf, bn, " (did you mean '%s'?)", best);
  else
    buf[0] = 0;
}

static void join_list(const char *const *items, size_t n, char *buf, size_t bn) {
  size_t o = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && o + 1 < bn; i++) {
    int k = snprintf(buf + o, bn - o, "%s%s", i ? ", " : "", items[i]);
    if (k > 0) o += (size_t)k;
  }
  if (n == 0) snprintf(buf, bn, "(none)");
}

static const char *kind_name(const sl_yaml *y) {
  switch (y->kind) {
    case SL_Y_MAP: return "a mapping";
    case SL_Y_SEQ: return "a sequence";
    default: return "text";
  }
}

static sl_code check_keys(const sl_yaml *map, const char *const *allowed, size_t n,
                          const char *where, sl_error *err) {
  for (size_t i = 0; i < map->n; i++) {
    bool ok = false;
    for (size_t k = 0; k < n; k++)
      if (!strcmp(map->keys[i], allowed[k])) ok = true;
    if (ok) continue;
    char dym[160], list[256];
    did_you_mean(map->keys[i], allowed, n, dym, sizeof dym);
    join_list(allowed, n, list, sizeof list);
    sl_fail(err, SL_ERR_PIPELINE, "unknown key '%s' in %s%s; expected one of: %s", map->keys[i],
            where, dym, list);
    return fail_at_loc(err, map->key_locs[i]);
  }
  return SL_OK;
}

static sl_code want_scalar(const sl_yaml *v, const char *what, sl_error *err) {
  if (v->kind == SL_Y_SCALAR) return SL_OK;
  sl_fail(err, SL_ERR_PIPELINE, "%s must be text, found %s", what, kind_name(v));
  return fail_at_loc(err, v->loc);
}

static sl_code want_map(const sl_yaml *v, const char *what, sl_error *err) {
  if (v->kind == SL_Y_MAP) return SL_OK;
  char *shown = sl_yaml_flow_string(v);
  sl_fail(err, SL_ERR_PIPELINE, "%s must be a mapping (key: value), found %s '%s'", what,
          kind_name(v), shown);
  free(shown);
  return fail_at_loc(err, v->loc);
}

/* Node ids: letters, digits, '_' and '-' ('.' and '/' are reserved). */
static bool valid_id(const char *s) {
  if (!s[0]) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

static void add_source(sl_spec *s, const char *file) {
  for (size_t i = 0; i < s->n_sources; i++)
    if (!strcmp(s->sources[i], file)) return;
  s->sources = sl_xrealloc(s->sources, (s->n_sources + 1) * sizeof *s->sources);
  s->sources[s->n_sources++] = sl_strdup(file);
}

static char *concat3(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *r = sl_xcalloc(la + lb + lc + 1, 1);
  memcpy(r, a, la);
  memcpy(r + la, b, lb);
  memcpy(r + la + lb, c, lc);
  return r;
}

static void ref_free(sl_ref *r) {
  free(r->node);
  free(r->port);
  r->node = r->port = NULL;
}

static sl_ref ref_copy(const sl_ref *r) {
  sl_ref c = {sl_strdup(r->node), sl_strdup(r->port), r->loc};
  return c;
}

sl_code sl_ref_parse(const sl_yaml *v, sl_ref *out, sl_error *err) {
  memset(out, 0, sizeof *out);
  if (v->kind != SL_Y_SCALAR) {
    sl_fail(err, SL_ERR_PIPELINE,
            "expected a reference 'node.port' (or 'inputs.NAME'), found %s", kind_name(v));
    return fail_at_loc(err, v->loc);
  }
  const char *t = v->scalar;
  const char *dot = strchr(t, '.');
  if (!dot || dot == t || !dot[1] || strchr(dot + 1, '.') || strchr(dot + 1, '/')) {
    sl_fail(err, SL_ERR_PIPELINE,
            "expected a reference 'node.port' (or 'inputs.NAME'), found '%s'", t);
    return fail_at_loc(err, v->loc);
  }
  out->node = sl_strndup(t, (size_t)(dot - t));
  out->port = sl_strdup(dot + 1);
  out->loc = v->loc;
  return SL_OK;
}

/* ---- freeing ----------------------------------------------------------- */

static void node_free(sl_node_spec *n) {
  free(n->id);
  free(n->type);
  for (size_t i = 0; i < n->n_inputs; i++) {
    free(n->inputs[i].name);
    ref_free(&n->inputs[i].ref);
  }
  free(n->inputs);
  sl_yaml_free(n->params);
  sl_spec_free(n->body);
  for (size_t i = 0; i < n->n_carry; i++) free(n->carry[i]);
  free(n->carry);
}

void sl_spec_free(sl_spec *s) {
  if (!s) return;
  free(s->name);
  free(s->description);
  free(s->file);
  for (size_t i = 0; i < s->n_params; i++) {
    free(s->params[i].name);
    free(s->params[i].doc);
    sl_yaml_free(s->params[i].default_value);
    if (s->values) sl_yaml_free(s->values[i]);
  }
  free(s->params);
  free(s->values);
  for (size_t i = 0; i < s->n_inputs; i++) free(s->inputs[i]);
  free(s->inputs);
  for (size_t i = 0; i < s->n_nodes; i++) node_free(&s->nodes[i]);
  free(s->nodes);
  for (size_t i = 0; i < s->n_outputs; i++) {
    free(s->outputs[i].name);
    ref_free(&s->outputs[i].ref);
  }
  free(s->outputs);
  for (size_t i = 0; i < s->n_sources; i++) free(s->sources[i]);
  free(s->sources);
  free(s);
}

static void aliases_free(aliases *as) {
  for (size_t i = 0; i < as->n; i++) {
    alias *a = &as->a[i];
    free(a->id);
    free(a->file);
    for (size_t k = 0; k < a->n; k++) {
      free(a->outs[k]);
      ref_free(&a->refs[k]);
    }
    free(a->outs);
    free(a->refs);
  }
  free(as->a);
  as->a = NULL;
  as->n = 0;
}

const sl_yaml *sl_spec_value(const sl_spec *s, const char *name) {
  if (!s || !name || !s->values) return NULL;
  for (size_t i = 0; i < s->n_params; i++)
    if (!strcmp(s->params[i].name, name)) return s->values[i];
  return NULL;
}

/* ---- params ------------------------------------------------------------ */

static sl_code parse_decls(sl_spec *s, const sl_yaml *params, sl_error *err) {
  sl_code rc;
  if ((rc = want_map(params, "'params:'", err))) return rc;
  s->params = sl_xcalloc(params->n, sizeof *s->params);
  for (size_t i = 0; i < params->n; i++) {
    const char *name = params->keys[i];
    sl_loc kl = params->key_locs[i];
    const sl_yaml *d = params->items[i];
    if (!sl_is_identifier(name)) {
      sl_fail(err, SL_ERR_PIPELINE,
              "invalid parameter name '%s' (use letters, digits, '_' and '-', starting with "
              "a letter or '_')",
              name);
      return fail_at_loc(err, kl);
    }
    if (d->kind != SL_Y_MAP) {
      char *shown = sl_yaml_flow_string(d);
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' must be declared as a mapping like {type: int, default: 1}, "
              "found %s '%s'",
              name, kind_name(d), shown);
      free(shown);
      return fail_at_loc(err, d->loc);
    }
    char where[300];
    snprintf(where, sizeof where, "the declaration of parameter '%s'", name);
    if ((rc = check_keys(d, k_decl_keys, COUNT(k_decl_keys), where, err))) return rc;
    sl_param_decl *p = &s->params[s->n_params++];
    p->name = sl_strdup(name);
    p->loc = kl;
    const sl_yaml *ty = sl_yaml_get(d, "type");
    if (!ty) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' has no type: (one of int, float, bool, string, path, shape, "
              "list)",
              name);
      return fail_at_loc(err, kl);
    }
    if ((rc = want_scalar(ty, "a parameter's type:", err))) return rc;
    if (sl_ptype_parse(ty->scalar, &p->type) != 0) {
      size_t nt;
      const char *const *tn = sl_ptype_names(&nt);
      char dym[160];
      did_you_mean(ty->scalar, tn, nt, dym, sizeof dym);
      sl_fail(err, SL_ERR_PIPELINE,
              "unknown parameter type '%s'%s; expected one of: int, float, bool, string, "
              "path, shape, list",
              ty->scalar, dym);
      return fail_at_loc(err, ty->loc);
    }
    const sl_yaml *doc = sl_yaml_get(d, "doc");
    if (doc) {
      if ((rc = want_scalar(doc, "a parameter's doc:", err))) return rc;
      p->doc = sl_strdup(doc->scalar);
    }
    const sl_yaml *req = sl_yaml_get(d, "required");
    if (req) {
      if (req->kind != SL_Y_SCALAR || req->quoted ||
          (strcmp(req->scalar, "true") && strcmp(req->scalar, "false"))) {
        sl_fail(err, SL_ERR_PIPELINE, "required: must be true or false");
        return fail_at_loc(err, req->loc);
      }
      p->required = !strcmp(req->scalar, "true");
    }
    const sl_yaml *def = sl_yaml_get(d, "default");
    if (p->required && def) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' has both default: and required: true; keep one", name);
      return fail_at_loc(err, def->loc);
    }
    if (!p->required && !def) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' needs either default: VALUE or required: true", name);
      return fail_at_loc(err, kl);
    }
    if (def) {
      if ((rc = sl_param_check(name, p->type, def, err))) return rc;
      p->default_value = sl_yaml_clone(def);
    }
  }
  return SL_OK;
}

static long decl_index(const sl_spec *s, const char *name) {
  for (size_t i = 0; i < s->n_params; i++)
    if (!strcmp(s->params[i].name, name)) return (long)i;
  return -1;
}

static sl_code unknown_binding(const sl_spec *s, const char *name, const char *how,
                               sl_error *err) {
  const char **names = sl_xcalloc(s->n_params + 1, sizeof *names);
  for (size_t i = 0; i < s->n_params; i++) names[i] = s->params[i].name;
  char dym[160], list[512];
  did_you_mean(name, names, s->n_params, dym, sizeof dym);
  join_list(names, s->n_params, list, sizeof list);
  free(names);
  return sl_fail(err, SL_ERR_PIPELINE, "%s: '%s' has no parameter '%s'%s; its parameters are: %s",
                 how, s->file, name, dym, list);
}

static sl_code parse_set_value(const sl_param_decl *p, const char *text, sl_yaml **out,
                               sl_error *err) {
  *out = NULL;
  char file[300];
  snprintf(file, sizeof file, "--set %s", p->name);
  sl_loc l = {sl_intern(file), 1, 1};
  if (p->type == SL_PT_STRING || p->type == SL_PT_PATH) {
    *out = sl_yaml_new_scalar(text, l);
    (*out)->quoted = true;
    return SL_OK;
  }
  if (!text[0]) {
    *out = sl_yaml_new_scalar("", l);
    return SL_OK;
  }
  return sl_yaml_load_string(text, strlen(text), file, out, err);
}

/* A relative path means relative to where it was written: the file that
 * holds the text, or the current directory for a --set value. Resolved once
 * here, so that templates and nodes receive paths that no longer depend on
 * which file passes them on. */
static void resolve_path_value(sl_yaml *v) {
  if (v->kind != SL_Y_SCALAR || !v->scalar[0] || v->scalar[0] == '/') return;
  char base[4096], joined[8192];
  const char *file = v->loc.file ? v->loc.file : "";
  if (!strncmp(file, "--set ", 6) || !file[0]) {
    if (!getcwd(base, sizeof base)) return;
  } else {
    sl_dirname(file, base, sizeof base);
  }
  sl_path_join(base, v->scalar, joined, sizeof joined);
  free(v->scalar);
  v->scalar = sl_strdup(joined);
}

static sl_code resolve_values(sl_spec *s, const bindings *b, sl_error *err) {
  sl_code rc;
  s->values = sl_xcalloc(s->n_params + 1, sizeof *s->values);
  for (size_t i = 0; i < s->n_params; i++)
    s->values[i] = sl_yaml_clone(s->params[i].default_value);
  if (b->is_top) {
    for (size_t k = 0; k < b->n_sets; k++) {
      long i = decl_index(s, b->sets[k].name);
      if (i < 0) {
        unknown_binding(s, b->sets[k].name, "--set", err);
        return fail_at_loc(err, (sl_loc){sl_intern(s->file), 0, 0});
      }
      sl_yaml *v;
      if ((rc = parse_set_value(&s->params[i], b->sets[k].value ? b->sets[k].value : "", &v,
                                err)))
        return rc;
      sl_yaml_free(s->values[i]);
      s->values[i] = v;
    }
  } else if (b->params) {
    for (size_t k = 0; k < b->params->n; k++) {
      long i = decl_index(s, b->params->keys[k]);
      if (i < 0) {
        char how[300];
        snprintf(how, sizeof how, "params of node '%s'", b->entry_id);
        unknown_binding(s, b->params->keys[k], how, err);
        return fail_at_loc(err, b->params->key_locs[k]);
      }
      sl_yaml_free(s->values[i]);
      s->values[i] = sl_yaml_clone(b->params->items[k]);
    }
  }
  for (size_t i = 0; i < s->n_params; i++) {
    const sl_param_decl *p = &s->params[i];
    if (!s->values[i]) {
      char doc[600] = "";
      if (p->doc) snprintf(doc, sizeof doc, " (%s)", p->doc);
      if (b->is_top) {
        sl_fail(err, SL_ERR_PIPELINE,
                "required parameter '%s'%s is not set; set it with --set %s=...", p->name,
                doc, p->name);
        return fail_at_loc(err, p->loc);
      }
      sl_fail(err, SL_ERR_PIPELINE,
              "%s '%s' requires parameter '%s'%s; bind it under params: of node '%s'",
              b->what, s->file, p->name, doc, b->entry_id);
      return fail_at_loc(err, b->entry_loc);
    }
    if ((rc = sl_param_check(p->name, p->type, s->values[i], err))) return rc;
    if (p->type == SL_PT_PATH) resolve_path_value(s->values[i]);
  }
  return SL_OK;
}

static sl_code parse_inputs_decl(sl_spec *s, const sl_yaml *in, sl_error *err) {
  if (in->kind != SL_Y_SEQ) {
    sl_fail(err, SL_ERR_PIPELINE, "inputs: must be a sequence of names like [x, y], found %s",
            kind_name(in));
    return fail_at_loc(err, in->loc);
  }
  s->inputs = sl_xcalloc(in->n + 1, sizeof *s->inputs);
  for (size_t i = 0; i < in->n; i++) {
    const sl_yaml *v = in->items[i];
    if (v->kind != SL_Y_SCALAR || !valid_id(v->scalar)) {
      char *shown = sl_yaml_flow_string(v);
      sl_fail(err, SL_ERR_PIPELINE,
              "invalid pipeline input name '%s' (use letters, digits, '_' and '-')", shown);
      free(shown);
      return fail_at_loc(err, v->loc);
    }
    for (size_t k = 0; k < s->n_inputs; k++)
      if (!strcmp(s->inputs[k], v->scalar)) {
        sl_fail(err, SL_ERR_PIPELINE, "pipeline input '%s' is declared twice", v->scalar);
        return fail_at_loc(err, v->loc);
      }
    s->inputs[s->n_inputs++] = sl_strdup(v->scalar);
  }
  return SL_OK;
}

/* ---- nodes ------------------------------------------------------------- */

static sl_node_spec *add_node(sl_spec *s) {
  s->nodes = sl_xrealloc(s->nodes, (s->n_nodes + 1) * sizeof *s->nodes);
  sl_node_spec *n = &s->nodes[s->n_nodes++];
  memset(n, 0, sizeof *n);
  return n;
}

/* Parses `inputs: {port: node.port}` into bindings. */
static sl_code parse_bindings(const sl_yaml *in, const char *node_id, sl_input_binding **out,
                              size_t *n_out, sl_error *err) {
  char what[300];
  snprintf(what, sizeof what, "inputs: of node '%s'", node_id);
  sl_code rc;
  if ((rc = want_map(in, what, err))) return rc;
  *out = sl_xcalloc(in->n + 1, sizeof **out);
  for (size_t i = 0; i < in->n; i++) {
    sl_input_binding *b = &(*out)[*n_out];
    if ((rc = sl_ref_parse(in->items[i], &b->ref, err))) return rc;
    b->name = sl_strdup(in->keys[i]);
    (*n_out)++;
  }
  return SL_OK;
}

static long find_binding(const sl_input_binding *b, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(b[i].name, name)) return (long)i;
  return -1;
}

static void free_bindings(sl_input_binding *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(b[i].name);
    ref_free(&b[i].ref);
  }
  free(b);
}

/* Every inner input must be bound; every binding must name an inner input. */
static sl_code check_input_bindings(const sl_spec *inner, const sl_input_binding *b, size_t nb,
                                    const sl_yaml *in_map, const char *what,
                                    const char *node_id, sl_loc entry_loc, sl_error *err) {
  for (size_t i = 0; i < nb; i++) {
    bool ok = false;
    for (size_t k = 0; k < inner->n_inputs; k++)
      if (!strcmp(inner->inputs[k], b[i].name)) ok = true;
    if (ok) continue;
    char dym[160], list[512];
    did_you_mean(b[i].name, (const char *const *)inner->inputs, inner->n_inputs, dym,
                 sizeof dym);
    join_list((const char *const *)inner->inputs, inner->n_inputs, list, sizeof list);
    sl_fail(err, SL_ERR_PIPELINE, "%s '%s' has no input '%s'%s; its inputs are: %s", what,
            inner->file, b[i].name, dym, list);
    return fail_at_loc(err, in_map ? in_map->key_locs[i] : entry_loc);
  }
  for (size_t k = 0; k < inner->n_inputs; k++) {
    if (find_binding(b, nb, inner->inputs[k]) >= 0) continue;
    sl_fail(err, SL_ERR_PIPELINE,
            "%s '%s' needs input '%s': bind it under inputs: of node '%s' (e.g. %s: "
            "node.port)",
            what, inner->file, inner->inputs[k], node_id, inner->inputs[k]);
    return fail_at_loc(err, entry_loc);
  }
  return SL_OK;
}

/* Rewrites a ref of an expanded template into the outer namespace. */
static sl_ref rewrite_ref(const sl_ref *r, const char *prefix, const sl_input_binding *b,
                          size_t nb) {
  if (!strcmp(r->node, "inputs")) {
    long k = find_binding(b, nb, r->port);
    if (k >= 0) return ref_copy(&b[k].ref); /* bound: checked before */
  }
  sl_ref c = {concat3(prefix, "/", r->node), sl_strdup(r->port), r->loc};
  return c;
}

static sl_code load_path(loader *L, const char *path, const sl_loc *use_loc, const bindings *b,
                         sl_spec **out, sl_error *err);

static sl_code expand_use(loader *L, sl_spec *s, aliases *as, const char *id, const sl_yaml *e,
                          const char *base_dir, sl_error *err) {
  sl_code rc;
  const sl_yaml *use = sl_yaml_get(e, "use");
  const sl_yaml *params = sl_yaml_get(e, "params");
  const sl_yaml *in = sl_yaml_get(e, "inputs");
  char what[300];
  if ((rc = want_scalar(use, "use:", err))) return rc;
  if (!use->scalar[0]) {
    sl_fail(err, SL_ERR_PIPELINE, "use: of node '%s' is empty (expected a template path)", id);
    return fail_at_loc(err, use->loc);
  }
  if (params) {
    snprintf(what, sizeof what, "params: of node '%s'", id);
    if ((rc = want_map(params, what, err))) return rc;
  }
  sl_input_binding *bind = NULL;
  size_t nb = 0;
  if (in && (rc = parse_bindings(in, id, &bind, &nb, err))) {
    free_bindings(bind, nb);
    return rc;
  }
  char path[PATH_MAX];
  sl_path_join(base_dir, use->scalar, path, sizeof path);
  bindings tb = {0};
  tb.params = params;
  tb.entry_id = id;
  tb.what = "template";
  tb.entry_loc = use->loc;
  sl_spec *t = NULL;
  rc = load_path(L, path, &use->loc, &tb, &t, err);
  if (!rc) rc = check_input_bindings(t, bind, nb, in, "template", id, use->loc, err);
  if (rc) {
    free_bindings(bind, nb);
    sl_spec_free(t);
    return rc;
  }
  /* splice the template's nodes under "<id>/" */
  for (size_t i = 0; i < t->n_nodes; i++) {
    sl_node_spec *tn = &t->nodes[i];
    sl_node_spec *n = add_node(s);
    *n = *tn;
    n->id = concat3(id, "/", tn->id);
    free(tn->id);
    for (size_t k = 0; k < n->n_inputs; k++) {
      sl_ref r = rewrite_ref(&n->inputs[k].ref, id, bind, nb);
      ref_free(&n->inputs[k].ref);
      n->inputs[k].ref = r;
    }
    memset(tn, 0, sizeof *tn);
  }
  t->n_nodes = 0;
  as->a = sl_xrealloc(as->a, (as->n + 1) * sizeof *as->a);
  alias *a = &as->a[as->n++];
  memset(a, 0, sizeof *a);
  a->id = sl_strdup(id);
  a->file = sl_strdup(use->scalar);
  a->outs = sl_xcalloc(t->n_outputs + 1, sizeof *a->outs);
  a->refs = sl_xcalloc(t->n_outputs + 1, sizeof *a->refs);
  for (size_t k = 0; k < t->n_outputs; k++) {
    a->outs[k] = sl_strdup(t->outputs[k].name);
    a->refs[k] = rewrite_ref(&t->outputs[k].ref, id, bind, nb);
    a->n++;
  }
  for (size_t k = 0; k < t->n_sources; k++) add_source(s, t->sources[k]);
  free_bindings(bind, nb);
  sl_spec_free(t);
  return SL_OK;
}

static sl_code expand_iterate(loader *L, sl_spec *s, const char *id, sl_loc id_loc,
                              const sl_yaml *e, const char *base_dir, sl_error *err) {
  sl_code rc;
  const sl_yaml *it = sl_yaml_get(e, "iterate");
  const sl_yaml *params = sl_yaml_get(e, "params");
  const sl_yaml *in = sl_yaml_get(e, "inputs");
  const sl_yaml *times = sl_yaml_get(e, "times");
  const sl_yaml *carry = sl_yaml_get(e, "carry");
  char what[300];
  if ((rc = want_scalar(it, "iterate:", err))) return rc;
  if (!it->scalar[0]) {
    sl_fail(err, SL_ERR_PIPELINE, "iterate: of node '%s' is empty (expected a body file)", id);
    return fail_at_loc(err, it->loc);
  }
  if (!times) {
    sl_fail(err, SL_ERR_PIPELINE,
            "iterate node '%s' needs times: (the number of iterations, an integer >= 0)", id);
    return fail_at_loc(err, id_loc);
  }
  int64_t nt;
  if (times->kind != SL_Y_SCALAR || !sl_parse_i64(times->scalar, &nt) || nt < 0) {
    char *shown = sl_yaml_flow_string(times);
    sl_fail(err, SL_ERR_PIPELINE, "times: of node '%s' must be an integer >= 0, found '%s'", id,
            shown);
    free(shown);
    return fail_at_loc(err, times->loc);
  }
  if (params) {
    snprintf(what, sizeof what, "params: of node '%s'", id);
    if ((rc = want_map(params, what, err))) return rc;
  }
  if (carry && carry->kind != SL_Y_SEQ) {
    sl_fail(err, SL_ERR_PIPELINE, "carry: of node '%s' must be a sequence of names like [x]",
            id);
    return fail_at_loc(err, carry->loc);
  }
  sl_node_spec *n = add_node(s);
  n->id = sl_strdup(id);
  n->type = sl_strdup("iterate");
  n->loc = id_loc;
  n->times = nt;
  n->params = params ? sl_yaml_clone(params) : NULL;
  if (in && (rc = parse_bindings(in, id, &n->inputs, &n->n_inputs, err))) return rc;
  char path[PATH_MAX];
  sl_path_join(base_dir, it->scalar, path, sizeof path);
  bindings tb = {0};
  tb.params = params;
  tb.entry_id = id;
  tb.what = "iterate body";
  tb.entry_loc = it->loc;
  if ((rc = load_path(L, path, &it->loc, &tb, &n->body, err))) return rc;
  if ((rc = check_input_bindings(n->body, n->inputs, n->n_inputs, in, "iterate body", id,
                                 it->loc, err)))
    return rc;
  if (carry) {
    n->carry = sl_xcalloc(carry->n + 1, sizeof *n->carry);
    for (size_t i = 0; i < carry->n; i++) {
      const sl_yaml *c = carry->items[i];
      if ((rc = want_scalar(c, "a carry: name", err))) return rc;
      bool is_in = false, is_out = false;
      for (size_t k = 0; k < n->body->n_inputs; k++)
        if (!strcmp(n->body->inputs[k], c->scalar)) is_in = true;
      for (size_t k = 0; k < n->body->n_outputs; k++)
        if (!strcmp(n->body->outputs[k].name, c->scalar)) is_out = true;
      if (!is_in || !is_out) {
        sl_fail(err, SL_ERR_PIPELINE,
                "carry '%s' of node '%s' must be both an input and an output of the body "
                "'%s' (it is %s)",
                c->scalar, id, n->body->file,
                is_in ? "an input but not an output"
                      : (is_out ? "an output but not an input" : "neither"));
        return fail_at_loc(err, c->loc);
      }
      for (size_t k = 0; k < n->n_carry; k++)
        if (!strcmp(n->carry[k], c->scalar)) {
          sl_fail(err, SL_ERR_PIPELINE, "carry '%s' is listed twice", c->scalar);
          return fail_at_loc(err, c->loc);
        }
      n->carry[n->n_carry++] = sl_strdup(c->scalar);
    }
  }
  for (size_t k = 0; k < n->body->n_sources; k++) add_source(s, n->body->sources[k]);
  return SL_OK;
}

static sl_code expand_entry(loader *L, sl_spec *s, aliases *as, const char *id, sl_loc id_loc,
                            const sl_yaml *raw, const char *base_dir, sl_error *err) {
  sl_code rc;
  if (!valid_id(id) || !strcmp(id, "inputs")) {
    sl_fail(err, SL_ERR_PIPELINE,
            "invalid node id '%s' (use letters, digits, '_' and '-'; 'inputs' is reserved)", id);
    return fail_at_loc(err, id_loc);
  }
  if (raw->kind != SL_Y_MAP) {
    char *shown = sl_yaml_flow_string(raw);
    sl_fail(err, SL_ERR_PIPELINE,
            "node '%s' must be a mapping with type:, use: or iterate:, found %s '%s'", id,
            kind_name(raw), shown);
    free(shown);
    return fail_at_loc(err, raw->loc);
  }
  char where[300];
  snprintf(where, sizeof where, "node '%s'", id);
  if ((rc = check_keys(raw, k_node_keys, COUNT(k_node_keys), where, err))) return rc;
  int kinds = (sl_yaml_get(raw, "type") != NULL) + (sl_yaml_get(raw, "use") != NULL) +
              (sl_yaml_get(raw, "iterate") != NULL);
  if (kinds != 1) {
    sl_fail(err, SL_ERR_PIPELINE,
            "node '%s' needs exactly one of type: (a node type), use: (a template) or "
            "iterate: (a loop body); found %d",
            id, kinds);
    return fail_at_loc(err, id_loc);
  }
  bool is_iter = sl_yaml_get(raw, "iterate") != NULL;
  if (!is_iter) {
    const char *bad = sl_yaml_get(raw, "times") ? "times" : sl_yaml_get(raw, "carry") ? "carry"
                                                                                       : NULL;
    if (bad) {
      long k = sl_yaml_find(raw, bad);
      sl_fail(err, SL_ERR_PIPELINE, "%s: is only allowed on iterate nodes (node '%s')", bad, id);
      return fail_at_loc(err, raw->key_locs[k]);
    }
  }
  sl_yaml *e;
  if ((rc = sl_subst_tree(raw, s, &e, err))) return rc;
  if (sl_yaml_get(e, "use")) {
    rc = expand_use(L, s, as, id, e, base_dir, err);
  } else if (is_iter) {
    rc = expand_iterate(L, s, id, id_loc, e, base_dir, err);
  } else {
    const sl_yaml *ty = sl_yaml_get(e, "type");
    const sl_yaml *params = sl_yaml_get(e, "params");
    const sl_yaml *in = sl_yaml_get(e, "inputs");
    if ((rc = want_scalar(ty, "type:", err))) goto done;
    if (!ty->scalar[0] || !strcmp(ty->scalar, "iterate")) {
      sl_fail(err, SL_ERR_PIPELINE, "type: of node '%s' must name a node type, found '%s'%s",
              id, ty->scalar,
              ty->scalar[0] ? " (write iterate: BODY.yaml for a loop)" : "");
      rc = fail_at_loc(err, ty->loc);
      goto done;
    }
    if (params) {
      snprintf(where, sizeof where, "params: of node '%s'", id);
      if ((rc = want_map(params, where, err))) goto done;
    }
    sl_node_spec *n = add_node(s);
    n->id = sl_strdup(id);
    n->type = sl_strdup(ty->scalar);
    n->loc = id_loc;
    n->params = params ? sl_yaml_clone(params) : NULL;
    if (in) rc = parse_bindings(in, id, &n->inputs, &n->n_inputs, err);
  }
done:
  sl_yaml_free(e);
  return rc;
}

/* ---- references -------------------------------------------------------- */

static sl_code resolve_ref(const sl_spec *s, const aliases *as, sl_ref *r, sl_error *err) {
  for (size_t hop = 0; hop <= as->n + 1; hop++) {
    if (!strcmp(r->node, "inputs")) {
      for (size_t k = 0; k < s->n_inputs; k++)
        if (!strcmp(s->inputs[k], r->port)) return SL_OK;
      char dym[160];
      did_you_mean(r->port, (const char *const *)s->inputs, s->n_inputs, dym, sizeof dym);
      if (s->n_inputs)
        sl_fail(err, SL_ERR_PIPELINE, "'inputs.%s' is not a pipeline input of this file%s",
                r->port, dym);
      else
        sl_fail(err, SL_ERR_PIPELINE,
                "'inputs.%s' refers to a pipeline input, but this file declares no inputs:",
                r->port);
      return fail_at_loc(err, r->loc);
    }
    const alias *a = NULL;
    for (size_t i = 0; i < as->n; i++)
      if (!strcmp(as->a[i].id, r->node)) a = &as->a[i];
    if (a) {
      long k = -1;
      for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->outs[i], r->port)) k = (long)i;
      if (k < 0) {
        char dym[160], list[512];
        did_you_mean(r->port, (const char *const *)a->outs, a->n, dym, sizeof dym);
        join_list((const char *const *)a->outs, a->n, list, sizeof list);
        sl_fail(err, SL_ERR_PIPELINE,
                "template '%s' (node '%s') has no output '%s'%s; its outputs are: %s", a->file,
                a->id, r->port, dym, list);
        return fail_at_loc(err, r->loc);
      }
      sl_loc keep = r->loc;
      ref_free(r);
      *r = ref_copy(&a->refs[k]);
      r->loc = keep;
      continue;
    }
    for (size_t i = 0; i < s->n_nodes; i++)
      if (!strcmp(s->nodes[i].id, r->node)) return SL_OK;
    size_t nc = s->n_nodes + as->n;
    const char **cands = sl_xcalloc(nc + 1, sizeof *cands);
    for (size_t i = 0; i < s->n_nodes; i++) cands[i] = s->nodes[i].id;
    for (size_t i = 0; i < as->n; i++) cands[s->n_nodes + i] = as->a[i].id;
    char dym[160];
    did_you_mean(r->node, cands, nc, dym, sizeof dym);
    free(cands);
    sl_fail(err, SL_ERR_PIPELINE, "reference '%s.%s' names an unknown node '%s'%s", r->node,
            r->port, r->node, dym);
    return fail_at_loc(err, r->loc);
  }
  sl_fail(err, SL_ERR_PIPELINE,
          "reference '%s.%s' loops through template inputs and outputs without reaching a node",
          r->node, r->port);
  return fail_at_loc(err, r->loc);
}

/* ---- files ------------------------------------------------------------- */

static sl_code load_root(loader *L, const sl_yaml *root, const char *file,
                         const char *base_dir, const bindings *b, sl_spec *s, sl_error *err) {
  sl_code rc;
  if (root->kind != SL_Y_MAP) {
    sl_fail(err, SL_ERR_PIPELINE,
            "a pipeline file must be a mapping with pipeline:, nodes: and outputs:, found %s",
            kind_name(root));
    return fail_at_loc(err, root->loc);
  }
  if ((rc = check_keys(root, k_top_keys, COUNT(k_top_keys), "a pipeline file", err))) return rc;
  const sl_yaml *name = sl_yaml_get(root, "pipeline");
  if (!name) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'pipeline: NAME' (the pipeline's name)");
    return fail_at_loc(err, root->loc);
  }
  if ((rc = want_scalar(name, "pipeline:", err))) return rc;
  if (!name->scalar[0]) {
    sl_fail(err, SL_ERR_PIPELINE, "pipeline: (the pipeline's name) is empty");
    return fail_at_loc(err, name->loc);
  }
  s->name = sl_strdup(name->scalar);
  const sl_yaml *desc = sl_yaml_get(root, "description");
  if (desc) {
    if ((rc = want_scalar(desc, "description:", err))) return rc;
    s->description = sl_strdup(desc->scalar);
  }
  const sl_yaml *params = sl_yaml_get(root, "params");
  if (params && (rc = parse_decls(s, params, err))) return rc;
  const sl_yaml *inputs = sl_yaml_get(root, "inputs");
  if (inputs && (rc = parse_inputs_decl(s, inputs, err))) return rc;
  if ((rc = resolve_values(s, b, err))) return rc;

  const sl_yaml *nodes = sl_yaml_get(root, "nodes");
  if (!nodes) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'nodes:' (a mapping from node id to node)");
    return fail_at_loc(err, root->loc);
  }
  if ((rc = want_map(nodes, "nodes:", err))) return rc;
  if (nodes->n == 0) {
    sl_fail(err, SL_ERR_PIPELINE, "nodes: is empty (a pipeline needs at least one node)");
    return fail_at_loc(err, nodes->loc);
  }
  const sl_yaml *outputs = sl_yaml_get(root, "outputs");
  if (!outputs) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'outputs:' (a mapping from output name to node.port)");
    return fail_at_loc(err, root->loc);
  }
  if ((rc = want_map(outputs, "outputs:", err))) return rc;
  if (outputs->n == 0) {
    sl_fail(err, SL_ERR_PIPELINE, "outputs: is empty (a pipeline needs at least one output)");
    return fail_at_loc(err, outputs->loc);
  }

  aliases as = {0};
  for (size_t i = 0; i < nodes->n && !rc; i++)
    rc = expand_entry(L, s, &as, nodes->keys[i], nodes->key_locs[i], nodes->items[i], base_dir,
                      err);
  if (!rc) {
    s->outputs = sl_xcalloc(outputs->n, sizeof *s->outputs);
    for (size_t i = 0; i < outputs->n && !rc; i++) {
      if (!valid_id(outputs->keys[i])) {
        sl_fail(err, SL_ERR_PIPELINE,
                "invalid output name '%s' (use letters, digits, '_' and '-')", outputs->keys[i]);
        rc = fail_at_loc(err, outputs->key_locs[i]);
        break;
      }
      sl_yaml *v;
      if ((rc = sl_subst_tree(outputs->items[i], s, &v, err))) break;
      sl_output_spec *o = &s->outputs[s->n_outputs];
      rc = sl_ref_parse(v, &o->ref, err);
      sl_yaml_free(v);
      if (rc) break;
      o->name = sl_strdup(outputs->keys[i]);
      s->n_outputs++;
    }
  }
  for (size_t i = 0; i < s->n_nodes && !rc; i++)
    for (size_t k = 0; k < s->nodes[i].n_inputs && !rc; k++)
      rc = resolve_ref(s, &as, &s->nodes[i].inputs[k].ref, err);
  for (size_t i = 0; i < s->n_outputs && !rc; i++)
    rc = resolve_ref(s, &as, &s->outputs[i].ref, err);
  for (size_t i = 0; i < s->n_nodes && !rc; i++)
    for (size_t k = 0; k < i; k++)
      if (!strcmp(s->nodes[i].id, s->nodes[k].id)) {
        sl_fail(err, SL_ERR_PIPELINE, "node id '%s' is defined twice after template expansion",
                s->nodes[i].id);
        rc = fail_at_loc(err, s->nodes[i].loc);
        break;
      }
  aliases_free(&as);
  (void)file;
  return rc;
}

static sl_code load_text(loader *L, const char *text, size_t len, const char *file,
                         const char *base_dir, const bindings *b, sl_spec **out, sl_error *err) {
  *out = NULL;
  sl_yaml *root;
  sl_code rc = sl_yaml_load_string(text, len, file, &root, err);
  if (rc) return rc;
  sl_spec *s = sl_xcalloc(1, sizeof *s);
  s->file = sl_strdup(file);
  add_source(s, file);
  rc = load_root(L, root, file, base_dir, b, s, err);
  sl_yaml_free(root);
  if (rc) {
    sl_spec_free(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

static sl_code load_path(loader *L, const char *path, const sl_loc *use_loc, const bindings *b,
                         sl_spec **out, sl_error *err) {
  *out = NULL;
  char canon[PATH_MAX];
  if (!realpath(path, canon)) {
    if (use_loc) {
      sl_fail(err, SL_ERR_PIPELINE, "%s file not found: '%s'", b->what, path);
      return fail_at_loc(err, *use_loc);
    }
    sl_fail(err, SL_ERR_IO, "cannot open pipeline file '%s'", path);
    sl_error_at(err, path, 0, 0);
    return SL_ERR_IO;
  }
  for (int i = 0; i < L->depth; i++) {
    if (strcmp(L->chain[i], canon)) continue;
    char chain[900];
    size_t o = 0;
    chain[0] = 0;
    for (int k = i; k < L->depth && o + 1 < sizeof chain; k++) {
      int w = snprintf(chain + o, sizeof chain - o, "%s -> ", L->chain_show[k]);
      if (w > 0) o += (size_t)w;
    }
    if (o + 1 < sizeof chain) snprintf(chain + o, sizeof chain - o, "%s", path);
    sl_fail(err, SL_ERR_PIPELINE, "template recursion: %s", chain);
    return fail_at_loc(err, *use_loc);
  }
  if (L->depth >= SL_SPEC_MAX_DEPTH) {
    sl_fail(err, SL_ERR_PIPELINE, "templates nested deeper than %d levels", SL_SPEC_MAX_DEPTH);
    return fail_at_loc(err, *use_loc);
  }
  char *text;
  size_t len;
  sl_code rc = sl_yaml_read_file(path, &text, &len, err);
  if (rc) {
    if (use_loc) {
      err->code = SL_ERR_PIPELINE;
      return fail_at_loc(err, *use_loc);
    }
    sl_error_at(err, path, 0, 0);
    return rc;
  }
  char dir[PATH_MAX];
  sl_dirname(path, dir, sizeof dir);
  L->chain[L->depth] = sl_strdup(canon);
  L->chain_show[L->depth] = sl_strdup(path);
  L->depth++;
  rc = load_text(L, text, len, path, dir, b, out, err);
  L->depth--;
  free(L->chain[L->depth]);
  free(L->chain_show[L->depth]);
  free(text);
  return rc;
}

sl_code sl_spec_load(const char *path, const sl_setting *sets, size_t n_sets, sl_spec **out,
                     sl_error *err) {
  loader L = {0};
  bindings b = {0};
  b.is_top = 1;
  b.sets = sets;
  b.n_sets = n_sets;
  b.what = "pipeline";
  return load_path(&L, path, NULL, &b, out, err);
}

sl_code sl_spec_load_string(const char *text, size_t len, const char *name,
                            const sl_setting *sets, size_t n_sets, sl_spec **out,
                            sl_error *err) {
  loader L = {0};
  bindings b = {0};
  b.is_top = 1;
  b.sets = sets;
  b.n_sets = n_sets;
  b.what = "pipeline";
  const char *file = name ? name : "<string>";
  L.chain[0] = sl_strdup(file);
  L.chain_show[0] = sl_strdup(file);
  L.depth = 1;
  sl_code rc = load_text(&L, text, len, file, ".", &b, out, err);
  free(L.chain[0]);
  free(L.chain_show[0]);
  return rc;
}
