/* Self-test launchers of the CUDA backend's tests (never named by a node
 * descriptor): fill writes pos_count u32 copies of (uint32_t)pos_start into
 * out[0]; bad_launch fails at launch (invalid configuration); trap faults on
 * the device, an asynchronous, sticky error that poisons the context. */
#ifndef SL_CUDA_SELFTEST_H
#define SL_CUDA_SELFTEST_H

#include "engine/core/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

sl_code sl_cuda_selftest_fill(sl_kernel_args *a);
sl_code sl_cuda_selftest_bad_launch(sl_kernel_args *a);
sl_code sl_cuda_selftest_trap(sl_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif
