/* `${}` substitution of pipeline parameters into YAML scalars.
 *   ${name}            the value of param `name` (unknown name: error)
 *   ${name:-default}   `default` when name is not a param or its value is ""
 *   ${name:?message}   error `message` when name is not a param or its value is ""
 *   $$                 a literal `$`
 * A scalar that is exactly one `${...}` takes the value itself (a sequence
 * stays a sequence); otherwise values are spliced into the text. */
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec.h"

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool nomem; /* an append failed: the text is incomplete */
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->nomem || !s) {
    b->nomem = true;
    return;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *p = sl_realloc(b->p, cap);
    if (!p) {
      b->nomem = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static bool ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

bool sl_is_identifier(const char *s) {
  if (!s || !ident_start(s[0])) return false;
  for (const char *p = s + 1; *p; p++)
    if (!ident_char(*p) && *p != '-') return false;
  return true;
}

/* Location of byte `off` of a scalar: exact on single-line scalars. */
static sl_loc loc_at(const sl_yaml *s, size_t off) {
  sl_loc l = s->loc;
  if (!memchr(s->scalar, '\n', off)) l.col += (int)off + (s->quoted ? 1 : 0);
  return l;
}

static sl_code fail_loc(sl_error *err, sl_code code, sl_loc l) {
  sl_error_at(err, l.file, l.line, l.col);
  return code;
}

static long find_param(const sl_spec *scope, const char *name, size_t n) {
  for (size_t i = 0; scope && i < scope->n_params; i++)
    if (strlen(scope->params[i].name) == n && !strncmp(scope->params[i].name, name, n))
      return (long)i;
  return -1;
}

static sl_code unknown_param(const sl_spec *scope, const char *name, sl_loc l, sl_error *err) {
  size_t np = scope ? scope->n_params : 0;
  const char **names = sl_calloc(np ? np : 1, sizeof *names);
  if (!names) np = 0; /* the message without the known names */
  for (size_t i = 0; i < np; i++) names[i] = scope->params[i].name;
  const char *best = sl_closest(name, names, np);
  char known[512] = "";
  size_t o = 0;
  for (size_t i = 0; i < np && o < sizeof known - 1; i++) {
    int k = snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", names[i]);
    if (k > 0) o += (size_t)k;
  }
  free(names);
  if (best)
    sl_fail(err, SL_ERR_PIPELINE, "unknown parameter '%s' in ${%s} (did you mean '%s'?)", name,
            name, best);
  else if (np)
    sl_fail(err, SL_ERR_PIPELINE,
            "unknown parameter '%s' in ${%s}; the parameters are: %s (use $$ for a literal $)",
            name, name, known);
  else
    sl_fail(err, SL_ERR_PIPELINE,
            "unknown parameter '%s' in ${%s}: this file declares no params (use $$ for a "
            "literal $)",
            name, name);
  return fail_loc(err, SL_ERR_PIPELINE, l);
}

sl_code sl_subst_scalar(const sl_yaml *s, const sl_spec *scope, sl_yaml **out, sl_error *err) {
  *out = NULL;
  const char *t = s->scalar;
  size_t len = strlen(t);
  if (!strchr(t, '$')) {
    if (!(*out = sl_yaml_clone(s))) goto nomem;
    return SL_OK;
  }
  sbuf b = {0}; /* b.p stays NULL until text is added (a whole value needs none) */
  size_t i = 0;
  while (i < len) {
    if (t[i] != '$') {
      size_t j = i;
      while (j < len && t[j] != '$') j++;
      sb_add(&b, t + i, j - i);
      i = j;
      continue;
    }
    if (t[i + 1] == '$') {
      sb_add(&b, "$", 1);
      i += 2;
      continue;
    }
    if (t[i + 1] != '{') {
      sb_add(&b, "$", 1);
      i++;
      continue;
    }
    sl_loc l = loc_at(s, i);
    const char *close = strchr(t + i + 2, '}');
    if (!close) {
      free(b.p);
      sl_fail(err, SL_ERR_PARSE,
              "unterminated '${' in '%s' (expected ${name}, ${name:-default} or "
              "${name:?message}; write $$ for a literal $)",
              t);
      return fail_loc(err, SL_ERR_PARSE, l);
    }
    const char *name = t + i + 2;
    size_t nlen = 0;
    if (ident_start(name[0]))
      while (ident_char(name[nlen])) nlen++;
    const char *rest = name + nlen;
    int form = 0; /* 0 plain, 1 :-, 2 :? */
    if (nlen > 0 && rest == close)
      form = 0;
    else if (nlen > 0 && rest[0] == ':' && rest[1] == '-')
      form = 1;
    else if (nlen > 0 && rest[0] == ':' && rest[1] == '?')
      form = 2;
    else {
      free(b.p);
      sl_fail(err, SL_ERR_PARSE,
              "invalid substitution '%.*s' (expected ${name}, ${name:-default} or "
              "${name:?message})",
              (int)(close - (t + i) + 1), t + i);
      return fail_loc(err, SL_ERR_PARSE, l);
    }
    const char *arg = form ? rest + 2 : close;
    size_t alen = (size_t)(close - arg);
    char *pname = sl_strndup(name, nlen);
    if (!pname) {
      free(b.p);
      goto nomem;
    }
    long pi = find_param(scope, name, nlen);
    const sl_yaml *val = pi >= 0 && scope->values ? scope->values[pi] : NULL;
    bool empty = !val || (val->kind == SL_Y_SCALAR && val->scalar[0] == 0);
    if (form == 0 && pi < 0) {
      free(b.p);
      sl_code rc = unknown_param(scope, pname, l, err);
      free(pname);
      return rc;
    }
    if (form == 2 && empty) {
      free(b.p);
      sl_fail(err, SL_ERR_PIPELINE, "%s: %.*s", pname, (int)alen, arg);
      free(pname);
      return fail_loc(err, SL_ERR_PIPELINE, l);
    }
    free(pname);
    bool whole = i == 0 && close == t + len - 1;
    if (form == 1 && empty) {
      sb_add(&b, arg, alen);
    } else if (whole && val) {
      free(b.p);
      sl_yaml *c = sl_yaml_clone(val);
      if (!c) goto nomem;
      /* A value given with --set keeps that origin through every template
       * it passes, so an error about it points at the --set, not at the
       * line that forwarded it. */
      if (!sl_loc_is_setting(val->loc)) c->loc = s->loc;
      *out = c;
      return SL_OK;
    } else if (val && val->kind == SL_Y_SCALAR) {
      sb_add(&b, val->scalar, strlen(val->scalar));
    } else if (val) {
      char *f = sl_yaml_flow_string(val);
      sb_add(&b, f, f ? strlen(f) : 0);
      free(f);
    }
    i = (size_t)(close - t) + 1;
  }
  sl_yaml *r = b.nomem ? NULL : sl_yaml_new_scalar(b.p ? b.p : "", s->loc);
  free(b.p);
  if (!r) goto nomem;
  r->quoted = s->quoted;
  *out = r;
  return SL_OK;
nomem:
  sl_fail_nomem(err, "a substituted value");
  return fail_loc(err, SL_ERR_NOMEM, s->loc);
}

sl_code sl_subst_tree(const sl_yaml *y, const sl_spec *scope, sl_yaml **out, sl_error *err) {
  *out = NULL;
  if (!y) return SL_OK;
  if (y->kind == SL_Y_SCALAR) return sl_subst_scalar(y, scope, out, err);
  sl_yaml *r = y->kind == SL_Y_MAP ? sl_yaml_new_map(y->loc) : sl_yaml_new_seq(y->loc);
  if (!r) {
    sl_fail_nomem(err, "a substituted value");
    return fail_loc(err, SL_ERR_NOMEM, y->loc);
  }
  for (size_t i = 0; i < y->n; i++) {
    sl_yaml *c;
    sl_code rc = sl_subst_tree(y->items[i], scope, &c, err);
    if (rc) {
      sl_yaml_free(r);
      return rc;
    }
    if (!sl_yaml_append(r, y->kind == SL_Y_MAP ? y->keys[i] : NULL, c)) {
      sl_yaml_free(r);
      sl_fail_nomem(err, "a substituted value");
      return fail_loc(err, SL_ERR_NOMEM, y->items[i]->loc);
    }
    if (y->kind == SL_Y_MAP) r->key_locs[r->n - 1] = y->key_locs[i];
  }
  *out = r;
  return SL_OK;
}
