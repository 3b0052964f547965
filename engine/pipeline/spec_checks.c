/* Structure checks and error messages of the spec loader: keys, kinds of
 * YAML values, ids, "did you mean" suggestions, and small reference and
 * string helpers (see spec_loader.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec_loader.h"

sl_code sl_spec_fail_at(sl_error *err, sl_loc l) {
  sl_error_at(err, l.file, l.line, l.col);
  return err ? err->code : SL_ERR_PIPELINE;
}

sl_code sl_spec_nomem_at(sl_error *err, const char *what, sl_loc l) {
  sl_fail_nomem(err, what);
  sl_error_at(err, l.file, l.line, l.col);
  return SL_ERR_NOMEM;
}

/* " (did you mean 'x'?)" or "" */
void sl_spec_did_you_mean(const char *word, const char *const *cands, size_t n, char *buf,
                         size_t bn) {
  const char *best = sl_closest(word, cands, n);
  if (best)
    snprintf(buf, bn, " (did you mean '%s'?)", best);
  else
    buf[0] = 0;
}

void sl_spec_join_list(const char *const *items, size_t n, char *buf, size_t bn) {
  size_t o = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && o + 1 < bn; i++) {
    int k = snprintf(buf + o, bn - o, "%s%s", i ? ", " : "", items[i]);
    if (k > 0) o += (size_t)k;
  }
  if (n == 0) snprintf(buf, bn, "(none)");
}

const char *sl_yaml_kind_name(const sl_yaml *y) {
  switch (y->kind) {
    case SL_Y_MAP: return "a mapping";
    case SL_Y_SEQ: return "a sequence";
    default: return "text";
  }
}

sl_code sl_spec_check_keys(const sl_yaml *map, const char *const *allowed, size_t n,
                          const char *where, sl_error *err) {
  for (size_t i = 0; i < map->n; i++) {
    bool ok = false;
    for (size_t k = 0; k < n; k++)
      if (!strcmp(map->keys[i], allowed[k])) ok = true;
    if (ok) continue;
    char dym[160], list[256];
    sl_spec_did_you_mean(map->keys[i], allowed, n, dym, sizeof dym);
    sl_spec_join_list(allowed, n, list, sizeof list);
    sl_fail(err, SL_ERR_PIPELINE, "unknown key '%s' in %s%s; expected one of: %s", map->keys[i],
            where, dym, list);
    return sl_spec_fail_at(err, map->key_locs[i]);
  }
  return SL_OK;
}

sl_code sl_spec_want_scalar(const sl_yaml *v, const char *what, sl_error *err) {
  if (v->kind == SL_Y_SCALAR) return SL_OK;
  sl_fail(err, SL_ERR_PIPELINE, "%s must be text, found %s", what, sl_yaml_kind_name(v));
  return sl_spec_fail_at(err, v->loc);
}

sl_code sl_spec_want_map(const sl_yaml *v, const char *what, sl_error *err) {
  if (v->kind == SL_Y_MAP) return SL_OK;
  char *shown = sl_yaml_flow_string(v);
  sl_fail(err, SL_ERR_PIPELINE, "%s must be a mapping (key: value), found %s '%s'", what,
          sl_yaml_kind_name(v), shown ? shown : "...");
  free(shown);
  return sl_spec_fail_at(err, v->loc);
}

/* Node ids: letters, digits, '_' and '-' ('.' and '/' are reserved). */
bool sl_spec_valid_id(const char *s) {
  if (!s[0]) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

bool sl_spec_has_name(const char *const *names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return true;
  return false;
}

sl_code sl_spec_add_source(sl_spec *s, const char *file, sl_error *err) {
  if (sl_spec_has_name((const char *const *)s->sources, s->n_sources, file)) return SL_OK;
  char *copy = sl_strdup(file);
  if (!copy || !sl_resize(&s->sources, s->n_sources + 1, sizeof *s->sources)) {
    free(copy);
    sl_fail_nomem(err, "the list of source files");
    sl_error_at(err, file, 0, 0);
    return SL_ERR_NOMEM;
  }
  s->sources[s->n_sources++] = copy;
  return SL_OK;
}

char *sl_str_concat3(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *r = sl_calloc(la + lb + lc + 1, 1);
  if (!r) return NULL;
  memcpy(r, a, la);
  memcpy(r + la, b, lb);
  memcpy(r + la + lb, c, lc);
  return r;
}

void sl_ref_free(sl_ref *r) {
  free(r->node);
  free(r->port);
  r->node = r->port = NULL;
}

sl_code sl_ref_copy(const sl_ref *r, sl_ref *out, sl_error *err) {
  *out = (sl_ref){sl_strdup(r->node), sl_strdup(r->port), r->loc};
  if ((r->node && !out->node) || (r->port && !out->port)) {
    sl_ref_free(out);
    return sl_spec_nomem_at(err, "a reference", r->loc);
  }
  return SL_OK;
}

sl_code sl_ref_parse(const sl_yaml *v, sl_ref *out, sl_error *err) {
  memset(out, 0, sizeof *out);
  if (v->kind != SL_Y_SCALAR) {
    sl_fail(err, SL_ERR_PIPELINE,
            "expected a reference 'node.port' (or 'inputs.NAME'), found %s", sl_yaml_kind_name(v));
    return sl_spec_fail_at(err, v->loc);
  }
  const char *t = v->scalar;
  const char *dot = strchr(t, '.');
  if (!dot || dot == t || !dot[1] || strchr(dot + 1, '.') || strchr(dot + 1, '/')) {
    sl_fail(err, SL_ERR_PIPELINE,
            "expected a reference 'node.port' (or 'inputs.NAME'), found '%s'", t);
    return sl_spec_fail_at(err, v->loc);
  }
  out->node = sl_strndup(t, (size_t)(dot - t));
  out->port = sl_strdup(dot + 1);
  out->loc = v->loc;
  if (!out->node || !out->port) {
    sl_ref_free(out);
    return sl_spec_nomem_at(err, "a reference", v->loc);
  }
  return SL_OK;
}
