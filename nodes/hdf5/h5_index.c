/* Chunk index of a detector acquisition in HDF5 (Dectris / Arina layout).
 * See h5_index.h and docs/formats/dectris-hdf5.md. */
#include "nodes/hdf5/h5_index.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "engine/core/util.h"
#include "nodes/hdf5/h5_btree.h"

#define DETECTOR "/entry/instrument/detector"
#define MAX_FRAME_DIM 65536
#define MAX_LINKS 999999

/* One 3-D dataset holding a run of consecutive frames. */
typedef struct part {
  char *link;  /* where it was found (link path in the opened file), for messages */
  int file;    /* index into ix->files */
  hid_t fid, did;
  int64_t n, h, w;
  int elem_size;
  bool is_signed;
  bool chunked;
  int64_t k; /* frames per chunk (chunked) */
  int filter;
  unsigned cd[8];
  int n_cd;
  uint64_t file_size;
} part;

typedef struct builder {
  sl_h5_index *ix;
  part *parts;
  int n_parts, cap_parts;
  hid_t master;
  char dir[4096];
} builder;

/* ---- small helpers ------------------------------------------------------- */

/* True when every component of the absolute `path` exists in `loc`
 * (H5Lexists fails on a missing intermediate group). Does not follow the
 * last component when it is a link. */
static bool path_exists(hid_t loc, const char *path) {
  char buf[1024];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (i > 1 && H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return false;
      buf[i] = c;
    }
  }
  return true;
}

static void dtype_name(hid_t t, char *buf, size_t n) {
  H5T_class_t c = H5Tget_class(t);
  size_t sz = H5Tget_size(t);
  switch (c) {
    case H5T_INTEGER:
      snprintf(buf, n, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", sz * 8);
      break;
    case H5T_FLOAT: snprintf(buf, n, "float%zu", sz * 8); break;
    case H5T_STRING: snprintf(buf, n, "string"); break;
    case H5T_COMPOUND: snprintf(buf, n, "compound (%zu bytes)", sz); break;
    case H5T_ENUM: snprintf(buf, n, "enum (%zu bytes)", sz); break;
    case H5T_ARRAY: snprintf(buf, n, "array (%zu bytes)", sz); break;
    case H5T_OPAQUE: snprintf(buf, n, "opaque (%zu bytes)", sz); break;
    case H5T_BITFIELD: snprintf(buf, n, "bitfield (%zu bytes)", sz); break;
    default: snprintf(buf, n, "type class %d (%zu bytes)", (int)c, sz); break;
  }
}

static int add_file(builder *b, const char *path) {
  sl_h5_index *ix = b->ix;
  for (int i = 0; i < ix->n_files; i++)
    if (!strcmp(ix->files[i], path)) return i;
  ix->files = sl_xrealloc(ix->files, (size_t)(ix->n_files + 1) * sizeof *ix->files);
  ix->files[ix->n_files] = sl_strdup(path);
  return ix->n_files++;
}

static part *add_part(builder *b) {
  if (b->n_parts == b->cap_parts) {
    b->cap_parts = b->cap_parts ? 2 * b->cap_parts : 8;
    b->parts = sl_xrealloc(b->parts, (size_t)b->cap_parts * sizeof *b->parts);
  }
  part *p = &b->parts[b->n_parts++];
  memset(p, 0, sizeof *p);
  p->fid = H5I_INVALID_HID;
  p->did = H5I_INVALID_HID;
  return p;
}

/* The innermost message of HDF5's current error stack (e.g. "truncated
 * file: eof = ..."), "" when none. */
static herr_t first_error_cb(unsigned n, const H5E_error2_t *e, void *op) {
  char *buf = op;
  if (n == 0 && e->desc) snprintf(buf, 256, "%s", e->desc);
  return 0;
}

static void h5_error_text(char *buf) {
  buf[0] = 0;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error_cb, buf);
}

