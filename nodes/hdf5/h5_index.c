/* Chunk index of a detector acquisition in HDF5 (Dectris / Arina layout):
 * which datasets hold the frames (links of a master file, resolved here),
 * that they agree (describing), and the index of all their chunks (listing).
 * Each dataset is inspected in h5_dataset.c, its chunks listed in
 * h5_chunk_list.c, the detector metadata read in h5_detector_meta.c. See
 * h5_index.h and docs/formats/dectris-hdf5.md. */
#include "nodes/hdf5/h5_index.h"

#include <errno.h>
#include <limits.h>
#include <lz4.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/core/util.h"
#include "nodes/codec/bslz4.h"
#include "nodes/hdf5/h5_dataset.h"

/* Highest data_NNNNNN link of a master file. */
#define MAX_LINKS 999999

typedef struct builder {
  sl_h5_index *ix;
  sl_h5_dataset *datasets;
  int n_datasets, cap_datasets;
  hid_t master;
  char dir[4096]; /* the master's folder: external links are relative to it */
  int64_t chunks; /* stored chunks of the datasets taken so far */
  int64_t frames; /* frames of the datasets taken so far */
} builder;

static sl_code take_dataset(builder *b, sl_h5_dataset *d, sl_error *err);

/* The index of `path` in the index's files, added if new; -1 when out of
 * memory. */
static int add_file(builder *b, const char *path) {
  sl_h5_index *ix = b->ix;
  for (int i = 0; i < ix->n_files; i++)
    if (!strcmp(ix->files[i], path)) return i;
  char *copy = sl_strdup(path);
  if (!copy || !sl_resize(&ix->files, (size_t)ix->n_files + 1, sizeof *ix->files)) {
    free(copy);
    return -1;
  }
  ix->files[ix->n_files] = copy;
  return ix->n_files++;
}

/* NULL when out of memory. */
static sl_h5_dataset *add_dataset(builder *b) {
  if (b->n_datasets == b->cap_datasets) {
    int cap = b->cap_datasets ? 2 * b->cap_datasets : 8;
    if (!sl_resize(&b->datasets, (size_t)cap, sizeof *b->datasets)) return NULL;
    b->cap_datasets = cap;
  }
  sl_h5_dataset *d = &b->datasets[b->n_datasets++];
  memset(d, 0, sizeof *d);
  d->fid = H5I_INVALID_HID;
  d->did = H5I_INVALID_HID;
  return d;
}

/* ---- resolving datasets -------------------------------------------------- */

/* Opens the dataset `obj` of the data file an external link names. */
static sl_code open_external(builder *b, sl_h5_dataset *d, const char *master_path, const char *link,
                             const char *fname, const char *obj, sl_error *err) {
  char target[4096];
  sl_path_join(b->dir, fname, target, sizeof target);
  struct stat st;
  if (stat(target, &st) != 0)
    return sl_fail_in(err, SL_ERR_IO, master_path,
                      "link %s points to data file '%s', which is missing: %s (%s)", link, fname,
                      target, strerror(errno));
  sl_code rc = sl_h5_file_open(target, &d->fid, err);
  if (rc) {
    char suffix[4096];
    snprintf(suffix, sizeof suffix, " (data file of link %s in %s)", link, master_path);
    sl_h5_error_wrap(err, "", suffix);
    return rc;
  }
  d->file = add_file(b, target);
  d->object = sl_strdup(obj);
  if (d->file < 0 || !d->object)
    return sl_fail_in(err, SL_ERR_NOMEM, master_path, "out of memory for the data file of link %s", link);
  if (!sl_h5_path_exists(d->fid, obj) || (d->did = H5Dopen2(d->fid, obj, H5P_DEFAULT)) < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, target, "no dataset %s (target of link %s in %s)", obj, link,
                      master_path);
  return SL_OK;
}

/* Finds the dataset behind `link` in the master file: an external link is
 * resolved relative to the master's folder (never HDF5's prefix or the cwd);
 * a hard or soft link is a dataset in the master itself. */
