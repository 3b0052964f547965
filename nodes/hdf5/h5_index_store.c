/* Chunk indexes kept between processes. See h5_index_store.h.
 *
 * An entry is one binary file, host byte order (a cache, read only by the
 * machine that wrote it): a header naming the working directory, the master
 * path as given and the dataset (data file paths in the index are relative
 * to them), the master's identity, every data file with its identity, the
 * described index, its chunks, and a checksum of all that (sl_checksum64). Every
 * read is bounds-checked: a short, foreign or corrupt entry is no entry.
 * The cache is bounded (setting index_store_bytes, and a number of
 * entries): keeping an entry removes those used longest ago. */
#define _POSIX_C_SOURCE 200809L
#include "nodes/hdf5/h5_index_store.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/core/settings.h"
#include "engine/core/util.h"

#define STORE_MAGIC "SLIDX02\n"
/* Entries above this are not kept (5 M chunks): a load holds the whole
 * entry in memory. */
#define STORE_MAX_BYTES ((uint64_t)256 << 20)
/* The most entries the cache holds (besides the setting index_store_bytes):
 * a bound for many small acquisitions, whose entries the bytes never reach. */
#define STORE_MAX_ENTRIES 4096
/* A temporary entry of a process that died before renaming it is removed
 * once it is this old (a live writer renames its own within seconds). */
#define STORE_TMP_STALE_SECONDS 3600

typedef struct identity {
  uint64_t dev, ino;
  int64_t size, sec, nsec;
} identity;

