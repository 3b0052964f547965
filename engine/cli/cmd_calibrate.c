/* sluice calibrate: measures the cost model's profile (engine/plan/
 * cost_profile.h) for a backend, device and thread count by running small
 * pipelines through the real engine: a copy for the bandwidth, a pipeline of
 * one-position chunks for the per-call and per-batch overheads, and
 * pipelines on synthetic data (and on a given acquisition) at two sizes, from
 * which each node type's seconds per call and per unit of declared work are
 * fitted. Prints a table and writes the cache (or --out FILE). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "detector_input_template.h" /* generated: k_detector_input_template */
#include "engine/core/util.h"
#include "engine/exec/report.h"
#include "engine/exec/run.h"
#include "engine/plan/cost_fit.h"
#include "engine/plan/cost_profile.h"
#include "engine/cli/cli.h"
#include "engine/cli/run_output.h"

const char *const cli_help_calibrate =
    "usage: sluice calibrate [--backend auto|cpu|cuda] [--threads N] [--input FILE]...\n"
    "                        [--set NAME=VALUE]... [--budget SECONDS] [--out FILE]\n"
    "                        [--setting NAME=VALUE]... [--json]\n"
    "\n"
    "Measures the cost model's profile for a backend, its device and a thread\n"
    "count, by running small pipelines through the engine: memory bandwidth (a\n"
    "copy), the overhead of a kernel call and of a batch, and for each node type\n"
    "its seconds once per run (setup), per call and per unit of the work its\n"
    "cost declares (ops, or bytes moved), fitted from runs at two sizes on\n"
    "synthetic data (the fewest terms that fit). Prints a\n"
    "table and caches the profile in $XDG_CACHE_HOME/sluice (else\n"
    "~/.cache/sluice), one file per backend, device and thread count; `sluice\n"
    "plan` and `sluice run` estimate with it (the setting cost_profile chooses),\n"
    "and report.json says which profile a run used.\n"
    "\n"
    "  --backend B        the backend to measure (default: auto, the best available)\n"
    "  --threads N        CPU worker threads (default: all, like sluice run)\n"
    "  --input FILE       also calibrate the detector-input nodes (HDF5 source,\n"
    "                     decode, mask) on this acquisition (a Dectris master file);\n"
    "                     repeat with acquisitions of other sizes (up to 4) so that\n"
    "                     their setup and their rate can be told apart\n"
    "  --set scan_shape=[R,C]  its scan shape, when it is not square and not stored\n"
    "  --budget SECONDS   about how long the measuring runs take (default 20)\n"
    "  --out FILE         write the profile to FILE instead of the cache\n"
    "  --setting NAME=VALUE a run-time setting (see `sluice settings`)\n"
    "  --json             print the profile as JSON on stdout instead of the table\n"
    "  --samples          also print every measured node (type, calls, work, seconds),\n"
    "                     the first-call extras (bytes, seconds) and the runs\n"
    "  --libraries-only   only load the device libraries and print the seconds left\n"
    "                     once the backend is up (calibrate runs itself so first)\n"
    "  --first-run FILE [--first-chunk N] [--first-set NAME=VALUE]...\n"
    "                     only run pipeline FILE once and print each node's rate key\n"
    "                     and seconds (calibrate runs itself so for first calls)\n";

/* The calibration pipelines: written into a temporary folder and run with
 * their size params set. */
static const char k_overhead_yaml[] =
    "pipeline: calibrate_overhead\n"
    "params: {n: {type: int, default: 64}}\n"
    "nodes:\n"
    "  ramp: {type: ramp, params: {positions: [\"${n}\"], item_shape: [4], dtype: f32}}\n"
    "  scaled: {type: affine, inputs: {x: ramp.out}, params: {scale: 0.5, offset: 1}}\n"
    "  total: {type: sum, inputs: {x: scaled.y}}\n"
    "outputs: {total: total.total}\n";

static const char k_step_yaml[] =
    "pipeline: calibrate_step\n"
    "inputs: [x]\n"
    "nodes:\n"
    "  step: {type: affine, inputs: {x: inputs.x}, params: {scale: 0.5, offset: 1}}\n"
    "outputs: {x: step.y}\n";

/* The loop's carried tensor is 3-D, so that no PNG is drawn of it: a
 * smooth loop state compresses several times better than the products, and
 * its PNG's rate pulled write_png's fit down (calibrate's image pipeline
 * below is the products' kind of image). */
static const char k_basic_yaml[] =
    "pipeline: calibrate_basic\n"
    "params:\n"
    "  n: {type: int, default: 256}\n"
    "  times: {type: int, default: 10}\n"
    "nodes:\n"
    "  ramp: {type: ramp, params: {positions: [\"${n}\"], item_shape: [1024], dtype: f32}}\n"
    "  scaled: {type: affine, inputs: {x: ramp.out}, params: {scale: 0.5, offset: 1}}\n"
    "  clipped: {type: clip, inputs: {x: scaled.y}, params: {lo: 0, hi: 100}}\n"
    "  total: {type: sum, inputs: {x: clipped.y}}\n"
    "  init: {type: constant, params: {shape: [\"${n}\", 4, 4], value: 0}}\n"
    "  loop: {iterate: step.yaml, times: \"${times}\", inputs: {x: init.out}, carry: [x]}\n"
    "outputs: {total: total.total, x: loop.x}\n";

/* The products of synthetic frames at small scans; dpc with each of its
 * branch rules (their own rates, dpc's rate_variant), as fields.yaml at
 * large ones: a device's dpc takes about its launches' time at these sizes,
 * which fields.yaml's two sizes alone could not tell from its rate (the
 * H200's dpc of a 24 x 20 scan was priced at 0.1 ms for its 1.4). */
static const char k_stem_yaml[] =
    "pipeline: calibrate_stem\n"
    "params: {scan: {type: shape, default: [8, 8]}}\n"
    "nodes:\n"
    "  source:\n"
    "    type: synthetic_4dstem\n"
    "    params: {scan_shape: \"${scan}\", detector_shape: [96, 96], disk_radius: 12}\n"
    "  pattern: {type: sum, inputs: {x: source.frames}}\n"
    "  disk: {type: disk_fit, inputs: {pattern: pattern.total}}\n"
    "  images: {type: virtual_detectors, inputs: {frames: source.frames, disk: disk.disk}}\n"
    "  com: {type: com, inputs: {frames: source.frames}}\n"
    "  com_m: {type: com, inputs: {s: images.s, sr: images.sr, sc: images.sc}}\n"
    "  bf: {type: virtual_image, inputs: {frames: source.frames}, params: {kind: bf, radius: 12}}\n"
    "  adf: {type: gather, inputs: {x: images.adf}}\n"
    "  dpc: {type: dpc, inputs: {com_row: com.com_row, com_col: com.com_col, adf: adf.whole}}\n"
    "  idpc: {type: idpc, inputs: {com_row: dpc.com_row_rot, com_col: dpc.com_col_rot}}\n"
    "  dpc_skew: {type: dpc, inputs: {com_row: com.com_row, com_col: com.com_col}}\n"
    "outputs: {bf: bf.image, df: images.df, idpc: idpc.phase, com_m: com_m.com_row,\n"
    "          rotation_skew: dpc_skew.rotation_deg}\n";

/* dpc and idpc alone on fields of a scan's size, up to 512 x 512 (stem.yaml
 * gives them scans of 8 x 8 to 64 x 64, where a device's transforms take
 * about their launches' time whatever the size: a per-operation rate from
 * those priced the H200's dpc of a 512 x 512 scan several times over). The
 * field is a hash of the position (gathered whole, as the CoM is). dpc
 * runs twice, with each of its branch rules (each its own rate, dpc's
 * rate_variant): the iDPC's skewness, as in dpc.yaml, and the ADF matched
 * filter, as in stem_products.yaml (the ADF image here the row field). */
static const char k_fields_yaml[] =
    "pipeline: calibrate_fields\n"
    "params: {side: {type: int, default: 64}}\n"
    "nodes:\n"
    "  ramp: {type: ramp, params: {positions: [\"${side}\"], item_shape: [\"${side}\"], dtype: f64, values: hash}}\n"
    "  row: {type: gather, inputs: {x: ramp.out}}\n"
    "  scaled: {type: affine, inputs: {x: ramp.out}, params: {scale: -0.5, offset: 1}}\n"
    "  col: {type: gather, inputs: {x: scaled.y}}\n"
    "  dpc: {type: dpc, inputs: {com_row: row.whole, com_col: col.whole}}\n"
    "  idpc: {type: idpc, inputs: {com_row: dpc.com_row_rot, com_col: dpc.com_col_rot}}\n"
    "  dpc_adf: {type: dpc, inputs: {com_row: row.whole, com_col: col.whole, adf: row.whole}}\n"
    "outputs: {idpc: idpc.phase, rotation_adf: dpc_adf.rotation_deg}\n";

