/* Fuzz target: YAML text -> sl_yaml tree -> sl_spec (templates resolve relative
 * to "." and must fail cleanly) -> render. Nothing may crash or leak. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 16)) return 0;
  sl_error err;
  sl_error_clear(&err);
  sl_yaml *y = NULL;
  if (sl_yaml_load_string((const char *)data, size, "fuzz.yaml", &y, &err) != SL_OK) return 0;
  /* emitting the tree must give YAML that parses back */
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (f) {
    sl_yaml_emit(f, y, 0);
    fclose(f);
    sl_yaml *y2 = NULL;
    sl_error e2;
    sl_error_clear(&e2);
    if (sl_yaml_load_string(buf, n, "emit.yaml", &y2, &e2) != SL_OK &&
        !strstr(e2.msg, "empty pipeline file")) {
      fprintf(stderr, "emitted YAML does not parse: %s\n---\n%s\n", e2.msg, buf);
      abort();
    }
    sl_yaml_free(y2);
    free(buf);
  }
  sl_yaml_free(y);

  /* with and without a --set override */
  static const sl_setting sets[] = {{"n", "3"}};
  for (int k = 0; k < 2; k++) {
    sl_spec *s = NULL;
    sl_error_clear(&err);
    if (sl_spec_load_string((const char *)data, size, "fuzz.yaml", sets, (size_t)k, &s, &err) ==
        SL_OK) {
      char *r = sl_spec_render_string(s);
      if (r) {
        sl_yaml *ry = NULL;
        if (sl_yaml_load_string(r, strlen(r), "render.yaml", &ry, &err) != SL_OK) {
          fprintf(stderr, "render does not parse: %s\n---\n%s\n", err.msg, r);
          abort();
        }
        sl_yaml_free(ry);
        free(r);
      }
      sl_spec_free(s);
    } else if (err.code == SL_OK || !err.msg[0]) {
      fprintf(stderr, "failure without an error message\n");
      abort();
    }
  }
  return 0;
}
