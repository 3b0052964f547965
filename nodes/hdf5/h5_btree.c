/* Linear-time chunk listing of version-1 B-tree chunk indexes. See
 * h5_btree.h and docs/formats/dectris-hdf5.md ("Fast chunk listing").
 *
 * Format facts used (HDF5 File Format Specification, version 2/3):
 * - object header v1: version 1, reserved, u16 message count, u32 reference
 *   count, u32 size of the first block; messages from offset 16, each a u16
 *   type, u16 size, u8 flags, 3 reserved bytes, then the data;
 * - object header v2: "OHDR", version 2, flags (bit 2: messages carry a u16
 *   creation order; bit 4: u16 max compact + u16 min dense; bit 5: four u32
 *   times; bits 0-1: width of the first block's size, 1/2/4/8 bytes), the
 *   size, messages (u8 type, u16 size, u8 flags [, u16 order]), a u32
 *   checksum; continuation blocks start with "OCHK" and end with a checksum;
 * - continuation message (0x0010): address, length of the next block;
 * - data layout message (0x0008) version 3, class 2 (chunked): u8
 *   dimensionality (rank + 1), B-tree address, dimensionality x u32 chunk
 *   dims (the last is the element size);
 * - v1 B-tree node: "TREE", u8 type (1 = raw data chunks), u8 level, u16
 *   entries used, left and right sibling addresses, then key, child, key,
 *   ..., key (entries + 1 keys); a chunk key is u32 stored size, u32 filter
 *   mask, dimensionality x u64 offsets (elements; the last is 0); children
 *   are nodes of level - 1, or chunk addresses at level 0.
 * All integers little-endian; addresses relative to the base address. */
#include "nodes/hdf5/h5_btree.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEVEL 48               /* a tree of 64-entry nodes needs < 10 levels for 2^64 chunks */
#define MAX_OH_BLOCKS 1024         /* object header blocks (the first + continuations) */
#define MAX_OH_BLOCK (16u << 20)   /* bytes of one object header block */

#define MSG_LAYOUT 0x0008
#define MSG_CONT 0x0010

/* A malformed file: SL_ERR_FORMAT, the message and the file's name. */
#define bad(io, err, ...) sl_fail_in((err), SL_ERR_FORMAT, (io)->name ? (io)->name : "", __VA_ARGS__)

