#define _POSIX_C_SOURCE 200809L
#include "engine/core/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

/* A process-wide intern table: locations point into it so that any structure
 * can carry a file name without owning it. Guarded for use from threads. */
static pthread_mutex_t g_intern_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_interned;
static size_t g_n_interned, g_cap_interned;

const char *sl_intern(const char *s) {
  if (!s) return NULL;
  pthread_mutex_lock(&g_intern_lock);
  for (size_t i = 0; i < g_n_interned; i++)
    if (strcmp(g_interned[i], s) == 0) {
      pthread_mutex_unlock(&g_intern_lock);
      return g_interned[i];
    }
  size_t cap = g_cap_interned ? 2 * g_cap_interned : 16;
  char *copy = NULL;
  if (g_n_interned < g_cap_interned || sl_resize(&g_interned, cap, sizeof *g_interned)) {
    if (g_n_interned == g_cap_interned) g_cap_interned = cap;
    copy = sl_strdup(s);
    if (copy) g_interned[g_n_interned++] = copy;
  }
  const char *r = copy;
  pthread_mutex_unlock(&g_intern_lock);
  return r;
}

size_t sl_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t *row = sl_calloc(lb + 1, sizeof *row);
  if (!row) return SIZE_MAX;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
      size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
      row[j] = sub < best ? sub : best;
      diag = up;
    }
  }
  size_t d = row[lb];
  free(row);
  return d;
}

const char *sl_closest(const char *word, const char *const *candidates, size_t n) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (size_t i = 0; i < n; i++) {
    size_t d = sl_edit_distance(word, candidates[i]);
    if (d < best_d) best_d = d, best = candidates[i];
  }
  size_t len = strlen(word);
  size_t limit = len <= 3 ? 1 : (len <= 6 ? 2 : 3);
  return (best && best_d <= limit) ? best : NULL;
}

sl_code sl_parse_size(const char *text, uint64_t *out, sl_error *err) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno || !(v >= 0) || !isfinite(v))
    return sl_fail(err, SL_ERR_USAGE, "invalid size '%s' (expected e.g. 512M, 4G, 1.5GiB)", text);
  while (*end == ' ') end++;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'B': mult = 1; end++; break;
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default:
      return sl_fail(err, SL_ERR_USAGE, "invalid size unit in '%s' (use K, M, G or T)", text);
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return sl_fail(err, SL_ERR_USAGE, "invalid size '%s' (expected e.g. 512M, 4G)", text);
  double bytes = v * mult;
  if (bytes > 1.8e19) return sl_fail(err, SL_ERR_USAGE, "size '%s' is too large", text);
  *out = (uint64_t)bytes;
  return SL_OK;
}

void sl_format_bytes(uint64_t bytes, char *buf, size_t n) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
  if (u == 0)
    snprintf(buf, n, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, n, "%.2f %s", v, units[u]);
}

bool sl_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

bool sl_parse_f64(const char *s, double *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return false;
  *out = v;
  return true;
}

bool sl_parse_bool(const char *s, bool *out) {
  if (!s) return false;
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes") || !strcmp(s, "on")) {
    *out = true;
    return true;
  }
  if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no") || !strcmp(s, "off")) {
    *out = false;
    return true;
  }
  return false;
}

double sl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int sl_compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

uint64_t sl_available_memory(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kb = v;
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

void sl_dirname(const char *path, char *buf, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(buf, n, ".");
  else if (slash == path)
    snprintf(buf, n, "/");
  else
    snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

void sl_path_join(const char *dir, const char *rel, char *buf, size_t n) {
  if (rel[0] == '/' || !dir || !dir[0])
    snprintf(buf, n, "%s", rel);
  else
    snprintf(buf, n, "%s/%s", dir, rel);
}

/* A "Name:   123 kB" line of /proc/self/status, in bytes. */
static uint64_t proc_status_kb(const char *name) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t len = strlen(name);
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, name, len) && line[len] == ':') {
      kb = strtoull(line + len + 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb * 1024;
}

uint64_t sl_process_rss(void) { return proc_status_kb("VmRSS"); }
uint64_t sl_process_peak_rss(void) { return proc_status_kb("VmHWM"); }

int sl_choice_index(const char *choices, const char *value) {
  size_t len = strlen(value);
  int index = 0;
  for (const char *c = choices;; index++) {
    const char *bar = strchr(c, '|');
    size_t n = bar ? (size_t)(bar - c) : strlen(c);
    if (n == len && !strncmp(c, value, n)) return index;
    if (!bar) return -1;
    c = bar + 1;
  }
}

bool sl_user_cache_dir(char *buf, size_t len) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (xdg && xdg[0] == '/') n = snprintf(buf, len, "%s/sluice", xdg);
  else if (home && home[0]) n = snprintf(buf, len, "%s/.cache/sluice", home);
  else return false;
  return n > 0 && (size_t)n < len;
}

bool sl_make_dirs(const char *dir) {
  char buf[4096];
  int n = snprintf(buf, sizeof buf, "%s", dir);
  if (n <= 0 || (size_t)n >= sizeof buf) return false;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return false;
    *p = '/';
  }
  return mkdir(buf, 0777) == 0 || errno == EEXIST;
}

uint64_t sl_fnv1a(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

#define CHECKSUM_K1 0x9e3779b185ebca87ULL
#define CHECKSUM_K2 0xc2b2ae3d27d4eb4fULL

void sl_checksum64_begin(sl_checksum64_state *s) {
  *s = (sl_checksum64_state){.lane = {CHECKSUM_K1, CHECKSUM_K2, CHECKSUM_K1 ^ CHECKSUM_K2, CHECKSUM_K1 + CHECKSUM_K2}};
}

/* One 32-byte group into the four lanes. */
static void checksum_group(uint64_t lane[4], const unsigned char *p) {
  for (int l = 0; l < 4; l++) {
    uint64_t w;
    memcpy(&w, p + 8 * l, 8);
    lane[l] = rotl64(lane[l] + w * CHECKSUM_K2, 31) * CHECKSUM_K1;
  }
}

void sl_checksum64_add(sl_checksum64_state *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->n += n;
  if (s->held) { /* complete the group an earlier call began */
    size_t take = 32 - s->held < n ? 32 - s->held : n;
    memcpy(s->group + s->held, p, take);
    s->held += (unsigned)take, p += take, n -= take;
    if (s->held < 32) return;
    checksum_group(s->lane, s->group);
    s->held = 0;
  }
  for (; n >= 32; p += 32, n -= 32) checksum_group(s->lane, p);
  memcpy(s->group, p, n);
  s->held = (unsigned)n;
}

uint64_t sl_checksum64_end(const sl_checksum64_state *s) {
  uint64_t h = s->n * CHECKSUM_K1;
  for (int l = 0; l < 4; l++) h = rotl64(h ^ s->lane[l], 27) * CHECKSUM_K1 + CHECKSUM_K2;
  return sl_fnv1a(s->group, s->held, h) * CHECKSUM_K2; /* the tail (under 32 bytes) */
}

uint64_t sl_checksum64(const void *data, size_t n) {
  sl_checksum64_state s;
  sl_checksum64_begin(&s);
  sl_checksum64_add(&s, data, n);
  return sl_checksum64_end(&s);
}
