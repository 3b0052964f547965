/* The parallax fit's objective (dpc_parallax.c): the sum over segment pairs
 * of their correlation at the lag M (o_i - o_j), cubic between whole lags,
 * for one 2 x 2 map M, or for four maps at once on AVX2, eight on AVX-512
 * (the grid search's neighbouring angles). Each lane does the scalar version's
 * multiplies and adds in the scalar version's order (the build contracts no
 * multiply-add: -std=c11, no FMA target), so both give the same bits and
 * the search finds the same optimum on any CPU. */
#ifndef SL_DPC_PAIR_POWER_H
#define SL_DPC_PAIR_POWER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_pair_lags {
  const double *xcorr; /* [pairs][(2 lr + 1) (2 lc + 1)]: each pair's correlation, lags row-major */
  int64_t lr, lc;      /* the largest lags kept */
  const double *pair;  /* [pairs][2]: o_i - o_j, scan steps per unit of M */
  int pairs;
} sl_pair_lags;

/* The objective at M (row-major m[4]); a pair whose lag leaves the kept
 * lags less two is left out (the search never goes there). */
double sl_pair_power(const sl_pair_lags *l, const double m[4]);

/* Whether sl_pair_power4 runs here: the process's SIMD choice
 * (engine/core/simd.h, SLUICE_SIMD) is AVX2. Call it on a kernel's thread. */
bool sl_pair_power4_available(void);

/* out[k] = sl_pair_power(l, m[k]) for k < 4, the same bits; only where
 * sl_pair_power4_available said so. */
void sl_pair_power4(const sl_pair_lags *l, const double m[4][4], double out[4]);

/* Whether sl_pair_power8 runs here: sl_pair_power4 does and the AVX-512
 * variants are used (nodes/common/madd_u16.h: the CPU has them, allowed). */
bool sl_pair_power8_available(void);

/* out[k] = sl_pair_power(l, m[k]) for k < 8, the same bits, on AVX-512;
 * only where sl_pair_power8_available said so. */
void sl_pair_power8(const sl_pair_lags *l, const double m[8][4], double out[8]);

#endif
