/* hdf5_source on CUDA. See hdf5_source_cuda.h.
 *
 * The windows (source_window.c) are allocated with the backend's host_alloc
 * (pinned), so the reader's preads land in memory the copy engine reads
 * directly. A call packs the header and entries in front of the window's
 * bytes (the CPU kernel's output layout, from the same code) and enqueues one
 * cudaMemcpyAsync of header + entries + bytes into the output slot (plain
 * frames: one per contiguous run), then records an event for that window.
 * Before the reader may write a window again (the read-ahead into it, or
 * freeing it), the window's event is waited for (cudaEventSynchronize), so a
 * copy still in flight never sees new bytes. The executor synchronises the
 * stream at the end of each level today, so the wait returns at once; the
 * events keep this correct without relying on that. */
#include "hdf5_source_cuda.h"

#ifdef SLUICE_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../engine/backend/backend.h"
#include "../../engine/core/util.h"
#include "../../engine/graph/graph.h"
#include "shaders/cuda/sl_cuda.h"
#include "source_window.h"

typedef struct src_cuda {
  sl_backend *backend; /* allocated the windows; frees them */
  cudaEvent_t done[2]; /* recorded after the copies out of window w */
  bool have_event[2];
  bool in_flight[2]; /* copies out of window w were enqueued and not waited for */
} src_cuda;

static sl_code cuda_error(sl_error *err, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return sl_fail(err, e == cudaErrorMemoryAllocation ? SL_ERR_NOMEM : SL_ERR_BACKEND, "hdf5_source: %s: %s (%s)",
                 what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static sl_code win_alloc(void *ctx, size_t bytes, void **ptr, sl_error *err) {
  src_cuda *c = ctx;
  return c->backend->ops->host_alloc(c->backend, bytes, ptr, err);
}

static void win_free(void *ctx, void *ptr, size_t bytes) {
  src_cuda *c = ctx;
  c->backend->ops->host_free(c->backend, ptr, bytes);
}

/* Window w is about to be overwritten: its copies must be over. */
static sl_code win_reuse(void *ctx, int w, sl_error *err) {
  src_cuda *c = ctx;
  if (!c->in_flight[w]) return SL_OK;
  c->in_flight[w] = false;
  cudaError_t e = cudaEventSynchronize(c->done[w]);
  return e == cudaSuccess ? SL_OK : cuda_error(err, e, "waiting for the copies out of a read-ahead window");
}

static void dev_free(sl_src_state *s) {
  src_cuda *c = s->dev;
  if (!c) return;
  for (int w = 0; w < 2; w++) {
    if (!c->have_event[w]) continue;
    if (c->in_flight[w]) (void)cudaEventSynchronize(c->done[w]);
    (void)cudaEventDestroy(c->done[w]);
  }
  (void)cudaGetLastError();
  free(c);
  s->dev = NULL;
  s->dev_free = NULL;
}

/* The CUDA part of the state, made on the first call (the backend is known
 * only then); the windows are allocated through it. */
static sl_code setup(sl_src_state *s, sl_backend *b, sl_error *err) {
  if (s->dev) {
    src_cuda *c = s->dev;
    if (c->backend == b) return SL_OK;
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: the node's state belongs to another backend");
  }
  if (s->win.base[0] || s->win.reader)
    return sl_fail(err, SL_ERR_INTERNAL, "hdf5_source: the windows were made for another backend");
  src_cuda *c = sl_xcalloc(1, sizeof *c);
  c->backend = b;
  s->dev = c;
  s->dev_free = dev_free;
  for (int w = 0; w < 2; w++) {
    cudaError_t e = cudaEventCreateWithFlags(&c->done[w], cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_error(err, e, "cannot create an event");
    c->have_event[w] = true;
  }
  s->win.al = (sl_src_alloc){.alloc = win_alloc, .free = win_free, .reuse = win_reuse, .ctx = c};
  return SL_OK;
}

typedef struct copy_ctx {
  uint8_t *dst;
  cudaStream_t stream;
} copy_ctx;

static sl_code copy_up(void *ctx, uint64_t dst_offset, const uint8_t *src, uint64_t bytes, sl_error *err) {
  copy_ctx *k = ctx;
  cudaError_t e = cudaMemcpyAsync(k->dst + dst_offset, src, (size_t)bytes, cudaMemcpyHostToDevice, k->stream);
  return e == cudaSuccess ? SL_OK : cuda_error(err, e, "cannot copy a window to the device");
}

sl_code sl_hdf5_source_cuda(sl_kernel_args *a) {
  sl_src_state *s = a->state;
  const sl_tensor_desc *d = &a->node->out[0];
  sl_code rc = setup(s, a->backend, a->err);
  if (rc != SL_OK) return rc;
  src_cuda *c = s->dev;
  sl_src_window win;
  rc = sl_src_windows_get(&s->win, a->pos_start, a->pos_count, sl_desc_positions(d), &win, a->err);
  if (rc != SL_OK) return rc;
  copy_ctx k = {.dst = a->out[0], .stream = (cudaStream_t)sl_cuda_stream(a->backend)};
  if (d->encoding == SL_ENC_NONE) {
    rc = sl_src_plain(&win, s->ix, s->where, a->pos_start, a->pos_count, sl_desc_item_bytes(d), copy_up, &k,
                      a->err);
  } else {
    const uint8_t *packed;
    uint64_t bytes;
    rc = sl_src_pack(&win, s->ix, s->where, (uint64_t)sl_desc_buffer_bytes(d, a->pos_count), &packed, &bytes,
                     a->err);
    if (rc == SL_OK) rc = copy_up(&k, 0, packed, bytes, a->err);
  }
  /* Even after a failed copy: earlier ones of this call may be in flight. */
  cudaError_t e = cudaEventRecord(c->done[win.buffer], k.stream);
  if (e == cudaSuccess)
    c->in_flight[win.buffer] = true;
  else if (rc == SL_OK)
    rc = cuda_error(a->err, e, "cannot record an event");
  return rc;
}

#endif
