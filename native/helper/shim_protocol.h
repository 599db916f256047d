// The control socket between the harness and a call's shim (the pidns init or
// the subreaper), a SOCK_SEQPACKET pair. The harness passes the shim its end
// at the fd number named in the shim's arguments (after the command's own
// stdio fds, which the shim hands on untouched).
// Shim -> harness: one kExecOk or kExecFailed right after the command was
// started, kExit when the command's main process ends, and kUsage when the
// tree is empty, just before the shim exits. Harness -> shim:
// nothing but EOF, which means the harness is gone: the shim then kills its
// whole tree (the init by exiting: the kernel kills the namespace).
#pragma once

#include <cstdint>

namespace proctree::shim {

enum Kind : int32_t {
  kExecOk = 1,      // a = the command's pid as the harness sees it
  kExecFailed = 2,  // a = errno, b = Stage
  kExit = 3,        // a = exit code or -1, b = terminating signal or 0
  kUsage = 4,       // the tree is empty: a = user ms, b = system ms (every reaped process)
};

enum Stage : int32_t {
  kStageFork = 1,
  kStageSetsid = 2,
  kStageExecve = 3,
  kStageCtty = 4,
  // A sealed call's (helper/seal.h): the namespaces could not be sealed,
  // or the command's capabilities dropped. Nothing of the command ran.
  kStageUnshare = 5,
  kStageMount = 6,
  kStageOpen = 7,
  kStageCapset = 8,
};

struct Message {
  int32_t kind;
  int32_t a;
  int32_t b;
  int32_t c;
};

inline const char* stage_syscall(int32_t stage) {
  switch (stage) {
    case kStageFork: return "fork";
    case kStageSetsid: return "setsid";
    case kStageCtty: return "ioctl";
    case kStageUnshare: return "unshare";
    case kStageMount: return "mount";
    case kStageOpen: return "open";
    case kStageCapset: return "capset";
    default: return "execve";
  }
}

inline int32_t stage_of(const char* syscall) {
  if (__builtin_strcmp(syscall, "unshare") == 0) return kStageUnshare;
  if (__builtin_strcmp(syscall, "open") == 0) return kStageOpen;
  return kStageMount;
}

}  // namespace proctree::shim
