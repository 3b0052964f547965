/* Strict .npy mask reader (see npy.h). Format: "\x93NUMPY", major, minor,
 * header length (u16 LE for version 1, u32 LE for 2 and 3), an ASCII Python
 * dict literal ending in '\n', then the raw array data. */
#include "nodes/common/npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NPY_MAX_FILE ((int64_t)1 << 31) /* masks are small; refuse anything huge */

typedef struct npy_parser {
  const char *p, *end;
  const char *path;
  sl_error *err;
} npy_parser;

static sl_code bad(npy_parser *ps, const char *what) {
  return sl_fail(ps->err, SL_ERR_FORMAT, "mask file '%s': %s", ps->path, what);
}

static void skip_spaces(npy_parser *ps) {
  while (ps->p < ps->end && *ps->p == ' ') ps->p++;
}

static int expect_char(npy_parser *ps, char c) {
  skip_spaces(ps);
  if (ps->p < ps->end && *ps->p == c) {
    ps->p++;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes, copied into buf (NUL-terminated). */
static sl_code parse_string(npy_parser *ps, char *buf, size_t n, const char *what) {
  skip_spaces(ps);
  if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) {
    char m[128];
    snprintf(m, sizeof m, "header: expected a quoted %s", what);
    return bad(ps, m);
  }
  char q = *ps->p++;
  size_t k = 0;
  while (ps->p < ps->end && *ps->p != q) {
    if (*ps->p == '\\') return bad(ps, "header: escapes in strings are not supported");
    if (k + 1 >= n) return bad(ps, "header: string too long");
    buf[k++] = *ps->p++;
  }
  if (ps->p >= ps->end) return bad(ps, "header: unterminated string");
  ps->p++;
  buf[k] = 0;
  return SL_OK;
}

static int parse_word(npy_parser *ps, const char *word) {
  skip_spaces(ps);
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) >= n && !memcmp(ps->p, word, n)) {
    ps->p += n;
    return 1;
  }
  return 0;
}

/* "(a, b)" / "(a,)" / "()": up to 8 non-negative integers. */
static sl_code parse_shape(npy_parser *ps, int64_t *dims, int *ndim) {
  *ndim = 0;
  if (!expect_char(ps, '(')) return bad(ps, "header: 'shape' must be a tuple");
  for (;;) {
    if (expect_char(ps, ')')) return SL_OK;
    skip_spaces(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
      return bad(ps, "header: 'shape' holds something other than non-negative integers");
    int64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      if (v > ((int64_t)1 << 40)) return bad(ps, "header: a 'shape' dimension is too large");
      v = v * 10 + (*ps->p++ - '0');
    }
    if (*ndim >= 8) return bad(ps, "header: 'shape' has more than 8 dimensions");
    dims[(*ndim)++] = v;
    if (expect_char(ps, ',')) continue;
    if (expect_char(ps, ')')) return SL_OK;
    return bad(ps, "header: malformed 'shape' tuple");
  }
}

typedef struct npy_dtype {
  const char *descr;
  int size;
} npy_dtype;

static const npy_dtype element_types[] = {
    {"|u1", 1}, {"<u1", 1}, {"|b1", 1}, {"<b1", 1}, {"<u2", 2}, {"<i4", 4}, {"<f4", 4}, {"<f8", 8},
};

static sl_code read_file(const char *path, unsigned char **data, int64_t *len, sl_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot open mask file '%s'", path);
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return sl_fail(err, SL_ERR_IO, "mask file '%s' is not a regular file", path);
  }
  if ((int64_t)st.st_size > NPY_MAX_FILE) {
    fclose(f);
    return sl_fail(err, SL_ERR_FORMAT, "mask file '%s' is too large (%lld bytes)", path,
                   (long long)st.st_size);
  }
  int64_t n = (int64_t)st.st_size;
  unsigned char *buf = malloc(n ? (size_t)n : 1);
  if (!buf) {
    fclose(f);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory reading mask file '%s'", path);
  }
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  if ((int64_t)got != n) {
    free(buf);
    return sl_fail(err, SL_ERR_IO, "cannot read mask file '%s'", path);
  }
  *data = buf;
  *len = n;
  return SL_OK;
}

/* Checks the magic, version and header length, and that the header is one
 * printable line; points the parser at the header text (without its '\n')
 * and returns where the array data starts. */
