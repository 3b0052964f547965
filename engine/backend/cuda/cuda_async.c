/* Events and asynchronous copies of the CUDA backend (backend.h), so that a
 * stage that overlaps copies with kernels (hdf5_source's uploader, later the
 * executor's prefetch) never holds a native stream or event. An sl_event is
 * a cudaEvent_t made without timing; SL_QUEUE_COMPUTE is the stream of the
 * kernels, SL_QUEUE_COPY the second non-blocking stream. All of these may be
 * called from a helper thread (after bind_thread): they change no state of
 * the backend. */
#include <cuda_runtime_api.h>

#include "engine/backend/cuda/cuda_internal.h"

static cudaStream_t queue_stream(const cuda_impl *c, sl_queue q) {
  return q == SL_QUEUE_COPY ? c->copy_stream : c->stream;
}

const sl_device_env *sl_cuda_backend_device_env(sl_backend *b) {
  cuda_impl *c = b->impl;
  return &c->env;
}

sl_code sl_cuda_backend_bind_thread(sl_backend *b, sl_error *err) {
  cuda_impl *c = b->impl;
  cudaError_t e = cudaSetDevice(c->device);
  return e == cudaSuccess ? SL_OK : sl_cuda_backend_fail(err, e, "this thread cannot use device %d", c->device);
}

sl_code sl_cuda_backend_event_create(sl_backend *b, sl_event **ev, sl_error *err) {
  (void)b;
  cudaEvent_t e = NULL;
  cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (r != cudaSuccess) {
    *ev = NULL;
    return sl_cuda_backend_fail(err, r, "cannot create an event");
  }
  *ev = (sl_event *)e;
  return SL_OK;
}

void sl_cuda_backend_event_destroy(sl_backend *b, sl_event *ev) {
  (void)b;
  if (ev && cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess) (void)cudaGetLastError();
}

sl_code sl_cuda_backend_event_record(sl_backend *b, sl_event *ev, sl_queue q, sl_error *err) {
  cudaError_t e = cudaEventRecord((cudaEvent_t)ev, queue_stream(b->impl, q));
  return e == cudaSuccess ? SL_OK : sl_cuda_backend_fail(err, e, "cannot record an event");
}

sl_code sl_cuda_backend_queue_wait_event(sl_backend *b, sl_queue q, sl_event *ev, sl_error *err) {
  cudaError_t e = cudaStreamWaitEvent(queue_stream(b->impl, q), (cudaEvent_t)ev, 0);
  return e == cudaSuccess ? SL_OK : sl_cuda_backend_fail(err, e, "a queue cannot wait for an event");
}

/* Callable from a helper thread: touches no batch state (a device fault
 * found here is named with its batch by the executor's next wait or sync). */
sl_code sl_cuda_backend_event_wait(sl_backend *b, sl_event *ev, sl_error *err) {
  (void)b;
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)ev);
  return e == cudaSuccess ? SL_OK : sl_cuda_backend_fail(err, e, "waiting for an event failed");
}

sl_code sl_cuda_backend_copy_async(sl_backend *b, sl_queue q, void *dst, const void *src, size_t bytes,
                                   sl_error *err) {
  if (!bytes) return SL_OK;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, queue_stream(b->impl, q));
  if (e == cudaSuccess) return SL_OK;
  return sl_cuda_backend_fail_sized(err, e, "asynchronous copy of", bytes, " failed");
}
