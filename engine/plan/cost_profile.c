/* The cost model's profile: built-in guesses, the estimate formula, the
 * cache key, and the JSON file (see cost_profile.h). */
#include "engine/plan/cost_profile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/settings.h"
#include "engine/core/util.h"
#include "engine/plan/cost_threads.h"

void sl_cost_profile_builtin(const sl_backend_caps *caps, sl_cost_profile *out) {
  memset(out, 0, sizeof *out);
  out->kind = caps->kind;
  snprintf(out->device, sizeof out->device, "%s", caps->device);
  out->threads = caps->compute_units;
  snprintf(out->source, sizeof out->source, "built-in");
  out->bytes_per_second = caps->bytes_per_second > 0 ? caps->bytes_per_second : 1e9;
  out->ops_per_second = caps->ops_per_second > 0 ? caps->ops_per_second : 1e9;
  /* Guesses of the same order as what calibrate measures: a host kernel call
   * (thread fan-out) and a batch are microseconds; a device launch with its
   * event timing and a stream wait are tens. */
  bool device = caps->kind != SL_BACKEND_CPU;
  out->call_seconds = device ? 20e-6 : 5e-6;
  out->batch_seconds = device ? 30e-6 : 2e-6;
  out->run_seconds = device ? 2e-3 : 2e-4;
  /* cuFFT's load and first plan on the H200: 0.27-0.29 s (docs/performance.md,
   * 2026-12-02), nearly all of it left when execution starts. */
  out->library_load_seconds = device ? 0.27 : 0;
  /* dev's VM: 302 MB faulted in 0.17-0.38 s (docs/performance.md). */
  out->first_touch_seconds_per_byte = device ? 0 : 0.8e-9;
  out->host_first_touch_seconds_per_byte = device ? 0.8e-9 : 0;
  /* dev, iterate_affine and iterate_until: 3.9 MiB of growth from before
   * the pipeline was loaded to the run's peak; the H200: 96-116 MiB beyond
   * the plan on the shipped pipelines, the CUDA context's host side
   * (docs/performance.md, host memory). */
  out->process_bytes = device ? (double)(SL_PROCESS_BYTES_DEVICE) : (double)(SL_PROCESS_BYTES_HOST);
}

bool sl_cost_profile_is_builtin(const sl_cost_profile *p) { return !strcmp(p->source, "built-in"); }

const sl_cost_rate *sl_cost_profile_rate(const sl_cost_profile *p, const char *type) {
  for (int i = 0; type && i < p->n_rates; i++)
    if (!strcmp(p->rates[i].type, type)) return &p->rates[i];
  return NULL;
}

/* The rate of "type/dtype", else of "type". */
const sl_cost_rate *sl_cost_rate_for(const sl_cost_profile *p, const char *key) {
  /* "t/dtype/variant", then "t/dtype", then "t": each time without the last part */
  for (size_t len = key ? strlen(key) : 0; len > 0;) {
    for (int i = 0; i < p->n_rates; i++)
      if (strlen(p->rates[i].type) == len && !strncmp(p->rates[i].type, key, len)) return &p->rates[i];
    while (len > 0 && key[len - 1] != '/') len--;
    if (len > 0) len--; /* the '/' */
  }
  return NULL;
}

/* "type/dtype of input 0" (or "type"), then "/variant" when one is given. */
static void key_with(const sl_node *n, const char *variant, char *buf, size_t len) {
  const char *type = sl_node_type_name(n);
  int k = n->desc && n->n_in > 0 ? snprintf(buf, len, "%s/%s", type, sl_dtype_name(n->in[0].dtype))
                                 : snprintf(buf, len, "%s", type);
  if (variant && k >= 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, "/%.30s", variant);
}

bool sl_cost_key_of_type(const char *type, const char *key) {
  size_t len = strlen(key);
  return !strncmp(type, key, len) && (type[len] == 0 || (!strchr(key, '/') && type[len] == '/'));
}

void sl_cost_rate_key(const sl_node *n, char *buf, size_t len) {
  key_with(n, n->desc && n->desc->rate_variant ? n->desc->rate_variant(n) : NULL, buf, len);
}

