// Starting one tool call's main process: the parent side. Prepares
// everything the child side (kernel/child.cc) needs, clones it with
// clone_vfork (kernel/clone.h) straight into the call's cgroup when there is
// one, and reads its report: either it exec'd, or the step that failed.
//
// spawn_process is the one spawn primitive: it blocks its thread until the
// child has exec'd (a real vfork), so it is meant for a thread that may
// block (a spawner thread), and is safe on any thread. Because the thread
// waits, the kernel's vfork guarantees hold: the OOM killer skips the child
// while it shares our memory (it would otherwise be scored by the harness's
// RSS, and killing it kills everything sharing that memory), and the
// spawning thread (its TLS, its stack) outlives the child's use of them.
// Another thread learns the child's pid and pidfd before the exec through
// EarlyIds, even when the child is held before it (born into a frozen
// cgroup).
#pragma once

#include <errno.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/child.h"
#include "kernel/clone.h"
#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

struct SpawnRequest {
  // Executables to try in order (the PATH search is done by the caller); the
  // child execs the first that exists, like execvpe.
  std::vector<std::string> candidates;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  // true: the child gets this process's own environment (`environ`) and
  // envp is ignored. Its strings are copied when the spawn starts (one
  // block): a setenv() on another thread may free a replaced string (musl
  // does) while the child still reads.
  bool inherit_env = false;
  std::string cwd;  // empty: keep the harness's
  // fds[i] becomes fd i of the child: a descriptor that is >= fds.size() and
  // close-on-exec (see kernel/stdio_fds.h), kInherit or kClosed. At least 3 entries.
  std::vector<int> fds = {kInherit, kInherit, kInherit};
  // fd 0 is a terminal's slave side that becomes the controlling terminal of
  // the child's new session.
  bool controlling_tty = false;
  bool set_uid = false, set_gid = false;
  uid_t uid = 0;
  gid_t gid = 0;
  int cgroup_dir = -1;    // O_DIRECTORY fd of the call's cgroup, -1 = none
  bool new_session = true;
  // PR_SET_PDEATHSIG for the child, armed after any uid change. Its "parent"
  // is the thread that calls spawn_process.
  int pdeathsig = 0;
  // A file without #! runs through /bin/sh, as execvp does: right for a
  // user's command, wrong for our own helper (a helper that cannot run must
  // fail as such, not run as a shell script).
  bool shell_fallback = true;
  // Extra clone flags: CLONE_NEWPID, optionally with CLONE_NEWUSER (then the
  // child maps its own uid and gid 1:1 before it execs).
  uint64_t ns_flags = 0;
  // With CLONE_NEWUSER: capabilities (bits below 32) the child keeps across
  // its exec as ambient ones (kernel/child.h).
  unsigned ambient_caps = 0;
  // Nobody else can signal the child before spawn_process returns (its
  // pidfd is nobody else's yet, or, with EarlyIds, nobody took it: see
  // EarlyIds::claim): a child that clone3 placed into cgroup_dir and that
  // died of SIGKILL before its first step was then killed by the kernel at
  // birth, and spawn_process says so with kKilledAtBirth instead of handing
  // back a child that never ran.
  bool birth_kill_is_error = false;
  // clone() and the child's own write of cgroup_dir's cgroup.procs, even
  // where clone3 works: to start again, in the same cgroup, a child that
  // clone3 got killed at birth there (kKilledAtBirth).
  bool no_clone3 = false;
};

// The error (errno, with syscall "clone3") of a spawn whose child the kernel
// killed as it was born into its cgroup, before it ran anything: the cgroup
// was being killed, or the kernel counts it as killed. Linux 6.14 (and the
// stable kernels the fix went to) kills every child that clone3 places into
// a cgroup whose cgroup.kill count differs from the spawning thread's own
// cgroup's: into any cgroup that was ever killed (a leaf whose command wrote
// its own cgroup.kill), or into any cgroup at all from a harness whose own
// cgroup was killed before it joined. Nothing of the command ran, so the
// spawn can be made again: into a new leaf, or with clone() and a write of
// cgroup.procs, which that check does not cover.
constexpr int kKilledAtBirth = ECANCELED;

struct SpawnResult {
  pid_t pid = -1;
  Fd pidfd;
  CloneMethod method = CloneMethod::kClone3;
};

