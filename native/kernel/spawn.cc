#include "kernel/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

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

std::string own_id_map(unsigned id) { return std::to_string(id) + " " + std::to_string(id) + " 1\n"; }

namespace {

// Everything the child reads, built from a request that outlives it.
struct ChildPrep {
  std::vector<char*> candidates, argv, envp, sh_argv;
  std::string env_block;  // inherit_env: a copy of environ's strings
  std::string uid_map, gid_map;
  std::vector<int> open_fds;
  ChildReport report{};
  ChildArgs args{};
};

// Our environment's strings, copied into one block: the child must read
// nothing a setenv() on another thread can free (musl frees the string it
// replaces; glibc reallocates the array). One pass, so a string that grows
// meanwhile cannot overflow a size measured before.
void copy_environ(ChildPrep* p) {
  size_t n = 0, bytes = 0;
  for (; environ[n]; ++n) bytes += strlen(environ[n]) + 1;
  p->env_block.reserve(bytes + 256);
  std::vector<size_t> offsets;
  offsets.reserve(n + 8);
  for (char** e = environ; *e; ++e) {
    offsets.push_back(p->env_block.size());
    p->env_block.append(*e);
    p->env_block.push_back('\0');
  }
  p->envp.clear();
  p->envp.reserve(offsets.size() + 1);
  for (size_t off : offsets) p->envp.push_back(&p->env_block[off]);
  p->envp.push_back(nullptr);
}

SysError validate_fds(const SpawnRequest& req) {
  const int nfds = static_cast<int>(req.fds.size());
  if (nfds < 3) return SysError::of(EINVAL, "dup2");
  for (int fd : req.fds) {
    if (fd != kInherit && fd != kClosed && fd < nfds) return SysError::of(EINVAL, "dup2");
  }
  return SysError::none();
}

void prepare_child(const SpawnRequest& req, ChildPrep* p) {
  p->candidates = to_cstrings(req.candidates);
  p->argv = to_cstrings(req.argv);
  if (!req.inherit_env) {
    p->envp = to_cstrings(req.envp);
  } else {
    copy_environ(p);
  }
  p->sh_argv.reserve(req.argv.size() + 2);
  p->sh_argv.push_back(const_cast<char*>("/bin/sh"));
  p->sh_argv.push_back(nullptr);  // the candidate, set by the child
  for (size_t i = 1; i < req.argv.size(); ++i) p->sh_argv.push_back(const_cast<char*>(req.argv[i].c_str()));
  p->sh_argv.push_back(nullptr);

  ChildArgs& args = p->args;
  args.candidates = p->candidates.data();
  args.argv = p->argv.data();
  args.envp = p->envp.data();
  args.sh_argv = req.shell_fallback ? p->sh_argv.data() : nullptr;
  args.cwd = req.cwd.empty() ? nullptr : req.cwd.c_str();
  args.fds = req.fds.data();
  args.nfds = static_cast<int>(req.fds.size());
  args.procs_fd = -1;
  args.new_session = req.new_session;
  args.controlling_tty = req.controlling_tty;
  args.set_uid = req.set_uid;
  args.set_gid = req.set_gid;
  args.uid = req.uid;
  args.gid = req.gid;
  args.pdeathsig = req.pdeathsig;
  args.default_action = &kDefaultAction;
  if (req.ns_flags & CLONE_NEWUSER) {
    p->uid_map = own_id_map(geteuid());
    p->gid_map = own_id_map(getegid());
    args.uid_map = p->uid_map.c_str();
    args.uid_map_len = static_cast<long>(p->uid_map.size());
    args.gid_map = p->gid_map.c_str();
    args.gid_map_len = static_cast<long>(p->gid_map.size());
    args.ambient_caps = req.ambient_caps;
  }
  args.close_range_works = close_range_cloexec_works();
  if (!args.close_range_works) {
    p->open_fds = list_open_fds();
    args.open_fds = p->open_fds.data();
    args.n_open_fds = static_cast<int>(p->open_fds.size());
  }
  args.report_fd = -1;
  args.report = &p->report;
  args.own_pid = nullptr;
  args.wake_pid = nullptr;
}

SysError stage_error(int stage, int err, const SpawnRequest& req) {
  return SysError::of(err, child_stage_syscall(stage), stage == kStageChdir ? req.cwd : std::string());
}

}  // namespace