static sl_code open_h5(const char *path, hid_t *fid, sl_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return sl_fail_in(err, SL_ERR_IO, path, "cannot open: %s", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return sl_fail_in(err, SL_ERR_IO, path, "not a regular file");
  *fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (*fid < 0) {
    char why[256];
    h5_error_text(why);
    return sl_fail_in(err, SL_ERR_FORMAT, path, "not a readable HDF5 file%s%s", why[0] ? ": " : "", why);
  }
  return SL_OK;
}

/* ---- resolving datasets -------------------------------------------------- */

/* Finds the dataset behind `link` in the master file: an external link is
 * resolved relative to the master's folder (never HDF5's prefix or the cwd);
 * a hard or soft link is a dataset in the master itself. */
static sl_code resolve(builder *b, const char *master_path, const char *link, sl_error *err) {
  H5L_info_t li;
  if (H5Lget_info(b->master, link, &li, H5P_DEFAULT) < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "cannot read link %s", link);
  part *p = add_part(b);
  p->link = sl_strdup(link);
  if (li.type == H5L_TYPE_EXTERNAL) {
    size_t n = li.u.val_size;
    if (n == 0 || n > 65536)
      return sl_fail_in(err, SL_ERR_FORMAT, master_path, "external link %s has a bad value size %zu", link, n);
    char *val = malloc(n);
    if (!val) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
    const char *fname = NULL, *obj = NULL;
    unsigned flags = 0;
    if (H5Lget_val(b->master, link, val, n, H5P_DEFAULT) < 0 ||
        H5Lunpack_elink_val(val, n, &flags, &fname, &obj) < 0 || !fname || !obj || !fname[0] ||
        !memchr(val, 0, n)) {
      free(val);
      return sl_fail_in(err, SL_ERR_FORMAT, master_path, "cannot decode external link %s",
                     link);
    }
    char target[4096];
    sl_path_join(b->dir, fname, target, sizeof target);
    struct stat st;
    if (stat(target, &st) != 0) {
      sl_code rc = sl_fail_in(err, SL_ERR_IO, master_path,
                           "link %s points to data file '%s', which is missing: %s (%s)",
                           link, fname, target, strerror(errno));
      free(val);
      return rc;
    }
    sl_code rc = open_h5(target, &p->fid, err);
    if (rc) {
      free(val);
      if (err) {
        char m[4096];
        int k = snprintf(m, sizeof m, "%s (data file of link %s in %s)", err->msg, link, master_path);
        size_t len = k < 0 ? 0 : (size_t)k < sizeof err->msg ? (size_t)k : sizeof err->msg - 1;
        memcpy(err->msg, m, len);
        err->msg[len] = 0;
      }
      return rc;
    }
    p->file = add_file(b, target);
    if (!path_exists(p->fid, obj) || (p->did = H5Dopen2(p->fid, obj, H5P_DEFAULT)) < 0) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, target, "no dataset %s (target of link %s in %s)", obj,
                   link, master_path);
      free(val);
      return rc;
    }
    free(val);
    return SL_OK;
  }
  if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "link %s has an unsupported link type %d",
                   link, (int)li.type);
  p->file = add_file(b, master_path);
  p->did = H5Dopen2(b->master, link, H5P_DEFAULT);
  if (p->did < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "%s is not a dataset (or a dangling link)",
                   link);
  return SL_OK;
}

typedef struct scan_links {
  long max_index;
  long count;
} scan_links;

static herr_t scan_links_cb(hid_t g, const char *name, const H5L_info_t *info, void *op) {
  scan_links *s = op;
  if (strncmp(name, "data_", 5) != 0 || strlen(name) != 11) return 0;
  long v = 0;
  for (int i = 5; i < 11; i++) {
    if (name[i] < '0' || name[i] > '9') return 0;
    v = v * 10 + (name[i] - '0');
  }
  s->count++;
  if (v > s->max_index) s->max_index = v;
  return 0;
}

/* ---- inspecting one dataset ---------------------------------------------- */

static sl_code inspect(builder *b, part *p, sl_error *err) {
  const char *file = b->ix->files[p->file];
  sl_code rc = SL_OK;
  hid_t space = H5I_INVALID_HID, type = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
  struct stat st;
  if (stat(file, &st) != 0) return sl_fail_in(err, SL_ERR_IO, file, "cannot stat: %s", strerror(errno));
  p->file_size = (uint64_t)st.st_size;

  space = H5Dget_space(p->did);
  int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  if (rank != 3) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s has rank %d; detector frames need rank 3 (frames, rows, cols)", p->link, rank);
    goto done;
  }
  hsize_t dims[3];
  H5Sget_simple_extent_dims(space, dims, NULL);
  if (dims[1] == 0 || dims[2] == 0 || dims[1] >= MAX_FRAME_DIM || dims[2] >= MAX_FRAME_DIM) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s has frames of %llu x %llu pixels (each must be 1..%d)", p->link, (unsigned long long)dims[1], (unsigned long long)dims[2], MAX_FRAME_DIM - 1);
    goto done;
  }
  if (dims[0] == 0 || dims[0] > (hsize_t)1 << 40) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s holds %llu frames", p->link,
                 (unsigned long long)dims[0]);
    goto done;
  }
  p->n = (int64_t)dims[0];
  p->h = (int64_t)dims[1];
  p->w = (int64_t)dims[2];

  type = H5Dget_type(p->did);
  char tname[64];
  dtype_name(type, tname, sizeof tname);
  size_t sz = H5Tget_size(type);
  if (H5Tget_class(type) != H5T_INTEGER || (sz != 1 && sz != 2 && sz != 4)) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                 "dataset %s has dtype %s; supported: 8, 16 or 32-bit integers", p->link, tname);
    goto done;
  }
  if (sz > 1 && H5Tget_order(type) != H5T_ORDER_LE) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s holds big-endian %s: not supported", p->link,
                 tname);
    goto done;
  }
  p->elem_size = (int)sz;
  p->is_signed = H5Tget_sign(type) != H5T_SGN_NONE;

  dcpl = H5Dget_create_plist(p->did);
  H5D_layout_t layout = H5Pget_layout(dcpl);
  uint64_t frame_bytes = (uint64_t)p->h * (uint64_t)p->w * (uint64_t)p->elem_size;
  if (layout == H5D_CONTIGUOUS) {
    p->chunked = false;
    p->filter = SL_H5_FILTER_NONE;
  } else if (layout == H5D_CHUNKED) {
    p->chunked = true;
    hsize_t cd[3] = {0, 0, 0};
    if (H5Pget_chunk(dcpl, 3, cd) != 3) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read its chunk shape", p->link);
      goto done;
    }
    if (cd[0] == 0 || cd[1] != dims[1] || cd[2] != dims[2]) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                   "dataset %s: chunks split frames (chunk shape %llu x %llu x %llu, frames %llu x %llu): not supported", p->link, (unsigned long long)cd[0], (unsigned long long)cd[1], (unsigned long long)cd[2],
                   (unsigned long long)dims[1], (unsigned long long)dims[2]);
      goto done;
    }
    if ((uint64_t)cd[0] * frame_bytes > UINT32_MAX) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: chunks of %llu frames exceed 4 GiB", p->link,
                   (unsigned long long)cd[0]);
      goto done;
    }
    p->k = (int64_t)cd[0];
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read its filters", p->link);
      goto done;
    }
    if (nf == 0) {
      p->filter = SL_H5_FILTER_NONE;
    } else {
      char ids[256] = "";
      size_t o = 0;
      int first_id = -1;
      for (int i = 0; i < nf; i++) {
        unsigned flags = 0, config = 0;
        size_t ncd = 8;
        unsigned cdv[8] = {0};
        char name[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof name, name, &config);
        if (i == 0) {
          first_id = (int)id;
          p->n_cd = (int)(ncd < 8 ? ncd : 8);
          memcpy(p->cd, cdv, sizeof cdv);
        }
        int k = snprintf(ids + o, sizeof ids - o, "%s%d%s%s%s", i ? ", " : "", (int)id, name[0] ? " (" : "",
                         name, name[0] ? ")" : "");
        if (k > 0 && (size_t)k < sizeof ids - o) o += (size_t)k;
      }
      if (nf != 1 || first_id != SL_H5_FILTER_BITSHUFFLE) {
        rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                     "dataset %s uses HDF5 filter %s: not supported (supported: none, or bitshuffle 32008 alone)", p->link, ids);
        goto done;
      }
      p->filter = SL_H5_FILTER_BITSHUFFLE;
    }
  } else {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s has layout %s: not supported (contiguous or chunked only)", p->link, layout == H5D_COMPACT ? "compact" : layout == H5D_VIRTUAL ? "virtual" : "unknown");
    goto done;
  }

