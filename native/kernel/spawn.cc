#include "kernel/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "kernel/clone_trampoline.h"
#include "kernel/raw_syscall.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace proctree {
namespace {

constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;

// Our own copy of the kernel's struct clone_args (v2, Linux 5.7), so the build
// does not depend on the headers of the machine that compiles it.
struct CloneArgs {
  uint64_t flags;
  uint64_t pidfd;
  uint64_t child_tid;
  uint64_t parent_tid;
  uint64_t exit_signal;
  uint64_t stack;
  uint64_t stack_size;
  uint64_t tls;
  uint64_t set_tid;
  uint64_t set_tid_size;
  uint64_t cgroup;
};

// The kernel's sigaction layout; all-zero means SIG_DFL, no flags, empty mask.
struct KernelSigaction {
  unsigned long handler;
  unsigned long flags;
  unsigned long restorer;
  unsigned long mask;
};

enum Stage : int {
  kStageCgroup = 1,
  kStageSigaction,
  kStageSetsid,
  kStageDup2,
  kStageChdir,
  kStageSetgroups,
  kStageSetgid,
  kStageSetuid,
  kStageExecve,
  kStageUserns,
  kStagePdeathsig,
  kStagePassFd,
};

const char* stage_syscall(int stage) {
  switch (stage) {
    case kStageCgroup: return "cgroup.procs";
    case kStageSigaction: return "sigaction";
    case kStageSetsid: return "setsid";
    case kStageDup2: return "dup2";
    case kStageChdir: return "chdir";
    case kStageSetgroups: return "setgroups";
    case kStageSetgid: return "setgid";
    case kStageSetuid: return "setuid";
    case kStageUserns: return "uid_map";
    case kStagePdeathsig: return "prctl";
    case kStagePassFd: return "dup3";
    default: return "execve";
  }
}

struct ChildReport {
  int stage;
  int err;
};

// Everything the child needs, prepared by the parent: the child only reads it.
struct ChildArgs {
  char* const* candidates;
  char* const* argv;
  char* const* envp;
  const char* cwd;
  int stdio[3];
  int procs_fd;
  int report_fd;
  bool new_session;
  bool set_uid, set_gid;
  uid_t uid;
  gid_t gid;
  int pass_fd;
  int pdeathsig;
  const char* uid_map;  // "<uid> <uid> 1\n" when in a new user namespace
  const char* gid_map;
};

// The child side runs on a private stack sharing our memory: no sanitizer
// code may run there (shadow-memory writes, no-return hooks), so sanitizer
// builds can still check everything else in this file.
#define PROCTREE_CHILD_SIDE __attribute__((no_sanitize("address", "undefined"), always_inline))
#define PROCTREE_CHILD_ENTRY __attribute__((no_sanitize("address", "undefined")))

// open + write + close with raw syscalls; 0 or -errno.
inline PROCTREE_CHILD_SIDE long write_proc_file(const char* path, const char* text) {
  long fd = raw::syscall4(__NR_openat, AT_FDCWD, reinterpret_cast<long>(path), O_WRONLY | O_CLOEXEC, 0);
  if (fd < 0) return fd;
  long len = 0;
  while (text[len]) ++len;
  long r = raw::syscall3(__NR_write, fd, reinterpret_cast<long>(text), len);
  raw::syscall1(__NR_close, fd);
  return r < 0 ? r : 0;
}

[[noreturn]] PROCTREE_CHILD_ENTRY void child_fail(const ChildArgs* a, int stage, long neg_err) {
  ChildReport r{stage, static_cast<int>(-neg_err)};
  raw::syscall3(__NR_write, a->report_fd, reinterpret_cast<long>(&r), sizeof r);
  for (;;) raw::syscall1(__NR_exit, 127);
}

inline PROCTREE_CHILD_SIDE bool exec_error_is_not_found(long e) {
  return e == -ENOENT || e == -ENOTDIR || e == -ESTALE || e == -ENODEV || e == -ETIMEDOUT;
}

// The child side. Raw system calls only: this runs on the harness's memory
// (CLONE_VM) while the parent thread is suspended.
PROCTREE_CHILD_ENTRY int child_main(void* arg) {
  const ChildArgs* a = static_cast<const ChildArgs*>(arg);
  long r;

  // A new user namespace starts with no mapping: map our own ids 1:1 (the
  // one mapping an unprivileged process may write for itself), setgroups
  // denied first as the kernel requires for gid_map.
  if (a->uid_map) {
    r = write_proc_file("/proc/self/setgroups", "deny");
    if (r < 0 && r != -ENOENT) child_fail(a, kStageUserns, r);
    r = write_proc_file("/proc/self/uid_map", a->uid_map);
    if (r < 0) child_fail(a, kStageUserns, r);
    r = write_proc_file("/proc/self/gid_map", a->gid_map);
    if (r < 0) child_fail(a, kStageUserns, r);
  }

  // Fallback path (no CLONE_INTO_CGROUP): join the call's cgroup before any of
  // the command's code runs. Writing "0" moves the writer itself.
  if (a->procs_fd >= 0) {
    r = raw::syscall3(__NR_write, a->procs_fd, reinterpret_cast<long>("0"), 1);
    if (r < 0) child_fail(a, kStageCgroup, r);
  }

  // Handlers installed by the harness must never run here (they would run on
  // the harness's memory) and must not be inherited as ignored: reset them all
  // to default before any signal is unblocked, as posix_spawn and libuv do.
  KernelSigaction dfl{};
  for (long sig = 1; sig < 65; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    raw::syscall4(__NR_rt_sigaction, sig, reinterpret_cast<long>(&dfl), 0, 8);
  }

  if (a->new_session) {
    r = raw::syscall0(__NR_setsid);
    if (r < 0) child_fail(a, kStageSetsid, r);
  }

  // Sources are all >= 3 (the parent made sure), so no dup clobbers another.
  for (int i = 0; i < 3; ++i) {
    if (a->stdio[i] < 0) {
      // Inherited as is; the harness may hold its own 0..2 with FD_CLOEXEC
      // (Node does for some stdio types), which would close them at exec.
      raw::syscall3(__NR_fcntl, i, F_SETFD, 0);
      continue;
    }
    r = raw::syscall3(__NR_dup3, a->stdio[i], i, 0);
    if (r < 0) child_fail(a, kStageDup2, r);
  }

  if (a->cwd) {
    r = raw::syscall1(__NR_chdir, reinterpret_cast<long>(a->cwd));
    if (r < 0) child_fail(a, kStageChdir, r);
  }

  if (a->set_gid) {
    r = raw::syscall2(__NR_setgroups, 0, 0);
    if (r < 0) child_fail(a, kStageSetgroups, r);
    r = raw::syscall1(__NR_setgid, a->gid);
    if (r < 0) child_fail(a, kStageSetgid, r);
  }
  if (a->set_uid) {
    r = raw::syscall1(__NR_setuid, a->uid);
    if (r < 0) child_fail(a, kStageSetuid, r);
  }

  if (a->pdeathsig) {
    r = raw::syscall2(__NR_prctl, PR_SET_PDEATHSIG, a->pdeathsig);
    if (r < 0) child_fail(a, kStagePdeathsig, r);
  }

  // Nothing of the harness but 0..2 may reach the command. CLOEXEC rather than
  // close keeps the report pipe usable until exec succeeds.
  raw::syscall3(__NR_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (a->pass_fd >= 0) {
    // dup3 without O_CLOEXEC leaves fd 3 open across exec.
    r = a->pass_fd == 3 ? raw::syscall3(__NR_fcntl, 3, F_SETFD, 0)
                        : raw::syscall3(__NR_dup3, a->pass_fd, 3, 0);
    if (r < 0) child_fail(a, kStagePassFd, r);
  }

  uint64_t empty_mask = 0;
  raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&empty_mask), 0, 8);

