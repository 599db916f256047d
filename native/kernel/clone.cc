// clone_vfork() and the architecture-specific entry for clone3 with a child
// stack. In the child the kernel has switched to the new stack; registers
// other than the return value are those of the parent, so fn and arg survive.
#include "kernel/clone.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "kernel/raw_syscall.h"
#include "kernel/syscalls.h"

#if defined(__x86_64__)
// rdi = cl_args, rsi = size, rdx = fn, rcx = arg. syscall clobbers rcx and
// r11, so arg moves to r8 first; rdx survives.
__asm__(
    ".text\n"
    ".globl proctree_clone3\n"
    ".hidden proctree_clone3\n"
    ".type proctree_clone3,@function\n"
    "proctree_clone3:\n"
    "  mov %rcx, %r8\n"
    "  mov $435, %eax\n"  // __NR_clone3
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  xor %ebp, %ebp\n"
    "  and $-16, %rsp\n"
    "  mov %r8, %rdi\n"
    "  call *%rdx\n"
    "  mov %eax, %edi\n"
    "  mov $60, %eax\n"  // __NR_exit
    "  syscall\n"
    "  hlt\n"
    ".size proctree_clone3, .-proctree_clone3\n");
#elif defined(__aarch64__)
// x0 = cl_args, x1 = size, x2 = fn, x3 = arg; svc preserves x1..x7.
__asm__(
    ".text\n"
    ".globl proctree_clone3\n"
    ".hidden proctree_clone3\n"
    ".type proctree_clone3,%function\n"
    "proctree_clone3:\n"
    "  mov x8, #435\n"  // __NR_clone3
    "  svc #0\n"
    "  cbz x0, 1f\n"
    "  ret\n"
    "1:\n"
    "  mov x29, #0\n"
    "  mov x30, #0\n"
    "  mov x0, x3\n"
    "  blr x2\n"
    "  mov x8, #93\n"  // __NR_exit
    "  svc #0\n"
    "  brk #0\n"
    ".size proctree_clone3, .-proctree_clone3\n");
#else
#error "proctree supports x86_64 and aarch64 only"
#endif

namespace proctree {
namespace {

// Our own copy of the kernel's struct clone_args (v2, Linux 5.7).
struct CloneArgs {
  uint64_t flags;
  uint64_t pidfd;
  uint64_t child_tid;
  uint64_t parent_tid;
  uint64_t exit_signal;
  uint64_t stack;
  uint64_t stack_size;
  uint64_t tls;
  uint64_t set_tid;
  uint64_t set_tid_size;
  uint64_t cgroup;
};

std::atomic<bool> g_clone3_works{true};
std::atomic<bool> g_clone_pidfd_works{true};

// Blocks every signal, glibc-internal ones included, for the life of the
// object: a handler that ran in the CLONE_VM child would run on our memory.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    uint64_t all = ~uint64_t{0};
    raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), reinterpret_cast<long>(&old_), 8);
  }
  ~AllSignalsBlocked() { raw::syscall4(__NR_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old_), 0, 8); }

 private:
  uint64_t old_ = 0;
};

}  // namespace

const char* clone_method_name(CloneMethod m) {
  switch (m) {
    case CloneMethod::kClone3: return "clone3";
    case CloneMethod::kClone: return "clone";
    default: return "clone+pidfd_open";
  }
}

bool clone3_available() { return g_clone3_works.load(std::memory_order_relaxed); }

void give_up_clone3() { g_clone3_works.store(false, std::memory_order_relaxed); }

ChildStack::~ChildStack() {
  if (map_) munmap(map_, map_size_);
}

SysError ChildStack::ensure() {
  if (map_) return SysError::none();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_ = 256 * 1024;
  map_size_ = size_ + page;  // one guard page below the stack
  void* m = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return SysError::from_errno("mmap");
  mprotect(m, page, PROT_NONE);
  map_ = m;
  base_ = static_cast<char*>(m) + page;
  return SysError::none();
}