done:
  if (dcpl >= 0) H5Pclose(dcpl);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return rc;
}

/* Optional Dectris attributes image_nr_low / image_nr_high (1-based, inclusive)
 * must agree with the frames the dataset holds. */
static sl_code check_image_nr(const char *file, part *p, int64_t first_frame, sl_error *err) {
  static const char *names[2] = {"image_nr_low", "image_nr_high"};
  int64_t expect[2] = {first_frame + 1, first_frame + p->n};
  for (int i = 0; i < 2; i++) {
    if (H5Aexists(p->did, names[i]) <= 0) continue;
    hid_t a = H5Aopen(p->did, names[i], H5P_DEFAULT);
    if (a < 0) continue;
    hid_t sp = H5Aget_space(a);
    long long v = 0;
    bool ok = H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0;
    H5Sclose(sp);
    H5Aclose(a);
    if (ok && v != expect[i])
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                     "dataset %s has %s = %lld, but it holds frames %lld..%lld of the acquisition (1-based)", p->link, names[i], v, (long long)expect[0], (long long)expect[1]);
  }
  return SL_OK;
}

/* ---- chunk listing ------------------------------------------------------- */

static sl_code check_chunk(const sl_h5_index *ix, const part *p, const char *file, int64_t frame0, uint64_t addr,
                           uint64_t size, uint32_t mask, sl_error *err) {
  uint64_t raw = (uint64_t)p->k * ix->frame_bytes;
  if (addr == (uint64_t)HADDR_UNDEF || size == 0)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: the chunk of frames %lld.. is not stored (never written)", p->link, (long long)frame0);
  bool raw_stored = p->filter == SL_H5_FILTER_NONE || (mask & 1u);
  if (raw_stored ? size != raw : size > 2 * raw + 4096)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                   "dataset %s: the chunk of frames %lld.. has %" PRIu64 " stored bytes (%s %" PRIu64 ")",
                   p->link, (long long)frame0, size, raw_stored ? "expected" : "bound", raw_stored ? raw : 2 * raw + 4096);
  if (addr > p->file_size || size > p->file_size - addr)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                   "dataset %s: the chunk of frames %lld.. at offset %" PRIu64 " (%" PRIu64
                   " bytes) lies past the end of the file (%" PRIu64 " bytes): truncated file?",
                   p->link, (long long)frame0, addr, size, p->file_size);
  return SL_OK;
}

/* Address (relative to the base address), size and filter mask of chunk i
 * (frames i*k ..) as HDF5 reports them. */
typedef struct raw_chunk {
  uint64_t addr, size;
  uint32_t mask;
  bool found;
} raw_chunk;

#if H5_VERSION_GE(1, 14, 0)
/* One pass over the chunk index (H5Dchunk_iter). Early 1.14 releases passed
 * offsets in chunk units rather than elements; both are accepted: with
 * k > 1 and more than one chunk, an offset that is not a multiple of k can
 * only be in chunk units. */
typedef struct iter_ctx {
  raw_chunk *rec;
  int64_t nc, k;
  bool bad, scaled;
  hsize_t bad_off[3];
  struct {
    hsize_t o0, o1, o2;
    uint64_t addr, size;
    uint32_t mask;
  } *all;
  int64_t n_all;
} iter_ctx;

