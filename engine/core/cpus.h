/* How many CPUs this process may use: the CPUs of its affinity mask
 * (taskset, cpusets, batch schedulers), further limited by a CPU quota of its
 * cgroup (containers: cgroup v2 cpu.max, v1 cpu.cfs_quota_us / period),
 * rounded up. Threads beyond that only take turns on the same cores. */
#ifndef SL_CPUS_H
#define SL_CPUS_H

/* At least 1. Read once per call (cheap: a syscall and a few small files). */
int sl_usable_cpus(void);

/* The CPUs a cgroup v2 `cpu.max` text allows ("max 100000" -> 0 = no limit,
 * "150000 100000" -> 2), or 0 when the text is not understood. */
int sl_cpus_from_cpu_max(const char *text);
/* The same for cgroup v1 quota and period in microseconds (quota <= 0: none). */
int sl_cpus_from_cfs(long long quota_us, long long period_us);

#endif
