#include "kernel/child.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstdint>

#include "kernel/exec_candidates.h"
#include "kernel/raw_syscall.h"
#include "kernel/syscalls.h"

// No sanitizer code may run here (shadow-memory writes, no-return hooks),
// no library call (GCC turns simple loops into memset/strlen calls unless
// told not to), and no TLS: the stack protector's canary is read from the
// thread pointer (%fs:0x28 on x86-64), the TLS of the suspended thread that
// spawned, which the child shares and must leave alone. CMakeLists.txt
// compiles this file with -fno-stack-protector; node-gyp cannot set a flag for one file,
// so the attribute below is what turns it off there (and wherever else this
// file is built). A test disassembles the built object to check that it
// calls nothing and reads no thread pointer.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 11)
#define PROCTREE_NO_STACK_PROTECTOR no_stack_protector,
#else
#define PROCTREE_NO_STACK_PROTECTOR
#endif
#define PROCTREE_CHILD_SIDE                                                                           \
  __attribute__((PROCTREE_NO_STACK_PROTECTOR no_sanitize("address", "undefined"), always_inline, \
                 optimize("no-tree-loop-distribute-patterns")))
#define PROCTREE_CHILD_ENTRY                                                     \
  __attribute__((PROCTREE_NO_STACK_PROTECTOR no_sanitize("address", "undefined"), \
                 optimize("no-tree-loop-distribute-patterns")))

