// A failed system call, carried up to the binding, which turns it into a Node
// Error with code/errno/syscall/path. No C++ exceptions cross the N-API boundary.
#pragma once

#include <cerrno>
#include <string>

namespace proctree {

struct SysError {
  int err = 0;                 // positive errno; 0 means success
  const char* syscall = "";    // the call that failed, e.g. "clone3", "chdir"
  std::string path;            // the path it was about, when there is one

  explicit operator bool() const { return err != 0; }

  static SysError none() { return SysError{}; }
  static SysError from_errno(const char* syscall, std::string path = {}) {
    return SysError{errno, syscall, std::move(path)};
  }
  static SysError of(int err, const char* syscall, std::string path = {}) {
    return SysError{err, syscall, std::move(path)};
  }
};

}  // namespace proctree
