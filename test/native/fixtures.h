// Shared by the native unit tests: a cgroup of the test's own (unique name,
// below the test's cgroup, removed by the test), waiting for a pidfd, and a
// seccomp filter that makes this process see the kernel as an emulator does.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernel/cgroup.h"
#include "kernel/pidfd.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

namespace fixtures {

// Creates <own cgroup>/proctree-unit-<pid>-<n>. Returns an empty string and
// fills *why when this host has no writable cgroup2 (the caller skips).
inline std::string make_test_cgroup(proctree::CgroupDir* out, std::string* why) {
  static int counter = 0;
  proctree::CgroupLocation loc;
  if (proctree::SysError e = proctree::locate_cgroup2(&loc)) {
    *why = std::string("no cgroup2: ") + e.syscall + " " + e.path;
    return {};
  }
  std::string path =
      loc.own_path + "/proctree-unit-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  if (proctree::SysError e = proctree::CgroupDir::create(path, false, out)) {
    *why = "cannot create " + path + ": errno " + std::to_string(e.err);
    return {};
  }
  return path;
}

// The cgroup v2 path of a process, relative to the hierarchy's root, from
// the "0::" line of /proc/<pid>/cgroup. false when the process is gone.
inline bool pid_cgroup(pid_t pid, std::string* out) {
  std::string path = "/proc/" + std::to_string(pid) + "/cgroup";
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '0' && line[1] == ':' && line[2] == ':') {
      out->assign(line + 3);
      while (!out->empty() && out->back() == '\n') out->pop_back();
      found = true;
      break;
    }
  }
  fclose(f);
  return found;
}

// Kills every member (of nested cgroups too), waits (bounded) for the
// cgroup to empty, removes it and what was made below it.
inline void destroy_test_cgroup(proctree::CgroupDir* dir) {
  if (!dir->valid()) return;
  for (int i = 0; i < 200; ++i) {
    proctree::CgroupEvents ev;
    if (dir->read_events(&ev) || !ev.populated) break;
    // kill_round: cgroup.kill, or freeze + SIGKILL each member where the
    // kernel has no cgroup.kill.
    if (i % 20 == 0) dir->kill_round();
    usleep(10 * 1000);
  }
  dir->remove();
}

// A test's cgroup, destroyed when the test leaves its scope, whichever CHECK
// ended it: an early return must not leak the cgroup or its members.
class CgroupGuard {
 public:
  explicit CgroupGuard(proctree::CgroupDir* dir) : dir_(dir) {}
  CgroupGuard(const CgroupGuard&) = delete;
  CgroupGuard& operator=(const CgroupGuard&) = delete;
  ~CgroupGuard() { destroy_test_cgroup(dir_); }

 private:
  proctree::CgroupDir* dir_;
};

// Waits up to timeout_ms for this process's child pid to end, and reaps it.
// false when it is still running then (or is not our child): a test's wait
// must end even when the kill it waits for never came.
inline bool reap_within(pid_t pid, int* status, int timeout_ms = 10000) {
  int ignored = 0;
  if (!status) status = &ignored;
  for (int waited = 0;; waited += 5) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 || waited >= timeout_ms) return false;
    usleep(5 * 1000);
  }
}

// A child that waits in pause() until killed. It dies with this process
// (PR_SET_PDEATHSIG), so a test that crashes or a forked copy that ends
// early cannot leave it behind.
inline pid_t start_sleeper() {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);  // the parent was gone before the prctl
    for (;;) pause();
  }
  return pid;
}

// The children a test started, SIGKILLed and reaped when it leaves its
// scope unless reaped before through reap(). Only an unreaped child is
// signalled: its number cannot have been reused.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() { stop_all(); }

  pid_t add(pid_t pid) {
    if (pid > 0) live_.push_back(pid);
    return pid;
  }
  // n sleepers (fewer when fork fails: callers check the count).
  std::vector<pid_t> start_sleepers(int n) {
    std::vector<pid_t> out;
    for (int i = 0; i < n; ++i) {
      pid_t pid = add(start_sleeper());
      if (pid < 0) break;
      out.push_back(pid);
    }
    return out;
  }
  // Waits (bounded) for pid to end and reaps it; false if it did not end.
  bool reap(pid_t pid, int* status = nullptr, int timeout_ms = 10000) {
    if (!reap_within(pid, status, timeout_ms)) return false;
    forget(pid);
    return true;
  }
  // SIGKILLs and reaps these (each of ours and not reaped yet).
  void stop(const std::vector<pid_t>& pids) {
    for (pid_t p : pids) {
      if (!holds(p)) continue;
      kill(p, SIGKILL);
      reap(p);
    }
  }
  void stop_all() { stop(std::vector<pid_t>(live_)); }

 private:
  bool holds(pid_t pid) const {
    for (pid_t p : live_) {
      if (p == pid) return true;
    }
    return false;
  }
  void forget(pid_t pid) {
    for (size_t i = 0; i < live_.size(); ++i) {
      if (live_[i] == pid) {
        live_.erase(live_.begin() + static_cast<long>(i));
        return;
      }
    }
  }
  std::vector<pid_t> live_;
};

