/* Status codes and the error context every fallible call fills.
 * Library code never exits: it returns a code and fills an sl_error that says
 * what went wrong and where (pipeline file:line:col, node id, chunk index). */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include <stddef.h>
#include <stdint.h>

typedef enum sl_code {
  SL_OK = 0,
  SL_ERR_USAGE,    /* bad command line */
  SL_ERR_PARSE,    /* malformed YAML, bad substitution */
  SL_ERR_PIPELINE, /* unknown type/param/port, type mismatch, cycle, template errors */
  SL_ERR_IO,       /* file system */
  SL_ERR_FORMAT,   /* malformed input data (a chunk, a file) */
  SL_ERR_NOMEM,
  SL_ERR_BUDGET,   /* the plan does not fit the memory budget */
  SL_ERR_BACKEND,  /* compute backend failure or unavailable backend */
  SL_ERR_INTERNAL,
  SL_ERR_INTERRUPTED /* stopped by a signal (SIGINT, SIGTERM) before it finished */
} sl_code;

typedef struct sl_error {
  sl_code code;
  char msg[1024];
  char file[512]; /* pipeline or data file, "" when unknown */
  int line, col;  /* 1-based; 0 when unknown */
  char node[128]; /* node id, "" when unknown */
  int64_t chunk;  /* chunk index, -1 when unknown */
} sl_error;

void sl_error_clear(sl_error *e);
/* Sets code and message (printf style) and returns the code, so that callers
 * can write `return sl_fail(err, SL_ERR_IO, "cannot open %s", p);`.
 * Location fields are left as they are. */
sl_code sl_fail(sl_error *e, sl_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* sl_fail, then the file location (sl_error_at): for readers of a file that
 * report what was wrong and where. The message is formatted before it is
 * stored, so an argument may be e->msg itself. */
sl_code sl_fail_in(sl_error *e, sl_code code, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* SL_ERR_NOMEM: "out of memory for <what>" (what could not be allocated);
 * locations as in sl_fail. */
sl_code sl_fail_nomem(sl_error *e, const char *what);
/* Location annotations. Each sets its field only if it is still unset, so the
 * innermost (most precise) location wins as the error travels up. */
void sl_error_at(sl_error *e, const char *file, int line, int col);
void sl_error_node(sl_error *e, const char *node_id);
void sl_error_chunk(sl_error *e, int64_t chunk);
/* "file:line:col: node 'x': chunk 3: message" (parts present only when set). */
void sl_error_format(const sl_error *e, char *buf, size_t n);
const char *sl_code_name(sl_code c);
/* Process exit code for a status: 0 ok, 1 runtime error, 2 usage or pipeline
 * error, 3 over budget. */
int sl_exit_code(sl_code c);

#endif