static sl_code resolve(builder *b, const char *master_path, const char *link, sl_error *err) {
  H5L_info_t li;
  if (H5Lget_info(b->master, link, &li, H5P_DEFAULT) < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "cannot read link %s", link);
  sl_h5_dataset *d = add_dataset(b);
  if (d && !(d->link = sl_strdup(link))) d = NULL; /* counted: freed with the builder */
  if (!d) return sl_fail_in(err, SL_ERR_NOMEM, master_path, "out of memory for the dataset of link %s", link);
  if (li.type == H5L_TYPE_EXTERNAL) {
    size_t n = li.u.val_size;
    if (n == 0 || n > 65536)
      return sl_fail_in(err, SL_ERR_FORMAT, master_path, "external link %s has a bad value size %zu",
                        link, n);
    char *val = malloc(n);
    if (!val) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
    const char *fname = NULL, *obj = NULL;
    unsigned flags = 0;
    sl_code rc;
    if (H5Lget_val(b->master, link, val, n, H5P_DEFAULT) < 0 ||
        H5Lunpack_elink_val(val, n, &flags, &fname, &obj) < 0 || !fname || !obj || !fname[0] ||
        !memchr(val, 0, n))
      rc = sl_fail_in(err, SL_ERR_FORMAT, master_path, "cannot decode external link %s", link);
    else
      rc = open_external(b, d, master_path, link, fname, obj, err);
    free(val);
    return rc ? rc : take_dataset(b, d, err);
  }
  if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "link %s has an unsupported link type %d",
                      link, (int)li.type);
  d->file = add_file(b, master_path);
  if (d->file < 0) return sl_fail_in(err, SL_ERR_NOMEM, master_path, "out of memory for the list of files");
  d->did = H5Dopen2(b->master, link, H5P_DEFAULT);
  if (d->did < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, master_path, "%s is not a dataset (or a dangling link)",
                      link);
  return take_dataset(b, d, err);
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

/* A Dectris master: /entry/data/data_000001, data_000002, ... consecutive. */
static sl_code resolve_master_links(builder *b, const char *path, sl_error *err) {
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
      if (!sl_h5_path_exists(b->master, name))
        return sl_fail_in(err, SL_ERR_FORMAT, path,
                          "link /entry/data/data_%06ld is missing but data_%06ld exists (links "
                          "must be consecutive from data_000001)",
                          i, s.max_index);
    }
    return sl_fail_in(err, SL_ERR_FORMAT, path, "inconsistent data_NNNNNN links in /entry/data");
  }
  for (long i = 1; i <= s.max_index; i++) {
    char name[64];
    snprintf(name, sizeof name, "/entry/data/data_%06ld", i);
    sl_code rc = resolve(b, path, name, err);
    if (rc) return rc;
  }
  return SL_OK;
}

/* The datasets that hold the frames, by the `dataset` argument or the layout. */
static sl_code resolve_layout(builder *b, const char *path, const char *dataset, sl_error *err) {
  sl_h5_index *ix = b->ix;
  if (dataset) {
    if (!sl_h5_path_exists(b->master, dataset))
      return sl_fail_in(err, SL_ERR_FORMAT, path, "no dataset %s", dataset);
    size_t n = strlen("dataset:") + strlen(dataset) + 1;
    ix->layout = malloc(n);
    if (!ix->layout) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
    snprintf(ix->layout, n, "dataset:%s", dataset);
    return resolve(b, path, dataset, err);
  }
  if (sl_h5_path_exists(b->master, "/entry/data/data_000001")) {
    if (!(ix->layout = sl_strdup("dectris-master")))
      return sl_fail_in(err, SL_ERR_NOMEM, path, "out of memory for the layout's name");
    return resolve_master_links(b, path, err);
  }
  if (sl_h5_path_exists(b->master, "/entry/data/data")) {
    if (!(ix->layout = sl_strdup("single")))
      return sl_fail_in(err, SL_ERR_NOMEM, path, "out of memory for the layout's name");
    return resolve(b, path, "/entry/data/data", err);
  }
  return sl_fail_in(err, SL_ERR_FORMAT, path,
                    "found neither /entry/data/data_000001 (Dectris master) nor /entry/data/data; "
                    "give the dataset path");
}

