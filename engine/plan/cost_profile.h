/* The cost model's numbers: a throughput profile per backend and device.
 *
 * The planner estimates a node's time as
 *     calls x per-call seconds + work x seconds per unit of work
 * where work is what the node's cost() declares (its ops, or its bytes moved
 * when it declares no ops) and both coefficients are the node type's, as
 * `sluice calibrate` measured them through the real engine on synthetic
 * data. A node type the profile does not know falls back to the bandwidth
 * model: calls x call_seconds + max(bytes / bytes_per_second, ops /
 * ops_per_second). A run adds batch_seconds per batch (a level for one
 * chunk) and run_seconds once.
 *
 * Profiles are cached as JSON under $XDG_CACHE_HOME/sluice (else
 * ~/.cache/sluice), one file per backend, device and thread count; the
 * setting cost_profile picks the cache (default), none (the built-in
 * guesses) or a file. A file that does not parse, or was measured on another
 * backend, device or thread count, is ignored with a warning. */
#ifndef SL_COST_PROFILE_H
#define SL_COST_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/core/device_caps.h"
#include "engine/core/json.h"
#include "engine/core/status.h"
#include "engine/graph/graph.h"

#define SL_COST_MAX_RATES 128
#define SL_COST_PROFILE_FORMAT "sluice-cost-profile"
#define SL_COST_PROFILE_VERSION 1

/* A rate is keyed by node type and the dtype of its first input
 * ("sum/u16": a sum of u16 frames and one of f32 vectors run at different
 * rates), with one per type ("sum") for dtypes not calibrated. */
/* What one node type costs: seconds per call and per unit of declared work. */
typedef struct sl_cost_rate {
  char type[48];
  bool per_op;             /* its work is ops (else bytes moved) */
  double call_seconds;     /* fixed part of each call (launch, setup, plan) */
  double seconds_per_unit; /* per op, or per byte moved */
  double run_seconds;      /* once per run of a node that is called (its
                              first call's setup: pinned windows, plans) */
  double first_call_seconds; /* once per process, on a device backend: the
                              first node of the type pays it (its kernels
                              loaded on their first launch); calibrate's
                              warm-up run against the same run again */
  double first_call_seconds_per_byte; /* and per byte its first call moves
                              (what grows with the input: a source's pinned
                              windows and files, a preview's frames): the
                              first call costs first_call_seconds + this x
                              the node's bytes read and written in a call */
  double first_call_seconds_most; /* with a part per byte: at most this (the
                              largest extra calibrate saw: no extrapolation
                              past its inputs); 0: no bound */
  double first_call_bytes_least; /* the fewest bytes calibrate saw a first
                              call move: below them the extra shrinks in
                              proportion (a run smaller than every input
                              calibrated, no extrapolation of a constant
                              there either); 0: none */
  double run_work_least;   /* the least work of the runs it was fitted on:
                              below it a node on a device pays run_seconds
                              scaled down by its share of it
                              (sl_cost_estimate); 0: none */
} sl_cost_rate;

/* What the first node of a rate pays once per process (sl_cost_rate):
 * first_call_seconds + first_call_seconds_per_byte x its bytes moved in a
 * call, at most first_call_seconds_most when that is set; for a node that
 * moves fewer bytes than first_call_bytes_least, with `host` (a node that
 * runs on the host), that at the least bytes scaled down by its share of
 * them. A device kernel's first launch loads its module, whatever the
 * bytes (1.6 ms for mask_correct's on the H200): not scaled. */
double sl_cost_first_call_seconds(const sl_cost_rate *r, const sl_node_cost *cost, bool host);
/* Fits a first call (sl_cost_rate.first_call_seconds, _per_byte, _most and
 * _bytes_least) to n samples of (bytes moved in a call, extra seconds of a
 * fresh process's first call): the samples of each size taken as their
 * upper median (of two, the larger: with the largest of twelve samples
 * deciding, the H200 host CPU's hdf5_source was fitted at 6.8 ms in one
 * calibration and 0.6-2.2 ms in five). Of four sizes or more, a line that
 * one far-off size cannot move (Siegel's repeated median, lower medians;
 * a, b >= 0),
 * bounded by the line at the largest size: one fresh process's first
 * preview on an H100 host took about 10 ms more than its neighbours, and
 * least squares through it priced every preview at 13 ms against 2-3.
 * Of two or three sizes, least squares with a, b >= 0 (through the origin
 * when the intercept would be negative), bounded by the largest extra;
 * samples that do not grow with the bytes (all of the same size, or a
 * slope of 0 or less) give b = 0 and a their largest: a fresh process pays
 * at least that much at those sizes. *least: the smallest sample's bytes. */
void sl_cost_fit_first_call(const double *bytes, const double *seconds, int n, double *a, double *b,
                            double *most, double *least);

/* The built-in process_bytes (see sl_cost_profile): on the CPU backend, and
 * on a device backend (its context's host side included). On the CPU the
 * shipped pipelines' growth beyond what the engine counts measured
 * 2.0-4.15 MiB on the dev VM (128 x 128 acquisition, 1 and 2 threads;
 * iterate_until and mean_pattern at 1 thread the most): 4 MiB was under it
 * by up to 0.15 MiB. */
