/* PNG drawing (see sinks.h): 8-bit grayscale, scaled from the smallest to the
 * largest finite value, row strip by row strip so that a large image never
 * needs to be in memory whole. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "engine/backend/backend.h"
#include "engine/exec/sinks.h"
#include "engine/core/util.h"

bool sl_output_is_image(const sl_tensor_desc *d) {
  return d->rank == 2 && d->dtype != SL_C64 && d->encoding == SL_ENC_NONE && !d->variable && d->dims[0] > 0 && d->dims[1] > 0;
}

/* lround(x) for the pixel of a finite value (x = (v - low) * scale, so
 * x >= 0): the integer part plus one when the fraction is at least a half,
 * which is exactly lround for 0 <= x < 2^52 (the fraction is exact there)
 * without a libm call per pixel; anything else (inf * 0 when the range
 * overflows) goes to lround itself, so every byte is what it was. */
static inline uint8_t pixel(double x) {
  if (!(x >= 0 && x < 4096)) return (uint8_t)lround(x);
  int64_t t = (int64_t)x;
  return (uint8_t)(t + (x - (double)t >= 0.5));
}

/* Per element type, without a switch per value (a 512 x 512 image's range
 * and pixels were most of a PNG's time): the range of n values, and one row
 * of pixels. */
#define PNG_INT_DTYPES(X) \
  X(SL_U8, uint8_t) X(SL_U16, uint16_t) X(SL_U32, uint32_t) X(SL_U64, uint64_t) X(SL_I32, int32_t) X(SL_I64, int64_t)
#define PNG_FLOAT_DTYPES(X) X(SL_F32, float) X(SL_F64, double)
#define PNG_DTYPES(X) PNG_INT_DTYPES(X) PNG_FLOAT_DTYPES(X)
/* Integers: the range in their own type (every value finite, a loop the
 * compiler vectorises; 4-5 ns a value converted to double first, for a
 * streamed 512 x 512 u64 image 1.1-1.5 ms on the H200's host), converted
 * once: conversion to double is monotone, so the bounds are the same. */
#define PNG_INT_RANGE(K, T)                                                                  \
  static void range_##K(const T *p, int64_t n, double *lo, double *hi) {                   \
    if (n <= 0) return;                                                                      \
    T l = p[0], h = p[0];                                                                    \
    for (int64_t i = 1; i < n; i++) {                                                        \
      l = p[i] < l ? p[i] : l;                                                               \
      h = p[i] > h ? p[i] : h;                                                               \
    }                                                                                        \
    *lo = (double)l < *lo ? (double)l : *lo;                                                 \
    *hi = (double)h > *hi ? (double)h : *hi;                                                 \
  }
/* Floats: finite values only. */
#define PNG_FLOAT_RANGE(K, T)                                                                \
  static void range_##K(const T *p, int64_t n, double *lo, double *hi) {                   \
    double l = *lo, h = *hi;                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                        \
      double v = (double)p[i];                                                               \
      if (isfinite(v)) {                                                                     \
        l = v < l ? v : l;                                                                   \
        h = v > h ? v : h;                                                                   \
      }                                                                                      \
    }                                                                                        \
    *lo = l, *hi = h;                                                                        \
  }
PNG_INT_DTYPES(PNG_INT_RANGE)
PNG_FLOAT_DTYPES(PNG_FLOAT_RANGE)
#undef PNG_INT_RANGE
#undef PNG_FLOAT_RANGE
#define PNG_TYPED(K, T)                                                                      \
  static void row_##K(const T *p, int64_t w, double lo, double scale, uint8_t *out) {      \
    for (int64_t c = 0; c < w; c++) {                                                        \
      double v = (double)p[c];                                                               \
      out[c] = isfinite(v) ? pixel((v - lo) * scale) : 0;                                   \
    }                                                                                        \
  }
PNG_DTYPES(PNG_TYPED)
#undef PNG_TYPED

void sl_values_range(sl_dtype t, const void *data, int64_t n, double *lo, double *hi) {
  switch (t) {
#define PNG_RANGE(K, T) \
  case K: range_##K((const T *)data, n, lo, hi); break;
    PNG_DTYPES(PNG_RANGE)
#undef PNG_RANGE
    default: break;
  }
}

/* sl_values_range_on: ranges of at least RANGE_GRAIN values, each worker's
 * folded into its own 64-byte slot, the slots folded at the end. */