namespace proctree {

const char* child_stage_syscall(int stage) {
  switch (stage) {
    case kStageCgroup: return "cgroup.procs";
    case kStageSetsid: return "setsid";
    case kStageDup2: return "dup2";
    case kStageCtty: return "ioctl";
    case kStageChdir: return "chdir";
    case kStageSetgroups: return "setgroups";
    case kStageSetgid: return "setgid";
    case kStageSetuid: return "setuid";
    case kStageUserns: return "uid_map";
    case kStagePdeathsig: return "prctl";
    case kStageCaps: return "capset";
    default: return "execve";
  }
}

namespace {

[[noreturn]] inline PROCTREE_CHILD_SIDE void child_fail(ChildArgs* a, int stage, long neg_err) {
  a->report->stage = stage;
  a->report->err = static_cast<int>(-neg_err);
  if (a->report_fd >= 0) {
    int report[2] = {stage, static_cast<int>(-neg_err)};
    raw::syscall3(__NR_write, a->report_fd, reinterpret_cast<long>(report), sizeof report);
  }
  for (;;) raw::syscall1(__NR_exit, 127);
}

}  // namespace

PROCTREE_CHILD_ENTRY int child_main(void* arg) {
  ChildArgs* a = static_cast<ChildArgs*>(arg);
  a->report->ran = 1;
  long r;
  // Before anything that can block (the cgroup.procs write below may be
  // into a frozen cgroup): whoever waits for EarlyIds on another thread
  // learns the pid now.
  if (a->own_pid) __atomic_store_n(a->own_pid, static_cast<int>(raw::syscall0(__NR_getpid)), __ATOMIC_RELEASE);
  if (a->wake_pid) raw::syscall3(__NR_futex, reinterpret_cast<long>(a->wake_pid), FUTEX_WAKE_PRIVATE, INT32_MAX);

  // A new user namespace starts with no mapping: map our own ids 1:1 (the
  // one mapping an unprivileged process may write for itself), setgroups
  // denied first as the kernel requires for gid_map.
  if (a->uid_map) {
    r = raw::write_file("/proc/self/setgroups", "deny", 4);
    if (r < 0 && r != -ENOENT) child_fail(a, kStageUserns, r);
    r = raw::write_file("/proc/self/uid_map", a->uid_map, a->uid_map_len);
    if (r < 0) child_fail(a, kStageUserns, r);
    r = raw::write_file("/proc/self/gid_map", a->gid_map, a->gid_map_len);
    if (r < 0) child_fail(a, kStageUserns, r);
  }

  // What the namespace's creator holds (every capability in it) would be
  // lost at the exec of a uid other than 0: the ones asked for stay, as
  // ambient capabilities (each inheritable first, as the kernel requires).
  if (a->ambient_caps) {
    struct {
      uint32_t version;
      int pid;
    } header = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
    struct {
      uint32_t effective, permitted, inheritable;
    } data[2];
    r = raw::syscall2(__NR_capget, reinterpret_cast<long>(&header), reinterpret_cast<long>(data));
    if (r < 0) child_fail(a, kStageCaps, r);
    data[0].inheritable |= a->ambient_caps;
    r = raw::syscall2(__NR_capset, reinterpret_cast<long>(&header), reinterpret_cast<long>(data));
    if (r < 0) child_fail(a, kStageCaps, r);
    for (long cap = 0; cap < 32; ++cap) {
      if (!(a->ambient_caps & (1U << cap))) continue;
      r = raw::syscall5(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
      if (r < 0) child_fail(a, kStageCaps, r);
    }
  }

  // The clone() fallback: join the call's cgroup before any of the command's
  // code runs. Writing "0" moves the writer itself.
  if (a->procs_fd >= 0) {
    r = raw::syscall3(__NR_write, a->procs_fd, reinterpret_cast<long>("0"), 1);
    if (r < 0) child_fail(a, kStageCgroup, r);
  }

  // Handlers installed by the harness must never run here (they would run on
  // the harness's memory) and must not be inherited as ignored: reset them all
  // to default before any signal is unblocked, as posix_spawn and libuv do.
  for (long sig = 1; sig < 65; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    raw::syscall4(__NR_rt_sigaction, sig, reinterpret_cast<long>(a->default_action), 0, 8);
  }

  if (a->new_session) {
    r = raw::syscall0(__NR_setsid);
    if (r < 0) child_fail(a, kStageSetsid, r);
  }

  for (int i = 0; i < a->nfds; ++i) {
    if (a->fds[i] == kInherit) {
      // The harness's own fd i, which may be close-on-exec in the harness
      // (Node opens some stdio that way). Not open: the command has none.
      raw::syscall3(__NR_fcntl, i, F_SETFD, 0);
      continue;
    }
    if (a->fds[i] == kClosed) {
      raw::syscall1(__NR_close, i);
      continue;
    }
    r = raw::syscall3(__NR_dup3, a->fds[i], i, 0);
    if (r < 0) child_fail(a, kStageDup2, r);
  }
  // Blocking mode on 0..2, as libuv does: a command handed a descriptor that
  // Node made non-blocking would otherwise fail its reads with EAGAIN.
  for (int i = 0; i < 3 && i < a->nfds; ++i) {
    long fl = raw::syscall2(__NR_fcntl, i, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) raw::syscall3(__NR_fcntl, i, F_SETFL, fl & ~O_NONBLOCK);
  }
  if (a->controlling_tty) {
    r = raw::syscall3(__NR_ioctl, 0, TIOCSCTTY, 0);
    if (r < 0) child_fail(a, kStageCtty, r);
  }

  if (a->cwd) {
    r = raw::syscall1(__NR_chdir, reinterpret_cast<long>(a->cwd));
    if (r < 0) child_fail(a, kStageChdir, r);
  }

  if (a->set_gid) {
    r = raw::syscall2(__NR_setgroups, 0, 0);
    if (r < 0) child_fail(a, kStageSetgroups, r);
    r = raw::syscall1(__NR_setgid, a->gid);
    if (r == -EINVAL && a->uid_map) r = -EPERM;  // as for setuid below
    if (r < 0) child_fail(a, kStageSetgid, r);
  }
  if (a->set_uid) {
    r = raw::syscall1(__NR_setuid, a->uid);
    // In the user namespace of the pidns tier only the harness's own uid is
    // mapped: any other is "invalid" there, and what the harness's user may
    // not take (EPERM, as Node reports it) outside.
    if (r == -EINVAL && a->uid_map) r = -EPERM;
    if (r < 0) child_fail(a, kStageSetuid, r);
  }

  // Armed after the uid change, which clears it.
  if (a->pdeathsig) {
    r = raw::syscall2(__NR_prctl, PR_SET_PDEATHSIG, a->pdeathsig);
    if (r < 0) child_fail(a, kStagePdeathsig, r);
  }

  // Nothing of the harness but the fds the call asked for may reach the
  // command. Close-on-exec rather than close keeps the report pipe usable
  // until exec succeeds.
  if (a->close_range_works) {
    raw::syscall3(__NR_close_range, a->nfds, ~0U, CLOSE_RANGE_CLOEXEC);
  } else {
    for (int i = 0; i < a->n_open_fds; ++i) {
      if (a->open_fds[i] >= a->nfds) raw::syscall3(__NR_fcntl, a->open_fds[i], F_SETFD, FD_CLOEXEC);
    }
  }

  uint64_t empty_mask = 0;
  raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&empty_mask), 0, 8);

  r = exec_candidates(a->candidates, a->argv, a->envp, a->sh_argv);
  child_fail(a, kStageExecve, r);
}

}  // namespace proctree
