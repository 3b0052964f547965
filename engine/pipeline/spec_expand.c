/* Node entries of a pipeline file: primitive nodes, `use:` templates spliced
 * in under "<id>/", `iterate:` nodes with their bodies, and the references
 * that reach nodes through expanded templates' outputs. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec_loader.h"

static const char *const k_node_keys[] = {"type",  "use",   "iterate", "inputs", "params",
                                          "times", "carry", "until",   "expect"};

/* A new zeroed node of s; NULL when out of memory. */
static sl_node_spec *add_node(sl_spec *s) {
  if (!sl_resize(&s->nodes, s->n_nodes + 1, sizeof *s->nodes)) return NULL;
  sl_node_spec *n = &s->nodes[s->n_nodes++];
  memset(n, 0, sizeof *n);
  return n;
}

/* Parses `inputs: {port: node.port}` into input bindings. */
static sl_code parse_bindings(const sl_yaml *in, const char *node_id, sl_input_binding **out,
                              size_t *n_out, sl_error *err) {
  char what[300];
  snprintf(what, sizeof what, "inputs: of node '%s'", node_id);
  sl_code rc;
  if ((rc = sl_spec_want_map(in, what, err))) return rc;
  if (!(*out = sl_calloc(in->n + 1, sizeof **out)))
    return sl_spec_nomem_at(err, "input bindings", in->loc);
  for (size_t i = 0; i < in->n; i++) {
    sl_input_binding *b = &(*out)[*n_out];
    if ((rc = sl_ref_parse(in->items[i], &b->ref, err))) return rc;
    b->name = sl_strdup(in->keys[i]);
    (*n_out)++;
    if (!b->name) return sl_spec_nomem_at(err, "an input binding", in->key_locs[i]);
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
    sl_ref_free(&b[i].ref);
  }
  free(b);
}

/* Every inner input must be bound; every binding must name an inner input. */
static sl_code check_input_bindings(const sl_spec *inner, const sl_input_binding *b, size_t nb,
                                    const sl_yaml *in_map, const char *what,
                                    const char *node_id, sl_loc entry_loc, sl_error *err) {
  for (size_t i = 0; i < nb; i++) {
    if (sl_spec_has_name((const char *const *)inner->inputs, inner->n_inputs, b[i].name))
      continue;
    char dym[160], list[512];
    sl_spec_did_you_mean(b[i].name, (const char *const *)inner->inputs, inner->n_inputs, dym,
                 sizeof dym);
    sl_spec_join_list((const char *const *)inner->inputs, inner->n_inputs, list, sizeof list);
    sl_fail(err, SL_ERR_PIPELINE, "%s '%s' has no input '%s'%s; its inputs are: %s", what,
            inner->file, b[i].name, dym, list);
    return sl_spec_fail_at(err, in_map ? in_map->key_locs[i] : entry_loc);
  }
  for (size_t k = 0; k < inner->n_inputs; k++) {
    if (find_binding(b, nb, inner->inputs[k]) >= 0) continue;
    sl_fail(err, SL_ERR_PIPELINE,
            "%s '%s' needs input '%s': bind it under inputs: of node '%s' (e.g. %s: "
            "node.port)",
            what, inner->file, inner->inputs[k], node_id, inner->inputs[k]);
    return sl_spec_fail_at(err, entry_loc);
  }
  return SL_OK;
}

/* Rewrites a ref of an expanded template into the outer namespace. */
static sl_code rewrite_ref(const sl_ref *r, const char *prefix, const sl_input_binding *b,
                           size_t nb, sl_ref *out, sl_error *err) {
  if (!strcmp(r->node, "inputs")) {
    long k = find_binding(b, nb, r->port);
    if (k >= 0) return sl_ref_copy(&b[k].ref, out, err); /* bound: checked before */
  }
  *out = (sl_ref){sl_str_concat3(prefix, "/", r->node), sl_strdup(r->port), r->loc};
  if (out->node && out->port) return SL_OK;
  sl_ref_free(out);
  return sl_spec_nomem_at(err, "a reference", r->loc);
}

/* The file that `key` (use: or iterate:) of entry e names: text, not empty. */
static sl_code entry_file(const sl_yaml *e, const char *key, const char *id, const char *expected,
                          const sl_yaml **out, sl_error *err) {
  const sl_yaml *v = sl_yaml_get(e, key);
  char what[64];
  snprintf(what, sizeof what, "%s:", key);
  sl_code rc = sl_spec_want_scalar(v, what, err);
  if (rc) return rc;
  if (!v->scalar[0]) {
    sl_fail(err, SL_ERR_PIPELINE, "%s: of node '%s' is empty (expected %s)", key, id, expected);
    return sl_spec_fail_at(err, v->loc);
  }
  *out = v;
  return SL_OK;
}

