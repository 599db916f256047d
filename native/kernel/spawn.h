// Starting one tool call's main process: the parent side. Prepares
// everything the child side (kernel/child.cc) needs, clones it with
// clone_vfork (kernel/clone.h) straight into the call's cgroup when there is
// one, and reads its report: either it exec'd, or the step that failed. The
// report is waited for (spawn_process), or read later (spawn_process_started).
#pragma once

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
  // envp is ignored; nothing is copied.
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
};

struct SpawnResult {
  pid_t pid = -1;
  Fd pidfd;
  CloneMethod method = CloneMethod::kClone3;
};

// Either fills *out and returns no error, or returns the error of the step
// that failed ("clone3", "chdir", "execve", ...). A child that failed before
// exec has already been reaped. Blocks the calling thread only while the
// child runs up to its exec (a vfork).
SysError spawn_process(const SpawnRequest& req, ChildStack& stack, SpawnResult* out);

struct ExecBlock;

// A child cloned without waiting for its exec (spawn_process_started). Until
// it has exec'd or exited it runs on our memory: its stack, its ChildArgs and
// every string it reads are held here, and only its report frees them. The
// report is a word the kernel zeroes once the child is off our memory
// (CLONE_CHILD_CLEARTID): no descriptor, and no system call when it is in.
class PendingExec {
 public:
  PendingExec();
  PendingExec(PendingExec&&) noexcept;
  PendingExec& operator=(PendingExec&&) noexcept;
  PendingExec(const PendingExec&) = delete;
  PendingExec& operator=(const PendingExec&) = delete;
  // Waits for the report (its exec or its exit clears the word), up to a
  // second: a child held before its exec (frozen by someone who may write
  // its cgroup's parent) must not hang whoever drops it. Past that the
  // memory is left to it, never freed under it.
  ~PendingExec();

  bool pending() const { return block_ != nullptr; }
  // Waits up to timeout_ms (0: not at all, -1: for ever). false: no report
  // yet. true: the report is in, the memory is freed, and *failed is the
  // step that failed, or none: it exec'd. A failed child has exited, and is
  // reaped by whoever holds its pidfd.
  bool collect(int timeout_ms, SysError* failed);
  // Forgets the block without freeing it: its child may still run on it.
  void abandon();

 private:
  friend SysError spawn_process_started(SpawnRequest* req, SpawnResult* out, PendingExec* pending);
  ExecBlock* block_ = nullptr;
};

// Whether spawn_process_started can be used for this request: a real
// CLONE_VM (not an emulator's fork) seen on an earlier spawn, clone3, and no
// new namespace.
bool can_spawn_started(const SpawnRequest& req);
// So many children's reports are not collected yet (256, each holding a
// stack) that a new child's should be waited for at once
// (spawn_process_bounded), as a loop of spawns with no tick between would
// otherwise hold ever more.
bool started_reports_full();

// Like spawn_process, but returns as soon as the child exists: *out has its
// pid and pidfd, *pending its report. Errors returned are the clone's own
// (or pipe2's, mmap's); *req is moved from only when the child exists.
SysError spawn_process_started(SpawnRequest* req, SpawnResult* out, PendingExec* pending);

// spawn_process_started, then the report waited for up to wait_ms: a step
// that failed within that time is returned as spawn_process returns it (the
// child reaped, *out empty). For a request whose failure Node reports
// synchronously (uid, gid), and past started_reports_full(), without the
// unbounded wait of a vfork: a child held before its exec (its cgroup frozen
// by someone) leaves the report in *pending, to be read later like any other.
SysError spawn_process_bounded(SpawnRequest* req, SpawnResult* out, PendingExec* pending, int wait_ms);

// Whether close_range(CLOSE_RANGE_CLOEXEC) works here (Linux 5.11), asked
// once. PROCTREE_TEST_NO_CLOSE_RANGE=1 answers no, so the fallback can be
// tested on a newer kernel.
bool close_range_cloexec_works();

// The one line a process may write to a new user namespace's uid_map or
// gid_map by itself: its own id, mapped 1:1 ("<id> <id> 1\n").
std::string own_id_map(unsigned id);

}  // namespace proctree
