/* What the CUDA backend offers beyond backend.h, for tests, benchmarks and
 * the device scripts (plain C, no CUDA types). The stream, the device's
 * limits and the launch services are in the backend's sl_device_env
 * (ops->device_env). */
#ifndef SL_CUDA_BACKEND_H
#define SL_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"

/* Device memory as the driver sees it (cudaMemGetInfo on the backend's
 * device; b may be NULL for the calling thread's current device):
 * driver_used = total - free, all processes and contexts included. Any
 * pointer may be NULL. SL_ERR_BACKEND without a device. */
sl_code sl_cuda_memory_report(sl_backend *b, size_t *free_bytes, size_t *total_bytes, size_t *driver_used);
/* What this backend holds now: device allocations (count, bytes) and pinned
 * host allocations (count, bytes). Zero after every buffer went back; zeros
 * for NULL or another kind of backend. */
void sl_cuda_backend_held(const sl_backend *b, int64_t *device_allocs, uint64_t *device_bytes,
                          int64_t *pinned_allocs, uint64_t *pinned_bytes);

/* Asks every registered kernel for its attributes (loading every module):
 * SL_ERR_BACKEND naming the first without code for this device. create
 * checks only the backend's own kernel (the others' ABI and functions). */
sl_code sl_cuda_backend_check_kernels(sl_backend *b, sl_error *err);

#endif
