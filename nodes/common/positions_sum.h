/* Sums over scan positions of items, element by element: what the sum node
 * folds a chunk with, and what detector_preview adds its first frames with.
 * Unsigned integers (u8, u16, u32, u64) go into u64 sums, exact while the
 * true sum fits (and wrapping otherwise, so a value taken out of a sum before
 * or after it was added comes back exact); f32 and f64 into f64 sums, each
 * element adding its positions in scan order (bit-identical to a plain loop
 * over positions). */
#ifndef SL_POSITIONS_SUM_H
#define SL_POSITIONS_SUM_H

#include <stdint.h>

#include "engine/core/tensor.h"

/* Adds positions [p0, p1) of elements [e0, e1) of x (items of `item`
 * elements of dtype t, back to back) into y[e0, e1): uint64_t for unsigned
 * integers, double for floats. */
void sl_positions_fold(sl_dtype t, const void *x, int64_t item, void *y, int64_t p0, int64_t p1, int64_t e0,
                       int64_t e1);

/* The same over every element, y[0, item): u16 by sixteen u32 sums a
 * 256-element tile in registers on AVX-512 (where sl_madd_avx512_used),
 * which reads y once per tile and group of positions rather than once per
 * four positions; the rest by sl_positions_fold. */
void sl_positions_sum(sl_dtype t, const void *x, int64_t item, void *y, int64_t p0, int64_t p1);

#endif