bool sl_cost_profile_set_rate(sl_cost_profile *p, const sl_cost_rate *rate) {
  sl_cost_rate *slot = (sl_cost_rate *)sl_cost_profile_rate(p, rate->type);
  if (!slot) {
    if (p->n_rates == SL_COST_MAX_RATES) return false;
    slot = &p->rates[p->n_rates++];
  }
  *slot = *rate;
  return true;
}

double sl_cost_work(const sl_node_cost *c, bool per_op) {
  return per_op ? (double)c->ops : (double)c->bytes_read + (double)c->bytes_written;
}

/* A run's share of the least work calibrate measured (what it pays of a
 * cost measured there: no constant extrapolated below calibrate's inputs);
 * 1 at or above it, or with no least recorded (0). */
static double share_below(double work, double least) { return least > 0 && work < least ? work / least : 1; }

double sl_cost_first_call_seconds(const sl_cost_rate *r, const sl_node_cost *cost, bool host) {
  if (!r) return 0;
  /* A fresh process's extra (files opened, index read, windows and buffers
   * faulted in, threads started) is measured on calibrate's inputs; a run
   * smaller than all of them pays its share of the smallest one's. A
   * constant taken from inputs of megabytes priced a 1 MB run's source and
   * preview at several times their whole time. */
  const double work = sl_cost_work(cost, false), share = host ? share_below(work, r->first_call_bytes_least) : 1;
  const double x = share < 1 ? r->first_call_bytes_least : work;
  double s = r->first_call_seconds + r->first_call_seconds_per_byte * x;
  if (r->first_call_seconds_most > 0 && s > r->first_call_seconds_most) s = r->first_call_seconds_most;
  return s * share;
}

/* The samples of each size (equal bytes) as one: their upper median (of
 * two, the larger). Returns the sizes, into x and y (n each at most). */
static int size_medians(const double *bytes, const double *seconds, int n, double *x, double *y) {
  int m = 0;
  for (int k = 0; k < n; k++) {
    bool seen = false;
    for (int q = 0; q < m && !seen; q++) seen = x[q] == bytes[k];
    if (seen) continue;
    int c = 0;
    for (int q = k; q < n; q++)
      if (bytes[q] == bytes[k]) y[m + c++] = seconds[q]; /* scratch after the sizes so far */
    qsort(y + m, (size_t)c, sizeof *y, sl_compare_doubles);
    x[m] = bytes[k], y[m] = y[m + c / 2];
    m++;
  }
  return m;
}

/* The lower median of n values (of two, the smaller; sorted in place). */
static double lower_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, sl_compare_doubles);
  return v[(n - 1) / 2];
}

/* a + b x through n >= 4 points of distinct sizes, resisting one far-off
 * point (Siegel's repeated median: for each point the lower median of its
 * slopes to the others, b the lower median of those, at least 0; a the
 * lower median of what the line leaves, at least 0). One first call in a
 * fresh process that met something else (a cold disk, another process)
 * took about 10 ms more than its neighbours on an H100 host, and least
 * squares through one sample per size priced every preview after it at
 * 13 ms against 2-3. False without memory. */
static bool robust_line(const double *x, const double *y, int n, double *a, double *b) {
  double *own = malloc(2 * (size_t)n * sizeof *own), *per = own + n;
  if (!own) return false;
  for (int i = 0; i < n; i++) {
    int m = 0;
    for (int j = 0; j < n; j++)
      if (j != i) own[m++] = (y[j] - y[i]) / (x[j] - x[i]);
    per[i] = lower_median(own, m);
  }
  double slope = lower_median(per, n);
  if (!(slope > 0)) slope = 0;
  for (int k = 0; k < n; k++) own[k] = y[k] - slope * x[k];
  double icept = lower_median(own, n);
  free(own);
  *a = icept > 0 ? icept : 0, *b = slope;
  return true;
}

