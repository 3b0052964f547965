/* cuFFT loaded and initialised in the background. Loading the 286 MB
 * library and cuFFT's first plan took about 0.29 s on the H200 at the first
 * dpc or idpc call of a process, on the run's critical path; a node whose
 * device kernel uses cuFFT starts this when the run has chosen a device
 * backend (sl_node_desc.device_warm_up_begin), so that it overlaps loading,
 * planning and the streamed passes. sl_cufft_load joins it.
 *
 * The helper thread loads the library named by the setting cufft (read on
 * the caller's thread), asks the kernel to read the library's file into the
 * page cache in the background (posix_fadvise WILLNEED: each transform
 * size's first plan loads its kernels from the file, and a cold file made
 * a first odd-sized dpc 50 times slower), makes the device of the setting
 * cuda_device current, and makes and destroys a small plan without a work
 * area (no device memory of the run's). Its failures are ignored: the kernel's own
 * load reports them. Once per process; both calls are idempotent. */
#ifndef SL_CUDA_CUFFT_WARM_UP_H
#define SL_CUDA_CUFFT_WARM_UP_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

void sl_cufft_warm_up_begin(void);
void sl_cufft_warm_up_wait(void);
/* Whether the background load has finished (never blocks). */
bool sl_cufft_warm_up_done(void);

#ifdef __cplusplus
}
#endif

#endif
