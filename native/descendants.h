// The live descendants of one process, from /proc/<pid>/task/<tid>/children.
// This is how the subreaper and pidns tiers see a call's tree: every orphan
// of the tree is reparented to the shim (a subreaper, or PID 1 of the
// namespace), so "descendants of the shim" is the whole tree. It is a
// snapshot: a member that forks after its children were read is missed by
// this walk, which is why callers re-walk until a walk finds nothing new.
#pragma once

#include <sys/types.h>

#include <vector>

namespace proctree {

// Pids below root (root excluded), parents before children. Zombies are
// skipped: they are dead, and their reaper (the shim) will collect them.
std::vector<pid_t> live_descendants(pid_t root);

// Live processes whose session or process group is `leader` (the pgroup
// tier's view of a call). A /proc scan; zombies skipped.
std::vector<pid_t> session_members(pid_t leader);

}  // namespace proctree
