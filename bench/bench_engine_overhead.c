/* Engine overhead: a pipeline of trivial nodes (ramp -> affine -> affine ->
 * sum) against the same loop written directly in C, on the same data, same
 * chunk size and same thread count, in one run. Prints a side-by-side table
 * with the ratio. Usage: bench_engine_overhead [MiB total] [KiB chunk] [threads] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/util.h"
#include "engine/exec/run.h"
#include "nodes/registry.h"

enum { ITEM = 256 }; /* f32 elements per position: 1 KiB */

/* The same work as the pipeline, written plainly: per chunk, generate, two
 * affine passes, and accumulate the sum over positions in f64. */
static double direct(int64_t positions, int64_t chunk, double *check) {
  float *a = aligned_alloc(64, (size_t)chunk * ITEM * sizeof(float));
  float *b = aligned_alloc(64, (size_t)chunk * ITEM * sizeof(float));
  double *acc = calloc(ITEM, sizeof *acc);
  double t0 = sl_now();
  for (int64_t start = 0; start < positions; start += chunk) {
    int64_t n = positions - start < chunk ? positions - start : chunk;
    int64_t base = start * ITEM, elems = n * ITEM;
    for (int64_t i = 0; i < elems; i++) a[i] = (float)(int32_t)((base + i) & 1023);
    for (int64_t i = 0; i < elems; i++) b[i] = 1.5f * a[i] + 0.25f;
    for (int64_t i = 0; i < elems; i++) a[i] = 0.5f * b[i] + 1.0f;
    for (int64_t p = 0; p < n; p++)
      for (int64_t e = 0; e < ITEM; e++) acc[e] += (double)a[p * ITEM + e];
  }
  double t = sl_now() - t0;
  *check = acc[7];
  free(a);
  free(b);
  free(acc);
  return t;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  int64_t total_mib = argc > 1 ? atoll(argv[1]) : 256;
  int64_t chunk_kib = argc > 2 ? atoll(argv[2]) : 1024;
  int threads = argc > 3 ? atoi(argv[3]) : 1;
  int64_t positions = total_mib * 1024, chunk = chunk_kib; /* 1 KiB per position */
  char path[] = "/tmp/sluice-bench-XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  if (fd < 0) return 1;
  FILE *f = fdopen(fd, "w");
  fprintf(f,
          "pipeline: overhead\n"
          "nodes:\n"
          "  r: {type: ramp, params: {positions: [%lld], item_shape: [%d]}}\n"
          "  a: {type: affine, inputs: {x: r.out}, params: {scale: 1.5, offset: 0.25}}\n"
          "  b: {type: affine, inputs: {x: a.y}, params: {scale: 0.5, offset: 1}}\n"
          "  s: {type: sum, inputs: {x: b.y}}\n"
          "outputs: {total: s.total}\n",
          (long long)positions, ITEM);
  fclose(f);
  enum { REPEAT = 5 };
  double t_engine[REPEAT], t_exec[REPEAT], t_direct[REPEAT], check_direct = 0, check_engine = 0;
  for (int r = 0; r < REPEAT; r++) {
    sl_run_request req = {.file = path, .registry = sl_nodes_registry(), .backend = SL_BACKEND_CPU, .chunk_positions = chunk,
                          .threads = threads};
    sl_run run;
    sl_error err;
    sl_error_clear(&err);
    double t0 = sl_now();
    if (sl_run_pipeline(&req, &run, &err) != SL_OK) {
      fprintf(stderr, "bench: %s\n", err.msg);
      sl_run_free(&run);
      return 1;
    }
    t_engine[r] = sl_now() - t0;
    t_exec[r] = run.result.seconds;
    check_engine = ((double *)run.result.outputs[0].data)[7];
    sl_run_free(&run);
    t_direct[r] = direct(positions, chunk, &check_direct);
  }
  unlink(path);
  qsort(t_engine, REPEAT, sizeof(double), cmp);
  qsort(t_direct, REPEAT, sizeof(double), cmp);
  qsort(t_exec, REPEAT, sizeof(double), cmp);
  double te = t_engine[REPEAT / 2], td = t_direct[REPEAT / 2], tx = t_exec[REPEAT / 2];
  double gb = (double)positions * ITEM * 4 / 1e9;
  printf("engine overhead: ramp -> affine -> affine -> sum, %lld MiB of f32, chunks of %lld KiB, "
         "%d thread(s), median of %d\n",
         (long long)total_mib, (long long)chunk_kib, threads, REPEAT);
  printf("%-28s %10s %12s\n", "", "seconds", "GB/s (f32)");
  printf("%-28s %10.4f %12.2f\n", "sluice pipeline (sl_run)", te, gb / te);
  printf("%-28s %10.4f %12.2f\n", "  of which execution", tx, gb / tx);
  printf("%-28s %10.4f %12.2f\n", "direct C loop", td, gb / td);
  printf("ratio sluice/direct: %.3f (overhead %+.1f%%; target < 5%%); execution alone %.3f (%+.1f%%)\n",
         te / td, 100 * (te / td - 1), tx / td, 100 * (tx / td - 1));
  if (check_engine != check_direct) {
    printf("RESULTS DIFFER: %.17g vs %.17g\n", check_engine, check_direct);
    return 1;
  }
  printf("results identical (sum[7] = %.17g)\n", check_engine);
  return 0;
}
