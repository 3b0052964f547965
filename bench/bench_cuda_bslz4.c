/* bench_cuda_bslz4: bslz4_decode on the CUDA backend, in memory.
 *
 * N frames of side x side u16 detector-like counts (bright-field disk,
 * Poisson mean 20, sparse dark field mean 0.05; `unique` distinct frames
 * repeated) are compressed as the bitshuffle plugin writes them (liblz4 +
 * bit transposition, default 8 KiB blocks, one frame per stored chunk), each
 * chunk checked with the CPU decoder, packed as hdf5_source packs them and
 * uploaded once. Reported:
 *   - H2D of the compressed bytes from pinned memory (cudaMemcpyAsync, events);
 *   - one launcher call over all N frames, timed with CUDA events (index +
 *     decode kernels and the 80-byte error-record copy), decoded GB/s;
 *   - the scan cut in chunks of K frames, one launcher call per chunk, wall
 *     clock, in the default deferred error-check mode and in sync mode
 *     (check_every_call, as the node param check_each_call: a stream sync per call);
 * and the whole output is compared with the frames. Never asserts on time.
 * Usage: bench_cuda_bslz4 [frames=32768] [side=192] [repeats=5] [unique=256] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lz4.h>

#include "engine/backend/backend.h"
#include "nodes/codec/bslz4.h"
#include "shaders/cuda/detector/bslz4_decode.h"

#ifdef SLUICE_HAVE_CUDA
#include <cuda_runtime.h>


#include "tests/unit/device_table_lend.h"
#include "tests/unit/test_rng.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void wr_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* One u16 frame as the plugin writes it (compression 2). */
static uint8_t *encode_frame(const uint16_t *px, size_t n, size_t *out_size) {
  const size_t s = 2, bs = sl_bshuf_default_block_elems(2);
  uint8_t *out = malloc(12 + n * s + (n / bs + 2) * 4 + (size_t)LZ4_compressBound((int)(bs * s)) + 64);
  uint8_t *tmp = malloc(bs * s);
  const uint8_t *in = (const uint8_t *)px;
  wr_be32(out, (uint32_t)((uint64_t)(n * s) >> 32));
  wr_be32(out + 4, (uint32_t)(n * s));
  wr_be32(out + 8, (uint32_t)(bs * s));
  size_t pos = 12, e = 0;
  while (e < n) {
    size_t m = n - e >= bs ? bs : (n - e) - (n - e) % 8;
    if (!m) break;
    size_t rb = m / 8;
    memset(tmp, 0, m * s);
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < s; j++) {
        uint8_t v = in[(e + i) * s + j];
        for (size_t k = 0; v && k < 8; k++)
          if ((v >> k) & 1) tmp[(8 * j + k) * rb + i / 8] |= (uint8_t)(1u << (i % 8));
      }
    int c = LZ4_compress_default((const char *)tmp, (char *)out + pos + 4, (int)(m * s),
                                 LZ4_compressBound((int)(m * s)));
    if (c <= 0) abort();
    wr_be32(out + pos, (uint32_t)c);
    pos += 4 + (size_t)c;
    e += m;
  }
  memcpy(out + pos, in + e * s, (n - e) * s);
  pos += (n - e) * s;
  free(tmp);
  *out_size = pos;
  return out;
}

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "bench_cuda_bslz4: %s: %s\n", #x, cudaGetErrorString(e_));                   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

typedef struct setup {
  sl_tensor_desc desc;
  size_t nframes, unique, fb;
  uint8_t **chunk; /* per unique frame */
  size_t *csize;
  uint16_t *frames; /* unique frames */
} setup;

/* Host packed buffer of frames [ps, ps + pc) (one frame per stored chunk). */
static uint8_t *pack(const setup *S, int64_t ps, int64_t pc, size_t *bytes, size_t *payload) {
  size_t cap = (size_t)sl_desc_encoded_bound(&S->desc, pc);
  uint8_t *buf = NULL;
  CK(cudaHostAlloc((void **)&buf, cap, cudaHostAllocDefault));
  sl_packed_items *pk = (sl_packed_items *)buf;
  pk->n = (uint64_t)pc;
  pk->reserved = 0;
  size_t pos = sizeof(sl_packed_items) + (size_t)pc * sizeof(sl_packed_entry), pay = 0;
  for (int64_t i = 0; i < pc; i++) {
    size_t u = (size_t)(ps + i) % S->unique;
    pos = (pos + 7) & ~(size_t)7;
    memcpy(buf + pos, S->chunk[u], S->csize[u]);
    sl_packed_entry *e = &pk->entries[i];
    memset(e, 0, sizeof *e);
    e->offset = pos;
    e->size = S->csize[u];
    e->origin = (uint64_t)(ps + i);
    e->first_position = ps + i;
    e->n_positions = 1;
    pos += S->csize[u];
    pay += S->csize[u];
  }
  *bytes = cap;
  *payload = pay;
  return buf;
}

