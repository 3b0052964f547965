/* Checks of the ports that carry detector frames and centre-of-mass fields,
 * shared by the detector and STEM nodes: the `frames` input (streamed
 * detector frames), the element read of an unsigned frame or mask, and the
 * `com_row`/`com_col` pair of the whole-scan nodes (dpc, idpc). */
#ifndef SL_FRAME_PORTS_H
#define SL_FRAME_PORTS_H

#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"

struct sl_node;

/* SL_ERR_PIPELINE with "input '<name>' expects <expects>, got <got>". */
sl_code sl_input_refuse(sl_error *err, const char *name, const char *expects,
                        const sl_tensor_desc *got);

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

/* The largest value of a u8, u16 or u32 (UINT64_MAX for any other dtype):
 * the detector's flag value in frames of that dtype. */
static inline uint64_t sl_frame_max(sl_dtype t) {
  return t == SL_U8 ? 0xFFu : t == SL_U16 ? 0xFFFFu : t == SL_U32 ? 0xFFFFFFFFu : UINT64_MAX;
}

/* Inputs 0 and 1 of `n`, 'com_row' and 'com_col': whole f64 [rows, cols] of
 * the same shape. */
sl_code sl_com_field_check(const struct sl_node *n, sl_error *err);

#endif
