// The subreaper tier: the shim is a PR_SET_CHILD_SUBREAPER process, so every
// escapee that stays a descendant of it (setsid, setpgid, double fork, nohup
// all do) is reparented to it and seen by a walk. The kill is not race-free:
// SIGKILL rounds over the walk, until the shim has no child left (its exit).
#pragma once

#include "ladder/shim_tree.h"

namespace proctree {

class SubreaperConfinement : public ShimTree {
 public:
  using ShimTree::ShimTree;
  Tier tier() const override { return Tier::kSubreaper; }
  const char* verified() const override { return "subreaper"; }
};

}  // namespace proctree
