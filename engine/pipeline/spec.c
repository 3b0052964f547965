/* Pipeline file -> sl_spec: reading files (with template recursion and
 * depth checks), the top-level structure (pipeline:, params:, inputs:,
 * nodes:, outputs:), and freeing. Parameter declarations, node entries and
 * checks live in the files spec_loader.h lists. */
#define _POSIX_C_SOURCE 200809L
#include "engine/pipeline/spec.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec_loader.h"

static const char *const k_top_keys[] = {"pipeline", "description", "params",
                                         "inputs",   "nodes",       "outputs"};

static void node_free(sl_node_spec *n) {
  free(n->id);
  free(n->type);
  for (size_t i = 0; i < n->n_inputs; i++) {
    free(n->inputs[i].name);
    sl_ref_free(&n->inputs[i].ref);
  }
  free(n->inputs);
  sl_yaml_free(n->params);
  sl_spec_free(n->body);
  free(n->until);
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
    sl_ref_free(&s->outputs[i].ref);
  }
  free(s->outputs);
  for (size_t i = 0; i < s->n_sources; i++) free(s->sources[i]);
  free(s->sources);
  free(s);
}

const sl_yaml *sl_spec_value(const sl_spec *s, const char *name) {
  if (!s || !name || !s->values) return NULL;
  for (size_t i = 0; i < s->n_params; i++)
    if (!strcmp(s->params[i].name, name)) return s->values[i];
  return NULL;
}

static sl_code load_root(sl_spec_loader *L, const sl_yaml *root, const char *base_dir,
                         const sl_spec_bindings *b, sl_spec *s, sl_error *err) {
  sl_code rc;
  if (root->kind != SL_Y_MAP) {
    sl_fail(err, SL_ERR_PIPELINE,
            "a pipeline file must be a mapping with pipeline:, nodes: and outputs:, found %s",
            sl_yaml_kind_name(root));
    return sl_spec_fail_at(err, root->loc);
  }
  rc = sl_spec_check_keys(root, k_top_keys, SL_SPEC_COUNT(k_top_keys), "a pipeline file", err);
  if (rc) return rc;
  const sl_yaml *name = sl_yaml_get(root, "pipeline");
  if (!name) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'pipeline: NAME' (the pipeline's name)");
    return sl_spec_fail_at(err, root->loc);
  }
  if ((rc = sl_spec_want_scalar(name, "pipeline:", err))) return rc;
  if (!name->scalar[0]) {
    sl_fail(err, SL_ERR_PIPELINE, "pipeline: (the pipeline's name) is empty");
    return sl_spec_fail_at(err, name->loc);
  }
  if (!(s->name = sl_strdup(name->scalar))) return sl_spec_nomem_at(err, "the name", name->loc);
  const sl_yaml *desc = sl_yaml_get(root, "description");
  if (desc) {
    if ((rc = sl_spec_want_scalar(desc, "description:", err))) return rc;
    if (!(s->description = sl_strdup(desc->scalar)))
      return sl_spec_nomem_at(err, "the description", desc->loc);
  }
  const sl_yaml *params = sl_yaml_get(root, "params");
  if (params && (rc = sl_spec_parse_decls(s, params, err))) return rc;
  const sl_yaml *inputs = sl_yaml_get(root, "inputs");
  if (inputs && (rc = sl_spec_parse_inputs_decl(s, inputs, err))) return rc;
  if ((rc = sl_spec_resolve_values(s, b, err))) return rc;

  const sl_yaml *nodes = sl_yaml_get(root, "nodes");
  if (!nodes) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'nodes:' (a mapping from node id to node)");
    return sl_spec_fail_at(err, root->loc);
  }
  if ((rc = sl_spec_want_map(nodes, "nodes:", err))) return rc;
  if (nodes->n == 0) {
    sl_fail(err, SL_ERR_PIPELINE, "nodes: is empty (a pipeline needs at least one node)");
    return sl_spec_fail_at(err, nodes->loc);
  }
  const sl_yaml *outputs = sl_yaml_get(root, "outputs");
  if (!outputs) {
    sl_fail(err, SL_ERR_PIPELINE, "missing 'outputs:' (a mapping from output name to node.port)");
    return sl_spec_fail_at(err, root->loc);
  }
  if ((rc = sl_spec_want_map(outputs, "outputs:", err))) return rc;
  if (outputs->n == 0) {
    sl_fail(err, SL_ERR_PIPELINE, "outputs: is empty (a pipeline needs at least one output)");
    return sl_spec_fail_at(err, outputs->loc);
  }

  sl_aliases as = {0};
  for (size_t i = 0; i < nodes->n && !rc; i++)
    rc = sl_spec_expand_entry(L, s, &as, nodes->keys[i], nodes->key_locs[i], nodes->items[i],
                              base_dir, err);
  if (!rc && !(s->outputs = sl_calloc(outputs->n, sizeof *s->outputs)))
    rc = sl_spec_nomem_at(err, "the outputs", outputs->loc);
  if (!rc) {
    for (size_t i = 0; i < outputs->n && !rc; i++) {
      if (!sl_spec_valid_id(outputs->keys[i])) {
        sl_fail(err, SL_ERR_PIPELINE,
                "invalid output name '%s' (use letters, digits, '_' and '-')", outputs->keys[i]);
        rc = sl_spec_fail_at(err, outputs->key_locs[i]);
        break;
      }
      sl_yaml *v;
      if ((rc = sl_subst_tree(outputs->items[i], s, &v, err))) break;
      sl_output_spec *o = &s->outputs[s->n_outputs];
      rc = sl_ref_parse(v, &o->ref, err);
      sl_yaml_free(v);
      if (rc) break;
      o->name = sl_strdup(outputs->keys[i]);
      s->n_outputs++; /* the ref is freed with the spec, with or without its name */
      if (!o->name) rc = sl_spec_nomem_at(err, "an output name", outputs->key_locs[i]);
    }
  }
  for (size_t i = 0; i < s->n_nodes && !rc; i++)
    for (size_t k = 0; k < s->nodes[i].n_inputs && !rc; k++)
      rc = sl_spec_resolve_ref(s, &as, &s->nodes[i].inputs[k].ref, err);
  for (size_t i = 0; i < s->n_outputs && !rc; i++)
    rc = sl_spec_resolve_ref(s, &as, &s->outputs[i].ref, err);
  for (size_t i = 0; i < s->n_nodes && !rc; i++)
    for (size_t k = 0; k < i; k++)
      if (!strcmp(s->nodes[i].id, s->nodes[k].id)) {
        sl_fail(err, SL_ERR_PIPELINE, "node id '%s' is defined twice after template expansion",
                s->nodes[i].id);
        rc = sl_spec_fail_at(err, s->nodes[i].loc);
        break;
      }
  sl_aliases_free(&as);
  return rc;
}

