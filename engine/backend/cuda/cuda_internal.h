/* Internals of the CUDA backend shared by its files (cuda_backend.c: device,
 * memory, transfers; cuda_batch.c: batches, errors, the launchers'
 * services; cuda_async.c: events and asynchronous copies; batch_marker.cu:
 * the batch marker kernel). Not for use outside engine/backend/cuda. */
#ifndef SL_CUDA_BACKEND_INTERNAL_H
#define SL_CUDA_BACKEND_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/backend/backend.h"

/* Batches in flight at most (the host runs at most this far ahead). */
#define SL_CUDA_RING 64

/* The device time of one launcher's kernels: events before and after it on
 * the stream, added to *target once its batch completed. */
typedef struct cuda_timing {
  cudaEvent_t start, end;
  double *target;
} cuda_timing;

typedef struct cuda_impl {
  int device;
  int compute_capability; /* major * 10 + minor */
  size_t smem_per_block;  /* opt-in maximum */
  sl_device_env env;      /* what launchers get in a->dev */
  cudaStream_t stream; /* SL_QUEUE_COMPUTE */
  bool have_stream;
  /* A second non-blocking stream for copies that overlap the kernels of
   * `stream` (SL_QUEUE_COPY: hdf5_source's uploader), ordered by events. */
  cudaStream_t copy_stream;
  bool have_copy_stream;
  sl_backend *cpu; /* host threads for host nodes' kernels */
  /* batch */
  bool in_batch;
  sl_code batch_status;
  int64_t batch_chunk;
  const char **batch_nodes; /* ids of the encoded nodes (the graph owns them) */
  int n_batch, cap_batch;
  /* Batches run asynchronously (wait does not block). Each committed batch
   * gets a number and a record in a ring, and the stream then writes that
   * number into host-mapped memory (a 1-element fill): after a device fault
   * the last number written names the last batch that completed, so the
   * fault is in the next one. An event per ring entry bounds how far the
   * host runs ahead (a record is reused only after its batch completed). */
  uint32_t *mark_host;  /* host-mapped; the stream writes batch numbers */
  void *mark_dev;
  uint32_t committed;   /* batches committed so far (numbers 1..committed) */
  uint32_t completed;   /* batches known complete */
  cudaEvent_t ring_event[SL_CUDA_RING];
  bool have_ring_event[SL_CUDA_RING];
  char ring_nodes[SL_CUDA_RING][192];
  int ring_n_nodes[SL_CUDA_RING];
  int64_t ring_chunk[SL_CUDA_RING];
  bool sync_each; /* SLUICE_CUDA_SYNC=1: wait for every batch (debugging) */
  /* pinned_memory=huge: pinned allocations of 2 MiB or more are huge-page
   * mappings registered with cudaHostRegister (cuda_backend.c's
   * huge_pinned_size: host_free tells them by their size). */
  bool pin_huge;
  /* Per ring entry: the timed launchers of that batch (events made on first
   * use and kept). */
  cuda_timing *ring_t[SL_CUDA_RING];
  int ring_nt[SL_CUDA_RING], ring_capt[SL_CUDA_RING];
  /* what this backend holds now */
  int64_t device_allocs, pinned_allocs;
  uint64_t device_bytes, pinned_bytes;
} cuda_impl;

/* Fills err from a CUDA error and clears the runtime's last-error state, so
 * that a later launch check does not report an old, unrelated error. */
sl_code sl_cuda_backend_fail(sl_error *err, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* sl_cuda_backend_fail for an operation on `bytes`: the message is `before`,
 * the size ("1.5 MiB (1572864 bytes)"), then `after`. */
sl_code sl_cuda_backend_fail_sized(sl_error *err, cudaError_t e, const char *before, size_t bytes,
                                   const char *after);

/* cuda_batch.c */
sl_code sl_cuda_backend_batch_begin(sl_backend *b, sl_error *err);
sl_code sl_cuda_backend_batch_encode(sl_backend *b, sl_kernel_fn fn, sl_kernel_args *a, sl_error *err);
sl_code sl_cuda_backend_batch_commit(sl_backend *b, sl_error *err);
sl_code sl_cuda_backend_batch_wait(sl_backend *b, sl_error *err);
sl_code sl_cuda_backend_sync(sl_backend *b, sl_error *err);
/* Batches up to `upto` are known complete: their launchers' device times go
 * to their targets. */
void sl_cuda_backend_harvest(cuda_impl *c, uint32_t upto);
/* Some committed batch (or the open one) has not completed. */
bool sl_cuda_backend_fault_pending(const cuda_impl *c);
/* An asynchronous device error, named after the batch it happened in. */
sl_code sl_cuda_backend_device_error(cuda_impl *c, cudaError_t e, sl_error *err);
/* The services of sl_device_env (sync, check_launch). */
sl_code sl_cuda_backend_env_sync(sl_kernel_args *a);
sl_code sl_cuda_backend_env_check_launch(sl_kernel_args *a, const char *kernel);

/* cuda_async.c */
const sl_device_env *sl_cuda_backend_device_env(sl_backend *b);
sl_code sl_cuda_backend_bind_thread(sl_backend *b, sl_error *err);
sl_code sl_cuda_backend_event_create(sl_backend *b, sl_event **ev, sl_error *err);
void sl_cuda_backend_event_destroy(sl_backend *b, sl_event *ev);
sl_code sl_cuda_backend_event_record(sl_backend *b, sl_event *ev, sl_queue q, sl_error *err);
sl_code sl_cuda_backend_queue_wait_event(sl_backend *b, sl_queue q, sl_event *ev, sl_error *err);
sl_code sl_cuda_backend_event_wait(sl_backend *b, sl_event *ev, sl_error *err);
sl_code sl_cuda_backend_copy_async(sl_backend *b, sl_queue q, void *dst, const void *src, size_t bytes,
                                   sl_error *err);

/* batch_marker.cu: enqueues *dst = value (u32, host-mapped memory) on
 * stream; returns the launch's cudaError_t as an int. */
int sl_cuda_batch_marker_write(void *stream, void *dst, uint32_t value);
/* The marker kernel, for the start-up check that kernel code runs here. */
const sl_device_kernel *sl_cuda_batch_marker_kernel(void);

/* combine.cu: declared reductions' identity fill (MIN/MAX) and element-wise
 * merge on stream; return the launch's cudaError_t as an int. */
int sl_cuda_combine_identity(void *stream, int c, int dtype, void *dst, int64_t n);
int sl_cuda_combine_merge(void *stream, int c, int dtype, void *acc, const void *partial, int64_t n);

/* Device initialisation on a helper thread, overlapping the host's planning
 * (cuda_warm_up.c): begin starts it once per process; context_wait joins it
 * (create calls it first). */
void sl_cuda_warm_up_begin(void);
void sl_cuda_warm_up_context_wait(void);
/* The kernels of these node types (sl_device_kernel.nodes) loaded on a
 * second helper once the context is made. */
void sl_cuda_warm_up_nodes(const char *const *types, int n);
/* Joins both helpers (sl_run_pipeline before it returns). */
void sl_cuda_warm_up_wait(void);

#endif
