/* bslz4_decode: stored chunks written by the official bitshuffle plugin
 * (test_h5_index.c's fixtures through the HDF5 C API), read back with
 * H5Dread_chunk and packed here as hdf5_source packs them, decode to the
 * fixture's pixel formula: bitshuffle-LZ4 and plain bitshuffle, u8/u16/u32,
 * odd frame sizes, chunks of the scan that split stored chunks, every
 * simd path. Also: plain frames pass through, chunks stored raw, a
 * malformed chunk names its file and frames, params and input errors; the
 * flag_counts output against counts of the frames' values, on chunks this
 * test encodes itself from the format description (LZ4 from liblz4). */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include <lz4.h>

#include "nodes/codec/bslz4.h"
#include "nodes/hdf5/source_window.h"
#include "nodes/registry.h"
#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_bslz4_decode;

#define MAX_ENTRIES 64

/* ---- packed input ---------------------------------------------------------------- */

/* Packed stored chunks (the layout of sl_packed_items, tensor.h) built
 * entry by entry. */
typedef struct packer {
  sl_packed_entry entries[MAX_ENTRIES];
  const uint8_t *bytes[MAX_ENTRIES];
  int n;
} packer;

/* filter_mask: as HDF5 records it (bit 0 set: the filter was skipped). */
static void pack_add(packer *p, const uint8_t *bytes, uint64_t size, uint32_t filter_mask,
                     int64_t stored_chunk, int64_t first_position, int64_t n_positions) {
  assert_true(p->n < MAX_ENTRIES);
  p->entries[p->n] = (sl_packed_entry){.size = size, .flags = (filter_mask & 1u) ? SL_PACKED_STORED_RAW : 0,
                                       .origin = (uint64_t)stored_chunk, .first_position = first_position,
                                       .n_positions = n_positions};
  p->bytes[p->n++] = bytes;
}

/* What a packed buffer's producer wrote: its header, entries and the bytes
 * up to the end of the last item (pack_finish packs them tightly). */
static int64_t packed_bytes(const sl_packed_items *pk) {
  uint64_t end = sizeof *pk + pk->n * sizeof(sl_packed_entry);
  for (uint64_t i = 0; i < pk->n; i++)
    if (pk->entries[i].offset + pk->entries[i].size > end) end = pk->entries[i].offset + pk->entries[i].size;
  return (int64_t)end;
}

/* The packed buffer (malloc'd): header, entries, then the bytes. */
static sl_packed_items *pack_finish(const packer *p) {
  uint64_t data = sizeof(sl_packed_items) + (uint64_t)p->n * sizeof(sl_packed_entry), total = data;
  for (int i = 0; i < p->n; i++) total += p->entries[i].size;
  sl_packed_items *pk = calloc(1, (size_t)total);
  pk->n = (uint64_t)p->n;
  for (int i = 0; i < p->n; i++) {
    pk->entries[i] = p->entries[i];
    pk->entries[i].offset = data;
    memcpy((uint8_t *)pk + data, p->bytes[i], p->entries[i].size);
    data += p->entries[i].size;
  }
  return pk;
}

/* A fixture's stored chunks, in frame order, read with H5Dread_chunk. */
typedef struct stored {
  int n;
  uint8_t *bytes[MAX_ENTRIES];
  size_t size[MAX_ENTRIES];
  uint32_t mask[MAX_ENTRIES];
  int64_t first_frame[MAX_ENTRIES], n_frames[MAX_ENTRIES];
  char where[8][600];
  int file[MAX_ENTRIES];
  /* as hdf5_source's index has them: each chunk's origin (its index in the
   * acquisition) and its index in its file */
  int64_t origin[MAX_ENTRIES], file_chunk[MAX_ENTRIES];
  int64_t largest;
} stored;

/* The encoded port's describe_origin over a `stored` (ctx): the chunk with
 * that origin named as hdf5_source names it (sl_src_describe_chunk). */
