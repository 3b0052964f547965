/* YAML text -> sl_yaml tree, built from libyaml parser events so that every
 * node and every key remembers file:line:col. Anchors, aliases, multiple
 * documents and non-scalar keys are rejected; nesting depth is bounded. */
#define _POSIX_C_SOURCE 200809L
#include "engine/pipeline/yaml_tree.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "engine/core/util.h"

enum { SL_YAML_MAX_DEPTH = 64 };
#define SL_YAML_MAX_FILE ((size_t)16 << 20)

typedef struct ystate {
  yaml_parser_t parser;
  const char *file; /* interned */
  sl_error *err;
} ystate;

static sl_loc mark_loc(const ystate *s, yaml_mark_t m) {
  sl_loc l = {s->file, (int)m.line + 1, (int)m.column + 1};
  return l;
}

static sl_code fail_at(ystate *s, sl_loc l, sl_code code, const char *msg, const char *arg) {
  if (arg)
    sl_fail(s->err, code, "%s'%s'", msg, arg);
  else
    sl_fail(s->err, code, "%s", msg);
  sl_error_at(s->err, l.file, l.line, l.col);
  return code;
}

static sl_code next_event(ystate *s, yaml_event_t *ev) {
  if (yaml_parser_parse(&s->parser, ev)) return SL_OK;
  const char *problem = s->parser.problem ? s->parser.problem : "malformed YAML";
  if (s->parser.context)
    sl_fail(s->err, SL_ERR_PARSE, "invalid YAML: %s %s", problem, s->parser.context);
  else
    sl_fail(s->err, SL_ERR_PARSE, "invalid YAML: %s", problem);
  sl_loc l = mark_loc(s, s->parser.problem_mark);
  if (s->parser.error == YAML_READER_ERROR) {
    l.line = 0; /* reader errors carry a byte offset, not a line */
    l.col = 0;
  }
  sl_error_at(s->err, l.file, l.line, l.col);
  return SL_ERR_PARSE;
}

static sl_yaml *new_node(sl_ykind kind, sl_loc loc) {
  sl_yaml *y = sl_calloc(1, sizeof *y);
  if (!y) return NULL;
  y->kind = kind;
  y->loc = loc;
  return y;
}

/* False when out of memory; `item` and `key` are then still the caller's. */
static bool push_item(sl_yaml *y, size_t *cap, sl_yaml *item, char *key, sl_loc key_loc) {
  if (y->n == *cap) {
    size_t grown = *cap ? 2 * *cap : 4;
    if (!sl_resize(&y->items, grown, sizeof *y->items)) return false;
    if (y->kind == SL_Y_MAP && (!sl_resize(&y->keys, grown, sizeof *y->keys) ||
                                !sl_resize(&y->key_locs, grown, sizeof *y->key_locs)))
      return false;
    *cap = grown;
  }
  y->items[y->n] = item;
  if (y->kind == SL_Y_MAP) {
    y->keys[y->n] = key;
    y->key_locs[y->n] = key_loc;
  }
  y->n++;
  return true;
}

static bool has_anchor(const yaml_event_t *ev) {
  switch (ev->type) {
    case YAML_SCALAR_EVENT: return ev->data.scalar.anchor != NULL;
    case YAML_SEQUENCE_START_EVENT: return ev->data.sequence_start.anchor != NULL;
    case YAML_MAPPING_START_EVENT: return ev->data.mapping_start.anchor != NULL;
    default: return false;
  }
}

