#include "kernel/probe.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/raw_syscall.h"
#include "kernel/spawn.h"
#include "kernel/broker_client.h"
#include "kernel/stdio_fds.h"
#include "kernel/systemd_probe.h"
#include "kernel/syscalls.h"

extern char** environ;

namespace proctree {
namespace {

struct ChildTask {
  bool subreaper;  // try PR_SET_CHILD_SUBREAPER, exit with its errno
  int procs_fd;    // clone fallback: join this cgroup.procs first
  // In a new user namespace: map our uid as a call's child does (a harness
  // that changed its uid is not dumpable, and that write fails).
  const char* uid_map = nullptr;
  long uid_map_len = 0;
  // The seal's steps (helper/seal.cc), in the new namespaces: *seal_step
  // says which one failed (1 unshare, 2 mount /, 3 mount proc, 4 mount cgroup2).
  int* seal_step = nullptr;
};

// The throwaway child: raw syscalls only (it shares our memory), then exit
// with 0 or the errno of what it tried.
__attribute__((no_sanitize("address", "undefined"))) int probe_child(void* arg) {
  const ChildTask* t = static_cast<const ChildTask*>(arg);
  long r = 0;
  if (t->procs_fd >= 0) r = raw::syscall3(__NR_write, t->procs_fd, reinterpret_cast<long>("0"), 1);
  if (r >= 0 && t->uid_map) r = raw::write_file("/proc/self/uid_map", t->uid_map, t->uid_map_len);
  if (r >= 0 && t->subreaper) r = raw::syscall2(__NR_prctl, PR_SET_CHILD_SUBREAPER, 1);
  if (r >= 0 && t->seal_step) {
    *t->seal_step = 1;
    r = raw::syscall1(__NR_unshare, CLONE_NEWCGROUP);
    if (r >= 0) {
      *t->seal_step = 2;
      r = raw::syscall5(__NR_mount, 0, reinterpret_cast<long>("/"), 0, MS_REC | MS_PRIVATE, 0);
    }
    if (r >= 0) {
      *t->seal_step = 3;
      r = raw::syscall5(__NR_mount, reinterpret_cast<long>("proc"), reinterpret_cast<long>("/proc"),
                        reinterpret_cast<long>("proc"), MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
    }
    if (r >= 0) {
      *t->seal_step = 4;
      r = raw::syscall5(__NR_mount, reinterpret_cast<long>("cgroup2"), reinterpret_cast<long>("/sys/fs/cgroup"),
                        reinterpret_cast<long>("cgroup2"), MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
    }
    if (r >= 0) *t->seal_step = 0;
  }
  for (;;) raw::syscall1(__NR_exit, r < 0 ? -r : 0);
}

// Starts a throwaway child (into cgroup_fd when >= 0) and waits for it with
// waitid(P_PIDFD), the way every call is waited for. Returns 0 when it ran
// and exited 0, else the errno of the clone, of the wait, or the child's own.
int run_child(ChildStack& stack, uint64_t ns_flags, int cgroup_fd, ChildTask task, int* wait_err = nullptr) {
  CloneRequest req;
  req.ns_flags = ns_flags;
  req.cgroup_fd = cgroup_fd;
  req.child_procs_fd = &task.procs_fd;
  Fd late;
  req.late_procs = &late;
  Cloned c;
  if (SysError e = clone_vfork(stack, req, probe_child, &task, &c)) return e.err;
  siginfo_t info{};
  int r;
  do {
    r = waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(c.pidfd.get()), &info, WEXITED);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    int err = errno;
    if (wait_err) *wait_err = err;
    // Reap it by number: it is our unreaped child, so the number is its own.
    while (waitpid(c.pid, nullptr, __WALL) < 0 && errno == EINTR) {
    }
    return err;
  }
  if (info.si_code == CLD_EXITED) return info.si_status;
  // Nobody else knows of the child: a SIGKILL placing it into a cgroup was
  // the kernel's, at its birth.
  if (cgroup_fd >= 0 && info.si_code == CLD_KILLED && info.si_status == SIGKILL) return kKilledAtBirth;
  return EINTR;
}

void set(Probe* p, int err, const char* syscall, std::string detail = {}) {
  p->ok = err == 0;
  p->err = err;
  p->syscall = syscall;
  p->detail = std::move(detail);
}

// Runs `helper --version` and checks that it answers with its name: the
// helper exists, is executable, links and runs here (a helper built for
// another libc or architecture fails this, not only a missing file).
void probe_helper(const std::string& helper, ChildStack& stack, Probe* out) {
  if (access(helper.c_str(), X_OK) != 0) {
    set(out, errno, "access", helper);
    return;
  }
  std::vector<StdioSpec> spec(3);
  spec[0].kind = StdioSpec::kIgnore;
  spec[1].kind = StdioSpec::kPipe;
  spec[2].kind = StdioSpec::kIgnore;
  PreparedStdio io;
  if (SysError e = prepare_stdio(spec, PtySize{}, &io)) {
    set(out, e.err, e.syscall, helper);
    return;
  }
  SpawnRequest req;
  req.candidates = {helper};
  req.argv = {helper, "--version"};
  req.inherit_env = true;
  req.shell_fallback = false;
  req.fds = io.fds;
  SpawnResult res;
  if (SysError e = spawn_process(req, stack, &res)) {
    set(out, e.err, e.syscall, helper);
    return;
  }
  io.child.clear();
  std::string text;
  char buf[256];
  // Bounded: a helper that hangs is as broken as one that cannot run.
  for (int waited = 0; waited < 2000;) {
    pollfd p{io.parent[1].get(), POLLIN, 0};
    int r = poll(&p, 1, 100);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      waited += 100;
      continue;
    }
    ssize_t n = read(io.parent[1].get(), buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  pidfd_signal(res.pidfd.get(), SIGKILL);
  siginfo_t info;
  while (waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(res.pidfd.get()), &info, WEXITED) < 0 &&
         errno == EINTR) {
  }
  if (text.compare(0, 16, "proctree-helper ") != 0) {
    set(out, ENOEXEC, "execve", helper + " did not answer --version" + (text.empty() ? "" : ": " + text));
    return;
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  set(out, 0, "", helper + " (" + text + ")");
}

std::atomic<unsigned> g_probe_seq{0};

}  // namespace

HostProbes probe_host(const std::string& helper, ChildStack& stack) {
  HostProbes h;

  // pidfd_open / pidfd_send_signal on ourselves: harmless, and exactly what
  // every ladder relies on.
  Fd self = pidfd_open(getpid());
  set(&h.pidfd, self ? 0 : errno, "pidfd_open");
  if (self) {
    set(&h.pidfd_send_signal, pidfd_signal(self.get(), 0), "pidfd_send_signal");
  } else {
    set(&h.pidfd_send_signal, h.pidfd.err, "pidfd_open");
  }

  // A throwaway child, waited for with waitid(P_PIDFD) (Linux 5.4).
  int wait_err = 0;
  int c3 = run_child(stack, 0, -1, ChildTask{false, -1}, &wait_err);
  set(&h.clone3, clone3_available() ? c3 : ENOSYS, "clone3");
  set(&h.waitid_pidfd, wait_err, "waitid", "P_PIDFD");

  if (SysError e = locate_cgroup2(&h.location)) {
    set(&h.cgroup2, e.err, e.syscall, e.path);
  } else {
    set(&h.cgroup2, 0, "", h.location.mount + " (own cgroup " + h.location.own + ")");
  }

  if (h.cgroup2.ok) {
    std::string path = h.location.own_path + "/proctree-probe-" + std::to_string(getpid()) + "-" +
                       std::to_string(g_probe_seq.fetch_add(1));
    CgroupDir dir;
    if (SysError e = CgroupDir::create(path, false, &dir)) {
      set(&h.delegation, e.err, "mkdir", path);
      for (Probe* p : {&h.cgroup_kill, &h.freeze, &h.clone_into_cgroup}) set(p, e.err, "mkdir", "no call cgroup to try it on");
    } else {
      // A real child placed into it, the way a call's would be: with clone3
      // the kernel places it, with the fallback it writes cgroup.procs.
      int placed = run_child(stack, 0, dir.dir_fd(), ChildTask{false, -1});
      const bool killed_at_birth = placed == kKilledAtBirth && clone3_available();
      if (killed_at_birth) {
        // The kernel holds our own cgroup for killed (see kKilledAtBirth):
        // it kills every child clone3 places into another cgroup. Children
        // join their cgroup by cgroup.procs instead.
        give_up_clone3();
        placed = run_child(stack, 0, dir.dir_fd(), ChildTask{false, -1});
      }
      bool into = clone3_available();
      if (killed_at_birth) {
        set(&h.clone_into_cgroup, kKilledAtBirth, "clone3",
            "the kernel killed the child at birth: this process's own cgroup was killed once (its cgroup.kill), "
            "and Linux 6.14+ kills whatever clone3 places from it into another cgroup; children join theirs by "
            "cgroup.procs");
      } else {
        set(&h.clone_into_cgroup, into ? placed : ENOSYS, "clone3");
      }
      set(&h.delegation, placed, into ? "clone3" : "cgroup.procs", placed == 0 ? path : "placing a child into " + path);
      // cgroup.kill / cgroup.freeze on the empty throwaway: present and writable.
      if (!dir.has_kill()) {
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
      dir.remove();
    }
  } else {
    for (Probe* p : {&h.delegation, &h.cgroup_kill, &h.freeze, &h.clone_into_cgroup}) {
      set(p, h.cgroup2.err, h.cgroup2.syscall, "no cgroup2");
    }
  }

  probe_helper(helper, stack, &h.helper);

  // PID namespace: directly (root), else inside a user namespace.
  const char* how = clone3_available() ? "clone3" : "clone";
  int ns = run_child(stack, CLONE_NEWPID, -1, ChildTask{false, -1});
  const std::string uid_map = own_id_map(geteuid());
  ChildTask in_userns{false, -1, uid_map.c_str(), static_cast<long>(uid_map.size())};
  int uns = run_child(stack, CLONE_NEWUSER | CLONE_NEWPID, -1, in_userns);
  // The likely cause, named: after a uid change the process is not
  // dumpable, its /proc files are root's, and the map cannot be written.
  const char* uns_how =
      uns == EACCES && prctl(PR_GET_DUMPABLE) == 0
          ? "CLONE_NEWUSER|CLONE_NEWPID, then /proc/self/uid_map: this process is not dumpable (it changed its uid)"
          : "CLONE_NEWUSER|CLONE_NEWPID";
  set(&h.userns, uns, how, uns_how);
  set(&h.pidns, ns == 0 ? 0 : uns, how, ns == 0 ? "CLONE_NEWPID" : uns_how);

  // A sealed call's namespaces, tried as its shim makes them (helper/seal.cc),
  // in a throwaway child whose mounts die with it.
  int seal_step = 0;
  ChildTask sealed{false, -1, uid_map.c_str(), static_cast<long>(uid_map.size()), &seal_step};
  int sl = run_child(stack, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, -1, sealed);
  static const char* const kSealSteps[] = {"CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS", "unshare(CLONE_NEWCGROUP)",
                                           "mount(MS_REC|MS_PRIVATE, /)", "mount(proc, /proc)",
                                           "mount(cgroup2, /sys/fs/cgroup)"};
  const int step = sl == 0 ? 0 : seal_step;
  set(&h.seal, sl, step == 1 ? "unshare" : step >= 2 ? "mount" : how,
      sl == 0 ? "user, PID, mount and cgroup namespaces, /proc and /sys/fs/cgroup of their own"
              : kSealSteps[step >= 0 && step <= 4 ? step : 0]);

  int sr = run_child(stack, 0, -1, ChildTask{true, -1});
  set(&h.subreaper, sr, "prctl", "PR_SET_CHILD_SUBREAPER");

  // Connecting to it is the whole probe: no process is started until a call
  // of the systemd tier needs the broker.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  UserManagerProbe um = probe_user_manager(env);
  set(&h.user_manager, um.ok ? 0 : um.err, um.syscall,
      um.ok ? um.socket + " (calls go to the scope " + broker_unit_name() + ")" : um.detail);
  return h;
}

}  // namespace proctree
