// Shared by the native unit tests: a cgroup of the test's own (unique name,
// below the test's cgroup, removed by the test), waiting for a pidfd, and a
// seccomp filter that makes this process see the kernel as an emulator does.
#pragma once

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

// Kills every member, waits for the cgroup to empty, removes it.
inline void destroy_test_cgroup(proctree::CgroupDir* dir) {
  if (!dir->valid()) return;
  dir->write_file("cgroup.kill", "1");
  for (int i = 0; i < 200; ++i) {
    proctree::CgroupEvents ev;
    if (dir->read_events(&ev) || !ev.populated) break;
    usleep(10 * 1000);
  }
  dir->remove();
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
  int status = 0;
  waitpid(pid, &status, 0);
  return exit_code(status);
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
  int status = 0;
  waitpid(pid, &status, 0);
  return exit_code(status);
}

}  // namespace fixtures
