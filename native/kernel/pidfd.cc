#include "kernel/pidfd.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace proctree {

Fd pidfd_open(pid_t pid) { return Fd(static_cast<int>(syscall(__NR_pidfd_open, pid, 0))); }

int pidfd_signal(int pidfd, int sig) {
  if (syscall(__NR_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0) return 0;
  return errno;
}

SysError pidfd_reap(int pidfd, ExitStatus* out) {
  siginfo_t info{};
  int r;
  do {
    r = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return SysError::from_errno("waitid");
  if (info.si_pid == 0) {
    out->done = false;
    return SysError::none();
  }
  out->done = true;
  if (info.si_code == CLD_EXITED) {
    out->code = info.si_status;
    out->signal = 0;
  } else {
    out->code = -1;
    out->signal = info.si_status;
  }
  return SysError::none();
}

}  // namespace proctree