static void stored_describe(const void *ctx, uint64_t origin, int64_t first, int64_t n, char *buf, size_t len) {
  const stored *s = ctx;
  for (int i = 0; i < s->n; i++)
    if ((uint64_t)s->origin[i] == origin) {
      sl_src_describe_chunk(s->where[s->file[i]], s->origin[i], s->file_chunk[i], first, n, buf, len);
      return;
    }
  snprintf(buf, len, "no stored chunk %llu", (unsigned long long)origin);
}

static void stored_read(stored *s, const char *name, const fx_opts *o) {
  memset(s, 0, sizeof *s);
  int64_t global = 0;
  for (int f = 0; f < o->n_files; f++) {
    char data[512];
    fx_data_path(name, f + 1, data, sizeof data);
    snprintf(s->where[f], sizeof s->where[f], "%s:/entry/data/data", data);
    for (int64_t local = 0; local < o->frames[f]; local += o->k) {
      assert_true(s->n < MAX_ENTRIES);
      int i = s->n++;
      s->bytes[i] = fx_read_chunk(data, "/entry/data/data", local, &s->size[i], &s->mask[i]);
      s->first_frame[i] = global + local;
      s->n_frames[i] = o->frames[f] - local < o->k ? o->frames[f] - local : o->k;
      s->file[i] = f;
      s->origin[i] = i;
      s->file_chunk[i] = local / o->k;
      if ((int64_t)s->size[i] > s->largest) s->largest = (int64_t)s->size[i];
    }
    global += o->frames[f];
  }
}

static void stored_free(stored *s) {
  for (int i = 0; i < s->n; i++) free(s->bytes[i]);
}

/* The packed input of scan positions [start, start + count): every stored
 * chunk holding one of them, as hdf5_source sends it. */
static sl_packed_items *pack_positions(const stored *s, int64_t start, int64_t count) {
  packer p = {.n = 0};
  for (int i = 0; i < s->n; i++)
    if (s->first_frame[i] < start + count && s->first_frame[i] + s->n_frames[i] > start)
      pack_add(&p, s->bytes[i], s->size[i], s->mask[i], s->origin[i], s->first_frame[i], s->n_frames[i]);
  return pack_finish(&p);
}

/* ---- the node -------------------------------------------------------------------- */

/* Streamed frames [1, npos | h, w] as stored chunks of k frames. */
static sl_tensor_desc encoded_desc(sl_dtype t, int64_t npos, int64_t h, int64_t w, sl_encoding enc,
                                   int64_t k, int64_t largest) {
  int64_t d[4] = {1, npos, h, w};
  sl_tensor_desc x = sl_desc_make(t, 4, d, 2);
  x.encoding = enc;
  x.positions_per_stored_chunk = k;
  x.min_positions_per_stored_chunk = 1;
  x.max_stored_chunk_bytes = largest;
  return x;
}

/* A node of bslz4_decode with param simd (NULL: the default) on input x. */
static sl_code decode_make(sl_node *n, const char *simd, const sl_tensor_desc *x, sl_error *e) {
  kv over[] = {{"simd", simd}};
  return node_make(n, &sl_node_bslz4_decode, over, simd ? 1 : 0, x, 1, e);
}

/* One kernel call: positions [start, start + count) of `in` to out. */
static sl_code decode_call(sl_node *n, sl_backend *b, const void *in, int64_t start, int64_t count,
                           void *out, sl_error *e) {
  sl_error_clear(e);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b, a.node = n, a.state = n->state, a.err = e;
  a.pos_start = start, a.pos_count = count;
  a.in[0] = in;
  a.in_bytes[0] = n->in[0].encoding != SL_ENC_NONE ? packed_bytes(in) : count * sl_desc_item_bytes(&n->in[0]);
  a.out[0] = out;
  void *scratch = lend_scratch(n, b, count, &a);
  sl_code rc = n->desc->kernel[SL_BACKEND_CPU](&a);
  free(scratch);
  return rc;
}

