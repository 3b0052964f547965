/* Pipeline spec: structure checks, params, --set, ${} substitution. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/pipeline/spec.h"
#include "tests/unit/test_pipeline_files.h"

static sl_spec *load_ok_sets(const char *text, const sl_setting *sets, size_t n) {
  write_file("p.yaml", text);
  return load_file_ok("p.yaml", sets, n);
}

static sl_spec *load_ok(const char *text) { return load_ok_sets(text, NULL, 0); }

/* Loads text as p.yaml, expects `code` at `line` (col too when nonzero) in p.yaml
 * with `needle` in the message. */
static void load_err_sets(const char *text, const sl_setting *sets, size_t n, sl_code code,
                          int line, int col, const char *needle) {
  write_file("p.yaml", text);
  load_file_err("p.yaml", sets, n, code, NULL, line, col, needle);
}

static void load_err(const char *text, sl_code code, int line, int col, const char *needle) {
  load_err_sets(text, NULL, 0, code, line, col, needle);
}

static const char *param(const sl_node_spec *n, const char *key) {
  const sl_yaml *v = sl_yaml_get(n->params, key);
  assert_non_null(v);
  assert_int_equal(v->kind, SL_Y_SCALAR);
  return v->scalar;
}

static int setup(void **state) { return temp_dir_setup("sl_pipe_spec"); }

#define MINI_BODY "nodes:\n  a: {type: t}\noutputs:\n  o: a.out\n"
#define MINI "pipeline: p\n" MINI_BODY

static void test_minimal(void **state) {
  (void)state;
  sl_spec *s = load_ok(MINI);
  assert_string_equal(s->name, "p");
  assert_null(s->description);
  assert_int_equal(s->n_nodes, 1);
  assert_string_equal(s->nodes[0].id, "a");
  assert_string_equal(s->nodes[0].type, "t");
  assert_int_equal(s->nodes[0].loc.line, 3);
  assert_null(s->nodes[0].params);
  assert_null(s->nodes[0].body);
  assert_int_equal(s->n_outputs, 1);
  assert_string_equal(s->outputs[0].name, "o");
  assert_string_equal(s->outputs[0].ref.node, "a");
  assert_string_equal(s->outputs[0].ref.port, "out");
  assert_int_equal(s->outputs[0].ref.loc.line, 5);
  assert_int_equal(s->n_sources, 1);
  assert_non_null(strstr(s->sources[0], "p.yaml"));
  sl_spec_free(s);
}

static void test_example_file(void **state) {
  (void)state;
  sl_spec *s = load_source_file("tests/data/pipelines/virtual_image.yaml",
                                (sl_setting){"input", "data/master.h5"});
  assert_string_equal(s->description, "Bright field and ADF");
  assert_int_equal(s->n_nodes, 4);
  assert_string_equal(s->nodes[0].id, "det/read");
  assert_string_equal(s->nodes[1].id, "det/mask");
  /* a --set path is relative to the current directory: resolved to absolute */
  char expect[4200], cwd[4096];
  assert_non_null(getcwd(cwd, sizeof cwd));
  snprintf(expect, sizeof expect, "%s/data/master.h5", cwd);
  assert_string_equal(param(&s->nodes[0], "path"), expect);
  assert_string_equal(param(&s->nodes[0], "chunk_rows"), "64");
  const sl_node_spec *bf = node(s, "bf");
  assert_string_equal(bf->inputs[0].name, "frames");
  assert_string_equal(bf->inputs[0].ref.node, "det/mask");
  assert_string_equal(bf->inputs[0].ref.port, "frames");
  const sl_yaml *scan = sl_yaml_get(bf->params, "scan");
  assert_int_equal(scan->kind, SL_Y_SEQ);
  assert_string_equal(scan->items[1]->scalar, "32");
  assert_string_equal(param(node(s, "adf"), "dose"), "1000");
  assert_false(sl_yaml_get(node(s, "adf")->params, "dose")->quoted);
  assert_int_equal(s->n_sources, 2);
  assert_non_null(strstr(s->sources[1], "templates/detector_input.yaml"));
  sl_spec_free(s);
}