/* dpc fitting the BF segments' parallax (its own rate: dpc's
 * rate_variant), on simulated atomic columns under a defocus whose
 * parallax (about 4 scan steps per disk radius) is found at every size, so
 * that the refinement and the tilt-corrected image run as in a run that
 * finds one. The probe params only scale the reported defocus. */
static const char k_parallax_yaml[] =
    "pipeline: calibrate_parallax\n"
    "params: {scan: {type: shape, default: [32, 32]}}\n"
    "nodes:\n"
    "  source:\n"
    "    type: synthetic_4dstem\n"
    "    params: {scan_shape: \"${scan}\", detector_shape: [64, 64], disk_radius: 12, defocus: 3, dose: 10000,\n"
    "             atom_spacing: 6}\n"
    "  pattern: {type: sum, inputs: {x: source.frames}}\n"
    "  disk: {type: disk_fit, inputs: {pattern: pattern.total}}\n"
    "  com: {type: com, inputs: {frames: source.frames}}\n"
    "  segments: {type: bf_segments, inputs: {frames: source.frames, disk: disk.disk}}\n"
    "  dpc:\n"
    "    type: dpc\n"
    "    inputs: {com_row: com.com_row, com_col: com.com_col, segments: segments.segments,\n"
    "             segment_offsets: segments.offsets}\n"
    "    params: {semiangle_mrad: 20, energy_kev: 300, step_angstrom: 0.4}\n"
    "outputs: {rot: dpc.com_row_rot}\n";

/* A streamed image of a scan's size as the products' are: its writers read
 * it back from results.h5 (write_png twice), which small scans' images do
 * not show (their time is the writers' calls). Its values are noise (ramp's
 * hash): zlib takes several times longer on a noisy product than on a
 * sawtooth, and the products are noisy. */
static const char k_image_yaml[] =
    "pipeline: calibrate_image\n"
    "params: {side: {type: int, default: 128}}\n"
    "nodes:\n"
    "  ramp: {type: ramp, params: {positions: [\"${side}\"], item_shape: [\"${side}\"], dtype: f64, values: hash}}\n"
    "  image: {type: affine, inputs: {x: ramp.out}, params: {scale: 0.5, offset: 1}}\n"
    "outputs: {image: image.y}\n";

/* The shipped detector chain, the template itself (embedded at build time:
 * detector_input_template.h; the decoder's flag counts spare mask_correct
 * its scan of every frame), and the products' nodes after it, in three
 * pipelines shaped like the shipped ones, because a node's time over a
 * chunk depends on what else sweeps the chunk in its level:
 *  - the products, as stem_products.yaml and virtual_image.yaml sweep the
 *    frames: the preview and its disk fit, the virtual detectors with their
 *    moments, and the BF segments (bf_segments only here: on stem.yaml's
 *    small synthetic frames its rate priced the dev VM's segments of a
 *    128 x 128 scan at 4 times their time);
 *  - the pattern, as mean_pattern.yaml and virtual_image_fit.yaml's first
 *    pass: the summed pattern and its disk fit;
 *  - the centre of mass from the frames, as dpc.yaml.
 * One pipeline with all of them measured the virtual detectors 1.3-1.5
 * times slower than stem_products does (dev VM, 2 threads, 48 x 48 and
 * 64 x 64 scans: the sum's per-worker pattern and com's sweep in the same
 * level evicted the chunk's frames) and priced a 64 x 64 virtual_image's at
 * 2.1 times their time; with the sum beside it, com took 1.3 times as long
 * as in dpc.yaml. The summed pattern is not an output (a disk fit of it
 * is): drawn as a PNG, a smooth, mostly dark pattern compresses and draws
 * several times faster per pixel than the products, and its samples pulled
 * write_png's u64 rate to a third of what the products' PNGs take. */
#define DETECTOR_YAML_HEAD(name)                                                  \
  "pipeline: " name "\n"                                                          \
  "params:\n"                                                                     \
  "  input: {type: path, required: true}\n"                                       \
  "  scan_shape: {type: shape, default: []}\n"                                    \
  "  preview_frames: {type: int, default: 256}\n"                                 \
  "nodes:\n"                                                                      \
  "  detector:\n"                                                                 \
  "    use: detector_input.yaml\n"                                                \
  "    params: {path: \"${input}\", scan_shape: \"${scan_shape}\"}\n"

static const char k_products_yaml[] =
    DETECTOR_YAML_HEAD("calibrate_products")
    "  preview: {type: detector_preview, inputs: {mask: detector.mask},\n"
    "            params: {path: \"${input}\", frames: \"${preview_frames}\"}}\n"
    "  disk: {type: disk_fit, inputs: {pattern: preview.pattern}}\n"
    "  images: {type: virtual_detectors, inputs: {frames: detector.frames, disk: disk.disk}}\n"
    "  segments: {type: bf_segments, inputs: {frames: detector.frames, disk: disk.disk}}\n"
    "  com_m: {type: com, inputs: {s: images.s, sr: images.sr, sc: images.sc}}\n"
    "outputs: {bf: images.bf, adf: images.adf, df: images.df, com_m: com_m.com_row,\n"
    "          segments: segments.segments}\n";

static const char k_pattern_yaml[] =
    DETECTOR_YAML_HEAD("calibrate_pattern")
    "  pattern: {type: sum, inputs: {x: detector.frames}}\n"
    "  pattern_disk: {type: disk_fit, inputs: {pattern: pattern.total}}\n"
    "outputs: {pattern_disk: pattern_disk.disk}\n";

static const char k_com_yaml[] =
    DETECTOR_YAML_HEAD("calibrate_com")
    "  com: {type: com, inputs: {frames: detector.frames}}\n"
    "outputs: {com: com.com_row}\n";

/* FEM's per-pixel statistics over the scan (variance with its own merge),
 * after the detector chain as the products sweep it. */
static const char k_variance_yaml[] =
    DETECTOR_YAML_HEAD("calibrate_variance")
    "  fem: {type: variance, inputs: {x: detector.frames}}\n"
    "outputs: {normalized: fem.normalized}\n";

/* The acquisition's stored chunks copied into results.h5 (repack.yaml):
 * write_h5's "stored" rate, which writes a byte of the file for each byte
 * read (the plain rate was fitted on outputs a hundred times smaller than
 * their inputs: it priced the dev VM's repack of a 256 x 256 scan at a
 * quarter of its 0.44 s). */
static const char k_stored_yaml[] =
    "pipeline: calibrate_stored\n"
    "params:\n"
    "  input: {type: path, required: true}\n"
    "  scan_shape: {type: shape, default: []}\n"
    "  preview_frames: {type: int, default: 256}\n"
    "nodes:\n"
    "  source: {type: hdf5_source, params: {path: \"${input}\", scan_shape: \"${scan_shape}\"}}\n"
    "outputs: {frames: source.frames}\n";

/* One node's measurement: its plan's calls and declared cost, its time. */
typedef sl_cost_sample sample;

/* Acquisitions given with --input, at most (of different sizes they let the
 * fit tell a node's setup, once per run, from its rate). */
#define CALIBRATE_MAX_INPUTS 4
/* The runs a calibration keeps: overheads (1), bandwidth-free pipelines at
 * two sizes each (basic, stem, image, fields, parallax: 10), and ten per
 * acquisition given with --input (five pipelines, two chunkings each). */
#define CALIBRATE_MAX_RUNS (11 + 10 * CALIBRATE_MAX_INPUTS)
/* Each measured run is repeated and each node's least time kept: a shared
 * machine's other jobs only ever add time (a descheduled worker at a
 * fork/join fitted as 100 us per call on a loaded 2-core VM). */
#define CALIBRATE_REPEATS 3
/* Node types whose first call in this process was measured. */
#define CALIBRATE_MAX_FIRST 128

/* A node type's first call in a process against its later ones: one
 * sample per calibration run that met the type first, with the bytes the
 * node moved in a call (what a fresh process's extra grows with). */
#define FIRST_CALL_SAMPLES 32
typedef struct first_call {
  char type[48];
  int n;
  double bytes[FIRST_CALL_SAMPLES], seconds[FIRST_CALL_SAMPLES];
} first_call;

