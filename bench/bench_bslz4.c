/* Bitshuffle-LZ4 decode throughput: sluice (each SIMD path) against the
 * official bitshuffle HDF5 filter plugin, single thread.
 *
 * Generates a realistic acquisition in memory (default 1024 frames of 192x192
 * u16: a bright-field disk with Poisson mean 20, sparse dark-field counts with
 * mean 0.05, a few flagged pixels at 0xFFFF), writes it through the plugin to
 * an HDF5 file under /tmp with one frame per chunk, reads the raw chunks back
 * and times:
 *   - sluice sl_bslz4_decode on every SIMD path, into the full acquisition buffer;
 *   - LZ4 block decoding alone (the lower bound the unshuffle adds to);
 *   - the plugin's filter function called directly on every raw chunk;
 *   - H5Dread of the whole dataset through the plugin (what an h5py user gets).
 * Prints decoded GB/s (1e9 bytes of output per second) and the ratio to the
 * plugin. Usage: bench_bslz4 [frames] [side] [repeats] */
#include <dlfcn.h>
#include <hdf5.h>
#include <lz4.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/util.h"
#include "nodes/codec/bslz4.h"

#define PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"

#define SL_TEST_RNG_SEED 0x2545F4914F6CDD1DULL
#include "tests/unit/test_rng.h"

static void generate(uint16_t *d, size_t frames, size_t side) {
  const double c = side / 2.0, r2 = (side / 6.0) * (side / 6.0);
  for (size_t f = 0; f < frames; f++) {
    /* the disk wanders a little with the scan position */
    double cy = c + 3 * sin(0.05 * (double)f), cx = c + 3 * cos(0.07 * (double)f);
    for (size_t y = 0; y < side; y++)
      for (size_t x = 0; x < side; x++) {
        double dy = y - cy, dx = x - cx;
        unsigned v = poisson(dy * dy + dx * dx < r2 ? 20.0 : 0.05);
        if (rng() % 4000 == 0) v = 0xFFFF; /* flagged / saturated */
        d[(f * side + y) * side + x] = (uint16_t)(v > 0xFFFF ? 0xFFFF : v);
      }
  }
}

/* The plugin's H5Z_class2_t, fetched with dlopen so that its decode can be
 * timed without HDF5 around it. */
typedef size_t (*h5z_func)(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                           size_t nbytes, size_t *buf_size, void **buf);

