/* Fuzz target for the packed layout as its readers take it: sl_packed_check
 * (every consumer of variable-size items checks a call's buffer with it)
 * and results.h5's ragged writer (sl_h5_writer_ragged), which then trusts
 * the entries' offsets and checks their positions. Input: 12 bytes of the
 * call (start, count and the stream's positions, little-endian u32 each,
 * the positions at most 2^16), then the call's packed buffer. The buffer
 * is handed to the writer twice, as two calls (the second one's positions
 * follow the first's), so that items sent again and items that overlap are
 * reached; every outcome must be SL_OK or an error, never a read outside
 * the buffer. The corpus holds calls written by hand (struct.pack): items
 * in order with an empty one, a block sent again, an overlap, an entry past
 * the buffer, a truncated header, an item outside the stream. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/exec/sinks.h"

static uint32_t u32_at(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 12) return 0;
  const int64_t start = u32_at(data) % 65536, count = u32_at(data + 4) % 65536 + 1;
  const int64_t total = u32_at(data + 8) % 65536 + 1;
  /* the buffer aligned, as a node's output buffer is */
  const size_t n = size - 12;
  uint8_t *buf = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
  if (!buf) return 0;
  memcpy(buf, data + 12, n);
  sl_error err;
  sl_error_clear(&err);
  if (sl_packed_check(buf, (int64_t)n, &err) != SL_OK) {
    free(buf);
    return 0;
  }
  static bool inited;
  if (!inited) sl_h5_writer_process_init(), inited = true;
  char path[128];
  snprintf(path, sizeof path, "/tmp/sluice-fuzz-packed-%d.h5", (int)getpid());
  int64_t dims[2] = {total, 64};
  sl_tensor_desc d = sl_desc_make(SL_U8, 2, dims, 1);
  d.variable = true;
  sl_h5_writer *w = NULL;
  sl_code rc = sl_h5_writer_open(path, NULL, 0, &w, &err);
  if (rc == SL_OK) {
    rc = sl_h5_writer_ragged(w, "x", &d, 0, start, count, buf, (int64_t)n, &err);
    if (rc == SL_OK) rc = sl_h5_writer_ragged(w, "x", &d, 1, start + count, count, buf, (int64_t)n, &err);
    sl_output_data o = {.name = "x", .node_id = "fuzz", .port = "bytes", .scan_axes = 1, .desc = d};
    if (rc == SL_OK) (void)sl_h5_writer_finish(w, &o, 1, &err);
    else sl_h5_writer_abandon(w);
  }
  unlink(path);
  free(buf);
  return 0;
}