/* Decodes the fixture's acquisition in chunks of the scan of `chunk`
 * positions with every simd path and checks every frame. */
static void decode_fixture(const char *name, const fx_opts *o, sl_dtype t, sl_encoding enc,
                           int64_t chunk) {
  stored s;
  stored_read(&s, name, o);
  int64_t npos = 0;
  for (int f = 0; f < o->n_files; f++) npos += o->frames[f];
  sl_tensor_desc x = encoded_desc(t, npos, o->h, o->w, enc, o->k, s.largest);
  int64_t frame_bytes = sl_desc_item_bytes(&x);
  uint8_t *frames = malloc((size_t)(npos * frame_bytes));
  sl_backend *b = backend(3);
  for (sl_simd path = SL_SIMD_AUTO; path <= SL_SIMD_AVX2; path++) {
    if (path != SL_SIMD_AUTO && !sl_simd_supported(path)) continue;
    sl_node n;
    sl_error e;
    assert_int_equal(decode_make(&n, sl_simd_name(path), &x, &e), SL_OK);
    assert_int_equal(n.out[0].encoding, SL_ENC_NONE);
    assert_int_equal(n.out[0].dtype, t);
    memset(frames, 0xA5, (size_t)(npos * frame_bytes));
    for (int64_t start = 0; start < npos; start += chunk) {
      int64_t count = npos - start < chunk ? npos - start : chunk;
      sl_packed_items *pk = pack_positions(&s, start, count);
      sl_code rc = decode_call(&n, b, pk, start, count, frames + start * frame_bytes, &e);
      if (rc) print_error("%s, %s, chunk of %lld: %s\n", name, sl_simd_name(path), (long long)chunk, e.msg);
      assert_int_equal(rc, SL_OK);
      free(pk);
    }
    fx_check_frames(frames, sl_dtype_size(t), npos, o->h, o->w);
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
  free(frames);
  stored_free(&s);
}

/* ---- tests ------------------------------------------------------------------------ */

static void t_plugin_bslz4(void **state) {
  fx_require_bitshuffle();
  fx_opts o16 = {.n_files = 2, .frames = {6, 5}, .h = 32, .w = 24, .k = 2, .layout = FX_BSLZ4};
  fx_write("dec16", &o16, (char[512]){0}, 512);
  for (int64_t chunk = 1; chunk <= 11; chunk += 2) decode_fixture("dec16", &o16, SL_U16, SL_ENC_BSLZ4, chunk);
  /* Odd frames: blocks with trailing elements that are not bit-shuffled. */
  fx_opts odd = {.n_files = 1, .frames = {7}, .h = 37, .w = 41, .k = 3, .layout = FX_BSLZ4};
  fx_write("decodd", &odd, (char[512]){0}, 512);
  decode_fixture("decodd", &odd, SL_U16, SL_ENC_BSLZ4, 2);
  fx_opts o8 = {.n_files = 1, .frames = {5}, .h = 24, .w = 24, .k = 1, .layout = FX_BSLZ4,
                .dtype = H5T_STD_U8LE};
  fx_write("dec8", &o8, (char[512]){0}, 512);
  decode_fixture("dec8", &o8, SL_U8, SL_ENC_BSLZ4, 3);
  fx_opts o32 = {.n_files = 2, .frames = {4, 4}, .h = 20, .w = 16, .k = 4, .layout = FX_BSLZ4,
                 .dtype = H5T_STD_U32LE};
  fx_write("dec32", &o32, (char[512]){0}, 512);
  decode_fixture("dec32", &o32, SL_U32, SL_ENC_BSLZ4, 3);
}

static void t_plugin_bitshuffle_uncompressed(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 19, .w = 24, .k = 2, .layout = FX_BITSHUFFLE};
  fx_write("decraw", &o, (char[512]){0}, 512);
  decode_fixture("decraw", &o, SL_U16, SL_ENC_BITSHUFFLE, 3);
  decode_fixture("decraw", &o, SL_U16, SL_ENC_BITSHUFFLE, 11);
}