/* Builds the node that starts with `ev` (consumed here). */
static sl_code parse_node(ystate *s, yaml_event_t *ev, int depth, sl_yaml **out) {
  sl_loc loc = mark_loc(s, ev->start_mark);
  *out = NULL;
  if (ev->type == YAML_ALIAS_EVENT || has_anchor(ev)) {
    yaml_event_delete(ev);
    return fail_at(s, loc, SL_ERR_PARSE,
                   "anchors and aliases are not supported (write the value out)", NULL);
  }
  if (depth > SL_YAML_MAX_DEPTH) {
    yaml_event_delete(ev);
    sl_fail(s->err, SL_ERR_PARSE, "YAML nested deeper than %d levels", SL_YAML_MAX_DEPTH);
    sl_error_at(s->err, loc.file, loc.line, loc.col);
    return SL_ERR_PARSE;
  }
  if (ev->type == YAML_SCALAR_EVENT) {
    size_t len = ev->data.scalar.length;
    const char *v = (const char *)ev->data.scalar.value;
    if (memchr(v, 0, len)) {
      yaml_event_delete(ev);
      return fail_at(s, loc, SL_ERR_PARSE, "NUL character in a scalar is not supported", NULL);
    }
    sl_yaml *y = new_node(SL_Y_SCALAR, loc);
    if (y && !(y->scalar = sl_strndup(v, len))) {
      free(y);
      y = NULL;
    }
    if (!y) {
      yaml_event_delete(ev);
      sl_fail_nomem(s->err, "a YAML scalar");
      sl_error_at(s->err, loc.file, loc.line, loc.col);
      return SL_ERR_NOMEM;
    }
    y->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    yaml_event_delete(ev);
    *out = y;
    return SL_OK;
  }
  if (ev->type != YAML_SEQUENCE_START_EVENT && ev->type != YAML_MAPPING_START_EVENT) {
    yaml_event_delete(ev);
    return fail_at(s, loc, SL_ERR_PARSE, "unexpected YAML event", NULL);
  }
  bool is_map = ev->type == YAML_MAPPING_START_EVENT;
  yaml_event_delete(ev);
  sl_yaml *y = new_node(is_map ? SL_Y_MAP : SL_Y_SEQ, loc);
  size_t cap = 0;
  sl_code rc;
  if (!y) {
    rc = sl_fail_nomem(s->err, "a YAML collection");
    sl_error_at(s->err, loc.file, loc.line, loc.col);
    return rc;
  }
  for (;;) {
    yaml_event_t e;
    if ((rc = next_event(s, &e))) goto fail;
    if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&e);
      break;
    }
    if (!is_map) {
      sl_yaml *item;
      if ((rc = parse_node(s, &e, depth + 1, &item))) goto fail;
      if (!push_item(y, &cap, item, NULL, loc)) {
        sl_yaml_free(item);
        goto nomem;
      }
      continue;
    }
    sl_loc kloc = mark_loc(s, e.start_mark);
    if (e.type != YAML_SCALAR_EVENT) {
      yaml_event_delete(&e);
      rc = fail_at(s, kloc, SL_ERR_PARSE,
                   "mapping keys must be plain text (found a sequence, mapping or alias)", NULL);
      goto fail;
    }
    if (has_anchor(&e)) {
      yaml_event_delete(&e);
      rc = fail_at(s, kloc, SL_ERR_PARSE,
                   "anchors and aliases are not supported (write the value out)", NULL);
      goto fail;
    }
    const char *kv = (const char *)e.data.scalar.value;
    size_t klen = e.data.scalar.length;
    if (memchr(kv, 0, klen)) {
      yaml_event_delete(&e);
      rc = fail_at(s, kloc, SL_ERR_PARSE, "NUL character in a key is not supported", NULL);
      goto fail;
    }
    char *key = sl_strndup(kv, klen);
    yaml_event_delete(&e);
    if (!key) goto nomem;
    long prev = sl_yaml_find(y, key);
    if (prev >= 0) {
      sl_fail(s->err, SL_ERR_PARSE, "duplicate key '%s' (first written at line %d)", key,
              y->key_locs[prev].line);
      sl_error_at(s->err, kloc.file, kloc.line, kloc.col);
      free(key);
      rc = SL_ERR_PARSE;
      goto fail;
    }
    yaml_event_t ve;
    if ((rc = next_event(s, &ve))) {
      free(key);
      goto fail;
    }
    sl_yaml *val;
    if ((rc = parse_node(s, &ve, depth + 1, &val))) {
      free(key);
      goto fail;
    }
    if (!push_item(y, &cap, val, key, kloc)) {
      sl_yaml_free(val);
      free(key);
      goto nomem;
    }
  }
  *out = y;
  return SL_OK;
nomem:
  rc = sl_fail_nomem(s->err, "the YAML tree");
  sl_error_at(s->err, loc.file, loc.line, loc.col);
fail:
  sl_yaml_free(y);
  return rc;
}