void sl_cost_fit_first_call(const double *bytes, const double *seconds, int n, double *a, double *b,
                            double *most_out, double *least) {
  double *med = n > 0 ? malloc(2 * (size_t)n * sizeof *med) : NULL;
  const double *xs = bytes, *ys = seconds; /* out of memory: the samples themselves */
  if (med) {
    xs = med, ys = med + n;
    n = size_medians(bytes, seconds, n, med, med + n);
  }
  double sx = 0, sy = 0, sxx = 0, sxy = 0, most = 0, lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < n; k++) {
    double x = xs[k], y = ys[k];
    sx += x, sy += y, sxx += x * x, sxy += x * y;
    most = fmax(most, y), lo = fmin(lo, x), hi = fmax(hi, x);
  }
  *a = most, *b = 0, *most_out = 0, *least = n > 0 && lo > 0 ? lo : 0;
  if (med && n >= 4 && robust_line(xs, ys, n, a, b)) { /* n distinct sizes (their medians above) */
    /* bounded by the line at the largest size, not by an outlier */
    *most_out = *b > 0 ? *a + *b * hi : 0;
    free(med);
    return;
  }
  free(med);
  if (n < 2 || !(hi > lo)) return;
  double var = sxx - sx * sx / n, cov = sxy - sx * sy / n;
  if (!(var > 0) || !(cov > 0)) return; /* no growth with the bytes */
  double slope = cov / var, icept = (sy - slope * sx) / n;
  if (icept < 0) icept = 0, slope = sxy / sxx; /* through the origin */
  *a = icept, *b = slope > 0 ? slope : 0;
  *most_out = *b > 0 ? most : 0;
}

/* Rate r's setup once per run for `calls` calls of `work` in its unit
 * (scaled down below its least work on a device). */
static double run_part(const sl_cost_rate *r, double work, int64_t calls, bool device) {
  const double share = device ? share_below(work, r->run_work_least) : 1;
  return calls > 0 ? r->run_seconds * share : 0;
}

double sl_cost_estimate_once(const sl_cost_profile *p, const char *type, const sl_node_cost *c,
                             int64_t calls, bool device) {
  const sl_cost_rate *r = sl_cost_rate_for(p, type);
  return r ? run_part(r, sl_cost_work(c, r->per_op), calls, device) : 0;
}

double sl_cost_estimate(const sl_cost_profile *p, const char *type, const sl_node_cost *c,
                        int64_t calls, bool device) {
  const sl_cost_rate *r = sl_cost_rate_for(p, type);
  if (r) {
    const double work = sl_cost_work(c, r->per_op);
    return run_part(r, work, calls, device) + (double)calls * r->call_seconds + work * r->seconds_per_unit;
  }
  double t_mem = p->bytes_per_second > 0
                     ? ((double)c->bytes_read + (double)c->bytes_written) / p->bytes_per_second
                     : 0;
  double t_ops = p->ops_per_second > 0 ? (double)c->ops / p->ops_per_second : 0;
  return (double)calls * p->call_seconds + (t_mem > t_ops ? t_mem : t_ops);
}

/* The decided variant in place of the node's own (dpc's ADF branch rule's
 * rate, "dpc/f64/adf", is not the parallax fit's: its decided fit is
 * "dpc/f64/parallax", not "dpc/f64/adf/parallax", which fell back to the
 * branch rule's rate and priced the test set's fit at half its time). */
void sl_cost_decided_key(const sl_node *n, const char *variant, char *buf, size_t len) {
  if (variant) key_with(n, variant, buf, len);
  else sl_cost_rate_key(n, buf, len);
}

