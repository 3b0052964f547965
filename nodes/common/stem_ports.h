/* Port checks shared by the detector and STEM nodes: the `frames` input
 * (streamed detector frames), the element read of an unsigned frame or mask,
 * the `com_row`/`com_col` pair of the whole-scan nodes (dpc, idpc), and the
 * `simd` param of the nodes with a hand-written AVX2 sweep (moments, com,
 * virtual_detectors). */
#ifndef SL_STEM_PORTS_H
#define SL_STEM_PORTS_H

#include <stdint.h>

#include "engine/core/simd.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"

struct sl_node;

/* Checks a `frames` port: streamed u8/u16/u32 with 2 item axes. */
sl_code sl_frames_check(const sl_tensor_desc *x, sl_error *err);

/* The same, and the frames must be decoded (encoding none). */
sl_code sl_frames_check_decoded(const sl_tensor_desc *x, sl_error *err);

/* Element i of a u8, u16 or u32 (any other dtype) array. */
static inline uint64_t sl_frame_value_at(const void *x, sl_dtype t, int64_t i) {
  if (t == SL_U8) return ((const uint8_t *)x)[i];
  if (t == SL_U16) return ((const uint16_t *)x)[i];
  return ((const uint32_t *)x)[i];
}

/* Inputs 0 and 1 of `n`, 'com_row' and 'com_col': whole f64 [rows, cols] of
 * the same shape. */
sl_code sl_stem_check_com_field(const struct sl_node *n, sl_error *err);

/* Param 'simd': which sweep the CPU kernel runs, for tests and A/B timing.
 * The AVX2 sweep (madd_u16.h) takes u16 frames only; every other path and
 * frame runs the portable loops. All give the same u64 values. */
#define SL_STEM_SIMD_PARAM                                                               \
  {"simd", SL_PT_STRING, "auto",                                                         \
   "auto (SLUICE_SIMD, else the best the CPU has), scalar, sse2 or avx2 (for testing): " \
   "avx2 runs the vpmaddwd sweep on u16 frames, the others the portable loops"}

/* Checks param 'simd' of `n` (auto, scalar, sse2 or avx2; else SL_ERR_PIPELINE). */
sl_code sl_stem_simd_param(const struct sl_node *n, sl_simd *want, sl_error *err);

/* The path the CPU kernel of `n` takes: param 'simd' resolved by
 * sl_simd_resolve (SL_ERR_BACKEND for a path the CPU lacks, never a fallback). */
sl_code sl_stem_simd(const struct sl_node *n, sl_simd *path, sl_error *err);

#endif
