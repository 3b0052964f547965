/* Pipeline templates (use:), iterate nodes, recursion, render round trips. */
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

static void assert_ref(const sl_ref *r, const char *node_id, const char *port) {
  assert_string_equal(r->node, node_id);
  assert_string_equal(r->port, port);
}

static char *render_str(const sl_spec *s) { return sl_spec_render_string(s); }

/* render -> parse -> emit gives the same text */
static void assert_render_round_trip(const sl_spec *s) {
  char *a = render_str(s);
  sl_error e;
  sl_error_clear(&e);
  sl_yaml *y = NULL;
  assert_int_equal(sl_yaml_load_string(a, strlen(a), "render", &y, &e), SL_OK);
  char *b = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&b, &n);
  sl_yaml_emit(f, y, 0);
  fclose(f);
  assert_string_equal(a, b);
  sl_yaml_free(y);
  free(a);
  free(b);
}

static int setup(void **state) {
  (void)state;
  if (temp_dir_setup("sl_pipe_tpl")) return -1;
  char p[600];
  dir_path("t", p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  /* t/inner.yaml: one input, two nodes, an output and a passthrough output */
  write_file("t/inner.yaml",
             "pipeline: inner\n"
             "params:\n"
             "  k: {type: int, default: 1}\n"
             "inputs: [x]\n"
             "nodes:\n"
             "  n1:\n"
             "    type: scale\n"
             "    inputs: {in: inputs.x}\n"
             "    params: {k: \"${k}\"}\n"
             "  n2:\n"
             "    type: neg\n"
             "    inputs: {in: n1.out}\n"
             "outputs:\n"
             "  y: n2.out\n"
             "  same: inputs.x\n");
  /* t/outer.yaml: uses inner.yaml (relative to t/) */
  write_file("t/outer.yaml",
             "pipeline: outer\n"
             "params:\n"
             "  path: {type: path, required: true, doc: \"data file\"}\n"
             "  k: {type: int, default: 2}\n"
             "nodes:\n"
             "  src:\n"
             "    type: source\n"
             "    params: {path: \"${path}\"}\n"
             "  mid:\n"
             "    use: inner.yaml\n"
             "    params: {k: \"${k}\"}\n"
             "    inputs: {x: src.frames}\n"
             "outputs:\n"
             "  frames: mid.y\n"
             "  raw: mid.same\n");
  return 0;
}

static void test_nested_templates(void **state) {
  (void)state;
  write_file("main.yaml",
             "pipeline: main\n"
             "params:\n"
             "  file: {type: path, default: a.h5}\n"
             "nodes:\n"
             "  det:\n"
             "    use: t/outer.yaml\n"
             "    params: {path: \"${file}\", k: 5}\n"
             "  post:\n"
             "    use: t/inner.yaml\n"
             "    inputs: {x: det.frames}\n"
             "  sink:\n"
             "    type: sink\n"
             "    inputs: {a: post.y, b: det.raw, c: post.same}\n"
             "outputs:\n"
             "  out: post.y\n"
             "  raw: det.raw\n");
  sl_spec *s = load_file_ok("main.yaml", NULL, 0);
  assert_int_equal(s->n_nodes, 6);
  assert_string_equal(s->nodes[0].id, "det/src");
  assert_string_equal(s->nodes[1].id, "det/mid/n1");
  assert_string_equal(s->nodes[2].id, "det/mid/n2");
  assert_string_equal(s->nodes[3].id, "post/n1");
  assert_string_equal(s->nodes[4].id, "post/n2");
  assert_string_equal(s->nodes[5].id, "sink");
  /* params bound through two levels */
  /* a relative path is resolved against the file it was written in */
  const char *path = sl_yaml_get(node(s, "det/src")->params, "path")->scalar;
  assert_true(path[0] == '/');
  assert_non_null(strstr(path, "/a.h5"));
  assert_string_equal(strrchr(path, '/'), "/a.h5");
  assert_string_equal(sl_yaml_get(node(s, "det/mid/n1")->params, "k")->scalar, "5");
  assert_string_equal(sl_yaml_get(node(s, "post/n1")->params, "k")->scalar, "1");
  /* internal refs and inputs bindings rewritten */
  assert_ref(&node(s, "det/mid/n1")->inputs[0].ref, "det/src", "frames");
  assert_ref(&node(s, "det/mid/n2")->inputs[0].ref, "det/mid/n1", "out");
  assert_ref(&node(s, "post/n1")->inputs[0].ref, "det/mid/n2", "out");
  const sl_node_spec *sink = node(s, "sink");
  assert_ref(&sink->inputs[0].ref, "post/n2", "out");
  assert_ref(&sink->inputs[1].ref, "det/src", "frames"); /* passthrough of a passthrough */
  assert_ref(&sink->inputs[2].ref, "det/mid/n2", "out");
  assert_int_equal(sink->inputs[0].ref.loc.line, 13); /* the user's text */
  assert_ref(&s->outputs[0].ref, "post/n2", "out");
  assert_ref(&s->outputs[1].ref, "det/src", "frames");
  /* every file read */
  assert_int_equal(s->n_sources, 3);
  assert_non_null(strstr(s->sources[0], "main.yaml"));
  assert_non_null(strstr(s->sources[1], "t/outer.yaml"));
  assert_non_null(strstr(s->sources[2], "t/inner.yaml"));
  assert_render_round_trip(s);
  char *r = render_str(s);
  assert_non_null(strstr(r, "  det/mid/n1:\n    type: scale\n    inputs:\n      in: det/src.frames\n"
                            "    params:\n      k: 5\n"));
  free(r);
  sl_spec_free(s);
}

static void test_template_errors(void **state) {
  (void)state;
  /* missing template file: at the use: line, with the resolved path */
  write_file("m1.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/nothere.yaml\noutputs: {o: a.x}\n");
  load_file_err("m1.yaml", NULL, 0, SL_ERR_PIPELINE, "m1.yaml", 4, 10, "t/nothere.yaml");
  /* unknown template param: did you mean */
  write_file("m2.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/outer.yaml\n"
                        "    params: {pth: x}\noutputs: {o: a.frames}\n");
  load_file_err("m2.yaml", NULL, 0, SL_ERR_PIPELINE, "m2.yaml", 5, 14, "did you mean 'path'");
  /* required template param not bound: at the use: line, names it and its doc */
  write_file("m3.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/outer.yaml\noutputs: {o: a.frames}\n");
  load_file_err("m3.yaml", NULL, 0, SL_ERR_PIPELINE, "m3.yaml", 4, 10, "'path' (data file)");
  /* wrong type of a bound param: at the binding */
  write_file("m4.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/outer.yaml\n"
                        "    params: {path: x, k: [1]}\noutputs: {o: a.frames}\n");
  load_file_err("m4.yaml", NULL, 0, SL_ERR_PIPELINE, "m4.yaml", 5, 26, "expects an integer");
  /* reference to a template output that does not exist */
  write_file("m5.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/outer.yaml\n"
                        "    params: {path: x}\noutputs:\n  o: a.frame\n");
  load_file_err("m5.yaml", NULL, 0, SL_ERR_PIPELINE, "m5.yaml", 7, 6, "did you mean 'frames'");
  /* template input not bound */
  write_file("m6.yaml", "pipeline: m\nnodes:\n  a:\n    use: t/inner.yaml\noutputs: {o: a.y}\n");
  load_file_err("m6.yaml", NULL, 0, SL_ERR_PIPELINE, "m6.yaml", 4, 10, "needs input 'x'");
  /* binding of an input the template does not have */
  write_file("m7.yaml", "pipeline: m\nnodes:\n  s: {type: t}\n  a:\n    use: t/inner.yaml\n"
                        "    inputs: {x: s.o, xx: s.o}\noutputs: {o: a.y}\n");
  load_file_err("m7.yaml", NULL, 0, SL_ERR_PIPELINE, "m7.yaml", 6, 22, "has no input 'xx'");
  /* bad binding ref in the outer file */
  write_file("m8.yaml", "pipeline: m\nnodes:\n  s: {type: t}\n  a:\n    use: t/inner.yaml\n"
                        "    inputs: {x: ss.o}\noutputs: {o: a.y}\n");
  load_file_err("m8.yaml", NULL, 0, SL_ERR_PIPELINE, "m8.yaml", 6, 17, "did you mean 's'");
  /* an error inside a template is located in the template */
  write_file("t/broken.yaml", "pipeline: b\nnodes:\n  n: {type: t, prams: {}}\noutputs: {o: n.x}\n");
  write_file("m9.yaml", "pipeline: m\nnodes:\n  a: {use: t/broken.yaml}\noutputs: {o: a.o}\n");
  load_file_err("m9.yaml", NULL, 0, SL_ERR_PIPELINE, "t/broken.yaml", 3, 16, "did you mean 'params'");
  /* use: path from a param */
  write_file("m10.yaml", "pipeline: m\nparams:\n  tpl: {type: path, default: t/inner.yaml}\n"
                         "nodes:\n  s: {type: t}\n  a:\n    use: \"${tpl}\"\n"
                         "    inputs: {x: s.o}\noutputs: {o: a.y}\n");
  sl_spec *s = load_file_ok("m10.yaml", NULL, 0);
  assert_string_equal(s->nodes[1].id, "a/n1");
  sl_spec_free(s);
  sl_setting set = {"tpl", "t/none.yaml"};
  /* The bad value came from the command line: the error is located there,
   * not at the `use:` line it was substituted into. */
  load_file_err("m10.yaml", &set, 1, SL_ERR_PIPELINE, NULL, 1, 1, "t/none.yaml");
}

static void test_recursion(void **state) {
  (void)state;
  write_file("self.yaml", "pipeline: self\nnodes:\n  a:\n    use: self.yaml\noutputs: {o: a.x}\n");
  load_file_err("self.yaml", NULL, 0, SL_ERR_PIPELINE, "self.yaml", 4, 10, "template recursion");
  /* indirect: r1 -> t/r2 -> t/r3 -> t/r2 */
  write_file("r1.yaml", "pipeline: r1\nnodes:\n  a: {use: t/r2.yaml}\noutputs: {o: a.o}\n");
  write_file("t/r2.yaml", "pipeline: r2\nnodes:\n  b: {use: r3.yaml}\noutputs: {o: b.o}\n");
  write_file("t/r3.yaml",
             "pipeline: r3\nnodes:\n  c: {type: t}\n  d:\n    use: r2.yaml\noutputs: {o: c.o}\n");
  char p[600];
  snprintf(p, sizeof p, "%s/r1.yaml", g_dir);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  assert_int_equal(sl_spec_load(p, NULL, 0, &s, &e), SL_ERR_PIPELINE);
  assert_non_null(strstr(e.file, "t/r3.yaml"));
  assert_int_equal(e.line, 5);
  char chain[900];
  snprintf(chain, sizeof chain, "template recursion: %s/t/r2.yaml -> %s/t/r3.yaml -> %s/t/r2.yaml",
           g_dir, g_dir, g_dir);
  assert_string_equal(e.msg, chain);
  assert_null(s);
}

static void test_depth_limit(void **state) {
  (void)state;
  /* d0 -> d1 -> ... -> d19: deeper than 16 levels is an error, 10 levels are fine */
  char name[64], text[256];
  for (int i = 0; i < 20; i++) {
    snprintf(name, sizeof name, "d%d.yaml", i);
    snprintf(text, sizeof text, "pipeline: d%d\nnodes:\n  n:\n    use: d%d.yaml\noutputs: {o: n.o}\n",
             i, i + 1);
    write_file(name, text);
  }
  load_file_err("d0.yaml", NULL, 0, SL_ERR_PIPELINE, "d15.yaml", 4, 10, "deeper than 16");
  write_file("d10.yaml", "pipeline: leaf\nnodes:\n  x: {type: t}\noutputs: {o: x.o}\n");
  sl_spec *s = load_file_ok("d0.yaml", NULL, 0);
  assert_int_equal(s->n_nodes, 1);
  assert_string_equal(s->nodes[0].id, "n/n/n/n/n/n/n/n/n/n/x");
  assert_string_equal(s->outputs[0].ref.node, "n/n/n/n/n/n/n/n/n/n/x");
  assert_int_equal(s->n_sources, 11);
  sl_spec_free(s);
}

static void test_iterate(void **state) {
  (void)state;
  sl_spec *s = load_source_file("tests/data/pipelines/loop.yaml", (sl_setting){"n", "5"});
  const sl_node_spec *loop = node(s, "loop");
  assert_string_equal(loop->type, "iterate");
  assert_int_equal(loop->times, 5);
  assert_int_equal(loop->n_carry, 1);
  assert_string_equal(loop->carry[0], "x");
  assert_int_equal(loop->n_inputs, 1);
  assert_string_equal(loop->inputs[0].name, "x");
  assert_ref(&loop->inputs[0].ref, "init", "out");
  assert_non_null(loop->body);
  assert_string_equal(loop->body->name, "axpb");
  assert_int_equal(loop->body->n_inputs, 1);
  assert_string_equal(sl_spec_value(loop->body, "a")->scalar, "0.5");
  assert_string_equal(sl_spec_value(loop->body, "b")->scalar, "0.0");
  assert_string_equal(sl_yaml_get(loop->body->nodes[0].params, "a")->scalar, "0.5");
  assert_ref(&loop->body->nodes[0].inputs[0].ref, "inputs", "x");
  assert_ref(&s->outputs[0].ref, "loop", "x");
  assert_int_equal(s->n_sources, 2);
  assert_render_round_trip(s);
  char *r = render_str(s);
  assert_non_null(strstr(r, "  loop:\n    type: iterate\n    times: 5\n    carry: [x]\n"
                            "    inputs:\n      x: init.out\n    params:\n      a: 0.5\n"
                            "    body:\n      pipeline: axpb\n"));
  free(r);
  sl_spec_free(s);

  write_file("body.yaml", "pipeline: body\ninputs: [x, y]\nnodes:\n  s:\n    type: add\n"
                          "    inputs: {a: inputs.x, b: inputs.y}\noutputs:\n  x: s.out\n");
  const char *head = "pipeline: it\nnodes:\n  i: {type: c}\n  l:\n    iterate: body.yaml\n";
  char text[800];
  snprintf(text, sizeof text, "%s    times: -1\n    inputs: {x: i.o, y: i.o}\noutputs: {o: l.x}\n",
           head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 6, 12, "integer >= 0");
  snprintf(text, sizeof text, "%s    times: many\n    inputs: {x: i.o, y: i.o}\noutputs: {o: l.x}\n",
           head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 6, 12, "found 'many'");
  snprintf(text, sizeof text, "%s    inputs: {x: i.o, y: i.o}\noutputs: {o: l.x}\n", head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 4, 3, "needs times:");
  snprintf(text, sizeof text,
           "%s    times: 2\n    inputs: {x: i.o, y: i.o}\n    carry: [x, y]\noutputs: {o: l.x}\n",
           head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 8, 16, "an input but not an output");
  snprintf(text, sizeof text, "%s    times: 2\n    inputs: {x: i.o}\noutputs: {o: l.x}\n", head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 5, 14, "needs input 'y'");
  snprintf(text, sizeof text,
           "%s    times: 2\n    inputs: {x: i.o, y: i.o, z: i.o}\noutputs: {o: l.x}\n", head);
  write_file("it.yaml", text);
  load_file_err("it.yaml", NULL, 0, SL_ERR_PIPELINE, "it.yaml", 7, 30, "has no input 'z'");
  snprintf(text, sizeof text,
           "%s    times: 0\n    inputs: {x: i.o, y: i.o}\n    carry: [x]\noutputs: {o: l.x}\n",
           head);
  write_file("it.yaml", text);
  s = load_file_ok("it.yaml", NULL, 0);
  assert_int_equal(s->nodes[1].times, 0);
  assert_null(s->nodes[1].params);
  sl_spec_free(s);
}

static void test_load_string(void **state) {
  (void)state;
  const char *text = "pipeline: s\nnodes:\n  a: {use: no/such/template.yaml}\noutputs: {o: a.x}\n";
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  assert_int_equal(sl_spec_load_string(text, strlen(text), "<mem>", NULL, 0, &s, &e),
                   SL_ERR_PIPELINE);
  assert_string_equal(e.file, "<mem>");
  assert_int_equal(e.line, 3);
  assert_non_null(strstr(e.msg, "./no/such/template.yaml"));
  const char *ok = "pipeline: s\nparams:\n  n: {type: int, default: 1}\n"
                   "nodes:\n  a: {type: t, params: {n: \"${n}\"}}\noutputs: {o: a.x}\n";
  sl_setting set = {"n", "9"};
  sl_error_clear(&e);
  assert_int_equal(sl_spec_load_string(ok, strlen(ok), "<mem>", &set, 1, &s, &e), SL_OK);
  assert_string_equal(sl_yaml_get(s->nodes[0].params, "n")->scalar, "9");
  assert_render_round_trip(s);
  sl_spec_free(s);
}

static void test_render_example(void **state) {
  (void)state;
  sl_spec *s = load_source_file("tests/data/pipelines/virtual_image.yaml",
                                (sl_setting){"input", "my file: #1.h5"});
  assert_render_round_trip(s);
  char *r = render_str(s);
  assert_non_null(strstr(r, "pipeline: virtual_image\n"
                            "description: \"Bright field and ADF\"\n"
                            "params:\n  input: \"/"));
  assert_non_null(strstr(r, "/my file: #1.h5\"\n  scan_shape: [32, 32]\n"
                            "  dose: 1000\n"));
  assert_non_null(strstr(r, "outputs:\n  bf: bf.image\n  adf: adf.image\n"));
  /* the rendered tree holds the resolved values */
  sl_yaml *y = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_yaml_load_string(r, strlen(r), "r", &y, &e), SL_OK);
  const sl_yaml *read = sl_yaml_get(sl_yaml_get(y, "nodes"), "det/read");
  const char *rp = sl_yaml_get(sl_yaml_get(read, "params"), "path")->scalar;
  assert_true(rp[0] == '/');
  assert_string_equal(strrchr(rp, '/'), "/my file: #1.h5");
  sl_yaml_free(y);
  free(r);
  sl_spec_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nested_templates), cmocka_unit_test(test_template_errors),
      cmocka_unit_test(test_recursion), cmocka_unit_test(test_depth_limit),        cmocka_unit_test(test_iterate),
      cmocka_unit_test(test_load_string),      cmocka_unit_test(test_render_example),
  };
  return cmocka_run_group_tests(tests, setup, temp_dir_teardown);
}
