#include "kernel/stdio_fds.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "kernel/child.h"
#include "kernel/pty.h"

namespace proctree {
SysError lift_above(Fd* fd, int min) {
  if (fd->get() >= min) return SysError::none();
  int moved = fcntl(fd->get(), F_DUPFD_CLOEXEC, min);
  if (moved < 0) return SysError::from_errno("fcntl");
  fd->reset(moved);
  return SysError::none();
}

int dev_null_fd() {
  // Opened once for the process and kept. A failure is not kept: a process
  // out of descriptors now (EMFILE) has them again once it closes some, and
  // its next call must not fail for what this one saw. On failure, errno is
  // the open's (or the fcntl's).
  static std::atomic<int> kept{-1};
  int fd = kept.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  Fd f(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!f) return -1;
  if (SysError e = lift_above(&f, 3)) {
    errno = e.err;
    return -1;
  }
  int expected = -1;
  if (kept.compare_exchange_strong(expected, f.get(), std::memory_order_acq_rel)) return f.release();
  return expected;  // another thread kept one first: ours closes
}

SysError prepare_stdio(const std::vector<StdioSpec>& spec, const PtySize& pty, PreparedStdio* out) {
  const int n = static_cast<int>(spec.size());
  PreparedStdio p;
  p.fds.assign(spec.size(), -1);
  p.child.resize(spec.size());
  p.parent.resize(spec.size());
  Fd slave;
  for (int i = 0; i < n; ++i) {
    Fd* mine = &p.child[i];
    switch (spec[i].kind) {
      case StdioSpec::kInherit:
        p.fds[i] = kInherit;
        continue;
      case StdioSpec::kClose:
        p.fds[i] = kClosed;
        continue;
      case StdioSpec::kIgnore: {
        int null = dev_null_fd();
        if (null < 0) return SysError::from_errno("open", "/dev/null");
        if (null >= n) {
          p.fds[i] = null;
          continue;
        }
        mine->reset(fcntl(null, F_DUPFD_CLOEXEC, n));
        if (!*mine) return SysError::from_errno("fcntl");
        break;
      }
      case StdioSpec::kFd:
        if (spec[i].fd >= n) {
          // Not open: fail here, not in the child's dup3.
          if (fcntl(spec[i].fd, F_GETFD) < 0) return SysError::from_errno("fcntl");
          p.fds[i] = spec[i].fd;
          continue;
        }
        mine->reset(fcntl(spec[i].fd, F_DUPFD_CLOEXEC, n));
        if (!*mine) return SysError::from_errno("fcntl");
        break;
      case StdioSpec::kPipe: {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
        Fd read_end(fds[0]), write_end(fds[1]);
        // stdin: the child reads; every other: the child writes.
        *mine = std::move(i == 0 ? read_end : write_end);
        p.parent[i] = std::move(i == 0 ? write_end : read_end);
        if (SysError e = lift_above(mine, n)) return e;
        if (SysError e = lift_above(&p.parent[i], 3)) return e;
        break;
      }
      case StdioSpec::kPty:
        if (i > 2) return SysError::of(EINVAL, "posix_openpt");
        if (!slave) {
          if (SysError e = open_pty(pty.cols, pty.rows, &p.pty_master, &slave)) return e;
          if (SysError e = lift_above(&slave, n)) return e;
          if (SysError e = lift_above(&p.pty_master, 3)) return e;
          p.controlling_tty = true;
        }
        p.fds[i] = slave.get();
        continue;
    }
    p.fds[i] = mine->get();
  }
  if (slave) p.child.push_back(std::move(slave));
  *out = std::move(p);
  return SysError::none();
}

}  // namespace proctree