#define RANGE_GRAIN ((int64_t)1 << 16)
#define RANGE_SLOTS 64

typedef struct range_job {
  sl_dtype t;
  const uint8_t *data;
  double (*slot)[8]; /* lo, hi, then padding to a cache line */
} range_job;

static void range_part(void *ctx, int64_t begin, int64_t end, int worker) {
  const range_job *j = ctx;
  sl_values_range(j->t, j->data + begin * (int64_t)sl_dtype_size(j->t), end - begin, &j->slot[worker][0],
                  &j->slot[worker][1]);
}

void sl_values_range_on(sl_backend *b, sl_dtype t, const void *data, int64_t n, double *lo, double *hi) {
  const int workers = b ? b->ops->workers(b) : 1;
  if (workers <= 1 || workers > RANGE_SLOTS || n < 2 * RANGE_GRAIN) {
    sl_values_range(t, data, n, lo, hi);
    return;
  }
  double slot[RANGE_SLOTS][8];
  for (int w = 0; w < workers; w++) slot[w][0] = INFINITY, slot[w][1] = -INFINITY;
  range_job j = {t, data, slot};
  b->ops->parallel_for(b, n, RANGE_GRAIN, range_part, &j);
  for (int w = 0; w < workers; w++) {
    if (slot[w][0] < *lo) *lo = slot[w][0];
    if (slot[w][1] > *hi) *hi = slot[w][1];
  }
}

/* Row r of the strip at data. */
static void pixels_row(sl_dtype t, const void *data, int64_t r, int64_t w, double lo, double scale,
                       uint8_t *out) {
  switch (t) {
#define PNG_ROW(K, T) \
  case K: row_##K((const T *)data + r * w, w, lo, scale, out); break;
    PNG_DTYPES(PNG_ROW)
#undef PNG_ROW
    default: memset(out, 0, (size_t)w); break;
  }
}

int64_t sl_png_strip_rows(const sl_tensor_desc *d) {
  int64_t row = d->dims[1] * sl_dtype_size(d->dtype);
  int64_t rows = row > 0 ? SL_PNG_STRIP_BYTES / row : 1;
  if (rows < 1) rows = 1;
  return rows < d->dims[0] ? rows : d->dims[0];
}

/* ---- bands: a strip's rows deflated in parallel --------------------------
 * Each strip's rows are cut into bands of about SL_PNG_BAND_BYTES of
 * filtered rows (a filter byte, then the pixels); a worker draws and
 * deflates a band into its own raw deflate stream, ended by a sync flush
 * (byte-aligned, not final) or, for the image's last band, by the final
 * block. The streams concatenate into one zlib stream (the header, the
 * bands, the Adler-32 of all filtered rows combined band by band), written
 * as one IDAT chunk per band. The bands depend on the image's size and
 * dtype only, so the file's bytes do not depend on the thread count, nor on
 * whether the image came whole or in strips. */
#define SL_PNG_BAND_BYTES ((int64_t)16 << 10) /* a 512 x 512 image: 16 bands for 16 workers */

static int64_t band_rows(int64_t w) {
  int64_t r = SL_PNG_BAND_BYTES / (w + 1);
  return r < 1 ? 1 : r;
}

typedef struct png_band {
  int64_t row0, rows; /* in the strip */
  uint8_t *out;       /* the deflated bytes */
  int64_t out_bytes;
  uLong adler;        /* of the band's filtered rows */
  int z;              /* zlib's result: Z_OK or the error */
} png_band;

/* deflate's state at windowBits 15, memLevel 8: its window (2 x 32 KiB),
 * prev (32 Ki x 2 B), head (32 Ki x 2 B), pending buffer (16 Ki x 4 B) and
 * the state struct, with room for alignment. */
#define DEFLATE_STATE_BYTES (((int64_t)256 << 10) + ((int64_t)16 << 10))

/* A band's worst-case deflated size: stored blocks of at most 64 KiB with a
 * 5-byte header each, the sync flush's empty block, and the final block. */
static int64_t band_out_bound(int64_t in) { return in + 5 * (in / 16384 + 2) + 16; }

int64_t sl_png_worker_bytes(int64_t w) {
  int64_t in = band_rows(w) * (w + 1);
  return DEFLATE_STATE_BYTES + (in + 63) / 64 * 64;
}

/* Each band's deflated bytes, kept until the strip's bands are written in
 * order: room for a strip's bands. */
