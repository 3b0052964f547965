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

sl_code sl_npy_read_mask(const char *path, int64_t h, int64_t w, uint8_t **mask, sl_error *err) {
  if (mask) *mask = NULL;
  unsigned char *buf = NULL;
  int64_t len = 0;
  sl_code rc = read_file(path, &buf, &len, err);
  if (rc) return rc;
  npy_parser ps = {NULL, NULL, path, err};
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
    rc = bad(&ps, "not a .npy file (missing \\x93NUMPY magic)");
    goto done;
  }
  int major = buf[6], minor = buf[7];
  int64_t prefix, hlen;
  if (major == 1 && minor == 0) {
    prefix = 10;
    hlen = (int64_t)buf[8] | ((int64_t)buf[9] << 8);
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (len < 12) {
      rc = bad(&ps, "truncated header length");
      goto done;
    }
    prefix = 12;
    hlen = (int64_t)buf[8] | ((int64_t)buf[9] << 8) | ((int64_t)buf[10] << 16) |
           ((int64_t)buf[11] << 24);
  } else {
    char m[96];
    snprintf(m, sizeof m, "unsupported .npy version %d.%d (supported: 1.0, 2.0, 3.0)", major,
             minor);
    rc = bad(&ps, m);
    goto done;
  }
  if (hlen < 1 || hlen > len - prefix) {
    char m[128];
    snprintf(m, sizeof m, "header length %lld exceeds the file (%lld bytes)", (long long)hlen,
             (long long)len);
    rc = bad(&ps, m);
    goto done;
  }
  const char *hdr = (const char *)buf + prefix;
  if (hdr[hlen - 1] != '\n') {
    rc = bad(&ps, "header does not end with a newline");
    goto done;
  }
  for (int64_t i = 0; i < hlen - 1; i++)
    if ((unsigned char)hdr[i] < 0x20 || (unsigned char)hdr[i] > 0x7e) {
      rc = bad(&ps, "header holds a non-printable character");
      goto done;
    }
  ps.p = hdr;
  ps.end = hdr + hlen - 1;

  char descr[32] = "";
  int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0, ndim = 0;
  int64_t dims[8];
  if (!expect_char(&ps, '{')) {
    rc = bad(&ps, "header is not a dictionary");
    goto done;
  }
  for (;;) {
    if (expect_char(&ps, '}')) break;
    char key[32];
    if ((rc = parse_string(&ps, key, sizeof key, "key")) != SL_OK) goto done;
    if (!expect_char(&ps, ':')) {
      rc = bad(&ps, "header: expected ':' after a key");
      goto done;
    }
    if (!strcmp(key, "descr")) {
      if (have_descr++) {
        rc = bad(&ps, "header: duplicate key 'descr'");
        goto done;
      }
      if ((rc = parse_string(&ps, descr, sizeof descr, "'descr'")) != SL_OK) goto done;
    } else if (!strcmp(key, "fortran_order")) {
      if (have_fortran++) {
        rc = bad(&ps, "header: duplicate key 'fortran_order'");
        goto done;
      }
      if (parse_word(&ps, "True")) fortran = 1;
      else if (parse_word(&ps, "False")) fortran = 0;
      else {
        rc = bad(&ps, "header: 'fortran_order' must be True or False");
        goto done;
      }
    } else if (!strcmp(key, "shape")) {
      if (have_shape++) {
        rc = bad(&ps, "header: duplicate key 'shape'");
        goto done;
      }
      if ((rc = parse_shape(&ps, dims, &ndim)) != SL_OK) goto done;
    } else {
      char m[96];
      snprintf(m, sizeof m, "header: unexpected key '%s'", key);
      rc = bad(&ps, m);
      goto done;
    }
    if (expect_char(&ps, ',')) continue;
    if (expect_char(&ps, '}')) break;
    rc = bad(&ps, "header: expected ',' or '}' after a value");
    goto done;
  }
  skip_spaces(&ps);
  if (ps.p != ps.end) {
    rc = bad(&ps, "header: unexpected text after the dictionary");
    goto done;
  }
  if (!have_descr || !have_fortran || !have_shape) {
    rc = bad(&ps, "header: missing one of the keys 'descr', 'fortran_order', 'shape'");
    goto done;
  }
  const npy_dtype *dt = NULL;
  for (size_t i = 0; i < sizeof element_types / sizeof element_types[0]; i++)
    if (!strcmp(descr, element_types[i].descr)) dt = &element_types[i];
  if (!dt) {
    char m[160];
    snprintf(m, sizeof m,
             "unsupported element type '%s'%s (supported: |u1, |b1, <u2, <i4, <f4, <f8)", descr,
             descr[0] == '>' ? " (big endian)" : "");
    rc = bad(&ps, m);
    goto done;
  }
  if (fortran) {
    rc = bad(&ps, "Fortran-order arrays are not supported (save a C-order array)");
    goto done;
  }
  if (ndim != 2) {
    char m[96];
    snprintf(m, sizeof m, "mask must have 2 dimensions, found %d", ndim);
    rc = bad(&ps, m);
    goto done;
  }
  if (dims[0] != h || dims[1] != w) {
    rc = sl_fail(err, SL_ERR_PIPELINE,
                 "mask file '%s': shape (%lld, %lld) does not match the detector (%lld, %lld)",
                 path, (long long)dims[0], (long long)dims[1], (long long)h, (long long)w);
    goto done;
  }
  int64_t data_len = len - prefix - hlen;
  int64_t want = h * w * dt->size; /* h, w come from a checked frame descriptor */
  if (data_len != want) {
    char m[160];
    snprintf(m, sizeof m, "data is %lld bytes, the header's shape and type need %lld",
             (long long)data_len, (long long)want);
    rc = bad(&ps, m);
    goto done;
  }
  const unsigned char *d = buf + prefix + hlen;
  uint8_t *out = mask ? malloc(h * w > 0 ? (size_t)(h * w) : 1) : NULL;
  if (mask && !out) {
    rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for mask '%s'", path);
    goto done;
  }
  for (int64_t i = 0; i < h * w; i++) {
    const unsigned char *e = d + i * dt->size;
    int nz;
    switch (dt->size) {
      case 1: nz = e[0] != 0; break;
      case 2: nz = (e[0] | e[1]) != 0; break;
      case 4:
        if (dt->descr[1] == 'f') {
          uint32_t u = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                       (uint32_t)e[3] << 24;
          float fv;
          memcpy(&fv, &u, 4);
          if (isnan(fv)) goto nan;
          nz = fv != 0.0f;
        } else {
          nz = (e[0] | e[1] | e[2] | e[3]) != 0;
        }
        break;
      default: {
        uint64_t u = 0;
        for (int b = 7; b >= 0; b--) u = u << 8 | e[b];
        double dv;
        memcpy(&dv, &u, 8);
        if (isnan(dv)) goto nan;
        nz = dv != 0.0;
        break;
      }
    }
    if (out) out[i] = (uint8_t)nz;
    continue;
  nan:
    free(out);
    {
      char m[96];
      snprintf(m, sizeof m, "element %lld (row %lld, col %lld) is NaN", (long long)i,
               (long long)(i / w), (long long)(i % w));
      rc = bad(&ps, m);
    }
    goto done;
  }
  if (mask) *mask = out;
  rc = SL_OK;
done:
  free(buf);
  return rc;
}