SysError clone_vfork(ChildStack& stack, const CloneRequest& req, int (*fn)(void*), void* arg, Cloned* out) {
  if (SysError e = stack.ensure()) return e;
  int local_pidfd = -1;
  int* pidfd_slot = req.pidfd_out ? req.pidfd_out : &local_pidfd;
  const int vm = req.share_memory ? CLONE_VM : 0;
  long pid = -ENOSYS;
  CloneMethod method = CloneMethod::kClone3;
  {
    AllSignalsBlocked blocked;
    if (!req.no_clone3 && g_clone3_works.load(std::memory_order_relaxed)) {
      CloneArgs ca{};
      ca.flags = static_cast<uint64_t>(vm) | CLONE_VFORK | CLONE_PIDFD | req.ns_flags;
      ca.pidfd = reinterpret_cast<uint64_t>(pidfd_slot);
      if (req.parent_tid) {
        ca.flags |= CLONE_PARENT_SETTID;
        ca.parent_tid = reinterpret_cast<uint64_t>(req.parent_tid);
      }
      ca.exit_signal = SIGCHLD;
      ca.stack = reinterpret_cast<uint64_t>(stack.base());
      ca.stack_size = stack.size();
      if (req.cgroup_fd >= 0) {
        ca.flags |= kCloneIntoCgroup;
        ca.cgroup = static_cast<uint64_t>(req.cgroup_fd);
      }
      pid = proctree_clone3(&ca, sizeof ca, fn, arg);
      // ENOSYS: seccomp (Docker's default profile) or qemu-user; EPERM
      // without namespace flags: a filter that answers EPERM instead; E2BIG:
      // a kernel that predates the cgroup field. All mean: use clone().
      if (pid == -ENOSYS || pid == -E2BIG || (pid == -EPERM && req.ns_flags == 0)) {
        g_clone3_works.store(false, std::memory_order_relaxed);
        pid = -ENOSYS;
      }
    }
    if (pid == -ENOSYS) {
      method = CloneMethod::kClone;
      if (req.cgroup_fd >= 0 && req.child_procs_fd) {
        // clone() cannot place the child: it joins the cgroup itself.
        int procs = -1;
        if (req.late_procs) {
          req.late_procs->reset(openat(req.cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC));
          if (!*req.late_procs) return SysError::from_errno("open", "cgroup.procs");
          procs = req.late_procs->get();
        }
        *req.child_procs_fd = procs;
      }
      void* top = static_cast<char*>(stack.base()) + stack.size();
      int flags = vm | CLONE_VFORK | SIGCHLD | static_cast<int>(req.ns_flags);
      if (g_clone_pidfd_works.load(std::memory_order_relaxed)) {
        pid = clone(fn, top, flags | CLONE_PIDFD, arg, pidfd_slot);
        // qemu-user before 8.0 refuses CLONE_PIDFD: open the pidfd after.
        if (pid < 0 && errno == EINVAL) g_clone_pidfd_works.store(false, std::memory_order_relaxed);
        if (pid < 0) pid = -errno;
      }
      if (!g_clone_pidfd_works.load(std::memory_order_relaxed)) {
        method = CloneMethod::kClonePidfdOpen;
        pid = clone(fn, top, flags, arg, nullptr);
        if (pid < 0) pid = -errno;
      }
    }
  }
  if (pid < 0) return SysError::of(static_cast<int>(-pid), method == CloneMethod::kClone3 ? "clone3" : "clone");
  int pidfd = method == CloneMethod::kClonePidfdOpen ? -1 : *pidfd_slot;
  if (method == CloneMethod::kClonePidfdOpen) {
    // Not reaped yet (only we wait for our children), so the number is still
    // this child's: pidfd_open is race-free here, and so is kill() by number.
    pidfd = static_cast<int>(syscall(__NR_pidfd_open, pid, 0));
    if (pidfd < 0) {
      SysError e = SysError::from_errno("pidfd_open");
      // Under an emulator the child may be running the command already:
      // stop it before waiting, or the wait would block on it.
      kill(static_cast<pid_t>(pid), SIGKILL);
      while (waitpid(static_cast<pid_t>(pid), nullptr, __WALL) < 0 && errno == EINTR) {
      }
      return e;
    }
  }
  out->pid = static_cast<pid_t>(pid);
  out->pidfd.reset(pidfd);
  out->method = method;
  return SysError::none();
}

}  // namespace proctree
