/* Batches of the CUDA backend: a batch is one level of one chunk. Encoding
 * runs the node's launcher at once (with a->dev set to the backend's
 * sl_device_env): it enqueues kernels on the stream and returns without
 * waiting. Commit has nothing left to do; wait ends the batch without
 * waiting for it (a ring of batch records, a marker the stream writes after
 * each batch), and the first error is reported with the batch's nodes and
 * chunk (an asynchronous error cannot be pinned on one kernel, so it names
 * them all). Also the launchers' services: sync and the launch check. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/core/util.h"

/* Batches (completed, upto] are known complete: their launchers' device
 * times go to their targets. */
void sl_cuda_backend_harvest(cuda_impl *c, uint32_t upto) {
  for (uint32_t seq = c->completed + 1; seq <= upto && seq != 0; seq++) {
    int k = (int)(seq % SL_CUDA_RING);
    for (int t = 0; t < c->ring_nt[k]; t++) {
      float ms = 0;
      if (c->ring_t[k][t].target &&
          cudaEventElapsedTime(&ms, c->ring_t[k][t].start, c->ring_t[k][t].end) == cudaSuccess)
        *c->ring_t[k][t].target += ms * 1e-3;
    }
    c->ring_nt[k] = 0;
  }
  (void)cudaGetLastError();
  if (upto > c->completed) c->completed = upto;
}

