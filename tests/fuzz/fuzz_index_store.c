/* Fuzz target for the chunk-index store's reader (nodes/hdf5/h5_index_store.c):
 * any bytes, given the checksum the reader checks first (appended here, so
 * that the fields behind it are reached) and files that always "match";
 * the reader must return an index or NULL, never read out of bounds. The
 * corpus holds entries written by the store for a small acquisition. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "nodes/hdf5/h5_index_store.h"

static bool any_file(const char *path, const void *identity, size_t n) {
  (void)path, (void)identity, (void)n;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *bytes = malloc(size + 8);
  if (!bytes) return 0;
  memcpy(bytes, data, size);
  uint64_t h = sl_checksum64(data, size); /* as the store sums its entries */
  memcpy(bytes + size, &h, 8);
  /* the corpus entries were written in /fuzz for master /fuzz/m_master.h5 */
  sl_h5_index *ix = sl_h5_index_store_parse(bytes, size + 8, "/fuzz", "/fuzz/m_master.h5", "", any_file);
  if (ix) {
    uint64_t touch = 0;
    for (int i = 0; i < ix->n_chunks; i++) touch += ix->chunks[i].size;
    for (int i = 0; i < ix->n_files; i++) touch += strlen(ix->files[i]);
    (void)touch;
    sl_h5_index_free(ix);
  }
  free(bytes);
  return 0;
}
