#include "kernel/fd_table.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

namespace proctree {

int grow_fd_table(int fd, int below) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(below) > rl.rlim_cur) {
    below = static_cast<int>(rl.rlim_cur);
  }
  if (below <= fd + 1) return below;
  // The lowest free descriptor at or above below - 1: placing it there makes
  // the kernel grow the table to fit it first (a free one is found at once
  // when the table is already that large).
  int dup = fcntl(fd, F_DUPFD_CLOEXEC, below - 1);
  if (dup < 0) return 0;
  close(dup);
  return below;
}

}  // namespace proctree
