/* Helpers shared by the unit tests: temporary directories and files. */
#ifndef SL_TEST_SUPPORT_H
#define SL_TEST_SUPPORT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory made from the mkdtemp template `tmpl` (ending in
 * XXXXXX), its path into dir; 0, or -1 when it cannot be made. For cmocka
 * group setups. */
static inline int temp_dir_make(char *dir, size_t n, const char *tmpl) {
  snprintf(dir, n, "%s", tmpl);
  return mkdtemp(dir) ? 0 : -1;
}

static inline int temp_tree_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes `dir` and everything below it; 0, or -1 when that fails. In
 * process (nftw, deepest first, links not followed), not through system():
 * a fork of a CUDA process under compute-sanitizer corrupted its heap
 * (glibc's system() spawns with a shared address space, and the sanitizer
 * follows the child). */
static inline int temp_dir_remove(const char *dir) {
  if (!dir || !dir[0]) return 0;
  return nftw(dir, temp_tree_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The per-process directory of write_temp_file, removed at exit. */
static char g_temp_file_dir[256];
static inline void temp_file_dir_remove(void) { (void)temp_dir_remove(g_temp_file_dir); }

/* Writes `text` to a fresh file under a per-process temp directory (removed
 * when the test program exits) and returns its path (static buffer per call
 * site is not needed: the caller copies). */
static inline void write_temp_file(char *path, size_t n, const char *name, const char *text) {
  char *dir = g_temp_file_dir;
  if (!dir[0]) {
    snprintf(dir, sizeof g_temp_file_dir, "/tmp/sluice-test-XXXXXX");
    if (!mkdtemp(dir)) abort();
    atexit(temp_file_dir_remove);
  }
  snprintf(path, n, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

#endif