namespace {

// The report page of a child that runs on a copy of our memory (no
// CLONE_VM): MAP_SHARED, so what the child writes there is ours to read.
class SharedReport {
 public:
  SharedReport() = default;
  SharedReport(const SharedReport&) = delete;
  SharedReport& operator=(const SharedReport&) = delete;
  ~SharedReport() {
    if (page_) munmap(page_, sizeof(ChildReport));
  }
  SysError map() {
    void* m = mmap(nullptr, sizeof(ChildReport), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return SysError::from_errno("mmap");
    page_ = static_cast<ChildReport*>(m);  // zero-filled
    return SysError::none();
  }
  ChildReport* get() const { return page_; }

 private:
  ChildReport* page_ = nullptr;
};

constexpr int kExitShowsMs = 1000;

// The child's exit, if it has exited, left for its reaper (it stays a zombie
// for its pidfd): false while it runs.
bool peek_exit(int pidfd, siginfo_t* info) {
  *info = siginfo_t{};
  int r;
  do {
    r = waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(pidfd), info, WEXITED | WNOHANG | WNOWAIT);
  } while (r < 0 && errno == EINTR);
  return r == 0 && info->si_pid != 0;
}

bool child_exited(int pidfd) {
  siginfo_t info;
  return peek_exit(pidfd, &info);
}

// Whether a child that let go of our memory without running a single step
// died of SIGKILL. Such a child is dying, but a vfork ends as it releases
// its memory, a moment before its exit shows: that moment is waited for
// (bounded: an exit can be held up).
bool child_killed(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  while (poll(&p, 1, kExitShowsMs) < 0 && errno == EINTR) {
  }
  siginfo_t info;
  return peek_exit(pidfd, &info) && info.si_code == CLD_KILLED && info.si_status == SIGKILL;
}

}  // namespace

void snapshot_environ(SpawnRequest* req) {
  if (!req->inherit_env) return;
  req->envp.clear();
  for (char** e = environ; *e; ++e) req->envp.emplace_back(*e);
  req->inherit_env = false;
}

bool read_early_ids(const EarlyIds& ids, pid_t* pid, int* pidfd) {
  int p = __atomic_load_n(&ids.pid, __ATOMIC_ACQUIRE);
  if (p <= 0) return false;
  *pid = static_cast<pid_t>(p);
  *pidfd = __atomic_load_n(&ids.pidfd, __ATOMIC_ACQUIRE);
  return true;
}

