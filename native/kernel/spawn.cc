#include "kernel/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "kernel/stdio_fds.h"
#include "kernel/syscalls.h"

extern char** environ;

namespace proctree {
namespace {

// The kernel's sigaction layout; all-zero is SIG_DFL, no flags, empty mask.
struct KernelSigaction {
  unsigned long handler;
  unsigned long flags;
  unsigned long restorer;
  unsigned long mask;
};
const KernelSigaction kDefaultAction{};

std::vector<char*> to_cstrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (size_t i = 0; i < v.size(); ++i) out.push_back(const_cast<char*>(v[i].c_str()));
  out.push_back(nullptr);
  return out;
}

// How the child reports a failure before exec. With a real vfork it shares
// our memory and writes ChildArgs directly: nothing another process could
// hold open or block. Under an emulator that turns vfork into fork (qemu-user)
// the memory is a copy, so a pipe is needed. Unknown until the first spawn
// shows which (the child sets `ran` in what it believes is our memory).
enum ReportMode { kUnknown, kSharedMemory, kPipe };
std::atomic<int> g_report_mode{kUnknown};

// The open descriptors, for the close-on-exec fallback (no close_range).
std::vector<int> list_open_fds() {
  std::vector<int> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  int self = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd != self) out.push_back(fd);
  }
  closedir(d);
  return out;
}

void reap(int pidfd) {
  siginfo_t info;
  while (waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(pidfd), &info, WEXITED) < 0 &&
         errno == EINTR) {
  }
}

}  // namespace

bool close_range_cloexec_works() {
  static const bool works = [] {
    const char* off = getenv("PROCTREE_TEST_NO_CLOSE_RANGE");
    if (off && strcmp(off, "1") == 0) return false;
    // An empty range at the very top: no descriptor is touched, and a kernel
    // without the flag (5.9, 5.10) or the call (< 5.9) says so.
    return syscall(__NR_close_range, UINT_MAX - 1, UINT_MAX, CLOSE_RANGE_CLOEXEC) == 0;
  }();
  return works;
}

SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out) {
  const int nfds = static_cast<int>(req.fds.size());
  if (nfds < 3) return SysError::of(EINVAL, "dup2");
  for (int fd : req.fds) {
    if (fd != kInherit && fd != kClosed && fd < nfds) return SysError::of(EINVAL, "dup2");
  }

  std::vector<char*> candidates = to_cstrings(req.candidates);
  std::vector<char*> argv = to_cstrings(req.argv);
  std::vector<char*> envp;
  if (!req.inherit_env) envp = to_cstrings(req.envp);
  std::vector<char*> sh_argv;
  sh_argv.reserve(req.argv.size() + 2);
  sh_argv.push_back(const_cast<char*>("/bin/sh"));
  sh_argv.push_back(nullptr);  // the candidate, set by the child
  for (size_t i = 1; i < req.argv.size(); ++i) sh_argv.push_back(const_cast<char*>(req.argv[i].c_str()));
  sh_argv.push_back(nullptr);

  ChildArgs args{};
  args.candidates = candidates.data();
  args.argv = argv.data();
  args.envp = req.inherit_env ? environ : envp.data();
  args.sh_argv = req.shell_fallback ? sh_argv.data() : nullptr;
  args.cwd = req.cwd.empty() ? nullptr : req.cwd.c_str();
  args.fds = req.fds.data();
  args.nfds = nfds;
  args.procs_fd = -1;
  args.new_session = req.new_session;
  args.controlling_tty = req.controlling_tty;
  args.set_uid = req.set_uid;
  args.set_gid = req.set_gid;
  args.uid = req.uid;
  args.gid = req.gid;
  args.pdeathsig = req.pdeathsig;
  args.default_action = &kDefaultAction;
  std::string uid_map, gid_map;
  if (req.ns_flags & CLONE_NEWUSER) {
    uid_map = std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1\n";
    gid_map = std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1\n";
    args.uid_map = uid_map.c_str();
    args.uid_map_len = static_cast<long>(uid_map.size());
    args.gid_map = gid_map.c_str();
    args.gid_map_len = static_cast<long>(gid_map.size());
  }
  args.close_range_works = close_range_cloexec_works();
  std::vector<int> open_fds;
  if (!args.close_range_works) {
    open_fds = list_open_fds();
    args.open_fds = open_fds.data();
    args.n_open_fds = static_cast<int>(open_fds.size());
  }

  Fd report_read, report_write;
  args.report_fd = -1;
  if (g_report_mode.load(std::memory_order_relaxed) != kSharedMemory) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
    report_read.reset(p[0]);
    report_write.reset(p[1]);
    if (SysError e = lift_above(&report_write, nfds)) return e;
    args.report_fd = report_write.get();
  }

  CloneRequest creq;
  creq.ns_flags = req.ns_flags;
  creq.cgroup_fd = req.cgroup_dir;
  creq.child_procs_fd = &args.procs_fd;
  Fd late_procs;
  creq.late_procs = &late_procs;
  Cloned child;
  if (SysError e = clone_vfork(stack, creq, child_main, &args, &child)) return e;

  int stage = kStageNone, err = 0;
  if (args.ran) {
    // The child wrote into our memory: a real vfork. It has exec'd or
    // exited by now, and its report (if any) is in args.
    g_report_mode.store(kSharedMemory, std::memory_order_relaxed);
    stage = args.stage;
    err = args.err;
  } else {
    // A copy of our memory: wait for the exec (EOF on the close-on-exec
    // pipe) or the report.
    g_report_mode.store(kPipe, std::memory_order_relaxed);
    report_write.reset();
    int rep[2];
    ssize_t n;
    do {
      n = read(report_read.get(), rep, sizeof rep);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof rep)) {
      stage = rep[0];
      err = rep[1];
    }
  }
  if (stage != kStageNone) {
    reap(child.pidfd.get());
    return SysError::of(err, child_stage_syscall(stage), stage == kStageChdir ? req.cwd : std::string());
  }
  out->pid = child.pid;
  out->pidfd = std::move(child.pidfd);
  out->method = child.method;
  return SysError::none();
}

}  // namespace proctree