typedef struct calibration {
  const cli_opts *o;
  sl_backend_kind kind;
  sl_backend_caps caps;
  sl_cost_profile builtin; /* the profile the runs are planned with */
  char dir[256];
  sample *samples;
  int n_samples;
  sl_run runs[CALIBRATE_MAX_RUNS]; /* kept until the loops' bodies are re-estimated */
  int n_runs;
  double overhead_residuals[CALIBRATE_MAX_RUNS]; /* seconds outside levels, per run */
  double run_seconds[CALIBRATE_MAX_RUNS]; /* each run's least of its repeats */
  double first_process_load; /* the library load a fresh process of this command met; < 0: none */
  int argc;                  /* this command's arguments left by own_options, for its children */
  char **argv;
  double host_first_touch; /* device backends: the measured host_first_touch_seconds_per_byte */
  first_call first[CALIBRATE_MAX_FIRST]; /* per rate key, in the order first met */
  int n_first;
  sample *warm;       /* a first run's nodes in a fresh process (first_run_in_child) */
  int n_warm;
  /* While set (NULL-terminated), the runs keep the samples and first calls
   * of these node types only (and of their dtypes' keys): fields.yaml
   * makes its fields with ramp, affine and gather, whose rates come from
   * their own pipelines (its 512 x 512 affine gave affine a setup 17 times
   * its own, and the shipped loops estimates 4-10 times their time). */
  const char *const *only;
  /* ... or (NULL-terminated) all node types but these. */
  const char *const *except;
} calibration;

/* Whether rate key `key` is kept (calibration.only, calibration.except). */
static bool kept_type(const calibration *c, const char *key) {
  for (const char *const *t = c->except; t && *t; t++)
    if (sl_cost_key_of_type(key, *t)) return false;
  if (!c->only) return true;
  for (const char *const *t = c->only; *t; t++)
    if (sl_cost_key_of_type(key, *t)) return true;
  return false;
}

static sl_code write_file(const char *dir, const char *name, const char *text, char *path,
                          size_t len, sl_error *err) {
  snprintf(path, len, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot write %s", path);
  fputs(text, f);
  return fclose(f) == 0 ? SL_OK : sl_fail(err, SL_ERR_IO, "cannot write %s", path);
}

static sl_code open_results(void *ctx, const sl_plan *plan, sl_error *err) {
  return sl_run_output_open_results(ctx, plan, "calibration", err);
}

/* Runs pipeline `file` with `sets` and `chunk` as `sluice run` does, its
 * writer nodes included (results.h5 and the PNGs, measured like any node),
 * into a folder of the calibration's that is removed afterwards. */
static sl_code calibration_run(calibration *c, const char *file, const sl_setting *sets, size_t n_sets,
                               int64_t chunk, sl_run *run, sl_error *err) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/outputs", c->dir);
  sl_run_output out;
  memset(&out, 0, sizeof out);
  sl_code rc = sl_run_output_reserve(&out, dir, false, 0, err);
  if (rc != SL_OK) {
    memset(run, 0, sizeof *run);
    return rc;
  }
  sl_run_request req = {
      .registry = sl_nodes_registry(), .file = file, .sets = sets, .n_sets = n_sets,
      .backend = (int)c->kind, .threads = c->o->threads, .chunk_positions = chunk,
      .cost_profile = &c->builtin, .outputs = &out.target, .before_alloc = open_results, .ctx = &out,
  };
  rc = sl_run_pipeline(&req, run, err);
  sl_run_output_abandon(&out);
  return rc;
}

/* Runs this command again in a process of its own: its arguments left by
 * own_options (backend, threads, settings), then `extra`. Returns what the
 * child printed on stdout (NUL-terminated, malloc'd; at most 64 KiB kept),
 * or NULL when it could not run or did not exit 0. */
static char *self_output(const calibration *c, const char *const *extra, int n_extra) {
  char **argv = calloc((size_t)(c->argc + n_extra) + 2, sizeof *argv); /* and the NULL */
  enum { KEEP = 64 << 10 };
  char *text = calloc(1, KEEP + 1);
  int out[2] = {-1, -1};
  if (!argv || !text || pipe(out) != 0) {
    free(argv), free(text);
    return NULL;
  }
  argv[0] = "sluice";
  for (int i = 0; i < c->argc; i++) argv[i + 1] = c->argv[i];
  for (int i = 0; i < n_extra; i++) argv[c->argc + 1 + i] = (char *)extra[i];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  pid_t pid;
  extern char **environ;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  free(argv);
  close(out[1]);
  size_t got = 0;
  char sink[4096];
  for (ssize_t r; rc == 0 && (r = read(out[0], got < KEEP ? text + got : sink, got < KEEP ? KEEP - got : sizeof sink)) != 0;)
    if (r > 0) got += got < KEEP ? (size_t)r : 0;
    else if (errno != EINTR) break;
  close(out[0]);
  int status = 0;
  if (rc == 0)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* The library load a run meets is the load from the page cache: the files
 * were read by the machine's earlier runs. The first process on a machine
 * reads them from disk instead (on the H200: 182 ms against 6 ms), and a
 * profile holding that cold read put it into every later run's estimate.
 * So calibrate first runs itself once more (`--libraries-only`: the load and
 * nothing else, printed in seconds) in a process of its own, which leaves the
 * files in the page cache; then this process measures the load the runs will
 * meet. Returns the child's load, or -1 when it could not be run (then the
 * measurement below is the first read, as before). */
static double load_libraries_in_child(const calibration *c) {
  const char *extra[] = {"--libraries-only"};
  char *text = self_output(c, extra, 1);
  if (!text) return -1;
  char *end;
  double seconds = strtod(text, &end);
  bool ok = end != text && seconds >= 0;
  free(text);
  return ok ? seconds : -1;
}

/* A pipeline's first run in a fresh process, as `sluice run` makes it: each
 * node's seconds (`--first-run`: the child runs it once and prints "RATE-KEY
 * SECONDS" per node, in graph order) into c->warm. What a run pays once per
 * process (device kernels loaded on their first launch, the HDF5 library's
 * start, code paged in) shows there and not in this process's runs. */
static void first_run_in_child(calibration *c, const char *file, const sl_setting *sets, size_t n_sets,
                               int64_t chunk) {
  c->n_warm = 0;
  enum { MAX_EXTRA = 4 + 2 * (CLI_MAX_SETS + 2) };
  const char *extra[MAX_EXTRA];
  char chunk_v[32], set_v[CLI_MAX_SETS + 2][600];
  int n = 0;
  extra[n++] = "--first-run", extra[n++] = file;
  snprintf(chunk_v, sizeof chunk_v, "%lld", (long long)chunk);
  extra[n++] = "--first-chunk", extra[n++] = chunk_v;
  for (size_t k = 0; k < n_sets && k < CLI_MAX_SETS + 2; k++) {
    snprintf(set_v[k], sizeof set_v[k], "%s=%s", sets[k].name, sets[k].value);
    extra[n++] = "--first-set", extra[n++] = set_v[k];
  }
  /* twice, each node's least: one fresh process is one noisy sample */
  for (int rep = 0; rep < 2; rep++) {
    char *text = self_output(c, extra, n);
    int count = 0, got = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) count++;
    if (rep == 0 && text && count && !sl_resize(&c->warm, (size_t)count, sizeof *c->warm)) count = 0;
    char *save = NULL;
    for (char *line = text && count ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
      sample w;
      memset(&w, 0, sizeof w);
      if (sscanf(line, "%47s %lf", w.type, &w.seconds) != 2 || !(w.seconds >= 0)) break;
      if (rep == 0 && got < count) c->warm[got] = w;
      else if (rep == 1 && got < c->n_warm && !strcmp(c->warm[got].type, w.type))
        c->warm[got].seconds = fmin(c->warm[got].seconds, w.seconds);
      got++;
    }
    free(text);
    if (rep == 0) c->n_warm = got;
    else if (got != c->n_warm) c->n_warm = 0; /* the runs disagree: nothing learnt */
  }
}

/* Runs pipeline `file` once and forgets it: what a first run pays once per
 * process (cuFFT loaded and planned, files opened and cached, code paged
 * in) is not what every later run pays, and would be fitted as a rate. */