bool take_early_ids(EarlyIds* ids, pid_t* pid, int* pidfd) {
  uint32_t was = EarlyIds::kOpen;
  if (!__atomic_compare_exchange_n(&ids->claim, &was, EarlyIds::kTaken, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      was != EarlyIds::kTaken) {
    return false;
  }
  // Read after the claim: ids seen before it may be a retired child's.
  return read_early_ids(*ids, pid, pidfd);
}

void reopen_early_ids(EarlyIds* ids) {
  __atomic_store_n(&ids->pid, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ids->pidfd, -1, __ATOMIC_RELAXED);
  __atomic_store_n(&ids->claim, EarlyIds::kOpen, __ATOMIC_RELEASE);
}

namespace {

// A child nobody took is retired: nobody acts on it from now on.
bool retire_early_ids(EarlyIds* ids) {
  if (!ids) return true;
  uint32_t was = EarlyIds::kOpen;
  return __atomic_compare_exchange_n(&ids->claim, &was, EarlyIds::kRetired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

}  // namespace

SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out, EarlyIds* early) {
  if (SysError e = validate_fds(req)) return e;
  const int nfds = static_cast<int>(req.fds.size());
  // A child that changes uid or gid gets a copy of our memory: one sharing
  // it would mark this process non-dumpable (the kernel does so for every
  // process on an mm whose credentials change), as Node avoids by forking.
  const bool share_memory = !req.set_uid && !req.set_gid;
  ChildPrep prep;
  prepare_child(req, &prep);
  ChildArgs& args = prep.args;
  SharedReport shared;
  if (!share_memory) {
    if (SysError e = shared.map()) return e;
    args.report = shared.get();
  }
  EarlyIds local_ids;
  EarlyIds* ids = early ? early : &local_ids;
  __atomic_store_n(&ids->pid, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ids->pidfd, -1, __ATOMIC_RELAXED);
  // clone() has no slot for the pid next to the pidfd: the child stores it
  // (only where it shares our memory and sees its pid as we do).
  if (early && share_memory && !(req.ns_flags & CLONE_NEWPID)) args.own_pid = &early->pid;
  if (early && share_memory) args.wake_pid = &early->pid;

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
  creq.share_memory = share_memory;
  creq.no_clone3 = req.no_clone3;
  creq.parent_tid = &ids->pid;
  creq.pidfd_out = &ids->pidfd;
  Cloned child;
  if (SysError e = clone_vfork(stack, creq, child_main, &args, &child)) return e;
  // Published at the latest now (pidfd_open's fallback, or a clone() that
  // could not have them written early).
  __atomic_store_n(&ids->pidfd, child.pidfd.get(), __ATOMIC_RELEASE);
  __atomic_store_n(&ids->pid, static_cast<int>(child.pid), __ATOMIC_RELEASE);

  int stage = kStageNone, err = 0;
  const ChildReport& rep = *args.report;
  if (rep.ran) {
    // The child wrote its report where we read: a real vfork. It has
    // exec'd or exited by now, and its report (if any) is in.
    g_report_mode.store(kSharedMemory, std::memory_order_relaxed);
    stage = rep.stage;
    err = rep.err;
  } else if (report_read) {
    // A copy of our memory (an emulator's vfork returns at once, the child
    // still running), or a child killed before it ran a single step: wait
    // for the exec (EOF on the close-on-exec pipe) or the report. Only a
    // child that is still there says "emulator".
    if (!child_exited(child.pidfd.get())) g_report_mode.store(kPipe, std::memory_order_relaxed);
    report_write.reset();
    int pipe_rep[2];
    ssize_t n;
    do {
      n = read(report_read.get(), pipe_rep, sizeof pipe_rep);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof pipe_rep)) {
      stage = pipe_rep[0];
      err = pipe_rep[1];
    }
  }
  // Otherwise (a real vfork known, and nothing ran): the child was killed
  // before its first step, born into a frozen cgroup and killed by its
  // pidfd. Not an error of the spawn: its exit status says what happened.
  // Unless nobody else could have had its pidfd: then it was the kernel, as
  // the child was born into its cgroup (kKilledAtBirth).
  bool killed_at_birth = stage == kStageNone && req.birth_kill_is_error && !rep.ran && req.cgroup_dir >= 0 &&
                         child.method == CloneMethod::kClone3 &&
                         g_report_mode.load(std::memory_order_relaxed) == kSharedMemory &&
                         child_killed(child.pidfd.get()) && retire_early_ids(early);
  if (stage != kStageNone || killed_at_birth) {
    reap(child.pidfd.get());
    if (early) {
      out->pid = child.pid;
      out->pidfd = std::move(child.pidfd);
      out->method = child.method;
    }
    if (killed_at_birth) return SysError::of(kKilledAtBirth, "clone3");
    return stage_error(stage, err, req);
  }
  out->pid = child.pid;
  out->pidfd = std::move(child.pidfd);
  out->method = child.method;
  return SysError::none();
}

}  // namespace proctree