/* The launcher's params, the device-state slot it fills and the device
 * table it is lent (on the first call, for that call's positions). */
typedef struct dnode {
  sl_cuda_bslz4_decode_params p;
  void *dev_state;
  void (*dev_state_free)(void *);
  test_table table;
} dnode;

static void dnode_init(dnode *d, const sl_tensor_desc *in, bool check_every_call) {
  memset(d, 0, sizeof *d);
  d->p.chunks = *in;
  d->p.check_every_call = check_every_call;
  d->p.device_state = (sl_cuda_state_holder){&d->dev_state, &d->dev_state_free};
}

static void dnode_release(dnode *d) { test_table_give_back(&d->table, &d->dev_state, &d->dev_state_free); }

static sl_code call(sl_backend *b, dnode *d, const void *in, size_t in_bytes, void *out, int64_t ps, int64_t pc,
                    int64_t chunk, int64_t n_chunks, sl_error *err) {
  sl_code rc = test_table_lend(&d->table, b, sl_cuda_bslz4_decode_table_bytes(&d->p.chunks, pc), err);
  if (rc != SL_OK) return rc;
  sl_kernel_args a = {.backend = b, .dev = b->ops->device_env(b), .node_id = "decode",
                      .chunk = chunk, .n_chunks = n_chunks, .pos_start = ps, .pos_count = pc,
                      .in = {in}, .in_bytes = {(int64_t)in_bytes}, .out = {out}, .err = err};
  test_table_args(&d->table, &a);
  return sl_cuda_bslz4_decode(&d->p, &a);
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* `unique` distinct frames of side x side u16 counts (a Poisson-like
 * bright-field disk and a sparse dark field), each compressed as the plugin
 * writes it and checked with the CPU decoder; *csum: their compressed bytes. */
static int make_frames(setup *S_out, size_t nframes, size_t side, size_t unique, size_t *csum_out) {
  sl_error err;
  sl_error_clear(&err);
  setup S;
  memset(&S, 0, sizeof S);
  S.nframes = nframes;
  S.unique = unique;
  size_t npx = side * side;
  S.fb = npx * 2;
  S.frames = malloc(unique * S.fb);
  S.chunk = calloc(unique, sizeof *S.chunk);
  S.csize = calloc(unique, sizeof *S.csize);
  size_t maxc = 0, csum = 0;
  uint8_t *chk = malloc(S.fb);
  for (size_t u = 0; u < unique; u++) {
    uint16_t *f = S.frames + u * npx;
    for (size_t r = 0; r < side; r++)
      for (size_t c = 0; c < side; c++) {
        double dr = (double)r - side / 2.0, dc = (double)c - side / 2.0;
        unsigned v = poisson(dr * dr + dc * dc < (double)(side * side) / 16.0 ? 20.0 : 0.05);
        f[r * side + c] = (uint16_t)(v > 65535 ? 65535 : v);
      }
    S.chunk[u] = encode_frame(f, npx, &S.csize[u]);
    size_t got = 0;
    if (sl_bslz4_decode(S.chunk[u], S.csize[u], 2, chk, S.fb, &got, &err) != SL_OK || got != S.fb ||
        memcmp(chk, f, S.fb)) {
      fprintf(stderr, "bench_cuda_bslz4: the CPU decoder rejects frame %zu: %s\n", u, err.msg);
      return 1;
    }
    if (S.csize[u] > maxc) maxc = S.csize[u];
    csum += S.csize[u];
  }
  free(chk);
  int64_t dims[3] = {(int64_t)nframes, (int64_t)side, (int64_t)side};
  S.desc = sl_desc_make(SL_U16, 3, dims, 1);
  S.desc.encoding = SL_ENC_BSLZ4;
  S.desc.positions_per_stored_chunk = 1;
  S.desc.min_positions_per_stored_chunk = 1;
  S.desc.max_stored_chunk_bytes = (int64_t)maxc;
  S.desc.encoded_block_elems = 0;
  *S_out = S;
  *csum_out = csum;
  return 0;
}

/* The scan cut in chunks of K frames, one launcher call per chunk (wall
 * clock), in the deferred and the every-call error check modes; the output
 * goes to dout. */
static int bench_chunked(sl_backend *b, const setup *S_in, void *dout, double out_bytes, int repeats) {
  const setup S = *S_in;
  const size_t nframes = S.nframes;
  cudaStream_t st = (cudaStream_t)b->ops->device_env(b)->queue;
  sl_error err;
  sl_error_clear(&err);
  size_t ks[] = {256, 1024, 4096};
  for (int mode = 0; mode < 2; mode++) {
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
      size_t K = ks[ki];
      if (K > nframes) continue;
      int64_t nch = (int64_t)((nframes + K - 1) / K);
      void **dbufs = calloc((size_t)nch, sizeof *dbufs);
      size_t *dsz = calloc((size_t)nch, sizeof *dsz);
      for (int64_t c = 0; c < nch; c++) {
        int64_t ps = c * (int64_t)K, pc = (int64_t)nframes - ps < (int64_t)K ? (int64_t)nframes - ps : (int64_t)K;
        size_t pb, pay;
        uint8_t *h = pack(&S, ps, pc, &pb, &pay);
        if (b->ops->alloc(b, pb, &dbufs[c], &err) != SL_OK) {
          fprintf(stderr, "bench_cuda_bslz4: alloc: %s\n", err.msg);
          return 1;
        }
        CK(cudaMemcpy(dbufs[c], h, pb, cudaMemcpyHostToDevice));
        dsz[c] = pb;
        cudaFreeHost(h);
      }
      dnode dk;
      dnode_init(&dk, &S.desc, mode == 1);
      double best = 1e30;
      for (int r = 0; r < repeats + 1; r++) {
        CK(cudaStreamSynchronize(st));
        double t0 = now();
        for (int64_t c = 0; c < nch; c++) {
          int64_t ps = c * (int64_t)K, pc = (int64_t)nframes - ps < (int64_t)K ? (int64_t)nframes - ps : (int64_t)K;
          if (call(b, &dk, dbufs[c], dsz[c], (uint8_t *)dout + (size_t)ps * S.fb, ps, pc, c, nch, &err) != SL_OK) {
            fprintf(stderr, "bench_cuda_bslz4: decode failed: %s\n", err.msg);
            return 1;
          }
        }
        CK(cudaStreamSynchronize(st));
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
      }
      char label[96];
      snprintf(label, sizeof label, "decode, %zu frames per call, %s check (wall)", K, mode ? "sync" : "deferred");
      printf("  %-52s %10.3f %10s %12.1f\n", label, best * 1e3, "", out_bytes / best / 1e9);
      dnode_release(&dk);
      for (int64_t c = 0; c < nch; c++) b->ops->free(b, dbufs[c], dsz[c]);
      free(dbufs);
      free(dsz);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  size_t nframes = argc > 1 ? strtoul(argv[1], NULL, 10) : 32768;
  size_t side = argc > 2 ? strtoul(argv[2], NULL, 10) : 192;
  int repeats = argc > 3 ? atoi(argv[3]) : 5;
  size_t unique = argc > 4 ? strtoul(argv[4], NULL, 10) : 256;
  if (!nframes || !side || repeats < 1 || !unique) {
    fprintf(stderr, "usage: bench_cuda_bslz4 [frames] [side] [repeats] [unique]\n");
    return 2;
  }
  if (unique > nframes) unique = nframes;
  const sl_backend_ops *ops = sl_backend_ops_for(SL_BACKEND_CUDA);
  sl_error err;
  sl_error_clear(&err);
  sl_backend_caps caps;
  if (!ops || ops->probe(&caps, &err) != SL_OK) {
    printf("SKIP: no CUDA device (%s)\n", ops ? err.msg : "the CUDA backend is not in this build");
    return 0;
  }
  sl_backend *b = NULL;
  if (ops->create(0, &b, &err) != SL_OK) {
    fprintf(stderr, "bench_cuda_bslz4: create: %s\n", err.msg);
    return 1;
  }
  cudaStream_t st = (cudaStream_t)b->ops->device_env(b)->queue;

  /* data */
  setup S;
  size_t csum = 0;
  if (make_frames(&S, nframes, side, unique, &csum) != 0) return 1;
  const size_t npx = side * side;
  const double out_bytes = (double)nframes * (double)S.fb;

  printf("bench_cuda_bslz4: %s\n", b->caps.device);
  printf("  %zu frames of %zux%zu u16 (%zu distinct), one frame per stored chunk, 8 KiB blocks\n", nframes, side,
         side, unique);
  printf("  decoded %.3f GB, compressed %.3f GB (ratio %.2f, mean chunk %.0f bytes)\n", out_bytes / 1e9,
         (double)csum / unique * nframes / 1e9, (double)S.fb * unique / (double)csum, (double)csum / unique);

  /* whole run: one packed buffer */
  size_t pbytes, payload;
  uint8_t *hp = pack(&S, 0, (int64_t)nframes, &pbytes, &payload);
  void *din = NULL, *dout = NULL;
  if (b->ops->alloc(b, pbytes, &din, &err) != SL_OK || b->ops->alloc(b, (size_t)out_bytes, &dout, &err) != SL_OK) {
    fprintf(stderr, "bench_cuda_bslz4: alloc: %s\n", err.msg);
    return 1;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double h2d[64], dec[64];
  if (repeats > 64) repeats = 64;
  for (int r = 0; r < repeats; r++) {
    CK(cudaEventRecord(e0, st));
    CK(cudaMemcpyAsync(din, hp, pbytes, cudaMemcpyHostToDevice, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    h2d[r] = ms * 1e-3;
  }
  /* One call over all frames on a fresh node, output poisoned before and
   * verified after. */
  uint8_t *host_out = NULL;
  CK(cudaHostAlloc((void **)&host_out, (size_t)out_bytes, cudaHostAllocDefault));
  size_t bad = 0;
  {
    dnode d;
    dnode_init(&d, &S.desc, false);
    CK(cudaMemsetAsync(dout, 0xA5, (size_t)out_bytes, st));
    for (int r = 0; r < repeats + 1; r++) { /* the first call allocates its tables: warm-up */
      CK(cudaEventRecord(e0, st));
      sl_code rc = call(b, &d, din, pbytes, dout, 0, (int64_t)nframes, 0, 1, &err);
      CK(cudaEventRecord(e1, st));
      if (rc != SL_OK) {
        fprintf(stderr, "bench_cuda_bslz4: decode failed: %s\n", err.msg);
        return 1;
      }
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) dec[r - 1] = ms * 1e-3;
    }
    dnode_release(&d);
    if (b->ops->download(b, host_out, dout, (size_t)out_bytes, &err) != SL_OK) {
      fprintf(stderr, "bench_cuda_bslz4: download: %s\n", err.msg);
      return 1;
    }
    for (size_t f = 0; f < nframes; f++)
      if (memcmp(host_out + f * S.fb, S.frames + (f % unique) * npx, S.fb)) bad++;
    if (bad) {
      fprintf(stderr, "bench_cuda_bslz4: %zu of %zu decoded frames differ from the input\n", bad, nframes);
      return 1;
    }
    qsort(dec, (size_t)repeats, sizeof(double), cmp_double);
  }
  printf("  output verified: all %zu frames equal the input (and the CPU decoder)\n", nframes);
  qsort(h2d, (size_t)repeats, sizeof(double), cmp_double);

  printf("\n  %-52s %10s %10s %12s\n", "what", "best ms", "median ms", "GB/s (best)");
  printf("  %-52s %10.3f %10.3f %12.1f\n", "H2D compressed packed buffer (pinned)", h2d[0] * 1e3,
         h2d[repeats / 2] * 1e3, (double)pbytes / h2d[0] / 1e9);
  printf("  %-52s %10.3f %10.3f %12.1f\n", "decode, one call (events), decoded bytes", dec[0] * 1e3,
         dec[repeats / 2] * 1e3, out_bytes / dec[0] / 1e9);
  printf("  %-52s %10s %10s %12.1f\n", "  same, compressed bytes read", "", "", (double)payload / dec[0] / 1e9);

  if (bench_chunked(b, &S, dout, out_bytes, repeats) != 0) return 1;
  if (b->ops->download(b, host_out, dout, (size_t)out_bytes, &err) == SL_OK) {
    bad = 0;
    for (size_t f = 0; f < nframes; f++)
      if (memcmp(host_out + f * S.fb, S.frames + (f % unique) * npx, S.fb)) bad++;
    printf("  chunked runs: %s\n", bad ? "OUTPUT DIFFERS" : "output verified");
  }
  printf("\n  (target from the issue: >= 300 GB/s decoded on an H200)\n");
  cudaFreeHost(host_out);
  cudaFreeHost(hp);
  b->ops->free(b, din, pbytes);
  b->ops->free(b, dout, (size_t)out_bytes);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  b->ops->destroy(b);
  for (size_t u = 0; u < unique; u++) free(S.chunk[u]);
  free(S.chunk);
  free(S.csize);
  free(S.frames);
  return bad ? 1 : 0;
}
#else
int main(void) {
  printf("SKIP: no CUDA device (bench_cuda_bslz4 was built without CUDA)\n");
  return 0;
}
#endif