static sl_code warm_up(calibration *c, const char *file, const sl_setting *sets, size_t n_sets,
                       int64_t chunk, sl_error *err) {
  sl_run run;
  sl_code rc = calibration_run(c, file, sets, n_sets, chunk, &run, err);
  sl_run_free(&run);
  if (rc == SL_OK) first_run_in_child(c, file, sets, n_sets, chunk);
  return rc;
}

/* After a pipeline's first run in a fresh process (c->warm) and the same run
 * measured here (`run`): what the first node of each rate key took more
 * there (a device kernel loads on its first launch: 0.2-1 ms each on the
 * H200; the HDF5 library starts, the data files open and the stored chunk
 * index is read, where this process keeps them: 1.5-4 ms for the source of
 * a 48 x 48 acquisition on the dev VM). One sample per pipeline, with the
 * bytes the node moved in a call: what a fresh process pays grows with the
 * input (files, index, a source's pinned windows), and first_call_of fits
 * a constant and a part per byte to them. */
static void note_first_calls(calibration *c, const sl_run *run) {
  const sl_graph *g = run->plan->graph;
  for (int i = 0; c->n_warm == g->n_nodes && i < g->n_nodes; i++) {
    char key[48];
    sl_cost_rate_key(&g->nodes[i], key, sizeof key);
    if (strcmp(key, c->warm[i].type)) break; /* not the same graph: nothing learnt */
    if (!kept_type(c, key)) continue;
    bool earlier = false; /* a node of the type before it in this run paid */
    for (int q = 0; q < i && !earlier; q++) earlier = !strcmp(c->warm[q].type, key);
    if (earlier) continue;
    /* A cuFFT user's first call in the child came after the library had
     * loaded (first_run_only): its extra is the rest of a first call, which
     * the plan adds to the load's own wait. */
    /* Less the host memory the node is first to touch on a device backend,
     * which this process reuses from run to run and a run's plan adds on
     * its own (sl_plan_node.first_touch_bytes). */
    double extra = fmax(0, c->warm[i].seconds - sl_report_node_seconds(run->plan, &run->result, i) -
                               (double)run->plan->nodes[i].first_touch_bytes * c->host_first_touch);
    first_call *f = NULL;
    for (int k = 0; k < c->n_first && !f; k++)
      if (!strcmp(c->first[k].type, key)) f = &c->first[k];
    if (!f && c->n_first < CALIBRATE_MAX_FIRST) {
      f = &c->first[c->n_first++];
      snprintf(f->type, sizeof f->type, "%s", key);
      f->n = 0;
    }
    if (f && f->n < FIRST_CALL_SAMPLES) {
      f->bytes[f->n] = sl_cost_work(&run->plan->nodes[i].cost, false);
      f->seconds[f->n++] = extra;
    }
  }
  c->n_warm = 0;
}

/* The first call of rate key `key` (its own samples, or for a bare type
 * its dtypes'), fitted as a + b x bytes up to the largest extra
 * (sl_cost_fit_first_call). */
static void first_call_of(const calibration *c, const char *key, sl_cost_rate *r) {
  double x[CALIBRATE_MAX_FIRST], y[CALIBRATE_MAX_FIRST];
  int n = 0;
  for (int k = 0; k < c->n_first; k++) {
    const first_call *f = &c->first[k];
    if (!sl_cost_key_of_type(f->type, key)) continue;
    for (int q = 0; q < f->n && n < CALIBRATE_MAX_FIRST; q++) x[n] = f->bytes[q], y[n++] = f->seconds[q];
  }
  sl_cost_fit_first_call(x, y, n, &r->first_call_seconds, &r->first_call_seconds_per_byte,
                         &r->first_call_seconds_most, &r->first_call_bytes_least);
}

/* Runs pipeline `file` with `sets` and `chunk`; keeps the run and adds a
 * sample per node; the run's seconds in *seconds. */
static sl_code run_one(calibration *c, const char *file, const sl_setting *sets, size_t n_sets,
                       int64_t chunk, double *seconds, sl_run **kept, sl_error *err) {
  if (c->n_runs == SL_COUNT_OF(c->runs)) return sl_fail(err, SL_ERR_INTERNAL, "too many calibration runs");
  sl_run *run = &c->runs[c->n_runs];
  sl_code rc = calibration_run(c, file, sets, n_sets, chunk, run, err);
  c->n_runs++;
  if (rc != SL_OK) return rc;
  const sl_plan *p = run->plan;
  const sl_graph *g = p->graph;
  if (c->n_warm) note_first_calls(c, run);
  double in_levels = 0;
  for (int l = 0; l < p->n_levels; l++) in_levels += run->result.level_seconds[l];
  double *residual = &c->overhead_residuals[c->n_runs - 1];
  *residual = run->result.seconds - in_levels;
  *seconds = run->result.seconds;
  if (!sl_resize(&c->samples, (size_t)(c->n_samples + g->n_nodes), sizeof *c->samples))
    return sl_fail_nomem(err, "the calibration's samples");
  sample *s = &c->samples[c->n_samples];
  c->n_samples += g->n_nodes;
  for (int i = 0; i < g->n_nodes; i++) {
    sl_cost_rate_key(&g->nodes[i], s[i].type, sizeof s[i].type);
    s[i].calls = p->nodes[i].calls;
    s[i].cost = p->nodes[i].cost;
    s[i].seconds = sl_report_node_seconds(p, &run->result, i);
  }
  /* the same run again: each node's, the run's and its overhead's least */
  for (int r = 1; r < CALIBRATE_REPEATS && rc == SL_OK; r++) {
    sl_run again;
    rc = calibration_run(c, file, sets, n_sets, chunk, &again, err);
    if (rc == SL_OK && again.plan->graph->n_nodes != g->n_nodes)
      rc = sl_fail(err, SL_ERR_INTERNAL, "calibration: a repeated run planned another graph");
    for (int i = 0; rc == SL_OK && i < g->n_nodes; i++)
      s[i].seconds = fmin(s[i].seconds, sl_report_node_seconds(again.plan, &again.result, i));
    if (rc == SL_OK) {
      double levels = 0;
      for (int l = 0; l < again.plan->n_levels; l++) levels += again.result.level_seconds[l];
      *residual = fmin(*residual, again.result.seconds - levels);
      *seconds = fmin(*seconds, again.result.seconds);
    }
    sl_run_free(&again);
  }
  c->run_seconds[c->n_runs - 1] = *seconds;
  int k = 0; /* the kept types' samples (calibration.only) */
  for (int i = 0; i < g->n_nodes; i++)
    if (kept_type(c, s[i].type)) s[k++] = s[i];
  c->n_samples -= g->n_nodes - k;
  if (kept) *kept = run;
  return rc;
}

/* The host workers' side-by-side read: each sums its blocks of a buffer
 * larger than the caches, as a node streaming the resident acquisition
 * reads it. */
#define READ_BLOCK_BYTES ((size_t)64 << 10)
typedef struct read_job {
  const uint64_t *x;
  uint64_t *sums; /* a line per worker, so that the reads are not dead code */
} read_job;

static void read_blocks(void *ctx, int64_t begin, int64_t end, int worker) {
  read_job *j = ctx;
  const uint64_t *x = j->x + (size_t)begin * (READ_BLOCK_BYTES / 8);
  const size_t n = (size_t)(end - begin) * (READ_BLOCK_BYTES / 8);
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) a += x[i], b += x[i + 1], c += x[i + 2], d += x[i + 3];
  j->sums[8 * worker] += a + b + c + d;
}

/* The median of three samples (sorts them). */
static double median3(double t[3]) {
  qsort(t, 3, sizeof *t, sl_compare_doubles);
  return t[1];
}

/* The first touch of a fresh buffer (zeroing it) less zeroing it again,
 * per byte; the buffer is given back after. */
static sl_code first_touch_sample(const sl_backend_ops *ops, sl_backend *b, size_t bytes, double *per_byte,
                                  sl_error *err) {
  void *z = NULL;
  sl_code rc = ops->alloc(b, bytes, &z, err);
  double t_fresh = sl_now();
  if (rc == SL_OK) rc = ops->zero(b, z, bytes, err);
  if (rc == SL_OK) rc = ops->sync(b, err);
  t_fresh = sl_now() - t_fresh;
  double t_warm = sl_now();
  if (rc == SL_OK) rc = ops->zero(b, z, bytes, err);
  if (rc == SL_OK) rc = ops->sync(b, err);
  t_warm = sl_now() - t_warm;
  if (z) ops->free(b, z, bytes);
  *per_byte = fmax(0, t_fresh - t_warm) / (double)bytes;
  return rc;
}

