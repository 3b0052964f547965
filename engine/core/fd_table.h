/* Room for many open files, made while the process has one thread.
 *
 * Linux grows a process's file-descriptor table by doubling it, and in a
 * process with more than one thread each growth waits for an RCU grace
 * period (the old table may still be read by another thread): 5-30 ms a
 * doubling. A detector acquisition of 263 data files, opened once the CUDA
 * warm-up thread and the readers exist, paid three doublings: 12-25 ms on
 * the 2-CPU development VM and 50-90 ms on the H200's host, inside the
 * source's first call. Grown once at start-up, before any thread, it costs
 * microseconds (bench/device/load_sweep.sh, the source's "reading" note).
 *
 * The soft RLIMIT_NOFILE is raised towards the hard limit (up to
 * SL_FD_TABLE_SLOTS) so that an acquisition of many files can be opened, and
 * the table is grown to it. Best effort: any failure leaves things as they
 * were. */
#ifndef SL_FD_TABLE_H
#define SL_FD_TABLE_H

/* Descriptors made room for at start-up (a table of 16384 slots is 128 KiB
 * of kernel memory). */
#define SL_FD_TABLE_SLOTS 16384

/* Call first in main(), before any thread is started. Returns the number of
 * descriptor slots the table has room for afterwards (as far as known). */
int sl_fd_table_grow_early(void);

#endif
