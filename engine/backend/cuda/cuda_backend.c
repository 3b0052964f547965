/* The CUDA backend: plain C on the CUDA runtime API. This file: the device,
 * its capabilities, memory and transfers; batches are in cuda_batch.c,
 * events and asynchronous copies in cuda_async.c.
 *
 * One device (0, or SLUICE_CUDA_DEVICE), one non-blocking stream for kernels
 * and transfers (SL_QUEUE_COMPUTE), plus a second non-blocking stream for
 * copies that overlap them (SL_QUEUE_COPY; users order it with events).
 * Buffers are device memory (cudaMalloc); host staging for host nodes is
 * pinned (cudaMallocHost). Kernels were compiled at build time (shaders/cuda,
 * .cu; they register themselves in sl_cuda_kernels) and are checked at
 * create: each must have code for this device and the ABI this engine
 * expects, or the backend refuses to start, before any work. Launchers get
 * the stream, the device's limits and the backend's sync and launch check in
 * a->dev (sl_device_env), never the backend itself.
 *
 * Host nodes' CPU kernels run on an internal CPU backend's threads
 * (parallel_for, workers).
 *
 * Capabilities come from device attributes, never from the device's name. */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/core/cpus.h"
#include "engine/core/settings.h"
#include "engine/core/util.h"

/* The kernel ABI this engine was written against; every registered kernel
 * must carry it, and so must the kernels' header (SL_KERNEL_ABI_VERSION). */
#define SL_ENGINE_KERNEL_ABI 9 /* 8: ports up to SL_MAX_PORTS (32) in sl_kernel_args; 9: sl_tensor_desc.variable */

enum { MIN_COMPUTE_CAPABILITY = 80 };
sl_code sl_cuda_backend_fail(sl_error *err, cudaError_t e, const char *fmt, ...) {
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
  int64_t v = sl_setting_int(SL_SET_CUDA_DEVICE);
  if (v >= count)
    return sl_fail(err, SL_ERR_BACKEND,
                   "setting cuda_device=%lld (from %s): expected a device index from 0 to %d (%d "
                   "device%s found)",
                   (long long)v, sl_setting_origin(SL_SET_CUDA_DEVICE), count - 1, count,
                   count == 1 ? "" : "s");
  d = (int)v;
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
  if (e != cudaSuccess) return sl_cuda_backend_fail(err, e, "cannot read the properties of device %d", device);
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
  if (e != cudaSuccess) return sl_cuda_backend_fail(err, e, "cannot use device %d", device);
  size_t free_b = 0, total_b = 0;
  e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess) return sl_cuda_backend_fail(err, e, "cannot read the memory of device %d", device);

  caps->compute_units = sms;
  caps->host_workers = sl_usable_cpus(); /* host nodes run on the CPU backend inside */
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

/* One kernel of the binary has code for this device and the ABI this engine
 * expects. */
static sl_code check_kernel(const cuda_impl *c, const sl_device_kernel *k, sl_error *err) {
  const char *name = k->name ? k->name : "(unnamed)";
  if (k->abi != SL_KERNEL_ABI_VERSION || k->abi != SL_ENGINE_KERNEL_ABI)
    return sl_fail(err, SL_ERR_BACKEND,
                   "cuda backend: kernel '%s' was built for ABI %d but this engine expects ABI %d; "
                   "rebuild sluice",
                   name, k->abi, SL_ENGINE_KERNEL_ABI);
  if (!k->func)
    return sl_fail(err, SL_ERR_BACKEND, "cuda backend: kernel '%s' has no function in this binary", name);
  struct cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, k->func);
  if (e != cudaSuccess)
    return sl_cuda_backend_fail(err, e,
                                "kernel '%s' has no code for this device (sm_%d; the binary holds sm_80, "
                                "sm_90 and PTX for compute_90)",
                                name, c->compute_capability);
  return SL_OK;
}

/* Every registered kernel (the kernel files linked into this binary: none
 * in a program that runs no node) was built for this engine's ABI and has a
 * function; the backend's own kernel has code for this device. Every kernel
 * file is compiled for the same architectures, so that one stands for all:
 * asking each kernel would load every module at start (lazy loading loads a
 * module at its first launch), about a tenth of a second on an H200 for the
 * kernels a run never launches. sl_cuda_backend_check_kernels asks them all. */
