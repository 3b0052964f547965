#include "engine/core/json.h"

#include <math.h>
#include <string.h>

void sl_json_init(sl_json *j, FILE *f, bool pretty) {
  memset(j, 0, sizeof *j);
  j->f = f;
  j->pretty = pretty;
}

static void newline(sl_json *j) {
  if (!j->pretty) return;
  fputc('\n', j->f);
  for (int i = 0; i < j->depth; i++) fputs("  ", j->f);
}

/* Before a value: a comma if this container already has one, unless the value
 * follows a key (then the key wrote the comma). */
static void before_value(sl_json *j) {
  if (j->depth < 64 && j->pending_key[j->depth]) {
    j->pending_key[j->depth] = false;
    return;
  }
  if (j->depth > 0 && j->depth < 64) {
    if (j->need_comma[j->depth]) fputc(',', j->f);
    j->need_comma[j->depth] = true;
    newline(j);
  }
}

static void open(sl_json *j, char c) {
  before_value(j);
  fputc(c, j->f);
  j->depth++;
  if (j->depth < 64) j->need_comma[j->depth] = false, j->pending_key[j->depth] = false;
}

static void close_(sl_json *j, char c) {
  bool had = j->depth < 64 && j->need_comma[j->depth];
  j->depth--;
  if (had) newline(j);
  fputc(c, j->f);
}

void sl_json_begin_object(sl_json *j) { open(j, '{'); }
void sl_json_end_object(sl_json *j) { close_(j, '}'); }
void sl_json_begin_array(sl_json *j) { open(j, '['); }
void sl_json_end_array(sl_json *j) { close_(j, ']'); }

static void write_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20)
          fprintf(f, "\\u%04x", *p);
        else
          fputc(*p, f);
    }
  }
  fputc('"', f);
}

void sl_json_key(sl_json *j, const char *key) {
  before_value(j);
  write_string(j->f, key);
  fputs(j->pretty ? ": " : ":", j->f);
  if (j->depth < 64) j->pending_key[j->depth] = true;
}

void sl_json_string(sl_json *j, const char *s) {
  before_value(j);
  write_string(j->f, s);
}

void sl_json_int(sl_json *j, int64_t v) {
  before_value(j);
  fprintf(j->f, "%lld", (long long)v);
}

void sl_json_uint(sl_json *j, uint64_t v) {
  before_value(j);
  fprintf(j->f, "%llu", (unsigned long long)v);
}

void sl_json_double(sl_json *j, double v) {
  before_value(j);
  if (isfinite(v))
    fprintf(j->f, "%.17g", v);
  else
    fputs("null", j->f);
}

void sl_json_bool(sl_json *j, bool v) {
  before_value(j);
  fputs(v ? "true" : "false", j->f);
}

void sl_json_null(sl_json *j) {
  before_value(j);
  fputs("null", j->f);
}

void sl_json_finish(sl_json *j) {
  fputc('\n', j->f);
}

void sl_json_kv_string(sl_json *j, const char *key, const char *s) {
  sl_json_key(j, key);
  sl_json_string(j, s);
}

void sl_json_kv_int(sl_json *j, const char *key, int64_t v) {
  sl_json_key(j, key);
  sl_json_int(j, v);
}

void sl_json_kv_uint(sl_json *j, const char *key, uint64_t v) {
  sl_json_key(j, key);
  sl_json_uint(j, v);
}

void sl_json_kv_double(sl_json *j, const char *key, double v) {
  sl_json_key(j, key);
  sl_json_double(j, v);
}

void sl_json_kv_bool(sl_json *j, const char *key, bool v) {
  sl_json_key(j, key);
  sl_json_bool(j, v);
}