static int64_t band_out_stride(int64_t w) { return (band_out_bound(band_rows(w) * (w + 1)) + 63) / 64 * 64; }

static int64_t strip_bands(const sl_tensor_desc *d) {
  return (sl_png_strip_rows(d) + band_rows(d->dims[1]) - 1) / band_rows(d->dims[1]);
}

/* a band's bookkeeping, counted as 64 bytes */
_Static_assert(sizeof(png_band) <= 64, "png_band outgrew its 64 bytes");

int64_t sl_png_bands_bytes(const sl_tensor_desc *d) { return strip_bands(d) * (band_out_stride(d->dims[1]) + 64); }

/* zlib's allocations come from the worker's lent scratch (every byte
 * planned): a bump allocator over DEFLATE_STATE_BYTES. */
typedef struct bump {
  uint8_t *at, *end;
} bump;

static voidpf bump_alloc(voidpf opaque, uInt items, uInt size) {
  bump *b = opaque;
  size_t n = ((size_t)items * size + 15) & ~(size_t)15;
  if ((size_t)(b->end - b->at) < n) return Z_NULL;
  void *p = b->at;
  b->at += n;
  return p;
}

static void bump_free(voidpf opaque, voidpf p) { (void)opaque, (void)p; }


typedef struct band_job {
  const sl_tensor_desc *d;
  const void *strip; /* the strip's rows in d's dtype */
  double lo, scale;
  bool last_strip;
  int64_t n_bands;
  png_band *bands;
  const sl_png_workers *workers;
} band_job;

static void draw_bands(void *ctx, int64_t begin, int64_t end, int worker) {
  band_job *j = ctx;
  const int64_t w = j->d->dims[1];
  uint8_t *scratch = (uint8_t *)j->workers->scratch + (int64_t)worker * j->workers->stride;
  uint8_t *in = scratch + DEFLATE_STATE_BYTES;
  for (int64_t k = begin; k < end; k++) {
    png_band *b = &j->bands[k];
    uint8_t *out = b->out;
    int64_t n = b->rows * (w + 1);
    for (int64_t r = 0; r < b->rows; r++) {
      in[r * (w + 1)] = 0; /* filter: none */
      pixels_row(j->d->dtype, j->strip, b->row0 + r, w, j->lo, j->scale, in + r * (w + 1) + 1);
    }
    b->adler = adler32(adler32(0L, Z_NULL, 0), in, (uInt)n);
    bump heap = {scratch, scratch + DEFLATE_STATE_BYTES};
    z_stream z;
    memset(&z, 0, sizeof z);
    z.zalloc = bump_alloc, z.zfree = bump_free, z.opaque = &heap;
    /* zlib's fastest level, run-length matches only (Z_RLE), no per-row
     * filter trials: a preview drawn inside the run. libpng's defaults took
     * 20-80 ms per 512 x 512 image on the H200's host; level 1 with full
     * matching took 0.3-0.4 ms per 128 x 128 image on the dev VM, Z_RLE
     * 0.2 ms, for files 6% larger over stem_products' eight (noisy images
     * compress alike; a smooth phase image 9 KB -> 15 KB). */
    b->z = deflateInit2(&z, 1, Z_DEFLATED, -15, 8, Z_RLE);
    if (b->z != Z_OK) continue;
    z.next_in = in, z.avail_in = (uInt)n;
    z.next_out = out, z.avail_out = (uInt)band_out_bound(n);
    int flush = j->last_strip && k == j->n_bands - 1 ? Z_FINISH : Z_SYNC_FLUSH;
    int rc = deflate(&z, flush);
    /* all in, all out (room left: nothing pending) */
    b->z = (flush == Z_FINISH ? rc == Z_STREAM_END : rc == Z_OK && z.avail_in == 0 && z.avail_out > 0) ? Z_OK
                                                                                                      : Z_BUF_ERROR;
    b->out_bytes = (int64_t)(z.next_out - out);
    deflateEnd(&z);
  }
}

