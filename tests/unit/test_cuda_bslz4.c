/* bslz4_decode on the CUDA backend against the CPU backend, bit for bit.
 * Stored chunks come from the official bitshuffle HDF5 plugin (written through
 * libh5bshuf.so, read back raw with H5Dread_chunk) when it is installed, and
 * always from an in-test writer (liblz4 + a plain bit transposition, checked
 * by the CPU decoder first). They are packed as hdf5_source packs them
 * (sl_packed_items), uploaded, decoded by the CUDA launcher (its plain
 * parameter struct, shaders/cuda/detector/bslz4_decode.h) through a real
 * CUDA backend (batch API) and compared with the CPU node kernel's output on
 * the same packed buffer, for whole runs and for chunks of the scan that cut
 * stored chunks; the flag counts (output 1) of both against counts of the
 * written frames' values. Malformed chunks must fail with SL_ERR_FORMAT and the CPU's
 * message. Without a CUDA device (or a build without CUDA) every test prints
 * "SKIP: no CUDA device" and skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>
#include <lz4.h>

#include "engine/backend/backend.h"
#include "engine/graph/graph.h"
#include "nodes/codec/bslz4.h"
#include "nodes/hdf5/source_window.h"
#include "shaders/cuda/detector/bslz4_decode.h"
#include "tests/unit/device_table_lend.h"
#include "tests/unit/cuda_probe.h"
#include "tests/unit/lend_scratch.h"

#define PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"

extern const sl_node_desc sl_node_bslz4_decode;

/* ------------------------------------------------------------ device --- */

static sl_backend *g_cuda, *g_cpu;
static int g_cuda_state = -1; /* -1 unknown, 0 none, 1 ready */

static int have_cuda(void) {
  if (g_cuda_state >= 0) return g_cuda_state;
  g_cuda_state = 0;
#ifdef SLUICE_HAVE_CUDA
  sl_error err;
  sl_error_clear(&err);
  if (!sl_test_cuda_available()) return 0;
  if (sl_backend_ops_for(SL_BACKEND_CUDA)->create(0, &g_cuda, &err) != SL_OK) {
    print_message("SKIP: no CUDA device (create failed: %s)\n", err.msg);
    return 0;
  }
  print_message("CUDA device: %s\n", g_cuda->caps.device);
  g_cuda_state = 1;
  if (sl_cpu_backend_ops.create(0, &g_cpu, &err) != SL_OK) fail_msg("cpu backend: %s", err.msg);
#else
  (void)sl_test_cuda_available();
#endif
  return g_cuda_state;
}

#define NEED_CUDA()                                                                                \
  do {                                                                                             \
    if (!have_cuda()) skip();                                                                      \
  } while (0)

/* ------------------------------------------------------------ data --- */

#include "tests/unit/test_rng.h"

/* Frame content: 0 detector-like, 1 uniform random bytes (incompressible:
 * blocks too large to stage), 2 runs of 2048 zero elements and 2048 random
 * ones (long literal runs at block ends: the in-place decoder's two-pass
 * copy), 3 zeros with a pixel of 1 every 1000 (long overlapping matches). */
static int g_fill = 0;

/* Detector-like frames: bright disk (mean ~20), sparse dark field (~0.05),
 * a few pixels at the dtype's maximum (or g_fill's other contents). */
static void fill_frames(uint8_t *buf, size_t elem, size_t frames, size_t h, size_t w) {
  uint64_t maxv = elem >= 8 ? UINT64_MAX : ((uint64_t)1 << (8 * elem)) - 1;
  if (g_fill) {
    for (size_t i = 0; i < frames * h * w; i++) {
      uint64_t v = g_fill == 1 ? rng() : g_fill == 2 ? ((i / 2048) % 2 ? rng() : 0) : (i % 1000 == 999);
      v &= maxv;
      memcpy(buf + i * elem, &v, elem);
    }
    return;
  }
  for (size_t f = 0; f < frames; f++)
    for (size_t r = 0; r < h; r++)
      for (size_t c = 0; c < w; c++) {
        double dr = (double)r - h / 2.0, dc = (double)c - w / 2.0;
        uint64_t v = poisson(dr * dr + dc * dc < (h * w) / 16.0 ? 20.0 : 0.05);
        if (rng() % 997 == 0) v = maxv;
        if (v > maxv) v = maxv;
        memcpy(buf + ((f * h + r) * w + c) * elem, &v, elem);
      }
}

static void wr_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static void wr_be64(uint8_t *p, uint64_t v) {
  wr_be32(p, (uint32_t)(v >> 32));
  wr_be32(p + 4, (uint32_t)v);
}