/* Plain frames pass through; so do chunks stored without the filter (filter
 * mask bit 0, or an SL_ENC_RAW stream). */
static void t_plain_and_raw(void **state) {
  int64_t d[4] = {2, 3, 5, 7};
  sl_tensor_desc plain = sl_desc_make(SL_U16, 4, d, 2);
  sl_node n;
  sl_error e;
  assert_int_equal(decode_make(&n, NULL, &plain, &e), SL_OK);
  assert_non_null(strstr(note(&n, "decoded"), "input was already plain frames"));
  uint16_t *in = random_frames(SL_U16, 6 * 35), *out = calloc(6 * 35, 2);
  sl_backend *b = backend(2);
  assert_int_equal(decode_call(&n, b, in, 0, 6, out, &e), SL_OK);
  assert_memory_equal(out, in, 6 * 35 * 2);
  node_free(&n);

  /* Stored chunks of 2 frames, raw: stored chunk 0 by the stream's
   * encoding, stored chunk 1 (bit 0 of its filter mask) in a BSLZ4 stream. */
  const int64_t frame_bytes = 35 * 2;
  for (int enc = 0; enc < 2; enc++) {
    sl_tensor_desc x = encoded_desc(SL_U16, 4, 5, 7, enc ? SL_ENC_BSLZ4 : SL_ENC_RAW, 2, 2 * frame_bytes);
    assert_int_equal(decode_make(&n, NULL, &x, &e), SL_OK);
    packer p = {.n = 0};
    pack_add(&p, (const uint8_t *)in, 2 * frame_bytes, enc ? 1 : 0, 0, 0, 2);
    pack_add(&p, (const uint8_t *)in + 2 * frame_bytes, 2 * frame_bytes, 1, 1, 2, 2);
    sl_packed_items *pk = pack_finish(&p);
    memset(out, 0, 4 * frame_bytes);
    /* positions 1..3: a part of each stored chunk */
    assert_int_equal(decode_call(&n, b, pk, 1, 3, out, &e), SL_OK);
    assert_memory_equal(out, in + 35, 3 * frame_bytes);
    /* a stored chunk with fewer bytes than its frames need */
    pk->entries[1].size -= 2;
    assert_int_equal(decode_call(&n, b, pk, 0, 4, out, &e), SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, "stored raw (filter skipped) with 138 bytes, needs 140"));
    free(pk);
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
  free(in);
  free(out);
}

/* A malformed stored chunk fails the call with the file and dataset, the
 * stored chunk and the frames it held. */
static void t_malformed_chunk(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 1, .frames = {6}, .h = 16, .w = 16, .k = 2, .layout = FX_BSLZ4};
  fx_write("decbad", &o, (char[512]){0}, 512);
  stored s;
  stored_read(&s, "decbad", &o);
  sl_tensor_desc x = encoded_desc(SL_U16, 6, 16, 16, SL_ENC_BSLZ4, 2, s.largest);
  x.describe_origin = stored_describe; /* the source's naming, over the chunks read here */
  x.origin_ctx = &s;
  sl_node n;
  sl_error e;
  assert_int_equal(decode_make(&n, NULL, &x, &e), SL_OK);
  uint8_t *out = malloc(6 * 16 * 16 * 2);
  sl_backend *b = backend(2);
  const char *needles[3] = {"corrupt LZ4 data", "decodes to", "truncated"};
  for (int kind = 0; kind < 3; kind++) {
    sl_packed_items *pk = pack_positions(&s, 0, 6);
    sl_packed_entry *en = &pk->entries[1];
    uint8_t *c = (uint8_t *)pk + en->offset;
    if (kind == 0) c[SL_BSLZ4_HEADER_BYTES + 4] = 0xFF; /* the first LZ4 token */
    if (kind == 1) c[6] = 0x03;                          /* total bytes 768, not 1024 */
    if (kind == 2) en->size = SL_BSLZ4_HEADER_BYTES + 2;
    sl_code rc = decode_call(&n, b, pk, 0, 6, out, &e);
    print_message("expected error: %s\n", e.msg);
    assert_int_equal(rc, SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, s.where[0]));
    assert_non_null(strstr(e.msg, "stored chunk 1 (frames 2-3)"));
    assert_non_null(strstr(e.msg, needles[kind]));
    free(pk);
  }
  /* In an acquisition of several files the message pairs the file's name
   * with the chunk's index in that file, and gives the acquisition's too. */
  sl_packed_items *pk = pack_positions(&s, 0, 6);
  sl_packed_entry *en = &pk->entries[1];
  ((uint8_t *)pk + en->offset)[SL_BSLZ4_HEADER_BYTES + 4] = 0xFF;
  en->origin = 41;
  s.origin[1] = 41; /* chunk 1 of its file, chunk 41 of the acquisition */
  assert_int_equal(decode_call(&n, b, pk, 0, 6, out, &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "stored chunk 1 of that file (chunk 41 of the acquisition, frames 2-3)"));
  free(pk);
  sl_cpu_backend_ops.destroy(b);
  free(out);
  node_free(&n);
  stored_free(&s);
}

