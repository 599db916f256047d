// The harness side of the guardian (the helper side is helper/guardian.cc):
// starts one proctree-helper process per harness that outlives it. It watches
// the harness by a pidfd (or, without pidfds, by EOF on a pipe whose write end
// only the harness holds), so it notices however the harness dies (SIGKILL,
// OOM, a crash in any addon) and then kills and removes every proctree
// subtree the harness made.
#pragma once

#include <sys/types.h>

#include <string>

#include "kernel/clone.h"
#include "kernel/sys_error.h"

namespace proctree {

struct GuardianInfo {
  pid_t pid = -1;
  bool started_now = false;
};

// Starts the guardian once per process (later calls return the same pid,
// or start a new one if it was killed). helper: the proctree-helper
// executable; cgroup_dir: the harness's own cgroup; prefix: subtree_prefix().
SysError ensure_guardian(const std::string& helper, const std::string& cgroup_dir, const std::string& prefix,
                         ChildStack& stack, GuardianInfo* out);

// The name every subtree of this harness process starts with, the same for
// every environment (worker) in it: "proctree-<pid>-<12 hex digits>". The pid
// alone is not unique: two harnesses in different PID namespaces can share a
// cgroup and a pid, and a dead harness's pid is reused. The random part is
// drawn once per process, so no other harness's subtree, live or stale, can
// carry this name, and the guardian and the exit path touch only ours.
const std::string& subtree_prefix();

}  // namespace proctree