static int iter_cb(const hsize_t *offset, unsigned filter_mask, haddr_t addr, hsize_t size, void *op) {
  iter_ctx *c = op;
  if (c->n_all >= c->nc) {
    c->bad = true; /* more chunks than the extent needs */
    return H5_ITER_STOP;
  }
  c->all[c->n_all].o0 = offset[0];
  c->all[c->n_all].o1 = offset[1];
  c->all[c->n_all].o2 = offset[2];
  c->all[c->n_all].addr = (uint64_t)addr;
  c->all[c->n_all].size = (uint64_t)size;
  c->all[c->n_all].mask = filter_mask;
  if (c->k > 1 && offset[0] % (hsize_t)c->k != 0) c->scaled = true;
  c->n_all++;
  return H5_ITER_CONT;
}

static sl_code collect_chunks(const part *p, const char *file, int64_t nc, raw_chunk *rec, sl_error *err) {
  iter_ctx c;
  memset(&c, 0, sizeof c);
  c.rec = rec;
  c.nc = nc;
  c.k = p->k;
  c.all = calloc((size_t)nc, sizeof *c.all);
  if (!c.all) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
  sl_code rc = SL_OK;
  if (H5Dchunk_iter(p->did, H5P_DEFAULT, iter_cb, &c) < 0 || c.bad) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot list its chunks", p->link);
  } else {
    for (int64_t j = 0; j < c.n_all; j++) {
      hsize_t o0 = c.scaled ? c.all[j].o0 * (hsize_t)p->k : c.all[j].o0;
      if (c.all[j].o1 != 0 || c.all[j].o2 != 0 || o0 % (hsize_t)p->k != 0 || o0 / (hsize_t)p->k >= (hsize_t)nc ||
          rec[o0 / (hsize_t)p->k].found) {
        rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: unexpected chunk at offset (%llu, %llu, %llu)", p->link,
                     (unsigned long long)c.all[j].o0, (unsigned long long)c.all[j].o1,
                     (unsigned long long)c.all[j].o2);
        break;
      }
      raw_chunk *r = &rec[o0 / (hsize_t)p->k];
      r->addr = c.all[j].addr;
      r->size = c.all[j].size;
      r->mask = c.all[j].mask;
      r->found = c.all[j].addr != (uint64_t)HADDR_UNDEF;
    }
  }
  free(c.all);
  return rc;
}
#else
/* HDF5 < 1.14 has no H5Dchunk_iter: one H5Dget_chunk_info_by_coord per chunk.
 * Each call walks the chunk index from its start in 1.10, so listing n
 * chunks of one dataset costs O(n^2) index visits (about 30 s for 65536
 * chunks in one data file; 20 ms for 4096 chunks in 5 files). */
static sl_code collect_chunks(const part *p, const char *file, int64_t nc, raw_chunk *rec, sl_error *err) {
  for (int64_t i = 0; i < nc; i++) {
    hsize_t coord[3] = {(hsize_t)(i * p->k), 0, 0};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(p->did, coord, &mask, &addr, &size) < 0)
      return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read the chunk of frames %lld..", p->link,
                     (long long)(i * p->k));
    rec[i].addr = (uint64_t)addr;
    rec[i].size = (uint64_t)size;
    rec[i].mask = mask;
    rec[i].found = addr != HADDR_UNDEF;
  }
  return SL_OK;
}
#endif

/* ---- fast listing: the version-1 B-tree read directly (h5_btree.c) -------- */

