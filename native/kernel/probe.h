// capabilities(): what this host allows, each entry tried for real (a
// throwaway cgroup, a throwaway clone, the helper run once), never guessed
// from a kernel version. Blocks the calling thread for a few milliseconds:
// the facade calls it once and caches the result. Which probes each tier
// needs is the facade's table (lib/capabilities.ts), not decided here.
#pragma once

#include <string>

#include "kernel/cgroup.h"
#include "kernel/clone.h"

namespace proctree {

struct Probe {
  bool ok = false;
  int err = 0;  // errno seen when !ok
  const char* syscall = "";
  std::string detail;
};

struct HostProbes {
  CgroupLocation location;
  Probe cgroup2;            // a cgroup2 mount that shows our own cgroup
  Probe delegation;         // a call cgroup can be created below ours and a child placed in it
  Probe clone3;             // clone3 itself
  Probe clone_into_cgroup;  // clone3 with CLONE_INTO_CGROUP
  Probe pidfd;              // pidfd_open
  Probe pidfd_send_signal;
  Probe waitid_pidfd;       // waitid(P_PIDFD) (Linux 5.4)
  Probe freeze;             // cgroup.freeze on a call cgroup
  Probe cgroup_kill;        // cgroup.kill on a call cgroup
  Probe pidns;              // a new PID namespace (directly, or inside a user namespace)
  Probe userns;             // CLONE_NEWUSER | CLONE_NEWPID
  Probe subreaper;          // PR_SET_CHILD_SUBREAPER, in a throwaway child
  Probe seal;               // a sealed call's namespaces and mounts (user, PID, mount, cgroup; /proc, cgroup2)
  Probe helper;             // proctree-helper next to the addon answers --version
  Probe user_manager;       // a systemd user manager to ask for a delegated scope (the systemd tier)
};

HostProbes probe_host(const std::string& helper, ChildStack& stack);

}  // namespace proctree