/* Device backends: the first touch of fresh host memory, per byte (the
 * median of three fresh mappings: writing one against writing it again),
 * what the executor's host memory for host nodes costs a fresh process
 * (sl_cost_profile.host_first_touch_seconds_per_byte). Mapped here rather
 * than allocated, so that each sample is fresh whatever the allocator
 * keeps; the executor's buffers of a megabyte and more are mappings too. */
static sl_code measure_host_first_touch(size_t bytes, double *per_byte, sl_error *err) {
  double touch[3];
  for (int k = 0; k < 3; k++) {
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return sl_fail(err, SL_ERR_NOMEM, "cannot map %zu bytes to time their first touch", bytes);
    double t_fresh = sl_now();
    memset(m, 1, bytes);
    t_fresh = sl_now() - t_fresh;
    double t_warm = sl_now();
    memset(m, 2, bytes);
    t_warm = sl_now() - t_warm;
    touch[k] = fmax(0, t_fresh - t_warm) / (double)bytes;
    munmap(m, bytes); /* m escapes to munmap: both memsets stay */
  }
  *per_byte = median3(touch);
  return SL_OK;
}

/* Bandwidth: a copy between two device buffers, read + written bytes per
 * second; on the CPU also the workers reading one buffer side by side
 * (read_bps; on a device the copy's). And what a run pays for its pooled
 * buffers outside its nodes: taking the two buffers from the backend and
 * giving them back once touched (unmapping their pages), per byte. */
static sl_code measure_bandwidth(calibration *c, size_t bytes, double *bps, double *read_bps,
                                 double *pool_per_byte, double *first_touch_per_byte, sl_error *err) {
  const sl_backend_ops *ops = sl_backend_ops_for(c->kind);
  sl_backend *b = NULL;
  void *x = NULL, *y = NULL;
  sl_code rc = ops->create(c->o->threads, &b, err);
  double t_alloc = sl_now();
  if (rc == SL_OK) rc = ops->alloc(b, bytes, &x, err);
  if (rc == SL_OK) rc = ops->alloc(b, bytes, &y, err);
  t_alloc = sl_now() - t_alloc;
  /* The first touch: the median of three fresh buffers (one sample ranged
   * 0.5-3.1 ns a byte over calibrations of the dev VM, and a small run's
   * estimate is mostly its pooled buffers' pages). */
  double touch[3] = {0, 0, 0};
  for (int k = 0; k < 3 && rc == SL_OK; k++) rc = first_touch_sample(ops, b, bytes, &touch[k], err);
  if (rc == SL_OK) rc = ops->zero(b, x, bytes, err);
  if (rc == SL_OK) rc = ops->copy(b, y, x, bytes, err); /* first touch of y */
  if (rc == SL_OK) rc = ops->sync(b, err);
  double best = 0;
  for (int rep = 0; rep < 5 && rc == SL_OK; rep++) {
    double t0 = sl_now();
    rc = ops->copy(b, y, x, bytes, err);
    if (rc == SL_OK) rc = ops->sync(b, err);
    double t = sl_now() - t0;
    if (rc == SL_OK && t > 0 && 2.0 * (double)bytes / t > best) best = 2.0 * (double)bytes / t;
  }
  double best_read = best;
  if (c->kind == SL_BACKEND_CPU && rc == SL_OK && b->ops->parallel_for) {
    read_job j = {x, calloc((size_t)(b->ops->workers ? b->ops->workers(b) : 1) * 8, sizeof(uint64_t))};
    if (!j.sums) rc = sl_fail_nomem(err, "the read measurement");
    best_read = 0;
    for (int rep = 0; rep < 5 && j.sums; rep++) {
      double t0 = sl_now();
      b->ops->parallel_for(b, (int64_t)(bytes / READ_BLOCK_BYTES), 1, read_blocks, &j);
      double t = sl_now() - t0;
      if (t > 0 && (double)bytes / t > best_read) best_read = (double)bytes / t;
    }
    free(j.sums);
  }
  if (b && rc == SL_OK) rc = ops->sync(b, err);
  double t_free = sl_now();
  if (y) ops->free(b, y, bytes);
  if (x) ops->free(b, x, bytes);
  t_free = sl_now() - t_free;
  if (b) ops->destroy(b);
  if (rc == SL_OK) {
    *bps = best, *read_bps = best_read, *pool_per_byte = (t_alloc + t_free) / (2.0 * (double)bytes);
    *first_touch_per_byte = median3(touch);
  }
  return rc;
}

/* Device backends: the background load of the node types' device libraries
 * (sl_node_desc.device_warm_up_begin: cuFFT) as a run meets it. A run
 * starts the backend's warm-up (its context) and the nodes' at about the
 * same time, creates the backend (joining the context) and then executes;
 * what is left of the libraries' load once the backend is up is what a
 * first call can wait for (the plan's sl_cost_warm_up_wait). Measured here
 * first, before anything in this process has made a context or loaded a
 * library: both load once per process. */
static sl_code measure_library_load(calibration *c, double *seconds, sl_error *err) {
  *seconds = 0;
  const sl_backend_ops *ops = sl_backend_ops_for(c->kind);
  if (c->kind == SL_BACKEND_CPU || !ops) return SL_OK;
  int n = 0;
  const sl_node_desc **all = sl_registry_list(sl_nodes_registry(), &n);
  if (!all) return sl_fail_nomem(err, "the node types");
  if (ops->warm_up_begin) ops->warm_up_begin();
  for (int k = 0; k < n; k++)
    if (all[k]->device_warm_up_begin) all[k]->device_warm_up_begin();
  if (ops->warm_up_wait) ops->warm_up_wait();
  double t_backend = sl_now();
  for (int k = 0; k < n; k++)
    if (all[k]->device_warm_up_wait) all[k]->device_warm_up_wait();
  *seconds = sl_now() - t_backend;
  free(all);
  return SL_OK;
}

/* Per-call and per-batch overheads: a pipeline of one-position chunks with
 * almost no work. */
static sl_code measure_overheads(calibration *c, int64_t n, sl_cost_profile *out, sl_error *err) {
  char path[512], nv[32];
  sl_code rc = write_file(c->dir, "overhead.yaml", k_overhead_yaml, path, sizeof path, err);
  snprintf(nv, sizeof nv, "%lld", (long long)n);
  sl_setting sets[] = {{"n", nv}};
  double seconds;
  sl_run *run = NULL;
  if (rc == SL_OK) rc = run_one(c, path, sets, 1, 1, &seconds, &run, err);
  if (rc != SL_OK) return rc;
  const sl_plan *p = run->plan;
  double in_nodes = 0, in_levels = 0;
  int64_t calls = 0;
  for (int i = 0; i < p->graph->n_nodes; i++) {
    in_nodes += sl_report_node_seconds(p, &run->result, i);
    calls += p->nodes[i].calls;
  }
  for (int l = 0; l < p->n_levels; l++) in_levels += run->result.level_seconds[l];
  out->call_seconds = calls > 0 ? in_nodes / (double)calls : 0;
  out->batch_seconds = p->batches > 0 && in_levels > in_nodes ? (in_levels - in_nodes) / (double)p->batches : 0;
  return SL_OK;
}

/* Every node type's rate from its samples; iterate loops afterwards, from
 * what their bodies cost under the fitted rates. */