static bool identity_of(const char *path, identity *id) {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  *id = (identity){(uint64_t)st.st_dev, (uint64_t)st.st_ino, (int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec,
                   (int64_t)st.st_mtim.tv_nsec};
  return true;
}

bool sl_h5_index_store_path(const char *path, const char *dataset, char *buf, size_t len) {
  char dir[3000], cwd[2048];
  if (!sl_user_cache_dir(dir, sizeof dir) || !getcwd(cwd, sizeof cwd)) return false;
  uint64_t h = SL_FNV1A_START;
  h = sl_fnv1a(cwd, strlen(cwd) + 1, h);
  h = sl_fnv1a(path, strlen(path) + 1, h);
  h = sl_fnv1a(dataset ? dataset : "", strlen(dataset ? dataset : "") + 1, h);
  int n = snprintf(buf, len, "%s/index/%016llx.idx", dir, (unsigned long long)h);
  return n > 0 && (size_t)n < len;
}

/* ---- writing: straight into the entry's file ---------------------------- */

/* The entry goes to a temporary file as it is made, summed on the way: no
 * copy of the index (12 MB at 262,144 chunks) beside the index itself,
 * which the plan does not count. A failed write leaves failed set and the
 * rest ignored; the run goes on. */
typedef struct wbuf {
  FILE *f;
  sl_checksum64_state sum;
  uint64_t n;
  bool failed;
} wbuf;

static void put(wbuf *b, const void *v, size_t n) {
  if (b->failed) return;
  if (b->n + n >= STORE_MAX_BYTES || fwrite(v, 1, n, b->f) != n) {
    b->failed = true;
    return;
  }
  sl_checksum64_add(&b->sum, v, n);
  b->n += n;
}

#define PUT(b, v) put(b, &(v), sizeof(v))

static void put_str(wbuf *b, const char *s) {
  uint32_t n = s ? (uint32_t)strlen(s) : UINT32_MAX; /* NULL is not "" */
  PUT(b, n);
  if (s) put(b, s, n);
}

static void put_header(wbuf *b, const char *cwd, const char *path, const char *dataset, const identity *master) {
  put(b, STORE_MAGIC, 8);
  put_str(b, cwd);
  put_str(b, path);
  put_str(b, dataset ? dataset : "");
  PUT(b, *master);
}

static void put_entry(wbuf *b, const char *cwd, const char *path, const char *dataset, const identity *master,
                      const sl_h5_index *ix) {
  put_header(b, cwd, path, dataset, master);
  int32_t nf = ix->n_files;
  PUT(b, nf);
  for (int i = 0; i < ix->n_files; i++) {
    identity id;
    if (!identity_of(ix->files[i], &id)) {
      b->failed = true;
      return;
    }
    put_str(b, ix->files[i]);
    PUT(b, id);
  }
  put_str(b, ix->source);
  put_str(b, ix->layout);
  /* the described index's scalars, then its parts, metadata and chunks */
  sl_h5_index s = *ix;
  s.files = NULL, s.source = NULL, s.layout = NULL, s.parts = NULL, s.chunks = NULL;
  s.meta.pixel_mask = NULL, s.meta.saturation_source = NULL;
  PUT(b, s);
  for (int i = 0; i < ix->n_parts; i++) {
    sl_h5_part p = ix->parts[i];
    put_str(b, p.object);
    put_str(b, p.link);
    p.object = p.link = NULL;
    PUT(b, p);
  }
  put_str(b, ix->meta.saturation_source);
  if (ix->meta.pixel_mask) put(b, ix->meta.pixel_mask, (size_t)(ix->frame_rows * ix->frame_cols) * sizeof(uint32_t));
  put(b, ix->chunks, (size_t)ix->n_chunks * sizeof *ix->chunks);
  uint64_t sum = sl_checksum64_end(&b->sum);
  put(b, &sum, sizeof sum);
}

/* ---- the cache's bound: the entries used longest ago go ------------------ */

/* The name of an entry (sl_h5_index_store_path: 16 hex digits, ".idx"), or
 * of an entry being written (".idx.tmp-" and a process id): the only files
 * pruning removes. */
static bool entry_name(const char *name, bool *tmp) {
  for (int i = 0; i < 16; i++)
    if (!isxdigit((unsigned char)name[i])) return false;
  if (strncmp(name + 16, ".idx", 4) != 0) return false;
  *tmp = name[20] != 0;
  if (!*tmp) return true;
  if (strncmp(name + 20, ".tmp-", 5) != 0 || !name[25]) return false;
  for (const char *c = name + 25; *c; c++)
    if (!isdigit((unsigned char)*c)) return false;
  return true;
}

typedef struct entry_use {
  char name[21];
  int64_t bytes;
  struct timespec used; /* modification time: written, or read (a load touches it) */
} entry_use;

static int used_earlier(const void *pa, const void *pb) {
  const entry_use *a = pa, *b = pb;
  if (a->used.tv_sec != b->used.tv_sec) return a->used.tv_sec < b->used.tv_sec ? -1 : 1;
  if (a->used.tv_nsec != b->used.tv_nsec) return a->used.tv_nsec < b->used.tv_nsec ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* After entry `keep` was written into dir: while the entries there take more
 * than index_store_bytes (0: no bound) or number more than
 * STORE_MAX_ENTRIES, those used longest ago are removed (never `keep`); and
 * temporary entries left by a process that died. Best effort: a failure
 * leaves the cache as it is. */
static void prune(const char *dir, const char *keep) {
  const int64_t limit = sl_setting_int(SL_SET_INDEX_STORE_BYTES);
  DIR *d = opendir(dir);
  if (!d) return;
  entry_use *e = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  const time_t now = time(NULL);
  for (struct dirent *de; (de = readdir(d));) {
    bool tmp;
    struct stat st;
    if (!entry_name(de->d_name, &tmp) || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode))
      continue;
    if (tmp) {
      if (now - st.st_mtim.tv_sec > STORE_TMP_STALE_SECONDS) (void)unlinkat(dirfd(d), de->d_name, 0);
      continue;
    }
    if (n == cap) {
      entry_use *grown = realloc(e, (cap = cap ? 2 * cap : 256) * sizeof *e);
      if (!grown) break;
      e = grown;
    }
    memcpy(e[n].name, de->d_name, 20); /* entry_name: 20 characters */
    e[n].name[20] = 0;
    e[n].bytes = (int64_t)st.st_size;
    e[n].used = st.st_mtim;
    total += e[n++].bytes;
  }
  if (n > 1) qsort(e, n, sizeof *e, used_earlier);
  size_t left = n;
  for (size_t i = 0; i < n && ((limit > 0 && total > limit) || left > STORE_MAX_ENTRIES); i++) {
    if (strcmp(e[i].name, keep) == 0 || unlinkat(dirfd(d), e[i].name, 0) != 0) continue;
    total -= e[i].bytes;
    left--;
  }
  closedir(d);
  free(e);
}

void sl_h5_index_store_save(const char *path, const char *dataset, const sl_h5_index *ix) {
  char file[4096], tmp[4200], cwd[2048], dir[4096];
  identity master;
  if (!sl_setting_bool(SL_SET_INDEX_STORE) || !ix->listed ||
      (uint64_t)ix->n_chunks * sizeof *ix->chunks >= STORE_MAX_BYTES || !getcwd(cwd, sizeof cwd) ||
      !identity_of(path, &master) || !sl_h5_index_store_path(path, dataset, file, sizeof file))
    return;
  snprintf(dir, sizeof dir, "%s", file);
  *strrchr(dir, '/') = 0;
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", file, (int)getpid());
  wbuf b = {.f = sl_make_dirs(dir) ? fopen(tmp, "wb") : NULL};
  if (!b.f) return;
  sl_checksum64_begin(&b.sum);
  put_entry(&b, cwd, path, dataset, &master, ix);
  bool ok = fclose(b.f) == 0 && !b.failed;
  if (!ok || rename(tmp, file) != 0) {
    remove(tmp); /* only the file this call made */
    return;
  }
  prune(dir, strrchr(file, '/') + 1);
}

/* ---- reading: every field checked against the bytes left ---------------- */

typedef struct rbuf {
  const unsigned char *p, *end;
  bool ok;
} rbuf;

static void get(rbuf *r, void *v, size_t n) {
  if (!r->ok || (size_t)(r->end - r->p) < n) {
    r->ok = false;
    memset(v, 0, n);
    return;
  }
  memcpy(v, r->p, n);
  r->p += n;
}

#define GET(r, v) get(r, &(v), sizeof(v))

/* A string (malloc'd), or NULL for a stored NULL or a bad entry (r->ok);
 * out of memory is a bad entry (no entry: the acquisition is listed). */
static char *get_str(rbuf *r) {
  uint32_t n;
  GET(r, n);
  if (!r->ok || n == UINT32_MAX) return NULL;
  if ((size_t)(r->end - r->p) < n) {
    r->ok = false;
    return NULL;
  }
  char *s = sl_calloc((size_t)n + 1, 1);
  if (!s) {
    r->ok = false;
    return NULL;
  }
  memcpy(s, r->p, n);
  r->p += n;
  return s;
}

/* The header must name this cwd, path, dataset and the master as it is. */
static bool header_matches(rbuf *r, const char *cwd, const char *path, const char *dataset,
                           sl_h5_store_same_file same_file) {
  char magic[8];
  GET(r, magic);
  if (!r->ok || memcmp(magic, STORE_MAGIC, 8)) return false;
  char *c = get_str(r), *p = get_str(r), *d = get_str(r);
  identity stored;
  GET(r, stored);
  bool same = r->ok && c && p && d && !strcmp(c, cwd) && !strcmp(p, path) && !strcmp(d, dataset ? dataset : "") &&
              same_file(path, &stored, sizeof stored);
  free(c), free(p), free(d);
  return same;
}

/* Whether the bools of an index read as bytes hold 0 or 1: any other byte
 * is no bool, and reading it as one is undefined (the store keeps the
 * struct as it is in memory; a damaged or foreign entry may hold anything). */
static bool index_bools_ok(const sl_h5_index *s) {
  const bool *const fields[] = {&s->is_signed,          &s->contiguous,            &s->listed,
                                &s->from_store,         &s->meta.has_x_pixels,     &s->meta.has_y_pixels,
                                &s->meta.has_nimages,   &s->meta.has_ntrigger,     &s->meta.has_saturation_value,
                                &s->meta.has_count_time, &s->meta.has_frame_time,  &s->meta.has_pixel_mask,
                                &s->meta.has_scan_shape};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    unsigned char b;
    memcpy(&b, fields[i], 1);
    if (b > 1) return false;
  }
  return true;
}

