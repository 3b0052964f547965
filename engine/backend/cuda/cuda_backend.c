/* The CUDA backend: plain C on the CUDA runtime API.
 *
 * One device (0, or SLUICE_CUDA_DEVICE), one non-blocking stream for kernels
 * and transfers, plus a second non-blocking stream for host-to-device copies
 * that overlap them (sl_cuda_copy_stream; users order it with events). Buffers are
 * device memory (cudaMalloc); host staging for host nodes is pinned
 * (cudaMallocHost). Kernels were compiled at build time (shaders/cuda, .cu)
 * and are checked at create: each must have code for this device and the ABI
 * this engine expects, or the backend refuses to start, before any work.
 *
 * A batch is one level of one chunk. Encoding runs the node's launcher at
 * once: it enqueues kernels on the stream and returns without waiting. Commit
 * has nothing left to do; wait synchronises the stream and reports the first
 * error with the batch's nodes and chunk (an asynchronous error cannot be
 * pinned on one kernel, so it names them all). Host nodes' CPU kernels run on
 * an internal CPU backend's threads (parallel_for, workers).
 *
 * Capabilities come from device attributes, never from the device's name. */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/backend/backend.h"
#include "shaders/cuda/sl_cuda.h"

/* The kernel ABI this engine was written against; every registered kernel
 * must carry it, and so must the kernels' header (SL_KERNEL_ABI_VERSION). */
#define SL_ENGINE_KERNEL_ABI 1

enum { MIN_COMPUTE_CAPABILITY = 80 };
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
  cudaStream_t stream;
  bool have_stream;
  /* A second non-blocking stream for host-to-device copies that overlap the
   * kernels of `stream` (hdf5_source's uploader; sl_cuda_copy_stream). */
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
static sl_code cuda_fail(sl_error *err, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sl_code cuda_fail(sl_error *err, cudaError_t e, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)cudaGetLastError();
  sl_code code = e == cudaErrorMemoryAllocation ? SL_ERR_NOMEM : SL_ERR_BACKEND;
  return sl_fail(err, code, "cuda backend: %s: %s (%s)", what, cudaGetErrorString(e),
                 cudaGetErrorName(e));
}

#define NEEDS "the cuda backend needs an NVIDIA GPU of compute capability 8.0 or newer"

/* The device this process uses: 0, or SLUICE_CUDA_DEVICE. */
static sl_code select_device(int *device, sl_error *err) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return sl_fail(err, SL_ERR_BACKEND, "no CUDA device: %s%s; %s", cudaGetErrorString(e),
                   e == cudaErrorInsufficientDriver
                       ? " (no NVIDIA driver is loaded, or it is older than this CUDA runtime)"
                       : "",
                   NEEDS);
  }
  if (count <= 0)
    return sl_fail(err, SL_ERR_BACKEND, "no CUDA device: %s; %s", cudaGetErrorString(cudaErrorNoDevice),
                   NEEDS);
  int d = 0;
  const char *env = getenv("SLUICE_CUDA_DEVICE");
  if (env && *env) {
    int64_t v;
    if (!sl_parse_i64(env, &v) || v < 0 || v >= count)
      return sl_fail(err, SL_ERR_BACKEND,
                     "SLUICE_CUDA_DEVICE=%s: expected a device index from 0 to %d (%d device%s found)",
                     env, count - 1, count, count == 1 ? "" : "s");
    d = (int)v;
  }
  *device = d;
  return SL_OK;
}

static int attribute(enum cudaDeviceAttr a, int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, a, device) != cudaSuccess) {
    (void)cudaGetLastError();
    v = 0;
  }
  return v;
}

/* Capabilities of `device` from its attributes. Makes the device current and
 * asks for its free memory (which creates the primary context). */