/* ---- flag counts ------------------------------------------------------------------- */

static void put_be(uint8_t *p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* Bitshuffle of m elements (m a multiple of 8) of s bytes, bit by bit as the
 * format describes it: bit k of byte j of element i goes to row 8j + k, bit i. */
static void naive_shuffle(const uint8_t *in, uint8_t *out, size_t m, size_t s) {
  const size_t nb = m / 8;
  memset(out, 0, m * s);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < s; j++)
      for (size_t k = 0; k < 8; k++)
        out[(8 * j + k) * nb + i / 8] |= (uint8_t)(((in[i * s + j] >> k) & 1u) << (i % 8));
}

/* n elements of s bytes encoded as one stored chunk: bitshuffle-LZ4 (lz4)
 * or plain bitshuffle, blocks of bs elements; *size its bytes (malloc'd). */
static uint8_t *encode_chunk(const uint8_t *in, size_t n, size_t s, size_t bs, int lz4, size_t *size) {
  uint8_t *out = malloc(SL_BSLZ4_HEADER_BYTES + n * s + (n / bs + 2) * (4 + (size_t)LZ4_compressBound((int)(bs * s))));
  uint8_t *shuf = malloc(bs * s);
  size_t at = 0;
  if (lz4) {
    put_be(out, n * s, 8);
    put_be(out + 8, bs * s, 4);
    at = SL_BSLZ4_HEADER_BYTES;
  }
  size_t e = 0;
  while (n - e >= 8) {
    size_t m = n - e >= bs ? bs : (n - e) - (n - e) % 8;
    naive_shuffle(in + e * s, shuf, m, s);
    if (lz4) {
      int c = LZ4_compress_default((const char *)shuf, (char *)out + at + 4, (int)(m * s),
                                   LZ4_compressBound((int)(m * s)));
      assert_true(c > 0);
      put_be(out + at, (uint64_t)c, 4);
      at += 4 + (size_t)c;
    } else {
      memcpy(out + at, shuf, m * s);
      at += m * s;
    }
    e += m;
  }
  memcpy(out + at, in + e * s, (n - e) * s); /* the trailing elements, verbatim */
  *size = at + (n - e) * s;
  free(shuf);
  return out;
}

/* Frames with pixels at the dtype maximum: about 1 in 37 at random, the
 * last pixel of every frame, and every pixel of frame 2. */
static uint8_t *flagged_frames(sl_dtype t, int64_t npos, int64_t item) {
  const size_t s = sl_dtype_size(t);
  uint8_t *f = malloc((size_t)(npos * item) * s);
  for (int64_t i = 0; i < npos * item; i++) {
    uint64_t v = rnd();
    int flag = v % 37 == 0 || i % item == item - 1 || i / item == 2;
    for (size_t b = 0; b < s; b++) f[(size_t)i * s + b] = flag ? 0xFF : (uint8_t)(v >> (8 * (b + 1)));
    if (!flag) f[(size_t)i * s] &= 0xFE; /* not all ones */
  }
  return f;
}