/* params: of an entry, when given, is a mapping. */
static sl_code want_params_map(const sl_yaml *params, const char *id, sl_error *err) {
  if (!params) return SL_OK;
  char what[300];
  snprintf(what, sizeof what, "params: of node '%s'", id);
  return sl_spec_want_map(params, what, err);
}

/* Loads the template or body `file` names (relative to base_dir), its params
 * bound to the entry's params. */
static sl_code load_entry_file(sl_spec_loader *L, const char *base_dir, const sl_yaml *file,
                               const sl_yaml *params, const char *id, const char *what,
                               sl_spec **out, sl_error *err) {
  char path[PATH_MAX];
  sl_path_join(base_dir, file->scalar, path, sizeof path);
  sl_spec_bindings b = {.params = params, .entry_id = id, .what = what, .entry_loc = file->loc};
  return sl_spec_load_path(L, path, &file->loc, &b, out, err);
}

/* The carry: names of an iterate node: each both an input and an output of
 * its body, none twice. */
static sl_code parse_carry(sl_node_spec *n, const sl_yaml *carry, const char *id, sl_error *err) {
  if (!(n->carry = sl_calloc(carry->n + 1, sizeof *n->carry)))
    return sl_spec_nomem_at(err, "carry:", carry->loc);
  for (size_t i = 0; i < carry->n; i++) {
    const sl_yaml *c = carry->items[i];
    sl_code rc = sl_spec_want_scalar(c, "a carry: name", err);
    if (rc) return rc;
    bool is_in = sl_spec_has_name((const char *const *)n->body->inputs, n->body->n_inputs,
                                  c->scalar);
    bool is_out = false;
    for (size_t k = 0; k < n->body->n_outputs; k++)
      if (!strcmp(n->body->outputs[k].name, c->scalar)) is_out = true;
    if (!is_in || !is_out) {
      sl_fail(err, SL_ERR_PIPELINE,
              "carry '%s' of node '%s' must be both an input and an output of the body "
              "'%s' (it is %s)",
              c->scalar, id, n->body->file,
              is_in ? "an input but not an output"
                    : (is_out ? "an output but not an input" : "neither"));
      return sl_spec_fail_at(err, c->loc);
    }
    if (sl_spec_has_name((const char *const *)n->carry, n->n_carry, c->scalar)) {
      sl_fail(err, SL_ERR_PIPELINE, "carry '%s' is listed twice", c->scalar);
      return sl_spec_fail_at(err, c->loc);
    }
    if (!(n->carry[n->n_carry] = sl_strdup(c->scalar)))
      return sl_spec_nomem_at(err, "a carry: name", c->loc);
    n->n_carry++;
  }
  return SL_OK;
}

/* until: the body output whose nonzero value stops the loop. Its type (a
 * one-element u8 flag) is checked when the graph is built. */
static sl_code parse_until(sl_node_spec *n, const sl_yaml *until, const char *id, sl_error *err) {
  sl_code rc = sl_spec_want_scalar(until, "until: a body output name", err);
  if (rc) return rc;
  for (size_t k = 0; k < n->body->n_outputs; k++)
    if (!strcmp(n->body->outputs[k].name, until->scalar)) {
      n->until = sl_strdup(until->scalar);
      n->until_loc = until->loc;
      return n->until ? SL_OK : sl_spec_nomem_at(err, "until:", until->loc);
    }
  sl_fail(err, SL_ERR_PIPELINE, "until '%s' of node '%s' is not an output of the body '%s'",
          until->scalar, id, n->body->file);
  return sl_spec_fail_at(err, until->loc);
}

/* expect: (with until:) the iterations the plan expects before the loop
 * has run once: an integer from 1 to times, or 0 for times (a template's
 * param may leave it unset so). */
static sl_code parse_expect(sl_node_spec *n, const sl_yaml *expect, const char *id, sl_error *err) {
  if (!n->until) {
    sl_fail(err, SL_ERR_PIPELINE,
            "expect: of node '%s' needs until: (without a stop condition the loop runs times: iterations)", id);
    return sl_spec_fail_at(err, expect->loc);
  }
  int64_t v;
  if (expect->kind != SL_Y_SCALAR || !sl_parse_i64(expect->scalar, &v) || v < 0 || v > n->times) {
    char *shown = sl_yaml_flow_string(expect);
    sl_fail(err, SL_ERR_PIPELINE, "expect: of node '%s' must be an integer from 0 (none) to times (%lld), found '%s'", id,
            (long long)n->times, shown ? shown : "...");
    free(shown);
    return sl_spec_fail_at(err, expect->loc);
  }
  n->expect = v;
  return SL_OK;
}

