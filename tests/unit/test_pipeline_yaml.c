/* YAML tree: locations, quoting, rejected constructs, emit round trips. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/pipeline/yaml_tree.h"

static sl_yaml *parse_ok(const char *text) {
  sl_error e;
  sl_error_clear(&e);
  sl_yaml *y = NULL;
  sl_code rc = sl_yaml_load_string(text, strlen(text), "t.yaml", &y, &e);
  if (rc) fprintf(stderr, "unexpected error: %s:%d:%d: %s\n", e.file, e.line, e.col, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_non_null(y);
  return y;
}

static void parse_err(const char *text, sl_code code, int line, int col, const char *needle) {
  sl_error e;
  sl_error_clear(&e);
  sl_yaml *y = NULL;
  sl_code rc = sl_yaml_load_string(text, strlen(text), "t.yaml", &y, &e);
  if (rc != code || e.line != line || (col && e.col != col) || !strstr(e.msg, needle))
    fprintf(stderr, "got rc=%d %s:%d:%d: %s\n", rc, e.file, e.line, e.col, e.msg);
  assert_int_equal(rc, code);
  assert_null(y);
  assert_string_equal(e.file, "t.yaml");
  assert_int_equal(e.line, line);
  if (col) assert_int_equal(e.col, col);
  assert_non_null(strstr(e.msg, needle));
}

static char *emit_str(const sl_yaml *y) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  sl_yaml_emit(f, y, 0);
  fclose(f);
  return buf;
}

static void test_locations(void **state) {
  (void)state;
  sl_yaml *y = parse_ok("a: 1\nb:\n  - x\n  - 'y'\nc: {d: \"e\"}\n");
  assert_int_equal(y->kind, SL_Y_MAP);
  assert_int_equal(y->n, 3);
  assert_string_equal(y->keys[1], "b");
  assert_int_equal(y->key_locs[1].line, 2);
  assert_int_equal(y->key_locs[1].col, 1);
  const sl_yaml *b = sl_yaml_get(y, "b");
  assert_int_equal(b->kind, SL_Y_SEQ);
  assert_int_equal(b->n, 2);
  assert_int_equal(b->items[0]->loc.line, 3);
  assert_int_equal(b->items[0]->loc.col, 5);
  assert_false(b->items[0]->quoted);
  assert_true(b->items[1]->quoted);
  assert_string_equal(b->items[1]->scalar, "y");
  const sl_yaml *c = sl_yaml_get(y, "c");
  assert_int_equal(c->loc.line, 5);
  assert_int_equal(c->key_locs[0].col, 5);
  assert_true(sl_yaml_get(c, "d")->quoted);
  assert_int_equal(sl_yaml_find(y, "c"), 2);
  assert_int_equal(sl_yaml_find(y, "zz"), -1);
  assert_null(sl_yaml_get(b, "x"));
  sl_yaml_free(y);
}

static void test_errors(void **state) {
  (void)state;
  parse_err("a: 1\nb: 2\na: 3\n", SL_ERR_PARSE, 3, 1, "duplicate key 'a'");
  parse_err("a: &x 1\nb: *x\n", SL_ERR_PARSE, 1, 4, "aliases are not supported");
  parse_err("a: 1\nb: *x\n", SL_ERR_PARSE, 2, 0, "");
  parse_err("a: 1\n---\nb: 2\n", SL_ERR_PARSE, 2, 1, "multiple YAML documents");
  parse_err("", SL_ERR_PARSE, 1, 1, "empty pipeline file");
  parse_err("# only a comment\n", SL_ERR_PARSE, 1, 1, "empty pipeline file");
  parse_err("a: 1\n? [x, y]\n: 2\n", SL_ERR_PARSE, 2, 3, "mapping keys must be");
  parse_err("a: [1, 2\nb: 3\n", SL_ERR_PARSE, 2, 0, "invalid YAML");
  parse_err("a:\n  b: 1\n c: 2\n", SL_ERR_PARSE, 3, 0, "invalid YAML");
  parse_err("a: \"x\\0y\"\n", SL_ERR_PARSE, 1, 4, "NUL");
}

static void test_depth_bound(void **state) {
  (void)state;
  char deep[400];
  memset(deep, '[', 200);
  memset(deep + 200, ']', 200);
  sl_error e;
  sl_error_clear(&e);
  sl_yaml *y = NULL;
  assert_int_equal(sl_yaml_load_string(deep, sizeof deep, "d", &y, &e), SL_ERR_PARSE);
  assert_non_null(strstr(e.msg, "nested deeper than 64"));
  assert_null(y);
  /* 60 levels are fine */
  char ok[120];
  memset(ok, '[', 60);
  memset(ok + 60, ']', 60);
  assert_int_equal(sl_yaml_load_string(ok, sizeof ok, "d", &y, &e), SL_OK);
  sl_yaml_free(y);
}