static sl_code check_registry(const cuda_impl *c, sl_error *err) {
  if (SL_KERNEL_ABI_VERSION != SL_ENGINE_KERNEL_ABI)
    return sl_fail(err, SL_ERR_BACKEND,
                   "cuda backend: the kernels were built for ABI %d but this engine expects ABI %d",
                   SL_KERNEL_ABI_VERSION, SL_ENGINE_KERNEL_ABI);
  sl_code rc = check_kernel(c, sl_cuda_batch_marker_kernel(), err);
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  for (int i = 0; i < n && rc == SL_OK; i++) {
    const char *name = k[i].name ? k[i].name : "(unnamed)";
    if (k[i].abi != SL_ENGINE_KERNEL_ABI)
      rc = sl_fail(err, SL_ERR_BACKEND,
                   "cuda backend: kernel '%s' was built for ABI %d but this engine expects ABI %d; "
                   "rebuild sluice",
                   name, k[i].abi, SL_ENGINE_KERNEL_ABI);
    else if (!k[i].func)
      rc = sl_fail(err, SL_ERR_BACKEND, "cuda backend: kernel '%s' has no function in this binary", name);
  }
  return rc;
}

sl_code sl_cuda_backend_check_kernels(sl_backend *b, sl_error *err) {
  if (!b || b->caps.kind != SL_BACKEND_CUDA) return sl_fail(err, SL_ERR_BACKEND, "not a CUDA backend");
  const cuda_impl *c = b->impl;
  int n = 0;
  const sl_device_kernel *k = sl_cuda_kernels(&n);
  sl_code rc = SL_OK;
  for (int i = 0; i < n && rc == SL_OK; i++) rc = check_kernel(c, &k[i], err);
  return rc;
}

/* What launchers get in a->dev: the backend's stream, limits and services. */
static void fill_device_env(cuda_impl *c, int multiprocessors) {
  c->env = (sl_device_env){.queue = (void *)c->stream,
                           .copy_queue = (void *)c->copy_stream,
                           .device = c->device,
                           .compute_capability = c->compute_capability,
                           .multiprocessors = multiprocessors,
                           .shared_memory_per_block = c->smem_per_block,
                           .sync = sl_cuda_backend_env_sync,
                           .check_launch = sl_cuda_backend_env_check_launch};
}

static void cuda_destroy(sl_backend *b);

static int cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count > 0 ? count : 0;
}

static sl_code cuda_create_on(int device, int threads, sl_backend **out, sl_error *err) {
  *out = NULL;
  /* the context it made is used below; the run's kernels may still be
   * loading (sl_cuda_warm_up_nodes) */
  sl_cuda_warm_up_context_wait();
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    return sl_fail(err, SL_ERR_BACKEND, "no CUDA device %d: %d device%s found", device, count,
                   count == 1 ? "" : "s");
  sl_backend_caps caps;
  int cc = 0;
  size_t smem = 0;
  sl_code rc = query_caps(device, &caps, &cc, &smem, err);
  if (rc != SL_OK) return rc;
  sl_backend *b = sl_calloc(1, sizeof *b);
  cuda_impl *c = sl_calloc(1, sizeof *c);
  if (!b || !c) {
    free(b);
    free(c);
    return sl_fail_nomem(err, "the cuda backend");
  }
  b->ops = &sl_cuda_backend_ops;
  b->impl = c;
  b->caps = caps;
  c->device = device;
  c->compute_capability = cc;
  c->smem_per_block = smem;
  c->batch_status = SL_OK;
  cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    rc = sl_cuda_backend_fail(err, e, "cannot create a stream on device %d", device);
  } else {
    c->have_stream = true;
    e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      rc = sl_cuda_backend_fail(err, e, "cannot create a copy stream on device %d", device);
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
    if (e != cudaSuccess) rc = sl_cuda_backend_fail(err, e, "cannot map the batch marker into device memory");
  }
  for (int k = 0; k < SL_CUDA_RING && rc == SL_OK; k++) {
    e = cudaEventCreateWithFlags(&c->ring_event[k], cudaEventDisableTiming);
    if (e != cudaSuccess) rc = sl_cuda_backend_fail(err, e, "cannot create an event");
    else c->have_ring_event[k] = true;
  }
  c->sync_each = sl_setting_bool(SL_SET_CUDA_SYNC);
  c->pin_huge = sl_setting_choice(SL_SET_PINNED_MEMORY) == 1;
  if (rc == SL_OK) rc = sl_cpu_backend_ops.create(threads, &c->cpu, err);
  if (rc == SL_OK) b->caps.host_workers = c->cpu->ops->workers(c->cpu);
  fill_device_env(c, caps.compute_units);
  if (rc != SL_OK) {
    cuda_destroy(b);
    return rc;
  }
  *out = b;
  return SL_OK;
}

