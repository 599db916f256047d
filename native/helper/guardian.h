// The helper side of the guardian (the harness starts it with
// kernel/guardian_launch.h): it waits for the harness to exit (its pidfd at
// fd 3; EOF on stdin, a pipe whose write end only the harness holds, where
// there are no pidfds), then kills and removes every proctree subtree the
// harness made.
#pragma once

#include <string>

namespace proctree {

// `proctree-helper guardian <cgroup-dir> <prefix>`: the guardian's main loop.
int guardian_main(const char* cgroup_dir, const char* prefix);

// Kills every subtree of `dir` named `prefix` or `prefix-*` (cgroup.kill, or
// freeze + SIGKILL rounds where the kernel has none), waits up to wait_ms for
// them to empty, then removes them, deepest first. Returns how many it removed.
int kill_and_remove_subtrees(const std::string& dir, const std::string& prefix, int wait_ms);

}  // namespace proctree
