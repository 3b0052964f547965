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
  char *buf = sl_xcalloc(n, 1);
  snprintf(buf, n, "%s.%s", r->node, r->port);
  sl_yaml *y = text(buf, l);
  free(buf);
  return y;
}

sl_yaml *sl_spec_to_yaml(const sl_spec *s) {
  sl_loc l = {sl_intern(s->file ? s->file : "<render>"), 1, 1};
  sl_yaml *root = sl_yaml_new_map(l);
  sl_yaml_append(root, "pipeline", text(s->name ? s->name : "", l));
  if (s->description) {
    sl_yaml *d = text(s->description, l);
    d->quoted = true;
    sl_yaml_append(root, "description", d);
  }
  if (s->n_params) {
    sl_yaml *p = sl_yaml_new_map(l);
    for (size_t i = 0; i < s->n_params; i++) {
      const sl_yaml *v = s->values ? s->values[i] : NULL;
      sl_yaml_append(p, s->params[i].name, v ? sl_yaml_clone(v) : text("", l));
    }
    sl_yaml_append(root, "params", p);
  }
  if (s->n_inputs) {
    sl_yaml *in = sl_yaml_new_seq(l);
    for (size_t i = 0; i < s->n_inputs; i++) sl_yaml_append(in, NULL, text(s->inputs[i], l));
    sl_yaml_append(root, "inputs", in);
  }
  sl_yaml *nodes = sl_yaml_new_map(l);
  for (size_t i = 0; i < s->n_nodes; i++) {
    const sl_node_spec *n = &s->nodes[i];
    sl_yaml *e = sl_yaml_new_map(l);
    sl_yaml_append(e, "type", text(n->type, l));
    if (n->body) {
      char buf[32];
      snprintf(buf, sizeof buf, "%" PRId64, n->times);
      sl_yaml_append(e, "times", text(buf, l));
      if (n->n_carry) {
        sl_yaml *c = sl_yaml_new_seq(l);
        for (size_t k = 0; k < n->n_carry; k++) sl_yaml_append(c, NULL, text(n->carry[k], l));
        sl_yaml_append(e, "carry", c);
      }
      if (n->until) sl_yaml_append(e, "until", text(n->until, l));
    }
    if (n->n_inputs) {
      sl_yaml *in = sl_yaml_new_map(l);
      for (size_t k = 0; k < n->n_inputs; k++)
        sl_yaml_append(in, n->inputs[k].name, ref_text(&n->inputs[k].ref, l));
      sl_yaml_append(e, "inputs", in);
    }
    if (n->params) sl_yaml_append(e, "params", sl_yaml_clone(n->params));
    if (n->body) sl_yaml_append(e, "body", sl_spec_to_yaml(n->body));
    sl_yaml_append(nodes, n->id, e);
  }
  sl_yaml_append(root, "nodes", nodes);
  sl_yaml *outs = sl_yaml_new_map(l);
  for (size_t i = 0; i < s->n_outputs; i++)
    sl_yaml_append(outs, s->outputs[i].name, ref_text(&s->outputs[i].ref, l));
  sl_yaml_append(root, "outputs", outs);
  return root;
}

void sl_spec_render(FILE *f, const sl_spec *s) {
  if (!s) return;
  sl_yaml *y = sl_spec_to_yaml(s);
  sl_yaml_emit(f, y, 0);
  sl_yaml_free(y);
}

char *sl_spec_render_string(const sl_spec *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  sl_spec_render(f, s);
  fclose(f);
  return buf;
}
