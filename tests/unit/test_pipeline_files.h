/* What the pipeline-language tests (test_pipeline_spec.c,
 * test_pipeline_template.c) share: a temporary directory of pipeline files,
 * loading one that must succeed or must fail at a given place, and finding
 * a node of the loaded spec. */
#ifndef SL_TEST_PIPELINE_FILES_H
#define SL_TEST_PIPELINE_FILES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "engine/pipeline/spec.h"
#include "tests/unit/test_support.h"

/* The temporary directory the files are written to (one per test program). */
static char g_dir[256];

/* <g_dir>/rel into buf. */
static void dir_path(const char *rel, char *buf, size_t n) { snprintf(buf, n, "%s/%s", g_dir, rel); }

static void write_file(const char *rel, const char *text) {
  char p[600];
  dir_path(rel, p, sizeof p);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Loads <g_dir>/rel with --set values; it must load. */
static sl_spec *load_file_ok(const char *rel, const sl_setting *sets, size_t n) {
  char p[600];
  dir_path(rel, p, sizeof p);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  sl_code rc = sl_spec_load(p, sets, n, &s, &e);
  if (rc) fprintf(stderr, "unexpected: %s:%d:%d: %s\n", e.file, e.line, e.col, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_non_null(s);
  return s;
}

/* Loads <SLUICE_SOURCE_DIR>/rel (a file of the repository) with one --set
 * value; it must load. */
static sl_spec *load_source_file(const char *rel, sl_setting set) {
  const char *src = getenv("SLUICE_SOURCE_DIR");
  char p[600];
  snprintf(p, sizeof p, "%s/%s", src ? src : ".", rel);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  sl_code rc = sl_spec_load(p, &set, 1, &s, &e);
  if (rc) fail_msg("%s: %s:%d: %s", p, e.file, e.line, e.msg);
  return s;
}

/* Loads <g_dir>/rel; expects `code` at `line` (and `col` when nonzero) with
 * `needle` in the message, in the file <g_dir>/where -- or, where NULL, in
 * rel itself unless the error is in a --set value or has no line. */
static void load_file_err(const char *rel, const sl_setting *sets, size_t n, sl_code code,
                          const char *where, int line, int col, const char *needle) {
  char p[600], w[600];
  dir_path(rel, p, sizeof p);
  dir_path(where ? where : rel, w, sizeof w);
  bool check_file = where || (line > 0);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *s = NULL;
  sl_code rc = sl_spec_load(p, sets, n, &s, &e);
  if (!where && !strncmp(e.file, "--set ", 6)) check_file = false;
  if (rc != code || e.line != line || (col && e.col != col) || !strstr(e.msg, needle) ||
      (check_file && strcmp(e.file, w)))
    fprintf(stderr, "got rc=%d at %s:%d:%d: %s\n", rc, e.file, e.line, e.col, e.msg);
  assert_int_equal(rc, code);
  assert_null(s);
  if (check_file) assert_string_equal(e.file, w);
  assert_int_equal(e.line, line);
  if (col) assert_int_equal(e.col, col);
  assert_non_null(strstr(e.msg, needle));
}

static const sl_node_spec *node(const sl_spec *s, const char *id) {
  for (size_t i = 0; i < s->n_nodes; i++)
    if (!strcmp(s->nodes[i].id, id)) return &s->nodes[i];
  fail_msg("no node %s", id);
  return NULL;
}

/* cmocka group setup and teardown: a fresh /tmp/<prefix>_XXXXXX, removed after. */
static int temp_dir_setup(const char *prefix) {
  char tmpl[256];
  snprintf(tmpl, sizeof tmpl, "/tmp/%s_XXXXXX", prefix);
  return temp_dir_make(g_dir, sizeof g_dir, tmpl);
}

static int temp_dir_teardown(void **state) {
  (void)state;
  return temp_dir_remove(g_dir);
}

#endif
