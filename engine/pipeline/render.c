/* sl_spec -> YAML: the fully resolved pipeline (`sluice render`). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/pipeline/spec.h"

static sl_yaml *text(const char *s, sl_loc l) { return sl_yaml_new_scalar(s, l); }

static sl_yaml *ref_text(const sl_ref *r, sl_loc l) {
  size_t n = strlen(r->node) + strlen(r->port) + 2;
  char *buf = sl_calloc(n, 1);
  if (!buf) return NULL;
  snprintf(buf, n, "%s.%s", r->node, r->port);
  sl_yaml *y = text(buf, l);
  free(buf);
  return y;
}

/* Every constructor may fail (NULL) and sl_yaml_append then frees what it was
 * given and returns false: `ok` gathers that, and the tree is dropped at the
 * end when anything is missing. */
sl_yaml *sl_spec_to_yaml(const sl_spec *s) {
  sl_loc l = {sl_intern(s->file ? s->file : "<render>"), 1, 1};
  sl_yaml *root = sl_yaml_new_map(l);
  bool ok = sl_yaml_append(root, "pipeline", text(s->name ? s->name : "", l));
  if (s->description) {
    sl_yaml *d = text(s->description, l);
    if (d) d->quoted = true;
    ok &= sl_yaml_append(root, "description", d);
  }
  if (s->n_params) {
    sl_yaml *p = sl_yaml_new_map(l);
    for (size_t i = 0; i < s->n_params; i++) {
      const sl_yaml *v = s->values ? s->values[i] : NULL;
      ok &= sl_yaml_append(p, s->params[i].name, v ? sl_yaml_clone(v) : text("", l));
    }
    ok &= sl_yaml_append(root, "params", p);
  }
  if (s->n_inputs) {
    sl_yaml *in = sl_yaml_new_seq(l);
    for (size_t i = 0; i < s->n_inputs; i++) ok &= sl_yaml_append(in, NULL, text(s->inputs[i], l));
    ok &= sl_yaml_append(root, "inputs", in);
  }
  sl_yaml *nodes = sl_yaml_new_map(l);
  for (size_t i = 0; i < s->n_nodes; i++) {
    const sl_node_spec *n = &s->nodes[i];
    sl_yaml *e = sl_yaml_new_map(l);
    ok &= sl_yaml_append(e, "type", text(n->type, l));
    if (n->body) {
      char buf[32];
      snprintf(buf, sizeof buf, "%" PRId64, n->times);
      ok &= sl_yaml_append(e, "times", text(buf, l));
      if (n->n_carry) {
        sl_yaml *c = sl_yaml_new_seq(l);
        for (size_t k = 0; k < n->n_carry; k++)
          ok &= sl_yaml_append(c, NULL, text(n->carry[k], l));
        ok &= sl_yaml_append(e, "carry", c);
      }
      if (n->until) ok &= sl_yaml_append(e, "until", text(n->until, l));
      if (n->expect > 0) {
        snprintf(buf, sizeof buf, "%" PRId64, n->expect);
        ok &= sl_yaml_append(e, "expect", text(buf, l));
      }
    }
    if (n->n_inputs) {
      sl_yaml *in = sl_yaml_new_map(l);
      for (size_t k = 0; k < n->n_inputs; k++)
        ok &= sl_yaml_append(in, n->inputs[k].name, ref_text(&n->inputs[k].ref, l));
      ok &= sl_yaml_append(e, "inputs", in);
    }
    if (n->params) ok &= sl_yaml_append(e, "params", sl_yaml_clone(n->params));
    if (n->body) ok &= sl_yaml_append(e, "body", sl_spec_to_yaml(n->body));
    ok &= sl_yaml_append(nodes, n->id, e);
  }
  ok &= sl_yaml_append(root, "nodes", nodes);
  sl_yaml *outs = sl_yaml_new_map(l);
  for (size_t i = 0; i < s->n_outputs; i++)
    ok &= sl_yaml_append(outs, s->outputs[i].name, ref_text(&s->outputs[i].ref, l));
  ok &= sl_yaml_append(root, "outputs", outs);
  if (ok) return root;
  sl_yaml_free(root);
  return NULL;
}

sl_code sl_spec_render(FILE *f, const sl_spec *s, sl_error *err) {
  if (!s) return SL_OK;
  sl_yaml *y = sl_spec_to_yaml(s);
  if (!y) return sl_fail_nomem(err, "the resolved pipeline");
  sl_yaml_emit(f, y, 0);
  sl_yaml_free(y);
  return SL_OK;
}

char *sl_spec_render_string(const sl_spec *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  bool ok = sl_spec_render(f, s, NULL) == SL_OK;
  if (fclose(f) != 0 || !ok) {
    free(buf);
    return NULL;
  }
  return buf;
}