static int pread_cb(void *ctx, uint64_t off, void *buf, size_t n) {
  int fd = *(int *)ctx;
  uint8_t *d = buf;
  while (n > 0) {
    ssize_t r = pread(fd, d, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    d += r;
    off += (uint64_t)r;
    n -= (size_t)r;
  }
  return 0;
}

/* Lists the chunks of a chunked dataset by reading its object header and
 * chunk B-tree (layout version 3) from the file's bytes: one pass, linear in
 * the number of chunks. *handled = false (and SL_OK) when the dataset's
 * layout is another kind (e.g. layout version 4 indexes) or SLUICE_H5_INDEX=api:
 * the caller then uses the HDF5 API. A few chunks are cross-checked against
 * H5Dget_chunk_info_by_coord; any disagreement is an error. */
static sl_code fast_collect(const part *p, const char *file, uint64_t base, int64_t nc, raw_chunk *rec,
                            bool *handled, sl_error *err) {
  *handled = false;
  const char *env = getenv("SLUICE_H5_INDEX");
  if (env && !strcmp(env, "api")) return SL_OK;
  uint64_t oaddr;
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t oi;
  haddr_t ha = HADDR_UNDEF;
  if (H5Oget_info3(p->did, &oi, H5O_INFO_BASIC) < 0 || H5VLnative_token_to_addr(p->did, oi.token, &ha) < 0)
    return SL_OK;
  oaddr = (uint64_t)ha;
#else
  H5O_info_t oi;
  if (H5Oget_info2(p->did, &oi, H5O_INFO_BASIC) < 0) return SL_OK;
  oaddr = (uint64_t)oi.addr;
#endif
  size_t sa = 0, ss = 0;
  {
    hid_t f = H5Iget_file_id(p->did);
    hid_t fcpl = f >= 0 ? H5Fget_create_plist(f) : H5I_INVALID_HID;
    herr_t st = fcpl >= 0 ? H5Pget_sizes(fcpl, &sa, &ss) : -1;
    if (fcpl >= 0) H5Pclose(fcpl);
    if (f >= 0) H5Fclose(f);
    if (st < 0) return SL_OK;
  }
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sl_fail_in(err, SL_ERR_IO, file, "cannot open: %s", strerror(errno));
  sl_h5bt_io io = {.read = pread_cb, .ctx = &fd, .name = file, .file_size = p->file_size, .base = base,
                   .sizeof_addr = (unsigned)sa, .sizeof_size = (unsigned)ss};
  sl_h5bt_layout lay;
  char why[128];
  bool ok = false;
  sl_h5bt_chunk *ch = NULL;
  sl_code rc = sl_h5bt_find_layout(&io, oaddr, &lay, &ok, why, sizeof why, err);
  if (rc || !ok) goto done;
  if (lay.ndims != 4 || lay.dims[0] != (uint64_t)p->k || lay.dims[1] != (uint64_t)p->h ||
      lay.dims[2] != (uint64_t)p->w || lay.dims[3] != (uint32_t)p->elem_size) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                 "dataset %s: its data layout message (object header at address %" PRIu64
                 ") has chunk dims (%u, %u, %u, %u) of dimensionality %d; HDF5 reports chunks of (%lld, %lld, %lld) "
                 "of %d-byte elements",
                 p->link, oaddr, lay.dims[0], lay.dims[1], lay.dims[2], lay.dims[3], lay.ndims, (long long)p->k,
                 (long long)p->h, (long long)p->w, p->elem_size);
    goto done;
  }
  ch = calloc((size_t)nc, sizeof *ch);
  if (!ch) {
    rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
    goto done;
  }
  uint64_t extent[3] = {(uint64_t)p->n, (uint64_t)p->h, (uint64_t)p->w};
  if ((rc = sl_h5bt_list(&io, &lay, 3, extent, ch, nc, err))) {
    /* sl_h5bt_list names the address; add the dataset. */
    if (err && rc == SL_ERR_FORMAT) {
      char m[2 * sizeof err->msg];
      int k = snprintf(m, sizeof m, "dataset %s: %s", p->link, err->msg);
      size_t len = k < 0 ? 0 : (size_t)k < sizeof err->msg ? (size_t)k : sizeof err->msg - 1;
      memcpy(err->msg, m, len);
      err->msg[len] = 0;
    }
    goto done;
  }
  for (int64_t i = 0; i < nc; i++) {
    rec[i].addr = ch[i].addr;
    rec[i].size = ch[i].size;
    rec[i].mask = ch[i].mask;
    rec[i].found = ch[i].found;
  }
  /* Cross-check: first, last and a handful spread over the dataset. */
  int64_t probe[7] = {0, nc - 1, nc / 2, nc / 4, 3 * (nc / 4), nc / 3, (nc * 7) / 9};
  for (int j = 0; j < 7; j++) {
    int64_t i = probe[j];
    if (i < 0 || i >= nc) continue;
    hsize_t coord[3] = {(hsize_t)(i * p->k), 0, 0};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(p->did, coord, &mask, &addr, &size) < 0) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read the chunk of frames %lld..", p->link,
                   (long long)(i * p->k));
      goto done;
    }
    bool found = addr != HADDR_UNDEF;
    if (found != rec[i].found || (found && ((uint64_t)addr != rec[i].addr || (uint64_t)size != rec[i].size ||
                                            mask != rec[i].mask))) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                   "dataset %s: the chunk B-tree read from the file says the chunk of frames %lld.. is at address "
                   "%" PRIu64 " (%" PRIu64 " bytes, filter mask %u%s), HDF5 says %" PRIu64 " (%" PRIu64
                   " bytes, filter mask %u%s); set SLUICE_H5_INDEX=api to bypass the direct reader",
                   p->link, (long long)(i * p->k), rec[i].addr, rec[i].size, rec[i].mask,
                   rec[i].found ? "" : ", absent", (uint64_t)addr, (uint64_t)size, mask, found ? "" : ", absent");
      goto done;
    }
  }
  *handled = true;
done:
  free(ch);
  close(fd);
  return rc;
}

