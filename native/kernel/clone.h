// Creating a child that shares our memory until it execs: clone3 with
// CLONE_VM | CLONE_VFORK (| CLONE_PIDFD | CLONE_INTO_CGROUP) on a private
// stack, so the cost does not grow with the harness's RSS, with the fallbacks
// for hosts without clone3 (seccomp profiles, qemu-user, Linux < 5.7) or
// without CLONE_PIDFD through clone() (qemu-user < 8.0). A child that will
// change its credentials gets a copy of our memory instead (no CLONE_VM,
// still CLONE_VFORK). Used by spawn (the tool call's main process) and by
// the probes (throwaway children).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

// clone3() that starts the child on its own stack and runs fn(arg) there.
// glibc does not export its clone3 wrapper, and a plain syscall(2) cannot be
// used with a new stack: the child would return into the caller's frame.
extern "C" long proctree_clone3(void* cl_args, size_t size, int (*fn)(void*), void* arg);

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

// How the child was created, for capabilities() and the tests.
enum class CloneMethod { kClone3, kClone, kClonePidfdOpen };
const char* clone_method_name(CloneMethod m);

struct CloneRequest {
  uint64_t ns_flags = 0;  // CLONE_NEWPID, CLONE_NEWUSER
  // The cgroup to start the child in (an O_DIRECTORY fd), or -1. With clone3
  // the kernel places it there; with clone() the child must write itself into
  // that cgroup's cgroup.procs before it runs anything else: it is opened
  // here, only then, kept in `late_procs`, and `*child_procs_fd` (a field the
  // child reads) is set to it.
  int cgroup_fd = -1;
  int* child_procs_fd = nullptr;
  Fd* late_procs = nullptr;
  // false: no CLONE_VM. The child runs on a copy of our memory (a fork:
  // page tables copied, a cost that grows with our RSS), still with
  // CLONE_VFORK. For a child that changes its uid or gid: one that shares
  // our memory would make the harness non-dumpable.
  bool share_memory = true;
  // true: clone() even where clone3 works (the child joins cgroup_fd by its
  // cgroup.procs, as above).
  bool no_clone3 = false;
  // Where the kernel writes the child's pid (clone3's CLONE_PARENT_SETTID)
  // and its pidfd (CLONE_PIDFD), both before the calling thread waits for
  // the exec, so another thread can read them meanwhile (EarlyIds in
  // kernel/spawn.h). nullptr: not wanted. clone() has one slot for both: it
  // gets the pidfd only (the pid is the child's to store, or the caller's
  // once the clone returns).
  int* parent_tid = nullptr;
  int* pidfd_out = nullptr;
};

struct Cloned {
  pid_t pid = -1;
  Fd pidfd;
  CloneMethod method = CloneMethod::kClone3;
};

// Runs fn(arg) in a new child (CLONE_VM | CLONE_VFORK, or CLONE_VFORK alone
// without share_memory; every signal blocked
// in the parent meanwhile, so no handler can run on the shared memory; the
// child inherits that mask and unblocks only once its handlers are reset). With
// a real vfork it returns once the child has exec'd or exited; under an
// emulator that turns vfork into fork it returns at once. On error, returns
// the errno of the clone ("clone3", "clone") or of pidfd_open; a child that
// was created but whose pidfd could not be had is killed and reaped first.
SysError clone_vfork(ChildStack& stack, const CloneRequest& req, int (*fn)(void*), void* arg, Cloned* out);

// Whether clone3 is used (false once it was found missing, or given up).
bool clone3_available();
// From now on, clone() for every child, each joining its cgroup by a write
// of cgroup.procs: for a process whose clone3 into a cgroup the kernel
// kills at birth (kKilledAtBirth in kernel/spawn.h).
void give_up_clone3();

}  // namespace proctree
