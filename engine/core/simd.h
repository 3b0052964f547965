/* Which hand-written SIMD kernels run: one choice for every node that has
 * them (bslz4_decode's bit transposition, the u16 sweeps of moments, com and
 * virtual_detectors), so that SLUICE_SIMD=scalar switches the whole process
 * to the portable paths for an A/B comparison, and tests can force each path.
 * The portable paths are the reference; every path gives the same bytes. */
#ifndef SL_SIMD_H
#define SL_SIMD_H

#include <stdbool.h>

#include "engine/core/status.h"

typedef enum sl_simd {
  SL_SIMD_AUTO = 0, /* SLUICE_SIMD=scalar|sse2|avx2 if set, else the best the CPU has */
  SL_SIMD_SCALAR,
  SL_SIMD_SSE2,
  SL_SIMD_AVX2
} sl_simd;

/* The `simd` param of the nodes that have hand-written sweeps, for their
 * param lists (engine/graph/node_params.h): an ENUM whose choices are in
 * sl_simd order, so the bound value is an sl_simd. */
#define SL_SIMD_CHOICES "auto|scalar|sse2|avx2"
#define SL_SIMD_PARAM_DOC                                                                \
  "auto (SLUICE_SIMD, else the best the CPU has), scalar, sse2 or avx2 (for testing): " \
  "which hand-written sweep the CPU kernel runs; every path gives the same bytes"

/* Resolves SL_SIMD_AUTO (SLUICE_SIMD, then the CPU) and checks that a forced
 * path is supported by this CPU/build. An unknown SLUICE_SIMD value or a
 * forced path the CPU lacks is an error (SL_ERR_BACKEND), never a silent fallback. */
sl_code sl_simd_resolve(sl_simd want, sl_simd *out, sl_error *err);
/* True when this build and CPU can run the path. */
int sl_simd_supported(sl_simd s);
/* "auto", "scalar", "sse2", "avx2". */
const char *sl_simd_name(sl_simd s);
/* The inverse of sl_simd_name; false for any other string. */
bool sl_simd_parse(const char *name, sl_simd *out);

#endif