/* On the device the setting cuda_device names (0 by default). */
static sl_code cuda_create(int threads, sl_backend **out, sl_error *err) {
  *out = NULL;
  int device = 0;
  sl_code rc = select_device(&device, err);
  return rc == SL_OK ? cuda_create_on(device, threads, out, err) : rc;
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

sl_code sl_cuda_backend_fail_sized(sl_error *err, cudaError_t e, const char *before, size_t bytes,
                                   const char *after) {
  char h[32];
  sl_format_bytes((uint64_t)bytes, h, sizeof h);
  return sl_cuda_backend_fail(err, e, "%s %s (%zu bytes)%s", before, h, bytes, after);
}

/* pinned_memory=huge: pinned host memory of at least this size is a mapping
 * of 2 MiB pages registered with cudaHostRegister. Pinning (and the
 * driver's mapping for the device) goes page by page: cudaMallocHost's 4 KiB
 * pages took 18-30 ms for the source's two read windows on the H200's host. */
#define HUGE_PIN_MIN ((size_t)2 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static size_t huge_len(size_t bytes) { return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

/* A mapping of len bytes (a multiple of HUGE_PAGE) aligned to HUGE_PAGE, so
 * that transparent huge pages can back all of it; faulted in and registered.
 * NULL when any step fails (cudaGetLastError then says why, or ENOMEM). */
static void *huge_pinned(size_t len, cudaError_t *e) {
  *e = cudaErrorMemoryAllocation;
  uint8_t *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (p > m) munmap(m, (size_t)(p - m));
  if (m + len + HUGE_PAGE > p + len) munmap(p + len, (size_t)(m + len + HUGE_PAGE - (p + len)));
  (void)madvise(p, len, MADV_HUGEPAGE);
  for (size_t off = 0; off < len; off += 4096) ((volatile uint8_t *)p)[off] = 0; /* one fault per huge page */
  /* portable: usable whatever device the allocating thread has current (the
   * source makes its windows on two threads at once) */
  *e = cudaHostRegister(p, len, cudaHostRegisterPortable);
  if (*e != cudaSuccess) {
    munmap(p, len);
    return NULL;
  }
  return p;
}

/* Whether pinned memory of `bytes` is (was) made by huge_pinned: the rule
 * depends on the backend's setting and the size only, and host_free is
 * given the size the memory was allocated with. */
static bool huge_pinned_size(const cuda_impl *c, size_t bytes) { return c->pin_huge && bytes >= HUGE_PIN_MIN; }

/* Device memory (pinned false) or pinned host memory, counted in what the
 * backend holds. */
static sl_code held_alloc(cuda_impl *c, bool pinned, size_t bytes, void **ptr, sl_error *err) {
  void *p = NULL;
  cudaError_t e;
  if (pinned && huge_pinned_size(c, bytes)) {
    p = huge_pinned(huge_len(bytes), &e);
  } else {
    e = pinned ? cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) : cudaMalloc(&p, bytes ? bytes : 1);
  }
  if (e != cudaSuccess)
    return sl_cuda_backend_fail_sized(err, e, "cannot allocate", bytes,
                                      pinned ? " of pinned host memory" : " of device memory");
  __atomic_add_fetch(pinned ? &c->pinned_allocs : &c->device_allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(pinned ? &c->pinned_bytes : &c->device_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
  *ptr = p;
  return SL_OK;
}

static sl_code cuda_alloc(sl_backend *b, size_t bytes, void **ptr, sl_error *err) {
  return held_alloc(b->impl, false, bytes, ptr, err);
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
  return held_alloc(b->impl, true, bytes, ptr, err);
}

static void cuda_host_free(sl_backend *b, void *ptr, size_t bytes) {
  cuda_impl *c = b->impl;
  if (!ptr) return;
  /* An upload from this buffer may still be in flight (on either stream). */
  if (c->have_stream) (void)cudaStreamSynchronize(c->stream);
  if (c->have_copy_stream) (void)cudaStreamSynchronize(c->copy_stream);
  if (huge_pinned_size(c, bytes)) {
    if (cudaHostUnregister(ptr) != cudaSuccess) (void)cudaGetLastError();
    munmap(ptr, huge_len(bytes));
  } else if (cudaFreeHost(ptr) != cudaSuccess) {
    (void)cudaGetLastError();
  }
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
  return e == cudaSuccess ? SL_OK
                          : sl_cuda_backend_fail_sized(err, e, "upload of", bytes, " to the device failed");
}

/* Device to host; the data is on the host when this returns (so every batch
 * before it has completed). */
static sl_code cuda_download(sl_backend *b, void *host_dst, const void *src, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) {
    if (sl_cuda_backend_fault_pending(c)) return sl_cuda_backend_device_error(c, e, err);
    return sl_cuda_backend_fail_sized(err, e, "download of", bytes, " from the device failed");
  }
  sl_cuda_backend_harvest(c, c->committed);
  return SL_OK;
}

static sl_code cuda_copy(sl_backend *b, void *dst, const void *src, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
  return e == cudaSuccess ? SL_OK : sl_cuda_backend_fail_sized(err, e, "device copy of", bytes, " failed");
}

static sl_code cuda_zero(sl_backend *b, void *dst, size_t bytes, sl_error *err) {
  cuda_impl *c = b->impl;
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemsetAsync(dst, 0, bytes, c->stream);
  return e == cudaSuccess ? SL_OK
                          : sl_cuda_backend_fail_sized(err, e, "zeroing", bytes, " of device memory failed");
}

static sl_code cuda_combine_identity(sl_backend *b, sl_combine c, sl_dtype t, void *dst, int64_t n,
                                     sl_error *err) {
  cuda_impl *ci = b->impl;
  if (n <= 0) return SL_OK;
  if (c != SL_COMBINE_MIN && c != SL_COMBINE_MAX) return cuda_zero(b, dst, (size_t)n * sl_dtype_size(t), err);
  cudaError_t e = (cudaError_t)sl_cuda_combine_identity(ci->stream, (int)c, (int)t, dst, n);
  return e == cudaSuccess ? SL_OK
                          : sl_cuda_backend_fail_sized(err, e, "filling", (size_t)n * sl_dtype_size(t),
                                                       " with a reduction's identity failed");
}

static sl_code cuda_combine_merge(sl_backend *b, sl_combine c, sl_dtype t, void *acc, const void *partial,
                                  int64_t n, sl_error *err) {
  cuda_impl *ci = b->impl;
  if (n <= 0 || !sl_combine_elementwise(c)) return SL_OK;
  cudaError_t e = (cudaError_t)sl_cuda_combine_merge(ci->stream, (int)c, (int)t, acc, partial, n);
  return e == cudaSuccess ? SL_OK
                          : sl_cuda_backend_fail_sized(err, e, "merging", (size_t)n * sl_dtype_size(t),
                                                       " of a reduction's partial failed");
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
    .warm_up_begin = sl_cuda_warm_up_begin,
    .warm_up_wait = sl_cuda_warm_up_wait,
    .warm_up_nodes = sl_cuda_warm_up_nodes,
    .create = cuda_create,
    .device_count = cuda_device_count,
    .create_on = cuda_create_on,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .combine_identity = cuda_combine_identity,
    .combine_merge = cuda_combine_merge,
    .batch_begin = sl_cuda_backend_batch_begin,
    .batch_encode = sl_cuda_backend_batch_encode,
    .batch_commit = sl_cuda_backend_batch_commit,
    .batch_wait = sl_cuda_backend_batch_wait,
    .sync = sl_cuda_backend_sync,
    .parallel_for = cuda_parallel_for,
    .workers = cuda_workers,
    .device_env = sl_cuda_backend_device_env,
    .bind_thread = sl_cuda_backend_bind_thread,
    .event_create = sl_cuda_backend_event_create,
    .event_destroy = sl_cuda_backend_event_destroy,
    .event_record = sl_cuda_backend_event_record,
    .queue_wait_event = sl_cuda_backend_queue_wait_event,
    .event_wait = sl_cuda_backend_event_wait,
    .copy_async = sl_cuda_backend_copy_async,
};

/* ---- engine/backend/cuda/cuda_backend.h ---- */

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
