/* Run-time settings. See settings.h. */
#include "engine/core/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"

/* Booleans are the choices "false|true" (so the index is the value); they
 * also take 0 and 1, as the environment variables always did. */
#define BOOL_CHOICES "false|true"

static const sl_setting_info k_settings[SL_SET_COUNT] = {
    [SL_SET_SIMD] = {"simd", "SLUICE_SIMD", "auto|scalar|sse2|avx2", "auto",
                     "hand-written CPU sweeps: auto (the best this CPU has) or a forced path"},
    [SL_SET_CUDA_DEVICE] = {"cuda_device", "SLUICE_CUDA_DEVICE", NULL, "0",
                            "index of the CUDA device the cuda backend uses"},
    [SL_SET_CUDA_SYNC] = {"cuda_sync", "SLUICE_CUDA_SYNC", BOOL_CHOICES, "false",
                          "cuda: wait after every batch (debugging: faults found at their batch)"},
    [SL_SET_SOURCE_OVERLAP] = {"source_overlap", "SLUICE_SOURCE_OVERLAP", BOOL_CHOICES, "true",
                               "device backends: a stream source's chunks (produce) are copied on a copy "
                               "queue by a helper thread while kernels run; false: in order with them"},
    [SL_SET_H5_INDEX] = {"h5_index", "SLUICE_H5_INDEX", "btree|api", "btree",
                         "how a chunked dataset's chunks are listed: sluice's own B-tree reader, or "
                         "the HDF5 library's chunk iteration"},
    [SL_SET_READ_THREADS] = {"read_threads", "SLUICE_READ_THREADS", NULL, "0",
                             "threads reading detector files, 0 = automatic (on the CPU none where the workers hold "
                             "every usable CPU: they read each window when it is needed; else up to 4; "
                             "16 feeding a device)"},
    [SL_SET_READ_PIECE] = {"read_piece", "SLUICE_READ_PIECE", NULL, "0",
                           "bytes: the smallest piece a read of detector files is cut into for the "
                           "threads that read it, 0 = automatic (1 MiB for reader threads, 64 KiB where the "
                           "workers read)"},
    [SL_SET_CUFFT] = {"cufft", "SLUICE_CUFFT", SL_SETTING_TEXT, "",
                      "cuda: the cuFFT library iDPC loads at run time (a name or path), none (iDPC "
                      "on the host), or empty for libcufft.so.12 in its usual places"},
    [SL_SET_COST_PROFILE] = {"cost_profile", "SLUICE_COST_PROFILE", SL_SETTING_TEXT, "cache",
                             "the time estimate's profile: cache (what `sluice calibrate` measured "
                             "for this backend, device and thread count, if any), none (the built-in "
                             "guesses) or a profile file"},
    [SL_SET_INDEX_STORE] = {"index_store", "SLUICE_INDEX_STORE", BOOL_CHOICES, "true",
                            "keep an acquisition's chunk index in the user's cache (~/.cache/sluice/"
                            "index), so that planning it again reads one file instead of every data "
                            "file; used only while the master and every data file are unchanged "
                            "(device, inode, size, modification time)"},
    [SL_SET_INDEX_STORE_BYTES] = {"index_store_bytes", "SLUICE_INDEX_STORE_BYTES", NULL, "1073741824",
                                  "bytes the chunk indexes kept in the user's cache may take: when keeping one "
                                  "makes them more (or more than 4096 entries), the entries used longest ago are "
                                  "removed (only sluice's own entry files there); 0 = no bound"},
    [SL_SET_LOOP_HISTORY] = {"loop_history", "SLUICE_LOOP_HISTORY", BOOL_CHOICES, "true",
                             "estimate an until-loop by the iterations it ran the last time the "
                             "same pipeline (same text and --set values) ran, kept in the user's "
                             "cache (~/.cache/sluice/loops); otherwise by its bound (times)"},
    [SL_SET_PINNED_MEMORY] = {"pinned_memory", "SLUICE_PINNED_MEMORY", "runtime|huge", "huge",
                              "cuda: pinned host memory of 2 MiB or more (the source's read windows): "
                              "huge (2 MiB pages registered with cudaHostRegister: fewer pages to "
                              "pin; 29 -> 10 ms for two 25 MiB windows on the H200's host) or runtime "
                              "(cudaMallocHost)"},
    [SL_SET_CUFFT_READ_AHEAD] = {"cufft_read_ahead", "SLUICE_CUFFT_READ_AHEAD", BOOL_CHOICES, "true",
                                 "cuda: when cuFFT loads, ask the kernel to read its library's file (286 MB) "
                                 "into the page cache in the background, so that a transform size's first "
                                 "plan finds its kernels there; false: only the pages cuFFT touches are read"},
};