  // execvpe semantics: skip candidates that do not exist, remember EACCES.
  bool saw_eacces = false;
  for (char* const* c = a->candidates; *c; ++c) {
    r = raw::syscall3(__NR_execve, reinterpret_cast<long>(*c), reinterpret_cast<long>(a->argv),
                      reinterpret_cast<long>(a->envp));
    if (r == -EACCES) {
      saw_eacces = true;
    } else if (!exec_error_is_not_found(r)) {
      child_fail(a, kStageExecve, r);
    }
  }
  child_fail(a, kStageExecve, saw_eacces ? -EACCES : -ENOENT);
}

std::vector<char*> to_cstrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::atomic<bool> g_clone3_works{true};
std::atomic<bool> g_clone_pidfd_works{true};

// Blocks every signal, glibc-internal ones included, for the life of the
// object: a handler that ran in the CLONE_VM child would run on our memory.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    uint64_t all = ~uint64_t{0};
    raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all),
                  reinterpret_cast<long>(&old_), 8);
  }
  ~AllSignalsBlocked() {
    raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old_), 0, 8);
  }

 private:
  uint64_t old_ = 0;
};

}  // namespace

const char* clone_method_name(CloneMethod m) {
  switch (m) {
    case CloneMethod::kClone3: return "clone3";
    case CloneMethod::kClone: return "clone";
    default: return "clone+pidfd_open";
  }
}

