/* Identities and merges of declared reductions on the host (see combine.h).
 * The CPU backend runs these; device backends have their own kernels that
 * must give the same bits (integer arithmetic wraps, floats add in the same
 * order: one partial at a time, element by element). */
#include "engine/core/combine.h"

#include <float.h>
#include <string.h>

const char *sl_combine_name(sl_combine c) {
  static const char *const names[SL_COMBINE_COUNT] = {"none",   "sum",   "min",  "max",
                                                      "concat", "merge", "concat_scan_last"};
  return c >= 0 && c < SL_COMBINE_COUNT ? names[c] : "unknown";
}

sl_code sl_combine_check(sl_combine c, sl_dtype t, sl_error *err) {
  if (c < 0 || c >= SL_COMBINE_COUNT) return sl_fail(err, SL_ERR_PIPELINE, "unknown combine %d", (int)c);
  if ((c == SL_COMBINE_MIN || c == SL_COMBINE_MAX) && t == SL_C64)
    return sl_fail(err, SL_ERR_PIPELINE, "combine %s is not defined for %s values", sl_combine_name(c),
                   sl_dtype_name(t));
  return SL_OK;
}

/* One loop per (dtype, operation): the element type T and how two values
 * combine. Unsigned sums wrap by C's rules; signed ones are summed as
 * unsigned (the same bits as a wrapping two's-complement sum, without
 * undefined behaviour). */
#define SL_MERGE_LOOP(T, EXPR)                              \
  do {                                                      \
    T *a_ = (T *)acc;                                       \
    const T *p_ = (const T *)partial;                       \
    for (int64_t i = begin; i < end; i++) {                 \
      T x = a_[i], y = p_[i];                               \
      a_[i] = (EXPR);                                       \
    }                                                       \
  } while (0)

#define SL_FILL_LOOP(T, V)                                   \
  do {                                                       \
    T *d_ = (T *)dst;                                        \
    for (int64_t i = begin; i < end; i++) d_[i] = (V);       \
  } while (0)

static void merge_sum(sl_dtype t, void *acc, const void *partial, int64_t begin, int64_t end) {
  switch (t) {
    case SL_U8: SL_MERGE_LOOP(uint8_t, (uint8_t)(x + y)); break;
    case SL_U16: SL_MERGE_LOOP(uint16_t, (uint16_t)(x + y)); break;
    case SL_U32: SL_MERGE_LOOP(uint32_t, x + y); break;
    case SL_U64: SL_MERGE_LOOP(uint64_t, x + y); break;
    case SL_I32: SL_MERGE_LOOP(int32_t, (int32_t)((uint32_t)x + (uint32_t)y)); break;
    case SL_I64: SL_MERGE_LOOP(int64_t, (int64_t)((uint64_t)x + (uint64_t)y)); break;
    case SL_F32: SL_MERGE_LOOP(float, x + y); break;
    case SL_F64: SL_MERGE_LOOP(double, x + y); break;
    case SL_C64: begin *= 2, end *= 2; SL_MERGE_LOOP(float, x + y); break;
    default: break;
  }
}

/* MIN and MAX: NaN in either operand gives NaN (a partial that saw a NaN
 * keeps saying so), like fmin/fmax would not. */
static void merge_extreme(sl_dtype t, bool is_min, void *acc, const void *partial, int64_t begin,
                          int64_t end) {
#define SL_PICK(T) SL_MERGE_LOOP(T, (x != x || y != y) ? (T)(x + y) : (is_min ? (y < x ? y : x) : (y > x ? y : x)))
  switch (t) {
    case SL_U8: SL_PICK(uint8_t); break;
    case SL_U16: SL_PICK(uint16_t); break;
    case SL_U32: SL_PICK(uint32_t); break;
    case SL_U64: SL_PICK(uint64_t); break;
    case SL_I32: SL_PICK(int32_t); break;
    case SL_I64: SL_PICK(int64_t); break;
    case SL_F32: SL_PICK(float); break;
    case SL_F64: SL_PICK(double); break;
    default: break;
  }
#undef SL_PICK
}

void sl_combine_merge_host(sl_combine c, sl_dtype t, void *acc, const void *partial, int64_t begin,
                           int64_t end) {
  if (c == SL_COMBINE_SUM) merge_sum(t, acc, partial, begin, end);
  else if (c == SL_COMBINE_MIN || c == SL_COMBINE_MAX)
    merge_extreme(t, c == SL_COMBINE_MIN, acc, partial, begin, end);
}

void sl_combine_identity_host(sl_combine c, sl_dtype t, void *dst, int64_t begin, int64_t end) {
  size_t es = sl_dtype_size(t);
  if (c != SL_COMBINE_MIN && c != SL_COMBINE_MAX) {
    memset((char *)dst + (size_t)begin * es, 0, (size_t)(end - begin) * es);
    return;
  }
  bool lo = c == SL_COMBINE_MAX; /* MAX starts from the smallest value */
  switch (t) {
    case SL_U8: SL_FILL_LOOP(uint8_t, lo ? 0 : UINT8_MAX); break;
    case SL_U16: SL_FILL_LOOP(uint16_t, lo ? 0 : UINT16_MAX); break;
    case SL_U32: SL_FILL_LOOP(uint32_t, lo ? 0 : UINT32_MAX); break;
    case SL_U64: SL_FILL_LOOP(uint64_t, lo ? 0 : UINT64_MAX); break;
    case SL_I32: SL_FILL_LOOP(int32_t, lo ? INT32_MIN : INT32_MAX); break;
    case SL_I64: SL_FILL_LOOP(int64_t, lo ? INT64_MIN : INT64_MAX); break;
    case SL_F32: SL_FILL_LOOP(float, lo ? -__builtin_inff() : __builtin_inff()); break;
    case SL_F64: SL_FILL_LOOP(double, lo ? -__builtin_inf() : __builtin_inf()); break;
    default: break;
  }
}