sl_code sl_cuda_backend_batch_begin(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  if (c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cuda backend: batch already open");
  /* The batch's ring entry is free once batch seq - RING completed: the
   * host runs at most SL_CUDA_RING batches ahead. */
  const uint32_t seq = c->committed + 1;
  if (seq > SL_CUDA_RING && c->completed < seq - SL_CUDA_RING) {
    cudaError_t e = cudaEventSynchronize(c->ring_event[seq % SL_CUDA_RING]);
    if (e != cudaSuccess) return sl_cuda_backend_device_error(c, e, err);
    sl_cuda_backend_harvest(c, seq - SL_CUDA_RING);
  }
  c->ring_nt[seq % SL_CUDA_RING] = 0;
  c->in_batch = true;
  c->n_batch = 0;
  c->batch_chunk = -1;
  c->batch_status = SL_OK;
  return SL_OK;
}

/* A timing record of the open batch's ring entry (events made on first use
 * and kept), or NULL when events or the record cannot be made (no times;
 * not an error). */
static cuda_timing *timing_slot(cuda_impl *c) {
  const int k = (int)((c->committed + 1) % SL_CUDA_RING);
  if (c->ring_nt[k] == c->ring_capt[k]) {
    int cap = c->ring_capt[k] ? 2 * c->ring_capt[k] : 4;
    if (!sl_resize(&c->ring_t[k], (size_t)cap, sizeof *c->ring_t[k])) return NULL;
    for (int t = c->ring_capt[k]; t < cap; t++) {
      cuda_timing *x = &c->ring_t[k][t];
      x->target = NULL;
      if (cudaEventCreate(&x->start) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
      }
      if (cudaEventCreate(&x->end) != cudaSuccess) {
        (void)cudaEventDestroy(x->start);
        (void)cudaGetLastError();
        return NULL;
      }
      c->ring_capt[k] = t + 1;
    }
  }
  cuda_timing *x = &c->ring_t[k][c->ring_nt[k]++];
  x->target = NULL;
  return x;
}

/* Runs the launcher now: it enqueues its kernels on the stream and returns. */
sl_code sl_cuda_backend_batch_encode(sl_backend *b, sl_kernel_fn fn, sl_kernel_args *a, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cuda backend: encode outside a batch");
  if (c->batch_status != SL_OK) return c->batch_status;
  if (c->n_batch == c->cap_batch) {
    int cap = c->cap_batch ? 2 * c->cap_batch : 16;
    if (!sl_resize(&c->batch_nodes, (size_t)cap, sizeof *c->batch_nodes))
      return sl_fail_nomem(err, "the cuda backend's batch");
    c->cap_batch = cap;
  }
  c->batch_nodes[c->n_batch++] = a->node_id ? a->node_id : "?";
  if (c->batch_chunk < 0) c->batch_chunk = a->chunk;
  a->dev = &c->env;
  cuda_timing *t = a->device_seconds ? timing_slot(c) : NULL;
  bool timed = t && cudaEventRecord(t->start, c->stream) == cudaSuccess;
  sl_code rc = fn(a);
  timed = timed && cudaEventRecord(t->end, c->stream) == cudaSuccess;
  if (t) t->target = timed ? a->device_seconds : NULL;
  if (t && !timed) (void)cudaGetLastError(); /* no time; the launch reported its own errors */
  if (rc != SL_OK) {
    if (a->err && a->err != err) *err = *a->err;
    if (err->code == SL_OK) sl_fail(err, rc, "cuda backend: launcher failed");
    if (a->node_id) sl_error_node(err, a->node_id);
    sl_error_chunk(err, a->chunk);
    c->batch_status = rc;
  }
  return rc;
}

sl_code sl_cuda_backend_batch_commit(sl_backend *b, sl_error *err) {
  (void)b;
  (void)err;
  return SL_OK; /* launches were enqueued at encode; the stream runs them in order */
}

/* The ids of a batch's nodes, comma-separated and cut with "..." to fit. */
static void join_nodes(const char *const *ids, int n, char *out, size_t cap) {
  size_t used = 0;
  out[0] = 0;
  for (int i = 0; i < n && used + 1 < cap; i++) {
    int w = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", ids[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used + 1 >= cap) memcpy(out + cap - 5, "...", 4);
}

/* Whether some committed batch (or the open one) has not completed: the
 * stream's marker is behind. */
bool sl_cuda_backend_fault_pending(const cuda_impl *c) {
  uint32_t done = *(volatile const uint32_t *)c->mark_host;
  return done != c->committed || c->in_batch;
}

/* An asynchronous device error: names the batch it happened in, the first
 * one whose marker the stream did not write. */
sl_code sl_cuda_backend_device_error(cuda_impl *c, cudaError_t e, sl_error *err) {
  (void)cudaGetLastError();
  uint32_t done = *(volatile const uint32_t *)c->mark_host;
  uint32_t bad = done + 1;
  char nodes[192];
  int n_nodes = 0;
  int64_t chunk = -1;
  bool known = false;
  if (bad <= c->committed && c->committed - bad < SL_CUDA_RING) {
    int k = (int)(bad % SL_CUDA_RING);
    memcpy(nodes, c->ring_nodes[k], sizeof nodes);
    n_nodes = c->ring_n_nodes[k];
    chunk = c->ring_chunk[k];
    known = true;
  } else if (bad == c->committed + 1 && c->in_batch) { /* the open batch, when a launcher syncs */
    join_nodes(c->batch_nodes, c->n_batch, nodes, sizeof nodes);
    n_nodes = c->n_batch;
    chunk = c->batch_chunk;
    known = true;
  }
  if (!known || n_nodes == 0)
    sl_fail(err, SL_ERR_BACKEND, "cuda backend: device error after batch %u of %u: %s (%s)", done,
            c->committed, cudaGetErrorString(e), cudaGetErrorName(e));
  else
    sl_fail(err, SL_ERR_BACKEND, "cuda backend: device error in the batch of node%s %s (chunk %lld): %s (%s)",
            n_nodes == 1 ? "" : "s", nodes, (long long)chunk, cudaGetErrorString(e), cudaGetErrorName(e));
  if (known && n_nodes == 1) sl_error_node(err, nodes);
  if (known && chunk >= 0) sl_error_chunk(err, chunk);
  c->batch_status = SL_ERR_BACKEND;
  for (int k = 0; k < SL_CUDA_RING; k++) c->ring_nt[k] = 0; /* no times after a fault */
  return SL_ERR_BACKEND;
}

sl_code sl_cuda_backend_sync(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  cudaError_t e = cudaStreamSynchronize(c->stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return sl_cuda_backend_device_error(c, e, err);
  sl_cuda_backend_harvest(c, c->committed);
  return SL_OK;
}

/* Ends the batch without waiting for it: the stream writes its number to the
 * marker after its kernels; an error already visible is reported now, one
 * found later by the sync (or wait, or download) that sees it. */
sl_code sl_cuda_backend_batch_wait(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  if (c->batch_status != SL_OK) {
    /* A launch failed (reported at encode): drain the stream so that the
     * batch's buffers are idle before they go back to the pool. */
    c->in_batch = false;
    (void)cudaStreamSynchronize(c->stream);
    (void)cudaGetLastError();
    return c->batch_status;
  }
  uint32_t seq = c->committed + 1;
  int k = (int)(seq % SL_CUDA_RING);
  join_nodes(c->batch_nodes, c->n_batch, c->ring_nodes[k], sizeof c->ring_nodes[k]);
  c->ring_n_nodes[k] = c->n_batch;
  c->ring_chunk[k] = c->batch_chunk;
  cudaError_t e = (cudaError_t)sl_cuda_batch_marker_write(c->stream, c->mark_dev, seq);
  if (e == cudaSuccess) e = cudaEventRecord(c->ring_event[k], c->stream);
  c->committed = seq;
  c->in_batch = false;
  if (e != cudaSuccess) return sl_cuda_backend_device_error(c, e, err);
  if (c->sync_each) return sl_cuda_backend_sync(b, err);
  /* A fault that already happened is reported here, without waiting. */
  e = cudaStreamQuery(c->stream);
  if (e != cudaSuccess && e != cudaErrorNotReady) return sl_cuda_backend_device_error(c, e, err);
  (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
  return SL_OK;
}

/* ---- the launchers' services (sl_device_env) ---- */

/* Waits for everything enqueued; errors go to a->err. */
sl_code sl_cuda_backend_env_sync(sl_kernel_args *a) {
  sl_error local;
  sl_error_clear(&local);
  sl_error *err = a->err ? a->err : &local;
  return sl_cuda_backend_sync(a->backend, err);
}

/* Errors that poison the context: a kernel faulted earlier (asynchronously),
 * and every later call returns it. Others (a bad launch configuration, no
 * code for the device) belong to the call that got them. */
static bool sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorLaunchFailure: case cudaErrorIllegalAddress: case cudaErrorAssert:
    case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout: case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

/* After a launch: the launch error (cudaGetLastError), named after the
 * kernel, node and chunk, or an earlier batch's fault surfacing here. */
sl_code sl_cuda_backend_env_check_launch(sl_kernel_args *a, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return SL_OK;
  sl_error local;
  sl_error_clear(&local);
  sl_error *err = a && a->err ? a->err : &local;
  /* A fault of an earlier batch surfacing at this launch: name that batch. */
  if (sticky(e) && a && a->backend && a->backend->ops->kind == SL_BACKEND_CUDA)
    return sl_cuda_backend_device_error(a->backend->impl, e, err);
  sl_fail(err, SL_ERR_BACKEND, "cuda backend: launch of kernel '%s' failed: %s (%s)",
          kernel ? kernel : "?", cudaGetErrorString(e), cudaGetErrorName(e));
  if (a && a->node_id) sl_error_node(err, a->node_id);
  if (a) sl_error_chunk(err, a->chunk);
  return SL_ERR_BACKEND;
}
