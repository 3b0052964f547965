/* Helpers shared by the unit tests: temporary pipeline files. */
#ifndef SL_TEST_SUPPORT_H
#define SL_TEST_SUPPORT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes `text` to a fresh file under a per-process temp directory and returns
 * its path (static buffer per call site is not needed: the caller copies). */
static inline void write_temp_file(char *path, size_t n, const char *name, const char *text) {
  static char dir[256];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/sluice-test-XXXXXX");
    if (!mkdtemp(dir)) abort();
  }
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

#endif