static sl_code list_chunks(builder *b, part *p, int64_t first_frame, int64_t *next_chunk, sl_error *err) {
  sl_h5_index *ix = b->ix;
  const char *file = ix->files[p->file];
  /* The file's base address (user block): HDF5 addresses are relative to it. */
  uint64_t base = 0;
  {
    hid_t f = H5Iget_file_id(p->did);
    hid_t fcpl = f >= 0 ? H5Fget_create_plist(f) : H5I_INVALID_HID;
    hsize_t ub = 0;
    if (fcpl >= 0 && H5Pget_userblock(fcpl, &ub) >= 0) base = (uint64_t)ub;
    if (fcpl >= 0) H5Pclose(fcpl);
    if (f >= 0) H5Fclose(f);
  }
  if (!p->chunked) {
    haddr_t off = H5Dget_offset(p->did);
    if (off == HADDR_UNDEF)
      return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s has no storage (never written)", p->link);
    uint64_t addr = (uint64_t)off; /* H5Dget_offset already includes the base address */
    uint64_t total = (uint64_t)p->n * ix->frame_bytes;
    if (addr > p->file_size || total > p->file_size - addr)
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                     "dataset %s: %" PRIu64 " bytes at offset %" PRIu64 " lie past the end of the file (%" PRIu64
                     " bytes): truncated file?",
                     p->link, total, addr, p->file_size);
    for (int64_t i = 0; i < p->n; i++) {
      sl_h5_chunk *c = &ix->chunks[(*next_chunk)++];
      c->file_offset = addr + (uint64_t)i * ix->frame_bytes;
      c->size = ix->frame_bytes;
      c->filter_mask = 0;
      c->file = p->file;
      c->first_frame = first_frame + i;
      c->n_frames = 1;
    }
    return SL_OK;
  }
  int64_t nc = (p->n + p->k - 1) / p->k;
  hsize_t stored = 0;
  hid_t space = H5Dget_space(p->did);
  herr_t st = space >= 0 ? H5Dget_num_chunks(p->did, space, &stored) : -1;
  if (space >= 0) H5Sclose(space);
  if (st < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot count its chunks", p->link);
  if ((int64_t)stored != nc)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                   "dataset %s stores %llu chunks; %lld frames in chunks of %lld need %lld (missing chunks?)",
                   p->link, (unsigned long long)stored, (long long)p->n, (long long)p->k, (long long)nc);
  raw_chunk *rec = calloc((size_t)nc, sizeof *rec);
  if (!rec) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
  bool handled = false;
  sl_code rc = fast_collect(p, file, base, nc, rec, &handled, err);
  if (rc == SL_OK && !handled) rc = collect_chunks(p, file, nc, rec, err);
  for (int64_t i = 0; rc == SL_OK && i < nc; i++) {
    uint64_t a = rec[i].found ? rec[i].addr + base : (uint64_t)HADDR_UNDEF;
    rc = check_chunk(ix, p, file, i * p->k, a, rec[i].size, rec[i].mask, err);
    if (rc) break;
    sl_h5_chunk *c = &ix->chunks[(*next_chunk)++];
    c->file_offset = a;
    c->size = rec[i].size;
    c->filter_mask = rec[i].mask;
    c->file = p->file;
    c->first_frame = first_frame + i * p->k;
    c->n_frames = (i + 1) * p->k <= p->n ? p->k : p->n - i * p->k;
  }
  free(rec);
  return rc;
}

/* ---- metadata ------------------------------------------------------------ */

/* Reads a numeric scalar (or 1-element) dataset as double. *found = false
 * when absent. */
static sl_code read_scalar(hid_t fid, const char *file, const char *path, double *v, bool *found, sl_error *err) {
  *found = false;
  if (!path_exists(fid, path)) return SL_OK;
  hid_t d = H5Dopen2(fid, path, H5P_DEFAULT);
  if (d < 0) return SL_OK; /* a group or dangling link of that name: not our metadata */
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  H5T_class_t c = H5Tget_class(t);
  sl_code rc = SL_OK;
  if (H5Sget_simple_extent_npoints(sp) != 1 || (c != H5T_INTEGER && c != H5T_FLOAT)) {
    char tn[64];
    dtype_name(t, tn, sizeof tn);
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s should be one number, found %lld elements of %s", path,
                 (long long)H5Sget_simple_extent_npoints(sp), tn);
  } else if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 || !isfinite(*v)) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "cannot read %s as a number", path);
  } else {
    *found = true;
  }
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return rc;
}

static sl_code read_count(hid_t fid, const char *file, const char *path, int64_t *v, bool *found, sl_error *err) {
  double d = 0;
  sl_code rc = read_scalar(fid, file, path, &d, found, err);
  if (rc || !*found) return rc;
  if (d < 0 || d > 9007199254740992.0 || d != floor(d))
    return sl_fail_in(err, SL_ERR_FORMAT, file, "%s = %g is not a non-negative integer", path, d);
  *v = (int64_t)d;
  return SL_OK;
}

