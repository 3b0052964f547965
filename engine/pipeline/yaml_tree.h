/* A YAML document as a tree that remembers where each value came from.
 * Built with libyaml; every scalar, sequence and mapping carries file:line:col
 * so that later stages (substitution, templates, graph building) can report
 * errors at the place the user wrote them. */
#ifndef SL_YAML_TREE_H
#define SL_YAML_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/core/status.h"

typedef struct sl_loc {
  const char *file; /* interned (sl_intern): lives for the process */
  int line, col;    /* 1-based */
} sl_loc;

typedef enum sl_ykind { SL_Y_SCALAR, SL_Y_SEQ, SL_Y_MAP } sl_ykind;

typedef struct sl_yaml {
  sl_ykind kind;
  sl_loc loc;
  char *scalar;            /* SCALAR: the text */
  bool quoted;             /* SCALAR: written in quotes (never a number/bool) */
  size_t n;                /* SEQ: item count; MAP: pair count */
  struct sl_yaml **items;  /* SEQ: items; MAP: values */
  char **keys;             /* MAP: keys, in file order (duplicates are an error) */
  sl_loc *key_locs;        /* MAP: where each key was written */
} sl_yaml;

sl_code sl_yaml_load_file(const char *path, sl_yaml **out, sl_error *err);
/* `name` is used as the file in locations. */
sl_code sl_yaml_load_string(const char *text, size_t len, const char *name, sl_yaml **out,
                            sl_error *err);
void sl_yaml_free(sl_yaml *y);
/* The constructors and sl_yaml_clone return NULL when out of memory. */
sl_yaml *sl_yaml_clone(const sl_yaml *y);
sl_yaml *sl_yaml_new_scalar(const char *text, sl_loc loc);
/* MAP lookup; NULL if absent or y is not a map. */
sl_yaml *sl_yaml_get(const sl_yaml *map, const char *key);
/* Index of key in a MAP, or -1. */
long sl_yaml_find(const sl_yaml *map, const char *key);
/* Emit as block YAML (used by `sluice render`). */
void sl_yaml_emit(FILE *f, const sl_yaml *y, int indent);

/* ---- added helpers (pipeline layer) ---- */
/* Reads a whole regular file (at most 16 MiB) into a NUL-terminated buffer. */
sl_code sl_yaml_read_file(const char *path, char **text, size_t *len, sl_error *err);
sl_yaml *sl_yaml_new_map(sl_loc loc);
sl_yaml *sl_yaml_new_seq(sl_loc loc);
/* Appends `item` (owned from now on) to a SEQ, or under `key` (copied) to a MAP;
 * does not check for duplicate keys. False when out of memory or `item` is
 * NULL (a constructor that failed); `item` is then freed. */
bool sl_yaml_append(sl_yaml *y, const char *key, sl_yaml *item);
/* One-line flow rendering ("[32, 32]", "{a: 1}", "text"); caller frees; NULL
 * when out of memory. */
char *sl_yaml_flow_string(const sl_yaml *y);

#endif
