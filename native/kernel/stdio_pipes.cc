#include "kernel/stdio_pipes.h"

#include <fcntl.h>
#include <unistd.h>

namespace proctree {
namespace {

// A harness that closed its own stdin gets fd 0 back from pipe2(); the child
// side must not sit on 0..2 or the dup2 sequence would clobber it.
SysError lift_above_stdio(Fd* fd) {
  if (fd->get() >= 3) return SysError::none();
  int moved = fcntl(fd->get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return SysError::from_errno("fcntl");
  fd->reset(moved);
  return SysError::none();
}

}  // namespace

SysError prepare_stdio(const StdioSpec (&spec)[3], PreparedStdio* out) {
  Fd devnull;
  for (int i = 0; i < 3; ++i) {
    switch (spec[i].kind) {
      case StdioSpec::kInherit:
        break;
      case StdioSpec::kIgnore:
        if (!devnull) {
          devnull.reset(open("/dev/null", O_RDWR | O_CLOEXEC));
          if (!devnull) return SysError::from_errno("open", "/dev/null");
          if (SysError e = lift_above_stdio(&devnull)) return e;
        }
        out->child[i].reset(fcntl(devnull.get(), F_DUPFD_CLOEXEC, 3));
        if (!out->child[i]) return SysError::from_errno("fcntl");
        break;
      case StdioSpec::kFd:
        out->child[i].reset(fcntl(spec[i].fd, F_DUPFD_CLOEXEC, 3));
        if (!out->child[i]) return SysError::from_errno("fcntl");
        break;
      case StdioSpec::kPipe: {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
        // stdin: the child reads; stdout/stderr: the child writes.
        Fd read_end(p[0]), write_end(p[1]);
        if (i == 0) {
          out->child[i] = std::move(read_end);
          out->parent[i] = std::move(write_end);
        } else {
          out->child[i] = std::move(write_end);
          out->parent[i] = std::move(read_end);
        }
        if (SysError e = lift_above_stdio(&out->child[i])) return e;
        if (SysError e = lift_above_stdio(&out->parent[i])) return e;
        break;
      }
    }
  }
  return SysError::none();
}

}  // namespace proctree