/* Bit transposition of m elements (m % 8 == 0): the writer's side. */
static void bitshuffle_block(const uint8_t *in, uint8_t *out, size_t m, size_t s) {
  size_t rb = m / 8;
  memset(out, 0, m * s);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < s; j++)
      for (size_t k = 0; k < 8; k++)
        if ((in[i * s + j] >> k) & 1) out[(8 * j + k) * rb + i / 8] |= (uint8_t)(1u << (i % 8));
}

/* One chunk as the plugin writes it: comp 2 (LZ4, with header) or 0. */
static uint8_t *encode_chunk(const uint8_t *data, size_t bytes, size_t s, size_t bs, int comp,
                             size_t *out_size) {
  size_t n = bytes / s;
  uint8_t *out = malloc(12 + bytes + (bytes / bs + 2) * (4 + 64) + LZ4_compressBound((int)(bs * s)) + 64);
  uint8_t *tmp = malloc(bs * s);
  size_t pos = 0;
  if (comp == 2) {
    wr_be64(out, bytes);
    wr_be32(out + 8, (uint32_t)(bs * s));
    pos = 12;
  }
  size_t e = 0;
  while (e < n) {
    size_t m = n - e >= bs ? bs : (n - e) - (n - e) % 8;
    if (!m) break;
    bitshuffle_block(data + e * s, tmp, m, s);
    if (comp == 2) {
      int c = LZ4_compress_default((const char *)tmp, (char *)out + pos + 4, (int)(m * s),
                                   LZ4_compressBound((int)(m * s)));
      assert_true(c > 0);
      wr_be32(out + pos, (uint32_t)c);
      pos += 4 + (size_t)c;
    } else {
      memcpy(out + pos, tmp, m * s);
      pos += m * s;
    }
    e += m;
  }
  memcpy(out + pos, data + e * s, (n - e) * s);
  pos += (n - e) * s;
  free(tmp);
  *out_size = pos;
  return out;
}

/* ------------------------------------------------------------ plugin --- */

static int plugin_ok = -1;
static int have_plugin(void) {
  if (plugin_ok < 0) {
    plugin_ok = 0;
    if (access(PLUGIN_DIR "/libh5bshuf.so", R_OK) == 0) {
      setenv("HDF5_PLUGIN_PATH", PLUGIN_DIR, 1);
      plugin_ok = H5Zfilter_avail(SL_BSHUF_FILTER_ID) > 0;
    }
    if (!plugin_ok)
      print_message("note: bitshuffle HDF5 plugin not found under %s: plugin-written cases skipped "
                    "(in-test writer cases still run)\n", PLUGIN_DIR);
  }
  return plugin_ok;
}

static hid_t h5_type(size_t elem) {
  return elem == 1 ? H5T_NATIVE_UINT8 : elem == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
}

/* Stored chunks of (frames, h, w) with chunks of fpc frames written through the
 * plugin; chunks[i] malloc'd, sizes[i]. */