/* ---- the whole index ----------------------------------------------------- */

/* Dataset d must hold frames like the first one q, stored the same way. */
static sl_code check_agrees(const sl_h5_dataset *d, const sl_h5_dataset *q, const char *file,
                            sl_error *err) {
  if (d->h != q->h || d->w != q->w || d->elem_size != q->elem_size || d->is_signed != q->is_signed)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s holds %lld x %lld %s%d-byte frames; %s holds %lld x %lld %s%d-byte "
                      "frames",
                      d->link, (long long)d->h, (long long)d->w, d->is_signed ? "signed " : "unsigned ",
                      d->elem_size, q->link, (long long)q->h, (long long)q->w,
                      q->is_signed ? "signed " : "unsigned ", q->elem_size);
  if (d->chunked != q->chunked)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s is %s but %s is %s: mixed layouts are not supported", d->link,
                      d->chunked ? "chunked" : "contiguous", q->link,
                      q->chunked ? "chunked" : "contiguous");
  if (d->filter != q->filter)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s uses filter %d but %s uses filter %d",
                      d->link, d->filter, q->link, q->filter);
  if (d->chunked && d->frames_per_chunk != q->frames_per_chunk)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s has chunks of %lld frames but %s has chunks of %lld: not supported",
                      d->link, (long long)d->frames_per_chunk, q->link,
                      (long long)q->frames_per_chunk);
  return SL_OK;
}

/* The index's frame facts, from the first dataset (the others must agree). */
static void set_frame_facts(sl_h5_index *ix, const sl_h5_dataset *q) {
  ix->frame_rows = q->h;
  ix->frame_cols = q->w;
  ix->elem_size = q->elem_size;
  ix->is_signed = q->is_signed;
  ix->frame_bytes = (uint64_t)q->h * (uint64_t)q->w * (uint64_t)q->elem_size;
  ix->contiguous = !q->chunked;
  ix->frames_per_chunk = q->chunked ? q->frames_per_chunk : 1;
  ix->filter = q->filter;
  ix->n_cd_values = q->n_cd;
  memcpy(ix->bs_cd_values, q->cd, sizeof ix->bs_cd_values);
}

static void close_dataset(const builder *b, sl_h5_dataset *d) {
  if (d->did >= 0) H5Dclose(d->did);
  if (d->fid >= 0 && d->fid != b->master) H5Fclose(d->fid);
  d->did = d->fid = H5I_INVALID_HID;
}

/* The stored chunks of a dataset inspect accepted: one per frame when
 * contiguous. */
static int64_t chunks_of(const sl_h5_dataset *d) {
  return d->chunked ? (d->n + d->frames_per_chunk - 1) / d->frames_per_chunk : d->n;
}

/* Records dataset d (its frames from global frame b->frames) as a part of
 * the index: where it is, its frames and its stored chunks. False when out
 * of memory. */
static bool add_part(builder *b, const sl_h5_dataset *d) {
  sl_h5_index *ix = b->ix;
  if (!sl_resize(&ix->parts, (size_t)ix->n_parts + 1, sizeof *ix->parts)) return false;
  sl_h5_part *p = &ix->parts[ix->n_parts++];
  memset(p, 0, sizeof *p);
  p->file = d->file;
  p->object = sl_strdup(d->object ? d->object : d->link);
  p->link = sl_strdup(d->link);
  if (!p->object || !p->link) return false; /* counted: freed with the index */
  p->first_frame = b->frames;
  p->n_frames = d->n;
  p->first_chunk = b->chunks;
  p->n_chunks = chunks_of(d);
  /* the last stored chunk holds what is left of the frames */
  int64_t last = d->chunked ? d->n - (p->n_chunks - 1) * d->frames_per_chunk : 1;
  if (ix->min_chunk_frames == 0 || last < ix->min_chunk_frames) ix->min_chunk_frames = last;
  if (p->n_chunks > ix->max_part_chunks) ix->max_part_chunks = p->n_chunks;
  return true;
}