static sl_code fit_rates(calibration *c, sl_cost_profile *prof, sl_error *err) {
  sample *s = c->samples;
  /* Each "type/dtype" from its samples, then each type from all of its own. */
  for (int bare = 0; bare < 2; bare++)
    for (int k = 0; k < c->n_samples; k++) {
      char key[48];
      size_t klen = bare ? strcspn(s[k].type, "/") : strlen(s[k].type);
      snprintf(key, sizeof key, "%.*s", (int)klen, s[k].type);
      if (!strncmp(key, "iterate", 7) || sl_cost_profile_rate(prof, key)) continue;
      sample *same = sl_calloc((size_t)c->n_samples, sizeof *same);
      if (!same) return sl_fail_nomem(err, "the calibration's fit");
      int n = 0;
      bool per_op = false;
      for (int q = k; q < c->n_samples; q++)
        if (sl_cost_key_of_type(s[q].type, key)) same[n++] = s[q], per_op |= s[q].cost.ops > 0;
      sl_cost_rate r;
      memset(&r, 0, sizeof r);
      snprintf(r.type, sizeof r.type, "%s", key);
      r.per_op = per_op;
      bool fitted = sl_cost_fit_rate(same, n, per_op, prof->call_seconds, prof->bytes_per_second, &r);
      free(same);
      first_call_of(c, key, &r);
      if (!fitted) return sl_fail_nomem(err, "the calibration's fit");
      sl_cost_profile_set_rate(prof, &r);
    }
  /* A loop: its measured time less its bodies' estimates, fitted per
   * iteration and per byte carried (copied in and out each iteration). */
  sample loops[8];
  int n_loops = 0;
  for (int r = 0; r < c->n_runs; r++) {
    const sl_plan *p = c->runs[r].plan;
    if (!p || !c->runs[r].executed) continue;
    for (int i = 0; i < p->graph->n_nodes && n_loops < 8; i++) {
      const sl_node *n = &p->graph->nodes[i];
      if (!n->body || n->times <= 0) continue;
      sl_plan_opts po;
      memset(&po, 0, sizeof po);
      po.caps = p->caps;
      po.profile = prof;
      sl_plan *body = NULL;
      sl_error ignored;
      if (sl_plan_build(n->body, &po, &body, &ignored) != SL_OK) continue;
      double body_s = sl_plan_loop_seconds(body, n->times);
      sl_plan_free(body);
      sample *l = &loops[n_loops++];
      memset(l, 0, sizeof *l);
      l->calls = n->times;
      sl_plan_loop_carry_cost(n, &l->cost);
      double t = sl_report_node_seconds(p, &c->runs[r].result, i) - body_s;
      l->seconds = t > 0 ? t : 0;
    }
  }
  if (n_loops) {
    sl_cost_rate r;
    memset(&r, 0, sizeof r);
    snprintf(r.type, sizeof r.type, "iterate");
    if (!sl_cost_fit_rate(loops, n_loops, false, prof->call_seconds, 0, &r))
      return sl_fail_nomem(err, "the calibration's fit");
    /* the loops' iterations differ in number and bytes: both terms fit */
    sl_cost_profile_set_rate(prof, &r);
  }
  /* The run's own overhead: the least that a run spent outside its levels,
   * less its pooled buffers' share (the plan adds that per byte): what
   * every run pays. Others spend more there (on the H200, 0.4-0.5 ms for
   * the smallest runs, 1-1.6 ms for runs with more buffers and device
   * tables, 0.4-1.6 ms at the same node count); the median of them priced
   * iterate_affine's whole 0.9 ms run at 2.5 ms. */
  double least = -1;
  for (int r = 0; r < c->n_runs; r++)
    if (c->runs[r].executed) {
      double res = fmax(0, c->overhead_residuals[r] - (double)sl_plan_pooled_bytes(c->runs[r].plan) * prof->pool_seconds_per_byte);
      if (least < 0 || res < least) least = res;
    }
  if (least >= 0) prof->run_seconds = least;
  /* Ops of node types without a rate: the simplest kernel's. */
  const sl_cost_rate *affine = sl_cost_profile_rate(prof, "affine/f32");
  if (affine && affine->per_op && affine->seconds_per_unit > 0) prof->ops_per_second = 1.0 / affine->seconds_per_unit;
  return SL_OK;
}

/* Runs `yaml` at a small size and at one scaled so that it takes about
 * `share` seconds. `size_of(scale)` writes its sets for an area `scale`. */
typedef void (*size_fn)(double scale, char *value, size_t len);

/* A power of two: dpc and idpc transform the mirrored scan (2 x side) with
 * cuFFT, whose first plan of a size with other prime factors loads more of
 * its kernels (0.1-0.3 s on the H200, once per process): a side of 49 put
 * that load into dpc's fitted per-op rate, which then estimated a 256 x 256
 * scan's dpc at 0.7 s against 0.002 s. Power-of-two scans are the usual
 * ones; others pay that load unmodelled (docs/cli.md). */
static void stem_size(double scale, char *v, size_t len) {
  int side = 1 << (int)lround(log2(8.0 * sqrt(scale)));
  snprintf(v, len, "[%d, %d]", side, side);
}

/* 64 x 64 and powers of two up to 512 x 512 (stem_size says why powers of two). */
static void fields_size(double scale, char *v, size_t len) {
  int side = 1 << (int)lround(log2(64.0 * sqrt(scale)));
  snprintf(v, len, "%d", side < 512 ? side : 512);
}

/* 32 x 32 and powers of two up to 128 x 128, the parallax's largest fit
 * window (the simulation takes most of a run: 1.2 s at 128 x 128 on two
 * of the build VM's cores). */
static void parallax_size(double scale, char *v, size_t len) {
  int side = 1 << (int)lround(log2(32.0 * sqrt(scale)));
  side = side < 128 ? side : 128;
  snprintf(v, len, "[%d, %d]", side, side);
}

/* 128 x 128 and up to 1024 x 1024 (the products' scans). */
static void image_size(double scale, char *v, size_t len) {
  snprintf(v, len, "%d", (int)fmin(1024, 128 * lround(sqrt(scale))));
}

static void basic_size(double scale, char *v, size_t len) {
  snprintf(v, len, "%lld", (long long)llround(256.0 * scale));
}

static sl_code two_sizes(calibration *c, const char *name, const char *yaml, const char *param,
                         size_fn size, double share, sl_error *err) {
  char path[512], v[64], times[16];
  sl_code rc = write_file(c->dir, name, yaml, path, sizeof path, err);
  if (rc != SL_OK) return rc;
  double t_small = 0, t_big;
  size(1, v, sizeof v);
  snprintf(times, sizeof times, "4");
  sl_setting sets[] = {{param, v}, {"times", times}};
  size_t n_sets = strcmp(param, "n") ? 1 : 2;
  rc = warm_up(c, path, sets, n_sets, 0, err);
  if (rc == SL_OK) rc = run_one(c, path, sets, n_sets, 0, &t_small, NULL, err);
  if (rc != SL_OK) return rc;
  double scale = t_small > 0 ? share / t_small : 64;
  scale = scale < 4 ? 4 : scale > 1024 ? 1024 : scale;
  size(scale, v, sizeof v);
  snprintf(times, sizeof times, "16");
  return run_one(c, path, sets, n_sets, 0, &t_big, NULL, err);
}

/* Pipeline `name` (`yaml`) on a given acquisition: automatic chunks, then a
 * quarter of them (more calls for the same work). The preview averages its
 * default 256 first frames, then 32 (on every acquisition of 256 frames or
 * more it would read the same frames each time, and its setup could not be
 * told from its rate). */
static sl_code detector_pipeline_runs(calibration *c, const char *input, const char *name,
                                      const char *yaml, sl_error *err) {
  char path[512];
  sl_code rc = write_file(c->dir, name, yaml, path, sizeof path, err);
  sl_setting sets[CLI_MAX_SETS + 2] = {{"input", input}, {"preview_frames", "256"}};
  size_t n_sets = 2;
  for (int k = 0; k < c->o->n_sets; k++) sets[n_sets++] = c->o->sets[k];
  double t;
  sl_run *run = NULL;
  if (rc == SL_OK) rc = warm_up(c, path, sets, n_sets, 0, err);
  if (rc == SL_OK) rc = run_one(c, path, sets, n_sets, 0, &t, &run, err);
  if (rc != SL_OK) return rc;
  int64_t chunk = run->plan->chunk_positions / 4;
  sets[1].value = "32";
  /* A fresh process's first calls at this size too: with only the
   * 256-frame samples, all of the same bytes, the preview's first-call fit
   * had no slope and gave every acquisition the largest extra (2.4 ms on
   * the dev VM, where a run's preview of 256 frames of 48 x 40 took about
   * 1.8 ms in all); what grows with the frames read (the window faulted
   * in) now shows as a part per byte where it is there to see. */
  first_run_in_child(c, path, sets, n_sets, chunk > 0 ? chunk : 1);
  return run_one(c, path, sets, n_sets, chunk > 0 ? chunk : 1, &t, NULL, err);
}

/* The detector chain and the products on a given acquisition, in the
 * shipped pipelines' shapes (k_products_yaml, k_pattern_yaml, k_com_yaml),
 * FEM's variance, and the stored chunks copied (k_stored_yaml), which an
 * acquisition whose data files end inside a stored chunk cannot be: its
 * refusal skips those samples and says so. */
