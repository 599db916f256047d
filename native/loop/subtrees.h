// The cgroup subtrees of one environment: proctree-<pid>-<random>[-<name>]
// directories below the harness's own cgroup, each holding one leaf per call
// (c<id>). A subtree is made on first use, exclusively (a name that exists
// already is not ours), and the guardian that outlives the harness is checked
// each time one is made. Once no call is left, the subtrees are kept for a
// moment (a harness running calls one after another does not pay a mkdir and
// an rmdir for each), then removed.
//
// A leaf nothing of ours froze or killed (no freeze or kill write that could
// land late), that no job names, and proved empty, unfrozen and without
// cgroups below, goes to its subtree's pool and serves a later call: a leaf costs a
// mkdir and an rmdir otherwise, which is most of what the kernel spends on a
// short call. A reused leaf keeps its name (cgroup v2 cannot rename), so a
// call's leaf is c<id of the call that made it>.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernel/cgroup.h"
#include "kernel/clone.h"
#include "kernel/limits.h"
#include "ladder/cgroup_confinement.h"
#include "loop/timers.h"

namespace proctree {

// What a call asks of the cgroups it runs in (kernel/limits.h): its own
// limits on its leaf, and its supervisor's on the subtree (the total of all
// its calls). Zero fields: no limit.
struct LeafLimits {
  Limits call;
  Limits group;
  unsigned controllers() const { return call.controllers() | group.controllers(); }
};

class Subtrees : public LeafPool {
 public:
  explicit Subtrees(Timers* timers) : linger_(timers, [this] { remove_all(); }) {}
  Subtrees(const Subtrees&) = delete;
  Subtrees& operator=(const Subtrees&) = delete;

  // Where the harness's cgroup is (located once).
  SysError location(CgroupLocation* out);
  // Where the subtrees go: the harness's cgroup, or its parent when the
  // harness sits in a leaf beside them (kernel/limits.h subtree_parent).
  const std::string& parent() const { return parent_; }

  // A leaf for call `id` in subtree `group`: one kept from an earlier call
  // (*kept; *base: its counters), else a new one, c<id>. *guardian_error is set when the
  // guardian was found dead (or never started) and could not be started (the call
  // still runs; it is stopped on a normal exit, not on SIGKILL).
  // With limits: the controllers they need are enabled where they are
  // missing and may be (the subtrees' parent, the subtree), the group's
  // limits are written into a subtree it makes, the call's into its leaf
  // (a kept leaf's earlier limits cleared). ENOTSUP with syscall "limits"
  // (its path: which controllers, why and the fix) where one cannot be had.
  SysError make_leaf(const std::string& group, uint64_t id, const LeafLimits& limits, const std::string& helper,
                     ChildStack& stack, CgroupDir* out, CpuCounters* base, bool* kept, SysError* guardian_error);
  // Removes the leaves kept for `group`'s next calls.
  void drop_kept(const std::string& group);

  // LeafPool
  bool give_back(CgroupDir* leaf, const CpuCounters& counters) override;

  // No live call is left: remove the subtrees after kLingerMs.
  void idle();
  // SIGKILL everything in every subtree (one round; repeat until empty()).
  // True when cgroup.kill took every subtree whole, leaves included; else
  // each leaf needs its own round (a subtree's round reaches only the
  // subtree's direct members).
  bool kill_round();
  bool populated() const;
  void remove_all();
  // Stops the linger timer.
  void close() { linger_.stop(); }

  static constexpr uint64_t kLingerMs = 1000;
  // Leaves kept per subtree: enough for a harness that keeps this many short
  // calls in flight; each holds one descriptor (its directory).
  static constexpr size_t kPoolMax = 16;
  // How often a spawn into an existing subtree checks the guardian.
  static constexpr uint64_t kGuardianCheckMs = 1000;

 private:
  struct Pooled {
    CgroupDir leaf;
    CpuCounters counters;
  };
  struct Group {
    CgroupDir dir;
    std::vector<Pooled> pool;
    // Limit controllers enabled in its cgroup.subtree_control: its leaves have them.
    unsigned controllers = 0;
  };
  // The controllers `needed` enabled in the subtrees' parent, or why not.
  SysError reach_controllers(unsigned needed);
  // The controllers the leaves of g get: memory and pids wherever g has
  // them (their counters give every call its peaks and verdicts); cpu only
  // once a call limits it (it changes how CPU is shared between calls).
  SysError enable_for_leaves(Group* g, unsigned needed);

  CgroupLocation location_;
  std::string parent_;
  unsigned parent_controllers_ = 0;  // seen enabled in parent_'s cgroup.subtree_control
  SysError location_error_;
  bool located_ = false;
  std::map<std::string, Group> groups_;
  // Every subtree name this environment made: only those may be reopened.
  std::set<std::string> made_;
  // Unreferenced: at exit the 'exit' hook (or the guardian) removes them.
  Timer linger_;
  uint64_t guardian_checked_ms_ = 0;  // monotonic ms of the last check, 0: never
};

}  // namespace proctree