typedef struct setting_value {
  char text[4096]; /* a library path for SL_SETTING_TEXT */
  const char *origin;
  int choice;
  int64_t number;
} setting_value;

static setting_value g_values[SL_SET_COUNT];
static bool g_ready;

const sl_setting_info *sl_setting_table(int *count) {
  *count = SL_SET_COUNT;
  return k_settings;
}

static sl_code set_value(sl_setting_id id, const char *v, const char *origin, sl_error *err) {
  const sl_setting_info *s = &k_settings[id];
  setting_value *out = &g_values[id];
  const char *text = v;
  if (s->choices && !strcmp(s->choices, BOOL_CHOICES))
    text = !strcmp(v, "1") ? "true" : !strcmp(v, "0") ? "false" : v;
  if (s->choices && !strcmp(s->choices, SL_SETTING_TEXT)) {
    if (strlen(v) >= sizeof out->text)
      return sl_fail(err, SL_ERR_USAGE, "setting %s (from %s): longer than %zu characters", s->name,
                     origin, sizeof out->text - 1);
  } else if (s->choices) {
    int c = sl_choice_index(s->choices, text);
    if (c < 0)
      return sl_fail(err, SL_ERR_USAGE, "setting %s=%s (from %s): expected one of %s", s->name, v,
                     origin, s->choices);
    out->choice = c;
  } else {
    int64_t n;
    if (!sl_parse_i64(v, &n) || n < 0)
      return sl_fail(err, SL_ERR_USAGE, "setting %s=%s (from %s): expected an integer >= 0", s->name,
                     v, origin);
    out->number = n;
  }
  snprintf(out->text, sizeof out->text, "%s", text);
  out->origin = origin;
  return SL_OK;
}

/* Defaults, then the environment. A bad environment value keeps the
 * default here and fails sl_settings_init (which every command calls). */
static sl_code read_environment(sl_error *err) {
  sl_error ignored;
  for (int i = 0; i < SL_SET_COUNT; i++) set_value((sl_setting_id)i, k_settings[i].dflt, "default", &ignored);
  g_ready = true;
  sl_code rc = SL_OK;
  for (int i = 0; i < SL_SET_COUNT; i++) {
    const char *v = getenv(k_settings[i].env);
    sl_error e;
    if (v && *v && set_value((sl_setting_id)i, v, k_settings[i].env, &e) != SL_OK && rc == SL_OK) {
      *err = e; /* the first bad value is the one reported */
      rc = e.code;
    }
  }
  return rc;
}

sl_code sl_settings_init(const char *const *overrides, int n_overrides, sl_error *err) {
  sl_code env_rc = read_environment(err);
  if (env_rc != SL_OK) return env_rc;
  for (int k = 0; k < n_overrides; k++) {
    const char *eq = strchr(overrides[k], '=');
    int found = -1;
    for (int i = 0; eq && i < SL_SET_COUNT; i++)
      if (strlen(k_settings[i].name) == (size_t)(eq - overrides[k]) &&
          !strncmp(k_settings[i].name, overrides[k], (size_t)(eq - overrides[k])))
        found = i;
    if (found < 0) {
      const char *names[SL_SET_COUNT];
      for (int i = 0; i < SL_SET_COUNT; i++) names[i] = k_settings[i].name;
      char name[64];
      snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - overrides[k]) : 63, overrides[k]);
      const char *best = sl_closest(name, names, SL_SET_COUNT);
      return sl_fail(err, SL_ERR_USAGE, "--setting %s: %s%s%s%s (see `sluice settings`)", overrides[k],
                     eq ? "no such setting" : "expected NAME=VALUE", best ? " (did you mean '" : "",
                     best ? best : "", best ? "'?)" : "");
    }
    sl_code rc = set_value((sl_setting_id)found, eq + 1, "--setting", err);
    if (rc != SL_OK) return rc;
  }
  return SL_OK;
}

/* Without sl_settings_init (a program that only links the library), the
 * environment is read on first use. */
static const setting_value *value(sl_setting_id id) {
  if (!g_ready) {
    sl_error ignored;
    (void)read_environment(&ignored);
  }
  return &g_values[id];
}

const char *sl_setting_text(sl_setting_id id) { return value(id)->text; }
const char *sl_setting_origin(sl_setting_id id) { return value(id)->origin; }
int sl_setting_choice(sl_setting_id id) { return value(id)->choice; }
int64_t sl_setting_int(sl_setting_id id) { return value(id)->number; }
bool sl_setting_bool(sl_setting_id id) { return value(id)->choice == 1; /* BOOL_CHOICES */ }