double sl_cost_decided_seconds(const sl_cost_profile *p, const sl_node *n, const char *variant, int64_t ops,
                               const sl_node_cost *cost, bool first, bool device) {
  if (ops <= 0) return 0;
  char key[128], base[96];
  sl_cost_rate_key(n, base, sizeof base);
  sl_cost_decided_key(n, variant, key, sizeof key);
  const sl_node_cost c = {.ops = ops};
  double s = sl_cost_estimate(p, key, &c, 0, false);
  /* A run that fits pays the variant's constant in place of the node's
   * own: on a device, whose fit's steps are latency (the host waits for
   * each), it is most of the fit (the H200: 7.0 ms against dpc's 1.0, at
   * 2.5e-12 s an operation; the axis's fit at 128 x 128 took 8.1 ms where
   * its operations gave 2.0). On a CPU it is 0. */
  const sl_cost_rate *r = variant ? sl_cost_rate_for(p, key) : NULL, *own = sl_cost_rate_for(p, base);
  if (r && r->per_op) {
    const double extra = r->run_seconds * (device ? share_below((double)ops, r->run_work_least) : 1) -
                         (own ? own->run_seconds : 0);
    if (extra > 0) s += extra;
    /* The variant's first call in a process over the node's own, which
     * calibrate measured on runs that did not decide on it: dpc's parallax
     * fit starts FFTW's planner (2.5 ms on the dev VM, 1.9-2.9 ms of the
     * fit's set-up on a 24 x 20 scan, where the fit's operations gave 2.1
     * ms in all and dpc took 3.6-5.3). */
    const double first_extra = first ? sl_cost_first_call_seconds(r, cost, !device) -
                                           sl_cost_first_call_seconds(own, cost, !device)
                                     : 0;
    if (first_extra > 0) s += first_extra;
  }
  return s;
}

double sl_cost_warm_up_wait(double load_seconds, double started_seconds) {
  double left = load_seconds - (started_seconds > 0 ? started_seconds : 0);
  return left > 0 ? left : 0;
}

void sl_cost_profile_key(sl_backend_kind kind, const char *device, int threads, char *buf,
                         size_t len) {
  char dev[128];
  size_t k = 0;
  for (const char *s = device; *s && k + 1 < sizeof dev; s++) {
    char ch = *s;
    bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (!word && (k == 0 || dev[k - 1] == '_')) continue; /* one '_' per run of others */
    dev[k++] = word ? ch : '_';
  }
  while (k > 0 && dev[k - 1] == '_') k--;
  dev[k] = 0;
  snprintf(buf, len, "%s-%s-t%d.json", sl_backend_kind_name(kind), k ? dev : "device", threads);
}

bool sl_cost_cache_dir(char *buf, size_t len) { return sl_user_cache_dir(buf, len); }

bool sl_cost_cache_path(const sl_backend_caps *caps, char *buf, size_t len) {
  char dir[900], key[256];
  if (!sl_cost_cache_dir(dir, sizeof dir)) return false;
  sl_cost_profile_key(caps->kind, caps->device, caps->compute_units, key, sizeof key);
  int n = snprintf(buf, len, "%s/%s", dir, key);
  return n > 0 && (size_t)n < len;
}

void sl_cost_profile_json(sl_json *j, const sl_cost_profile *p) {
  sl_json_begin_object(j);
  sl_json_kv_string(j, "format", SL_COST_PROFILE_FORMAT);
  sl_json_kv_int(j, "version", SL_COST_PROFILE_VERSION);
  sl_json_kv_string(j, "backend", sl_backend_kind_name(p->kind));
  sl_json_kv_string(j, "device", p->device);
  sl_json_kv_int(j, "threads", p->threads);
  sl_json_kv_string(j, "created", p->created);
  sl_json_kv_double(j, "bytes_per_second", p->bytes_per_second);
  sl_json_kv_double(j, "read_bytes_per_second", p->read_bytes_per_second);
  sl_json_kv_double(j, "ops_per_second", p->ops_per_second);
  sl_json_kv_double(j, "call_seconds", p->call_seconds);
  sl_json_kv_double(j, "batch_seconds", p->batch_seconds);
  sl_json_kv_double(j, "run_seconds", p->run_seconds);
  sl_json_kv_double(j, "process_bytes", p->process_bytes);
  sl_json_kv_double(j, "library_load_seconds", p->library_load_seconds);
  sl_json_kv_double(j, "pool_seconds_per_byte", p->pool_seconds_per_byte);
  sl_json_kv_double(j, "first_touch_seconds_per_byte", p->first_touch_seconds_per_byte);
  sl_json_kv_double(j, "host_first_touch_seconds_per_byte", p->host_first_touch_seconds_per_byte);
  sl_json_key(j, "rates");
  sl_json_begin_array(j);
  for (int i = 0; i < p->n_rates; i++) {
    const sl_cost_rate *r = &p->rates[i];
    sl_json_begin_object(j);
    sl_json_kv_string(j, "type", r->type);
    sl_json_kv_string(j, "unit", r->per_op ? "op" : "byte");
    sl_json_kv_double(j, "call_seconds", r->call_seconds);
    sl_json_kv_double(j, "seconds_per_unit", r->seconds_per_unit);
    sl_json_kv_double(j, "run_seconds", r->run_seconds);
    if (r->first_call_seconds > 0) sl_json_kv_double(j, "first_call_seconds", r->first_call_seconds);
    if (r->first_call_seconds_per_byte > 0)
      sl_json_kv_double(j, "first_call_seconds_per_byte", r->first_call_seconds_per_byte);
    if (r->first_call_seconds_most > 0) sl_json_kv_double(j, "first_call_seconds_most", r->first_call_seconds_most);
    if (r->first_call_bytes_least > 0) sl_json_kv_double(j, "first_call_bytes_least", r->first_call_bytes_least);
    if (r->run_work_least > 0) sl_json_kv_double(j, "run_work_least", r->run_work_least);
    sl_json_end_object(j);
  }
  sl_json_end_array(j);
  sl_json_end_object(j);
}