/* A PNG chunk: length, type, data, CRC-32 of type and data. */
static bool put_chunk(FILE *f, const char type[4], const uint8_t *data, uint32_t n) {
  uint8_t be[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
  uLong crc = crc32(crc32(0L, Z_NULL, 0), (const Bytef *)type, 4);
  if (n) crc = crc32(crc, data, n);
  uint8_t cb[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
  return fwrite(be, 1, 4, f) == 4 && fwrite(type, 1, 4, f) == 4 && (!n || fwrite(data, 1, n, f) == n) &&
         fwrite(cb, 1, 4, f) == 4;
}

sl_code sl_png_write(const char *path, const sl_tensor_desc *d, double lo, double hi, sl_png_rows_fn rows,
                     void *ctx, const sl_png_workers *workers, sl_png_times *times, sl_error *err) {
  sl_png_times t = {0};
  double t0 = sl_now();
  int64_t h = d->dims[0], w = d->dims[1];
  if (h > 1 << 20 || w > 1 << 20) return sl_fail(err, SL_ERR_IO, "%s: image too large for PNG", path);
  if (!workers || !workers->scratch || workers->stride < sl_png_worker_bytes(w))
    return sl_fail(err, SL_ERR_INTERNAL, "%s: no worker scratch lent to draw it", path);
  const int64_t strip = sl_png_strip_rows(d), per_band = band_rows(w), stride = band_out_stride(w);
  /* the strip's bands and their deflated bytes (sl_png_bands_bytes) */
  png_band *bands = malloc((size_t)sl_png_bands_bytes(d));
  if (!bands) return sl_fail(err, SL_ERR_NOMEM, "no memory to draw %s", path);
  uint8_t *outs = (uint8_t *)bands + strip_bands(d) * 64;
  FILE *f = fopen(path, "wb");
  if (!f) {
    free(bands);
    return sl_fail(err, SL_ERR_IO, "cannot create %s", path);
  }
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  /* width, height, 8 bits, grayscale, deflate, adaptive filters, no interlace */
  uint8_t ihdr[13] = {(uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w,
                      (uint8_t)(h >> 24), (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h, 8, 0, 0, 0, 0};
  static const uint8_t zlib_header[2] = {0x78, 0x01}; /* deflate, 32 KiB window, fastest */
  bool ok = fwrite(signature, 1, 8, f) == 8 && put_chunk(f, "IHDR", ihdr, 13) && put_chunk(f, "IDAT", zlib_header, 2);
  uLong adler = adler32(0L, Z_NULL, 0);
  sl_code rc = SL_OK;
  band_job j = {.d = d, .lo = lo, .scale = hi > lo ? 255.0 / (hi - lo) : 0, .bands = bands, .workers = workers};
  for (int64_t r0 = 0; r0 < h && ok && rc == SL_OK; r0 += strip) {
    int64_t n = h - r0 < strip ? h - r0 : strip;
    double t1 = sl_now();
    rc = rows(ctx, r0, n, &j.strip, err);
    t.rows += sl_now() - t1;
    if (rc != SL_OK) break;
    j.last_strip = r0 + n == h;
    j.n_bands = (n + per_band - 1) / per_band;
    for (int64_t k = 0; k < j.n_bands; k++)
      bands[k] = (png_band){.row0 = k * per_band,
                            .rows = n - k * per_band < per_band ? n - k * per_band : per_band,
                            .out = outs + k * stride};
    double t2 = sl_now();
    workers->backend->ops->parallel_for(workers->backend, j.n_bands, 1, draw_bands, &j);
    t.draw += sl_now() - t2;
    for (int64_t k = 0; k < j.n_bands && ok; k++) {
      if (bands[k].z != Z_OK) {
        rc = sl_fail(err, SL_ERR_INTERNAL, "%s: deflate of rows %lld-%lld failed (zlib %d)", path,
                     (long long)(r0 + bands[k].row0), (long long)(r0 + bands[k].row0 + bands[k].rows - 1), bands[k].z);
        break;
      }
      adler = adler32_combine(adler, bands[k].adler, (z_off_t)(bands[k].rows * (w + 1)));
      ok = put_chunk(f, "IDAT", bands[k].out, (uint32_t)bands[k].out_bytes);
    }
  }
  uint8_t trailer[4] = {(uint8_t)(adler >> 24), (uint8_t)(adler >> 16), (uint8_t)(adler >> 8), (uint8_t)adler};
  if (ok && rc == SL_OK) ok = put_chunk(f, "IDAT", trailer, 4) && put_chunk(f, "IEND", NULL, 0);
  free(bands);
  if (fclose(f) != 0) ok = false;
  if (rc == SL_OK && !ok) rc = sl_fail(err, SL_ERR_IO, "cannot write PNG %s", path);
  t.file = sl_now() - t0 - t.rows - t.draw;
  if (times) times->rows += t.rows, times->draw += t.draw, times->file += t.file;
  return rc;
}