static sl_code query_caps(int device, sl_backend_caps *caps, int *cc_out, size_t *smem_out,
                          sl_error *err) {
  memset(caps, 0, sizeof *caps);
  caps->kind = SL_BACKEND_CUDA;
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return cuda_fail(err, e, "cannot read the properties of device %d", device);
  int major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  int minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  int cc = major * 10 + minor;
  if (cc < MIN_COMPUTE_CAPABILITY)
    return sl_fail(err, SL_ERR_BACKEND,
                   "CUDA device %d (%.80s) has compute capability %d.%d; sluice needs 8.0 or newer "
                   "(its kernels are built for sm_80 and sm_90)",
                   device, prop.name, major, minor);
  if (attribute(cudaDevAttrComputeMode, device) == cudaComputeModeProhibited)
    return sl_fail(err, SL_ERR_BACKEND,
                   "CUDA device %d (%.80s) is in compute mode 'prohibited': no process may use it",
                   device, prop.name);
  int sms = attribute(cudaDevAttrMultiProcessorCount, device);
  int smem = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (smem <= 0) smem = attribute(cudaDevAttrMaxSharedMemoryPerBlock, device);
  int clock_khz = attribute(cudaDevAttrClockRate, device);
  int mem_clock_khz = attribute(cudaDevAttrMemoryClockRate, device);
  int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  if (sms <= 0) return sl_fail(err, SL_ERR_BACKEND, "CUDA device %d reports no multiprocessors", device);

  e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_fail(err, e, "cannot use device %d", device);
  size_t free_b = 0, total_b = 0;
  e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) return cuda_fail(err, e, "cannot read the memory of device %d", device);

  caps->compute_units = sms;
  caps->memory_bytes = free_b; /* what the planner budgets against */
  caps->device_memory = true;
  /* Sustained traffic: 80% of the peak of a double-data-rate bus; without the
   * attributes a conservative figure per generation. */
  if (mem_clock_khz > 0 && bus_bits > 0)
    caps->bytes_per_second = 0.8 * 2.0 * (double)mem_clock_khz * 1e3 * (double)bus_bits / 8.0;
  else
    caps->bytes_per_second = cc >= 90 ? 2e12 : 1e12;
  /* Simple 32-bit operations: 64 lanes per multiprocessor per clock. */
  caps->ops_per_second = (double)sms * 64.0 * (clock_khz > 0 ? (double)clock_khz * 1e3 : 1.4e9);
  snprintf(caps->device, sizeof caps->device, "%.64s, sm_%d%d, %d SMs, %.1f GiB", prop.name, major,
           minor, sms, (double)total_b / (1024.0 * 1024.0 * 1024.0));
  if (cc_out) *cc_out = cc;
  if (smem_out) *smem_out = smem > 0 ? (size_t)smem : 0;
  return SL_OK;
}

static sl_code cuda_probe(sl_backend_caps *caps, sl_error *err) {
  int device = 0;
  sl_code rc = select_device(&device, err);
  if (rc != SL_OK) {
    memset(caps, 0, sizeof *caps);
    caps->kind = SL_BACKEND_CUDA;
    return rc;
  }
  return query_caps(device, caps, NULL, NULL, err);
}

/* Every kernel of the binary must have code for this device and the ABI this
 * engine expects. */
static sl_code check_registry(const cuda_impl *c, sl_error *err) {
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  if (!k || n <= 0)
    return sl_fail(err, SL_ERR_BACKEND, "cuda backend: the kernel registry is empty (a build problem)");
  if (SL_KERNEL_ABI_VERSION != SL_ENGINE_KERNEL_ABI)
    return sl_fail(err, SL_ERR_BACKEND,
                   "cuda backend: the kernels were built for ABI %d but this engine expects ABI %d",
                   SL_KERNEL_ABI_VERSION, SL_ENGINE_KERNEL_ABI);
  for (int i = 0; i < n; i++) {
    const char *name = k[i].name ? k[i].name : "(unnamed)";
    if (k[i].abi != SL_KERNEL_ABI_VERSION || k[i].abi != SL_ENGINE_KERNEL_ABI)
      return sl_fail(err, SL_ERR_BACKEND,
                     "cuda backend: kernel '%s' was built for ABI %d but this engine expects ABI %d; "
                     "rebuild sluice",
                     name, k[i].abi, SL_ENGINE_KERNEL_ABI);
    if (!k[i].func)
      return sl_fail(err, SL_ERR_BACKEND, "cuda backend: kernel '%s' has no function in this binary", name);
    struct cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, k[i].func);
    if (e != cudaSuccess)
      return cuda_fail(err, e, "kernel '%s' has no code for this device (sm_%d; the binary holds sm_80, sm_90 "
                       "and PTX for compute_90)",
                       name, c->compute_capability);
  }
  return SL_OK;
}