static sl_code parse_preamble(npy_parser *ps, const unsigned char *buf, int64_t len,
                              int64_t *data_start) {
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
    return bad(ps, "not a .npy file (missing \\x93NUMPY magic)");
  int major = buf[6], minor = buf[7];
  int64_t prefix, hlen;
  if (major == 1 && minor == 0) {
    prefix = 10;
    hlen = (int64_t)buf[8] | ((int64_t)buf[9] << 8);
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (len < 12) return bad(ps, "truncated header length");
    prefix = 12;
    hlen = (int64_t)buf[8] | ((int64_t)buf[9] << 8) | ((int64_t)buf[10] << 16) |
           ((int64_t)buf[11] << 24);
  } else {
    char m[96];
    snprintf(m, sizeof m, "unsupported .npy version %d.%d (supported: 1.0, 2.0, 3.0)", major,
             minor);
    return bad(ps, m);
  }
  if (hlen < 1 || hlen > len - prefix) {
    char m[128];
    snprintf(m, sizeof m, "header length %lld exceeds the file (%lld bytes)", (long long)hlen,
             (long long)len);
    return bad(ps, m);
  }
  const char *hdr = (const char *)buf + prefix;
  if (hdr[hlen - 1] != '\n') return bad(ps, "header does not end with a newline");
  for (int64_t i = 0; i < hlen - 1; i++)
    if ((unsigned char)hdr[i] < 0x20 || (unsigned char)hdr[i] > 0x7e)
      return bad(ps, "header holds a non-printable character");
  ps->p = hdr;
  ps->end = hdr + hlen - 1;
  *data_start = prefix + hlen;
  return SL_OK;
}

/* What the header dictionary says. */
typedef struct npy_header {
  char descr[32];
  int fortran, ndim;
  int64_t dims[8];
} npy_header;

/* One "key: value" entry of the header dictionary; `seen` counts each key so
 * a repeated one is refused. */
static sl_code parse_entry(npy_parser *ps, npy_header *hd, int seen[3]) {
  char key[32];
  sl_code rc = parse_string(ps, key, sizeof key, "key");
  if (rc) return rc;
  if (!expect_char(ps, ':')) return bad(ps, "header: expected ':' after a key");
  if (!strcmp(key, "descr")) {
    if (seen[0]++) return bad(ps, "header: duplicate key 'descr'");
    return parse_string(ps, hd->descr, sizeof hd->descr, "'descr'");
  }
  if (!strcmp(key, "fortran_order")) {
    if (seen[1]++) return bad(ps, "header: duplicate key 'fortran_order'");
    if (parse_word(ps, "True")) hd->fortran = 1;
    else if (parse_word(ps, "False")) hd->fortran = 0;
    else return bad(ps, "header: 'fortran_order' must be True or False");
    return SL_OK;
  }
  if (!strcmp(key, "shape")) {
    if (seen[2]++) return bad(ps, "header: duplicate key 'shape'");
    return parse_shape(ps, hd->dims, &hd->ndim);
  }
  char m[96];
  snprintf(m, sizeof m, "header: unexpected key '%s'", key);
  return bad(ps, m);
}

/* The dictionary literal: exactly the keys 'descr', 'fortran_order', 'shape'. */
static sl_code parse_header(npy_parser *ps, npy_header *hd) {
  int seen[3] = {0, 0, 0};
  if (!expect_char(ps, '{')) return bad(ps, "header is not a dictionary");
  for (;;) {
    if (expect_char(ps, '}')) break;
    sl_code rc = parse_entry(ps, hd, seen);
    if (rc) return rc;
    if (expect_char(ps, ',')) continue;
    if (expect_char(ps, '}')) break;
    return bad(ps, "header: expected ',' or '}' after a value");
  }
  skip_spaces(ps);
  if (ps->p != ps->end) return bad(ps, "header: unexpected text after the dictionary");
  if (!seen[0] || !seen[1] || !seen[2])
    return bad(ps, "header: missing one of the keys 'descr', 'fortran_order', 'shape'");
  return SL_OK;
}

/* Checks the header against what this reader supports and the detector's
 * H x W, and the data length against the shape; gives the element type. */
