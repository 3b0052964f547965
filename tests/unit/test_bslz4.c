/* Bitshuffle-LZ4 decoding against an independent reference: the official
 * bitshuffle HDF5 filter plugin (Debian package `bitshuffle`, libh5bshuf.so).
 * Datasets are written through the plugin, read back through it (the truth)
 * and as raw chunk bytes decoded by sluice; both must agree bit for bit, on
 * every SIMD path. Malformed chunks must fail with SL_ERR_FORMAT and a precise
 * message. */
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

#include "nodes/codec/bslz4.h"

#define PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"

static const sl_simd k_paths[] = {SL_SIMD_SCALAR, SL_SIMD_SSE2, SL_SIMD_AVX2};

/* ------------------------------------------------------------ helpers --- */

#include "tests/unit/test_rng.h"

/* Detector-like frames: a bright disk (mean ~20), sparse dark field (~0.05),
 * a few saturated/flagged pixels at the dtype's maximum (about 1 in 97, and
 * the last pixel of every other frame: the trailing elements, copied
 * verbatim, hold some). */
static void fill_frames(uint8_t *buf, size_t elem, size_t frames, size_t h, size_t w) {
  uint64_t maxv = elem >= 8 ? UINT64_MAX : ((uint64_t)1 << (8 * elem)) - 1;
  for (size_t f = 0; f < frames; f++)
    for (size_t r = 0; r < h; r++)
      for (size_t c = 0; c < w; c++) {
        double dr = (double)r - h / 2.0, dc = (double)c - w / 2.0;
        int in_disk = dr * dr + dc * dc < (h * w) / 16.0;
        uint64_t v = poisson(in_disk ? 20.0 : 0.05);
        if (rng() % 97 == 0 || (f % 2 == 0 && r == h - 1 && c == w - 1)) v = maxv;
        if (v > maxv) v = maxv;
        size_t i = (f * h + r) * w + c;
        memcpy(buf + i * elem, &v, elem); /* little-endian host */
      }
}

/* The ones bitmap of n elements, from their values (the reference for
 * sl_bslz4_opts.ones): bit i set when every byte of element i is 0xFF. */
static void reference_ones(const uint8_t *data, size_t n, size_t elem, uint8_t *ones) {
  memset(ones, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; i++) {
    size_t b = 0;
    while (b < elem && data[i * elem + b] == 0xFF) b++;
    if (b == elem) ones[i / 8] |= (uint8_t)(1u << (i % 8));
  }
}

static hid_t h5_type(size_t elem) {
  switch (elem) {
  case 1: return H5T_NATIVE_UINT8;
  case 2: return H5T_NATIVE_UINT16;
  case 4: return H5T_NATIVE_UINT32;
  default: return H5T_NATIVE_UINT64;
  }
}

static int plugin_ok = -1;
static int have_plugin(void) {
  if (plugin_ok < 0) {
    if (access(PLUGIN_DIR "/libh5bshuf.so", R_OK) != 0) {
      plugin_ok = 0;
    } else {
      setenv("HDF5_PLUGIN_PATH", PLUGIN_DIR, 1);
      plugin_ok = H5Zfilter_avail(SL_BSHUF_FILTER_ID) > 0;
    }
    if (!plugin_ok)
      print_message("SKIP: bitshuffle HDF5 plugin not found under %s (install Debian package "
                    "'bitshuffle')\n",
                    PLUGIN_DIR);
  }
  return plugin_ok;
}

typedef struct written {
  char path[256];
  hid_t file, dset;
  size_t elem, frames, h, w, fpc;
  uint8_t *data; /* what was written */
} written;