/* A dataset just opened: inspected, checked against the first, recorded as
 * a part, and closed. Its chunks are not listed (sl_h5_index_list_chunks).
 * One data file is open at a time: HDF5 keeps caches per open file (about a
 * megabyte each), so holding all of a few hundred data files open cost
 * hundreds of MiB and most of the time. */
static sl_code take_dataset(builder *b, sl_h5_dataset *d, sl_error *err) {
  sl_h5_index *ix = b->ix;
  const char *file = ix->files[d->file];
  sl_code rc = sl_h5_dataset_inspect(d, file, err);
  if (rc == SL_OK && d == &b->datasets[0]) {
    set_frame_facts(ix, d);
    ix->meta.has_scan_shape = sl_h5_dataset_scan_shape(d, &ix->meta.scan_rows, &ix->meta.scan_cols);
  }
  if (rc == SL_OK) rc = check_agrees(d, &b->datasets[0], file, err);
  if (rc == SL_OK) rc = sl_h5_dataset_check_image_nr(d, file, b->frames, err);
  /* (inspect refused a dataset without a valid chunk shape: no division then) */
  if (rc == SL_OK && b->chunks + chunks_of(d) > INT_MAX)
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "more than %d chunks: not supported", INT_MAX);
  if (rc == SL_OK && !add_part(b, d))
    rc = sl_fail_in(err, SL_ERR_NOMEM, file, "out of memory for the parts of the index");
  if (rc == SL_OK) {
    b->frames += d->n;
    b->chunks += chunks_of(d);
  }
  close_dataset(b, d);
  return rc;
}

static sl_code build(builder *b, const char *path, const char *dataset, sl_error *err) {
  sl_h5_index *ix = b->ix;
  sl_code rc = sl_h5_file_open(path, &b->master, err);
  if (rc) return rc;
  sl_dirname(path, b->dir, sizeof b->dir);
  if ((rc = resolve_layout(b, path, dataset, err))) return rc;
  ix->n_frames = b->frames;
  ix->n_chunks = (int)b->chunks;
  return sl_h5_detector_meta_read(ix, b->master, path, err);
}

sl_code sl_h5_index_describe(const char *path, const char *dataset, sl_h5_index **out, sl_error *err) {
  *out = NULL;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  builder b;
  memset(&b, 0, sizeof b);
  b.master = H5I_INVALID_HID;
  b.ix = sl_calloc(1, sizeof *b.ix);
  if (b.ix && !(b.ix->source = sl_strdup(path))) {
    sl_h5_index_free(b.ix);
    b.ix = NULL;
  }
  if (!b.ix) return sl_fail_in(err, SL_ERR_NOMEM, path, "out of memory for a chunk index");
  sl_code rc = build(&b, path, dataset, err);
  for (int i = 0; i < b.n_datasets; i++) {
    close_dataset(&b, &b.datasets[i]);
    free(b.datasets[i].link);
    free(b.datasets[i].object);
  }
  free(b.datasets);
  if (b.master >= 0) H5Fclose(b.master);
  if (rc) {
    sl_h5_index_free(b.ix);
    return rc;
  }
  *out = b.ix;
  return SL_OK;
}

/* ---- listing ------------------------------------------------------------- */

static _Atomic uint64_t g_listings;

uint64_t sl_h5_index_listings(void) { return atomic_load(&g_listings); }

/* Dataset d, opened again for listing, must be what describing found. */
static sl_code check_unchanged(const sl_h5_index *ix, const sl_h5_part *p, const sl_h5_dataset *d,
                               const char *file, sl_error *err) {
  bool same = d->n == p->n_frames && d->h == ix->frame_rows && d->w == ix->frame_cols &&
              d->elem_size == ix->elem_size && d->is_signed == ix->is_signed && d->chunked == !ix->contiguous &&
              d->filter == ix->filter && (!d->chunked || d->frames_per_chunk == ix->frames_per_chunk);
  if (same) return SL_OK;
  return sl_fail_in(err, SL_ERR_IO, file,
                    "dataset %s changed since %s was read for planning (it held %lld frames of %lld x %lld, "
                    "it now holds %lld of %lld x %lld, or its storage changed)",
                    p->link, ix->source, (long long)p->n_frames, (long long)ix->frame_rows,
                    (long long)ix->frame_cols, (long long)d->n, (long long)d->h, (long long)d->w);
}