/* The decoder's flag_counts output (and frames) for stored chunks of k
 * frames encoded as `enc`, in chunks of the scan of `chunk`, against counts
 * of the values per 1024 pixels. */
static void check_flag_counts(sl_dtype t, int64_t h, int64_t w, int64_t npos, int64_t k, sl_encoding enc,
                              size_t block_elems, int64_t chunk) {
  const size_t s = sl_dtype_size(t);
  const int64_t item = h * w, groups = (item + 1023) / 1024, fb = item * (int64_t)s;
  uint8_t *frames = flagged_frames(t, npos, item);
  uint32_t *want = calloc((size_t)(npos * groups), 4), *got = malloc((size_t)(npos * groups) * 4);
  for (int64_t f = 0; f < npos; f++)
    for (int64_t i = 0; i < item; i++) {
      size_t b = 0;
      while (b < s && frames[(size_t)(f * item + i) * s + b] == 0xFF) b++;
      want[f * groups + i / 1024] += b == s;
    }
  /* stored chunks of k frames (the last one shorter in frames, never in bytes:
   * HDF5 stores whole chunks; the frames past the end are zero) */
  int nst = (int)((npos + k - 1) / k);
  uint8_t *chunks[MAX_ENTRIES];
  size_t sizes[MAX_ENTRIES];
  int64_t largest = 0;
  uint8_t *whole = calloc((size_t)(k * fb), 1);
  for (int c = 0; c < nst; c++) {
    int64_t nf = npos - c * k < k ? npos - c * k : k;
    memset(whole, 0, (size_t)(k * fb));
    memcpy(whole, frames + c * k * fb, (size_t)(nf * fb));
    if (enc == SL_ENC_RAW) {
      chunks[c] = malloc((size_t)(k * fb));
      memcpy(chunks[c], whole, (size_t)(k * fb));
      sizes[c] = (size_t)(k * fb);
    } else {
      chunks[c] = encode_chunk(whole, (size_t)(k * item), s, block_elems, enc == SL_ENC_BSLZ4, &sizes[c]);
    }
    if ((int64_t)sizes[c] > largest) largest = (int64_t)sizes[c];
  }
  sl_tensor_desc x = encoded_desc(t, npos, h, w, enc, k, largest);
  x.encoded_block_elems = enc == SL_ENC_BITSHUFFLE ? (int64_t)block_elems : 0;
  uint8_t *out = malloc((size_t)(npos * fb));
  sl_backend *b = backend(2);
  for (sl_simd path = SL_SIMD_AUTO; path <= SL_SIMD_AVX2; path++) {
    if (path != SL_SIMD_AUTO && !sl_simd_supported(path)) continue;
    sl_node n;
    sl_error e;
    assert_int_equal(decode_make(&n, sl_simd_name(path), &x, &e), SL_OK);
    n.out_used = 3u; /* both outputs read */
    memset(got, 0xA5, (size_t)(npos * groups) * 4);
    memset(out, 0xA5, (size_t)(npos * fb));
    for (int64_t start = 0; start < npos; start += chunk) {
      int64_t count = npos - start < chunk ? npos - start : chunk;
      packer p = {.n = 0};
      for (int c = 0; c < nst; c++)
        if (c * k < start + count && c * k + k > start)
          pack_add(&p, chunks[c], sizes[c], 0, c, c * k, npos - c * k < k ? npos - c * k : k);
      sl_packed_items *pk = pack_finish(&p);
      sl_kernel_args a;
      memset(&a, 0, sizeof a);
      a.backend = b, a.node = &n, a.state = n.state, a.err = &e;
      a.pos_start = start, a.pos_count = count;
      a.in[0] = pk;
      a.in_bytes[0] = packed_bytes(pk);
      a.out[0] = out + start * fb;
      a.out[1] = got + start * groups;
      void *scratch = lend_scratch(&n, b, count, &a);
      sl_code rc = n.desc->kernel[SL_BACKEND_CPU](&a);
      free(scratch);
      if (rc) print_error("flag counts: %s\n", e.msg);
      assert_int_equal(rc, SL_OK);
      free(pk);
    }
    assert_memory_equal(out, frames, (size_t)(npos * fb));
    if (memcmp(got, want, (size_t)(npos * groups) * 4)) {
      for (int64_t i = 0; i < npos * groups; i++)
        if (got[i] != want[i])
          fail_msg("%s %lldx%lld k %lld enc %d block %zu chunk %lld path %s: frame %lld group %lld: %u, want %u",
                   sl_dtype_name(t), (long long)h, (long long)w, (long long)k, (int)enc, block_elems,
                   (long long)chunk, sl_simd_name(path), (long long)(i / groups), (long long)(i % groups), got[i],
                   want[i]);
    }
    node_free(&n);
  }
  sl_cpu_backend_ops.destroy(b);
  for (int c = 0; c < nst; c++) free(chunks[c]);
  free(whole);
  free(out);
  free(frames);
  free(want);
  free(got);
}