static void cuda_destroy(sl_backend *b);

static sl_code cuda_create(int threads, sl_backend **out, sl_error *err) {
  *out = NULL;
  int device = 0;
  sl_code rc = select_device(&device, err);
  if (rc != SL_OK) return rc;
  sl_backend_caps caps;
  int cc = 0;
  size_t smem = 0;
  rc = query_caps(device, &caps, &cc, &smem, err);
  if (rc != SL_OK) return rc;
  sl_backend *b = sl_xcalloc(1, sizeof *b);
  cuda_impl *c = sl_xcalloc(1, sizeof *c);
  b->ops = &sl_cuda_backend_ops;
  b->impl = c;
  b->caps = caps;
  c->device = device;
  c->compute_capability = cc;
  c->smem_per_block = smem;
  c->batch_status = SL_OK;
  cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    rc = cuda_fail(err, e, "cannot create a stream on device %d", device);
  } else {
    c->have_stream = true;
    e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      rc = cuda_fail(err, e, "cannot create a copy stream on device %d", device);
    } else {
      c->have_copy_stream = true;
      rc = check_registry(c, err);
    }
  }
  if (rc == SL_OK) {
    e = cudaHostAlloc((void **)&c->mark_host, sizeof *c->mark_host, cudaHostAllocMapped);
    if (e == cudaSuccess) {
      *c->mark_host = 0;
      e = cudaHostGetDevicePointer(&c->mark_dev, c->mark_host, 0);
    }
    if (e != cudaSuccess) rc = cuda_fail(err, e, "cannot map the batch marker into device memory");
  }
  for (int k = 0; k < SL_CUDA_RING && rc == SL_OK; k++) {
    e = cudaEventCreateWithFlags(&c->ring_event[k], cudaEventDisableTiming);
    if (e != cudaSuccess) rc = cuda_fail(err, e, "cannot create an event");
    else c->have_ring_event[k] = true;
  }
  const char *sync_env = getenv("SLUICE_CUDA_SYNC");
  c->sync_each = sync_env && !strcmp(sync_env, "1");
  if (rc == SL_OK) rc = sl_cpu_backend_ops.create(threads, &c->cpu, err);
  if (rc != SL_OK) {
    cuda_destroy(b);
    return rc;
  }
  *out = b;
  return SL_OK;
}

/* Safe after any failure, a sticky device error included: every CUDA call's
 * result is ignored and host-side state is freed regardless. */
static void cuda_destroy(sl_backend *b) {
  if (!b) return;
  cuda_impl *c = b->impl;
  if (c) {
    if (c->have_stream) {
      (void)cudaStreamSynchronize(c->stream);
      (void)cudaStreamDestroy(c->stream);
    }
    if (c->have_copy_stream) {
      (void)cudaStreamSynchronize(c->copy_stream);
      (void)cudaStreamDestroy(c->copy_stream);
    }
    for (int k = 0; k < SL_CUDA_RING; k++) {
      if (c->have_ring_event[k]) (void)cudaEventDestroy(c->ring_event[k]);
      for (int t = 0; t < c->ring_capt[k]; t++) {
        (void)cudaEventDestroy(c->ring_t[k][t].start);
        (void)cudaEventDestroy(c->ring_t[k][t].end);
      }
      free(c->ring_t[k]);
    }
    if (c->mark_host) (void)cudaFreeHost(c->mark_host);
    (void)cudaGetLastError();
    if (c->cpu) c->cpu->ops->destroy(c->cpu);
    free(c->batch_nodes);
    free(c);
  }
  free(b);
}

