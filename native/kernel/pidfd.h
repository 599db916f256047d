// Addressing processes by pidfd: a signal through a pidfd whose process is
// gone fails with ESRCH instead of reaching whoever got the number next.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

// pidfd_open(pid, 0); an invalid Fd with errno set on failure.
Fd pidfd_open(pid_t pid);
// 0 on success, else errno (ESRCH: the process is gone).
int pidfd_signal(int pidfd, int sig);
// The signal to every process of the group whose id is the pidfd's process's
// pid (PIDFD_SIGNAL_PROCESS_GROUP, Linux 6.9), in one system call. The pidfd
// holds that pid: the group is the one the process led, even after it exited
// and was reaped, never a later group of the same number. 0, or errno
// (EINVAL before 6.9).
int pidfd_signal_group(int pidfd, int sig);

// The cgroup2 id of the cgroup the process is in now (its directory's inode
// number), asked of the pidfd itself (PIDFD_GET_INFO, Linux 6.13): 0 and
// the id, ESRCH when the process is gone, ENOTTY where the kernel cannot
// tell (asked once, then answered without a system call).
int pidfd_cgroup_id(int pidfd, uint64_t* id);

struct ExitStatus {
  bool done = false;  // false: still running
  int code = -1;      // exit code, or -1 when killed by a signal
  int signal = 0;     // terminating signal, 0 if it exited
  // CPU time of the process and of the children it waited for, in ms.
  double user_ms = 0;
  double system_ms = 0;
};

// waitid(P_PIDFD, WEXITED | WNOHANG) on our own child, and nothing else.
// keep_zombie (WNOWAIT): read the status but leave the child a zombie, which
// keeps its pid, and the session and group ids equal to it, from being reused.
SysError pidfd_reap(int pidfd, ExitStatus* out, bool keep_zombie = false);

}  // namespace proctree
