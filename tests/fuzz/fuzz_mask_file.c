/* Fuzz target for detector mask files as mask_correct and detector_mask
 * read them (nodes/common/mask_file.c): a PNG through libpng with our
 * checks around it, or a .npy through npy.c. Input: one byte choosing the
 * format (even: PNG, odd: .npy), two bytes giving the detector's rows and
 * columns (1..256 each), then the file's bytes, written to a temporary
 * file and read with sl_mask_file_read. Every outcome must be a mask of
 * 0/1 values or an error, never a crash, a leak or a read outside what was
 * allocated. The corpus holds PNGs written by Pillow (8-bit, 16-bit,
 * 1-bit gray; gray with alpha, palette and RGB, which are refused) and .npy
 * files (u8, f8, bool), each with the shape that matches it, and one with
 * rows and columns swapped. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nodes/common/mask_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  const bool png = (data[0] & 1) == 0;
  const int64_t h = data[1] + 1, w = data[2] + 1;
  char path[128];
  snprintf(path, sizeof path, "/tmp/sluice-fuzz-mask-%d.%s", (int)getpid(), png ? "png" : "npy");
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  const size_t wrote = fwrite(data + 3, 1, size - 3, f);
  fclose(f);
  if (wrote == size - 3) {
    sl_error err;
    sl_error_clear(&err);
    uint8_t *mask = NULL;
    if (sl_mask_file_read(path, h, w, &mask, &err) == SL_OK && mask) {
      unsigned bad = 0;
      for (int64_t i = 0; i < h * w; i++) bad |= mask[i] & ~1u;
      if (bad) abort(); /* a mask holds 0 or 1 */
      free(mask);
    }
  }
  unlink(path);
  return 0;
}
