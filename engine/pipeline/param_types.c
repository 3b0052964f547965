/* Pipeline parameter types: names, and checking a value against a type. */
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec.h"

static const char *const g_ptype_names[] = {"int",  "float", "bool", "string",
                                            "path", "shape", "list"};

const char *sl_ptype_name(sl_ptype t) {
  if ((unsigned)t < sizeof g_ptype_names / sizeof *g_ptype_names) return g_ptype_names[t];
  return "?";
}

int sl_ptype_parse(const char *name, sl_ptype *out) {
  if (!name) return -1;
  for (size_t i = 0; i < sizeof g_ptype_names / sizeof *g_ptype_names; i++)
    if (strcmp(name, g_ptype_names[i]) == 0) {
      *out = (sl_ptype)i;
      return 0;
    }
  return -1;
}

const char *const *sl_ptype_names(size_t *n) {
  *n = sizeof g_ptype_names / sizeof *g_ptype_names;
  return g_ptype_names;
}

static const char *kind_word(const sl_yaml *v) {
  switch (v->kind) {
    case SL_Y_SEQ: return "a sequence";
    case SL_Y_MAP: return "a mapping";
    default: return v->quoted ? "a quoted string" : "text";
  }
}

static bool is_bool_text(const char *s) {
  return !strcmp(s, "true") || !strcmp(s, "false") || !strcmp(s, "True") ||
         !strcmp(s, "False") || !strcmp(s, "TRUE") || !strcmp(s, "FALSE");
}

static sl_code bad(const sl_yaml *v, const char *name, const char *expected, sl_error *err) {
  char *shown = sl_yaml_flow_string(v);
  sl_fail(err, SL_ERR_PIPELINE, "parameter '%s' expects %s, found %s '%s'", name, expected,
          kind_word(v), shown ? shown : "...");
  free(shown);
  sl_error_at(err, v->loc.file, v->loc.line, v->loc.col);
  return SL_ERR_PIPELINE;
}

sl_code sl_param_check(const char *name, sl_ptype type, const sl_yaml *v, sl_error *err) {
  int64_t i;
  double d;
  switch (type) {
    case SL_PT_INT:
      if (v->kind != SL_Y_SCALAR || v->quoted || !sl_parse_i64(v->scalar, &i))
        return bad(v, name, "an integer (int)", err);
      return SL_OK;
    case SL_PT_FLOAT:
      if (v->kind != SL_Y_SCALAR || v->quoted || !sl_parse_f64(v->scalar, &d))
        return bad(v, name, "a number (float)", err);
      return SL_OK;
    case SL_PT_BOOL:
      if (v->kind != SL_Y_SCALAR || v->quoted || !is_bool_text(v->scalar))
        return bad(v, name, "true or false (bool)", err);
      return SL_OK;
    case SL_PT_STRING:
    case SL_PT_PATH:
      if (v->kind != SL_Y_SCALAR)
        return bad(v, name, type == SL_PT_PATH ? "a path (path)" : "text (string)", err);
      return SL_OK;
    case SL_PT_SHAPE:
      if (v->kind != SL_Y_SEQ)
        return bad(v, name, "a sequence of non-negative integers like [32, 32] (shape)", err);
      for (size_t k = 0; k < v->n; k++) {
        const sl_yaml *it = v->items[k];
        if (it->kind != SL_Y_SCALAR || it->quoted || !sl_parse_i64(it->scalar, &i) || i < 0)
          return bad(it, name, "a non-negative integer in its shape", err);
      }
      return SL_OK;
    case SL_PT_LIST:
      if (v->kind != SL_Y_SEQ) return bad(v, name, "a sequence like [a, b] (list)", err);
      return SL_OK;
  }
  return SL_OK;
}