void sl_cost_profile_derived_json(sl_json *j, const char *key, const sl_cost_profile *p) {
  if (!p->derived_from[0]) return;
  sl_json_key(j, key);
  sl_json_begin_array(j);
  for (int k = 0; k < 2 && p->derived_from[k]; k++) sl_json_int(j, p->derived_from[k]);
  sl_json_end_array(j);
}

/* A small strict JSON reader, enough for the profile: objects, arrays,
 * strings (escapes kept simple: non-ASCII \u becomes '?'), numbers, true,
 * false, null; nesting is bounded. */
typedef struct json_reader {
  const char *s, *end;
  int depth;
} json_reader;

static void skip_ws(json_reader *r) {
  while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\t' || *r->s == '\r')) r->s++;
}

static bool eat(json_reader *r, char c) {
  skip_ws(r);
  if (r->s < r->end && *r->s == c) {
    r->s++;
    return true;
  }
  return false;
}

static bool read_string(json_reader *r, char *out, size_t len) {
  if (!eat(r, '"')) return false;
  size_t k = 0;
  while (r->s < r->end && *r->s != '"') {
    char c = *r->s++;
    if ((unsigned char)c < 0x20) return false;
    if (c == '\\') {
      if (r->s >= r->end) return false;
      char e = *r->s++;
      switch (e) {
      case 'n': c = '\n'; break;
      case 't': c = '\t'; break;
      case 'r': c = '\r'; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case '"': case '\\': case '/': c = e; break;
      case 'u': {
        if (r->end - r->s < 4) return false;
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          char h = *r->s++;
          v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
          if (v > 0xffff) return false;
        }
        c = v < 0x80 && v >= 0x20 ? (char)v : '?';
        break;
      }
      default: return false;
      }
    }
    if (k + 1 < len) out[k++] = c;
    else return false; /* longer than any field of the profile */
  }
  if (len) out[k] = 0;
  return eat(r, '"');
}

static bool read_number(json_reader *r, double *v) {
  skip_ws(r);
  char buf[64];
  size_t k = 0;
  while (r->s < r->end && k + 1 < sizeof buf && strchr("+-0123456789.eE", *r->s)) buf[k++] = *r->s++;
  buf[k] = 0;
  if (!k) return false;
  char *e;
  *v = strtod(buf, &e);
  return *e == 0 && isfinite(*v);
}

static bool skip_value(json_reader *r);

static bool skip_container(json_reader *r, char close, bool keys) {
  if (++r->depth > 32) return false;
  if (eat(r, close)) return r->depth--, true;
  do {
    char key[256];
    if (keys && (!read_string(r, key, sizeof key) || !eat(r, ':'))) return false;
    if (!skip_value(r)) return false;
  } while (eat(r, ','));
  r->depth--;
  return eat(r, close);
}

static bool skip_value(json_reader *r) {
  skip_ws(r);
  if (r->s >= r->end) return false;
  char c = *r->s;
  double d;
  char tmp[1024];
  if (c == '{') return r->s++, skip_container(r, '}', true);
  if (c == '[') return r->s++, skip_container(r, ']', false);
  if (c == '"') return read_string(r, tmp, sizeof tmp);
  for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
    if ((size_t)(r->end - r->s) >= strlen(*w) && !strncmp(r->s, *w, strlen(*w))) {
      r->s += strlen(*w);
      return true;
    }
  return read_number(r, &d);
}