static void format_size(size_t bytes, char *buf, size_t n) {
  char h[32];
  sl_format_bytes((uint64_t)bytes, h, sizeof h);
  snprintf(buf, n, "%s (%zu bytes)", h, bytes);
}

static sl_code cuda_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  cuda_impl *c = b->impl;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "cannot allocate %s of device memory", s);
  }
  __atomic_add_fetch(&c->device_allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&c->device_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
  *ptr = p;
  return SL_OK;
}

static void cuda_free(sl_backend *b, void *ptr, size_t bytes) {
  cuda_impl *c = b->impl;
  if (!ptr) return;
  /* cudaFree waits for the device; the pool returns a buffer only after the
   * batch that used it completed anyway. */
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
  __atomic_sub_fetch(&c->device_allocs, 1, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&c->device_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

static sl_code cuda_host_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  cuda_impl *c = b->impl;
  void *p = NULL;
  cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "cannot allocate %s of pinned host memory", s);
  }
  __atomic_add_fetch(&c->pinned_allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&c->pinned_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
  *ptr = p;
  return SL_OK;
}

static void cuda_host_free(sl_backend *b, void *ptr, size_t bytes) {
  cuda_impl *c = b->impl;
  if (!ptr) return;
  /* An upload from this buffer may still be in flight (on either stream). */
  if (c->have_stream) (void)cudaStreamSynchronize(c->stream);
  if (c->have_copy_stream) (void)cudaStreamSynchronize(c->copy_stream);
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
  __atomic_sub_fetch(&c->pinned_allocs, 1, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&c->pinned_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

/* Host to device; may stay asynchronous (pinned sources): the next wait or
 * download synchronises. Pageable sources are staged by the driver before
 * this returns, so the caller may reuse them at once. */
static sl_code cuda_upload(sl_backend *b, void *dst, const void *host_src, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream);
  if (e != cudaSuccess) {
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "upload of %s to the device failed", s);
  }
  return SL_OK;
}

static bool device_fault_in_batch(const cuda_impl *c);
static sl_code device_error(cuda_impl *c, cudaError_t e, sl_error *err);

/* Batches (completed, upto] are known complete: their launchers' device
 * times go to their targets. */
static void harvest_upto(cuda_impl *c, uint32_t upto) {
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

/* Device to host; the data is on the host when this returns (so every batch
 * before it has completed). */
static sl_code cuda_download(sl_backend *b, void *host_dst, const void *src, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) {
    if (device_fault_in_batch(c)) return device_error(c, e, err);
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "download of %s from the device failed", s);
  }
  harvest_upto(c, c->committed);
  return SL_OK;
}

static sl_code cuda_copy(sl_backend *b, void *dst, const void *src, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
  if (e != cudaSuccess) {
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "device copy of %s failed", s);
  }
  return SL_OK;
}

static sl_code cuda_zero(sl_backend *b, void *dst, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemsetAsync(dst, 0, bytes, c->stream);
  if (e != cudaSuccess) {
    char s[64];
    format_size(bytes, s, sizeof s);
    return cuda_fail(err, e, "zeroing %s of device memory failed", s);
  }
  return SL_OK;
}