sl_code sl_yaml_load_string(const char *text, size_t len, const char *name, sl_yaml **out,
                            sl_error *err) {
  *out = NULL;
  ystate s;
  memset(&s, 0, sizeof s);
  s.file = sl_intern(name ? name : "<string>");
  s.err = err;
  if (!s.file) return sl_fail_nomem(err, "the name of a pipeline file");
  if (!yaml_parser_initialize(&s.parser))
    return sl_fail(err, SL_ERR_NOMEM, "cannot initialise the YAML parser");
  yaml_parser_set_input_string(&s.parser, (const unsigned char *)text, len);
  sl_yaml *root = NULL;
  yaml_event_t ev;
  sl_code rc;
  if ((rc = next_event(&s, &ev))) goto done; /* STREAM_START */
  yaml_event_delete(&ev);
  if ((rc = next_event(&s, &ev))) goto done;
  if (ev.type == YAML_STREAM_END_EVENT) {
    yaml_event_delete(&ev);
    rc = sl_fail(err, SL_ERR_PARSE, "empty pipeline file");
    sl_error_at(err, s.file, 1, 1);
    goto done;
  }
  yaml_event_delete(&ev); /* DOCUMENT_START */
  if ((rc = next_event(&s, &ev))) goto done;
  if ((rc = parse_node(&s, &ev, 1, &root))) goto done;
  if ((rc = next_event(&s, &ev))) goto done; /* DOCUMENT_END */
  yaml_event_delete(&ev);
  if ((rc = next_event(&s, &ev))) goto done;
  if (ev.type != YAML_STREAM_END_EVENT) {
    sl_loc l = mark_loc(&s, ev.start_mark);
    yaml_event_delete(&ev);
    rc = fail_at(&s, l, SL_ERR_PARSE,
                 "multiple YAML documents in one file are not supported (remove '---')", NULL);
    goto done;
  }
  yaml_event_delete(&ev);
  if (root->kind == SL_Y_SCALAR && !root->quoted && root->scalar[0] == 0) {
    rc = sl_fail(err, SL_ERR_PARSE, "empty pipeline file");
    sl_error_at(err, s.file, root->loc.line, root->loc.col);
    goto done;
  }
done:
  yaml_parser_delete(&s.parser);
  if (rc) {
    sl_yaml_free(root);
    return rc;
  }
  *out = root;
  return SL_OK;
}

sl_code sl_yaml_read_file(const char *path, char **text, size_t *len, sl_error *err) {
  *text = NULL;
  *len = 0;
  struct stat st;
  /* stat first: opening a FIFO or a device could block or never end */
  if (stat(path, &st) != 0)
    return sl_fail(err, SL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return sl_fail(err, SL_ERR_IO, "'%s' is not a regular file", path);
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return sl_fail(err, SL_ERR_IO, "'%s' is not a regular file", path);
  }
  if ((uint64_t)st.st_size > SL_YAML_MAX_FILE) {
    fclose(f);
    return sl_fail(err, SL_ERR_IO, "'%s' is too large for a pipeline file (%lld bytes)", path,
                   (long long)st.st_size);
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = sl_calloc(cap, 1);
  if (!buf) {
    fclose(f);
    return sl_fail_nomem(err, "the text of a pipeline file");
  }
  for (;;) {
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0 || n == cap - 1) break;
  }
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    free(buf);
    return sl_fail(err, SL_ERR_IO, "cannot read '%s'", path);
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return SL_OK;
}

sl_code sl_yaml_load_file(const char *path, sl_yaml **out, sl_error *err) {
  char *text;
  size_t len;
  *out = NULL;
  sl_code rc = sl_yaml_read_file(path, &text, &len, err);
  if (rc) {
    sl_error_at(err, path, 0, 0);
    return rc;
  }
  rc = sl_yaml_load_string(text, len, path, out, err);
  free(text);
  return rc;
}

void sl_yaml_free(sl_yaml *y) {
  if (!y) return;
  for (size_t i = 0; i < y->n; i++) {
    sl_yaml_free(y->items[i]);
    if (y->keys) free(y->keys[i]);
  }
  free(y->items);
  free(y->keys);
  free(y->key_locs);
  free(y->scalar);
  free(y);
}