// The child's pid and pidfd, published while spawn_process still waits for
// the exec: plain ints the kernel (or the child) writes, for another thread
// to read with read_early_ids. spawn_process sets them to {0, -1} when it
// starts; a reader must not look before the spawning thread was handed the
// struct.
//   * clone3 (the usual path): the kernel writes the pidfd (CLONE_PIDFD) and
//     the pid (CLONE_PARENT_SETTID, only once the clone has succeeded)
//     before the spawning thread waits. That holds for a child born into a
//     frozen cgroup, which runs nothing, and for a spawn with uid/gid.
//   * clone() fallback (no clone3: seccomp, Linux 5.2 to 5.6), sharing our
//     memory, no new pid namespace: the kernel writes the pidfd, the child
//     stores its pid with a raw getpid as its very first step, before the
//     cgroup.procs write that may hold it (a frozen cgroup). With uid/gid (a
//     copy of our memory) or CLONE_NEWPID, nothing is published before the
//     clone returns, that is after the exec: the thread is blocked until
//     then, a child in a frozen cgroup included.
//   * clone() then pidfd_open (qemu-user < 8.0): pid and pidfd once the
//     clone returns (an emulator returns from vfork at once anyway).
// In every case spawn_process stores both before it returns.
//
// `claim` says whose the ids are. A reader takes them (take_early_ids)
// before it acts on the child; until then the child is nobody's but the
// spawning thread's, and a child that died of SIGKILL before its first step
// was killed by the kernel, at birth (birth_kill_is_error), so the spawn can
// be made again, for the same reader, with new ids (reopen_early_ids).
struct EarlyIds {
  static constexpr uint32_t kOpen = 0;     // nobody took them
  static constexpr uint32_t kTaken = 1;    // a reader did: no spawn again
  static constexpr uint32_t kRetired = 2;  // killed at birth: new ids come
  int pid = 0;
  int pidfd = -1;
  uint32_t claim = kOpen;
};

// Reader side, any thread: false until the pid is published; then *pid is
// the child's (in our pid namespace) and *pidfd its pidfd, or -1 while that
// is not visible yet (read again: on a weakly ordered machine the pid may
// show first, and pidfd_open's fallback has none before the clone returns).
// The pid is only ever written once the child exists, so a pidfd read
// after it is an installed descriptor, not a number the kernel took back
// from a clone that failed. Act on the child through the pidfd only
// (pidfd_send_signal); never wait for it or close the descriptor: it
// belongs to the spawning thread until spawn_process returns, and to its
// SpawnResult then.
bool read_early_ids(const EarlyIds& ids, pid_t* pid, int* pidfd);
// The same, for a reader that will act on the child: from now on the ids
// are its own (the spawn is not made again). false also while they are
// retired (a child killed at birth, whose spawn is made again): read again
// later.
bool take_early_ids(EarlyIds* ids, pid_t* pid, int* pidfd);
// Spawning thread, between two spawn_process calls of one request: the ids
// of a child killed at birth are withdrawn, and readers may take the next.
void reopen_early_ids(EarlyIds* ids);

// Either fills *out and returns no error, or returns the error of the step
// that failed ("clone3", "chdir", "execve", ...). A child that failed before
// exec has already been reaped. Blocks the calling thread while the child
// runs up to its exec (a vfork): for ever while the child is held before it
// (its cgroup frozen), until someone kills it by its pidfd (EarlyIds).
//
// A request with set_uid or set_gid is not cloned with CLONE_VM: the child
// runs on a copy of our memory (a fork, whose cost grows with our RSS, as
// Node's spawn) and reports through a shared page, so its setuid does not
// make this process non-dumpable. Every other spawn shares our memory until
// the exec, on `stack` (one per spawning thread).
//
// With `early`: see EarlyIds. Also, once a child existed (early->pid set),
// *out holds its pid and pidfd on return whatever the outcome: on an error
// the child is reaped, but its pidfd stays open in out->pidfd, so the number
// a reader saw is not reused before the caller closes it (after the reader
// is done with it). Without `early`, *out is left alone on an error.
SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out, EarlyIds* early = nullptr);

// Replaces inherit_env by a copy of `environ` in req->envp. For the thread
// that may call setenv (Node's main thread, through process.env): a
// spawner thread reading `environ` itself could still race a setenv on
// another thread (musl frees the string it replaces), however short its
// own copy; the copy made on the setenv thread races nothing.
void snapshot_environ(SpawnRequest* req);

// Whether close_range(CLOSE_RANGE_CLOEXEC) works here (Linux 5.11), asked
// once. PROCTREE_TEST_NO_CLOSE_RANGE=1 answers no, so the fallback can be
// tested on a newer kernel.
bool close_range_cloexec_works();

// The one line a process may write to a new user namespace's uid_map or
// gid_map by itself: its own id, mapped 1:1 ("<id> <id> 1\n").
std::string own_id_map(unsigned id);

}  // namespace proctree