static bool read_rate(json_reader *r, sl_cost_rate *rate) {
  memset(rate, 0, sizeof *rate);
  rate->call_seconds = rate->seconds_per_unit = -1;
  char unit[16] = "";
  if (!eat(r, '{')) return false;
  if (!eat(r, '}')) {
    do {
      char key[64];
      if (!read_string(r, key, sizeof key) || !eat(r, ':')) return false;
      bool ok = !strcmp(key, "type")               ? read_string(r, rate->type, sizeof rate->type)
                : !strcmp(key, "unit")             ? read_string(r, unit, sizeof unit)
                : !strcmp(key, "call_seconds")     ? read_number(r, &rate->call_seconds)
                : !strcmp(key, "seconds_per_unit") ? read_number(r, &rate->seconds_per_unit)
                : !strcmp(key, "run_seconds")      ? read_number(r, &rate->run_seconds)
                : !strcmp(key, "first_call_seconds") ? read_number(r, &rate->first_call_seconds)
                : !strcmp(key, "first_call_seconds_per_byte") ? read_number(r, &rate->first_call_seconds_per_byte)
                : !strcmp(key, "first_call_seconds_most") ? read_number(r, &rate->first_call_seconds_most)
                : !strcmp(key, "first_call_bytes_least") ? read_number(r, &rate->first_call_bytes_least)
                : !strcmp(key, "run_work_least") ? read_number(r, &rate->run_work_least)
                                                   : skip_value(r);
      if (!ok) return false;
    } while (eat(r, ','));
    if (!eat(r, '}')) return false;
  }
  rate->per_op = !strcmp(unit, "op");
  return rate->type[0] && (rate->per_op || !strcmp(unit, "byte")) && rate->call_seconds >= 0 &&
         rate->seconds_per_unit >= 0 && rate->run_seconds >= 0 && rate->first_call_seconds >= 0 &&
         rate->first_call_seconds_per_byte >= 0 && rate->first_call_seconds_most >= 0 &&
         rate->first_call_bytes_least >= 0 && rate->run_work_least >= 0;
}

static sl_code parse_fail(sl_error *err, const json_reader *r, const char *start, const char *what) {
  return sl_fail(err, SL_ERR_PARSE, "not a sluice cost profile: %s (at byte %lld)", what,
                 (long long)(r->s - start));
}

