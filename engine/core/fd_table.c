/* Room for many open files, made while the process has one thread
 * (fd_table.h). */
#include "engine/core/fd_table.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

int sl_fd_table_grow_early(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  rlim_t want = SL_FD_TABLE_SLOTS;
  if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    struct rlimit raised = {.rlim_cur = want, .rlim_max = rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = want;
  }
  rlim_t slots = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > SL_FD_TABLE_SLOTS ? SL_FD_TABLE_SLOTS : rl.rlim_cur;
  if (slots < 2) return (int)slots;
  /* A descriptor at the table's last slot makes the kernel size the table
   * for all of them at once; closed at once, the room stays. */
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)slots - 1);
  if (high >= 0) close(high);
  close(fd);
  return high >= 0 ? (int)slots : 0;
}