/* The index after the header, or NULL when anything disagrees. */
/* `own`, when not NULL, is the entry's buffer (r reads from it), which the
 * index may take for its chunks (they are its last field): the entry then
 * costs no second copy of the chunks, and *own is set to NULL. */
static sl_h5_index *read_index(rbuf *r, sl_h5_store_same_file same_file, unsigned char **own) {
  int32_t nf;
  GET(r, nf);
  if (!r->ok || nf < 0 || nf > 1 << 24) return NULL;
  char **files = sl_calloc((size_t)(nf ? nf : 1), sizeof *files);
  if (!files) return NULL; /* out of memory: no entry */
  bool same = true;
  for (int i = 0; i < nf && r->ok && same; i++) {
    identity stored;
    files[i] = get_str(r);
    GET(r, stored);
    same = files[i] && same_file(files[i], &stored, sizeof stored);
  }
  char *source = same ? get_str(r) : NULL, *layout = same ? get_str(r) : NULL;
  sl_h5_index s;
  GET(r, s);
  sl_h5_index *ix = sl_calloc(1, sizeof *ix);
  if (!ix) r->ok = false; /* out of memory: no entry */
  int64_t pixels = 0; /* (a frame's sides may be anything here: multiplied with a check) */
  bool sane = ix && r->ok && same && index_bools_ok(&s) && s.n_files == nf && s.n_parts >= 0 &&
              s.n_parts <= nf + 1 && s.n_chunks >= 0 && s.frame_rows > 0 && s.frame_cols > 0 &&
              !__builtin_mul_overflow(s.frame_rows, s.frame_cols, &pixels) && pixels < ((int64_t)1 << 32) &&
              s.listed;
  if (sane) {
    *ix = s;
    /* the stored pointers are the writer's: none is ours until set below */
    ix->parts = NULL, ix->chunks = NULL, ix->meta.pixel_mask = NULL, ix->meta.saturation_source = NULL;
    ix->files = files, ix->source = source, ix->layout = layout;
    files = NULL, source = layout = NULL;
    ix->parts = sl_calloc((size_t)(s.n_parts ? s.n_parts : 1), sizeof *ix->parts);
    if (!ix->parts) {
      ix->n_parts = 0;
      r->ok = false;
    }
    for (int i = 0; i < s.n_parts && r->ok; i++) {
      char *object = get_str(r), *link = get_str(r);
      GET(r, ix->parts[i]);
      ix->parts[i].object = object, ix->parts[i].link = link;
      if (!object || !link || ix->parts[i].file < 0 || ix->parts[i].file >= nf) r->ok = false;
    }
    char *sat = get_str(r);
    ix->meta.saturation_source = sat ? sl_intern(sat) : NULL;
    if (sat && !ix->meta.saturation_source) r->ok = false;
    free(sat);
    if (s.meta.has_pixel_mask && r->ok) { /* out of memory: no entry (the acquisition is listed instead) */
      size_t n = (size_t)pixels;
      if ((size_t)(r->end - r->p) / sizeof *ix->meta.pixel_mask < n) r->ok = false; /* not there: no entry */
      ix->meta.pixel_mask = r->ok ? calloc(n, sizeof *ix->meta.pixel_mask) : NULL;
      if (ix->meta.pixel_mask) get(r, ix->meta.pixel_mask, n * sizeof *ix->meta.pixel_mask);
      else r->ok = false;
    }
    size_t chunk_bytes = (size_t)s.n_chunks * sizeof *ix->chunks;
    if (own && *own && r->ok && (size_t)(r->end - r->p) >= chunk_bytes && chunk_bytes > 0) {
      memmove(*own, r->p, chunk_bytes); /* to the buffer's start, then shrink it */
      r->p += chunk_bytes;
      unsigned char *kept = realloc(*own, chunk_bytes);
      ix->chunks = (sl_h5_chunk *)(kept ? kept : *own);
      *own = NULL;
    } else if (r->ok && (size_t)(r->end - r->p) >= chunk_bytes) { /* (a count past the entry: no entry) */
      ix->chunks = calloc((size_t)(s.n_chunks ? s.n_chunks : 1), sizeof *ix->chunks);
      if (ix->chunks) get(r, ix->chunks, chunk_bytes);
      else r->ok = false;
    } else {
      r->ok = false;
    }
    for (int i = 0; i < s.n_chunks && r->ok; i++)
      if (ix->chunks[i].file < 0 || ix->chunks[i].file >= nf) r->ok = false;
  } else if (ix) {
    ix->n_files = 0, ix->n_parts = 0; /* nothing of s is owned */
  }
  for (int i = 0; files && i < nf; i++) free(files[i]);
  free(files), free(source), free(layout);
  if (!sane || !r->ok) {
    sl_h5_index_free(ix);
    return NULL;
  }
  return ix;
}

