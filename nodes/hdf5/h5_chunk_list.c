/* The stored chunks of one frame dataset, in frame order, each checked
 * against the file: read from the chunk B-tree directly (h5_btree.c, one
 * linear pass) where the layout allows, else through the HDF5 API.
 * Contiguous datasets give one pseudo-chunk per frame. See h5_dataset.h and
 * docs/formats/dectris-hdf5.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/settings.h"
#include "nodes/hdf5/h5_btree.h"
#include "nodes/hdf5/h5_dataset.h"

/* Address (relative to the base address), size and filter mask of chunk i
 * (frames i*k ..) as HDF5 reports them. */
typedef struct raw_chunk {
  uint64_t addr, size;
  uint32_t mask;
  bool found;
} raw_chunk;

/* The creation property list of the file holding dataset `did` (the
 * caller closes it), or a negative id. */
static hid_t file_create_plist(hid_t did) {
  hid_t f = H5Iget_file_id(did);
  hid_t fcpl = f >= 0 ? H5Fget_create_plist(f) : H5I_INVALID_HID;
  if (f >= 0) H5Fclose(f);
  return fcpl;
}

/* The chunk of frames i*k.. as H5Dget_chunk_info_by_coord reports it. */
static sl_code chunk_by_coord(const sl_h5_dataset *d, const char *file, int64_t i, raw_chunk *out,
                              sl_error *err) {
  hsize_t coord[3] = {(hsize_t)(i * d->frames_per_chunk), 0, 0};
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(d->did, coord, &mask, &addr, &size) < 0)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot read the chunk of frames %lld..",
                      d->link, (long long)(i * d->frames_per_chunk));
  out->addr = (uint64_t)addr;
  out->size = (uint64_t)size;
  out->mask = mask;
  out->found = addr != HADDR_UNDEF;
  return SL_OK;
}

/* ---- listing through the HDF5 API ------------------------------------------ */

#if H5_VERSION_GE(1, 14, 0)
/* One pass over the chunk index (H5Dchunk_iter). Early 1.14 releases passed
 * offsets in chunk units rather than elements; both are accepted: with
 * k > 1 and more than one chunk, an offset that is not a multiple of k can
 * only be in chunk units. */
typedef struct iter_rec {
  hsize_t o0, o1, o2;
  uint64_t addr, size;
  uint32_t mask;
} iter_rec;