// Every live process but this one (zombies excluded, as a kernel thread
// has no arguments), with its arguments and its program (/proc/<pid>/comm).
template <typename Fn>
void for_each_live_process(Fn fn) {
  DIR* d = opendir("/proc");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::string base = std::string("/proc/") + e->d_name;
    proctree::Fd fd(open((base + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;
    char buf[4096];
    ssize_t n = read(fd.get(), buf, sizeof buf - 1);
    if (n <= 0) continue;
    buf[n] = '\0';
    std::vector<std::string> args;
    for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(strlen(buf + i)) + 1) args.emplace_back(buf + i);
    proctree::Fd st(open((base + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
    char sb[512];
    ssize_t m = st ? read(st.get(), sb, sizeof sb - 1) : -1;
    if (m <= 0) continue;
    sb[m] = '\0';
    // "pid (comm) S ...": comm may hold spaces and parentheses, the last ')' ends it.
    const char* open_paren = strchr(sb, '(');
    const char* close_paren = strrchr(sb, ')');
    if (!open_paren || !close_paren || close_paren[1] == '\0' || close_paren[2] == 'Z') continue;
    fn(pid, args, std::string(open_paren + 1, close_paren));
  }
  closedir(d);
}

// Live processes with `tok` as one whole argument and, when program is
// given, running that program: a shell whose script mentions the token, or
// a setsid about to exec the program, is not the program.
inline std::vector<pid_t> live_with(const std::string& tok, const char* program = nullptr) {
  std::vector<pid_t> out;
  for_each_live_process([&](pid_t pid, const std::vector<std::string>& args, const std::string& comm) {
    if (program && comm != program) return;
    for (const std::string& a : args) {
      if (a == tok) {
        out.push_back(pid);
        return;
      }
    }
  });
  return out;
}

// Live processes with `tok` anywhere in an argument, the shells whose
// scripts name it too: what must be gone once a call is cleaned up.
inline std::vector<pid_t> live_mentioning(const std::string& tok) {
  std::vector<pid_t> out;
  for_each_live_process([&](pid_t pid, const std::vector<std::string>& args, const std::string&) {
    for (const std::string& a : args) {
      if (a.find(tok) != std::string::npos) {
        out.push_back(pid);
        return;
      }
    }
  });
  return out;
}

// Polls live_with(tok, program) until it finds at least `want` (up to
// timeout_ms); the last count.
inline size_t wait_live_with(const std::string& tok, const char* program, size_t want, int timeout_ms = 5000) {
  size_t n = 0;
  for (int waited = 0; (n = live_with(tok, program).size()) < want && waited < timeout_ms; waited += 10) {
    usleep(10 * 1000);
  }
  return n;
}

// Blocks until the pidfd's process exits (up to timeout_ms), then reaps it.
inline proctree::ExitStatus wait_exit(int pidfd, int timeout_ms = 10000) {
  pollfd p{pidfd, POLLIN, 0};
  poll(&p, 1, timeout_ms);
  proctree::ExitStatus st;
  proctree::pidfd_reap(pidfd, &st);
  return st;
}

// Installs a filter: clone3 -> ENOSYS; with refuse_clone_pidfd, also
// clone(CLONE_PIDFD) -> EINVAL. Affects only the calling process and its children.
inline bool install_emulator_like_filter(bool refuse_clone_pidfd) {
#if defined(__x86_64__)
  const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  const unsigned arch = AUDIT_ARCH_AARCH64;
#endif
  const unsigned errno_enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  const unsigned errno_einval = SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA);
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 435 /* clone3 */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, errno_enosys),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
      // The flags argument (low 32 bits on a little-endian machine).
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, refuse_clone_pidfd ? CLONE_PIDFD : 0u, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, errno_einval),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// Installs a filter that answers each of the given system calls with
// -err (ENOSYS: "this kernel has no such call"), the rest allowed.
// Affects only the calling process and what it starts.
inline bool install_errno_filter(const std::vector<int>& nrs, int err) {
#if defined(__x86_64__)
  const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  const unsigned arch = AUDIT_ARCH_AARCH64;
#endif
  std::vector<sock_filter> f;
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  for (int nr : nrs) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)));
  }
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status); }

// Reaps a forked copy of the test within two minutes, else SIGKILLs it (its
// sleepers die with it, see start_sleeper): a copy that hangs fails the test
// (exit code 100 + SIGKILL) instead of hanging the run.
inline int reap_copy(pid_t pid) {
  if (pid < 0) return 97;
  int status = 0;
  if (!reap_within(pid, &status, 120 * 1000)) {
    std::printf("     the forked copy %d did not end within 120 s: killed\n", static_cast<int>(pid));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  return exit_code(status);
}

// Runs fn in a forked copy of this process; its exit status is the result.
template <typename Fn>
int run_forked(Fn fn) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = fn();
    fflush(stdout);
    _exit(rc);
  }
  return reap_copy(pid);
}

// Runs SCENARIO(name) in a fresh copy of this executable (see check.h), with
// the given environment variables added: what a forked copy cannot do when
// the code under test caches such a setting on first use. Its exit status.
inline int run_scenario(const char* name, const std::vector<std::pair<std::string, std::string>>& env = {}) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    char self[] = "/proc/self/exe";
    char flag[] = "--scenario";
    std::string n = name;
    char* argv[] = {self, flag, &n[0], nullptr};
    execv(self, argv);
    _exit(98);
  }
  return reap_copy(pid);
}

}  // namespace fixtures
