/* Small pinned host blocks of the CUDA backend (see cuda_internal.h).
 *
 * Every cudaHostAlloc pins and maps its pages and every cudaFreeHost
 * unpins them, tens of microseconds each on the H200's host; a run on the
 * device stages each host node's small inputs and outputs (a writer's image,
 * the preview's pattern, the disk) in pinned memory of its own, so a small
 * run paid that a buffer: the test set's stem_products took 0.9-1.0 ms to
 * finish (its stages freed) on top of its 12-15 ms. Blocks of at most
 * SL_CUDA_SLAB_MAX bytes come instead from chunks the backend pins once and
 * keeps: a block is carved from the current chunk or reused from the free
 * list of its size class (powers of two from 64 bytes), and goes back to
 * that list when freed; the chunks are unpinned when the backend ends.
 * With every chunk in use a request is pinned on its own, as before. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/cuda/cuda_internal.h"

#define SLAB_CHUNK_BYTES ((size_t)256 << 10)

/* The size class of a block of `bytes`: class k holds 64 << k bytes. */
static int size_class(size_t bytes) {
  int k = 0;
  while (((size_t)SL_CUDA_SLAB_MIN << k) < bytes) k++;
  return k;
}

bool sl_cuda_slab_takes(size_t bytes) { return bytes > 0 && bytes <= SL_CUDA_SLAB_MAX; }

void sl_cuda_slab_init(sl_cuda_slab *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
}

cudaError_t sl_cuda_slab_alloc(sl_cuda_slab *s, size_t bytes, void **ptr) {
  const int k = size_class(bytes);
  const size_t block = (size_t)SL_CUDA_SLAB_MIN << k;
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&s->mu);
  void *p = s->free[k];
  if (p) {
    memcpy(&s->free[k], p, sizeof(void *)); /* the list's next, kept in the block */
  } else {
    if (s->left < block) { /* a new chunk; the old one's rest stays unused */
      void *mem = NULL;
      e = s->n_chunks < SL_CUDA_SLAB_CHUNKS ? cudaHostAlloc(&mem, SLAB_CHUNK_BYTES, cudaHostAllocPortable)
                                            : cudaErrorMemoryAllocation;
      if (e != cudaSuccess) (void)cudaGetLastError(); /* the caller pins the block on its own */
      if (e == cudaSuccess) {
        s->chunks[s->n_chunks++] = mem;
        s->cur = mem;
        s->left = SLAB_CHUNK_BYTES;
      }
    }
    if (e == cudaSuccess) {
      p = s->cur;
      s->cur += block;
      s->left -= block;
    }
  }
  pthread_mutex_unlock(&s->mu);
  *ptr = p;
  return e;
}

bool sl_cuda_slab_owns(sl_cuda_slab *s, const void *ptr) {
  const char *q = ptr;
  pthread_mutex_lock(&s->mu);
  bool in = false;
  for (int i = 0; i < s->n_chunks && !in; i++)
    in = q >= (const char *)s->chunks[i] && q < (const char *)s->chunks[i] + SLAB_CHUNK_BYTES;
  pthread_mutex_unlock(&s->mu);
  return in;
}

void sl_cuda_slab_free(sl_cuda_slab *s, void *ptr, size_t bytes) {
  const int k = size_class(bytes);
  pthread_mutex_lock(&s->mu);
  memcpy(ptr, &s->free[k], sizeof(void *));
  s->free[k] = ptr;
  pthread_mutex_unlock(&s->mu);
}

void sl_cuda_slab_destroy(sl_cuda_slab *s) {
  for (int i = 0; i < s->n_chunks; i++) (void)cudaFreeHost(s->chunks[i]);
  pthread_mutex_destroy(&s->mu);
  memset(s, 0, sizeof *s);
}