sl_yaml *sl_yaml_clone(const sl_yaml *y) {
  if (!y) return NULL;
  sl_yaml *c = new_node(y->kind, y->loc);
  if (!c) return NULL;
  c->quoted = y->quoted;
  if (y->scalar && !(c->scalar = sl_strdup(y->scalar))) goto nomem;
  if (y->n) {
    /* c->n counts the items made so far, for sl_yaml_free */
    if (!(c->items = sl_calloc(y->n, sizeof *c->items))) goto nomem;
    if (y->kind == SL_Y_MAP && (!(c->keys = sl_calloc(y->n, sizeof *c->keys)) ||
                                !(c->key_locs = sl_calloc(y->n, sizeof *c->key_locs))))
      goto nomem;
    for (size_t i = 0; i < y->n; i++) {
      c->items[i] = sl_yaml_clone(y->items[i]);
      c->n = i + 1;
      if (!c->items[i]) goto nomem;
      if (y->kind == SL_Y_MAP) {
        if (!(c->keys[i] = sl_strdup(y->keys[i]))) goto nomem;
        c->key_locs[i] = y->key_locs[i];
      }
    }
  }
  return c;
nomem:
  sl_yaml_free(c);
  return NULL;
}

sl_yaml *sl_yaml_new_scalar(const char *text, sl_loc loc) {
  sl_yaml *y = new_node(SL_Y_SCALAR, loc);
  if (y && !(y->scalar = sl_strdup(text ? text : ""))) {
    free(y);
    return NULL;
  }
  return y;
}

sl_yaml *sl_yaml_new_map(sl_loc loc) { return new_node(SL_Y_MAP, loc); }
sl_yaml *sl_yaml_new_seq(sl_loc loc) { return new_node(SL_Y_SEQ, loc); }

bool sl_yaml_append(sl_yaml *y, const char *key, sl_yaml *item) {
  /* capacity is not tracked; grow to exactly n+1 (control data, small) */
  char *k = NULL;
  if (!y || !item) goto nomem;
  if (y->kind == SL_Y_MAP && !(k = sl_strdup(key ? key : ""))) goto nomem;
  if (!sl_resize(&y->items, y->n + 1, sizeof *y->items)) goto nomem;
  if (y->kind == SL_Y_MAP && (!sl_resize(&y->keys, y->n + 1, sizeof *y->keys) ||
                              !sl_resize(&y->key_locs, y->n + 1, sizeof *y->key_locs)))
    goto nomem;
  y->items[y->n] = item;
  if (y->kind == SL_Y_MAP) {
    y->keys[y->n] = k;
    y->key_locs[y->n] = item->loc;
  }
  y->n++;
  return true;
nomem:
  free(k);
  sl_yaml_free(item);
  return false;
}

sl_yaml *sl_yaml_get(const sl_yaml *map, const char *key) {
  long i = sl_yaml_find(map, key);
  return i < 0 ? NULL : map->items[i];
}

long sl_yaml_find(const sl_yaml *map, const char *key) {
  if (!map || map->kind != SL_Y_MAP || !key) return -1;
  for (size_t i = 0; i < map->n; i++)
    if (strcmp(map->keys[i], key) == 0) return (long)i;
  return -1;
}

/* ---- emitting ---------------------------------------------------------- */

static bool plain_char(unsigned char c) {
  if (c >= 0x80) return true; /* UTF-8 */
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return strchr("_./+-=~()<>^;@ ", c) != NULL && c != 0;
}

/* How many bytes at p (UTF-8) are a character a YAML document may not hold
 * as it is, or that a parser would take as a line break, which put_quoted
 * writes as an escape: the C1 controls U+0080-U+009F (NEL among them),
 * U+2028 and U+2029, the BOM U+FEFF, U+FFFE and U+FFFF; 0 for any other.
 * (A scalar may hold them: "\x81" in a double-quoted one is U+0081.) */
static int escaped_utf8(const unsigned char *p) {
  if (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) return 2;
  if (p[0] == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) return 3;
  if (p[0] == 0xEF && ((p[1] == 0xBB && p[2] == 0xBF) || (p[1] == 0xBF && (p[2] == 0xBE || p[2] == 0xBF))))
    return 3;
  return 0;
}

/* Whether `s` can be written plain (unquoted) in block and flow context and
 * read back as the same text. Conservative: anything unusual is quoted. */
static bool plain_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0) return false;
  if (s[0] == ' ' || s[n - 1] == ' ') return false;
  if (s[0] == '-' && !(n > 1 && ((s[1] >= '0' && s[1] <= '9') || s[1] == '.'))) return false;
  if (s[0] == '~' && n == 1) return false; /* null */
  if (s[0] == '<' || s[0] == '@') return false;
  for (size_t i = 0; i < n; i++)
    if (!plain_char((unsigned char)s[i]) || escaped_utf8((const unsigned char *)s + i)) return false;
  if (!strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")) return false;
  return true;
}