static h5z_func plugin_filter(void) {
  void *h = dlopen(PLUGIN_DIR "/libh5bshuf.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) return NULL;
  const void *(*info)(void) = (const void *(*)(void))dlsym(h, "H5PLget_plugin_info");
  if (!info) return NULL;
  const H5Z_class2_t *cls = (const H5Z_class2_t *)info();
  return cls ? (h5z_func)cls->filter : NULL;
}

/* The acquisition in memory and as raw chunks: chunk f is
 * raw[off[f] .. off[f + 1]). */
typedef struct bench_acq {
  size_t frames, side, frame_bytes, total;
  uint16_t *data;
  uint8_t *raw;
  size_t *off;
} bench_acq;

/* The HDF5 file written through the plugin. */
typedef struct bench_file {
  char path[256];
  hid_t file, space, dcpl, dset;
} bench_file;

/* One timed decoder: its label and best time in seconds. */
typedef struct bench_rows {
  struct {
    char name[48];
    double best;
  } row[8];
  int n;
} bench_rows;

static void add_row(bench_rows *rows, const char *name, double best) {
  snprintf(rows->row[rows->n].name, sizeof rows->row[rows->n].name, "%s", name);
  rows->row[rows->n++].best = best;
}

/* Writes the acquisition through the plugin, one frame per chunk, default
 * block, LZ4; *seconds is the time of the write itself. Returns 0, or 1 when
 * the filter is unavailable. */
static int write_through_plugin(bench_file *bf, const bench_acq *acq, double *seconds) {
  snprintf(bf->path, sizeof bf->path, "/tmp/sluice-bench-bslz4-%d.h5", (int)getpid());
  bf->file = H5Fcreate(bf->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[3] = {acq->frames, acq->side, acq->side}, chunk[3] = {1, acq->side, acq->side};
  bf->space = H5Screate_simple(3, dims, NULL);
  bf->dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(bf->dcpl, 3, chunk);
  unsigned cd[2] = {0, 2}; /* {block size (0: default), compression (2: LZ4)}; the plugin prepends version and element size */
  H5Pset_filter(bf->dcpl, SL_BSHUF_FILTER_ID, H5Z_FLAG_MANDATORY, 2, cd);
  bf->dset = H5Dcreate2(bf->file, "data", H5T_NATIVE_UINT16, bf->space, H5P_DEFAULT, bf->dcpl,
                        H5P_DEFAULT);
  if (bf->dset < 0) {
    fprintf(stderr, "bench_bslz4: cannot create a dataset with filter 32008\n");
    return 1;
  }
  double t0 = sl_now();
  H5Dwrite(bf->dset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, acq->data);
  H5Fflush(bf->file, H5F_SCOPE_LOCAL);
  *seconds = sl_now() - t0;
  return 0;
}

static void close_file(bench_file *bf) {
  H5Dclose(bf->dset);
  H5Pclose(bf->dcpl);
  H5Sclose(bf->space);
  H5Fclose(bf->file);
  unlink(bf->path);
}

/* Reads every chunk's stored bytes back into acq->raw / acq->off; returns
 * the compressed size. */
static size_t read_raw_chunks(hid_t dset, bench_acq *acq) {
  size_t frames = acq->frames, comp = 0;
  acq->off = malloc((frames + 1) * sizeof *acq->off);
  for (size_t f = 0; f < frames; f++) {
    hsize_t o[3] = {f, 0, 0}, nb = 0;
    H5Dget_chunk_storage_size(dset, o, &nb);
    comp += nb;
  }
  acq->raw = malloc(comp);
  comp = 0;
  for (size_t f = 0; f < frames; f++) {
    hsize_t o[3] = {f, 0, 0}, nb = 0;
    uint32_t mask = 0;
    H5Dget_chunk_storage_size(dset, o, &nb);
    acq->off[f] = comp;
    H5Dread_chunk(dset, H5P_DEFAULT, o, &mask, acq->raw + comp);
    comp += nb;
  }
  acq->off[frames] = comp;
  return comp;
}

/* sluice's decoder on every SIMD path this CPU has, into out: AVX2 without
 * and with GFNI (when the CPU has it), and with the ones bitmap that
 * bslz4_decode turns into its flag counts (what finding the flagged pixels
 * costs the decoder). The variants take turns in every repetition. */
static int time_sluice(const bench_acq *acq, uint8_t *out, int repeats, bench_rows *rows) {
  typedef struct variant {
    sl_simd path;
    bool gfni, ones;
    const char *name;
  } variant;
  static const variant all[] = {
      {SL_SIMD_SCALAR, false, false, "sluice bslz4 (scalar)"},
      {SL_SIMD_SSE2, false, false, "sluice bslz4 (sse2)"},
      {SL_SIMD_AVX2, false, false, "sluice bslz4 (avx2)"},
      {SL_SIMD_AVX2, true, false, "sluice bslz4 (avx2+gfni)"},
      {SL_SIMD_AVX2, true, true, "  + ones bitmap (flag counts)"},
  };
  enum { N = sizeof all / sizeof all[0] };
  sl_bitshuffle_allow_gfni(true);
  const bool gfni = sl_bitshuffle_gfni_used();
  const size_t frame_bytes = acq->frame_bytes;
  uint8_t *ones = malloc(sl_ones_bitmap_bytes(frame_bytes / 2));
  double best[N];
  for (int v = 0; v < N; v++) best[v] = 1e30;
  for (int r = 0; r < repeats; r++)
    for (int v = 0; v < N; v++) {
      if (!sl_simd_supported(all[v].path) || (all[v].gfni && !gfni)) continue;
      sl_bitshuffle_allow_gfni(all[v].gfni);
      sl_bslz4_opts opts = {.simd = all[v].path, .ones = all[v].ones ? ones : NULL};
      memset(out, 0, acq->total);
      double t0 = sl_now();
      for (size_t f = 0; f < acq->frames; f++) {
        sl_error err;
        size_t got;
        if (sl_bslz4_decode_opts(acq->raw + acq->off[f], acq->off[f + 1] - acq->off[f], 2,
                                 out + f * frame_bytes, frame_bytes, &got, &opts, &err) != SL_OK ||
            got != frame_bytes) {
          fprintf(stderr, "frame %zu: %s\n", f, err.msg);
          free(ones);
          return 1;
        }
      }
      double t = sl_now() - t0;
      if (t < best[v]) best[v] = t;
      if (memcmp(out, acq->data, acq->total) != 0) {
        fprintf(stderr, "bench_bslz4: %s output differs from the input\n", all[v].name);
        free(ones);
        return 1;
      }
    }
  sl_bitshuffle_allow_gfni(true);
  free(ones);
  for (int v = 0; v < N; v++)
    if (best[v] < 1e30) add_row(rows, all[v].name, best[v]);
  return 0;
}

/* LZ4 alone: the blocks of every chunk into an 8 KiB buffer. */
static int time_lz4_only(const bench_acq *acq, int repeats, bench_rows *rows) {
  double best = 1e30;
  static char blk[SL_BSLZ4_STACK_BLOCK_BYTES];
  for (int r = 0; r < repeats; r++) {
    double s = sl_now();
    for (size_t f = 0; f < acq->frames; f++) {
      const uint8_t *c = acq->raw + acq->off[f], *end = acq->raw + acq->off[f + 1];
      uint32_t bb = ((uint32_t)c[8] << 24) | ((uint32_t)c[9] << 16) | ((uint32_t)c[10] << 8) | c[11];
      size_t n = acq->frame_bytes / 2, bs = bb / 2, pos = 12;
      for (size_t e = 0; e + 8 <= n;) {
        size_t m = n - e >= bs ? bs : (n - e) - (n - e) % 8;
        uint32_t cl = ((uint32_t)c[pos] << 24) | ((uint32_t)c[pos + 1] << 16) |
                      ((uint32_t)c[pos + 2] << 8) | c[pos + 3];
        if (c + pos + 4 + cl > end) return 1;
        if (LZ4_decompress_safe((const char *)c + pos + 4, blk, (int)cl, (int)sizeof blk) !=
            (int)(m * 2))
          return 1;
        pos += 4 + cl;
        e += m;
      }
    }
    double t = sl_now() - s;
    if (t < best) best = t;
  }
  add_row(rows, "LZ4 blocks only (lower bound)", best);
  return 0;
}

/* The plugin's filter function called directly on every chunk, into out;
 * *plugin_best is its time (left alone when the plugin cannot be loaded). */
static int time_plugin_filter(const bench_acq *acq, uint8_t *out, int repeats, bench_rows *rows,
                              double *plugin_best) {
  h5z_func filt = plugin_filter();
  if (!filt) return 0;
  const size_t frame_bytes = acq->frame_bytes;
  unsigned cdv[5] = {0, 3, 2, 0, 2}; /* as stored: major, minor, elem size, block, LZ4 */
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double s = sl_now();
    for (size_t f = 0; f < acq->frames; f++) {
      size_t nb = acq->off[f + 1] - acq->off[f], bsz = nb;
      void *b = malloc(nb); /* the filter takes ownership and returns its own buffer */
      memcpy(b, acq->raw + acq->off[f], nb);
      size_t got = filt(H5Z_FLAG_REVERSE, 5, cdv, nb, &bsz, &b);
      if (got != frame_bytes) {
        fprintf(stderr, "plugin filter failed on frame %zu\n", f);
        return 1;
      }
      memcpy(out + f * frame_bytes, b, frame_bytes);
      free(b);
    }
    double t = sl_now() - s;
    if (t < best) best = t;
  }
  if (memcmp(out, acq->data, acq->total) != 0) {
    fprintf(stderr, "bench_bslz4: plugin filter output differs\n");
    return 1;
  }
  *plugin_best = best;
  add_row(rows, "plugin filter function", best);
  return 0;
}

/* H5Dread of the whole dataset through the plugin, into out. */
static int time_h5dread(hid_t dset, const bench_acq *acq, uint8_t *out, int repeats,
                        bench_rows *rows, double *plugin_best) {
  double best = 1e30;
  for (int r = 0; r < repeats; r++) {
    double s = sl_now();
    H5Dread(dset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
    double t = sl_now() - s;
    if (t < best) best = t;
  }
  if (memcmp(out, acq->data, acq->total) != 0) {
    fprintf(stderr, "bench_bslz4: H5Dread output differs\n");
    return 1;
  }
  if (!*plugin_best) *plugin_best = best;
  add_row(rows, "plugin via H5Dread", best);
  return 0;
}

static void print_rows(const bench_rows *rows, size_t total, double plugin_best, int repeats) {
  printf("\n%-32s %10s %10s %12s\n", "decoder (1 thread)", "ms", "GB/s", "vs plugin");
  for (int i = 0; i < rows->n; i++)
    printf("%-32s %10.2f %10.3f %11.2fx\n", rows->row[i].name, rows->row[i].best * 1e3,
           total / rows->row[i].best / 1e9, plugin_best / rows->row[i].best);
  printf("(best of %d; GB/s = 1e9 decoded bytes per second; 'vs plugin' relative to the plugin "
         "filter function)\n",
         repeats);
}

int main(int argc, char **argv) {
  size_t frames = argc > 1 ? (size_t)atol(argv[1]) : 1024;
  size_t side = argc > 2 ? (size_t)atol(argv[2]) : 192;
  int repeats = argc > 3 ? atoi(argv[3]) : 5;
  if (frames == 0 || side == 0 || repeats <= 0) {
    fprintf(stderr, "usage: bench_bslz4 [frames] [side] [repeats]\n");
    return 2;
  }
  if (access(PLUGIN_DIR "/libh5bshuf.so", R_OK) != 0) {
    fprintf(stderr, "bench_bslz4: the bitshuffle plugin is not installed under %s\n", PLUGIN_DIR);
    return 1;
  }
  setenv("HDF5_PLUGIN_PATH", PLUGIN_DIR, 1);
  bench_acq acq = {.frames = frames, .side = side, .frame_bytes = side * side * 2};
  acq.total = frames * acq.frame_bytes;
  acq.data = malloc(acq.total);
  uint8_t *out = malloc(acq.total), *out2 = malloc(acq.total);
  if (!acq.data || !out || !out2) return 1;
  double t0 = sl_now();
  generate(acq.data, frames, side);
  double tgen = sl_now() - t0;

  bench_file bf;
  double twrite = 0;
  if (write_through_plugin(&bf, &acq, &twrite)) return 1;
  size_t comp = read_raw_chunks(bf.dset, &acq);
  printf("bench_bslz4: %zu frames of %zux%zu u16 = %.1f MB decoded, %.1f MB compressed "
         "(ratio %.2f); generate %.2f s, plugin write %.2f s\n",
         frames, side, side, acq.total / 1e6, comp / 1e6, (double)acq.total / (double)comp, tgen,
         twrite);

  bench_rows rows = {.n = 0};
  double plugin_best = 0;
  if (time_sluice(&acq, out, repeats, &rows) || time_lz4_only(&acq, repeats, &rows) ||
      time_plugin_filter(&acq, out2, repeats, &rows, &plugin_best) ||
      time_h5dread(bf.dset, &acq, out2, repeats, &rows, &plugin_best))
    return 1;
  print_rows(&rows, acq.total, plugin_best, repeats);

  close_file(&bf);
  free(acq.raw);
  free(acq.off);
  free(acq.data);
  free(out);
  free(out2);
  return 0;
}