static void test_structure_errors(void **state) {
  (void)state;
  load_err("pipeline: p\nnodez: {}\n", SL_ERR_PIPELINE, 2, 1, "did you mean 'nodes'");
  load_err("[1, 2]\n", SL_ERR_PIPELINE, 1, 1, "must be a mapping");
  load_err("description: x\nnodes: {a: {type: t}}\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 1, 1,
           "missing 'pipeline: NAME'");
  load_err("pipeline: p\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 1, 1, "missing 'nodes:'");
  load_err("pipeline: p\nnodes: {a: {type: t}}\n", SL_ERR_PIPELINE, 1, 1, "missing 'outputs:'");
  load_err("pipeline: p\nnodes: {}\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 2, 8, "empty");
  load_err("pipeline: p\nnodes:\n  a:\n    tpye: t\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 4,
           5, "did you mean 'type'");
  load_err("pipeline: p\nnodes:\n  a:\n    inputs: {}\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 3,
           3, "exactly one of type:");
  load_err("pipeline: p\nnodes:\n  a: {type: t, use: x.yaml}\noutputs: {o: a.x}\n",
           SL_ERR_PIPELINE, 3, 3, "found 2");
  load_err("pipeline: p\nnodes:\n  a: t\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 3, 6,
           "must be a mapping");
  load_err("pipeline: p\nnodes:\n  a.b: {type: t}\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 3, 3,
           "invalid node id");
  load_err("pipeline: p\nnodes:\n  inputs: {type: t}\noutputs: {o: a.x}\n", SL_ERR_PIPELINE, 3,
           3, "reserved");
  load_err("pipeline: p\nnodes:\n  a: {type: t, times: 3}\noutputs: {o: a.x}\n",
           SL_ERR_PIPELINE, 3, 16, "only allowed on iterate");
  /* references */
  load_err("pipeline: p\nnodes:\n  src: {type: t}\n  b:\n    type: t\n"
           "    inputs: {x: srcc.out}\noutputs: {o: b.x}\n",
           SL_ERR_PIPELINE, 6, 17, "did you mean 'src'");
  load_err("pipeline: p\nnodes:\n  src: {type: t}\n  b:\n    type: t\n"
           "    inputs: {x: src}\noutputs: {o: b.x}\n",
           SL_ERR_PIPELINE, 6, 17, "expected a reference 'node.port'");
  load_err("pipeline: p\nnodes:\n  src: {type: t}\noutputs:\n  o: srcc.x\n", SL_ERR_PIPELINE,
           5, 6, "did you mean 'src'");
  load_err("pipeline: p\nnodes:\n  src: {type: t}\noutputs:\n  o: [a]\n", SL_ERR_PIPELINE, 5,
           6, "expected a reference");
  load_err("pipeline: p\nnodes:\n  b:\n    type: t\n    inputs: {x: inputs.y}\noutputs: {o: b.x}\n",
           SL_ERR_PIPELINE, 5, 17, "declares no inputs");
  load_err("pipeline: p\ninputs: [xx]\nnodes:\n  b:\n    type: t\n    inputs: {x: inputs.xy}\n"
           "outputs: {o: b.x}\n",
           SL_ERR_PIPELINE, 6, 17, "did you mean 'xx'");
  load_err("pipeline: p\ninputs: [x, x]\nnodes: {b: {type: t}}\noutputs: {o: b.x}\n",
           SL_ERR_PIPELINE, 2, 13, "declared twice");
  /* YAML errors surface with their location */
  load_err("pipeline: p\nnodes:\n  a: {type: t}\n  a: {type: u}\noutputs: {o: a.x}\n",
           SL_ERR_PARSE, 4, 3, "duplicate key 'a'");
  load_err("", SL_ERR_PARSE, 1, 1, "empty pipeline file");
}

static void test_param_decl_errors(void **state) {
  (void)state;
  load_err("pipeline: p\nparams:\n  n: {type: flaot, default: 1}\n" MINI_BODY,
           SL_ERR_PIPELINE, 3, 13, "did you mean 'float'");
  load_err("pipeline: p\nparams:\n  n: {type: int}\n" MINI_BODY, SL_ERR_PIPELINE, 3, 3,
           "either default: VALUE or required: true");
  load_err("pipeline: p\nparams:\n  n: {type: int, required: true, default: 2}\n" MINI_BODY,
           SL_ERR_PIPELINE, 3, 43, "both default: and required");
  load_err("pipeline: p\nparams:\n  n: {type: int, defualt: 2}\n" MINI_BODY, SL_ERR_PIPELINE, 3,
           18, "did you mean 'default'");
  load_err("pipeline: p\nparams:\n  n: {type: int, default: 2.5}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 27, "expects an integer");
  load_err("pipeline: p\nparams:\n  n: {type: int, default: \"2\"}\n" MINI_BODY,
           SL_ERR_PIPELINE, 3, 27, "expects an integer");
  load_err("pipeline: p\nparams:\n  s: {type: shape, default: [3, -1]}\n" MINI_BODY,
           SL_ERR_PIPELINE, 3, 33, "non-negative integer");
  load_err("pipeline: p\nparams:\n  s: {type: shape, default: 3}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 29, "expects a sequence");
  load_err("pipeline: p\nparams:\n  b: {type: bool, default: yes}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 28, "true or false");
  load_err("pipeline: p\nparams:\n  l: {type: list, default: x}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 28, "(list)");
  load_err("pipeline: p\nparams:\n  p: {type: path, default: [x]}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 28, "(path)");
  load_err("pipeline: p\nparams:\n  n: 3\n" MINI_BODY, SL_ERR_PIPELINE, 3, 6,
           "declared as a mapping");
  load_err("pipeline: p\nparams:\n  9n: {type: int, default: 1}\n" MINI_BODY, SL_ERR_PIPELINE,
           3, 3, "invalid parameter name");
}

static void test_required_and_set(void **state) {
  (void)state;
  const char *text =
      "pipeline: p\n"
      "params:\n"
      "  input: {type: path, required: true, doc: \"detector master file\"}\n"
      "  shape: {type: shape, default: [32, 32]}\n"
      "  dose: {type: float, default: 1000}\n"
      "  flag: {type: bool, default: false}\n"
      "  name: {type: string, default: run}\n"
      "nodes:\n"
      "  a:\n"
      "    type: t\n"
      "    params: {p: \"${input}\", s: \"${shape}\", d: \"${dose}\", f: \"${flag}\", "
      "n: \"${name}\"}\n"
      "outputs: {o: a.x}\n";
  /* required missing: names the param, its doc, and --set */
  write_file("p.yaml", text);
  char p[600];
  snprintf(p, sizeof p, "%s/p.yaml", g_dir);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  assert_int_equal(sl_spec_load(p, NULL, 0, &s, &e), SL_ERR_PIPELINE);
  assert_int_equal(e.line, 3);
  assert_non_null(strstr(e.msg, "'input'"));
  assert_non_null(strstr(e.msg, "detector master file"));
  assert_non_null(strstr(e.msg, "--set input=..."));

  sl_setting sets[] = {{"input", "a b.h5"},
                       {"shape", "[16,8]"},
                       {"dose", "2.5"},
                       {"flag", "true"},
                       {"name", "[not a list]"}};
  s = load_ok_sets(text, sets, 5);
  const sl_node_spec *a = &s->nodes[0];
  char expect_ab[4200], cwd_ab[4096];
  assert_non_null(getcwd(cwd_ab, sizeof cwd_ab));
  snprintf(expect_ab, sizeof expect_ab, "%s/a b.h5", cwd_ab);
  assert_string_equal(param(a, "p"), expect_ab);
  assert_true(sl_yaml_get(a->params, "p")->quoted);
  const sl_yaml *sh = sl_yaml_get(a->params, "s");
  assert_int_equal(sh->kind, SL_Y_SEQ);
  assert_int_equal(sh->n, 2);
  assert_string_equal(sh->items[0]->scalar, "16");
  assert_string_equal(sh->items[1]->scalar, "8");
  assert_string_equal(param(a, "d"), "2.5");
  assert_false(sl_yaml_get(a->params, "d")->quoted);
  assert_string_equal(param(a, "f"), "true");
  assert_string_equal(param(a, "n"), "[not a list]");
  assert_string_equal(sl_spec_value(s, "dose")->scalar, "2.5");
  assert_null(sl_spec_value(s, "nope"));
  sl_spec_free(s);

  /* unknown --set name: did you mean */
  sl_setting bad[] = {{"input", "x"}, {"doze", "3"}};
  load_err_sets(text, bad, 2, SL_ERR_PIPELINE, 0, 0, "did you mean 'dose'");
  /* --set value of the wrong type */
  sl_setting badtype[] = {{"input", "x"}, {"shape", "16"}};
  load_err_sets(text, badtype, 2, SL_ERR_PIPELINE, 1, 1, "expects a sequence");
  sl_setting badflow[] = {{"input", "x"}, {"shape", "[16,"}};
  write_file("p.yaml", text);
  sl_error_clear(&e);
  assert_int_equal(sl_spec_load(p, badflow, 2, &s, &e), SL_ERR_PARSE);
  assert_string_equal(e.file, "--set shape");
}

static void test_substitution_forms(void **state) {
  (void)state;
  const char *text =
      "pipeline: p\n"
      "params:\n"
      "  a: {type: string, default: A}\n"
      "  e: {type: string, default: \"\"}\n"
      "  n: {type: int, default: 7}\n"
      "  l: {type: list, default: [1, two, [3]]}\n"
      "nodes:\n"
      "  x:\n"
      "    type: \"${a}_type\"\n"
      "    params:\n"
      "      plain: ${a}\n"
      "      splice: \"pre-${a}-${n}-post\"\n"
      "      dollar: \"cost $$5 and $$${a} and $x\"\n"
      "      def_unset: \"${zz:-fallback}\"\n"
      "      def_empty: \"${e:-fb}\"\n"
      "      def_set: \"${a:-fb}\"\n"
      "      req_set: \"${a:?a is needed}\"\n"
      "      list: \"${l}\"\n"
      "      list_text: \"l=${l}\"\n"
      "      nested: {deep: [\"${n}\"]}\n"
      "      int: \"${n}\"\n"
      "      keep: \"${n}x\"\n"
      "outputs:\n"
      "  o: \"x.${a}\"\n";
  sl_spec *s = load_ok(text);
  const sl_node_spec *x = &s->nodes[0];
  assert_string_equal(x->type, "A_type");
  assert_string_equal(param(x, "plain"), "A");
  assert_string_equal(param(x, "splice"), "pre-A-7-post");
  assert_string_equal(param(x, "dollar"), "cost $5 and $A and $x");
  assert_string_equal(param(x, "def_unset"), "fallback");
  assert_string_equal(param(x, "def_empty"), "fb");
  assert_string_equal(param(x, "def_set"), "A");
  assert_string_equal(param(x, "req_set"), "A");
  const sl_yaml *l = sl_yaml_get(x->params, "list");
  assert_int_equal(l->kind, SL_Y_SEQ);
  assert_int_equal(l->n, 3);
  assert_string_equal(l->items[1]->scalar, "two");
  assert_int_equal(l->items[2]->kind, SL_Y_SEQ);
  assert_int_equal(l->loc.line, 18);
  assert_string_equal(param(x, "list_text"), "l=[1, two, [3]]");
  assert_string_equal(sl_yaml_get(sl_yaml_get(x->params, "nested"), "deep")->items[0]->scalar,
                      "7");
  assert_string_equal(param(x, "int"), "7");
  assert_false(sl_yaml_get(x->params, "int")->quoted);
  assert_true(sl_yaml_get(x->params, "keep")->quoted);
  assert_string_equal(s->outputs[0].ref.port, "A");
  sl_spec_free(s);
}

static void test_substitution_errors(void **state) {
  (void)state;
  const char *head = "pipeline: p\nparams:\n  dose: {type: float, default: 1}\n"
                     "  e: {type: string, default: ''}\nnodes:\n  a:\n    type: t\n";
  char text[1024];
  snprintf(text, sizeof text, "%s    params: {d: \"${dosee}\"}\noutputs: {o: a.x}\n", head);
  load_err(text, SL_ERR_PIPELINE, 8, 18, "did you mean 'dose'");
  snprintf(text, sizeof text, "%s    params: {d: \"x ${dose\"}\noutputs: {o: a.x}\n", head);
  load_err(text, SL_ERR_PARSE, 8, 20, "unterminated '${'");
  snprintf(text, sizeof text, "%s    params: {d: \"${e:?e must be set}\"}\noutputs: {o: a.x}\n",
           head);
  load_err(text, SL_ERR_PIPELINE, 8, 18, "e must be set");
  snprintf(text, sizeof text, "%s    params: {d: \"${zz:?need zz}\"}\noutputs: {o: a.x}\n",
           head);
  load_err(text, SL_ERR_PIPELINE, 8, 18, "zz: need zz");
  snprintf(text, sizeof text, "%s    params: {d: \"${}\"}\noutputs: {o: a.x}\n", head);
  load_err(text, SL_ERR_PARSE, 8, 18, "invalid substitution");
  snprintf(text, sizeof text, "%s    params: {d: \"${dose-1}\"}\noutputs: {o: a.x}\n", head);
  load_err(text, SL_ERR_PARSE, 8, 18, "invalid substitution");
  /* substitution in outputs, with location */
  snprintf(text, sizeof text, "%soutputs:\n  o: \"a.${nope}\"\n", head);
  load_err(text, SL_ERR_PIPELINE, 9, 9, "unknown parameter 'nope'");
  /* substitution in a reference */
  snprintf(text, sizeof text, "%s    inputs: {x: \"${e}.y\"}\noutputs: {o: a.x}\n", head);
  load_err(text, SL_ERR_PIPELINE, 8, 17, "expected a reference");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal),
      cmocka_unit_test(test_example_file),
      cmocka_unit_test(test_structure_errors),
      cmocka_unit_test(test_param_decl_errors),
      cmocka_unit_test(test_required_and_set),
      cmocka_unit_test(test_substitution_forms),
      cmocka_unit_test(test_substitution_errors),
  };
  return cmocka_run_group_tests(tests, setup, temp_dir_teardown);
}
