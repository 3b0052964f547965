#include "engine/core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Empty strings rather than a memset of the whole record (1.7 KiB): the
 * executor clears one per level and call, thousands of times a run. */
void sl_error_clear(sl_error *e) {
  if (!e) return;
  e->code = SL_OK;
  e->msg[0] = e->file[0] = e->node[0] = 0;
  e->line = e->col = 0;
  e->chunk = -1;
}

sl_code sl_fail(sl_error *e, sl_code code, const char *fmt, ...) {
  if (!e) return code;
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return code;
}

sl_code sl_fail_in(sl_error *e, sl_code code, const char *file, const char *fmt, ...) {
  if (!e) return code;
  char msg[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sl_fail(e, code, "%s", msg);
  sl_error_at(e, file, 0, 0);
  return code;
}

sl_code sl_fail_nomem(sl_error *e, const char *what) {
  return sl_fail(e, SL_ERR_NOMEM, "out of memory for %s", what);
}

void sl_error_at(sl_error *e, const char *file, int line, int col) {
  if (!e || e->file[0] || !file) return;
  snprintf(e->file, sizeof e->file, "%s", file);
  e->line = line;
  e->col = col;
}

void sl_error_node(sl_error *e, const char *node_id) {
  if (!e || e->node[0] || !node_id) return;
  snprintf(e->node, sizeof e->node, "%s", node_id);
}

void sl_error_chunk(sl_error *e, int64_t chunk) {
  if (!e || e->chunk >= 0) return;
  e->chunk = chunk;
}

void sl_error_format(const sl_error *e, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
#define PUT(...)                                                        \
  do {                                                                  \
    int k_ = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__);         \
    if (k_ > 0) o += (size_t)k_;                                        \
  } while (0)
  if (e->file[0]) {
    PUT("%s", e->file);
    if (e->line > 0) PUT(":%d", e->line);
    if (e->col > 0) PUT(":%d", e->col);
    PUT(": ");
  }
  if (e->node[0]) PUT("node '%s': ", e->node);
  if (e->chunk >= 0) PUT("chunk %lld: ", (long long)e->chunk);
  PUT("%s", e->msg[0] ? e->msg : sl_code_name(e->code));
#undef PUT
}

const char *sl_code_name(sl_code c) {
  switch (c) {
    case SL_OK: return "ok";
    case SL_ERR_USAGE: return "usage error";
    case SL_ERR_PARSE: return "parse error";
    case SL_ERR_PIPELINE: return "pipeline error";
    case SL_ERR_IO: return "I/O error";
    case SL_ERR_FORMAT: return "format error";
    case SL_ERR_NOMEM: return "out of memory";
    case SL_ERR_BUDGET: return "over memory budget";
    case SL_ERR_BACKEND: return "backend error";
    case SL_ERR_INTERNAL: return "internal error";
    case SL_ERR_INTERRUPTED: return "interrupted";
  }
  return "unknown error";
}

int sl_exit_code(sl_code c) {
  switch (c) {
    case SL_OK: return 0;
    case SL_ERR_USAGE:
    case SL_ERR_PARSE:
    case SL_ERR_PIPELINE: return 2;
    case SL_ERR_BUDGET: return 3;
    case SL_ERR_INTERRUPTED: return 130; /* as a shell reports a SIGINT */
    default: return 1;
  }
}
