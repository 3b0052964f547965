/* What the virtual detectors' sweep would cost fused into the decoder's
 * output pass (issue 12): the S and Sc madds of 192 x 192 u16 frames (two
 * vpdpwssd a vector of 32, as virtual_detectors' AVX-512 sweep), each frame
 * first written by a memcpy standing in for the decoder's output, either
 *   chunk  the chunk's frames all written, then swept (how the engine's
 *          levels run now: the sweep reads the frames back from L2/L3), or
 *   block  each block of 21 rows (8 KB, a bitshuffle block) swept as soon
 *          as it is written (from L1),
 * against the writes alone. Prints microseconds a frame; the sweep's share
 * is the difference from "write only". Needs AVX-512 BW and VNNI.
 *
 *   bench_fused_sweep [FRAMES a chunk, default 28] [REPS, default 200] */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H = 192, W = 192, BLOCK_ROWS = 21 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* S and Sc of rows [r0, r1) into acc (biased, as madd_u16.h). */
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void sweep_rows(
    const uint16_t *f, int r0, int r1, const int16_t *cw, __m512i acc[4]) {
  const __m512i ones = _mm512_set1_epi16(1), bias = _mm512_set1_epi16(-32768);
  __m512i t0 = acc[0], t1 = acc[1], c0 = acc[2], c1 = acc[3];
  for (int r = r0; r < r1; r++) {
    const uint16_t *row = f + (long)r * W;
    for (int v = 0; v + 2 <= W / 32; v += 2) {
      __m512i x = _mm512_xor_si512(_mm512_loadu_si512(row + 32 * v), bias);
      __m512i y = _mm512_xor_si512(_mm512_loadu_si512(row + 32 * v + 32), bias);
      t0 = _mm512_dpwssd_epi32(t0, x, ones);
      c0 = _mm512_dpwssd_epi32(c0, x, _mm512_loadu_si512(cw + 32 * v));
      t1 = _mm512_dpwssd_epi32(t1, y, ones);
      c1 = _mm512_dpwssd_epi32(c1, y, _mm512_loadu_si512(cw + 32 * v + 32));
    }
  }
  acc[0] = t0, acc[1] = t1, acc[2] = c0, acc[3] = c1;
}

int main(int argc, char **argv) {
  const int nf = argc > 1 ? atoi(argv[1]) : 28, reps = argc > 2 ? atoi(argv[2]) : 200;
  if (nf < 1 || reps < 1) {
    fprintf(stderr, "usage: bench_fused_sweep [FRAMES >= 1] [REPS >= 1]\n");
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vnni")) {
    printf("bench_fused_sweep: this CPU has no AVX-512 BW/VNNI; nothing measured\n");
    return 0;
  }
  const size_t frame = (size_t)H * W, bytes = (size_t)nf * frame * sizeof(uint16_t);
  uint16_t *src = aligned_alloc(64, bytes), *dst = aligned_alloc(64, bytes);
  if (!src || !dst) return 1;
  for (size_t i = 0; i < (size_t)nf * frame; i++) src[i] = (uint16_t)(i % 7), dst[i] = 0;
  int16_t cw[W];
  for (int i = 0; i < W; i++) cw[i] = (int16_t)i;
  __m512i acc[4];
  memset(acc, 0, sizeof acc);
  const char *names[3] = {"chunk: write all, then sweep", "block: sweep each block as written",
                          "write only"};
  printf("%d frames of %dx%d u16 a chunk, best of 5 x %d\n", nf, H, W, reps);
  for (int mode = 0; mode < 3; mode++) {
    double best = 1e9;
    for (int t = 0; t < 5; t++) {
      double t0 = now();
      for (int r = 0; r < reps; r++) {
        if (mode != 1) memcpy(dst, src, bytes);
        for (int p = 0; p < nf && mode != 2; p++) {
          uint16_t *d = dst + (size_t)p * frame;
          for (int b = 0; b < H; b += BLOCK_ROWS) {
            int e = b + BLOCK_ROWS < H ? b + BLOCK_ROWS : H;
            if (mode == 1) memcpy(d + (size_t)b * W, src + (size_t)p * frame + (size_t)b * W, (size_t)(e - b) * W * 2);
            sweep_rows(d, b, e, cw, acc);
          }
        }
      }
      double dt = (now() - t0) / ((double)reps * nf);
      if (dt < best) best = dt;
    }
    printf("  %-36s %7.3f us a frame\n", names[mode], best * 1e6);
  }
  int32_t o[16];
  memcpy(o, &acc[0], sizeof o);
  printf("(checksum %d)\n", o[0] + o[15]);
  free(src), free(dst);
  return 0;
}