typedef struct iter_ctx {
  int64_t nc, k;
  bool bad, scaled;
  iter_rec *all;
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

static sl_code collect_with_api(const sl_h5_dataset *d, const char *file, int64_t nc, raw_chunk *rec,
                                sl_error *err) {
  const hsize_t k = (hsize_t)d->frames_per_chunk;
  iter_ctx c;
  memset(&c, 0, sizeof c);
  c.nc = nc;
  c.k = d->frames_per_chunk;
  c.all = calloc((size_t)nc, sizeof *c.all);
  if (!c.all) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
  sl_code rc = SL_OK;
  if (H5Dchunk_iter(d->did, H5P_DEFAULT, iter_cb, &c) < 0 || c.bad) {
    rc = sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot list its chunks", d->link);
  } else {
    for (int64_t j = 0; j < c.n_all; j++) {
      hsize_t o0 = c.scaled ? c.all[j].o0 * k : c.all[j].o0;
      if (c.all[j].o1 != 0 || c.all[j].o2 != 0 || o0 % k != 0 || o0 / k >= (hsize_t)nc ||
          rec[o0 / k].found) {
        rc = sl_fail_in(err, SL_ERR_FORMAT, file,
                        "dataset %s: unexpected chunk at offset (%llu, %llu, %llu)", d->link,
                        (unsigned long long)c.all[j].o0, (unsigned long long)c.all[j].o1,
                        (unsigned long long)c.all[j].o2);
        break;
      }
      raw_chunk *r = &rec[o0 / k];
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
static sl_code collect_with_api(const sl_h5_dataset *d, const char *file, int64_t nc, raw_chunk *rec,
                                sl_error *err) {
  for (int64_t i = 0; i < nc; i++) {
    sl_code rc = chunk_by_coord(d, file, i, &rec[i], err);
    if (rc) return rc;
  }
  return SL_OK;
}
#endif

/* ---- listing from the B-tree read directly (h5_btree.c) --------------------- */

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

/* The address of the dataset's object header; false when HDF5 will not say. */
static bool object_header_addr(hid_t did, uint64_t *addr) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t oi;
  haddr_t ha = HADDR_UNDEF;
  if (H5Oget_info3(did, &oi, H5O_INFO_BASIC) < 0 || H5VLnative_token_to_addr(did, oi.token, &ha) < 0)
    return false;
  *addr = (uint64_t)ha;
#else
  H5O_info_t oi;
  if (H5Oget_info2(did, &oi, H5O_INFO_BASIC) < 0) return false;
  *addr = (uint64_t)oi.addr;
#endif
  return true;
}

/* Checks a few chunks of the direct listing (first, last and some spread
 * over the dataset) against H5Dget_chunk_info_by_coord: any disagreement is
 * an error. */
static sl_code cross_check(const sl_h5_dataset *d, const char *file, int64_t nc, const raw_chunk *rec,
                           sl_error *err) {
  int64_t probe[7] = {0, nc - 1, nc / 2, nc / 4, 3 * (nc / 4), nc / 3, (nc * 7) / 9};
  for (int j = 0; j < 7; j++) {
    int64_t i = probe[j];
    if (i < 0 || i >= nc) continue;
    raw_chunk api = {0, 0, 0, false};
    sl_code rc = chunk_by_coord(d, file, i, &api, err);
    if (rc) return rc;
    const raw_chunk *r = &rec[i];
    if (api.found != r->found ||
        (api.found && (api.addr != r->addr || api.size != r->size || api.mask != r->mask)))
      return sl_fail_in(err, SL_ERR_FORMAT, file,
                        "dataset %s: the chunk B-tree read from the file says the chunk of frames "
                        "%lld.. is at address %" PRIu64 " (%" PRIu64 " bytes, filter mask %u%s), "
                        "HDF5 says %" PRIu64 " (%" PRIu64 " bytes, filter mask %u%s); set "
                        "SLUICE_H5_INDEX=api to bypass the direct reader",
                        d->link, (long long)(i * d->frames_per_chunk), r->addr, r->size, r->mask,
                        r->found ? "" : ", absent", api.addr, api.size, api.mask,
                        api.found ? "" : ", absent");
  }
  return SL_OK;
}

/* Reads the layout message and the B-tree through `io` into rec. */
static sl_code collect_from_btree(const sl_h5_dataset *d, const char *file, uint64_t oaddr,
                                  const sl_h5_btree_io *io, int64_t nc, raw_chunk *rec,
                                  bool *handled, sl_error *err) {
  sl_h5_btree_layout lay;
  char why[128];
  bool ok = false;
  sl_code rc = sl_h5_btree_find_layout(io, oaddr, &lay, &ok, why, sizeof why, err);
  if (rc || !ok) return rc;
  if (lay.ndims != 4 || lay.dims[0] != (uint64_t)d->frames_per_chunk || lay.dims[1] != (uint64_t)d->h ||
      lay.dims[2] != (uint64_t)d->w || lay.dims[3] != (uint32_t)d->elem_size)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: its data layout message (object header at address %" PRIu64
                      ") has chunk dims (%u, %u, %u, %u) of dimensionality %d; HDF5 reports chunks "
                      "of (%lld, %lld, %lld) of %d-byte elements",
                      d->link, oaddr, lay.dims[0], lay.dims[1], lay.dims[2], lay.dims[3], lay.ndims,
                      (long long)d->frames_per_chunk, (long long)d->h, (long long)d->w,
                      d->elem_size);
  sl_h5_btree_chunk *ch = calloc((size_t)nc, sizeof *ch);
  if (!ch) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
  uint64_t extent[3] = {(uint64_t)d->n, (uint64_t)d->h, (uint64_t)d->w};
  rc = sl_h5_btree_list(io, &lay, 3, extent, ch, nc, err);
  if (rc == SL_ERR_FORMAT) { /* sl_h5_btree_list names the address; add the dataset. */
    char prefix[1100];
    snprintf(prefix, sizeof prefix, "dataset %s: ", d->link);
    sl_h5_error_wrap(err, prefix, "");
  }
  for (int64_t i = 0; rc == SL_OK && i < nc; i++)
    rec[i] = (raw_chunk){ch[i].addr, ch[i].size, ch[i].mask, ch[i].found};
  free(ch);
  if (rc == SL_OK) rc = cross_check(d, file, nc, rec, err);
  if (rc == SL_OK) *handled = true;
  return rc;
}

/* Lists the chunks of a chunked dataset by reading its object header and
 * chunk B-tree (layout version 3) from the file's bytes: one pass, linear in
 * the number of chunks. *handled = false (and SL_OK) when the dataset's
 * layout is another kind (e.g. layout version 4 indexes) or SLUICE_H5_INDEX=api:
 * the caller then uses the HDF5 API. */
static sl_code collect_direct(const sl_h5_dataset *d, const char *file, uint64_t base, int64_t nc,
                              raw_chunk *rec, bool *handled, sl_error *err) {
  *handled = false;
  if (sl_setting_choice(SL_SET_H5_INDEX) == 1) return SL_OK; /* h5_index=api */
  uint64_t oaddr;
  if (!object_header_addr(d->did, &oaddr)) return SL_OK;
  size_t sa = 0, ss = 0;
  hid_t fcpl = file_create_plist(d->did);
  herr_t st = fcpl >= 0 ? H5Pget_sizes(fcpl, &sa, &ss) : -1;
  if (fcpl >= 0) H5Pclose(fcpl);
  if (st < 0) return SL_OK;
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sl_fail_in(err, SL_ERR_IO, file, "cannot open: %s", strerror(errno));
  sl_h5_btree_io io = {.read = pread_cb, .ctx = &fd, .name = file, .file_size = d->file_size,
                       .base = base, .sizeof_addr = (unsigned)sa, .sizeof_size = (unsigned)ss};
  sl_code rc = collect_from_btree(d, file, oaddr, &io, nc, rec, handled, err);
  close(fd);
  return rc;
}

/* ---- the chunk entries -------------------------------------------------------- */

uint64_t sl_h5_stored_chunk_cap(uint64_t raw) { return 2 * raw + 4096; }

uint64_t sl_h5_dataset_list_scratch_bytes(int64_t chunks) {
  /* raw_chunk records, and the B-tree reader's or the HDF5 iteration's */
  size_t per = sizeof(sl_h5_btree_chunk);
#if H5_VERSION_GE(1, 14, 0)
  if (sizeof(iter_rec) > per) per = sizeof(iter_rec);
#endif
  return (uint64_t)(chunks > 0 ? chunks : 0) * (uint64_t)(sizeof(raw_chunk) + per);
}

static sl_code check_chunk(const sl_h5_index *ix, const sl_h5_dataset *d, const char *file,
                           int64_t frame0, uint64_t addr, uint64_t size, uint32_t mask,
                           sl_error *err) {
  uint64_t raw = (uint64_t)d->frames_per_chunk * ix->frame_bytes;
  if (addr == (uint64_t)HADDR_UNDEF || size == 0)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: the chunk of frames %lld.. is not stored (never written)", d->link,
                      (long long)frame0);
  bool raw_stored = d->filter == SL_H5_FILTER_NONE || (mask & 1u);
  if (raw_stored ? size != raw : size > sl_h5_stored_chunk_cap(raw))
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: the chunk of frames %lld.. has %" PRIu64 " stored bytes (%s %" PRIu64 ")",
                      d->link, (long long)frame0, size, raw_stored ? "expected" : "bound",
                      raw_stored ? raw : sl_h5_stored_chunk_cap(raw));
  if (addr > d->file_size || size > d->file_size - addr)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: the chunk of frames %lld.. at offset %" PRIu64 " (%" PRIu64
                      " bytes) lies past the end of the file (%" PRIu64 " bytes): truncated file?",
                      d->link, (long long)frame0, addr, size, d->file_size);
  return SL_OK;
}

/* A contiguous dataset: one pseudo-chunk per frame. */
static sl_code list_contiguous(const sl_h5_index *ix, const sl_h5_dataset *d, const char *file,
                               int64_t first_frame, sl_h5_chunk *out, sl_error *err) {
  haddr_t off = H5Dget_offset(d->did);
  if (off == HADDR_UNDEF)
    return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s has no storage (never written)", d->link);
  uint64_t addr = (uint64_t)off; /* H5Dget_offset already includes the base address */
  uint64_t total = (uint64_t)d->n * ix->frame_bytes;
  if (addr > d->file_size || total > d->file_size - addr)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s: %" PRIu64 " bytes at offset %" PRIu64 " lie past the end of the "
                      "file (%" PRIu64 " bytes): truncated file?",
                      d->link, total, addr, d->file_size);
  for (int64_t i = 0; i < d->n; i++) {
    sl_h5_chunk *c = &out[i];
    c->file_offset = addr + (uint64_t)i * ix->frame_bytes;
    c->size = ix->frame_bytes;
    c->filter_mask = 0;
    c->file = d->file;
    c->file_chunk = (uint32_t)i;
    c->first_frame = first_frame + i;
    c->n_frames = 1;
  }
  return SL_OK;
}

