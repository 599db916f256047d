// The helper side of the guardian (the harness starts it with
// kernel/guardian_launch.h): it waits for EOF on its stdin, the pipe whose
// write end only the harness holds, then kills and removes every proctree
// subtree the harness made.
#pragma once

#include <string>

namespace proctree {

// `proctree-helper guardian <cgroup-dir> <prefix>`: the guardian's main loop.
int guardian_main(const char* cgroup_dir, const char* prefix);

// rmdir-ready cleanup used by the guardian: cgroup.kill every subtree of
// `dir` named `prefix` or `prefix-*`, wait up to wait_ms for them to empty,
// then remove them, deepest first. Returns how many it removed.
int kill_and_remove_subtrees(const std::string& dir, const std::string& prefix, int wait_ms);

}  // namespace proctree