/* Writes s double-quoted with its escapes into f, or with f NULL only
 * counts; the characters written. */
static size_t put_quoted(FILE *f, const char *s) {
  size_t n = 0;
#define PUT(...) (n += (size_t)(f ? fprintf(f, __VA_ARGS__) : snprintf(NULL, 0, __VA_ARGS__)))
  PUT("\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    const int u = escaped_utf8(p);
    if (u == 2) { /* U+0080-U+009F */
      PUT("\\x%02x", p[1]);
      p++;
      continue;
    }
    if (u == 3) { /* U+2028, U+2029, U+FEFF, U+FFFE, U+FFFF */
      PUT("\\u%04x", ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F));
      p += 2;
      continue;
    }
    switch (*p) {
      case '"': PUT("\\\""); break;
      case '\\': PUT("\\\\"); break;
      case '\n': PUT("\\n"); break;
      case '\t': PUT("\\t"); break;
      case '\r': PUT("\\r"); break;
      default:
        if (*p < 0x20 || *p == 0x7f)
          PUT("\\x%02x", *p);
        else
          PUT("%c", *p);
    }
  }
  PUT("\"");
#undef PUT
  return n;
}

/* Characters put_scalar writes for s. */
static size_t scalar_width(const char *s, bool quoted) {
  return !quoted && plain_ok(s) ? strlen(s) : put_quoted(NULL, s);
}

/* A mapping key written longer than this is written as an explicit key
 * ("? KEY" then ": VALUE"): YAML parsers (libyaml's) take an implicit key
 * of at most 1024 characters. */
#define IMPLICIT_KEY_MAX 1000

static void put_scalar(FILE *f, const char *s, bool quoted) {
  if (!quoted && plain_ok(s))
    fputs(s, f);
  else
    put_quoted(f, s);
}

static void put_flow(FILE *f, const sl_yaml *y) {
  if (y->kind == SL_Y_SCALAR) {
    put_scalar(f, y->scalar, y->quoted);
  } else if (y->kind == SL_Y_SEQ) {
    fputc('[', f);
    for (size_t i = 0; i < y->n; i++) {
      if (i) fputs(", ", f);
      put_flow(f, y->items[i]);
    }
    fputc(']', f);
  } else {
    fputc('{', f);
    for (size_t i = 0; i < y->n; i++) {
      if (i) fputs(", ", f);
      put_scalar(f, y->keys[i], false);
      fputs(": ", f);
      put_flow(f, y->items[i]);
    }
    fputc('}', f);
  }
}

/* Small collections of scalars are written in flow style on one line. */
static bool flow_style(const sl_yaml *y) {
  if (y->kind == SL_Y_SCALAR || y->n == 0) return true;
  if (y->kind == SL_Y_MAP) return false;
  for (size_t i = 0; i < y->n; i++)
    if (y->items[i]->kind != SL_Y_SCALAR) return false;
  return true;
}

static void emit_block(FILE *f, const sl_yaml *y, int indent) {
  if (flow_style(y)) {
    fprintf(f, "%*s", indent, "");
    put_flow(f, y);
    fputc('\n', f);
    return;
  }
  for (size_t i = 0; i < y->n; i++) {
    const sl_yaml *v = y->items[i];
    fprintf(f, "%*s", indent, "");
    if (y->kind == SL_Y_MAP && scalar_width(y->keys[i], false) > IMPLICIT_KEY_MAX) {
      fputs("? ", f);
      put_scalar(f, y->keys[i], false);
      fprintf(f, "\n%*s:", indent, "");
    } else if (y->kind == SL_Y_MAP) {
      put_scalar(f, y->keys[i], false);
      fputc(':', f);
    } else {
      fputc('-', f);
    }
    if (flow_style(v)) {
      fputc(' ', f);
      put_flow(f, v);
      fputc('\n', f);
    } else {
      fputc('\n', f);
      emit_block(f, v, indent + 2);
    }
  }
}

void sl_yaml_emit(FILE *f, const sl_yaml *y, int indent) {
  if (!y) return;
  emit_block(f, y, indent < 0 ? 0 : indent);
}

char *sl_yaml_flow_string(const sl_yaml *y) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f) return NULL;
  if (y) put_flow(f, y);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
