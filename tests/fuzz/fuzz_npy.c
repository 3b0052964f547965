/* Fuzz target for the .npy mask reader (nodes/stem/npy.c): any bytes, read as
 * an 8 x 8 mask; must fail cleanly or succeed, never read out of bounds. The
 * reader takes a path, so the input goes through a temporary file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nodes/common/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[] = "/tmp/sluice-fuzz-npy-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(path);
    return 0;
  }
  fwrite(data, 1, size, f);
  fclose(f);
  uint8_t *mask = NULL;
  sl_error err;
  sl_error_clear(&err);
  if (sl_npy_read_mask(path, 8, 8, &mask, &err) == SL_OK) {
    unsigned sum = 0;
    for (int i = 0; i < 64; i++) sum += mask[i]; /* touch every byte */
    (void)sum;
    free(mask);
  }
  unlink(path);
  return 0;
}