/* The stored chunks of part p into out (its n_chunks entries). */
static sl_code list_part(const sl_h5_index *ix, const sl_h5_part *p, sl_h5_chunk *out, sl_error *err) {
  const char *file = ix->files[p->file];
  sl_h5_dataset d;
  memset(&d, 0, sizeof d);
  d.link = p->link;
  d.file = p->file;
  d.fid = d.did = H5I_INVALID_HID;
  sl_code rc = sl_h5_file_open(file, &d.fid, err);
  if (rc != SL_OK) return rc;
  if (!sl_h5_path_exists(d.fid, p->object) || (d.did = H5Dopen2(d.fid, p->object, H5P_DEFAULT)) < 0)
    rc = sl_fail_in(err, SL_ERR_IO, file, "dataset %s (%s) is gone since %s was read for planning",
                    p->link, p->object, ix->source);
  if (rc == SL_OK) rc = sl_h5_dataset_inspect(&d, file, err);
  if (rc == SL_OK) rc = check_unchanged(ix, p, &d, file, err);
  if (rc == SL_OK) rc = sl_h5_dataset_list_chunks(ix, &d, p->first_frame, out, err);
  if (d.did >= 0) H5Dclose(d.did);
  H5Fclose(d.fid);
  return rc;
}

sl_code sl_h5_index_list_chunks(const sl_h5_index *ix, sl_h5_chunk **chunks, uint64_t *max_chunk_size,
                                sl_error *err) {
  *chunks = NULL;
  *max_chunk_size = 0;
  atomic_fetch_add(&g_listings, 1);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  sl_h5_chunk *all = malloc((size_t)(ix->n_chunks > 0 ? ix->n_chunks : 1) * sizeof *all);
  if (!all)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for %d chunk entries of %s", ix->n_chunks, ix->source);
  sl_code rc = SL_OK;
  for (int i = 0; i < ix->n_parts && rc == SL_OK; i++)
    rc = list_part(ix, &ix->parts[i], all + ix->parts[i].first_chunk, err);
  if (rc != SL_OK) {
    free(all);
    return rc;
  }
  for (int i = 0; i < ix->n_chunks; i++)
    if (all[i].size > *max_chunk_size) *max_chunk_size = all[i].size;
  *chunks = all;
  return SL_OK;
}

void sl_h5_index_set_chunks(sl_h5_index *ix, sl_h5_chunk *chunks, uint64_t max_chunk_size) {
  free(ix->chunks);
  ix->chunks = chunks;
  ix->max_chunk_size = max_chunk_size;
  ix->listed = true;
}

sl_code sl_h5_index_open(const char *path, const char *dataset, sl_h5_index **out, sl_error *err) {
  sl_h5_index *ix = NULL;
  sl_code rc = sl_h5_index_describe(path, dataset, &ix, err);
  if (rc != SL_OK) return rc;
  sl_h5_chunk *chunks = NULL;
  uint64_t max = 0;
  if ((rc = sl_h5_index_list_chunks(ix, &chunks, &max, err)) != SL_OK) {
    sl_h5_index_free(ix);
    *out = NULL;
    return rc;
  }
  sl_h5_index_set_chunks(ix, chunks, max);
  *out = ix;
  return SL_OK;
}

void sl_h5_index_free(sl_h5_index *ix) {
  if (!ix) return;
  for (int i = 0; i < ix->n_parts; i++) {
    free(ix->parts[i].object);
    free(ix->parts[i].link);
  }
  free(ix->parts);
  for (int i = 0; i < ix->n_files; i++) free(ix->files[i]);
  free(ix->files);
  free(ix->source);
  free(ix->layout);
  free(ix->chunks);
  free(ix->meta.pixel_mask);
  free(ix);
}