bool clone3_available() { return g_clone3_works.load(std::memory_order_relaxed); }

ChildStack::~ChildStack() {
  if (map_) munmap(map_, map_size_);
}

SysError ChildStack::ensure() {
  if (map_) return SysError::none();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_ = 256 * 1024;
  map_size_ = size_ + page;  // one guard page below the stack
  void* m = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return SysError::from_errno("mmap");
  mprotect(m, page, PROT_NONE);
  map_ = m;
  base_ = static_cast<char*>(m) + page;
  return SysError::none();
}

SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out) {
  if (SysError e = stack.ensure()) return e;
  for (int fd : req.stdio) {
    if (fd >= 0 && fd < 3) return SysError::of(EINVAL, "dup2");
  }

  std::vector<char*> candidates = to_cstrings(req.candidates);
  std::vector<char*> argv = to_cstrings(req.argv);
  std::vector<char*> envp = to_cstrings(req.envp);

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
  Fd report_read(report[0]);
  Fd report_write(report[1]);

  ChildArgs args{};
  args.candidates = candidates.data();
  args.argv = argv.data();
  args.envp = envp.data();
  args.cwd = req.cwd.empty() ? nullptr : req.cwd.c_str();
  for (int i = 0; i < 3; ++i) args.stdio[i] = req.stdio[i];
  args.procs_fd = -1;
  args.report_fd = report_write.get();
  args.new_session = req.new_session;
  args.set_uid = req.set_uid;
  args.set_gid = req.set_gid;
  args.uid = req.uid;
  args.gid = req.gid;
  args.pass_fd = req.pass_fd;
  args.pdeathsig = req.pdeathsig;
  std::string uid_map, gid_map;
  if (req.ns_flags & CLONE_NEWUSER) {
    uid_map = std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1\n";
    gid_map = std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1\n";
    args.uid_map = uid_map.c_str();
    args.gid_map = gid_map.c_str();
  }

  int pidfd = -1;
  long pid = -ENOSYS;
  Fd late_procs;
  CloneMethod method = CloneMethod::kClone3;
  {
    AllSignalsBlocked blocked;
    if (g_clone3_works.load(std::memory_order_relaxed)) {
      CloneArgs ca{};
      ca.flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | req.ns_flags;
      ca.pidfd = reinterpret_cast<uint64_t>(&pidfd);
      ca.exit_signal = SIGCHLD;
      ca.stack = reinterpret_cast<uint64_t>(stack.base());
      ca.stack_size = stack.size();
      if (req.cgroup_dir >= 0) {
        ca.flags |= kCloneIntoCgroup;
        ca.cgroup = static_cast<uint64_t>(req.cgroup_dir);
      }
      pid = proctree_clone3(&ca, sizeof ca, child_main, &args);
      // ENOSYS: seccomp (Docker's default profile) or qemu-user; EPERM
      // without namespace flags: a seccomp filter that answers clone3 with
      // EPERM instead; E2BIG: a kernel that predates the cgroup field. All
      // mean: use clone().
      if (pid == -ENOSYS || pid == -E2BIG || (pid == -EPERM && req.ns_flags == 0)) {
        g_clone3_works.store(false, std::memory_order_relaxed);
        pid = -ENOSYS;
      }
    } else {
      pid = -ENOSYS;
    }
    if (pid == -ENOSYS) {
      // clone() cannot place the child into a cgroup: the child joins it
      // itself, before running anything of the command.
      method = CloneMethod::kClone;
      // The first spawn that finds clone3 missing has no cgroup.procs open
      // yet (the registry opens it only once clone3 is known to be gone).
      if (req.cgroup_dir >= 0 && req.cgroup_procs < 0) {
        late_procs.reset(openat(req.cgroup_dir, "cgroup.procs", O_WRONLY | O_CLOEXEC));
        if (!late_procs) return SysError::from_errno("open", "cgroup.procs");
      }
      args.procs_fd = req.cgroup_dir >= 0 ? (req.cgroup_procs >= 0 ? req.cgroup_procs : late_procs.get()) : -1;
      void* top = static_cast<char*>(stack.base()) + stack.size();
      int flags = CLONE_VM | CLONE_VFORK | SIGCHLD | static_cast<int>(req.ns_flags);
      if (g_clone_pidfd_works.load(std::memory_order_relaxed)) {
        pid = clone(child_main, top, flags | CLONE_PIDFD, &args, &pidfd);
        if (pid < 0 && errno == EINVAL) {
          // qemu-user before 8.0 refuses CLONE_PIDFD: open the pidfd after.
          g_clone_pidfd_works.store(false, std::memory_order_relaxed);
        }
        if (pid < 0) pid = -errno;
      }
      if (!g_clone_pidfd_works.load(std::memory_order_relaxed)) {
        method = CloneMethod::kClonePidfdOpen;
        pid = clone(child_main, top, flags, &args, nullptr);
        if (pid < 0) pid = -errno;
      }
    }
  }
  if (pid < 0) {
    return SysError::of(static_cast<int>(-pid), method == CloneMethod::kClone3 ? "clone3" : "clone");
  }
  if (method == CloneMethod::kClonePidfdOpen) {
    // The child has not been reaped (only we wait for it), so its pid cannot
    // have been reused yet: pidfd_open here is still race-free.
    pidfd = static_cast<int>(syscall(__NR_pidfd_open, pid, 0));
    if (pidfd < 0) {
      SysError e = SysError::from_errno("pidfd_open");
      waitpid(static_cast<pid_t>(pid), nullptr, 0);
      return e;
    }
  }
  Fd owned_pidfd(pidfd);

  // With a real vfork the child has exec'd or exited by now; under emulators
  // that turn vfork into fork this read waits for the exec (EOF on CLOEXEC).
  report_write.reset();
  ChildReport rep{};
  ssize_t n;
  do {
    n = read(report_read.get(), &rep, sizeof rep);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof rep)) {
    siginfo_t info;
    while (waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(owned_pidfd.get()), &info,
                  WEXITED) < 0 &&
           errno == EINTR) {
    }
    std::string path;
    if (rep.stage == kStageChdir) path = req.cwd;
    return SysError::of(rep.err, stage_syscall(rep.stage), path);
  }

  out->pid = static_cast<pid_t>(pid);
  out->pidfd = std::move(owned_pidfd);
  out->method = method;
  return SysError::none();
}

}  // namespace proctree
