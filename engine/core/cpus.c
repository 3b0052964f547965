/* CPUs this process may use. See cpus.h. The cgroup files are read along the
 * process's cgroup path and every ancestor (a limit anywhere above applies). */
#include "engine/core/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sl_cpus_from_cfs(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  long long n = (quota_us + period_us - 1) / period_us;
  return n < 1 ? 1 : (n > 1 << 20 ? 1 << 20 : (int)n);
}

int sl_cpus_from_cpu_max(const char *text) {
  char quota[32];
  long long period = 0;
  if (sscanf(text, "%31s %lld", quota, &period) != 2 || period <= 0) return 0;
  if (!strcmp(quota, "max")) return 0;
  char *end;
  long long q = strtoll(quota, &end, 10);
  if (*end || q <= 0) return 0;
  return sl_cpus_from_cfs(q, period);
}

static int read_text(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = 0;
  return n > 0;
}

/* The smallest positive limit along `dir` (inside mount) and its ancestors. */
static int limit_along(const char *mount, const char *dir, int v2) {
  char path[4096], rel[2048], text[128];
  snprintf(rel, sizeof rel, "%s", dir);
  int best = 0;
  for (;;) {
    int n = 0;
    if (v2) {
      snprintf(path, sizeof path, "%s%s/cpu.max", mount, rel);
      if (read_text(path, text, sizeof text)) n = sl_cpus_from_cpu_max(text);
    } else {
      char qtext[64], ptext[64];
      snprintf(path, sizeof path, "%s%s/cpu.cfs_quota_us", mount, rel);
      int ok = read_text(path, qtext, sizeof qtext);
      snprintf(path, sizeof path, "%s%s/cpu.cfs_period_us", mount, rel);
      if (ok && read_text(path, ptext, sizeof ptext))
        n = sl_cpus_from_cfs(atoll(qtext), atoll(ptext));
    }
    if (n > 0 && (best == 0 || n < best)) best = n;
    char *slash = strrchr(rel, '/');
    if (!slash || rel[0] == 0) break;
    *slash = 0; /* the parent; "" is the mount's root */
  }
  return best;
}

/* The quota limit of this process's cgroup, or 0 when there is none. */
static int cgroup_cpus(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return 0;
  char line[4096];
  int best = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = 0;
    *c2 = 0;
    const char *controllers = c1 + 1, *dir = c2 + 1;
    if (!strcmp(dir, "/")) dir = "";
    int n = 0;
    if (!strcmp(line, "0") && !controllers[0])
      n = limit_along("/sys/fs/cgroup", dir, 1);
    else if (strstr(controllers, "cpu") && !strstr(controllers, "cpuset")) {
      char mount[256];
      snprintf(mount, sizeof mount, "/sys/fs/cgroup/%s", controllers);
      n = limit_along(mount, dir, 0);
    }
    if (n > 0 && (best == 0 || n < best)) best = n;
  }
  fclose(f);
  return best;
}

int sl_usable_cpus(void) {
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    n = online > 0 ? (int)online : 1;
  }
  int quota = cgroup_cpus();
  if (quota > 0 && quota < n) n = quota;
  return n;
}
