/* Typed node parameters: conversion from YAML values (checked against the
 * descriptor's declared type) and accessors for node code. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/graph/graph.h"

static sl_code type_error(const sl_param_def *def, const sl_yaml *v, const char *expected,
                          sl_error *err) {
  sl_fail(err, SL_ERR_PIPELINE, "param '%s' expects %s, found %s%s%s", def->name, expected,
          v->kind == SL_Y_SCALAR ? "'" : "",
          v->kind == SL_Y_SCALAR ? v->scalar : (v->kind == SL_Y_SEQ ? "a list" : "a map"),
          v->kind == SL_Y_SCALAR ? "'" : "");
  sl_error_at(err, v->loc.file, v->loc.line, v->loc.col);
  return SL_ERR_PIPELINE;
}

static sl_code nomem(const sl_param_def *def, const sl_yaml *v, sl_error *err) {
  sl_fail(err, SL_ERR_NOMEM, "out of memory for the value of param '%s'", def->name);
  sl_error_at(err, v->loc.file, v->loc.line, v->loc.col);
  return SL_ERR_NOMEM;
}

sl_code sl_param_convert(const sl_param_def *def, const sl_yaml *v, const char *base_dir,
                         sl_param_value *out, sl_error *err) {
  memset(out, 0, sizeof *out);
  out->type = def->type;
  switch (def->type) {
    case SL_PT_INT:
      if (v->kind != SL_Y_SCALAR || !sl_parse_i64(v->scalar, &out->i))
        return type_error(def, v, "an integer", err);
      return SL_OK;
    case SL_PT_FLOAT:
      if (v->kind != SL_Y_SCALAR || !sl_parse_f64(v->scalar, &out->f))
        return type_error(def, v, "a number", err);
      return SL_OK;
    case SL_PT_BOOL:
      if (v->kind != SL_Y_SCALAR || !sl_parse_bool(v->scalar, &out->b))
        return type_error(def, v, "true or false", err);
      return SL_OK;
    case SL_PT_STRING:
      if (v->kind != SL_Y_SCALAR) return type_error(def, v, "a string", err);
      if (def->choices) {
        int index = sl_choice_index(def->choices, v->scalar);
        if (index < 0) {
          sl_fail(err, SL_ERR_PIPELINE, "param '%s' must be one of %s, got '%s'", def->name,
                  def->choices, v->scalar);
          sl_error_at(err, v->loc.file, v->loc.line, v->loc.col);
          return SL_ERR_PIPELINE;
        }
        out->i = index;
      }
      out->s = sl_strdup(v->scalar);
      return out->s ? SL_OK : nomem(def, v, err);
    case SL_PT_PATH: {
      if (v->kind != SL_Y_SCALAR) return type_error(def, v, "a path", err);
      char buf[4096];
      if (v->scalar[0] == 0)
        snprintf(buf, sizeof buf, "%s", "");
      else
        sl_path_join(base_dir, v->scalar, buf, sizeof buf);
      out->s = sl_strdup(buf);
      return out->s ? SL_OK : nomem(def, v, err);
    }
    case SL_PT_SHAPE:
      if (v->kind != SL_Y_SEQ) return type_error(def, v, "a shape such as [32, 32]", err);
      out->n = v->n;
      if (!(out->ints = sl_calloc(v->n, sizeof *out->ints))) return nomem(def, v, err);
      for (size_t i = 0; i < v->n; i++) {
        const sl_yaml *it = v->items[i];
        if (it->kind != SL_Y_SCALAR || !sl_parse_i64(it->scalar, &out->ints[i]) ||
            out->ints[i] < 0) {
          sl_param_value_free(out);
          return type_error(def, it, "non-negative integers in the shape", err);
        }
      }
      return SL_OK;
    case SL_PT_LIST:
      if (v->kind != SL_Y_SEQ) return type_error(def, v, "a list", err);
      out->n = v->n;
      if (!(out->strs = sl_calloc(v->n, sizeof *out->strs))) return nomem(def, v, err);
      for (size_t i = 0; i < v->n; i++) {
        if (v->items[i]->kind != SL_Y_SCALAR) {
          sl_param_value_free(out);
          return type_error(def, v->items[i], "scalar list items", err);
        }
        if (!(out->strs[i] = sl_strdup(v->items[i]->scalar))) {
          sl_param_value_free(out);
          return nomem(def, v, err);
        }
      }
      return SL_OK;
  }
  return sl_fail(err, SL_ERR_INTERNAL, "unknown param type");
}

bool sl_node_bind_typed_params(sl_node *n) {
  const sl_node_desc *d = n->desc;
  free(n->typed_params);
  n->typed_params = NULL;
  if (!d || !d->params_bind) return true;
  n->typed_params = sl_calloc(1, d->params_size ? d->params_size : 1);
  if (!n->typed_params) return false;
  d->params_bind(n->params, n->typed_params);
  return true;
}

const void *sl_node_typed_params(const sl_node *n) {
  assert(n->typed_params); /* the descriptor declares typed params and they were bound */
  return n->typed_params;
}

void sl_param_value_free(sl_param_value *v) {
  if (!v) return;
  free(v->s);
  free(v->ints);
  if (v->strs)
    for (size_t i = 0; i < v->n; i++) free(v->strs[i]);
  free(v->strs);
  memset(v, 0, sizeof *v);
}
