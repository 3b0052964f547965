/* The deterministic random numbers of the tests and benchmarks that make
 * detector-like data: xorshift64 (one stream per translation unit), uniform
 * doubles, and Poisson counts by multiplication (small means). A file that
 * wants another stream defines SL_TEST_RNG_SEED before including this.
 * urand_from draws from a stream whose state the caller holds, for data that
 * depends on its own seed only, whatever else the file draws. */
#ifndef SL_TEST_RNG_H
#define SL_TEST_RNG_H

#include <stdint.h>

#ifndef SL_TEST_RNG_SEED
#define SL_TEST_RNG_SEED 0x9E3779B97F4A7C15ULL
#endif

static uint64_t rng_state = SL_TEST_RNG_SEED;

static inline uint64_t rng(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

/* Uniform in [0, 1) from the top 53 bits. */
static inline double urand(void) { return (double)(rng() >> 11) / 9007199254740992.0; }

/* Poisson(mean) by multiplying uniforms (fine for the small means of
 * detector counts); at most 999. */
static inline uint64_t poisson(double mean) {
  double p = 1, e = __builtin_exp(-mean);
  uint64_t k = 0;
  do {
    k++;
    p *= urand();
  } while (p > e && k < 1000);
  return k - 1;
}

/* Uniform in [0, 1) from the caller's stream: a 64-bit LCG (Knuth's MMIX
 * constants), its top 53 bits. */
static inline double urand_from(uint64_t *state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*state >> 11) * 0x1.0p-53;
}

#endif
