// Who is in a tree that has no cgroup, by scanning /proc: the live
// descendants of one process (/proc/<pid>/task/<tid>/children), and the
// members of one session or process group (every /proc/<pid>/stat).
// The subreaper and pidns tiers see a call's tree as the shim's descendants:
// every orphan of the tree is reparented to the shim (a subreaper, or PID 1
// of the namespace), so that is the whole tree. The pgroup tier sees the
// session. Both are snapshots: a member that forks after it was read is
// missed, which is why callers re-scan until a scan finds nothing new.
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
