/* A pipeline file's declarations: `params:` (name, type, doc, default or
 * required) and `inputs:`, and the values the params take from their
 * defaults, --set, or the params of the entry that uses the file. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec_loader.h"

static const char *const k_decl_keys[] = {"type", "doc", "default", "required"};

sl_code sl_spec_parse_decls(sl_spec *s, const sl_yaml *params, sl_error *err) {
  sl_code rc;
  if ((rc = sl_spec_want_map(params, "'params:'", err))) return rc;
  if (!(s->params = sl_calloc(params->n, sizeof *s->params)))
    return sl_spec_nomem_at(err, "the parameter declarations", params->loc);
  for (size_t i = 0; i < params->n; i++) {
    const char *name = params->keys[i];
    sl_loc kl = params->key_locs[i];
    const sl_yaml *d = params->items[i];
    if (!sl_is_identifier(name)) {
      sl_fail(err, SL_ERR_PIPELINE,
              "invalid parameter name '%s' (use letters, digits, '_' and '-', starting with "
              "a letter or '_')",
              name);
      return sl_spec_fail_at(err, kl);
    }
    if (d->kind != SL_Y_MAP) {
      char *shown = sl_yaml_flow_string(d);
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' must be declared as a mapping like {type: int, default: 1}, "
              "found %s '%s'",
              name, sl_yaml_kind_name(d), shown ? shown : "...");
      free(shown);
      return sl_spec_fail_at(err, d->loc);
    }
    char where[300];
    snprintf(where, sizeof where, "the declaration of parameter '%s'", name);
    if ((rc = sl_spec_check_keys(d, k_decl_keys, SL_SPEC_COUNT(k_decl_keys), where, err)))
      return rc;
    char *name_copy = sl_strdup(name);
    if (!name_copy) return sl_spec_nomem_at(err, "a parameter name", kl);
    sl_param_decl *p = &s->params[s->n_params++];
    p->name = name_copy;
    p->loc = kl;
    const sl_yaml *ty = sl_yaml_get(d, "type");
    if (!ty) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' has no type: (one of int, float, bool, string, path, shape, "
              "list)",
              name);
      return sl_spec_fail_at(err, kl);
    }
    if ((rc = sl_spec_want_scalar(ty, "a parameter's type:", err))) return rc;
    if (sl_ptype_parse(ty->scalar, &p->type) != 0) {
      size_t nt;
      const char *const *tn = sl_ptype_names(&nt);
      char dym[160];
      sl_spec_did_you_mean(ty->scalar, tn, nt, dym, sizeof dym);
      sl_fail(err, SL_ERR_PIPELINE,
              "unknown parameter type '%s'%s; expected one of: int, float, bool, string, "
              "path, shape, list",
              ty->scalar, dym);
      return sl_spec_fail_at(err, ty->loc);
    }
    const sl_yaml *doc = sl_yaml_get(d, "doc");
    if (doc) {
      if ((rc = sl_spec_want_scalar(doc, "a parameter's doc:", err))) return rc;
      if (!(p->doc = sl_strdup(doc->scalar)))
        return sl_spec_nomem_at(err, "a parameter's doc", doc->loc);
    }
    const sl_yaml *req = sl_yaml_get(d, "required");
    if (req) {
      if (req->kind != SL_Y_SCALAR || req->quoted ||
          (strcmp(req->scalar, "true") && strcmp(req->scalar, "false"))) {
        sl_fail(err, SL_ERR_PIPELINE, "required: must be true or false");
        return sl_spec_fail_at(err, req->loc);
      }
      p->required = !strcmp(req->scalar, "true");
    }
    const sl_yaml *def = sl_yaml_get(d, "default");
    if (p->required && def) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' has both default: and required: true; keep one", name);
      return sl_spec_fail_at(err, def->loc);
    }
    if (!p->required && !def) {
      sl_fail(err, SL_ERR_PIPELINE,
              "parameter '%s' needs either default: VALUE or required: true", name);
      return sl_spec_fail_at(err, kl);
    }
    if (def) {
      if ((rc = sl_param_check(name, p->type, def, err))) return rc;
      if (!(p->default_value = sl_yaml_clone(def)))
        return sl_spec_nomem_at(err, "a parameter's default", def->loc);
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
  const char **names = sl_calloc(s->n_params + 1, sizeof *names);
  if (!names) /* the message without its suggestions */
    return sl_fail(err, SL_ERR_PIPELINE, "%s: '%s' has no parameter '%s'", how, s->file, name);
  for (size_t i = 0; i < s->n_params; i++) names[i] = s->params[i].name;
  char dym[160], list[512];
  sl_spec_did_you_mean(name, names, s->n_params, dym, sizeof dym);
  sl_spec_join_list(names, s->n_params, list, sizeof list);
  free(names);
  return sl_fail(err, SL_ERR_PIPELINE, "%s: '%s' has no parameter '%s'%s; its parameters are: %s",
                 how, s->file, name, dym, list);
}

bool sl_loc_is_setting(sl_loc l) { return l.file && !strncmp(l.file, "--set ", 6); }