static sl_code expand_use(sl_spec_loader *L, sl_spec *s, sl_aliases *as, const char *id,
                          const sl_yaml *e, const char *base_dir, sl_error *err) {
  sl_code rc;
  const sl_yaml *use = NULL;
  const sl_yaml *params = sl_yaml_get(e, "params");
  const sl_yaml *in = sl_yaml_get(e, "inputs");
  if ((rc = entry_file(e, "use", id, "a template path", &use, err))) return rc;
  if ((rc = want_params_map(params, id, err))) return rc;
  sl_input_binding *bind = NULL;
  size_t nb = 0;
  if (in && (rc = parse_bindings(in, id, &bind, &nb, err))) {
    free_bindings(bind, nb);
    return rc;
  }
  sl_spec *t = NULL;
  rc = load_entry_file(L, base_dir, use, params, id, "template", &t, err);
  if (!rc) rc = check_input_bindings(t, bind, nb, in, "template", id, use->loc, err);
  if (rc) {
    free_bindings(bind, nb);
    sl_spec_free(t);
    return rc;
  }
  /* splice the template's nodes under "<id>/" (a node moved to s is zeroed
   * in t, so that each is freed once whatever fails) */
  for (size_t i = 0; i < t->n_nodes && !rc; i++) {
    sl_node_spec *tn = &t->nodes[i];
    sl_node_spec *n = add_node(s);
    if (!n) {
      rc = sl_spec_nomem_at(err, "the nodes of a template", use->loc);
      break;
    }
    *n = *tn;
    memset(tn, 0, sizeof *tn);
    char *inner_id = n->id;
    n->id = sl_str_concat3(id, "/", inner_id);
    free(inner_id);
    if (!n->id) rc = sl_spec_nomem_at(err, "a node id", n->loc);
    for (size_t k = 0; k < n->n_inputs && !rc; k++) {
      sl_ref r;
      if ((rc = rewrite_ref(&n->inputs[k].ref, id, bind, nb, &r, err))) break;
      sl_ref_free(&n->inputs[k].ref);
      n->inputs[k].ref = r;
    }
  }
  sl_alias *a = NULL;
  if (!rc && !sl_resize(&as->a, as->n + 1, sizeof *as->a))
    rc = sl_spec_nomem_at(err, "the outputs of a template", use->loc);
  if (!rc) {
    a = &as->a[as->n++];
    memset(a, 0, sizeof *a);
    a->id = sl_strdup(id);
    a->file = sl_strdup(use->scalar);
    a->outs = sl_calloc(t->n_outputs + 1, sizeof *a->outs);
    a->refs = sl_calloc(t->n_outputs + 1, sizeof *a->refs);
    if (!a->id || !a->file || !a->outs || !a->refs)
      rc = sl_spec_nomem_at(err, "the outputs of a template", use->loc);
  }
  for (size_t k = 0; !rc && k < t->n_outputs; k++) {
    a->outs[k] = sl_strdup(t->outputs[k].name);
    rc = rewrite_ref(&t->outputs[k].ref, id, bind, nb, &a->refs[k], err);
    a->n++;
    if (!rc && !a->outs[k]) rc = sl_spec_nomem_at(err, "a template output", use->loc);
  }
  for (size_t k = 0; !rc && k < t->n_sources; k++) rc = sl_spec_add_source(s, t->sources[k], err);
  free_bindings(bind, nb);
  sl_spec_free(t);
  return rc;
}