/* Writes frames (frames, h, w) with chunks of (fpc, h, w) through the plugin. */
static void write_dataset(written *o, size_t elem, size_t frames, size_t h, size_t w, size_t fpc,
                          unsigned block_elems, unsigned comp) {
  static int serial;
  memset(o, 0, sizeof *o);
  snprintf(o->path, sizeof o->path, "/tmp/sluice-test-bslz4-%d-%d.h5", (int)getpid(), serial++);
  o->elem = elem, o->frames = frames, o->h = h, o->w = w, o->fpc = fpc;
  o->data = malloc(frames * h * w * elem + 1);
  assert_non_null(o->data);
  fill_frames(o->data, elem, frames, h, w);
  o->file = H5Fcreate(o->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(o->file >= 0);
  hsize_t dims[3] = {frames, h, w}, chunk[3] = {fpc, h, w};
  hid_t space = H5Screate_simple(3, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  assert_true(H5Pset_chunk(dcpl, 3, chunk) >= 0);
  /* The plugin's set_local callback prepends {major, minor, elem_size} to the
   * values given here, so the user passes {block size, compression}; the
   * stored cd_values then read {major, minor, elem, block, compression}. */
  unsigned cd[2] = {block_elems, comp};
  assert_true(H5Pset_filter(dcpl, SL_BSHUF_FILTER_ID, H5Z_FLAG_MANDATORY, 2, cd) >= 0);
  o->dset = H5Dcreate2(o->file, "data", h5_type(elem), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  assert_true(o->dset >= 0);
  {
    hid_t dc = H5Dget_create_plist(o->dset);
    unsigned flags, stored[8] = {0};
    size_t nstored = 8;
    assert_true(H5Pget_filter_by_id2(dc, SL_BSHUF_FILTER_ID, &flags, &nstored, stored, 0, NULL,
                                     NULL) >= 0);
    assert_true(nstored >= 5);
    assert_int_equal(stored[2], elem);
    assert_int_equal(stored[3], block_elems);
    assert_int_equal(stored[4], comp);
    H5Pclose(dc);
  }
  assert_true(H5Dwrite(o->dset, h5_type(elem), H5S_ALL, H5S_ALL, H5P_DEFAULT, o->data) >= 0);
  assert_true(H5Fflush(o->file, H5F_SCOPE_LOCAL) >= 0);
  H5Pclose(dcpl);
  H5Sclose(space);
}

static void close_dataset(written *o) {
  H5Dclose(o->dset);
  H5Fclose(o->file);
  unlink(o->path);
  free(o->data);
}

/* Raw bytes of the chunk that starts at frame f0 (malloc'd). */
static uint8_t *raw_chunk(written *o, size_t f0, size_t *size) {
  hsize_t off[3] = {f0, 0, 0}, nbytes = 0;
  assert_true(H5Dget_chunk_storage_size(o->dset, off, &nbytes) >= 0);
  uint8_t *buf = malloc(nbytes ? nbytes : 1);
  uint32_t mask = 0;
  assert_true(H5Dread_chunk(o->dset, H5P_DEFAULT, off, &mask, buf) >= 0);
  assert_int_equal(mask, 0); /* the filter ran */
  *size = nbytes;
  return buf;
}

/* One configuration: write, read the truth through the plugin, decode every
 * raw chunk on every SIMD path, compare. */
static void roundtrip(size_t elem, size_t frames, size_t h, size_t w, size_t fpc,
                      unsigned block_elems, unsigned comp) {
  written o;
  write_dataset(&o, elem, frames, h, w, fpc, block_elems, comp);
  size_t total = frames * h * w * elem;
  uint8_t *truth = malloc(total);
  assert_true(H5Dread(o.dset, h5_type(elem), H5S_ALL, H5S_ALL, H5P_DEFAULT, truth) >= 0);
  assert_memory_equal(truth, o.data, total); /* the plugin round-trips */
  size_t chunk_bytes = fpc * h * w * elem;
  uint8_t *dec = malloc(chunk_bytes + 64);
  for (size_t f0 = 0; f0 < frames; f0 += fpc) {
    size_t csize;
    uint8_t *raw = raw_chunk(&o, f0, &csize);
    size_t valid = (f0 + fpc <= frames ? fpc : frames - f0) * h * w * elem;
    if (comp == 2) { /* the header carries the block size in bytes */
      sl_bslz4_header hdr;
      sl_error herr;
      sl_error_clear(&herr);
      assert_int_equal(sl_bslz4_read_header(raw, csize, elem, &hdr, &herr), SL_OK);
      assert_int_equal(hdr.total_bytes, chunk_bytes);
      assert_int_equal(hdr.block_bytes,
                       (block_elems ? block_elems : sl_bshuf_default_block_elems(elem)) * elem);
    }
    for (size_t p = 0; p < sizeof k_paths / sizeof k_paths[0]; p++) {
      if (!sl_simd_supported(k_paths[p])) continue;
      sl_error err;
      sl_error_clear(&err);
      size_t got = 0;
      memset(dec, 0xA5, chunk_bytes + 64);
      sl_code rc;
      /* every other chunk also asks for the ones bitmap (the decode must not change) */
      const size_t nel = chunk_bytes / elem;
      uint8_t *ones = (f0 / fpc) % 2 ? malloc(nel / 8 + 2) : NULL;
      if (ones) memset(ones, 0x3C, nel / 8 + 2);
      sl_bslz4_opts opts = {.simd = k_paths[p], .ones = ones};
      if (comp == 2) {
        rc = sl_bslz4_decode_opts(raw, csize, elem, dec, chunk_bytes, &got, &opts, &err);
      } else {
        rc = sl_bitshuffle_decode_raw_opts(raw, csize, elem, block_elems, dec, chunk_bytes, &got,
                                           &opts, &err);
      }
      if (ones && rc == SL_OK) {
        /* against the written data's values (the chunk's frames past the
         * dataset's end decode as HDF5's fill value 0: never all ones) */
        uint8_t *want = calloc(nel / 8 + 2, 1);
        reference_ones(o.data + f0 * h * w * elem, valid / elem, elem, want);
        if (memcmp(ones, want, (nel + 7) / 8) != 0)
          fail_msg("ones bitmap: elem %zu %zux%zu fpc %zu block %u comp %u path %s chunk at frame %zu",
                   elem, h, w, fpc, block_elems, comp, sl_simd_name(k_paths[p]), f0);
        assert_int_equal(ones[(nel + 7) / 8], 0x3C); /* nothing written past the bitmap */
        free(want);
      }
      free(ones);
      if (rc != SL_OK)
        fail_msg("elem %zu %zux%zu fpc %zu block %u comp %u path %s: %s", elem, h, w, fpc,
                 block_elems, comp, sl_simd_name(k_paths[p]), err.msg);
      assert_int_equal(got, chunk_bytes);
      if (memcmp(dec, truth + f0 * h * w * elem, valid) != 0)
        fail_msg("mismatch: elem %zu %zux%zu fpc %zu block %u comp %u path %s chunk at frame %zu",
                 elem, h, w, fpc, block_elems, comp, sl_simd_name(k_paths[p]), f0);
      for (size_t i = chunk_bytes; i < chunk_bytes + 64; i++) assert_int_equal(dec[i], 0xA5);
    }
    free(raw);
  }
  free(dec);
  free(truth);
  close_dataset(&o);
}

/* ----------------------------------------------------- against plugin --- */

static void test_plugin_lz4_u16(void **state) {
  (void)state;
  if (!have_plugin()) skip();
  roundtrip(2, 3, 37, 41, 1, 0, 2);    /* n % 8 == 5, default block */
  roundtrip(2, 5, 37, 41, 2, 0, 2);    /* many frames per chunk, edge chunk */
  roundtrip(2, 2, 192, 192, 1, 0, 2);  /* detector frame, several full blocks */
  roundtrip(2, 2, 64, 64, 1, 64, 2);   /* small blocks */
  roundtrip(2, 2, 37, 41, 1, 256, 2);  /* partial last block + tail */
  roundtrip(2, 4, 33, 35, 4, 2048, 2); /* one big block per chunk */
  roundtrip(2, 1, 1, 3, 1, 0, 2);      /* fewer than 8 elements: tail only */
  roundtrip(2, 1, 1, 13, 1, 0, 2);     /* one 8-element block and a tail */
}

static void test_plugin_lz4_u8_u32_u64(void **state) {
  (void)state;
  if (!have_plugin()) skip();
  size_t elems[] = {1, 4, 8};
  unsigned blocks[] = {0, 64, 256, 2048};
  for (size_t e = 0; e < 3; e++)
    for (size_t b = 0; b < 4; b++) {
      roundtrip(elems[e], 3, 37, 41, 1, blocks[b], 2);
      roundtrip(elems[e], 4, 24, 40, 3, blocks[b], 2);
    }
  roundtrip(4, 2, 96, 96, 1, 0, 2);
  roundtrip(1, 2, 128, 128, 2, 0, 2);
}

static void test_plugin_uncompressed(void **state) {
  (void)state;
  if (!have_plugin()) skip();
  size_t elems[] = {1, 2, 4, 8};
  unsigned blocks[] = {0, 64, 256, 2048};
  for (size_t e = 0; e < 4; e++)
    for (size_t b = 0; b < 4; b++) roundtrip(elems[e], 3, 37, 41, 1, blocks[b], 0);
  roundtrip(2, 2, 192, 192, 2, 0, 0);
}

/* ----------------------------------------- kernels against a bit oracle --- */

/* Naive bit-by-bit un-transposition straight from the format description. */
static void oracle_unshuffle(const uint8_t *in, uint8_t *out, size_t m, size_t s) {
  size_t nb = m / 8;
  memset(out, 0, m * s);
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < s; j++)
      for (size_t k = 0; k < 8; k++) {
        size_t row = 8 * j + k;
        unsigned bit = (in[row * nb + i / 8] >> (i % 8)) & 1u;
        out[i * s + j] |= (uint8_t)(bit << k);
      }
}

static void test_kernels_all_paths(void **state) {
  (void)state;
  size_t ms[] = {8, 16, 64, 120, 128, 136, 248, 256, 264, 384, 512, 1024 + 8, 4096, 8192 - 8};
  size_t ss[] = {1, 2, 3, 4, 5, 8, 16};
  for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
    for (size_t b = 0; b < 2 * sizeof ss / sizeof ss[0]; b++) {
      size_t m = ms[a], s = ss[b / 2], n = m * s;
      uint8_t *in = malloc(n), *want = malloc(n), *got = malloc(n + 32);
      if (b % 2 == 0) {
        /* mostly 0xFF bytes, so that about a third of the elements are all ones */
        for (size_t i = 0; i < n; i++) in[i] = rng() % 8 ? 0xFF : (uint8_t)rng();
        if (a % 2) /* and blocks of plain random bytes */
          for (size_t i = 0; i < n; i++) in[i] = (uint8_t)rng();
      } else {
        /* Small counts: byte 0's plane random or mostly 0xFF as above, the
         * planes of bytes 1.. 0 but in every third 16-group stretch, where
         * one row has one nonzero byte (the kernels store a tile's all-0
         * plane without transposing it). From a stream of their own, so
         * that the later tests draw what they drew before these cases. */
        uint64_t st = 0x5EEDull + 977 * a + b;
        const size_t nb = m / 8;
        for (size_t i = 0; i < n; i++) in[i] = i >= 8 * nb ? 0 : a % 2 || urand_from(&st) < 0.2 ? (uint8_t)(urand_from(&st) * 256) : 0xFF;
        for (size_t g = 0; s > 1 && g < nb; g += 48)
          in[(8 + (size_t)(urand_from(&st) * (double)(8 * s - 8))) * nb + g + (size_t)(urand_from(&st) * 16) % (nb - g)] =
              (uint8_t)(1 + urand_from(&st) * 255);
      }
      oracle_unshuffle(in, want, m, s);
      uint8_t *ones_want = malloc(m / 8), *ones_got = malloc(m / 8 + 1);
      reference_ones(want, m, s, ones_want);
      /* every path; AVX2 with and without GFNI */
      for (size_t p = 0; p <= sizeof k_paths / sizeof k_paths[0]; p++) {
        const int gfni_run = p == sizeof k_paths / sizeof k_paths[0];
        if (gfni_run) p--;
        if (!sl_simd_supported(k_paths[p])) break;
        sl_bitshuffle_allow_gfni(gfni_run);
        if (gfni_run && !sl_bitshuffle_gfni_used()) break;
        memset(got, 0x5A, n + 32);
        sl_bitunshuffle_block(in, got, m, s, k_paths[p], NULL);
        if (memcmp(got, want, n) != 0)
          fail_msg("kernel %s differs from the oracle for m=%zu s=%zu", sl_simd_name(k_paths[p]),
                   m, s);
        for (size_t i = n; i < n + 32; i++) assert_int_equal(got[i], 0x5A);
        /* with the ones bitmap: the same elements, and the bitmap of their values */
        memset(got, 0x5A, n + 32);
        memset(ones_got, 0x5A, m / 8 + 1);
        sl_bitunshuffle_block(in, got, m, s, k_paths[p], ones_got);
        assert_memory_equal(got, want, n);
        if (memcmp(ones_got, ones_want, m / 8) != 0)
          fail_msg("kernel %s: ones bitmap differs for m=%zu s=%zu", sl_simd_name(k_paths[p]), m, s);
        assert_int_equal(ones_got[m / 8], 0x5A);
        if (gfni_run) break;
      }
      sl_bitshuffle_allow_gfni(true);
      free(ones_want);
      free(ones_got);
      free(in);
      free(want);
      free(got);
    }
}

static void test_simd_resolve(void **state) {
  (void)state;
  sl_error err;
  sl_error_clear(&err);
  sl_simd p;
  assert_int_equal(sl_simd_resolve(SL_SIMD_SCALAR, &p, &err), SL_OK);
  assert_int_equal(p, SL_SIMD_SCALAR);
  const char *env = getenv("SLUICE_SIMD");
  if (!env || !*env) {
    assert_int_equal(sl_simd_resolve(SL_SIMD_AUTO, &p, &err), SL_OK);
    assert_true(sl_simd_supported(p));
    print_message("default SIMD path: %s\n", sl_simd_name(p));
  }
  if (!sl_simd_supported(SL_SIMD_AVX2)) {
    assert_int_equal(sl_simd_resolve(SL_SIMD_AVX2, &p, &err), SL_ERR_BACKEND);
    assert_non_null(strstr(err.msg, "not supported"));
  }
  assert_string_equal(sl_bshuf_default_block_elems(2) == 4096 ? "ok" : "bad", "ok");
  assert_int_equal(sl_bshuf_default_block_elems(1), 8192);
  assert_int_equal(sl_bshuf_default_block_elems(4), 2048);
  assert_int_equal(sl_bshuf_default_block_elems(64), 128);
  assert_int_equal(sl_bshuf_default_block_elems(3), 2728);
}

/* ------------------------------------------------------ malformed input --- */

/* A valid u16 chunk of 37x41 elements with 64-element blocks: 23 full blocks,
 * a 40-element partial block and 5 trailing elements (10 bytes). */
static uint8_t *valid_chunk(size_t *size, uint8_t **truth) {
  written o;
  write_dataset(&o, 2, 1, 37, 41, 1, 64, 2);
  uint8_t *raw = raw_chunk(&o, 0, size);
  *truth = malloc(37 * 41 * 2);
  memcpy(*truth, o.data, 37 * 41 * 2);
  close_dataset(&o);
  return raw;
}

static void expect_format(const uint8_t *src, size_t n, size_t elem, size_t cap,
                          const char *needle) {
  uint8_t *dst = malloc(cap ? cap : 1);
  sl_error err;
  sl_error_clear(&err);
  size_t got = 123;
  sl_code rc = sl_bslz4_decode(src, n, elem, dst, cap, &got, &err);
  if (rc != SL_ERR_FORMAT || !strstr(err.msg, needle))
    fail_msg("expected SL_ERR_FORMAT with \"%s\", got %s: %s", needle, sl_code_name(rc), err.msg);
  assert_int_equal(got, 0);
  free(dst);
}

static void write_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}
static void write_be64(uint8_t *p, uint64_t v) {
  write_be32(p, (uint32_t)(v >> 32));
  write_be32(p + 4, (uint32_t)v);
}

static void test_malformed(void **state) {
  (void)state;
  if (!have_plugin()) skip();
  size_t n, cap = 37 * 41 * 2;
  uint8_t *truth;
  uint8_t *c = valid_chunk(&n, &truth);
  uint8_t *m = malloc(n + 64);
  /* sanity: the chunk decodes */
  {
    uint8_t *dst = malloc(cap);
    sl_error err;
    sl_error_clear(&err);
    size_t got;
    assert_int_equal(sl_bslz4_decode(c, n, 2, dst, cap, &got, &err), SL_OK);
    assert_int_equal(got, cap);
    assert_memory_equal(dst, truth, cap);
    free(dst);
  }
  /* truncated: fewer bytes than the header, header only, cut inside a block,
   * cut inside the trailing elements */
  expect_format(c, 7, 2, cap, "truncated header: chunk has 7 bytes");
  expect_format(c, 12, 2, cap, "truncated at byte 12: block 0 needs a 4-byte length");
  expect_format(c, 30, 2, cap, "block 0 at byte 12: compressed length");
  expect_format(c, 30, 2, cap, "runs past the end of the chunk");
  expect_format(c, n - 1, 2, cap, "the 5 trailing elements need 10 bytes, 9 remain");
  /* every truncation fails cleanly */
  for (size_t k = 0; k < n; k++) {
    uint8_t *cut = malloc(k ? k : 1);
    memcpy(cut, c, k);
    uint8_t *dst = malloc(cap);
    sl_error err;
    sl_error_clear(&err);
    size_t got;
    assert_int_equal(sl_bslz4_decode(cut, k, 2, dst, cap, &got, &err), SL_ERR_FORMAT);
    free(dst);
    free(cut);
  }
  /* total larger than the destination */
  expect_format(c, n, 2, cap - 2, "total size 3034 bytes exceeds the destination capacity of 3032");
  /* total not a multiple of the element size */
  memcpy(m, c, n);
  write_be64(m, 3033);
  expect_format(m, n, 2, cap, "is not a multiple of the element size 2");
  /* block length past the end */
  memcpy(m, c, n);
  write_be32(m + 12, 0x7FFFFFF0u);
  expect_format(m, n, 2, cap, "block 0 at byte 12: compressed length 2147483632 runs past");
  /* block size 0, not a multiple of 8 * elem, absurd */
  memcpy(m, c, n);
  write_be32(m + 8, 0);
  expect_format(m, n, 2, cap, "block size is 0");
  write_be32(m + 8, 100);
  expect_format(m, n, 2, cap, "block size 100 bytes is not a multiple of 8 * element size (16)");
  write_be32(m + 8, 0xFFFFFFF0u);
  expect_format(m, n, 2, cap, "block size 4294967280 bytes exceeds the limit of 1048576 bytes");
  /* a block size that disagrees with the data: blocks decode to the wrong size */
  write_be32(m + 8, 256);
  expect_format(m, n, 2, cap, "block 0 at byte 12: LZ4 data decodes to 128 bytes, expected 256");
  /* corrupt LZ4: a literal run longer than the block */
  memcpy(m, c, n);
  m[16] = 0xF0;
  m[17] = 0xFF;
  m[18] = 0xFF;
  expect_format(m, n, 2, cap, "block 0 at byte 12: corrupt LZ4 data");
  /* trailing garbage */
  memcpy(m, c, n);
  m[n] = 0;
  m[n + 1] = 1;
  expect_format(m, n + 2, 2, cap, "trailing garbage: 2 extra bytes");
  /* random byte flips: only SL_OK or SL_ERR_FORMAT, never out of bounds */
  for (int it = 0; it < 3000; it++) {
    memcpy(m, c, n);
    int flips = 1 + (int)(rng() % 4);
    for (int f = 0; f < flips; f++) m[rng() % n] ^= (uint8_t)(1u << (rng() % 8));
    uint8_t *dst = malloc(cap);
    sl_error err;
    sl_error_clear(&err);
    size_t got;
    sl_code rc = sl_bslz4_decode(m, n, 2, dst, cap, &got, &err);
    assert_true(rc == SL_OK || rc == SL_ERR_FORMAT);
    if (rc) assert_true(strlen(err.msg) > 0);
    free(dst);
  }
  free(m);
  free(c);
  free(truth);
}

/* Hand-made chunks: LZ4 blocks that decode to fewer / more bytes than the
 * block holds; an oversized block through the heap and caller scratch. */
static void test_malformed_sizes(void **state) {
  (void)state;
  uint8_t plain[4096], chunk[8192];
  for (size_t i = 0; i < sizeof plain; i++) plain[i] = (uint8_t)(i * 7);
  /* u8, n = 128, one block of 128 bytes holding 64 bytes of LZ4 output */
  write_be64(chunk, 128);
  write_be32(chunk + 8, 128);
  int cl = LZ4_compress_default((const char *)plain, (char *)chunk + 16, 64, 4000);
  assert_true(cl > 0);
  write_be32(chunk + 12, (uint32_t)cl);
  expect_format(chunk, 16 + (size_t)cl, 1, 128, "LZ4 data decodes to 64 bytes, expected 128");
  cl = LZ4_compress_default((const char *)plain, (char *)chunk + 16, 200, 4000);
  write_be32(chunk + 12, (uint32_t)cl);
  expect_format(chunk, 16 + (size_t)cl, 1, 128, "LZ4 data decodes to 200 bytes, expected 128");
  /* compressed length 0 */
  write_be32(chunk + 12, 0);
  expect_format(chunk, 16, 1, 128, "compressed length is 0");

  /* a 64 KiB block (beyond the stack buffer): heap, then caller scratch; the
   * shuffled content is arbitrary, so compare against the oracle */
  size_t big = 65536 + 3; /* u8 elements: one block of 65536, tail of 3 */
  uint8_t *rows = malloc(65536), *want = malloc(big), *c = malloc(LZ4_compressBound(65536) + 64);
  for (size_t i = 0; i < 65536; i++) rows[i] = (uint8_t)(rng() & rng() & 0x11);
  oracle_unshuffle(rows, want, 65536, 1);
  want[65536] = 1, want[65537] = 2, want[65538] = 3;
  write_be64(c, big);
  write_be32(c + 8, 65536);
  cl = LZ4_compress_default((const char *)rows, (char *)c + 16, 65536, LZ4_compressBound(65536));
  write_be32(c + 12, (uint32_t)cl);
  memcpy(c + 16 + cl, want + 65536, 3);
  size_t csize = 16 + (size_t)cl + 3;
  uint8_t *dst = malloc(big);
  sl_error err;
  sl_error_clear(&err);
  size_t got;
  assert_int_equal(sl_bslz4_decode(c, csize, 1, dst, big, &got, &err), SL_OK);
  assert_memory_equal(dst, want, big);
  assert_int_equal(sl_bslz4_scratch_size(65536), 65536);
  assert_int_equal(sl_bslz4_scratch_size(8192), 0);
  uint8_t *scratch = malloc(65536);
  sl_bslz4_opts opts = {.simd = SL_SIMD_AUTO, .scratch = scratch, .scratch_size = 65536};
  memset(dst, 0, big);
  assert_int_equal(sl_bslz4_decode_opts(c, csize, 1, dst, big, &got, &opts, &err), SL_OK);
  assert_memory_equal(dst, want, big);
  free(scratch);
  free(dst);
  free(rows);
  free(want);
  free(c);

  /* empty chunk: total 0 decodes to nothing */
  uint8_t empty[12];
  write_be64(empty, 0);
  write_be32(empty + 8, 8192);
  assert_int_equal(sl_bslz4_decode(empty, 12, 2, NULL, 0, &got, &err), SL_OK);
  assert_int_equal(got, 0);
  /* bad element size is a usage error */
  assert_int_equal(sl_bslz4_decode(empty, 12, 0, NULL, 0, &got, &err), SL_ERR_USAGE);
  /* uncompressed: size not a multiple of elem, destination too small */
  uint8_t raw[20] = {0}, out[20];
  assert_int_equal(sl_bitshuffle_decode_raw(raw, 19, 2, 0, out, 20, &got, SL_SIMD_AUTO, &err),
                   SL_ERR_FORMAT);
  assert_non_null(strstr(err.msg, "not a multiple of the element size"));
  assert_int_equal(sl_bitshuffle_decode_raw(raw, 20, 2, 0, out, 18, &got, SL_SIMD_AUTO, &err),
                   SL_ERR_FORMAT);
  assert_non_null(strstr(err.msg, "exceeds the destination capacity"));
  assert_int_equal(sl_bitshuffle_decode_raw(raw, 20, 2, 12, out, 20, &got, SL_SIMD_AUTO, &err),
                   SL_ERR_USAGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_all_paths),
      cmocka_unit_test(test_simd_resolve),
      cmocka_unit_test(test_malformed_sizes),
      cmocka_unit_test(test_plugin_lz4_u16),
      cmocka_unit_test(test_plugin_lz4_u8_u32_u64),
      cmocka_unit_test(test_plugin_uncompressed),
      cmocka_unit_test(test_malformed),
  };
  /* before the first HDF5 call, so that the plugin search path includes it */
  if (access(PLUGIN_DIR, R_OK) == 0) setenv("HDF5_PLUGIN_PATH", PLUGIN_DIR, 1);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