static void t_flag_counts(void **state) {
  const sl_dtype types[3] = {SL_U8, SL_U16, SL_U32};
  for (int ti = 0; ti < 3; ti++) {
    size_t s = sl_dtype_size(types[ti]), bs = sl_bshuf_default_block_elems(s);
    /* one frame per stored chunk; odd frames (trailing elements, groups that
     * straddle blocks); stored chunks split between chunks of the scan */
    check_flag_counts(types[ti], 48, 64, 7, 1, SL_ENC_BSLZ4, bs, 3);
    check_flag_counts(types[ti], 37, 53, 7, 3, SL_ENC_BSLZ4, bs, 2);
    check_flag_counts(types[ti], 45, 47, 5, 2, SL_ENC_BSLZ4, bs, 5);
    check_flag_counts(types[ti], 5, 7, 9, 4, SL_ENC_BSLZ4, bs, 3);
    check_flag_counts(types[ti], 37, 53, 7, 3, SL_ENC_BITSHUFFLE, 64, 2);
    check_flag_counts(types[ti], 33, 35, 6, 2, SL_ENC_RAW, bs, 4);
    /* many blocks per stored chunk (groups across blocks, blocks across frames) */
    check_flag_counts(types[ti], 192, 192, 5, 1, SL_ENC_BSLZ4, bs, 3);
    check_flag_counts(types[ti], 61, 67, 6, 2, SL_ENC_BSLZ4, 64, 4);
  }
  /* plain frames: counted by value */
  int64_t d[4] = {1, 5, 33, 35};
  sl_tensor_desc plain = sl_desc_make(SL_U16, 4, d, 2);
  uint8_t *frames = flagged_frames(SL_U16, 5, 33 * 35);
  uint16_t *out = malloc(5 * 33 * 35 * 2);
  uint32_t got[5 * 2];
  sl_node n;
  sl_error e;
  assert_int_equal(decode_make(&n, NULL, &plain, &e), SL_OK);
  n.out_used = 3u;
  sl_backend *b = backend(1);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b, a.node = &n, a.err = &e, a.pos_count = 5;
  a.in[0] = frames;
  a.out[0] = out;
  a.out[1] = got;
  assert_int_equal(n.desc->kernel[SL_BACKEND_CPU](&a), SL_OK);
  for (int f = 0; f < 5; f++) {
    uint32_t w0 = 0, w1 = 0;
    const uint16_t *fr = (const uint16_t *)(const void *)frames + f * 33 * 35;
    for (int i = 0; i < 33 * 35; i++) *(i < 1024 ? &w0 : &w1) += fr[i] == 0xFFFF;
    assert_int_equal(got[2 * f], w0);
    assert_int_equal(got[2 * f + 1], w1);
  }
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  free(frames);
  free(out);
}

