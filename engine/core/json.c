/* The streaming JSON writer: structure from the caller, commas, indentation
 * and escaping here. */
#include "engine/core/json.h"

#include <math.h>
#include <stdarg.h>
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

/* A scalar value written as printf text. */
static void value_printf(sl_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void value_printf(sl_json *j, const char *fmt, ...) {
  before_value(j);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(j->f, fmt, ap);
  va_end(ap);
}

void sl_json_int(sl_json *j, int64_t v) { value_printf(j, "%lld", (long long)v); }
void sl_json_uint(sl_json *j, uint64_t v) { value_printf(j, "%llu", (unsigned long long)v); }
/* %.17g: a double read back is the same double. */
void sl_json_double(sl_json *j, double v) {
  if (isfinite(v)) value_printf(j, "%.17g", v);
  else value_printf(j, "null");
}
void sl_json_bool(sl_json *j, bool v) { value_printf(j, "%s", v ? "true" : "false"); }
void sl_json_null(sl_json *j) { value_printf(j, "null"); }

void sl_json_finish(sl_json *j) {
  fputc('\n', j->f);
}

/* sl_json_kv_TYPE: the key, then sl_json_TYPE of the value. */
#define SL_JSON_KV(TYPE, CTYPE)                                  \
  void sl_json_kv_##TYPE(sl_json *j, const char *key, CTYPE v) { \
    sl_json_key(j, key);                                         \
    sl_json_##TYPE(j, v);                                        \
  }
SL_JSON_KV(string, const char *)
SL_JSON_KV(int, int64_t)
SL_JSON_KV(uint, uint64_t)
SL_JSON_KV(double, double)
SL_JSON_KV(bool, bool)
#undef SL_JSON_KV