static sl_code read_meta(sl_h5_index *ix, hid_t fid, const char *file, sl_error *err) {
  sl_h5_detector_meta *m = &ix->meta;
  sl_code rc;
  bool f;
  if ((rc = read_count(fid, file, DETECTOR "/x_pixels_in_detector", &m->x_pixels, &m->has_x_pixels, err)) ||
      (rc = read_count(fid, file, DETECTOR "/y_pixels_in_detector", &m->y_pixels, &m->has_y_pixels, err)) ||
      (rc = read_count(fid, file, DETECTOR "/detectorSpecific/nimages", &m->nimages, &m->has_nimages, err)) ||
      (rc = read_count(fid, file, DETECTOR "/detectorSpecific/ntrigger", &m->ntrigger, &m->has_ntrigger, err)) ||
      (rc = read_scalar(fid, file, DETECTOR "/count_time", &m->count_time, &m->has_count_time, err)) ||
      (rc = read_scalar(fid, file, DETECTOR "/frame_time", &m->frame_time, &m->has_frame_time, err)))
    return rc;
  static const char *sat_paths[2] = {DETECTOR "/saturation_value",
                                     DETECTOR "/detectorSpecific/countrate_correction_count_cutoff"};
  for (int i = 0; i < 2 && !m->has_saturation_value; i++) {
    int64_t v = 0;
    if ((rc = read_count(fid, file, sat_paths[i], &v, &f, err))) return rc;
    if (f) {
      m->has_saturation_value = true;
      m->saturation_value = (uint64_t)v;
      m->saturation_source = sat_paths[i];
    }
  }
  /* Frames beyond what the detector says it recorded mean inconsistent files. */
  if (m->has_nimages && m->nimages > 0) {
    int64_t expect = m->nimages * (m->has_ntrigger && m->ntrigger > 0 ? m->ntrigger : 1);
    if (ix->n_frames > expect)
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                     "the data files hold %lld frames, more than nimages x ntrigger = %lld",
                     (long long)ix->n_frames, (long long)expect);
  }

  const char *mp = DETECTOR "/detectorSpecific/pixel_mask";
  if (!path_exists(fid, mp)) return SL_OK;
  hid_t d = H5Dopen2(fid, mp, H5P_DEFAULT);
  if (d < 0) return SL_OK;
  hid_t sp = H5Dget_space(d), t = H5Dget_type(d);
  hsize_t dims[2] = {0, 0};
  rc = SL_OK;
  if (H5Sget_simple_extent_ndims(sp) != 2 || H5Tget_class(t) != H5T_INTEGER) {
    char tn[64];
    dtype_name(t, tn, sizeof tn);
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s should be a 2-D integer array, found rank %d %s", mp,
                 H5Sget_simple_extent_ndims(sp), tn);
  } else if (H5Sget_simple_extent_dims(sp, dims, NULL),
             (int64_t)dims[0] != ix->frame_rows || (int64_t)dims[1] != ix->frame_cols) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "%s is %llu x %llu, but frames are %lld x %lld", mp,
                 (unsigned long long)dims[0], (unsigned long long)dims[1], (long long)ix->frame_rows,
                 (long long)ix->frame_cols);
  } else {
    size_t n = (size_t)(ix->frame_rows * ix->frame_cols);
    m->pixel_mask = malloc(n * sizeof *m->pixel_mask);
    if (!m->pixel_mask) {
      rc = sl_fail(err, SL_ERR_NOMEM, "out of memory for the pixel mask");
    } else if (H5Dread(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->pixel_mask) < 0) {
      rc = sl_fail_in(err, SL_ERR_FORMAT, file, "cannot read %s", mp);
      free(m->pixel_mask);
      m->pixel_mask = NULL;
    } else {
      m->has_pixel_mask = true;
      for (size_t i = 0; i < n; i++) m->n_bad_pixels += m->pixel_mask[i] > 0;
    }
  }
  H5Tclose(t);
  H5Sclose(sp);
  H5Dclose(d);
  return rc;
}

/* ---- the whole index ----------------------------------------------------- */