static uint64_t read_le(const uint8_t *p, unsigned n) {
  uint64_t v = 0;
  for (unsigned i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

static uint64_t undef_addr(const sl_h5_btree_io *io) {
  return io->sizeof_addr >= 8 ? UINT64_MAX : ((uint64_t)1 << (8 * io->sizeof_addr)) - 1;
}

static bool io_ok(const sl_h5_btree_io *io) {
  unsigned a = io->sizeof_addr, s = io->sizeof_size;
  return io->read && (a == 2 || a == 4 || a == 8) && (s == 2 || s == 4 || s == 8) && io->base <= io->file_size;
}

/* Bounded read of n bytes at relative address `addr`. */
static sl_code read_at(const sl_h5_btree_io *io, uint64_t addr, void *buf, size_t n, const char *what, sl_error *err) {
  uint64_t avail = io->file_size - io->base;
  if (addr > avail || (uint64_t)n > avail - addr)
    return bad(io, err, "%s at address %" PRIu64 " (%zu bytes) lies past the end of the file (%" PRIu64 " bytes)",
               what, addr, n, io->file_size);
  if (n && io->read(io->ctx, io->base + addr, buf, n) != 0)
    return bad(io, err, "cannot read %s at address %" PRIu64 " (%zu bytes)", what, addr, n);
  return SL_OK;
}

/* ---- object header -------------------------------------------------------- */

typedef struct header_walk {
  const sl_h5_btree_io *io;
  uint64_t blocks[MAX_OH_BLOCKS]; /* block addresses queued (visited set) */
  uint64_t lens[MAX_OH_BLOCKS];
  int n_blocks, next;
  int version;
  bool creation_order; /* v2: messages carry a creation order */
  bool found, handled;
  sl_h5_btree_layout *out;
  char *why;
  size_t why_len;
} header_walk;

static sl_code queue_block(header_walk *w, uint64_t addr, uint64_t len, sl_error *err) {
  for (int i = 0; i < w->n_blocks; i++)
    if (w->blocks[i] == addr)
      return bad(w->io, err, "object header continuation block at address %" PRIu64 " is referenced twice", addr);
  if (w->n_blocks == MAX_OH_BLOCKS)
    return bad(w->io, err, "object header has more than %d continuation blocks (at address %" PRIu64 ")",
               MAX_OH_BLOCKS, addr);
  if (len > MAX_OH_BLOCK)
    return bad(w->io, err, "object header block at address %" PRIu64 " has %" PRIu64 " bytes (max %u)", addr, len,
               MAX_OH_BLOCK);
  w->blocks[w->n_blocks] = addr;
  w->lens[w->n_blocks] = len;
  w->n_blocks++;
  return SL_OK;
}

static sl_code layout_msg(header_walk *w, uint64_t at, const uint8_t *p, size_t n, unsigned mflags, sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  if (w->found) return bad(io, err, "object header holds a second data layout message (at address %" PRIu64 ")", at);
  w->found = true;
  if (mflags & 0x02) {
    snprintf(w->why, w->why_len, "shared data layout message");
    return SL_OK;
  }
  if (n < 2) return bad(io, err, "data layout message at address %" PRIu64 " has %zu bytes", at, n);
  if (p[0] != 3) {
    snprintf(w->why, w->why_len, "data layout message version %u (only version 3 is read directly)", p[0]);
    return SL_OK;
  }
  if (p[1] != 2) {
    snprintf(w->why, w->why_len, "data layout class %u (not chunked)", p[1]);
    return SL_OK;
  }
  if (n < 3) return bad(io, err, "data layout message at address %" PRIu64 " has %zu bytes", at, n);
  unsigned nd = p[2];
  if (nd < 2 || nd > SL_H5_BTREE_MAX_RANK + 1)
    return bad(io, err, "data layout message at address %" PRIu64 " has dimensionality %u (2..%d)", at, nd,
               SL_H5_BTREE_MAX_RANK + 1);
  size_t need = 3 + (size_t)io->sizeof_addr + 4 * (size_t)nd;
  if (n < need)
    return bad(io, err, "data layout message at address %" PRIu64 " has %zu bytes; dimensionality %u needs %zu", at,
               n, nd, need);
  sl_h5_btree_layout *o = w->out;
  memset(o, 0, sizeof *o);
  o->ndims = (int)nd;
  uint64_t a = read_le(p + 3, io->sizeof_addr);
  o->btree_addr = a == undef_addr(io) ? UINT64_MAX : a;
  for (unsigned d = 0; d < nd; d++) {
    o->dims[d] = (uint32_t)read_le(p + 3 + io->sizeof_addr + 4 * d, 4);
    if (o->dims[d] == 0)
      return bad(io, err, "data layout message at address %" PRIu64 " has a chunk dimension %u of size 0", at, d);
  }
  w->handled = true;
  return SL_OK;
}

/* Messages of one block: [p, p + n) at address `at`. */
static sl_code walk_messages(header_walk *w, uint64_t at, const uint8_t *p, size_t n, sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  size_t hs = w->version == 1 ? 8 : (w->creation_order ? 6 : 4);
  size_t pos = 0;
  while (!w->found && n - pos >= hs) {
    unsigned type, mflags;
    size_t size;
    if (w->version == 1) {
      type = (unsigned)read_le(p + pos, 2);
      size = (size_t)read_le(p + pos + 2, 2);
      mflags = p[pos + 4];
    } else {
      type = p[pos];
      size = (size_t)read_le(p + pos + 1, 2);
      mflags = p[pos + 3];
    }
    uint64_t mat = at + pos;
    pos += hs;
    if (size > n - pos)
      return bad(io, err, "object header message at address %" PRIu64 " (type %u, %zu bytes) overruns its block",
                 mat, type, size);
    const uint8_t *d = p + pos;
    if (type == MSG_LAYOUT) {
      sl_code rc = layout_msg(w, mat, d, size, mflags, err);
      if (rc) return rc;
    } else if (type == MSG_CONT) {
      if (size < (size_t)io->sizeof_addr + io->sizeof_size)
        return bad(io, err, "continuation message at address %" PRIu64 " has %zu bytes", mat, size);
      uint64_t ca = read_le(d, io->sizeof_addr), cl = read_le(d + io->sizeof_addr, io->sizeof_size);
      sl_code rc = queue_block(w, ca, cl, err);
      if (rc) return rc;
    }
    pos += size;
  }
  return SL_OK;
}

/* The object header's prefix at ohdr_addr: its version and where its
 * first block of messages lies. */
static sl_code header_prefix(header_walk *w, uint64_t ohdr_addr, uint64_t *first, uint64_t *first_len,
                             sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  uint8_t pre[40];
  /* The prefix: v1 is 16 bytes; v2 at most 4+1+1+16+4+8 = 34. */
  uint64_t avail = io->file_size - io->base;
  size_t pn = ohdr_addr < avail ? (size_t)(avail - ohdr_addr < sizeof pre ? avail - ohdr_addr : sizeof pre) : 0;
  if (pn < 16)
    return bad(io, err, "object header at address %" PRIu64 " lies past the end of the file (%" PRIu64 " bytes)",
               ohdr_addr, io->file_size);
  sl_code rc = read_at(io, ohdr_addr, pre, pn, "object header", err);
  if (rc) return rc;
  if (pre[0] == 1) {
    w->version = 1;
    *first = ohdr_addr + 16;
    *first_len = read_le(pre + 8, 4);
    return SL_OK;
  }
  if (memcmp(pre, "OHDR", 4) != 0)
    return bad(io, err, "no object header at address %" PRIu64 " (version byte %u, no OHDR signature)", ohdr_addr,
               pre[0]);
  if (pre[4] != 2) return bad(io, err, "object header at address %" PRIu64 " has version %u", ohdr_addr, pre[4]);
  unsigned fl = pre[5];
  w->version = 2;
  w->creation_order = fl & 0x04;
  size_t q = 6 + (fl & 0x20 ? 16 : 0) + (fl & 0x10 ? 4 : 0);
  unsigned sw = 1u << (fl & 3);
  if (q + sw > pn) return bad(io, err, "object header at address %" PRIu64 " is truncated", ohdr_addr);
  *first_len = read_le(pre + q, sw);
  *first = ohdr_addr + q + sw;
  return SL_OK;
}

/* Block b of the object header (the first, or a continuation): its messages. */
static sl_code walk_block(header_walk *w, int b, sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  uint64_t a = w->blocks[b], len = w->lens[b];
  size_t skip = 0, tail = 0;
  if (w->version == 2) {
    tail = 4;            /* checksum */
    if (b > 0) skip = 4; /* "OCHK" */
  }
  if (len < skip + tail)
    return bad(io, err, "object header block at address %" PRIu64 " has %" PRIu64 " bytes", a, len);
  uint8_t *buf = malloc(len ? (size_t)len : 1);
  if (!buf) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  sl_code rc = read_at(io, a, buf, (size_t)len, "object header block", err);
  if (rc == SL_OK && skip && memcmp(buf, "OCHK", 4) != 0)
    rc = bad(io, err, "object header continuation block at address %" PRIu64 " lacks the OCHK signature", a);
  if (rc == SL_OK) rc = walk_messages(w, a + skip, buf + skip, (size_t)len - skip - tail, err);
  free(buf);
  return rc;
}

sl_code sl_h5_btree_find_layout(const sl_h5_btree_io *io, uint64_t ohdr_addr, sl_h5_btree_layout *out,
                                bool *handled, char *why, size_t why_len, sl_error *err) {
  *handled = false;
  char dummy[8];
  if (!why || !why_len) why = dummy, why_len = sizeof dummy;
  why[0] = 0;
  if (!io_ok(io)) {
    snprintf(why, why_len, "unsupported sizes of offsets/lengths or base address");
    return SL_OK;
  }
  header_walk *w = calloc(1, sizeof *w);
  if (!w) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  w->io = io;
  w->out = out;
  w->why = why;
  w->why_len = why_len;
  uint64_t first = 0, first_len = 0;
  sl_code rc = header_prefix(w, ohdr_addr, &first, &first_len, err);
  if (rc == SL_OK) rc = queue_block(w, first, first_len, err);
  while (rc == SL_OK && !w->found && w->next < w->n_blocks) rc = walk_block(w, w->next++, err);
  if (rc == SL_OK && !w->found)
    rc = bad(io, err, "object header at address %" PRIu64 " holds no data layout message", ohdr_addr);
  if (rc == SL_OK) *handled = w->handled;
  free(w);
  return rc;
}

/* ---- B-tree ------------------------------------------------------------------ */

int64_t sl_h5_btree_grid_size(const sl_h5_btree_layout *lay, int rank, const uint64_t *extent, int64_t max) {
  if (rank < 1 || rank != lay->ndims - 1) return -1;
  uint64_t n = 1;
  for (int d = 0; d < rank; d++) {
    if (lay->dims[d] == 0) return -1;
    uint64_t c = extent[d] / lay->dims[d] + (extent[d] % lay->dims[d] != 0);
    if (c != 0 && n > (uint64_t)max / c) return -1;
    n *= c;
  }
  return n > (uint64_t)max ? -1 : (int64_t)n;
}

/* Open-addressing set of node addresses (a node referenced twice is an error). */
typedef struct addr_set {
  uint64_t *v;
  size_t cap, n;
} addr_set;

static int set_add(addr_set *s, uint64_t a) { /* 1 added, 0 present, -1 no memory */
  if (2 * (s->n + 1) > s->cap) {
    size_t nc = s->cap ? 2 * s->cap : 64;
    uint64_t *nv = malloc(nc * sizeof *nv);
    if (!nv) return -1;
    memset(nv, 0xff, nc * sizeof *nv);
    for (size_t i = 0; i < s->cap; i++) {
      if (s->v[i] == UINT64_MAX) continue;
      size_t h = (size_t)((s->v[i] * 0x9E3779B97F4A7C15ull) >> 20) & (nc - 1);
      while (nv[h] != UINT64_MAX) h = (h + 1) & (nc - 1);
      nv[h] = s->v[i];
    }
    free(s->v);
    s->v = nv;
    s->cap = nc;
  }
  size_t h = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (s->cap - 1);
  while (s->v[h] != UINT64_MAX) {
    if (s->v[h] == a) return 0;
    h = (h + 1) & (s->cap - 1);
  }
  s->v[h] = a;
  s->n++;
  return 1;
}

typedef struct tree_walk {
  const sl_h5_btree_io *io;
  const sl_h5_btree_layout *lay;
  int rank;
  const uint64_t *extent;
  uint64_t stride[SL_H5_BTREE_MAX_RANK];
  sl_h5_btree_chunk *chunks;
  int64_t n_grid;
  addr_set seen;
  size_t key_size;
} tree_walk;

static sl_code visit_entries(tree_walk *w, uint64_t addr, int level, int depth, unsigned entries, const uint8_t *p,
                             sl_error *err);

static sl_code visit(tree_walk *w, uint64_t addr, int level, int depth, sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  unsigned sa = io->sizeof_addr;
  if (addr == UINT64_MAX || addr == undef_addr(io))
    return bad(io, err, "chunk B-tree: undefined child node address (level %d)", level);
  if (depth > MAX_LEVEL) return bad(io, err, "chunk B-tree node at address %" PRIu64 ": too deep", addr);
  int s = set_add(&w->seen, addr);
  if (s < 0) return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  if (s == 0) return bad(io, err, "chunk B-tree node at address %" PRIu64 " is referenced twice", addr);
  size_t hdr = 8 + 2 * (size_t)sa;
  uint8_t hb[8 + 2 * 8];
  sl_code rc = read_at(io, addr, hb, hdr, "chunk B-tree node", err);
  const uint8_t *h = hb;
  if (rc) return rc;
  if (memcmp(h, "TREE", 4) != 0)
    return bad(io, err, "chunk B-tree node at address %" PRIu64 " lacks the TREE signature", addr);
  if (h[4] != 1)
    return bad(io, err, "B-tree node at address %" PRIu64 " has node type %u, expected 1 (raw data chunks)", addr,
               h[4]);
  int lv = h[5];
  unsigned entries = (unsigned)read_le(h + 6, 2);
  if (level < 0) {
    if (lv > MAX_LEVEL)
      return bad(io, err, "chunk B-tree root at address %" PRIu64 " has level %d (max %d)", addr, lv, MAX_LEVEL);
    level = lv;
  } else if (lv != level) {
    return bad(io, err, "chunk B-tree node at address %" PRIu64 " has level %d, its parent expects %d", addr, lv,
               level);
  }
  if (entries == 0 && depth > 0)
    return bad(io, err, "chunk B-tree node at address %" PRIu64 " has no entries", addr);
  size_t ks = w->key_size, body = (size_t)entries * (ks + sa) + ks;
  uint64_t avail = io->file_size - io->base;
  if (addr + hdr > avail || body > avail - addr - hdr)
    return bad(io, err, "chunk B-tree node at address %" PRIu64 " (%u entries, %zu bytes) lies past the end of the file (%" PRIu64 " bytes)", addr, entries, hdr + body, io->file_size);
  uint8_t *nb = malloc(body);
  if (!nb) return sl_fail(err, SL_ERR_NOMEM, "out of memory for a B-tree node");
  if ((rc = read_at(io, addr + hdr, nb, body, "chunk B-tree node", err))) {
    free(nb);
    return rc;
  }
  rc = visit_entries(w, addr, level, depth, entries, nb, err);
  free(nb);
  return rc;
}

static const char *fmt_coord(const uint8_t *key, int nd, char *buf, size_t n) {
  size_t o = 0;
  buf[0] = 0;
  for (int d = 0; d < nd && o < n; d++) {
    int k = snprintf(buf + o, n - o, "%s%" PRIu64, d ? ", " : "", read_le(key + 8 + 8 * (size_t)d, 8));
    if (k > 0) o += (size_t)k;
  }
  return buf;
}

static sl_code visit_entries(tree_walk *w, uint64_t addr, int level, int depth, unsigned entries, const uint8_t *p,
                             sl_error *err) {
  const sl_h5_btree_io *io = w->io;
  unsigned sa = io->sizeof_addr;
  size_t ks = w->key_size;
  sl_code rc;
  int nd = w->lay->ndims;
  for (unsigned i = 0; i < entries; i++, p += ks + sa) {
    uint64_t child = read_le(p + ks, sa);
    if (level > 0) {
      if ((rc = visit(w, child, level - 1, depth + 1, err))) return rc;
      continue;
    }
    uint64_t size = read_le(p, 4);
    uint32_t mask = (uint32_t)read_le(p + 4, 4);
    uint64_t idx = 0;
    char coord[160]; /* formatted for messages only */
#define COORD() fmt_coord(p, nd, coord, sizeof coord)
    if (read_le(p + 8 + 8 * (size_t)(nd - 1), 8) != 0)
      return bad(io, err, "chunk B-tree node at address %" PRIu64 ": entry %u has offsets (%s): the last must be 0",
                 addr, i, COORD());
    for (int d = 0; d < w->rank; d++) {
      uint64_t off = read_le(p + 8 + 8 * (size_t)d, 8);
      if (off % w->lay->dims[d] != 0 || off >= w->extent[d])
        return bad(io, err,
                   "chunk B-tree node at address %" PRIu64 ": entry %u has offsets (%s), not a chunk of the dataset",
                   addr, i, COORD());
      idx += off / w->lay->dims[d] * w->stride[d];
    }
    if (idx >= (uint64_t)w->n_grid)
      return bad(io, err, "chunk B-tree node at address %" PRIu64 ": entry %u (%s) is outside the chunk grid", addr, i,
                 COORD());
    sl_h5_btree_chunk *c = &w->chunks[idx];
    if (c->found)
      return bad(io, err, "chunk B-tree node at address %" PRIu64 ": the chunk at (%s) is listed twice", addr, COORD());
    uint64_t avail = io->file_size - io->base;
    if (child == undef_addr(io) || size == 0 || child > avail || size > avail - child)
      return bad(io, err,
                 "chunk B-tree node at address %" PRIu64 ": the chunk at (%s), address %" PRIu64 ", %" PRIu64
                 " bytes, lies outside the file (%" PRIu64 " bytes)",
                 addr, COORD(), child, size, io->file_size);
    c->addr = child;
    c->size = size;
    c->mask = mask;
    c->found = true;
#undef COORD
  }
  return SL_OK;
}

sl_code sl_h5_btree_list(const sl_h5_btree_io *io, const sl_h5_btree_layout *lay, int rank, const uint64_t *extent,
                     sl_h5_btree_chunk *chunks, int64_t n_grid, sl_error *err) {
  if (!io_ok(io)) return bad(io, err, "unsupported sizes of offsets/lengths or base address");
  if (lay->ndims < 2 || lay->ndims > SL_H5_BTREE_MAX_RANK + 1 || rank != lay->ndims - 1)
    return bad(io, err, "chunk layout has dimensionality %d; the dataset has rank %d", lay->ndims, rank);
  if (n_grid < 0 || sl_h5_btree_grid_size(lay, rank, extent, n_grid) != n_grid)
    return bad(io, err, "chunk grid does not match the dataset's extent");
  if (lay->btree_addr == UINT64_MAX || n_grid == 0) return SL_OK; /* no chunk written */
  tree_walk w;
  memset(&w, 0, sizeof w);
  w.io = io;
  w.lay = lay;
  w.rank = rank;
  w.extent = extent;
  w.chunks = chunks;
  w.n_grid = n_grid;
  uint64_t st = 1;
  for (int d = rank; d-- > 0;) {
    w.stride[d] = st;
    st *= extent[d] / lay->dims[d] + (extent[d] % lay->dims[d] != 0);
  }
  w.key_size = 8 + 8 * (size_t)lay->ndims;
  sl_code rc = visit(&w, lay->btree_addr, -1, 0, err);
  free(w.seen.v);
  return rc;
}