static sl_code parse_set_value(const sl_param_decl *p, const char *text, sl_yaml **out,
                               sl_error *err) {
  *out = NULL;
  char file[300];
  snprintf(file, sizeof file, "--set %s", p->name);
  sl_loc l = {sl_intern(file), 1, 1};
  if (!l.file) return sl_fail_nomem(err, "a --set value");
  if (p->type == SL_PT_STRING || p->type == SL_PT_PATH || !text[0]) {
    if (!(*out = sl_yaml_new_scalar(text, l))) return sl_spec_nomem_at(err, "a --set value", l);
    (*out)->quoted = text[0] != 0;
    return SL_OK;
  }
  return sl_yaml_load_string(text, strlen(text), file, out, err);
}

/* A relative path means relative to where it was written: the file that
 * holds the text, or the current directory for a --set value. Resolved once
 * here, so that templates and nodes receive paths that no longer depend on
 * which file passes them on. */
static sl_code resolve_path_value(sl_yaml *v, sl_error *err) {
  if (v->kind != SL_Y_SCALAR || !v->scalar[0] || v->scalar[0] == '/') return SL_OK;
  char base[4096], joined[8192];
  const char *file = v->loc.file ? v->loc.file : "";
  if (!strncmp(file, "--set ", 6) || !file[0]) {
    if (!getcwd(base, sizeof base)) return SL_OK;
  } else {
    sl_dirname(file, base, sizeof base);
  }
  sl_path_join(base, v->scalar, joined, sizeof joined);
  char *resolved = sl_strdup(joined);
  if (!resolved) return sl_spec_nomem_at(err, "a path", v->loc);
  free(v->scalar);
  v->scalar = resolved;
  return SL_OK;
}

sl_code sl_spec_resolve_values(sl_spec *s, const sl_spec_bindings *b, sl_error *err) {
  sl_code rc;
  if (!(s->values = sl_calloc(s->n_params + 1, sizeof *s->values)))
    return sl_spec_nomem_at(err, "the parameter values", (sl_loc){sl_intern(s->file), 0, 0});
  for (size_t i = 0; i < s->n_params; i++)
    if (s->params[i].default_value &&
        !(s->values[i] = sl_yaml_clone(s->params[i].default_value)))
      return sl_spec_nomem_at(err, "a parameter value", s->params[i].loc);
  if (b->is_top) {
    for (size_t k = 0; k < b->n_sets; k++) {
      long i = decl_index(s, b->sets[k].name);
      if (i < 0) {
        unknown_binding(s, b->sets[k].name, "--set", err);
        return sl_spec_fail_at(err, (sl_loc){sl_intern(s->file), 0, 0});
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
        return sl_spec_fail_at(err, b->params->key_locs[k]);
      }
      sl_yaml_free(s->values[i]);
      if (!(s->values[i] = sl_yaml_clone(b->params->items[k])))
        return sl_spec_nomem_at(err, "a parameter value", b->params->key_locs[k]);
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
        return sl_spec_fail_at(err, p->loc);
      }
      sl_fail(err, SL_ERR_PIPELINE,
              "%s '%s' requires parameter '%s'%s; bind it under params: of node '%s'",
              b->what, s->file, p->name, doc, b->entry_id);
      return sl_spec_fail_at(err, b->entry_loc);
    }
    if ((rc = sl_param_check(p->name, p->type, s->values[i], err))) return rc;
    if (p->type == SL_PT_PATH && (rc = resolve_path_value(s->values[i], err))) return rc;
  }
  return SL_OK;
}

sl_code sl_spec_parse_inputs_decl(sl_spec *s, const sl_yaml *in, sl_error *err) {
  if (in->kind != SL_Y_SEQ) {
    sl_fail(err, SL_ERR_PIPELINE, "inputs: must be a sequence of names like [x, y], found %s",
            sl_yaml_kind_name(in));
    return sl_spec_fail_at(err, in->loc);
  }
  if (!(s->inputs = sl_calloc(in->n + 1, sizeof *s->inputs)))
    return sl_spec_nomem_at(err, "the inputs", in->loc);
  for (size_t i = 0; i < in->n; i++) {
    const sl_yaml *v = in->items[i];
    if (v->kind != SL_Y_SCALAR || !sl_spec_valid_id(v->scalar)) {
      char *shown = sl_yaml_flow_string(v);
      sl_fail(err, SL_ERR_PIPELINE,
              "invalid pipeline input name '%s' (use letters, digits, '_' and '-')",
              shown ? shown : "...");
      free(shown);
      return sl_spec_fail_at(err, v->loc);
    }
    if (sl_spec_has_name((const char *const *)s->inputs, s->n_inputs, v->scalar)) {
      sl_fail(err, SL_ERR_PIPELINE, "pipeline input '%s' is declared twice", v->scalar);
      return sl_spec_fail_at(err, v->loc);
    }
    if (!(s->inputs[s->n_inputs] = sl_strdup(v->scalar)))
      return sl_spec_nomem_at(err, "an input name", v->loc);
    s->n_inputs++;
  }
  return SL_OK;
}