static sl_code load_text(sl_spec_loader *L, const char *text, size_t len, const char *file,
                         const char *base_dir, const sl_spec_bindings *b, sl_spec **out,
                         sl_error *err) {
  *out = NULL;
  sl_yaml *root;
  sl_code rc = sl_yaml_load_string(text, len, file, &root, err);
  if (rc) return rc;
  sl_spec *s = sl_calloc(1, sizeof *s);
  if (!s || !(s->file = sl_strdup(file))) {
    rc = sl_fail_nomem(err, "a pipeline spec");
    sl_error_at(err, file, 0, 0);
  } else {
    rc = sl_spec_add_source(s, file, err);
  }
  if (!rc) rc = load_root(L, root, base_dir, b, s, err);
  sl_yaml_free(root);
  if (rc) {
    sl_spec_free(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

/* The file being loaded joins the chain (canonical path, and as written). */
static sl_code loader_push(sl_spec_loader *L, const char *canon, const char *shown,
                           sl_error *err) {
  L->chain[L->depth] = sl_strdup(canon);
  L->chain_show[L->depth] = sl_strdup(shown);
  L->depth++;
  if (L->chain[L->depth - 1] && L->chain_show[L->depth - 1]) return SL_OK;
  sl_fail_nomem(err, "the chain of files being loaded");
  sl_error_at(err, shown, 0, 0);
  return SL_ERR_NOMEM;
}

static void loader_pop(sl_spec_loader *L) {
  L->depth--;
  free(L->chain[L->depth]);
  free(L->chain_show[L->depth]);
}

sl_code sl_spec_load_path(sl_spec_loader *L, const char *path, const sl_loc *use_loc,
                          const sl_spec_bindings *b, sl_spec **out, sl_error *err) {
  *out = NULL;
  char canon[PATH_MAX];
  if (!realpath(path, canon)) {
    if (use_loc) {
      sl_fail(err, SL_ERR_PIPELINE, "%s file not found: '%s'", b->what, path);
      return sl_spec_fail_at(err, *use_loc);
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
    return sl_spec_fail_at(err, *use_loc);
  }
  if (L->depth >= SL_SPEC_MAX_DEPTH) {
    sl_fail(err, SL_ERR_PIPELINE, "templates nested deeper than %d levels", SL_SPEC_MAX_DEPTH);
    return sl_spec_fail_at(err, *use_loc);
  }
  char *text;
  size_t len;
  sl_code rc = sl_yaml_read_file(path, &text, &len, err);
  if (rc) {
    if (use_loc) {
      if (rc != SL_ERR_NOMEM) err->code = SL_ERR_PIPELINE;
      return sl_spec_fail_at(err, *use_loc);
    }
    sl_error_at(err, path, 0, 0);
    return rc;
  }
  char dir[PATH_MAX];
  sl_dirname(path, dir, sizeof dir);
  rc = loader_push(L, canon, path, err);
  if (!rc) rc = load_text(L, text, len, path, dir, b, out, err);
  loader_pop(L);
  free(text);
  return rc;
}

/* The bindings of a top-level file: its params come from --set. */
static sl_spec_bindings top_level_bindings(const sl_setting *sets, size_t n_sets) {
  return (sl_spec_bindings){.is_top = 1, .sets = sets, .n_sets = n_sets, .what = "pipeline"};
}

sl_code sl_spec_load(const char *path, const sl_setting *sets, size_t n_sets, sl_spec **out,
                     sl_error *err) {
  sl_spec_loader L = {0};
  sl_spec_bindings b = top_level_bindings(sets, n_sets);
  return sl_spec_load_path(&L, path, NULL, &b, out, err);
}

sl_code sl_spec_load_string(const char *text, size_t len, const char *name,
                            const sl_setting *sets, size_t n_sets, sl_spec **out,
                            sl_error *err) {
  sl_spec_loader L = {0};
  sl_spec_bindings b = top_level_bindings(sets, n_sets);
  const char *file = name ? name : "<string>";
  sl_code rc = loader_push(&L, file, file, err);
  if (!rc) rc = load_text(&L, text, len, file, ".", &b, out, err);
  loader_pop(&L);
  return rc;
}
