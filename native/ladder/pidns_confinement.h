// The pidns tier: the shim is PID 1 of a new PID namespace (directly as root,
// else inside a new user namespace). Nothing leaves a PID namespace, and
// SIGKILL to its init makes the kernel kill every process in it and refuse
// new forks there: a race-free kill. The init's exit proves it empty.
#pragma once

#include "ladder/shim_tree.h"

namespace proctree {

class PidnsConfinement : public ShimTree {
 public:
  using ShimTree::ShimTree;
  Tier tier() const override { return Tier::kPidns; }
  const char* verified() const override { return "pidns"; }
  Kill kill_all() override;
};

}  // namespace proctree