static void test_load_file(void **state) {
  (void)state;
  sl_error e;
  sl_error_clear(&e);
  sl_yaml *y = NULL;
  assert_int_equal(sl_yaml_load_file("/nonexistent/x.yaml", &y, &e), SL_ERR_IO);
  assert_string_equal(e.file, "/nonexistent/x.yaml");
  char path[600];
  snprintf(path, sizeof path, "%s/tests/data/pipelines/loop.yaml", getenv("SLUICE_SOURCE_DIR"));
  sl_error_clear(&e);
  assert_int_equal(sl_yaml_load_file(path, &y, &e), SL_OK);
  assert_string_equal(sl_yaml_get(y, "pipeline")->scalar, "loop");
  assert_string_equal(sl_yaml_get(y, "pipeline")->loc.file, path);
  sl_yaml_free(y);
}

/* Keys longer than a YAML parser takes as implicit keys (1024 characters)
 * are emitted as explicit keys ("? KEY" / ": VALUE"), with scalar, flow
 * and block values, plain and quoted (the fuzzer's find: a 1,300-character
 * key of quotes emitted implicitly did not parse back). */
static void test_emit_long_keys(void **state) {
  (void)state;
  char plain[1200], quoted[700];
  memset(plain, 'k', sizeof plain - 1), plain[sizeof plain - 1] = 0;
  memset(quoted, '"', sizeof quoted - 1), quoted[sizeof quoted - 1] = 0; /* 1,400 characters escaped */
  sl_yaml *y = sl_yaml_new_map((sl_loc){0});
  assert_non_null(y);
  assert_true(sl_yaml_append(y, plain, sl_yaml_new_scalar("v", (sl_loc){0})));
  sl_yaml *inner = sl_yaml_new_map((sl_loc){0});
  assert_true(sl_yaml_append(inner, "a", sl_yaml_new_scalar("1", (sl_loc){0})));
  assert_true(sl_yaml_append(inner, "b", sl_yaml_new_map((sl_loc){0})));
  assert_true(sl_yaml_append(y, quoted, inner));
  assert_true(sl_yaml_append(y, "short", sl_yaml_new_scalar("s", (sl_loc){0})));
  char *a = emit_str(y);
  assert_non_null(strstr(a, "? kkk"));
  sl_yaml *y2 = parse_ok(a);
  char *b = emit_str(y2);
  assert_string_equal(a, b);
  assert_string_equal(sl_yaml_get(y2, plain)->scalar, "v");
  assert_string_equal(sl_yaml_get(sl_yaml_get(y2, quoted), "a")->scalar, "1");
  assert_string_equal(sl_yaml_get(y2, "short")->scalar, "s");
  free(a), free(b);
  sl_yaml_free(y), sl_yaml_free(y2);
}

/* Characters a YAML document may not hold raw, or that a parser takes as a
 * line break, are escaped when emitted (the fuzzer's find: "\x81", a C1
 * control, was written raw and the output did not parse): C1 controls (NEL
 * among them), U+2028, U+2029, the BOM, U+FFFE, U+FFFF; a plain scalar
 * holding one is quoted. Other UTF-8 stays as it is. */
