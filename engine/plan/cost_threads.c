/* A CPU cost profile derived for an uncalibrated thread count (see
 * cost_threads.h). */
#include "engine/plan/cost_threads.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds per unit at t threads through (t1, s1) and (t2, s2) as a + b / t,
 * a, b >= 0: where the fit's a or b would be negative (noise, or a node that
 * got slower with more workers) the nearer sample's value is kept where it
 * must (b < 0: the work did not spread) or spread (a < 0). */
static double amdahl(double t1, double s1, double t2, double s2, double t) {
  const double b = (s1 - s2) / (1 / t1 - 1 / t2), a = s1 - b / t1;
  if (!(b >= 0)) return s1;
  if (!(a >= 0)) return s1 * t1 / t;
  return a + b / t;
}

/* Whether rate key `key` ("type/dtype/variant") is of a node type whose CPU
 * kernel runs on one thread (sl_node_desc.cpu_serial). */
static bool serial_type(const sl_node_registry *reg, const char *key) {
  char type[48];
  size_t n = strcspn(key, "/");
  if (!reg || n >= sizeof type) return false;
  memcpy(type, key, n);
  type[n] = 0;
  const sl_node_desc *d = sl_registry_find(reg, type);
  return d && d->cpu_serial;
}

void sl_cost_profile_derive(const sl_cost_profile *near, const sl_cost_profile *far, int threads,
                            const sl_node_registry *reg, sl_cost_profile *out) {
  *out = *near;
  out->threads = threads;
  out->derived_from[0] = near->threads;
  out->derived_from[1] = far ? far->threads : 0;
  const double t = threads, tn = near->threads;
  /* bandwidths: down with fewer workers, never up (memory's limit is not
   * known from below it) */
  const double down = t < tn ? t / tn : 1;
  out->bytes_per_second = near->bytes_per_second * down;
  out->read_bytes_per_second = near->read_bytes_per_second * down;
  out->ops_per_second = near->ops_per_second * t / tn;
  for (int i = 0; i < out->n_rates; i++) {
    sl_cost_rate *r = &out->rates[i];
    const sl_cost_rate *o = far ? sl_cost_profile_rate(far, r->type) : NULL;
    if (serial_type(reg, r->type)) continue;
    if (o && o->per_op == r->per_op)
      r->seconds_per_unit = amdahl(tn, r->seconds_per_unit, far->threads, o->seconds_per_unit, t);
    else
      r->seconds_per_unit *= tn / t;
  }
}

/* The thread count a cache file's name ends with ("...-t<N>.json"), else 0. */
static int file_threads(const char *name) {
  const char *dot = strrchr(name, '.'), *t = strrchr(name, 't');
  if (!dot || strcmp(dot, ".json") || !t || t == name || t[-1] != '-') return 0;
  char *end = NULL;
  long n = strtol(t + 1, &end, 10);
  return end == dot && n >= 1 && n <= 1 << 20 ? (int)n : 0;
}

/* Whether count n at distance dn is nearer than count m at dm: in ratio to
 * the count wanted, ties to the fewer threads (whatever the folder's
 * order). */
static bool nearer(double dn, int n, double dm, int m) { return dn < dm || (dn == dm && n < m); }

bool sl_cost_profile_derived_for(const char *dir, const sl_backend_caps *caps, const sl_node_registry *reg,
                                 sl_cost_profile *out) {
  if (caps->kind != SL_BACKEND_CPU || caps->compute_units < 1) return false;
  DIR *d = opendir(dir);
  if (!d) return false;
  /* the two nearest counts (in ratio) whose profiles load */
  sl_cost_profile *best = malloc(2 * sizeof *best);
  double dist[2] = {INFINITY, INFINITY};
  int found = 0;
  const struct dirent *e;
  while (best && (e = readdir(d)) != NULL) {
    const int n = file_threads(e->d_name);
    if (n < 1 || n == caps->compute_units) continue;
    /* the same machine's CPUs (the device string names them) at n workers */
    sl_backend_caps at = *caps;
    at.compute_units = n;
    char key[256], path[1200];
    sl_cost_profile_key(at.kind, at.device, n, key, sizeof key);
    if (strcmp(key, e->d_name)) continue; /* another backend or device */
    const double dn = fabs(log((double)n / caps->compute_units));
    if (found == 2 && !nearer(dn, n, dist[1], best[1].threads)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    sl_cost_profile p;
    sl_error err;
    sl_error_clear(&err);
    if (sl_cost_profile_load(path, &at, &p, &err) != SL_OK) continue; /* as a run at n would ignore it */
    const int k = found < 2 ? found++ : 1;
    best[k] = p, dist[k] = dn;
    if (found == 2 && nearer(dist[1], best[1].threads, dist[0], best[0].threads)) {
      const sl_cost_profile swap = best[0];
      const double ds = dist[0];
      best[0] = best[1], dist[0] = dist[1], best[1] = swap, dist[1] = ds;
    }
  }
  closedir(d);
  if (found > 0) sl_cost_profile_derive(&best[0], found > 1 ? &best[1] : NULL, caps->compute_units, reg, out);
  free(best);
  return found > 0;
}