static sl_code build(builder *b, const char *path, const char *dataset, sl_error *err) {
  sl_h5_index *ix = b->ix;
  sl_code rc = open_h5(path, &b->master, err);
  if (rc) return rc;
  sl_dirname(path, b->dir, sizeof b->dir);

  if (dataset) {
    if (!path_exists(b->master, dataset))
      return sl_fail_in(err, SL_ERR_FORMAT, path, "no dataset %s", dataset);
    size_t n = strlen("dataset:") + strlen(dataset) + 1;
    ix->layout = malloc(n);
    if (!ix->layout) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
    snprintf(ix->layout, n, "dataset:%s", dataset);
    if ((rc = resolve(b, path, dataset, err))) return rc;
  } else if (path_exists(b->master, "/entry/data/data_000001")) {
    ix->layout = sl_strdup("dectris-master");
    scan_links s = {0, 0};
    hid_t g = H5Gopen2(b->master, "/entry/data", H5P_DEFAULT);
    if (g < 0) return sl_fail_in(err, SL_ERR_FORMAT, path, "cannot open group /entry/data");
    herr_t it = H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, scan_links_cb, &s);
    H5Gclose(g);
    if (it < 0) return sl_fail_in(err, SL_ERR_FORMAT, path, "cannot list group /entry/data");
    if (s.max_index > MAX_LINKS || s.count != s.max_index) {
      for (long i = 1; i <= s.max_index; i++) {
        char name[64];
        snprintf(name, sizeof name, "/entry/data/data_%06ld", i);
        if (!path_exists(b->master, name))
          return sl_fail_in(err, SL_ERR_FORMAT, path,
                         "link /entry/data/data_%06ld is missing but data_%06ld exists (links must be consecutive from data_000001)", i, s.max_index);
      }
      return sl_fail_in(err, SL_ERR_FORMAT, path, "inconsistent data_NNNNNN links in /entry/data");
    }
    for (long i = 1; i <= s.max_index; i++) {
      char name[64];
      snprintf(name, sizeof name, "/entry/data/data_%06ld", i);
      if ((rc = resolve(b, path, name, err))) return rc;
    }
  } else if (path_exists(b->master, "/entry/data/data")) {
    ix->layout = sl_strdup("single");
    if ((rc = resolve(b, path, "/entry/data/data", err))) return rc;
  } else {
    return sl_fail_in(err, SL_ERR_FORMAT, path,
                   "found neither /entry/data/data_000001 (Dectris master) nor /entry/data/data; give the dataset path");
  }

  /* Shape, dtype, layout and filter of every part; all must agree. */
  int64_t total = 0, total_chunks = 0;
  for (int i = 0; i < b->n_parts; i++) {
    part *p = &b->parts[i];
    if ((rc = inspect(b, p, err))) return rc;
    const part *q = &b->parts[0];
    const char *file = ix->files[p->file];
    if (p->h != q->h || p->w != q->w || p->elem_size != q->elem_size || p->is_signed != q->is_signed)
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                     "dataset %s holds %lld x %lld %s%d-byte frames; %s holds %lld x %lld %s%d-byte frames",
                     p->link, (long long)p->h, (long long)p->w, p->is_signed ? "signed " : "unsigned ", p->elem_size,
                     q->link, (long long)q->h, (long long)q->w, q->is_signed ? "signed " : "unsigned ", q->elem_size);
    if (p->chunked != q->chunked)
      return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s is %s but %s is %s: mixed layouts are not supported", p->link, p->chunked ? "chunked" : "contiguous", q->link,
                     q->chunked ? "chunked" : "contiguous");
    if (p->filter != q->filter)
      return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s uses filter %d but %s uses filter %d", p->link,
                     p->filter, q->link, q->filter);
    if (p->chunked && p->k != q->k)
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                     "dataset %s has chunks of %lld frames but %s has chunks of %lld: not supported",
                     p->link, (long long)p->k, q->link, (long long)q->k);
    if ((rc = check_image_nr(file, p, total, err))) return rc;
    total += p->n;
    total_chunks += p->chunked ? (p->n + p->k - 1) / p->k : p->n;
    if (total_chunks > INT_MAX)
      return sl_fail_in(err, SL_ERR_FORMAT, file, "more than %d chunks: not supported", INT_MAX);
  }
  const part *q = &b->parts[0];
  ix->n_frames = total;
  ix->frame_rows = q->h;
  ix->frame_cols = q->w;
  ix->elem_size = q->elem_size;
  ix->is_signed = q->is_signed;
  ix->frame_bytes = (uint64_t)q->h * (uint64_t)q->w * (uint64_t)q->elem_size;
  ix->contiguous = !q->chunked;
  ix->frames_per_chunk = q->chunked ? q->k : 1;
  ix->filter = q->filter;
  ix->n_cd_values = q->n_cd;
  memcpy(ix->bs_cd_values, q->cd, sizeof ix->bs_cd_values);

  ix->chunks = calloc((size_t)total_chunks ? (size_t)total_chunks : 1, sizeof *ix->chunks);
  if (!ix->chunks) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk entries", (long long)total_chunks);
  int64_t next = 0, frame = 0;
  for (int i = 0; i < b->n_parts; i++) {
    if ((rc = list_chunks(b, &b->parts[i], frame, &next, err))) return rc;
    frame += b->parts[i].n;
  }
  ix->n_chunks = (int)next;
  for (int i = 0; i < ix->n_chunks; i++)
    if (ix->chunks[i].size > ix->max_chunk_size) ix->max_chunk_size = ix->chunks[i].size;

  return read_meta(ix, b->master, path, err);
}

sl_code sl_h5_index_open(const char *path, const char *dataset, sl_h5_index **out, sl_error *err) {
  *out = NULL;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  builder b;
  memset(&b, 0, sizeof b);
  b.master = H5I_INVALID_HID;
  b.ix = sl_xcalloc(1, sizeof *b.ix);
  b.ix->source = sl_strdup(path);
  sl_code rc = build(&b, path, dataset, err);
  for (int i = 0; i < b.n_parts; i++) {
    if (b.parts[i].did >= 0) H5Dclose(b.parts[i].did);
    if (b.parts[i].fid >= 0) H5Fclose(b.parts[i].fid);
    free(b.parts[i].link);
  }
  free(b.parts);
  if (b.master >= 0) H5Fclose(b.master);
  if (rc) {
    sl_h5_index_free(b.ix);
    return rc;
  }
  *out = b.ix;
  return SL_OK;
}

void sl_h5_index_free(sl_h5_index *ix) {
  if (!ix) return;
  for (int i = 0; i < ix->n_files; i++) free(ix->files[i]);
  free(ix->files);
  free(ix->source);
  free(ix->layout);
  free(ix->chunks);
  free(ix->meta.pixel_mask);
  free(ix);
}

int64_t sl_h5_index_chunk_of_frame(const sl_h5_index *ix, int64_t frame) {
  if (!ix || frame < 0 || frame >= ix->n_frames || ix->n_chunks == 0) return -1;
  int64_t lo = 0, hi = ix->n_chunks - 1;
  while (lo < hi) { /* last chunk with first_frame <= frame */
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (ix->chunks[mid].first_frame <= frame)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

uint64_t sl_h5_window_bytes(const sl_h5_index *ix, int64_t first, int64_t count) {
  if (!ix || first < 0 || count <= 0 || first > ix->n_chunks || count > ix->n_chunks - first) return 0;
  uint64_t s = 0;
  for (int64_t i = first; i < first + count; i++) s += ix->chunks[i].size;
  return s;
}

void sl_h5_window_offsets(const sl_h5_index *ix, int64_t first, int64_t count, uint64_t *offsets) {
  uint64_t s = 0;
  for (int64_t j = 0; j < count; j++) {
    offsets[j] = s;
    s += ix->chunks[first + j].size;
  }
  offsets[count < 0 ? 0 : count] = s;
}
