// The three standard streams of a call: pipes to the harness, /dev/null, the
// harness's own, or a descriptor the caller passes.
#pragma once

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

struct StdioSpec {
  enum Kind { kPipe, kIgnore, kInherit, kFd };
  Kind kind = kPipe;
  int fd = -1;  // for kFd
};

struct PreparedStdio {
  Fd child[3];   // to dup2 onto 0/1/2 in the child (all >= 3, CLOEXEC); empty = inherit
  Fd parent[3];  // the harness's ends of pipes (CLOEXEC); empty unless kPipe
};

SysError prepare_stdio(const StdioSpec (&spec)[3], PreparedStdio* out);

}  // namespace proctree
