// The descriptors a call's command gets as fd 0, 1, 2 (and 3, 4, … when the
// caller asks for more): pipes to the harness, /dev/null, the harness's own,
// a descriptor the caller passes, or one pseudo-terminal for 0..2. Prepared
// in the parent before the clone, so everything that can fail fails before
// the call exists.
#pragma once

#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

struct StdioSpec {
  enum Kind { kPipe, kIgnore, kInherit, kFd, kClose, kPty };
  Kind kind = kPipe;
  int fd = -1;  // for kFd
};

struct PtySize {
  unsigned short cols = 80;
  unsigned short rows = 24;
};

struct PreparedStdio {
  std::vector<int> fds;       // for SpawnRequest::fds
  std::vector<Fd> child;      // what fds[] points at that we own (closed once the child has them)
  std::vector<Fd> parent;     // per index: our end of a kPipe, else empty
  Fd pty_master;              // kPty: the harness's side, non-blocking, close-on-exec
  bool controlling_tty = false;
};

// spec.size() >= 3. kPty must be given for all of 0..2 or none, and pty then
// says the terminal's size. All-or-nothing: on error nothing stays open.
SysError prepare_stdio(const std::vector<StdioSpec>& spec, const PtySize& pty, PreparedStdio* out);

// /dev/null, opened once per process (close-on-exec, above 2); -1 with
// errno set when it could not be (tried again on the next call).
int dev_null_fd();

// Moves *fd to a number >= min (close-on-exec) if it is below: every
// descriptor the child side uses must sit above the fds it places, or
// placing one would clobber another (and a harness that closed its own stdin
// gets fd 0 back from pipe2()).
SysError lift_above(Fd* fd, int min);

}  // namespace proctree
