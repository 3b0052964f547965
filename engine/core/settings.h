/* Run-time settings: choices that change how sluice computes, never what
 * (every path gives the same bytes): which SIMD sweep, which CUDA device,
 * whether the source overlaps its uploads, how the chunk index is listed, how
 * many reader threads. Each has a name, an environment variable and a default;
 * the command line's `--setting NAME=VALUE` wins over the environment. They
 * are read and checked once, when a command starts (a bad value is an error
 * with exit 2 before anything runs), recorded in report.json, and library
 * code reads them here, never with getenv. */
#ifndef SL_SETTINGS_H
#define SL_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"

typedef enum sl_setting_id {
  SL_SET_SIMD = 0,       /* auto|scalar|sse2|avx2 (SLUICE_SIMD) */
  SL_SET_CUDA_DEVICE,    /* device index (SLUICE_CUDA_DEVICE) */
  SL_SET_CUDA_SYNC,      /* wait after every batch: true|false (SLUICE_CUDA_SYNC) */
  SL_SET_SOURCE_OVERLAP, /* produce's copies overlap kernels: true|false (SLUICE_SOURCE_OVERLAP) */
  SL_SET_H5_INDEX,       /* chunk listing: btree (own reader)|api (HDF5 library) (SLUICE_H5_INDEX) */
  SL_SET_READ_THREADS,   /* reader threads, 0 = automatic (SLUICE_READ_THREADS) */
  SL_SET_READ_PIECE,     /* smallest piece of a parallel read, bytes, 0 = automatic (SLUICE_READ_PIECE) */
  SL_SET_CUFFT,          /* cuFFT library: a name or path, none, or empty (SLUICE_CUFFT) */
  SL_SET_COST_PROFILE,   /* the cost model's profile: cache, none or a file (SLUICE_COST_PROFILE) */
  SL_SET_INDEX_STORE,    /* keep chunk indexes in the user's cache: true|false (SLUICE_INDEX_STORE) */
  SL_SET_INDEX_STORE_BYTES, /* bytes that cache may hold, 0 = no bound (SLUICE_INDEX_STORE_BYTES) */
  SL_SET_LOOP_HISTORY,   /* estimate until-loops by their last run: true|false (SLUICE_LOOP_HISTORY) */
  SL_SET_PINNED_MEMORY,  /* cuda: pinned host memory: huge|runtime (SLUICE_PINNED_MEMORY) */
  SL_SET_CUFFT_READ_AHEAD, /* cuda: read cuFFT's file into the page cache: true|false (SLUICE_CUFFT_READ_AHEAD) */
  SL_SET_COUNT
} sl_setting_id;

typedef struct sl_setting_info {
  const char *name;    /* as written after --setting */
  const char *env;     /* the environment variable */
  const char *choices; /* "a|b|c", NULL for an integer >= 0, or SL_SETTING_TEXT */
  const char *dflt;
  const char *doc;
} sl_setting_info;

/* The choices of a setting that takes any text (a library path). */
#define SL_SETTING_TEXT "(text)"

const sl_setting_info *sl_setting_table(int *count);

/* Reads the environment, then applies `NAME=VALUE` overrides; checks every
 * value (SL_ERR_USAGE naming the setting and where it came from). Call once
 * at start (calling it again starts over). Without it the environment is read
 * on first use, and a bad value there leaves the default. */
sl_code sl_settings_init(const char *const *overrides, int n_overrides, sl_error *err);

/* The value in effect and where it came from ("default", "environment",
 * "--setting"). */
const char *sl_setting_text(sl_setting_id id);
const char *sl_setting_origin(sl_setting_id id);
/* Typed reads: a choice setting's index in its choices; an integer's value. */
int sl_setting_choice(sl_setting_id id);
int64_t sl_setting_int(sl_setting_id id);
bool sl_setting_bool(sl_setting_id id);

#endif
