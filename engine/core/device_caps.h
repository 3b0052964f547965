/* What a compute device offers: the planner sizes chunks and estimates time
 * from it, backends report it. A plain description, so that the planner can
 * read it without depending on the backend layer. */
#ifndef SL_DEVICE_CAPS_H
#define SL_DEVICE_CAPS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/kernel_abi.h"

typedef struct sl_backend_caps {
  sl_backend_kind kind;
  char device[128];       /* non-sensitive description */
  int compute_units;      /* CPU threads or multiprocessors */
  int host_workers;       /* workers of parallel_for, which host kernels use
                             (the CPU backend's threads; a device backend's
                             host helpers); 0 = compute_units */
  uint64_t memory_bytes;  /* memory available to buffers */
  bool device_memory;     /* buffers live in a separate device memory */
  int64_t cache_bytes;    /* private cache per compute unit (a core's L2); 0 = unknown */
  /* Throughput profile used by the planner's time estimate. */
  double bytes_per_second; /* sustained memory traffic */
  double ops_per_second;   /* simple integer/float operations */
} sl_backend_caps;

/* Workers of parallel_for for host kernels (host_workers, else compute_units). */
static inline int sl_caps_host_workers(const sl_backend_caps *c) {
  return c->host_workers > 0 ? c->host_workers : c->compute_units;
}

#endif