static sl_code expand_iterate(sl_spec_loader *L, sl_spec *s, const char *id, sl_loc id_loc,
                              const sl_yaml *e, const char *base_dir, sl_error *err) {
  sl_code rc;
  const sl_yaml *it = NULL;
  const sl_yaml *params = sl_yaml_get(e, "params");
  const sl_yaml *in = sl_yaml_get(e, "inputs");
  const sl_yaml *times = sl_yaml_get(e, "times");
  const sl_yaml *carry = sl_yaml_get(e, "carry");
  const sl_yaml *until = sl_yaml_get(e, "until");
  const sl_yaml *expect = sl_yaml_get(e, "expect");
  if ((rc = entry_file(e, "iterate", id, "a body file", &it, err))) return rc;
  if (!times) {
    sl_fail(err, SL_ERR_PIPELINE,
            "iterate node '%s' needs times: (the number of iterations, an integer >= 0)", id);
    return sl_spec_fail_at(err, id_loc);
  }
  int64_t nt;
  if (times->kind != SL_Y_SCALAR || !sl_parse_i64(times->scalar, &nt) || nt < 0) {
    char *shown = sl_yaml_flow_string(times);
    sl_fail(err, SL_ERR_PIPELINE, "times: of node '%s' must be an integer >= 0, found '%s'", id,
            shown ? shown : "...");
    free(shown);
    return sl_spec_fail_at(err, times->loc);
  }
  if ((rc = want_params_map(params, id, err))) return rc;
  if (carry && carry->kind != SL_Y_SEQ) {
    sl_fail(err, SL_ERR_PIPELINE, "carry: of node '%s' must be a sequence of names like [x]",
            id);
    return sl_spec_fail_at(err, carry->loc);
  }
  sl_node_spec *n = add_node(s);
  if (!n) return sl_spec_nomem_at(err, "a node", id_loc);
  n->id = sl_strdup(id);
  n->type = sl_strdup("iterate");
  n->loc = id_loc;
  n->times = nt;
  n->params = params ? sl_yaml_clone(params) : NULL;
  if (!n->id || !n->type || (params && !n->params)) return sl_spec_nomem_at(err, "a node", id_loc);
  if (in && (rc = parse_bindings(in, id, &n->inputs, &n->n_inputs, err))) return rc;
  if ((rc = load_entry_file(L, base_dir, it, params, id, "iterate body", &n->body, err)))
    return rc;
  if ((rc = check_input_bindings(n->body, n->inputs, n->n_inputs, in, "iterate body", id,
                                 it->loc, err)))
    return rc;
  if (carry && (rc = parse_carry(n, carry, id, err))) return rc;
  if (until && (rc = parse_until(n, until, id, err))) return rc;
  if (expect && (rc = parse_expect(n, expect, id, err))) return rc;
  for (size_t k = 0; k < n->body->n_sources; k++)
    if ((rc = sl_spec_add_source(s, n->body->sources[k], err))) return rc;
  return SL_OK;
}