sl_code sl_h5_dataset_list_chunks(const sl_h5_index *ix, const sl_h5_dataset *d, int64_t first_frame,
                                  sl_h5_chunk *out, sl_error *err) {
  const char *file = ix->files[d->file];
  if (!d->chunked) return list_contiguous(ix, d, file, first_frame, out, err);
  /* The file's base address (user block): HDF5 addresses are relative to it. */
  uint64_t base = 0;
  hid_t fcpl = file_create_plist(d->did);
  hsize_t ub = 0;
  if (fcpl >= 0 && H5Pget_userblock(fcpl, &ub) >= 0) base = (uint64_t)ub;
  if (fcpl >= 0) H5Pclose(fcpl);

  const int64_t k = d->frames_per_chunk, nc = (d->n + k - 1) / k;
  hsize_t stored = 0;
  hid_t space = H5Dget_space(d->did);
  herr_t st = space >= 0 ? H5Dget_num_chunks(d->did, space, &stored) : -1;
  if (space >= 0) H5Sclose(space);
  if (st < 0) return sl_fail_in(err, SL_ERR_FORMAT, file, "dataset %s: cannot count its chunks", d->link);
  if ((int64_t)stored != nc)
    return sl_fail_in(err, SL_ERR_FORMAT, file,
                      "dataset %s stores %llu chunks; %lld frames in chunks of %lld need %lld "
                      "(missing chunks?)",
                      d->link, (unsigned long long)stored, (long long)d->n, (long long)k,
                      (long long)nc);
  raw_chunk *rec = calloc((size_t)nc, sizeof *rec);
  if (!rec) return sl_fail(err, SL_ERR_NOMEM, "out of memory for %lld chunk records", (long long)nc);
  bool handled = false;
  sl_code rc = collect_direct(d, file, base, nc, rec, &handled, err);
  if (rc == SL_OK && !handled) rc = collect_with_api(d, file, nc, rec, err);
  for (int64_t i = 0; rc == SL_OK && i < nc; i++) {
    uint64_t a = rec[i].found ? rec[i].addr + base : (uint64_t)HADDR_UNDEF;
    rc = check_chunk(ix, d, file, i * k, a, rec[i].size, rec[i].mask, err);
    if (rc) break;
    sl_h5_chunk *c = &out[i];
    c->file_offset = a;
    c->size = rec[i].size;
    c->filter_mask = rec[i].mask;
    c->file = d->file;
    c->file_chunk = (uint32_t)i;
    c->first_frame = first_frame + i * k;
    c->n_frames = (i + 1) * k <= d->n ? k : d->n - i * k;
  }
  free(rec);
  return rc;
}
