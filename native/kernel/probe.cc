#include "kernel/probe.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "kernel/clone_trampoline.h"
#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/raw_syscall.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif

namespace proctree {
namespace {

constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;

struct CloneArgs {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};

struct ChildTask {
  bool subreaper;   // try PR_SET_CHILD_SUBREAPER, exit with its errno
  int procs_fd;     // clone fallback: join this cgroup.procs first
};

// The throwaway child: raw syscalls only (it shares our memory), then exit
// with 0 or the errno of what it tried.
int probe_child(void* arg) {
  const ChildTask* t = static_cast<const ChildTask*>(arg);
  long r = 0;
  if (t->procs_fd >= 0) r = raw::syscall3(__NR_write, t->procs_fd, reinterpret_cast<long>("0"), 1);
  if (r >= 0 && t->subreaper) r = raw::syscall2(__NR_prctl, PR_SET_CHILD_SUBREAPER, 1);
  for (;;) raw::syscall1(__NR_exit, r < 0 ? -r : 0);
}

class SignalsBlocked {
 public:
  SignalsBlocked() {
    uint64_t all = ~uint64_t{0};
    raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), reinterpret_cast<long>(&old_), 8);
  }
  ~SignalsBlocked() { raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old_), 0, 8); }

 private:
  uint64_t old_ = 0;
};

// Starts a throwaway child with `flags` (clone3 when use_clone3, else clone)
// and waits for it. Returns 0 when it ran and exited 0, else the errno of the
// clone or the child's own exit code (an errno).
int run_child(ChildStack& stack, bool use_clone3, uint64_t flags, int cgroup_fd, ChildTask task) {
  if (SysError e = stack.ensure()) return e.err;
  long pid;
  {
    SignalsBlocked blocked;
    if (use_clone3) {
      CloneArgs ca{};
      ca.flags = CLONE_VM | CLONE_VFORK | flags;
      ca.exit_signal = SIGCHLD;
      ca.stack = reinterpret_cast<uint64_t>(stack.base());
      ca.stack_size = stack.size();
      if (cgroup_fd >= 0) {
        ca.flags |= kCloneIntoCgroup;
        ca.cgroup = static_cast<uint64_t>(cgroup_fd);
      }
      pid = proctree_clone3(&ca, sizeof ca, probe_child, &task);
    } else {
      void* top = static_cast<char*>(stack.base()) + stack.size();
      pid = clone(probe_child, top, CLONE_VM | CLONE_VFORK | SIGCHLD | static_cast<int>(flags), &task);
      if (pid < 0) pid = -errno;
    }
  }
  if (pid < 0) return static_cast<int>(-pid);
  int status = 0;
  while (waitpid(static_cast<pid_t>(pid), &status, __WALL) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return EINTR;
}

void set(Probe* p, int err, const char* syscall, std::string detail = {}) {
  p->ok = err == 0;
  p->err = err;
  p->syscall = syscall;
  p->detail = std::move(detail);
}

std::atomic<unsigned> g_probe_seq{0};

}  // namespace

