// The child side of spawn: what runs between the clone and the exec, on a
// private stack, sharing the harness's memory (CLONE_VM), while the parent
// thread is suspended (a vfork) or goes on (spawn_process_started: the
// stack, ChildArgs and all it points to are then held until the report).
// Every signal is blocked until its handlers are reset, so no handler of
// the harness ever runs here. It uses raw system calls only and calls nothing
// through the PLT: an unresolved first call would run the dynamic linker
// here. Everything it needs is prepared by the parent (kernel/spawn.cc) in
// ChildArgs, lengths included; it only reads those and writes its report.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace proctree {

// The step that failed, reported as the error's `syscall`.
enum ChildStage : int {
  kStageNone = 0,
  kStageCgroup,
  kStageSetsid,
  kStageDup2,
  kStageCtty,
  kStageChdir,
  kStageSetgroups,
  kStageSetgid,
  kStageSetuid,
  kStageExecve,
  kStageUserns,
  kStagePdeathsig,
};
const char* child_stage_syscall(int stage);

struct ChildArgs {
  char* const* candidates;
  char* const* argv;
  char* const* envp;
  char** sh_argv;  // {"/bin/sh", slot, argv[1]...}: the ENOEXEC fallback
  const char* cwd;
  // fds[i] becomes fd i in the child (every source is >= nfds, so no dup
  // clobbers another); kInherit keeps the harness's own fd i, kClosed
  // closes it.
  const int* fds;
  int nfds;
  int procs_fd;     // clone() fallback: write "0" here to join the cgroup
  bool new_session;
  bool controlling_tty;  // fd 0 is a terminal: make it the session's (TIOCSCTTY)
  bool set_uid, set_gid;
  uid_t uid;
  gid_t gid;
  int pdeathsig;
  // A new user namespace: "<uid> <uid> 1\n" and its length, for uid_map and
  // gid_map; nullptr otherwise.
  const char* uid_map;
  long uid_map_len;
  const char* gid_map;
  long gid_map_len;
  const void* default_action;  // a zeroed kernel sigaction: SIG_DFL
  // close_range(CLOSE_RANGE_CLOEXEC) needs Linux 5.11; without it the parent
  // lists the open descriptors and the child marks each close-on-exec.
  bool close_range_works;
  const int* open_fds;
  int n_open_fds;

  // Written by the child. With a real vfork the parent reads them after the
  // clone returns, and a started spawn once the kernel has cleared its
  // report word (the child exec'd or exited: PendingExec); under an emulator
  // that copies memory instead, the child also writes its report to
  // report_fd (a pipe), -1 otherwise.
  volatile int ran;
  volatile int stage;
  volatile int err;
  int report_fd;
};

constexpr int kInherit = -1;  // fds[i]: the harness's own fd i
constexpr int kClosed = -2;   // fds[i]: no fd i in the child

// The clone's entry point: arg is a ChildArgs*. Never returns.
int child_main(void* arg);

}  // namespace proctree
