#include "kernel/pidfd.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "kernel/syscalls.h"

namespace proctree {

Fd pidfd_open(pid_t pid) { return Fd(static_cast<int>(syscall(__NR_pidfd_open, pid, 0))); }

int pidfd_signal(int pidfd, int sig) {
  if (syscall(__NR_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0) return 0;
  return errno;
}

int pidfd_signal_group(int pidfd, int sig) {
  constexpr unsigned kSignalProcessGroup = 1U << 2;  // PIDFD_SIGNAL_PROCESS_GROUP, <linux/pidfd.h> of 6.9
  if (syscall(__NR_pidfd_send_signal, pidfd, sig, nullptr, kSignalProcessGroup) == 0) return 0;
  return errno;
}

namespace {

// <linux/pidfd.h> of Linux 6.13, which older headers lack.
struct PidfdInfo {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
};
constexpr uint64_t kPidfdInfoCgroupId = 1ULL << 2;
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);

std::atomic<bool> g_no_pidfd_info{false};

}  // namespace

int pidfd_cgroup_id(int pidfd, uint64_t* id) {
  if (g_no_pidfd_info.load(std::memory_order_relaxed)) return ENOTTY;
  PidfdInfo info{};
  info.mask = kPidfdInfoCgroupId;
  if (ioctl(pidfd, kPidfdGetInfo, &info) != 0) {
    int e = errno;
    if (e == ESRCH) return ESRCH;
    // No such request here (before 6.13: ENOTTY; a kernel without
    // cgroups, or one that refuses it: EINVAL and the like): never again.
    g_no_pidfd_info.store(true, std::memory_order_relaxed);
    return ENOTTY;
  }
  if (!(info.mask & kPidfdInfoCgroupId)) {
    g_no_pidfd_info.store(true, std::memory_order_relaxed);
    return ENOTTY;
  }
  *id = info.cgroupid;
  return 0;
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