static void test_emit_unicode_escapes(void **state) {
  (void)state;
  const char *src = "q: \"a\\x81b\\x85c\\u2028d\\u2029e\\ufeff\\uffff\xc3\xa9\"\n";
  sl_yaml *y = parse_ok(src);
  char *a = emit_str(y);
  assert_null(strstr(a, "\xc2\x81"));
  assert_non_null(strstr(a, "\xc3\xa9")); /* é as it is */
  sl_yaml *y2 = parse_ok(a);
  assert_string_equal(sl_yaml_get(y2, "q")->scalar, sl_yaml_get(y, "q")->scalar);
  assert_string_equal(sl_yaml_get(y2, "q")->scalar,
                      "a\xc2\x81" "b\xc2\x85" "c\xe2\x80\xa8" "d\xe2\x80\xa9" "e\xef\xbb\xbf" "\xef\xbf\xbf" "\xc3\xa9");
  char *b = emit_str(y2);
  assert_string_equal(a, b);
  free(a), free(b);
  sl_yaml_free(y), sl_yaml_free(y2);
}

static void test_emit_round_trip(void **state) {
  (void)state;
  const char *src =
      "plain: hello world\n"
      "num: -1.5e3\n"
      "quoted_num: \"42\"\n"
      "colon: \"a: b\"\n"
      "hash: \"x #y\"\n"
      "empty: ''\n"
      "lead: \" x\"\n"
      "dash: \"- x\"\n"
      "brackets: \"[1, 2]\"\n"
      "nl: \"a\\nb\\tc\\\\ \\\"q\\\"\"\n"
      "utf8: \"\xc3\xa9t\xc3\xa9\"\n"
      "nulls: [null, ~, \"null\"]\n"
      "\"odd key: x\": 1\n"
      "seq:\n  - 1\n  - {a: 1, b: [2, 3]}\n  - []\n  - - nested\n    - seq\n"
      "map: {}\n"
      "dollar: \"$x ${y}\"\n";
  sl_yaml *y = parse_ok(src);
  char *a = emit_str(y);
  sl_yaml *y2 = parse_ok(a);
  char *b = emit_str(y2);
  assert_string_equal(a, b);
  /* values survive exactly */
  assert_string_equal(sl_yaml_get(y2, "colon")->scalar, "a: b");
  assert_string_equal(sl_yaml_get(y2, "nl")->scalar, "a\nb\tc\\ \"q\"");
  assert_true(sl_yaml_get(y2, "quoted_num")->quoted);
  assert_false(sl_yaml_get(y2, "num")->quoted);
  assert_string_equal(sl_yaml_get(y2, "empty")->scalar, "");
  assert_string_equal(sl_yaml_get(y2, "lead")->scalar, " x");
  assert_string_equal(sl_yaml_get(y2, "utf8")->scalar, "\xc3\xa9t\xc3\xa9");
  assert_string_equal(sl_yaml_get(y2, "odd key: x")->scalar, "1");
  const sl_yaml *seq = sl_yaml_get(y2, "seq");
  assert_int_equal(seq->n, 4);
  assert_string_equal(sl_yaml_get(seq->items[1], "b")->items[1]->scalar, "3");
  assert_int_equal(seq->items[2]->kind, SL_Y_SEQ);
  assert_int_equal(seq->items[2]->n, 0);
  assert_string_equal(seq->items[3]->items[1]->scalar, "seq");
  assert_int_equal(sl_yaml_get(y2, "map")->kind, SL_Y_MAP);
  assert_true(sl_yaml_get(y2, "nulls")->items[2]->quoted);
  free(a);
  free(b);
  sl_yaml_free(y);
  sl_yaml_free(y2);
}

static void test_clone_flow(void **state) {
  (void)state;
  sl_yaml *y = parse_ok("a: [32, 32]\nb: {k: 'v w'}\n");
  sl_yaml *c = sl_yaml_clone(y);
  sl_yaml_free(y);
  char *f = sl_yaml_flow_string(sl_yaml_get(c, "a"));
  assert_string_equal(f, "[32, 32]");
  free(f);
  f = sl_yaml_flow_string(c);
  assert_string_equal(f, "{a: [32, 32], b: {k: \"v w\"}}");
  free(f);
  assert_int_equal(sl_yaml_get(c, "b")->loc.line, 2);
  sl_yaml_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_locations),   cmocka_unit_test(test_errors),
      cmocka_unit_test(test_depth_bound), cmocka_unit_test(test_load_file),
      cmocka_unit_test(test_emit_round_trip), cmocka_unit_test(test_clone_flow),
      cmocka_unit_test(test_emit_long_keys),     cmocka_unit_test(test_emit_unicode_escapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
