// capabilities(): what this host allows, each entry tried for real (a
// throwaway cgroup, a throwaway clone), never guessed from a kernel version.
// Blocks the calling thread for a few milliseconds (a mkdir, a handful of
// vfork'd children that exit at once, an rmdir): the facade calls it once
// and caches the result.
#pragma once

#include <string>

#include "kernel/cgroup.h"
#include "kernel/spawn.h"

namespace proctree {

struct Probe {
  bool ok = false;
  int err = 0;          // errno seen when !ok
  const char* syscall = "";
  std::string detail;
};

struct HostProbes {
  CgroupLocation location;
  Probe cgroup2;            // a cgroup2 mount and our own cgroup in it
  Probe delegation;         // a call cgroup can be created below ours and a child placed in it
  Probe clone3;             // clone3 itself
  Probe clone_into_cgroup;  // clone3 with CLONE_INTO_CGROUP
  Probe pidfd;              // pidfd_open
  Probe pidfd_send_signal;
  Probe freeze;             // cgroup.freeze on a call cgroup
  Probe cgroup_kill;        // cgroup.kill on a call cgroup
  Probe pidns;              // a new PID namespace (directly, or inside a user namespace)
  Probe userns;             // CLONE_NEWUSER | CLONE_NEWPID
  Probe subreaper;          // PR_SET_CHILD_SUBREAPER (in a throwaway child) + the helper
  Probe helper;             // the proctree-helper executable next to the addon
};

HostProbes probe_host(const std::string& helper, ChildStack& stack);

}  // namespace proctree
