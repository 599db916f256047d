// execvpe's search, the exec half: try each candidate path (the PATH search
// was done by the caller), skip those that do not exist, remember EACCES, and
// run a file without a #! line through /bin/sh as execvp does (ENOEXEC).
// Raw system calls only, and always inlined: it runs on the child side of a
// CLONE_VM clone (kernel/child.cc) and in the shim's forked child alike.
#pragma once

#include <cerrno>
#include <sys/syscall.h>

#include "kernel/raw_syscall.h"

namespace proctree {

// sh_argv: {"/bin/sh", <slot>, argv[1], ..., nullptr}, prepared by the caller;
// slot 1 is set here to the candidate that needs the shell. Returns -errno;
// it returns only when no candidate could be executed.
// Not instrumented either: a sanitizer's check would call its runtime
// through the PLT from the CLONE_VM child (test/native/child-side-calls.mjs).
__attribute__((always_inline, no_sanitize("address", "undefined"))) inline long exec_candidates(
    char* const* candidates, char* const* argv, char* const* envp, char** sh_argv) {
  bool saw_eacces = false;
  for (char* const* c = candidates; *c; ++c) {
    long r = raw::syscall3(__NR_execve, reinterpret_cast<long>(*c), reinterpret_cast<long>(argv),
                           reinterpret_cast<long>(envp));
    if (r == -ENOEXEC && sh_argv) {
      sh_argv[1] = *c;
      r = raw::syscall3(__NR_execve, reinterpret_cast<long>(sh_argv[0]), reinterpret_cast<long>(sh_argv),
                        reinterpret_cast<long>(envp));
      // The shell itself missing is still "cannot execute this file".
      if (r == -ENOENT) r = -ENOEXEC;
    }
    if (r == -EACCES) {
      saw_eacces = true;
    } else if (r != -ENOENT && r != -ENOTDIR && r != -ESTALE && r != -ENODEV && r != -ETIMEDOUT) {
      return r;
    }
  }
  return saw_eacces ? -EACCES : -ENOENT;
}

}  // namespace proctree