sl_code sl_cost_profile_parse(const char *text, size_t len, sl_cost_profile *out, sl_error *err) {
  json_reader r = {text, text + len, 0};
  sl_cost_profile p;
  memset(&p, 0, sizeof p);
  char format[64] = "", backend[32] = "";
  double version = 0, threads = -1;
  p.bytes_per_second = p.ops_per_second = -1;
  p.call_seconds = p.batch_seconds = p.run_seconds = -1;
  p.process_bytes = -1; /* optional: profiles of the first version lack it */
  if (!eat(&r, '{')) return parse_fail(err, &r, text, "expected an object");
  if (!eat(&r, '}')) {
    do {
      char key[64];
      if (!read_string(&r, key, sizeof key) || !eat(&r, ':')) return parse_fail(err, &r, text, "expected a key");
      bool ok;
      if (!strcmp(key, "rates")) {
        ok = eat(&r, '[');
        if (ok && !eat(&r, ']')) {
          do {
            sl_cost_rate rate;
            ok = read_rate(&r, &rate) && sl_cost_profile_set_rate(&p, &rate);
          } while (ok && eat(&r, ','));
          ok = ok && eat(&r, ']');
        }
      } else {
        ok = !strcmp(key, "format")             ? read_string(&r, format, sizeof format)
             : !strcmp(key, "version")          ? read_number(&r, &version)
             : !strcmp(key, "backend")          ? read_string(&r, backend, sizeof backend)
             : !strcmp(key, "device")           ? read_string(&r, p.device, sizeof p.device)
             : !strcmp(key, "threads")          ? read_number(&r, &threads)
             : !strcmp(key, "created")          ? read_string(&r, p.created, sizeof p.created)
             : !strcmp(key, "bytes_per_second") ? read_number(&r, &p.bytes_per_second)
             : !strcmp(key, "read_bytes_per_second") ? read_number(&r, &p.read_bytes_per_second)
             : !strcmp(key, "ops_per_second")   ? read_number(&r, &p.ops_per_second)
             : !strcmp(key, "call_seconds")     ? read_number(&r, &p.call_seconds)
             : !strcmp(key, "batch_seconds")    ? read_number(&r, &p.batch_seconds)
             : !strcmp(key, "run_seconds")      ? read_number(&r, &p.run_seconds)
             : !strcmp(key, "process_bytes")    ? read_number(&r, &p.process_bytes)
             : !strcmp(key, "library_load_seconds") ? read_number(&r, &p.library_load_seconds)
             : !strcmp(key, "pool_seconds_per_byte") ? read_number(&r, &p.pool_seconds_per_byte)
             : !strcmp(key, "first_touch_seconds_per_byte") ? read_number(&r, &p.first_touch_seconds_per_byte)
             : !strcmp(key, "host_first_touch_seconds_per_byte") ? read_number(&r, &p.host_first_touch_seconds_per_byte)
                                                : skip_value(&r);
      }
      if (!ok) return parse_fail(err, &r, text, key);
    } while (eat(&r, ','));
    if (!eat(&r, '}')) return parse_fail(err, &r, text, "expected '}'");
  }
  skip_ws(&r);
  if (r.s != r.end) return parse_fail(err, &r, text, "text after the object");
  if (strcmp(format, SL_COST_PROFILE_FORMAT) || version != SL_COST_PROFILE_VERSION)
    return parse_fail(err, &r, text, "format or version");
  int kind = -1;
  for (int k = 0; k < SL_BACKEND_COUNT; k++)
    if (!strcmp(backend, sl_backend_kind_name((sl_backend_kind)k))) kind = k;
  if (kind < 0) return parse_fail(err, &r, text, "unknown backend");
  if (threads < 1 || threads > 1e6 || threads != floor(threads)) return parse_fail(err, &r, text, "threads");
  if (!(p.bytes_per_second > 0) || !(p.ops_per_second > 0) || p.call_seconds < 0 ||
      p.batch_seconds < 0 || p.run_seconds < 0 || p.library_load_seconds < 0 ||
      p.pool_seconds_per_byte < 0 || p.first_touch_seconds_per_byte < 0 || p.read_bytes_per_second < 0 ||
      p.host_first_touch_seconds_per_byte < 0)
    return parse_fail(err, &r, text, "a missing or non-positive number");
  p.kind = (sl_backend_kind)kind;
  if (p.process_bytes < 0)
    p.process_bytes = kind == SL_BACKEND_CPU ? SL_PROCESS_BYTES_HOST : SL_PROCESS_BYTES_DEVICE;
  p.threads = (int)threads;
  *out = p;
  return SL_OK;
}

sl_code sl_cost_profile_load(const char *path, const sl_backend_caps *caps, sl_cost_profile *out,
                             sl_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  char *text = sl_calloc(1, 1 << 20);
  if (!text) {
    fclose(f);
    return sl_fail_in(err, SL_ERR_NOMEM, path, "out of memory for the text of a cost profile");
  }
  size_t n = fread(text, 1, (1 << 20) - 1, f);
  bool too_long = !feof(f);
  fclose(f);
  sl_code rc = too_long ? sl_fail(err, SL_ERR_PARSE, "not a sluice cost profile: over 1 MiB")
                        : sl_cost_profile_parse(text, n, out, err);
  free(text);
  if (rc != SL_OK) return sl_error_at(err, path, 0, 0), rc;
  if (out->kind != caps->kind || strcmp(out->device, caps->device) || out->threads != caps->compute_units)
    return sl_fail(err, SL_ERR_PARSE,
                   "%s was measured on %s (%s, %d threads), not on %s (%s, %d threads)", path,
                   sl_backend_kind_name(out->kind), out->device, out->threads,
                   sl_backend_kind_name(caps->kind), caps->device, caps->compute_units);
  snprintf(out->source, sizeof out->source, "%s", path);
  return SL_OK;
}