static sl_code detector_runs(calibration *c, const char *input, sl_error *err) {
  char tpl[512];
  sl_code rc = write_file(c->dir, "detector_input.yaml", k_detector_input_template, tpl, sizeof tpl, err);
  if (rc == SL_OK) rc = detector_pipeline_runs(c, input, "products.yaml", k_products_yaml, err);
  if (rc == SL_OK) rc = detector_pipeline_runs(c, input, "pattern.yaml", k_pattern_yaml, err);
  if (rc == SL_OK) rc = detector_pipeline_runs(c, input, "com.yaml", k_com_yaml, err);
  if (rc == SL_OK) rc = detector_pipeline_runs(c, input, "variance.yaml", k_variance_yaml, err);
  if (rc != SL_OK) return rc;
  sl_error why;
  sl_error_clear(&why);
  rc = detector_pipeline_runs(c, input, "stored.yaml", k_stored_yaml, &why);
  if (rc == SL_ERR_PIPELINE || rc == SL_ERR_FORMAT) {
    fprintf(stderr, "sluice calibrate: no samples of stored chunks written from %s: %s\n", input, why.msg);
    return SL_OK;
  }
  if (rc != SL_OK) *err = why;
  return rc;
}

static void print_table(const calibration *c, const sl_cost_profile *p, const char *path) {
  printf("calibrated %s (%s), %d thread%s\n", sl_backend_kind_name(p->kind), p->device, p->threads,
         p->threads == 1 ? "" : "s");
  printf("  copy bandwidth   %8.2f GB/s\n", p->bytes_per_second / 1e9);
  if (p->kind == SL_BACKEND_CPU)
    printf("  read bandwidth   %8.2f GB/s (the workers reading side by side)\n", p->read_bytes_per_second / 1e9);
  printf("  kernel call      %8.2f us (node types without their own rate)\n", p->call_seconds * 1e6);
  printf("  batch            %8.2f us\n", p->batch_seconds * 1e6);
  printf("  run              %8.2f us\n", p->run_seconds * 1e6);
  printf("  pooled buffers   %8.4f ns per byte (taken and given back, outside the nodes)\n",
         p->pool_seconds_per_byte * 1e9);
  printf("  first touch      %8.4f ns per byte (fresh buffers faulted in by the kernel that writes them first)\n",
         p->first_touch_seconds_per_byte * 1e9);
  if (p->kind != SL_BACKEND_CPU) {
    printf("  host first touch %8.4f ns per byte (host nodes' scratch and workspace, faulted in by the first to write them)\n",
           p->host_first_touch_seconds_per_byte * 1e9);
    printf("  library load     %8.2f ms (left once the backend is up; a first cuFFT call waits for it)\n",
           p->library_load_seconds * 1e3);
    if (c->first_process_load >= 0)
      printf("                   %8.2f ms in a process before this one (from disk when the page cache was cold)\n",
             c->first_process_load * 1e3);
  }
  printf("  %-24s %5s %12s %14s %8s %10s  %14s %14s\n", "node type", "unit", "per call us", "per unit ns", "samples",
         "measured s", "first call us", "+ ns a byte");
  for (int r = 0; r < p->n_rates; r++) {
    const sl_cost_rate *rt = &p->rates[r];
    int n = 0;
    double t = 0;
    /* the samples the rate was fitted on (fit_rates): a bare type's are
     * all of its keys', a key's its own (dpc/f64's are not its variants') */
    for (int k = 0; k < c->n_samples; k++)
      if (sl_cost_key_of_type(c->samples[k].type, rt->type)) n++, t += c->samples[k].seconds;
    printf("  %-24s %5s %12.2f %14.4f %8d %10.4f", rt->type, rt->per_op ? "op" : "byte", rt->call_seconds * 1e6,
           rt->seconds_per_unit * 1e9, n, t);
    printf("  %14.2f %14.5f\n", rt->first_call_seconds * 1e6, rt->first_call_seconds_per_byte * 1e9);
  }
  printf("wrote %s\n", path);
}

/* The kept runs (--samples prints them), the samples and first calls. */
static void calibration_free(calibration *c) {
  for (int r = 0; r < c->n_runs; r++) sl_run_free(&c->runs[r]);
  free(c->samples), free(c->warm);
}

/* What the fit was given: every node of every measured run. */
static void print_samples(const calibration *c) {
  printf("  %-24s %10s %16s %12s\n", "sample", "calls", "work (ops|bytes)", "seconds");
  for (int k = 0; k < c->n_samples; k++) {
    const sample *s = &c->samples[k];
    printf("  %-24s %10lld %16.0f %12.6f\n", s->type, (long long)s->calls,
           sl_cost_work(&s->cost, s->cost.ops > 0), s->seconds);
  }
  /* each rate key's extras in a fresh process's first run, with the bytes
   * its first node moved in a call (first_call_of fits them) */
  printf("  %-24s %10s %16s %12s\n", "first call", "", "bytes", "extra s");
  for (int k = 0; k < c->n_first; k++)
    for (int q = 0; q < c->first[k].n; q++)
      printf("  %-24s %10s %16.0f %12.6f\n", c->first[k].type, "", c->first[k].bytes[q], c->first[k].seconds[q]);
  /* each run's time outside its levels, which run_seconds is the least
   * of (less the pooled bytes' share), and the scan it streamed (0: none) */
  printf("  %-24s %6s %10s %16s %12s %12s\n", "run", "nodes", "positions", "pooled bytes", "seconds", "outside");
  for (int r = 0; r < c->n_runs; r++)
    if (c->runs[r].executed) {
      const sl_plan *p = c->runs[r].plan;
      printf("  %-24s %6d %10lld %16lld %12.6f %12.6f\n", c->runs[r].spec->name, p->graph->n_nodes,
             (long long)p->positions, (long long)sl_plan_pooled_bytes(p), c->run_seconds[r], c->overhead_residuals[r]);
    }
}

/* calibrate's own options (cli_parse knows the rest). The children it runs
 * of itself take --libraries-only (load_libraries_in_child) or --first-run
 * FILE with --first-chunk N and --first-set NAME=VALUE... (first_run_in_child). */
typedef struct own_opts {
  const char *inputs[CALIBRATE_MAX_INPUTS];
  int n_inputs;
  double budget;
  bool libraries_only, samples;
  const char *first_run;
  int64_t first_chunk;
  sl_setting first_sets[CLI_MAX_SETS + 2];
  int n_first_sets;
} own_opts;

/* Takes own_opts' options out of argv. */
static int own_options(int *argc, char **argv, own_opts *o) {
  int w = 1;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--libraries-only") || !strcmp(a, "--samples")) {
      *(a[2] == 'l' ? &o->libraries_only : &o->samples) = true;
      continue;
    }
    bool valued = !strcmp(a, "--input") || !strcmp(a, "--budget") || !strcmp(a, "--first-run") ||
                  !strcmp(a, "--first-chunk") || !strcmp(a, "--first-set");
    if (!valued) {
      argv[w++] = argv[i];
      continue;
    }
    if (i + 1 >= *argc) {
      fprintf(stderr, "sluice: error: %s needs a value\n(see --help)\n", a);
      return 2;
    }
    char *v = argv[++i], *e;
    if (!strcmp(a, "--input")) {
      if (o->n_inputs == CALIBRATE_MAX_INPUTS) {
        fprintf(stderr, "sluice: error: at most %d --input files\n(see --help)\n", CALIBRATE_MAX_INPUTS);
        return 2;
      }
      o->inputs[o->n_inputs++] = v;
    } else if (!strcmp(a, "--budget")) {
      o->budget = strtod(v, &e);
      if (*e || !(o->budget > 0) || o->budget > 3600) {
        fprintf(stderr, "sluice: error: --budget needs seconds (0 < s <= 3600)\n(see --help)\n");
        return 2;
      }
    } else if (!strcmp(a, "--first-run")) {
      o->first_run = v;
    } else if (!strcmp(a, "--first-chunk")) {
      o->first_chunk = strtoll(v, &e, 10);
      if (*e || o->first_chunk < 0) {
        fprintf(stderr, "sluice: error: --first-chunk needs positions (>= 0)\n");
        return 2;
      }
    } else {
      char *eq = strchr(v, '=');
      if (!eq || o->n_first_sets == (int)SL_COUNT_OF(o->first_sets)) {
        fprintf(stderr, "sluice: error: --first-set needs NAME=VALUE\n");
        return 2;
      }
      *eq = 0;
      o->first_sets[o->n_first_sets++] = (sl_setting){v, eq + 1};
    }
  }
  *argc = w;
  return 0;
}

/* Every node type's device library (sl_node_desc.device_warm_up_begin:
 * cuFFT) loaded, joined. */
