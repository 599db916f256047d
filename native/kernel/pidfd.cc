#include "kernel/pidfd.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel/syscalls.h"

namespace proctree {

Fd pidfd_open(pid_t pid) { return Fd(static_cast<int>(syscall(__NR_pidfd_open, pid, 0))); }

int pidfd_signal(int pidfd, int sig) {
  if (syscall(__NR_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0) return 0;
  return errno;
}

SysError pidfd_reap(int pidfd, ExitStatus* out, bool keep_zombie) {
  siginfo_t info{};
  int r;
  do {
    r = waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(pidfd), &info,
               WEXITED | WNOHANG | (keep_zombie ? WNOWAIT : 0));
  } while (r < 0 && errno == EINTR);
  if (r < 0) return SysError::from_errno("waitid");
  if (info.si_pid == 0) {
    out->done = false;
    return SysError::none();
  }
  out->done = true;
  // siginfo's times are in clock ticks.
  static const double ms_per_tick = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  out->user_ms = static_cast<double>(info.si_utime) * ms_per_tick;
  out->system_ms = static_cast<double>(info.si_stime) * ms_per_tick;
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
