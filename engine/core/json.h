/* A streaming JSON writer (plan --json, report.json, nodes --json).
 * Handles commas and string escaping; callers give structure. */
#ifndef SL_JSON_H
#define SL_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sl_json {
  FILE *f;
  int depth;
  bool need_comma[64];
  bool pending_key[64];
  bool pretty;
} sl_json;

void sl_json_init(sl_json *j, FILE *f, bool pretty);
void sl_json_begin_object(sl_json *j);
void sl_json_end_object(sl_json *j);
void sl_json_begin_array(sl_json *j);
void sl_json_end_array(sl_json *j);
void sl_json_key(sl_json *j, const char *key); /* next value belongs to key */
void sl_json_string(sl_json *j, const char *s);
void sl_json_int(sl_json *j, int64_t v);
void sl_json_uint(sl_json *j, uint64_t v);
void sl_json_double(sl_json *j, double v); /* non-finite -> null */
void sl_json_bool(sl_json *j, bool v);
void sl_json_null(sl_json *j);
/* key + value in one call. */
void sl_json_kv_string(sl_json *j, const char *key, const char *s);
void sl_json_kv_int(sl_json *j, const char *key, int64_t v);
void sl_json_kv_uint(sl_json *j, const char *key, uint64_t v);
void sl_json_kv_double(sl_json *j, const char *key, double v);
void sl_json_kv_bool(sl_json *j, const char *key, bool v);
/* Close with a newline. */
void sl_json_finish(sl_json *j);

#endif