static sl_code check_header(npy_parser *ps, const npy_header *hd, int64_t h, int64_t w,
                            int64_t data_len, const npy_dtype **type) {
  const npy_dtype *dt = NULL;
  for (size_t i = 0; i < sizeof element_types / sizeof element_types[0]; i++)
    if (!strcmp(hd->descr, element_types[i].descr)) dt = &element_types[i];
  if (!dt) {
    char m[160];
    snprintf(m, sizeof m,
             "unsupported element type '%s'%s (supported: |u1, |b1, <u2, <i4, <f4, <f8)",
             hd->descr, hd->descr[0] == '>' ? " (big endian)" : "");
    return bad(ps, m);
  }
  if (hd->fortran) return bad(ps, "Fortran-order arrays are not supported (save a C-order array)");
  if (hd->ndim != 2) {
    char m[96];
    snprintf(m, sizeof m, "mask must have 2 dimensions, found %d", hd->ndim);
    return bad(ps, m);
  }
  if (hd->dims[0] != h || hd->dims[1] != w)
    return sl_fail(ps->err, SL_ERR_PIPELINE,
                   "mask file '%s': shape (%lld, %lld) does not match the detector (%lld, %lld)",
                   ps->path, (long long)hd->dims[0], (long long)hd->dims[1], (long long)h,
                   (long long)w);
  int64_t want = h * w * dt->size; /* h, w come from a checked frame descriptor */
  if (data_len != want) {
    char m[160];
    snprintf(m, sizeof m, "data is %lld bytes, the header's shape and type need %lld",
             (long long)data_len, (long long)want);
    return bad(ps, m);
  }
  *type = dt;
  return SL_OK;
}

/* Element e as 0/1 (1 = nonzero); -1 for a NaN. */
static int element_nonzero(const unsigned char *e, const npy_dtype *dt) {
  switch (dt->size) {
    case 1: return e[0] != 0;
    case 2: return (e[0] | e[1]) != 0;
    case 4:
      if (dt->descr[1] == 'f') {
        uint32_t u = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                     (uint32_t)e[3] << 24;
        float fv;
        memcpy(&fv, &u, 4);
        if (isnan(fv)) return -1;
        return fv != 0.0f;
      }
      return (e[0] | e[1] | e[2] | e[3]) != 0;
    default: {
      uint64_t u = 0;
      for (int b = 7; b >= 0; b--) u = u << 8 | e[b];
      double dv;
      memcpy(&dv, &u, 8);
      if (isnan(dv)) return -1;
      return dv != 0.0;
    }
  }
}

/* Converts the h*w elements at d into out (when not NULL); refuses a NaN. */
static sl_code decode_elements(npy_parser *ps, const unsigned char *d, const npy_dtype *dt,
                               int64_t h, int64_t w, uint8_t *out) {
  for (int64_t i = 0; i < h * w; i++) {
    int nz = element_nonzero(d + i * dt->size, dt);
    if (nz < 0) {
      char m[96];
      snprintf(m, sizeof m, "element %lld (row %lld, col %lld) is NaN", (long long)i,
               (long long)(i / w), (long long)(i % w));
      return bad(ps, m);
    }
    if (out) out[i] = (uint8_t)nz;
  }
  return SL_OK;
}

sl_code sl_npy_read_mask(const char *path, int64_t h, int64_t w, uint8_t **mask, sl_error *err) {
  if (mask) *mask = NULL;
  unsigned char *buf = NULL;
  int64_t len = 0;
  sl_code rc = read_file(path, &buf, &len, err);
  if (rc) return rc;
  npy_parser ps = {NULL, NULL, path, err};
  npy_header hd = {.descr = ""};
  const npy_dtype *dt = NULL;
  int64_t data_start = 0;
  uint8_t *out = NULL;
  if ((rc = parse_preamble(&ps, buf, len, &data_start)) != SL_OK) goto done;
  if ((rc = parse_header(&ps, &hd)) != SL_OK) goto done;
  if ((rc = check_header(&ps, &hd, h, w, len - data_start, &dt)) != SL_OK) goto done;
  out = mask ? malloc(h * w > 0 ? (size_t)(h * w) : 1) : NULL;
  if (mask && !out) {
    rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for mask '%s'", path);
    goto done;
  }
  if ((rc = decode_elements(&ps, buf + data_start, dt, h, w, out)) != SL_OK) {
    free(out);
    goto done;
  }
  if (mask) *mask = out;
done:
  free(buf);
  return rc;
}