#define SL_PROCESS_BYTES_HOST (4.5 * 1048576.0)
#define SL_PROCESS_BYTES_DEVICE (120.0 * 1048576.0)
/* Host memory of each worker thread beyond the first: the stack pages its
 * kernels touch, its thread descriptor and TLS (dev: 11 KiB measured per
 * worker at 16 workers on iterate_until.yaml; with room for deeper stacks). */
#define SL_WORKER_THREAD_BYTES (32 * 1024)

typedef struct sl_cost_profile {
  sl_backend_kind kind;
  char device[128];   /* sl_backend_caps.device */
  int threads;        /* compute units the profile was measured with */
  char created[32];   /* UTC, ISO 8601; "" for the built-in guesses */
  char source[1024];  /* the file it was read from, or "built-in" */
  /* Thread counts of the calibrated profiles a CPU profile was derived
   * from for a count never calibrated (cost_threads.h; source: the nearer
   * one's file); {0, 0}: measured at `threads`, or the built-in guesses. */
  int derived_from[2];
  double bytes_per_second; /* copy bandwidth (bytes read + written per second) */
  /* Bytes a node's workers read per second, side by side, from a buffer
   * larger than the caches (the resident acquisition streamed again): on
   * the CPU all workers summing one buffer (the dev VM's two read 12-15
   * GB/s, not twice one thread's copy; the H200's host's 16 read 84 GB/s);
   * on a device its copy bandwidth. 0 in profiles measured before it was
   * (the plan then takes the copy bandwidth times the workers). */
  double read_bytes_per_second;
  double ops_per_second;   /* simple operations, for node types without a rate */
  double call_seconds;     /* per kernel call, for node types without a rate */
  double batch_seconds;    /* per batch: begin, commit, wait */
  double run_seconds;      /* per run: pools, outputs, final sync */
  /* Device backends: what is left, once the backend is up, of the
   * background load of the device libraries that nodes' first calls wait
   * for (sl_node_desc.device_warm_up_begin: cuFFT for dpc and idpc); 0 on
   * the CPU and in profiles measured before it was. See
   * sl_cost_warm_up_wait. */
  double library_load_seconds;
  /* Per byte of the run's pooled buffers (slots, workspace, partials): taking
   * them from the backend when the run starts and giving them back, touched,
   * when it ends (on the CPU the unmapping of touched pages: 1-2 ns a byte
   * on a small VM, 0.3 s for a 302 MB resident copy; on a device its
   * allocator). 0 in profiles measured before it was. */
  double pool_seconds_per_byte;
  /* Per byte of the same buffers, their first touch: fresh host memory is
   * faulted in page by page by whichever kernel writes it first (gather's
   * copy into a 302 MB resident acquisition: 0.17-0.38 s of page faults on
   * the development VM, against 0.03 s for the copy itself). 0 on device
   * backends (their allocator hands out mapped memory) and in profiles
   * measured before it was. */
  double first_touch_seconds_per_byte;
  /* Device backends: the first touch of the host memory the executor takes
   * for host nodes (the workers' scratch and the host nodes' workspace,
   * sl_plan_node.first_touch_seconds), per byte: the H200 host's first
   * preview of 192 x 192 frames faulted in 16 workers' partial sums of a
   * frame, 2.5 ms of a fresh process's first call that smaller frames do
   * not pay. 0 on the CPU (that scratch is in the rates there) and in
   * profiles measured before it was. */
  double host_first_touch_seconds_per_byte;
  /* Host memory a run takes beyond its plan's buffers and node state: the
   * parsed pipeline and graph, HDF5's library state and the results writer,
   * FFTW's plans, thread stacks, allocator slack (and on a device backend
   * the driver's host side of the context). The plan adds it to the host
   * peak; measured as the process growth of the smallest shipped pipelines. */
  double process_bytes;
  int n_rates;
  sl_cost_rate rates[SL_COST_MAX_RATES];
} sl_cost_profile;

/* The built-in guesses for a backend's capabilities (bandwidth and op rate
 * from caps, overheads per backend kind); source "built-in". */
void sl_cost_profile_builtin(const sl_backend_caps *caps, sl_cost_profile *out);
bool sl_cost_profile_is_builtin(const sl_cost_profile *p);

/* The rate of node type `type`, or NULL. */
const sl_cost_rate *sl_cost_profile_rate(const sl_cost_profile *p, const char *type);
/* Adds or replaces the rate of rate->type; false when the table is full. */
bool sl_cost_profile_set_rate(sl_cost_profile *p, const sl_cost_rate *rate);

/* Whether rate key `type` is `key`, or one of its dtypes' keys (key/dtype,
 * key/dtype/variant) where `key` is a bare type. */
bool sl_cost_key_of_type(const char *type, const char *key);
/* A node's declared work in its type's unit: ops, or bytes moved. */
double sl_cost_work(const sl_node_cost *c, bool per_op);
/* The key of node n's rate: "type/dtype of input 0", or "type"; then
 * "/variant" where the node's type names one (sl_node_desc.rate_variant). */
