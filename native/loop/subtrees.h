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
#include "ladder/cgroup_confinement.h"
#include "loop/timers.h"

namespace proctree {

class Subtrees : public LeafPool {
 public:
  explicit Subtrees(Timers* timers) : linger_(timers, [this] { remove_all(); }) {}
  Subtrees(const Subtrees&) = delete;
  Subtrees& operator=(const Subtrees&) = delete;

  // Where call cgroups go (located once).
  SysError location(CgroupLocation* out);

  // A leaf for call `id` in subtree `group`: one kept from an earlier call
  // (*kept; *base: its counters), else a new one, c<id>. *guardian_error is set when the
  // guardian was found dead (or never started) and could not be started (the call
  // still runs; it is stopped on a normal exit, not on SIGKILL).
  SysError make_leaf(const std::string& group, uint64_t id, const std::string& helper, ChildStack& stack,
                     CgroupDir* out, CpuCounters* base, bool* kept, SysError* guardian_error);
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
  };
  CgroupLocation location_;
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