HostProbes probe_host(const std::string& helper, ChildStack& stack) {
  HostProbes h;

  // pidfd_open / pidfd_send_signal on ourselves: harmless, and exactly what
  // every ladder relies on.
  Fd self(static_cast<int>(syscall(__NR_pidfd_open, getpid(), 0)));
  set(&h.pidfd, self ? 0 : errno, "pidfd_open");
  if (self) {
    int r = static_cast<int>(syscall(__NR_pidfd_send_signal, self.get(), 0, nullptr, 0));
    set(&h.pidfd_send_signal, r == 0 ? 0 : errno, "pidfd_send_signal");
  } else {
    set(&h.pidfd_send_signal, h.pidfd.err, "pidfd_open");
  }

  // clone3 on its own, then into a throwaway cgroup.
  int c3 = run_child(stack, true, 0, -1, ChildTask{false, -1});
  set(&h.clone3, c3, "clone3");

  if (SysError e = locate_cgroup2(&h.location)) {
    set(&h.cgroup2, e.err, e.syscall, e.path);
  } else {
    set(&h.cgroup2, 0, "", h.location.mount + " (own cgroup " + h.location.own + ")");
  }

  Probe no_cgroup;
  if (h.cgroup2.ok) {
    std::string path = h.location.own_path + "/proctree-probe-" + std::to_string(getpid()) + "-" +
                       std::to_string(g_probe_seq.fetch_add(1));
    CgroupDir dir;
    if (SysError e = CgroupDir::create(path, false, &dir)) {
      set(&h.delegation, e.err, "mkdir", path);
      set(&h.cgroup_kill, e.err, "mkdir", "no call cgroup to try it on");
      set(&h.freeze, e.err, "mkdir", "no call cgroup to try it on");
      set(&h.clone_into_cgroup, e.err, "mkdir", "no call cgroup to try it on");
    } else {
      // A real child placed into it, the way a call's would be.
      if (h.clone3.ok) {
        int r = run_child(stack, true, 0, dir.dir_fd(), ChildTask{false, -1});
        set(&h.clone_into_cgroup, r, "clone3");
      } else {
        set(&h.clone_into_cgroup, h.clone3.err, "clone3");
      }
      int placed = h.clone_into_cgroup.err;
      const char* how = "clone3";
      if (!h.clone_into_cgroup.ok) {
        // The fallback: a clone() child that writes itself into cgroup.procs.
        how = "cgroup.procs";
        if (SysError o = dir.open_procs_for_write()) {
          placed = o.err;
        } else {
          placed = run_child(stack, false, 0, -1, ChildTask{false, dir.procs_fd()});
        }
      }
      set(&h.delegation, placed, how, placed == 0 ? path : "placing a child into " + path);
      // cgroup.kill / cgroup.freeze on the empty throwaway: present and writable.
      if (!dir.has_file("cgroup.kill")) {
        set(&h.cgroup_kill, ENOENT, "open", "no cgroup.kill (Linux < 5.14)");
      } else if (SysError k = dir.write_file("cgroup.kill", "1")) {
        set(&h.cgroup_kill, k.err, "write", "cgroup.kill");
      } else {
        set(&h.cgroup_kill, 0, "");
      }
      if (!dir.has_file("cgroup.freeze")) {
        set(&h.freeze, ENOENT, "open", "no cgroup.freeze (Linux < 5.2)");
      } else if (SysError f = dir.write_file("cgroup.freeze", "1")) {
        set(&h.freeze, f.err, "write", "cgroup.freeze");
      } else {
        dir.write_file("cgroup.freeze", "0");
        set(&h.freeze, 0, "");
      }
      dir.close();
      rmdir(path.c_str());
    }
  } else {
    for (Probe* p : {&h.delegation, &h.cgroup_kill, &h.freeze, &h.clone_into_cgroup}) {
      set(p, h.cgroup2.err, h.cgroup2.syscall, "no cgroup2");
    }
  }

  // PID namespace: directly (root), else inside a user namespace.
  bool c3ok = h.clone3.ok;
  int ns = run_child(stack, c3ok, CLONE_NEWPID, -1, ChildTask{false, -1});
  int uns = run_child(stack, c3ok, CLONE_NEWUSER | CLONE_NEWPID, -1, ChildTask{false, -1});
  set(&h.userns, uns, c3ok ? "clone3" : "clone", "CLONE_NEWUSER|CLONE_NEWPID");

  if (access(helper.c_str(), X_OK) != 0) {
    set(&h.helper, errno, "access", helper);
  } else {
    set(&h.helper, 0, "", helper);
  }
  if (ns == 0 || uns == 0) {
    set(&h.pidns, h.helper.ok ? 0 : h.helper.err, h.helper.ok ? "" : "access",
        h.helper.ok ? (ns == 0 ? "CLONE_NEWPID" : "CLONE_NEWUSER|CLONE_NEWPID") : "proctree-helper missing: " + helper);
  } else {
    set(&h.pidns, ns, c3ok ? "clone3" : "clone", "CLONE_NEWPID");
  }

  int sr = run_child(stack, c3ok, 0, -1, ChildTask{true, -1});
  if (sr != 0) {
    set(&h.subreaper, sr, "prctl", "PR_SET_CHILD_SUBREAPER");
  } else {
    set(&h.subreaper, h.helper.ok ? 0 : h.helper.err, h.helper.ok ? "" : "access",
        h.helper.ok ? "PR_SET_CHILD_SUBREAPER" : "proctree-helper missing: " + helper);
  }
  return h;
}

}  // namespace proctree