static void t_params_infer_cost(void **state) {
  int64_t d[4] = {2, 3, 5, 7};
  sl_tensor_desc x = encoded_desc(SL_U16, 6, 5, 7, SL_ENC_BSLZ4, 2, 100);
  sl_node n;
  sl_error e;
  /* simd is an enum: anything else is refused when the graph is built. */
  assert_int_equal(decode_make(&n, "avx512", &x, &e), SL_ERR_PIPELINE);
  assert_non_null(strstr(e.msg, "must be one of auto|scalar|sse2|avx2"));
  node_free(&n);
  /* Inputs: streamed u8/u16/u32 frames. */
  sl_tensor_desc bad[3] = {sl_desc_make(SL_F32, 4, d, 2), sl_desc_make(SL_U16, 4, d, 0),
                           sl_desc_make(SL_U64, 4, d, 2)};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(decode_make(&n, NULL, &bad[i], &e), SL_ERR_PIPELINE);
    assert_non_null(strstr(e.msg, "input 'chunks' expects streamed u8, u16 or u32"));
    node_free(&n);
  }
  /* Output: plain frames of the input's type and shape; cost. */
  assert_int_equal(decode_make(&n, NULL, &x, &e), SL_OK);
  assert_int_equal(n.out[0].encoding, SL_ENC_NONE);
  assert_int_equal(n.out[0].positions_per_stored_chunk, 0);
  assert_int_equal(n.out[0].max_stored_chunk_bytes, 0);
  assert_true(sl_desc_equal_shape(&n.out[0], &x));
  /* flag_counts: the stream axes, then ceil(5 * 7 / 1024) = 1 group */
  assert_int_equal(n.out[1].dtype, SL_U32);
  assert_int_equal(n.out[1].stream_rank, x.stream_rank);
  assert_int_equal(n.out[1].rank, x.stream_rank + 1);
  assert_int_equal(n.out[1].dims[x.stream_rank], 1);
  assert_non_null(strstr(note(&n, "decoded"), sl_encoding_name(SL_ENC_BSLZ4)));
  sl_node_cost c;
  n.desc->cost(&n, 4, &c);
  assert_int_equal(c.bytes_written, 4 * 35 * 2);
  /* the packed buffer's bound: a 16-byte header, and for 4 positions of
   * stored chunks of at least 1 frame, 4 entries of 48 bytes with at most
   * 100 stored bytes each (+ 8 bytes of slack) */
  assert_int_equal(c.bytes_read, 16 + 4 * (48 + 100 + 8));
  assert_int_equal(c.ops, 2 * c.bytes_written);
  assert_int_equal(c.per_worker_bytes, (2 * 35 * 2 + 63) / 64 * 64); /* one stored chunk, 64-byte aligned */
  node_free(&n);

  const sl_node_desc *desc = &sl_node_bslz4_decode;
  assert_string_equal(desc->type, "bslz4_decode");
  assert_int_equal(desc->n_inputs, 1);
  assert_int_equal(desc->n_outputs, 2);
  assert_string_equal(desc->outputs[1].name, "flag_counts");
  assert_int_equal(desc->n_params, 2);
  assert_string_equal(desc->params[0].name, "simd");
  assert_string_equal(desc->params[0].choices, SL_SIMD_CHOICES);
  assert_string_equal(desc->params[1].name, "check_each_call");
  assert_int_equal(desc->params[1].type, SL_PT_BOOL);
  assert_ptr_equal(sl_registry_find(sl_nodes_registry(), "bslz4_decode"), desc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_plugin_bslz4),
      cmocka_unit_test(t_plugin_bitshuffle_uncompressed),
      cmocka_unit_test(t_plain_and_raw),
      cmocka_unit_test(t_flag_counts),
      cmocka_unit_test(t_malformed_chunk),
      cmocka_unit_test(t_params_infer_cost),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
