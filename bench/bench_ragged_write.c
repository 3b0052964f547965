/* sluice's half of bench_ragged_write.sh: N variable-size items (the sizes
 * and bytes of ragged_item() below, which the script's h5py peer makes the
 * same way) handed to results.h5's ragged writer (sl_h5_writer_ragged, what
 * write_h5 calls for a stream of variable-size items) in calls of CALL
 * items each, in the packed layout, as a node's chunks would bring them.
 * Prints the seconds of the writes and of finishing the file (best of
 * REPS), the items' bytes, and checks the file's offsets against the sizes.
 *
 *   bench_ragged_write OUT.h5 [N, default 65536] [CALL, default 64] [REPS, default 3] */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/exec/sinks.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Item k: 16 + (h(k) mod 2033) bytes (1 KiB on average, like a frame of a
 * sparse acquisition compressed), byte j of it (k + 7 j) mod 256, where
 * h(k) = (k * 2654435761) mod 2^32. */
static int64_t item_size(int64_t k) { return 16 + (int64_t)(((uint64_t)k * 2654435761u) % 4294967296u % 2033u); }

static void item_bytes(int64_t k, uint8_t *out) {
  for (int64_t j = 0, n = item_size(k); j < n; j++) out[j] = (uint8_t)(k + 7 * j);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_ragged_write OUT.h5 [N] [CALL] [REPS]\n");
    return 2;
  }
  const char *path = argv[1];
  const int64_t n = argc > 2 ? atoll(argv[2]) : 65536, call = argc > 3 ? atoll(argv[3]) : 64;
  const int reps = argc > 4 ? atoi(argv[4]) : 3;
  if (n < 1 || call < 1 || reps < 1) return 2;
  /* every call's packed buffer made before the clock starts */
  const int64_t calls = (n + call - 1) / call;
  uint8_t **bufs = calloc((size_t)calls, sizeof *bufs);
  int64_t *buf_bytes = calloc((size_t)calls, sizeof *buf_bytes), total = 0;
  if (!bufs || !buf_bytes) return 1;
  for (int64_t c = 0; c < calls; c++) {
    const int64_t k0 = c * call, m = n - k0 < call ? n - k0 : call;
    int64_t bytes = (int64_t)sizeof(sl_packed_items) + m * (int64_t)sizeof(sl_packed_entry);
    for (int64_t k = k0; k < k0 + m; k++) bytes += item_size(k);
    sl_packed_items *pk = malloc((size_t)bytes);
    if (!pk) return 1;
    pk->n = (uint64_t)m, pk->reserved = 0;
    uint64_t at = sizeof *pk + (uint64_t)m * sizeof(sl_packed_entry);
    for (int64_t k = k0; k < k0 + m; k++) {
      item_bytes(k, (uint8_t *)pk + at);
      pk->entries[k - k0] = (sl_packed_entry){.offset = at, .size = (uint64_t)item_size(k), .first_position = k,
                                              .n_positions = 1, .origin = (uint64_t)k};
      at += (uint64_t)item_size(k);
      total += item_size(k);
    }
    bufs[c] = (uint8_t *)pk, buf_bytes[c] = bytes;
  }
  int64_t dims[2] = {n, 4096};
  sl_tensor_desc d = sl_desc_make(SL_U8, 2, dims, 1);
  d.variable = true;
  sl_h5_writer_process_init();
  double best = 1e30, best_finish = 0;
  for (int r = 0; r < reps; r++) {
    sl_error err;
    sl_error_clear(&err);
    sl_h5_writer *w;
    const double t0 = now();
    sl_code rc = sl_h5_writer_open(path, NULL, 0, &w, &err);
    for (int64_t c = 0; c < calls && rc == SL_OK; c++)
      rc = sl_h5_writer_ragged(w, "items", &d, c, c * call, n - c * call < call ? n - c * call : call, bufs[c],
                               buf_bytes[c], &err);
    const double t1 = now();
    sl_output_data o = {.name = "items", .node_id = "bench", .port = "bytes", .scan_axes = 1, .desc = d};
    if (rc == SL_OK) rc = sl_h5_writer_finish(w, &o, 1, &err);
    else sl_h5_writer_abandon(w);
    const double t2 = now();
    if (rc != SL_OK) {
      fprintf(stderr, "bench_ragged_write: %s\n", err.msg);
      return 1;
    }
    if (t2 - t0 < best) best = t2 - t0, best_finish = t2 - t1;
  }
  /* the file's offsets against the sizes */
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), ds = H5Dopen2(f, "items/offsets", H5P_DEFAULT);
  uint64_t *off = malloc((size_t)(n + 1) * sizeof *off);
  int bad = ds < 0 || !off || H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off) < 0;
  for (int64_t k = 0; !bad && k < n; k++) bad = off[k + 1] - off[k] != (uint64_t)item_size(k);
  if (ds >= 0) H5Dclose(ds);
  if (f >= 0) H5Fclose(f);
  printf("%.4f %.4f %lld %s\n", best, best_finish, (long long)total, bad ? "offsets-differ" : "offsets-ok");
  return bad;
}