static void plugin_chunks(const uint8_t *data, size_t elem, size_t frames, size_t h, size_t w,
                          size_t fpc, unsigned block_elems, unsigned comp, uint8_t **chunks,
                          size_t *sizes) {
  static int serial;
  char path[256];
  snprintf(path, sizeof path, "/tmp/sluice-test-cuda-bslz4-%d-%d.h5", (int)getpid(), serial++);
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(file >= 0);
  hsize_t dims[3] = {frames, h, w}, chunk[3] = {fpc, h, w};
  hid_t space = H5Screate_simple(3, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
  unsigned cd[2] = {block_elems, comp}; /* set_local prepends major, minor, elem */
  assert_true(H5Pset_filter(dcpl, SL_BSHUF_FILTER_ID, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
  hid_t dset = H5Dcreate2(file, "data", h5_type(elem), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  assert_true(dset >= 0);
  assert_true(H5Dwrite(dset, h5_type(elem), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  assert_true(H5Fflush(file, H5F_SCOPE_LOCAL) >= 0);
  for (size_t c = 0; c * fpc < frames; c++) {
    hsize_t off[3] = {c * fpc, 0, 0}, nbytes = 0;
    assert_true(H5Dget_chunk_storage_size(dset, off, &nbytes) >= 0);
    chunks[c] = malloc(nbytes ? nbytes : 1);
    uint32_t mask = 0;
    assert_true(H5Dread_chunk(dset, H5P_DEFAULT, off, &mask, chunks[c]) >= 0);
    assert_int_equal(mask, 0);
    sizes[c] = nbytes;
  }
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Dclose(dset);
  H5Fclose(file);
  unlink(path);
}

/* ------------------------------------------------------------ packing --- */

typedef struct acq {
  size_t elem, frames, h, w, fpc;
  sl_encoding enc;
  int64_t block_elems; /* cd_values[3] */
  uint8_t *data;       /* frames as written */
  size_t nchunks;
  uint8_t **chunks;
  size_t *sizes;
  uint32_t *masks; /* filter_mask per stored chunk */
  sl_tensor_desc desc;
} acq;

/* The port's describe_origin: stored chunk `origin` of one file (ctx: its
 * "file:dataset"), named as hdf5_source names it. */
static void describe_stored_chunk(const void *ctx, uint64_t origin, int64_t first, int64_t n, char *buf,
                                  size_t len) {
  sl_src_describe_chunk(ctx, (int64_t)origin, (int64_t)origin, first, n, buf, len);
}

static void acq_desc(acq *q) {
  int64_t dims[3] = {(int64_t)q->frames, (int64_t)q->h, (int64_t)q->w};
  sl_dtype dt = q->elem == 1 ? SL_U8 : q->elem == 2 ? SL_U16 : SL_U32;
  q->desc = sl_desc_make(dt, 3, dims, 1);
  q->desc.encoding = q->enc;
  q->desc.positions_per_stored_chunk = (int64_t)q->fpc;
  size_t rem = q->frames % q->fpc;
  q->desc.min_positions_per_stored_chunk = (int64_t)(rem ? rem : q->fpc);
  int64_t mx = 0;
  for (size_t c = 0; c < q->nchunks; c++)
    if ((int64_t)q->sizes[c] > mx) mx = (int64_t)q->sizes[c];
  q->desc.max_stored_chunk_bytes = mx;
  q->desc.encoded_block_elems = q->block_elems;
  q->desc.describe_origin = describe_stored_chunk;
  q->desc.origin_ctx = "test.h5:/data";
}

/* comp: 2 LZ4, 0 bitshuffle only, -1 raw. use_plugin: chunks from the plugin. */
static void acq_make(acq *q, size_t elem, size_t frames, size_t h, size_t w, size_t fpc,
                     int64_t block_elems, int comp, int use_plugin) {
  memset(q, 0, sizeof *q);
  q->elem = elem, q->frames = frames, q->h = h, q->w = w, q->fpc = fpc;
  q->block_elems = block_elems;
  q->enc = comp == 2 ? SL_ENC_BSLZ4 : comp == 0 ? SL_ENC_BITSHUFFLE : SL_ENC_RAW;
  size_t fb = h * w * elem, cb = fpc * fb;
  q->nchunks = (frames + fpc - 1) / fpc;
  /* the edge chunk is stored full size: pad the data to whole chunks */
  q->data = calloc(q->nchunks * cb, 1);
  fill_frames(q->data, elem, frames, h, w);
  q->chunks = calloc(q->nchunks, sizeof *q->chunks);
  q->sizes = calloc(q->nchunks, sizeof *q->sizes);
  q->masks = calloc(q->nchunks, sizeof *q->masks);
  if (use_plugin && comp >= 0) {
    plugin_chunks(q->data, elem, frames, h, w, fpc, (unsigned)block_elems, (unsigned)comp, q->chunks,
                  q->sizes);
  } else {
    size_t bs = block_elems ? (size_t)block_elems : sl_bshuf_default_block_elems(elem);
    for (size_t c = 0; c < q->nchunks; c++) {
      if (comp < 0) {
        q->chunks[c] = malloc(cb);
        memcpy(q->chunks[c], q->data + c * cb, cb);
        q->sizes[c] = cb;
      } else {
        q->chunks[c] = encode_chunk(q->data + c * cb, cb, elem, bs, comp, &q->sizes[c]);
      }
    }
  }
  acq_desc(q);
}

static void acq_free(acq *q) {
  for (size_t c = 0; c < q->nchunks; c++) free(q->chunks[c]);
  free(q->chunks);
  free(q->sizes);
  free(q->masks);
  free(q->data);
}

/* Packs the stored chunks overlapping [ps, ps + pc) as hdf5_source does;
 * misalign shifts each chunk's bytes by 0..7 bytes. Returns the buffer of
 * sl_desc_encoded_bound(desc, pc) bytes (the producer's bound). */
__attribute__((unused)) static uint8_t *pack(const acq *q, int64_t ps, int64_t pc, int misalign, size_t *bytes) {
  size_t cap = (size_t)sl_desc_encoded_bound(&q->desc, pc);
  uint8_t *buf = calloc(cap, 1);
  sl_packed_items *pk = (sl_packed_items *)buf;
  size_t c0 = (size_t)ps / q->fpc, c1 = (size_t)(ps + pc - 1) / q->fpc;
  size_t n = c1 - c0 + 1;
  size_t pos = sizeof(sl_packed_items) + n * sizeof(sl_packed_entry);
  pk->n = n;
  for (size_t i = 0; i < n; i++) {
    size_t c = c0 + i;
    pos = (pos + 7) & ~(size_t)7;
    if (misalign) pos += (i * 3 + 1) % 8;
    assert_true(pos + q->sizes[c] <= cap);
    memcpy(buf + pos, q->chunks[c], q->sizes[c]);
    sl_packed_entry *e = &pk->entries[i];
    e->offset = pos;
    e->size = q->sizes[c];
    e->flags = (q->masks[c] & 1u) ? SL_PACKED_STORED_RAW : 0;
    e->origin = (uint64_t)c;
    e->first_position = (int64_t)(c * q->fpc);
    size_t left = q->frames - c * q->fpc;
    e->n_positions = (int64_t)(left < q->fpc ? left : q->fpc);
    pos += q->sizes[c];
  }
  *bytes = cap;
  return buf;
}

/* ------------------------------------------------------------ running --- */

/* The node for the CPU kernel, and the CUDA launcher's params with the
 * device-state slot the launcher fills and the device table it is lent
 * (on the first CUDA call, for that call's positions: the largest). */
typedef struct dnode {
  sl_node node;
  sl_param_value param;
  sl_cuda_bslz4_decode_params cuda;
  void *dev_state;
  void (*dev_state_free)(void *);
  test_table table;
} dnode;

__attribute__((unused)) static void dnode_init(dnode *d, const sl_tensor_desc *in) {
  memset(d, 0, sizeof *d);
  d->param.type = SL_PT_STRING;
  d->param.s = (char *)"auto";
  d->node.desc = &sl_node_bslz4_decode;
  d->node.id = (char *)"decode";
  d->node.params = &d->param;
  d->node.n_in = 1;
  d->node.n_out = 2;
  d->node.in[0] = *in;
  sl_node_bind_typed_params(&d->node);
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_node_bslz4_decode.infer(&d->node, &err), SL_OK);
  d->cuda.chunks = *in;
  d->cuda.check_every_call = false;
  d->cuda.device_state = (sl_cuda_state_holder){&d->dev_state, &d->dev_state_free};
}

__attribute__((unused)) static void dnode_release(dnode *d) {
  test_table_give_back(&d->table, &d->dev_state, &d->dev_state_free);
  free(d->node.typed_params);
  d->node.typed_params = NULL;
}

/* The flag counts of n frames of `item` elements of s bytes, by value: per
 * frame and 1024 pixels, the elements with every byte 0xFF. */
__attribute__((unused)) static uint32_t *value_counts(const uint8_t *frames, size_t n, size_t item, size_t s) {
  const size_t groups = (item + 1023) / 1024;
  uint32_t *c = calloc(n * groups + 1, sizeof *c);
  for (size_t i = 0; i < n * item; i++) {
    size_t b = 0;
    while (b < s && frames[i * s + b] == 0xFF) b++;
    c[(i / item) * groups + (i % item) / 1024] += b == s;
  }
  return c;
}

/* counts: the flag counts' output (read), or NULL (not read). */
__attribute__((unused)) static sl_code run_cpu(dnode *d, const uint8_t *packed, int64_t ps, int64_t pc, uint8_t *out,
                       uint32_t *counts, sl_error *err) {
  d->node.out_used = counts ? 3u : 1u;
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = g_cpu;
  a.node = &d->node;
  a.chunk = 0;
  a.n_chunks = 1;
  a.pos_start = ps;
  a.pos_count = pc;
  a.in[0] = packed;
  a.in_bytes[0] = sl_desc_encoded_bound(&d->node.in[0], pc); /* pack's buffer */
  a.out[0] = out;
  a.out[1] = counts;
  a.err = err;
  void *scratch = lend_scratch(&d->node, g_cpu, pc, &a);
  sl_code rc = sl_node_bslz4_decode.kernel[SL_BACKEND_CPU](&a);
  free(scratch);
  return rc;
}

#ifdef SLUICE_HAVE_CUDA
/* The launcher with the params in a->state, as a kernel function. */
static sl_code decode_on_cuda(sl_kernel_args *a) {
  return sl_cuda_bslz4_decode((const sl_cuda_bslz4_decode_params *)a->state, a);
}

/* One call of the CUDA launcher through the backend's batch API. */
static sl_code run_cuda(dnode *d, const uint8_t *packed, size_t packed_bytes, int64_t ps, int64_t pc,
                        int64_t chunk, int64_t n_chunks, uint8_t *out, size_t out_bytes, uint32_t *counts,
                        sl_error *err) {
  sl_backend *b = g_cuda;
  void *din = NULL, *dout = NULL, *dcounts = NULL;
  const size_t counts_bytes = (size_t)pc * (size_t)d->node.out[1].dims[d->node.out[1].rank - 1] * 4;
  sl_error e2;
  sl_error_clear(&e2);
  assert_int_equal(b->ops->alloc(b, packed_bytes, &din, &e2), SL_OK);
  assert_int_equal(b->ops->alloc(b, out_bytes, &dout, &e2), SL_OK);
  assert_int_equal(b->ops->upload(b, din, packed, packed_bytes, &e2), SL_OK);
  /* poison the output so that missing writes show */
  uint8_t *poison = malloc(out_bytes);
  memset(poison, 0xA5, out_bytes);
  assert_int_equal(b->ops->upload(b, dout, poison, out_bytes, &e2), SL_OK);
  free(poison);
  d->cuda.flag_counts = counts != NULL;
  if (counts) { /* poisoned too: the launcher must zero them */
    assert_int_equal(b->ops->alloc(b, counts_bytes, &dcounts, &e2), SL_OK);
    uint8_t *pc_bytes = malloc(counts_bytes);
    memset(pc_bytes, 0xA5, counts_bytes);
    assert_int_equal(b->ops->upload(b, dcounts, pc_bytes, counts_bytes, &e2), SL_OK);
    free(pc_bytes);
  }
  assert_int_equal(test_table_lend(&d->table, b, test_table_bytes(&d->node, pc, pc), &e2), SL_OK);
  sl_kernel_args a = {.backend = b, .node_id = "decode", .state = &d->cuda, .chunk = chunk,
                      .n_chunks = n_chunks, .pos_start = ps, .pos_count = pc, .in = {din},
                      .in_bytes = {(int64_t)packed_bytes},
                      .out = {dout, dcounts}, .err = err};
  test_table_args(&d->table, &a);
  sl_code rc = b->ops->batch_begin(b, err);
  if (rc == SL_OK) rc = b->ops->batch_encode(b, decode_on_cuda, &a, err);
  sl_code rc2 = b->ops->batch_commit(b, rc == SL_OK ? err : &e2);
  if (rc == SL_OK) rc = rc2;
  rc2 = b->ops->batch_wait(b, rc == SL_OK ? err : &e2);
  if (rc == SL_OK) rc = rc2;
  if (rc == SL_OK) assert_int_equal(b->ops->download(b, out, dout, out_bytes, &e2), SL_OK);
  if (rc == SL_OK && counts) assert_int_equal(b->ops->download(b, counts, dcounts, counts_bytes, &e2), SL_OK);
  b->ops->free(b, din, packed_bytes);
  b->ops->free(b, dout, out_bytes);
  if (dcounts) b->ops->free(b, dcounts, counts_bytes);
  return rc;
}
#endif

/* Decodes the whole acquisition in chunks of the scan of `step` positions on
 * both backends; compares every chunk, and the CPU with the written data. */
static void compare(acq *q, int64_t step, int misalign, const char *what) {
#ifdef SLUICE_HAVE_CUDA
  dnode d;
  dnode_init(&d, &q->desc);
  size_t fb = q->h * q->w * q->elem;
  int64_t frames = (int64_t)q->frames;
  int64_t n_chunks = (frames + step - 1) / step;
  uint8_t *cpu = malloc((size_t)step * fb + 1), *gpu = malloc((size_t)step * fb + 1);
  const size_t groups = (q->h * q->w + 1023) / 1024;
  uint32_t *want_counts = value_counts(q->data, q->frames, q->h * q->w, q->elem);
  uint32_t *cpu_counts = malloc((size_t)step * groups * 4), *gpu_counts = malloc((size_t)step * groups * 4);
  for (int64_t c = 0; c < n_chunks; c++) {
    int64_t ps = c * step, pc = frames - ps < step ? frames - ps : step;
    size_t pb;
    uint8_t *packed = pack(q, ps, pc, misalign, &pb);
    sl_error ec, eg;
    sl_error_clear(&ec);
    sl_error_clear(&eg);
    /* every other chunk also reads the flag counts */
    const int with_counts = c % 2 == 0;
    sl_code rc = run_cpu(&d, packed, ps, pc, cpu, with_counts ? cpu_counts : NULL, &ec);
    if (rc != SL_OK) fail_msg("%s: CPU failed: %s", what, ec.msg);
    if (memcmp(cpu, q->data + (size_t)ps * fb, (size_t)pc * fb))
      fail_msg("%s: CPU output differs from the written frames (chunk %lld)", what, (long long)c);
    if (with_counts && memcmp(cpu_counts, want_counts + (size_t)ps * groups, (size_t)pc * groups * 4))
      fail_msg("%s: CPU flag counts differ from the frames' values (chunk %lld)", what, (long long)c);
    rc = run_cuda(&d, packed, pb, ps, pc, c, n_chunks, gpu, (size_t)pc * fb, with_counts ? gpu_counts : NULL, &eg);
    if (rc != SL_OK) fail_msg("%s: CUDA failed on chunk %lld: %s: %s", what, (long long)c, sl_code_name(rc), eg.msg);
    if (memcmp(cpu, gpu, (size_t)pc * fb)) {
      size_t k = 0;
      while (cpu[k] == gpu[k]) k++;
      fail_msg("%s: CUDA output differs from the CPU's in chunk %lld (positions %lld+%lld) at byte %zu "
               "(frame %zu, byte %zu): cpu %02x gpu %02x",
               what, (long long)c, (long long)ps, (long long)pc, k, k / fb, k % fb, cpu[k], gpu[k]);
    }
    if (with_counts && memcmp(cpu_counts, gpu_counts, (size_t)pc * groups * 4)) {
      size_t k = 0;
      while (cpu_counts[k] == gpu_counts[k]) k++;
      fail_msg("%s: CUDA flag counts differ from the CPU's in chunk %lld: frame %zu group %zu: cpu %u gpu %u",
               what, (long long)c, k / groups, k % groups, cpu_counts[k], gpu_counts[k]);
    }
    free(packed);
  }
  free(want_counts);
  free(cpu_counts);
  free(gpu_counts);
  free(cpu);
  free(gpu);
  dnode_release(&d);
#else
  (void)q, (void)step, (void)misalign, (void)what;
#endif
}

/* One configuration, writer chosen by use_plugin, scanned in several ways. */
static void config(size_t elem, size_t frames, size_t h, size_t w, size_t fpc, int64_t block_elems,
                   int comp, int use_plugin) {
  acq q;
  acq_make(&q, elem, frames, h, w, fpc, block_elems, comp, use_plugin);
  char what[160];
  snprintf(what, sizeof what, "%s u%zu %zux%zu x%zu fpc %zu block %lld comp %d",
           use_plugin ? "plugin" : "writer", 8 * elem, h, w, frames, fpc, (long long)block_elems, comp);
  compare(&q, (int64_t)frames, 0, what);      /* one call */
  compare(&q, (int64_t)frames, 1, what);      /* misaligned stored chunks */
  if (frames > 1) compare(&q, 1, 0, what);    /* one frame per call */
  if (fpc > 1 && frames > 2) compare(&q, (int64_t)fpc + 1, 1, what); /* cuts stored chunks */
  acq_free(&q);
}

static void matrix(int use_plugin) {
  size_t elems[] = {1, 2, 4};
  int64_t blocks[] = {0, 64, 256, 2048};
  for (size_t e = 0; e < 3; e++)
    for (size_t b = 0; b < 4; b++) {
      config(elems[e], 3, 37, 41, 1, blocks[b], 2, use_plugin); /* n % 8 == 5 */
      config(elems[e], 7, 24, 40, 3, blocks[b], 2, use_plugin); /* 3 per chunk, edge chunk */
      config(elems[e], 3, 37, 41, 2, blocks[b], 0, use_plugin); /* bitshuffle, no LZ4 */
    }
  config(2, 6, 192, 192, 1, 0, 2, use_plugin); /* the detector frame: 9 full blocks */
  config(2, 5, 192, 192, 2, 0, 2, use_plugin);
  config(2, 2, 1, 3, 1, 0, 2, use_plugin);     /* fewer than 8 elements: tail only */
  config(2, 2, 1, 13, 1, 0, 2, use_plugin);    /* one 8-element block and a tail */
  config(4, 3, 96, 96, 1, 0, 2, use_plugin);
  config(1, 4, 128, 128, 2, 0, 2, use_plugin);
}

static void test_writer_chunks(void **state) {
  (void)state;
  NEED_CUDA();
  matrix(0);
}

static void test_plugin_chunks(void **state) {
  (void)state;
  NEED_CUDA();
  if (!have_plugin()) skip();
  matrix(1);
}

/* Detector-like, incompressible, half-random and nearly empty frames, with
 * the default and a 32 KiB block size (incompressible blocks do not fit in
 * place and are decoded from global memory). */
static void test_frame_contents(void **state) {
  (void)state;
  NEED_CUDA();
  for (g_fill = 0; g_fill < 4; g_fill++) {
    config(2, 4, 192, 192, 1, 0, 2, 0);
    config(2, 3, 192, 192, 2, 16384, 2, 0);
    config(1, 3, 96, 101, 1, 0, 2, 0);
    config(4, 3, 64, 72, 1, 0, 2, 0);
    config(4, 3, 37, 41, 2, 2048, 0, 0); /* bitshuffle, no LZ4 */
  }
  g_fill = 0;
}

static void test_raw_and_plain(void **state) {
  (void)state;
  NEED_CUDA();
  /* raw encoding */
  config(2, 5, 37, 41, 2, 0, -1, 0);
  config(1, 9, 64, 64, 4, 0, -1, 0);
  /* LZ4 stream with stored-raw chunks (filter skipped, filter_mask bit 0) */
  acq q;
  acq_make(&q, 2, 7, 37, 41, 2, 0, 2, 0);
  size_t cb = q.fpc * q.h * q.w * q.elem;
  for (size_t c = 1; c < q.nchunks; c += 2) {
    free(q.chunks[c]);
    q.chunks[c] = malloc(cb);
    memcpy(q.chunks[c], q.data + c * cb, cb);
    q.sizes[c] = cb;
    q.masks[c] = 1;
  }
  acq_desc(&q);
  compare(&q, 7, 1, "stored-raw chunks");
  compare(&q, 3, 0, "stored-raw chunks, cut");
  acq_free(&q);
#ifdef SLUICE_HAVE_CUDA
  /* plain frames pass through */
  int64_t dims[3] = {5, 37, 41};
  sl_tensor_desc plain = sl_desc_make(SL_U16, 3, dims, 1);
  dnode d;
  dnode_init(&d, &plain);
  size_t bytes = 5 * 37 * 41 * 2;
  uint8_t *in = malloc(bytes), *out = malloc(bytes);
  fill_frames(in, 2, 5, 37, 41);
  sl_error err;
  sl_error_clear(&err);
  uint32_t got_counts[5 * 2];
  assert_int_equal(run_cuda(&d, in, bytes, 0, 5, 0, 1, out, bytes, got_counts, &err), SL_OK);
  assert_memory_equal(in, out, bytes);
  uint32_t *want_counts = value_counts(in, 5, 37 * 41, 2);
  assert_memory_equal(got_counts, want_counts, sizeof got_counts);
  free(want_counts);
  free(in);
  free(out);
  dnode_release(&d);
#endif
}

/* ------------------------------------------------------------ malformed --- */

#ifdef SLUICE_HAVE_CUDA
/* Stored chunk 1 of 3 (one frame each) replaced by `bad` (n bytes): both
 * backends fail with SL_ERR_FORMAT naming stored chunk 1; exact: the
 * messages are equal. */
static void expect_bad(const uint8_t *bad, size_t n, int exact, const char *needle) {
  acq q;
  acq_make(&q, 2, 3, 37, 41, 1, 0, 2, 0);
  free(q.chunks[1]);
  q.chunks[1] = malloc(n ? n : 1);
  memcpy(q.chunks[1], bad, n);
  q.sizes[1] = n;
  acq_desc(&q);
  dnode d;
  dnode_init(&d, &q.desc);
  size_t fb = 37 * 41 * 2, pb;
  uint8_t *packed = pack(&q, 0, 3, 0, &pb);
  uint8_t *out = malloc(3 * fb);
  sl_error ec, eg;
  sl_error_clear(&ec);
  sl_error_clear(&eg);
  sl_code rc = run_cpu(&d, packed, 0, 3, out, NULL, &ec);
  assert_int_equal(rc, SL_ERR_FORMAT);
  rc = run_cuda(&d, packed, pb, 0, 3, 0, 1, out, 3 * fb, NULL, &eg);
  if (rc != SL_ERR_FORMAT) fail_msg("%s: CUDA gave %s: %s (CPU: %s)", needle, sl_code_name(rc), eg.msg, ec.msg);
  if (!strstr(eg.msg, "test.h5:/data, stored chunk 1 (frames 1-1): "))
    fail_msg("%s: CUDA message does not name the stored chunk: %s", needle, eg.msg);
  if (needle && !strstr(eg.msg, needle)) fail_msg("expected \"%s\" in the CUDA message: %s", needle, eg.msg);
  if (exact && strcmp(ec.msg, eg.msg)) fail_msg("messages differ:\n  cpu:  %s\n  cuda: %s", ec.msg, eg.msg);
  free(out);
  free(packed);
  dnode_release(&d);
  acq_free(&q);
}
#endif

static void test_malformed(void **state) {
  (void)state;
  NEED_CUDA();
#ifdef SLUICE_HAVE_CUDA
  uint8_t *data = malloc(37 * 41 * 2);
  fill_frames(data, 2, 1, 37, 41);
  size_t n;
  uint8_t *c = encode_chunk(data, 37 * 41 * 2, 2, 4096, 2, &n);
  uint8_t *m = malloc(n + 64);
  expect_bad(c, 7, 1, "truncated header: chunk has 7 bytes");
  expect_bad(c, 12, 1, "truncated at byte 12: block 0 needs a 4-byte length");
  expect_bad(c, 30, 1, "runs past the end of the chunk");
  expect_bad(c, n - 1, 1, "the 5 trailing elements need 10 bytes, 9 remain");
  memcpy(m, c, n);
  wr_be64(m, 3033);
  expect_bad(m, n, 1, "is not a multiple of the element size 2");
  memcpy(m, c, n);
  wr_be64(m, 3036);
  expect_bad(m, n, 1, "exceeds the destination capacity");
  memcpy(m, c, n);
  wr_be32(m + 12, 0x7FFFFFF0u);
  expect_bad(m, n, 1, "compressed length 2147483632 runs past");
  memcpy(m, c, n);
  wr_be32(m + 12, 0);
  expect_bad(m, n, 1, "compressed length is 0");
  memcpy(m, c, n);
  wr_be32(m + 8, 0);
  expect_bad(m, n, 1, "block size is 0");
  wr_be32(m + 8, 100);
  expect_bad(m, n, 1, "is not a multiple of 8 * element size (16)");
  wr_be32(m + 8, 0xFFFFFFF0u);
  expect_bad(m, n, 1, "exceeds the limit of 1048576 bytes");
  memcpy(m, c, n);
  m[16] = 0xF0, m[17] = 0xFF, m[18] = 0xFF; /* a literal run longer than the block */
  expect_bad(m, n, 0, "block 0 at byte 12: "); /* liblz4 and the GPU may name it differently */
  memcpy(m, c, n);
  m[n] = 0, m[n + 1] = 1;
  expect_bad(m, n + 2, 1, "trailing garbage: 2 extra bytes");
  /* a total smaller than the stored chunk: decodes to fewer bytes */
  {
    size_t n2;
    uint8_t *c2 = encode_chunk(data, 37 * 41 * 2 - 8, 2, 4096, 2, &n2);
    expect_bad(c2, n2, 1, "decodes to 3026 bytes, expected 3034");
    free(c2);
  }
  /* truncations all along the chunk: SL_ERR_FORMAT on both, never a fault */
  for (size_t k = 13; k < n; k += 97) expect_bad(c, k, 0, NULL);
  free(m);
  free(c);
  free(data);
#endif
}

/* Deferred error check: a bad stored chunk in chunk 0 of the scan surfaces at
 * a later call at the latest at the last chunk, naming that stored chunk;
 * with check_every_call, at the call of chunk 0 itself. */
static void test_error_surfaces_later(void **state) {
  (void)state;
  NEED_CUDA();
#ifdef SLUICE_HAVE_CUDA
  acq q;
  acq_make(&q, 2, 4, 37, 41, 1, 0, 2, 0);
  q.sizes[0] = 20; /* truncated: block 0's length runs past the end */
  acq_desc(&q);
  size_t fb = 37 * 41 * 2;
  uint8_t *out = malloc(2 * fb);
  for (int every = 0; every < 2; every++) {
    dnode d;
    dnode_init(&d, &q.desc);
    d.cuda.check_every_call = every;
    sl_code last = SL_OK;
    sl_error eg;
    int at = -1;
    for (int c = 0; c < 2 && last == SL_OK; c++) {
      size_t pb;
      uint8_t *packed = pack(&q, 2 * c, 2, 0, &pb);
      sl_error_clear(&eg);
      last = run_cuda(&d, packed, pb, 2 * c, 2, c, 2, out, 2 * fb, NULL, &eg);
      if (last != SL_OK) at = c;
      free(packed);
    }
    assert_int_equal(last, SL_ERR_FORMAT);
    print_message("%s check: the error of scan chunk 0 surfaced at call %d: %s\n", every ? "every-call" : "deferred",
                  at, eg.msg);
    assert_non_null(strstr(eg.msg, "stored chunk 0 (frames 0-0)"));
    if (every) assert_int_equal(at, 0);
    dnode_release(&d);
  }
  free(out);
  acq_free(&q);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writer_chunks),   cmocka_unit_test(test_plugin_chunks),
      cmocka_unit_test(test_raw_and_plain),   cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_error_surfaces_later), cmocka_unit_test(test_frame_contents),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (g_cuda) g_cuda->ops->destroy(g_cuda);
  if (g_cpu) g_cpu->ops->destroy(g_cpu);
  return rc;
}