static sl_code cuda_batch_begin(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  if (c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cuda backend: batch already open");
  /* The batch's ring entry is free once batch seq - RING completed: the
   * host runs at most SL_CUDA_RING batches ahead. */
  const uint32_t seq = c->committed + 1;
  if (seq > SL_CUDA_RING && c->completed < seq - SL_CUDA_RING) {
    cudaError_t e = cudaEventSynchronize(c->ring_event[seq % SL_CUDA_RING]);
    if (e != cudaSuccess) return device_error(c, e, err);
    harvest_upto(c, seq - SL_CUDA_RING);
  }
  c->ring_nt[seq % SL_CUDA_RING] = 0;
  c->in_batch = true;
  c->n_batch = 0;
  c->batch_chunk = -1;
  c->batch_status = SL_OK;
  return SL_OK;
}

/* A timing record of the open batch's ring entry (events made on first use
 * and kept), or NULL when events cannot be made (no times; not an error). */
static cuda_timing *timing_slot(cuda_impl *c) {
  const int k = (int)((c->committed + 1) % SL_CUDA_RING);
  if (c->ring_nt[k] == c->ring_capt[k]) {
    int cap = c->ring_capt[k] ? 2 * c->ring_capt[k] : 4;
    c->ring_t[k] = sl_xrealloc(c->ring_t[k], (size_t)cap * sizeof *c->ring_t[k]);
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
static sl_code cuda_batch_encode(sl_backend *b, sl_kernel_fn fn, sl_kernel_args *a, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!c->in_batch) return sl_fail(err, SL_ERR_INTERNAL, "cuda backend: encode outside a batch");
  if (c->batch_status != SL_OK) return c->batch_status;
  if (c->n_batch == c->cap_batch) {
    c->cap_batch = c->cap_batch ? 2 * c->cap_batch : 16;
    c->batch_nodes = sl_xrealloc(c->batch_nodes, (size_t)c->cap_batch * sizeof *c->batch_nodes);
  }
  c->batch_nodes[c->n_batch++] = a->node_id ? a->node_id : "?";
  if (c->batch_chunk < 0) c->batch_chunk = a->chunk;
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

static sl_code cuda_batch_commit(sl_backend *b, sl_error *err) {
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
static bool device_fault_in_batch(const cuda_impl *c) {
  uint32_t done = *(volatile const uint32_t *)c->mark_host;
  return done != c->committed || c->in_batch;
}

/* An asynchronous device error: names the batch it happened in, the first
 * one whose marker the stream did not write. */
static sl_code device_error(cuda_impl *c, cudaError_t e, sl_error *err) {
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

static sl_code cuda_sync(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  cudaError_t e = cudaStreamSynchronize(c->stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return device_error(c, e, err);
  harvest_upto(c, c->committed);
  return SL_OK;
}

/* Ends the batch without waiting for it: the stream writes its number to the
 * marker after its kernels; an error already visible is reported now, one
 * found later by the sync (or wait, or download) that sees it. */
static sl_code cuda_batch_wait(sl_backend *b, sl_error *err) {
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
  cudaError_t e = (cudaError_t)sl_cuda_launch_fill_u32(c->stream, c->mark_dev, seq, 1);
  if (e == cudaSuccess) e = cudaEventRecord(c->ring_event[k], c->stream);
  c->committed = seq;
  c->in_batch = false;
  if (e != cudaSuccess) return device_error(c, e, err);
  if (c->sync_each) return cuda_sync(b, err);
  /* A fault that already happened is reported here, without waiting. */
  e = cudaStreamQuery(c->stream);
  if (e != cudaSuccess && e != cudaErrorNotReady) return device_error(c, e, err);
  (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
  return SL_OK;
}

static void cuda_parallel_for(sl_backend *b, int64_t n, int64_t grain, sl_range_fn fn, void *ctx) {
  cuda_impl *c = b->impl;
  c->cpu->ops->parallel_for(c->cpu, n, grain, fn, ctx);
}

static int cuda_workers(const sl_backend *b) {
  const cuda_impl *c = b->impl;
  return c->cpu->ops->workers(c->cpu);
}

const sl_backend_ops sl_cuda_backend_ops = {
    .kind = SL_BACKEND_CUDA,
    .probe = cuda_probe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .batch_begin = cuda_batch_begin,
    .batch_encode = cuda_batch_encode,
    .batch_commit = cuda_batch_commit,
    .batch_wait = cuda_batch_wait,
    .sync = cuda_sync,
    .parallel_for = cuda_parallel_for,
    .workers = cuda_workers,
};

/* ---- shaders/cuda/sl_cuda.h ---- */

void *sl_cuda_stream(sl_backend *b) {
  if (!b || b->ops->kind != SL_BACKEND_CUDA || !b->impl) return NULL;
  return (void *)((cuda_impl *)b->impl)->stream;
}

void *sl_cuda_copy_stream(sl_backend *b) {
  if (!b || b->ops->kind != SL_BACKEND_CUDA || !b->impl) return NULL;
  const cuda_impl *c = b->impl;
  return c->have_copy_stream ? (void *)c->copy_stream : NULL;
}

sl_code sl_cuda_sync(sl_kernel_args *a) {
  sl_error local;
  sl_error_clear(&local);
  sl_error *err = a->err ? a->err : &local;
  return cuda_sync(a->backend, err);
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

sl_code sl_cuda_check_launch(sl_kernel_args *a, const char *kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return SL_OK;
  sl_error local;
  sl_error_clear(&local);
  sl_error *err = a && a->err ? a->err : &local;
  /* A fault of an earlier batch surfacing at this launch: name that batch. */
  if (sticky(e) && a && a->backend && a->backend->ops->kind == SL_BACKEND_CUDA)
    return device_error(a->backend->impl, e, err);
  sl_fail(err, SL_ERR_BACKEND, "cuda backend: launch of kernel '%s' failed: %s (%s)",
          kernel ? kernel : "?", cudaGetErrorString(e), cudaGetErrorName(e));
  if (a && a->node_id) sl_error_node(err, a->node_id);
  if (a) sl_error_chunk(err, a->chunk);
  return SL_ERR_BACKEND;
}

sl_code sl_cuda_memory_report(sl_backend *b, size_t *free_bytes, size_t *total_bytes, size_t *driver_used) {
  if (b) {
    if (b->ops->kind != SL_BACKEND_CUDA || !b->impl) return SL_ERR_BACKEND;
    if (cudaSetDevice(((cuda_impl *)b->impl)->device) != cudaSuccess) {
      (void)cudaGetLastError();
      return SL_ERR_BACKEND;
    }
  }
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
    (void)cudaGetLastError();
    return SL_ERR_BACKEND;
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  if (driver_used) *driver_used = t - f;
  return SL_OK;
}

void sl_cuda_backend_held(const sl_backend *b, int64_t *device_allocs, uint64_t *device_bytes,
                          int64_t *pinned_allocs, uint64_t *pinned_bytes) {
  const cuda_impl *c = b && b->ops->kind == SL_BACKEND_CUDA ? b->impl : NULL;
  if (device_allocs) *device_allocs = c ? __atomic_load_n(&c->device_allocs, __ATOMIC_RELAXED) : 0;
  if (device_bytes) *device_bytes = c ? __atomic_load_n(&c->device_bytes, __ATOMIC_RELAXED) : 0;
  if (pinned_allocs) *pinned_allocs = c ? __atomic_load_n(&c->pinned_allocs, __ATOMIC_RELAXED) : 0;
  if (pinned_bytes) *pinned_bytes = c ? __atomic_load_n(&c->pinned_bytes, __ATOMIC_RELAXED) : 0;
}

size_t sl_cuda_shared_memory_per_block(const sl_backend *b) {
  const cuda_impl *c = b && b->ops->kind == SL_BACKEND_CUDA ? b->impl : NULL;
  return c ? c->smem_per_block : 0;
}

int sl_cuda_compute_capability(const sl_backend *b) {
  const cuda_impl *c = b && b->ops->kind == SL_BACKEND_CUDA ? b->impl : NULL;
  return c ? c->compute_capability : 0;
}