sl_code sl_spec_expand_entry(sl_spec_loader *L, sl_spec *s, sl_aliases *as, const char *id,
                             sl_loc id_loc, const sl_yaml *raw, const char *base_dir,
                             sl_error *err) {
  sl_code rc;
  if (!sl_spec_valid_id(id) || !strcmp(id, "inputs")) {
    sl_fail(err, SL_ERR_PIPELINE,
            "invalid node id '%s' (use letters, digits, '_' and '-'; 'inputs' is reserved)", id);
    return sl_spec_fail_at(err, id_loc);
  }
  if (raw->kind != SL_Y_MAP) {
    char *shown = sl_yaml_flow_string(raw);
    sl_fail(err, SL_ERR_PIPELINE,
            "node '%s' must be a mapping with type:, use: or iterate:, found %s '%s'", id,
            sl_yaml_kind_name(raw), shown ? shown : "...");
    free(shown);
    return sl_spec_fail_at(err, raw->loc);
  }
  char where[300];
  snprintf(where, sizeof where, "node '%s'", id);
  if ((rc = sl_spec_check_keys(raw, k_node_keys, SL_SPEC_COUNT(k_node_keys), where, err)))
    return rc;
  int kinds = (sl_yaml_get(raw, "type") != NULL) + (sl_yaml_get(raw, "use") != NULL) +
              (sl_yaml_get(raw, "iterate") != NULL);
  if (kinds != 1) {
    sl_fail(err, SL_ERR_PIPELINE,
            "node '%s' needs exactly one of type: (a node type), use: (a template) or "
            "iterate: (a loop body); found %d",
            id, kinds);
    return sl_spec_fail_at(err, id_loc);
  }
  bool is_iter = sl_yaml_get(raw, "iterate") != NULL;
  if (!is_iter) {
    const char *bad = NULL;
    for (const char *const *k = (const char *const[]){"times", "carry", "until", "expect", NULL}; *k && !bad; k++)
      if (sl_yaml_get(raw, *k)) bad = *k;
    if (bad) {
      long k = sl_yaml_find(raw, bad);
      sl_fail(err, SL_ERR_PIPELINE, "%s: is only allowed on iterate nodes (node '%s')", bad, id);
      return sl_spec_fail_at(err, raw->key_locs[k]);
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
    if ((rc = sl_spec_want_scalar(ty, "type:", err))) goto done;
    if (!ty->scalar[0] || !strcmp(ty->scalar, "iterate")) {
      sl_fail(err, SL_ERR_PIPELINE, "type: of node '%s' must name a node type, found '%s'%s",
              id, ty->scalar,
              ty->scalar[0] ? " (write iterate: BODY.yaml for a loop)" : "");
      rc = sl_spec_fail_at(err, ty->loc);
      goto done;
    }
    if ((rc = want_params_map(params, id, err))) goto done;
    sl_node_spec *n = add_node(s);
    if (!n) {
      rc = sl_spec_nomem_at(err, "a node", id_loc);
      goto done;
    }
    n->id = sl_strdup(id);
    n->type = sl_strdup(ty->scalar);
    n->loc = id_loc;
    n->params = params ? sl_yaml_clone(params) : NULL;
    if (!n->id || !n->type || (params && !n->params))
      rc = sl_spec_nomem_at(err, "a node", id_loc);
    else if (in) rc = parse_bindings(in, id, &n->inputs, &n->n_inputs, err);
  }
done:
  sl_yaml_free(e);
  return rc;
}

void sl_aliases_free(sl_aliases *as) {
  for (size_t i = 0; i < as->n; i++) {
    sl_alias *a = &as->a[i];
    free(a->id);
    free(a->file);
    for (size_t k = 0; k < a->n; k++) {
      free(a->outs[k]);
      sl_ref_free(&a->refs[k]);
    }
    free(a->outs);
    free(a->refs);
  }
  free(as->a);
  as->a = NULL;
  as->n = 0;
}

sl_code sl_spec_resolve_ref(const sl_spec *s, const sl_aliases *as, sl_ref *r, sl_error *err) {
  for (size_t hop = 0; hop <= as->n + 1; hop++) {
    if (!strcmp(r->node, "inputs")) {
      for (size_t k = 0; k < s->n_inputs; k++)
        if (!strcmp(s->inputs[k], r->port)) return SL_OK;
      char dym[160];
      sl_spec_did_you_mean(r->port, (const char *const *)s->inputs, s->n_inputs, dym, sizeof dym);
      if (s->n_inputs)
        sl_fail(err, SL_ERR_PIPELINE, "'inputs.%s' is not a pipeline input of this file%s",
                r->port, dym);
      else
        sl_fail(err, SL_ERR_PIPELINE,
                "'inputs.%s' refers to a pipeline input, but this file declares no inputs:",
                r->port);
      return sl_spec_fail_at(err, r->loc);
    }
    const sl_alias *a = NULL;
    for (size_t i = 0; i < as->n; i++)
      if (!strcmp(as->a[i].id, r->node)) a = &as->a[i];
    if (a) {
      long k = -1;
      for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->outs[i], r->port)) k = (long)i;
      if (k < 0) {
        char dym[160], list[512];
        sl_spec_did_you_mean(r->port, (const char *const *)a->outs, a->n, dym, sizeof dym);
        sl_spec_join_list((const char *const *)a->outs, a->n, list, sizeof list);
        sl_fail(err, SL_ERR_PIPELINE,
                "template '%s' (node '%s') has no output '%s'%s; its outputs are: %s", a->file,
                a->id, r->port, dym, list);
        return sl_spec_fail_at(err, r->loc);
      }
      sl_loc keep = r->loc;
      sl_ref resolved;
      sl_code rc = sl_ref_copy(&a->refs[k], &resolved, err);
      if (rc) return sl_spec_fail_at(err, keep);
      sl_ref_free(r);
      *r = resolved;
      r->loc = keep;
      continue;
    }
    for (size_t i = 0; i < s->n_nodes; i++)
      if (!strcmp(s->nodes[i].id, r->node)) return SL_OK;
    size_t nc = s->n_nodes + as->n;
    const char **cands = sl_calloc(nc + 1, sizeof *cands);
    char dym[160] = ""; /* no suggestion when out of memory */
    for (size_t i = 0; cands && i < s->n_nodes; i++) cands[i] = s->nodes[i].id;
    for (size_t i = 0; cands && i < as->n; i++) cands[s->n_nodes + i] = as->a[i].id;
    if (cands) sl_spec_did_you_mean(r->node, cands, nc, dym, sizeof dym);
    free(cands);
    sl_fail(err, SL_ERR_PIPELINE, "reference '%s.%s' names an unknown node '%s'%s", r->node,
            r->port, r->node, dym);
    return sl_spec_fail_at(err, r->loc);
  }
  sl_fail(err, SL_ERR_PIPELINE,
          "reference '%s.%s' loops through template inputs and outputs without reaching a node",
          r->node, r->port);
  return sl_spec_fail_at(err, r->loc);
}