/* ---- queries ------------------------------------------------------------- */

/* bitshuffle's bshuf_compress_lz4_bound for n elements of s bytes in blocks
 * of bs elements: full blocks, a last block rounded down to 8 elements, each
 * with its 4-byte length and LZ4's worst case, then the last n % 8 elements
 * as they are; plus the chunk's 12-byte header. */
static uint64_t bslz4_bound(uint64_t n, uint64_t s, uint64_t bs) {
  uint64_t b = 12 + (n / bs) * (4 + (uint64_t)LZ4_COMPRESSBOUND(bs * s));
  uint64_t last = (n % bs) / 8 * 8;
  if (last) b += 4 + (uint64_t)LZ4_COMPRESSBOUND(last * s);
  return b + (n % 8) * s;
}

uint64_t sl_h5_index_chunk_bound(const sl_h5_index *ix) {
  uint64_t raw = (uint64_t)ix->frames_per_chunk * ix->frame_bytes;
  sl_encoding enc;
  int64_t block = 0;
  sl_error ignored;
  sl_error_clear(&ignored);
  if (ix->filter != SL_H5_FILTER_BITSHUFFLE || sl_h5_index_encoding(ix, &enc, &block, &ignored) != SL_OK ||
      enc != SL_ENC_BSLZ4)
    return raw; /* as they are (a compression sluice refuses to read anyway) */
  uint64_t s = (uint64_t)ix->elem_size;
  uint64_t bs = block > 0 ? (uint64_t)block : sl_bshuf_default_block_elems((size_t)s);
  uint64_t b = bslz4_bound(raw / s, s, bs);
  uint64_t cap = sl_h5_stored_chunk_cap(raw);
  return b < cap ? b : cap;
}

uint64_t sl_h5_index_host_bytes(const sl_h5_index *ix) {
  uint64_t b = sizeof *ix + (uint64_t)ix->n_chunks * sizeof(sl_h5_chunk) +
               (uint64_t)ix->n_parts * sizeof(sl_h5_part) + (uint64_t)ix->n_files * sizeof(char *);
  for (int i = 0; i < ix->n_files; i++) b += strlen(ix->files[i]) + 1;
  for (int i = 0; i < ix->n_parts; i++) b += strlen(ix->parts[i].object) + strlen(ix->parts[i].link) + 2;
  if (ix->meta.pixel_mask) b += (uint64_t)(ix->frame_rows * ix->frame_cols) * sizeof *ix->meta.pixel_mask;
  /* HDF5's own state while a data file is open for listing (one at a time):
   * its metadata cache starts at 2 MiB (H5AC's default initial size); an
   * index read back from the store lists nothing. */
  if (ix->from_store) return b;
  const uint64_t open_file = 2u << 20;
  return b + sl_h5_dataset_list_scratch_bytes(ix->max_part_chunks) + open_file;
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

bool sl_h5_index_scan_shape(const sl_h5_index *ix, int64_t *rows, int64_t *cols) {
  if (ix->n_parts != 1 || !ix->meta.has_scan_shape) return false;
  *rows = ix->meta.scan_rows, *cols = ix->meta.scan_cols;
  return true;
}

sl_code sl_h5_index_encoding(const sl_h5_index *ix, sl_encoding *enc, int64_t *block_elems, sl_error *err) {
  *enc = SL_ENC_NONE;
  *block_elems = 0;
  if (ix->filter != SL_H5_FILTER_BITSHUFFLE) return SL_OK;
  unsigned compression = ix->n_cd_values > 4 ? ix->bs_cd_values[4] : 0;
  if (compression == 2) *enc = SL_ENC_BSLZ4;
  else if (compression == 0) *enc = SL_ENC_BITSHUFFLE;
  else
    return sl_fail(err, SL_ERR_FORMAT, "%s: bitshuffle compression %u is not supported (2 = LZ4, 0 = none)",
                   ix->source, compression);
  *block_elems = ix->n_cd_values > 3 ? ix->bs_cd_values[3] : 0;
  return SL_OK;
}
