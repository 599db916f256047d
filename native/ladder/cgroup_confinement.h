// The cgroup tier (and the systemd tier, whose leaves are in a scope a
// systemd user manager delegated to us): the call's tree is its cgroup v2
// leaf and every cgroup below it. Membership survives setsid(), setpgid() and double forks; the
// tree can be frozen (cgroup.freeze, 5.2) and killed in one step
// (cgroup.kill, 5.14: race-free against forks and migrations); populated 0
// in cgroup.events proves it empty.
#pragma once

#include "kernel/cgroup.h"
#include "ladder/confinement.h"

namespace proctree {

class CgroupConfinement : public Confinement {
 public:
  // writes: where cgroup.freeze and cgroup.kill go (nullptr: written at once).
  explicit CgroupConfinement(CgroupDir leaf, Tier tier = Tier::kCgroup, SlowWrites* writes = nullptr)
      : leaf_(std::move(leaf)), tier_(tier), writes_(writes) {}

  Tier tier() const override { return tier_; }
  const char* verified() const override { return "cgroup.events"; }
  SysError members(std::vector<pid_t>* out) const override;
  SysError confirm(std::vector<Held>* held) const override;
  bool empty() const override;
  bool can_freeze() const override;
  SysError set_frozen(bool frozen, bool now = false) override;
  bool frozen() const override;
  Kill kill_all() override;
  Kill kill_all_now() override;
  void read_usage(Usage* out) const override;
  SysError release() override;
  // rmdir first: its success proves the leaf empty, in one system call.
  bool release_if_empty(SysError* error) override;

  const CgroupDir& leaf() const { return leaf_; }

 private:
  CgroupDir leaf_;
  Tier tier_;
  Kill kill(bool now);

  SlowWrites* writes_;
  mutable int has_freeze_ = -1;  // unknown until asked
  int has_kill_ = -1;
};

}  // namespace proctree