static void device_libraries_loaded(void) {
  const sl_node_registry *r = sl_nodes_registry();
  for (int pass = 0; pass < 2; pass++) /* all begun, then all joined */
    for (int f = 0; f < r->n_families; f++)
      for (int k = 0; k < r->families[f]->count; k++) {
        const sl_node_desc *d = r->families[f]->nodes[k];
        if (pass == 0 && d->device_warm_up_begin) d->device_warm_up_begin();
        if (pass == 1 && d->device_warm_up_wait) d->device_warm_up_wait();
      }
}

/* The child of first_run_in_child: runs `file` once in this fresh process
 * and prints each node's rate key and seconds, in graph order. On a device
 * its libraries are loaded first: a run's plan prices that load apart (the
 * wait for what is left of library_load_seconds, estimated again as
 * execution starts), so a cuFFT user's first call here is the rest (its
 * sizes' plans, its kernels' first launches): on the H200 dpc's first call
 * at 256 x 256 took 1.8-2.6 ms against its 1.2 ms estimate with the load
 * long done, because that rest had been priced at nothing. */
static int first_run_only(calibration *c, const own_opts *own) {
  if (c->kind != SL_BACKEND_CPU) device_libraries_loaded();
  const char *tmp = getenv("TMPDIR");
  snprintf(c->dir, sizeof c->dir, "%s/sluice-first-run-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(c->dir)) return 1;
  sl_error err;
  sl_error_clear(&err);
  sl_run run;
  sl_code rc = calibration_run(c, own->first_run, own->first_sets, (size_t)own->n_first_sets, own->first_chunk,
                               &run, &err);
  for (int i = 0; rc == SL_OK && i < run.plan->graph->n_nodes; i++) {
    char key[48];
    sl_cost_rate_key(&run.plan->graph->nodes[i], key, sizeof key);
    printf("%s %.9f\n", key, sl_report_node_seconds(run.plan, &run.result, i));
  }
  sl_run_free(&run);
  char outputs[600];
  snprintf(outputs, sizeof outputs, "%s/outputs", c->dir);
  rmdir(outputs);
  rmdir(c->dir);
  return rc == SL_OK ? 0 : cli_fail(&err);
}

/* The folder calibrate made (mkdtemp) with the pipeline files it wrote
 * there: every file in it, then the folder. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      remove(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

int cmd_calibrate(int argc, char **argv) {
  own_opts own = {.budget = 20};
  int rc = own_options(&argc, argv, &own);
  if (rc) return rc;
  cli_opts o;
  rc = cli_parse(argc, argv, CLI_SET | CLI_BACKEND | CLI_THREADS | CLI_OUT | CLI_JSON | CLI_SETTING, false,
                 cli_help_calibrate, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.file) {
    fprintf(stderr, "sluice: error: unexpected argument '%s'\n(see --help)\n", o.file);
    return 2;
  }
  calibration c;
  memset(&c, 0, sizeof c);
  c.o = &o;
  sl_error err;
  sl_error_clear(&err);
  sl_code st = sl_backend_select(o.backend, &c.kind, &err);
  if (st == SL_OK) st = sl_run_caps(sl_backend_ops_for(c.kind), o.threads, &c.caps, &err);
  if (st != SL_OK) return cli_fail(&err);
  if (own.first_run) {
    sl_cost_profile_builtin(&c.caps, &c.builtin);
    return first_run_only(&c, &own);
  }
  if (own.libraries_only) {
    double seconds;
    st = measure_library_load(&c, &seconds, &err);
    if (st != SL_OK) return cli_fail(&err);
    printf("%.9f\n", seconds);
    return 0;
  }
  c.argc = argc, c.argv = argv;
  c.first_process_load = c.kind == SL_BACKEND_CPU ? -1 : load_libraries_in_child(&c);
  if (o.backend == SL_BACKEND_AUTO && !o.json)
    fprintf(stderr, "sluice: backend auto: using %s (%s)\n", sl_backend_kind_name(c.kind), c.caps.device);
  char path[1024];
  if (o.out_dir) snprintf(path, sizeof path, "%s", o.out_dir);
  else if (!sl_cost_cache_path(&c.caps, path, sizeof path)) {
    fprintf(stderr, "sluice: error: no cache folder (neither XDG_CACHE_HOME nor HOME is set); use --out FILE\n");
    return 1;
  }
  sl_cost_profile_builtin(&c.caps, &c.builtin);
  sl_cost_profile prof = c.builtin;
  const char *tmp = getenv("TMPDIR");
  snprintf(c.dir, sizeof c.dir, "%s/sluice-calibrate-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(c.dir)) {
    fprintf(stderr, "sluice: error: cannot create a folder under %s\n", tmp && tmp[0] ? tmp : "/tmp");
    return 1;
  }
  /* Sizes follow the budget: a copy of budget x 16 MiB (at most 256 MiB),
   * overheads over budget x 20 chunks, and the fitted pipelines' larger runs
   * take about a quarter of the budget each. */
  size_t copy_bytes = (size_t)fmin(256.0, fmax(4.0, 16.0 * own.budget)) << 20;
  int64_t chunks = (int64_t)fmin(2000.0, fmax(50.0, 20.0 * own.budget));
  char step[512];
  st = measure_library_load(&c, &prof.library_load_seconds, &err);
  if (st == SL_OK) st = measure_bandwidth(&c, copy_bytes, &prof.bytes_per_second, &prof.read_bytes_per_second,
                                        &prof.pool_seconds_per_byte,
                                        &prof.first_touch_seconds_per_byte, &err);
  if (st == SL_OK && c.kind != SL_BACKEND_CPU)
    st = measure_host_first_touch(copy_bytes, &prof.host_first_touch_seconds_per_byte, &err);
  c.host_first_touch = prof.host_first_touch_seconds_per_byte;
  if (st == SL_OK) st = measure_overheads(&c, chunks, &prof, &err);
  if (st == SL_OK) st = write_file(c.dir, "step.yaml", k_step_yaml, step, sizeof step, &err);
  if (st == SL_OK) st = two_sizes(&c, "basic.yaml", k_basic_yaml, "n", basic_size, own.budget / 8, &err);
  /* With an acquisition, virtual_detectors' rate is fitted on its frames
   * alone (detector_runs): stem.yaml's synthetic 96 x 96 frames cost
   * 1.5-2.6 times as much a pixel (the per-frame part of the sweep) and,
   * its largest samples, decided the fit: the H200 host's CPU (16
   * threads) estimated the 256 x 256 products' node at 2.7 times its
   * 192 x 192 frames' time, the dev VM's at 2 (a node that reads a large
   * resident tensor is priced at the read bandwidth: plan_cold_reads). */
  static const char *const acquisition_types[] = {"virtual_detectors", NULL};
  c.except = own.n_inputs > 0 ? acquisition_types : NULL;
  if (st == SL_OK) st = two_sizes(&c, "stem.yaml", k_stem_yaml, "scan", stem_size, own.budget / 4, &err);
  c.except = NULL;
  if (st == SL_OK) st = two_sizes(&c, "image.yaml", k_image_yaml, "side", image_size, own.budget / 16, &err);
  static const char *const fields_types[] = {"dpc", "idpc", NULL};
  c.only = fields_types;
  if (st == SL_OK) st = two_sizes(&c, "fields.yaml", k_fields_yaml, "side", fields_size, own.budget / 16, &err);
  static const char *const parallax_types[] = {"dpc", NULL};
  c.only = parallax_types;
  if (st == SL_OK)
    st = two_sizes(&c, "parallax.yaml", k_parallax_yaml, "scan", parallax_size, own.budget / 16, &err);
  c.only = NULL;
  for (int k = 0; k < own.n_inputs && st == SL_OK; k++) st = detector_runs(&c, own.inputs[k], &err);
  if (st == SL_OK) st = fit_rates(&c, &prof, &err);
  remove_dir(c.dir);
  if (st != SL_OK) {
    calibration_free(&c);
    return cli_fail(&err);
  }
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(prof.created, sizeof prof.created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  snprintf(prof.source, sizeof prof.source, "%s", path);
  if (sl_cost_profile_save(path, &prof, &err) != SL_OK) {
    calibration_free(&c);
    return cli_fail(&err);
  }
  if (o.json) {
    sl_json j;
    sl_json_init(&j, stdout, true);
    sl_cost_profile_json(&j, &prof);
    sl_json_finish(&j);
  } else {
    print_table(&c, &prof, path);
    if (own.samples) print_samples(&c);
  }
  calibration_free(&c);
  return 0;
}