void sl_cost_rate_key(const sl_node *n, char *buf, size_t len);
/* Seconds for `calls` calls of a node whose rate key is `type`
 * ("t/dtype/variant" falls back to "t/dtype", that to "t", then to the
 * bandwidth model) that together cost `c`.
 * `device`: the node runs on a device backend's device (not a host node
 * there); its setup once per run is scaled down below the rate's
 * run_work_least, for what it sets up is sized to the run's data (the
 * source's pinned windows: 2.9 ms fitted on calibrate's 32 x 32 and 128 x
 * 128 scans on the H200, 0.8-1.6 ms for a whole 24 x 20 run). A host node's
 * setup (file opens, reader threads, plans) is kept whole: scaled, the
 * preview's fell to half of what a small run measured on the dev VM. */
/* The seconds of `ops` that node n decided on (or may decide on) from the
 * data, at the rate of its key plus "/" variant (sl_node_decided_work),
 * with what that variant's run costs over the node's own (device: the node
 * runs on a device, whose run constants scale below calibrate's least
 * work) and, with `first` (no earlier node of the run decided on the
 * variant), what its first call in a process costs over the node's own
 * (sl_cost_first_call_seconds of `cost`, the node's planned work); 0 for
 * none. */
double sl_cost_decided_seconds(const sl_cost_profile *p, const sl_node *n, const char *variant, int64_t ops,
                               const sl_node_cost *cost, bool first, bool device);
/* The rate key of work node n decided on at `variant` ("type/dtype/variant",
 * in place of the node's own variant; its rate key without one). */
void sl_cost_decided_key(const sl_node *n, const char *variant, char *buf, size_t len);
double sl_cost_estimate(const sl_cost_profile *p, const char *type, const sl_node_cost *c,
                        int64_t calls, bool device);
/* Of sl_cost_estimate's seconds, the part a run pays once however many
 * calls it makes: the rate's run_seconds (scaled as there); 0 under the
 * bandwidth model. A loop's body pays it once, not per iteration
 * (sl_plan_loop_seconds). */
double sl_cost_estimate_once(const sl_cost_profile *p, const char *type, const sl_node_cost *c,
                             int64_t calls, bool device);
/* The rate that estimates a node of rate key `type` (as sl_cost_estimate
 * finds it), or NULL when the bandwidth model does. */
const sl_cost_rate *sl_cost_rate_for(const sl_cost_profile *p, const char *type);

/* The wait of a node whose first call joins the device libraries' load
 * (sl_node_desc.device_warm_up_wait): the load takes load_seconds from the
 * start of execution, the node's first call comes started_seconds after
 * it, so it waits for what is left: max(0, load - started). */
double sl_cost_warm_up_wait(double load_seconds, double started_seconds);

/* The cache file's name for a backend, device and thread count:
 * "<backend>-<device, letters and digits, others as '_'>-t<threads>.json". */
void sl_cost_profile_key(sl_backend_kind kind, const char *device, int threads, char *buf,
                         size_t len);
/* The cache folder: $XDG_CACHE_HOME/sluice, else $HOME/.cache/sluice; false
 * when neither is set. */
bool sl_cost_cache_dir(char *buf, size_t len);
/* The file the profile for these caps is cached in (folder + key). */
bool sl_cost_cache_path(const sl_backend_caps *caps, char *buf, size_t len);

void sl_cost_profile_json(sl_json *j, const sl_cost_profile *p);
/* `key`: the thread counts a derived profile came from (cost_threads.h), as
 * an array; nothing for a measured profile or the guesses. */
void sl_cost_profile_derived_json(sl_json *j, const char *key, const sl_cost_profile *p);
/* Parses a profile written by sl_cost_profile_json; SL_ERR_PARSE on
 * anything else (source is left for the caller). */
sl_code sl_cost_profile_parse(const char *text, size_t len, sl_cost_profile *out, sl_error *err);
/* Reads `path` and checks that it was measured for these caps. */
sl_code sl_cost_profile_load(const char *path, const sl_backend_caps *caps, sl_cost_profile *out,
                             sl_error *err);
/* Writes `path` atomically (a temporary name, then renamed), creating its
 * folder. */
sl_code sl_cost_profile_save(const char *path, const sl_cost_profile *p, sl_error *err);

/* The profile a plan for `caps` uses, as the setting cost_profile says: the
 * cached one when there is one (a file that cannot be used: the built-in
 * guesses, and `warning` says why; on the CPU with none for its thread count,
 * one derived from those of other counts, cost_threads.h), the named file,
 * or the built-in guesses (none); `reg`: the node types, for the derived
 * one (NULL: none known). `note` says which one it is and why (for the command line to print
 * when the guesses are used); either may be NULL. */
void sl_cost_profile_for(const sl_backend_caps *caps, const sl_node_registry *reg, sl_cost_profile *out,
                         char *note, size_t note_len, char *warning, size_t warning_len);

#endif