/* mkdir -p of the folder holding `path`. */
static sl_code make_parent(const char *path, sl_error *err) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return SL_OK;
  *slash = 0;
  return sl_make_dirs(dir) ? SL_OK : sl_fail(err, SL_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
}

sl_code sl_cost_profile_save(const char *path, const sl_cost_profile *p, sl_error *err) {
  sl_code rc = make_parent(path, err);
  if (rc != SL_OK) return rc;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return sl_fail(err, SL_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
  sl_json j;
  sl_json_init(&j, f, true);
  sl_cost_profile_json(&j, p);
  sl_json_finish(&j);
  bool ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return sl_fail(err, SL_ERR_IO, "cannot write %s: %s", path, strerror(e));
  }
  return SL_OK;
}

void sl_cost_profile_for(const sl_backend_caps *caps, const sl_node_registry *reg, sl_cost_profile *out,
                         char *note, size_t note_len, char *warning, size_t warning_len) {
  char scratch[4];
  if (!note) note = scratch, note_len = sizeof scratch;
  if (!warning) warning = scratch, warning_len = sizeof scratch;
  note[0] = warning[0] = 0;
  sl_cost_profile_builtin(caps, out);
  const char *choice = sl_setting_text(SL_SET_COST_PROFILE);
  if (!strcmp(choice, "none")) {
    snprintf(note, note_len, "cost model: built-in guesses (setting cost_profile=none)");
    return;
  }
  char path[1024];
  bool cached = !choice[0] || !strcmp(choice, "cache");
  if (cached && !sl_cost_cache_path(caps, path, sizeof path)) {
    snprintf(note, note_len, "cost model: built-in guesses (no cache folder: HOME is not set)");
    return;
  }
  if (!cached) snprintf(path, sizeof path, "%s", choice);
  if (cached && access(path, F_OK) != 0) {
    /* A profile is per device and CPU thread count: on the CPU one derived
     * from the counts that were calibrated, else the guesses; and the
     * command that makes this one (a CPU run at 1 thread after a
     * calibration at the default count was told to run `sluice calibrate`,
     * which made the other one again). */
    char dir[900];
    if (caps->kind == SL_BACKEND_CPU && sl_cost_cache_dir(dir, sizeof dir) &&
        sl_cost_profile_derived_for(dir, caps, reg, out)) {
      char from[64];
      if (out->derived_from[1])
        snprintf(from, sizeof from, "%d and %d threads", out->derived_from[0], out->derived_from[1]);
      else
        snprintf(from, sizeof from, "%d thread%s", out->derived_from[0], out->derived_from[0] == 1 ? "" : "s");
      snprintf(note, note_len,
               "cost model: derived for %d thread%s from the profiles calibrated at %s (%s): run `sluice "
               "calibrate --threads %d` for a measured one",
               caps->compute_units, caps->compute_units == 1 ? "" : "s", from, out->source, caps->compute_units);
      return;
    }
    if (caps->kind == SL_BACKEND_CPU)
      snprintf(note, note_len,
               "cost model: built-in guesses (not calibrated for %d thread%s: run `sluice calibrate --threads %d`)",
               caps->compute_units, caps->compute_units == 1 ? "" : "s", caps->compute_units);
    else
      snprintf(note, note_len, "cost model: built-in guesses (not calibrated: run `sluice calibrate --backend %s`)",
               sl_backend_kind_name(caps->kind));
    return;
  }
  sl_error err;
  sl_error_clear(&err);
  sl_cost_profile loaded;
  if (sl_cost_profile_load(path, caps, &loaded, &err) != SL_OK) {
    char msg[1024];
    sl_error_format(&err, msg, sizeof msg);
    snprintf(warning, warning_len, "cost profile ignored, using the built-in guesses: %s", msg);
    snprintf(note, note_len, "cost model: built-in guesses (the profile was ignored)");
    return;
  }
  *out = loaded;
  snprintf(note, note_len, "cost model: %s (calibrated %s)", out->source, out->created);
}
