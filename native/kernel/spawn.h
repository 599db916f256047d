// Starting one tool call's main process: clone3(CLONE_VM | CLONE_VFORK |
// CLONE_PIDFD | CLONE_INTO_CGROUP) on a private stack, so the cost does not
// grow with the harness's RSS and the child never runs outside its cgroup.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

// A stack for the vfork child, reused across spawns of one environment: the
// calling thread is suspended until the child execs or exits.
class ChildStack {
 public:
  ChildStack() = default;
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  ~ChildStack();
  SysError ensure();
  void* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t map_size_ = 0;
  void* base_ = nullptr;
  size_t size_ = 0;
};

struct SpawnRequest {
  // Executables to try in order (PATH search is done by the caller, before the
  // clone); the child execs the first that exists, like execvpe.
  std::vector<std::string> candidates;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  std::string cwd;          // empty: keep the harness's
  int stdio[3] = {-1, -1, -1};  // fd to place at 0/1/2 (must be >= 3), -1 = inherit
  bool set_uid = false, set_gid = false;
  uid_t uid = 0;
  gid_t gid = 0;
  int cgroup_dir = -1;      // O_DIRECTORY fd of the call's cgroup, -1 = none
  int cgroup_procs = -1;    // that cgroup's cgroup.procs, opened for writing
  bool new_session = true;
  // Placed at fd 3 in the child without FD_CLOEXEC: the control socket of a
  // pidns/subreaper shim. -1 = none.
  int pass_fd = -1;
  // PR_SET_PDEATHSIG for the child, armed after any uid change (a uid change
  // clears it). Its "parent" is the thread that calls spawn_process.
  int pdeathsig = 0;
  // Extra clone flags: CLONE_NEWPID, optionally with CLONE_NEWUSER (then the
  // child maps its own uid and gid 1:1 before it execs).
  uint64_t ns_flags = 0;
};

// How the child was created, for capabilities() and the smoke tests.
enum class CloneMethod { kClone3, kClone, kClonePidfdOpen };
const char* clone_method_name(CloneMethod m);

struct SpawnResult {
  pid_t pid = -1;
  Fd pidfd;
  CloneMethod method = CloneMethod::kClone3;
};

// Either fills *out and returns no error, or returns the error of the step
// that failed ("clone3", "chdir", "execve", ...). A child that failed before
// exec has already been reaped.
SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out);

// Whether clone3 with CLONE_INTO_CGROUP is used (false after it was found
// missing: seccomp filters, qemu-user, kernels older than 5.7).
bool clone3_available();

}  // namespace proctree