static bool same_file_on_disk(const char *path, const void *stored, size_t n) {
  identity now;
  return n == sizeof now && identity_of(path, &now) && !memcmp(stored, &now, sizeof now);
}

/* Parses entry bytes; with own (the bytes' malloc'd buffer), the index may
 * keep it for its chunks (then *own is NULL on return). */
static sl_h5_index *parse(const unsigned char *data, size_t n, const char *cwd, const char *path,
                          const char *dataset, sl_h5_store_same_file same_file, unsigned char **own) {
  if (n <= 16) return NULL;
  uint64_t sum;
  memcpy(&sum, data + n - 8, 8);
  if (sum != sl_checksum64(data, n - 8)) return NULL;
  rbuf r = {data, data + n - 8, true};
  if (!header_matches(&r, cwd, path, dataset, same_file)) return NULL;
  sl_h5_index *ix = read_index(&r, same_file, own);
  if (ix && r.p != r.end) { /* bytes nobody wrote */
    sl_h5_index_free(ix);
    ix = NULL;
  }
  return ix;
}

sl_h5_index *sl_h5_index_store_parse(const void *bytes, size_t n, const char *cwd, const char *path,
                                     const char *dataset, sl_h5_store_same_file same_file) {
  return parse(bytes, n, cwd, path, dataset, same_file, NULL);
}

sl_h5_index *sl_h5_index_store_load(const char *path, const char *dataset) {
  char file[4096], cwd[2048];
  if (!sl_setting_bool(SL_SET_INDEX_STORE) || !getcwd(cwd, sizeof cwd) ||
      !sl_h5_index_store_path(path, dataset, file, sizeof file))
    return NULL;
  FILE *f = fopen(file, "rb");
  if (!f) return NULL;
  unsigned char *data = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 16 && (uint64_t)n < STORE_MAX_BYTES && fseek(f, 0, SEEK_SET) == 0) {
    data = malloc((size_t)n);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) n = -1;
  }
  fclose(f);
  /* the index keeps the entry's buffer for its chunks: no second copy */
  sl_h5_index *ix = data && n > 16 ? parse(data, (size_t)n, cwd, path, dataset, same_file_on_disk, &data) : NULL;
  free(data);
  if (ix) {
    ix->from_store = true;
    (void)utimensat(AT_FDCWD, file, NULL, 0); /* used now: the last the cache's bound removes */
  }
  return ix;
}
