// The child side of spawn: what runs between the clone and the exec, on a
// private stack, sharing the harness's memory (CLONE_VM) or, for a spawn
// that changes uid or gid, on a copy of it (a fork), while the spawning
// thread is suspended until the exec or exit (CLONE_VFORK, always).
// Every signal is blocked until its handlers are reset, so no handler of
// the harness ever runs here. It uses raw system calls only and calls nothing
// through the PLT: an unresolved first call would run the dynamic linker
// here. It touches no TLS either (child.cc is built without the stack
// protector, whose canary is read from the thread pointer): the thread
// pointer is the suspended spawning thread's, whose TLS the child shares
// (an errno written here would be that thread's).
// Everything it needs is prepared by the parent (kernel/spawn.cc) in
// ChildArgs, lengths included; it only reads those and writes its report.
// test/native/child-side-calls.mjs checks the built code for both rules.
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
  kStageCaps,
};
const char* child_stage_syscall(int stage);

// What the child writes before its exec, read by the parent once the child
// has exec'd or exited. In our memory (CLONE_VM), or in a MAP_SHARED page
// when the child runs on a copy of it (a spawn with uid or gid).
struct ChildReport {
  volatile int ran;
  volatile int stage;
  volatile int err;
};

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
  // In a new user namespace: capabilities (bits, all below 32) kept across
  // the exec as ambient ones (a sealed call's shim, which is not uid 0 in
  // its namespace when the harness is not root); 0 otherwise.
  unsigned ambient_caps;
  const void* default_action;  // a zeroed kernel sigaction: SIG_DFL
  // close_range(CLOSE_RANGE_CLOEXEC) needs Linux 5.11; without it the parent
  // lists the open descriptors and the child marks each close-on-exec.
  bool close_range_works;
  const int* open_fds;
  int n_open_fds;

  // The clone() fallback, sharing our memory, outside a new pid namespace:
  // where the child stores its own pid first thing (EarlyIds::pid, which
  // clone() cannot have the kernel write next to the pidfd); nullptr
  // otherwise.
  int* own_pid;
  // Sharing our memory: a word (EarlyIds::pid) whose waiters the child
  // wakes (a futex) first thing, once the kernel (or own_pid) has written
  // its pid there; nullptr otherwise. A thread waiting for the child to
  // exist is woken by it instead of polling.
  int* wake_pid;
  // Written by the child. With a real vfork the parent reads it after the
  // clone returns (the child has exec'd or exited by then); under an
  // emulator that copies memory instead, the child also writes its report
  // to report_fd (a pipe), -1 otherwise.
  ChildReport* report;
  int report_fd;
};

constexpr int kInherit = -1;  // fds[i]: the harness's own fd i
constexpr int kClosed = -2;   // fds[i]: no fd i in the child

// The clone's entry point: arg is a ChildArgs*. Never returns.
int child_main(void* arg);

}  // namespace proctree
