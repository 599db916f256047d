// The cgroup tier (and the systemd tier, whose leaves are in a scope a
// systemd user manager delegated to us): the call's tree is its cgroup v2
// leaf and every cgroup below it. Membership survives setsid(), setpgid() and double forks; the
// tree can be frozen (cgroup.freeze, 5.2) and killed in one step
// (cgroup.kill, 5.14: race-free against forks and migrations); populated 0
// in cgroup.events proves it empty.
#pragma once

#include <atomic>

#include "kernel/cgroup.h"
#include "kernel/limits.h"
#include "ladder/confinement.h"

namespace proctree {

// cpu.stat's counters (µs). A leaf that served earlier calls carries theirs:
// a call's usage is the difference from where its leaf stood when it began.
struct CpuCounters {
  double user_usec = 0;
  double system_usec = 0;
  // The limit controllers the leaf has (kernel/limits.h bits; 0: none, and
  // nothing of theirs is read), and their counters: a call's verdicts are
  // what grew since it began, its peaks count only when they grew past the
  // earlier calls' (memory.peak and pids.peak are since the leaf was made).
  unsigned controllers = 0;
  LimitCounters limits;
};

// Takes the leaf of a call that ended cleanly, for a later call of the same
// subtree (a mkdir and an rmdir are most of what a per-call cgroup costs).
class LeafPool {
 public:
  virtual ~LeafPool() = default;
  // *leaf is empty, unfrozen and has no cgroups below it; counters are its
  // cpu.stat now. True: taken (and *leaf left invalid); false: remove it.
  virtual bool give_back(CgroupDir* leaf, const CpuCounters& counters) = 0;
};

class CgroupConfinement : public Confinement {
 public:
  // writes: where cgroup.freeze and cgroup.kill go (nullptr: written at once).
  explicit CgroupConfinement(CgroupDir leaf, Tier tier = Tier::kCgroup, SlowWrites* writes = nullptr)
      : leaf_(std::move(leaf)), tier_(tier), writes_(writes) {}

  Tier tier() const override { return tier_; }
  const char* verified() const override { return "cgroup.events"; }
  SysError members(std::vector<pid_t>* out) const override;
  SysError confirm(std::vector<Held>* held) const override;
  bool share_reads() const override;
  bool empty() const override;
  bool can_freeze() const override;
  SysError set_frozen(bool frozen, bool now = false) override;
  bool frozen() const override;
  void close_descriptors() override { leaf_.close(); }
  Kill kill_all() override;
  Kill kill_all_now() override;
  void read_usage(Usage* out) const override;
  SysError release() override;
  // rmdir first: its success proves the leaf empty, in one system call.
  bool release_if_empty(SysError* error) override;

  void retire() override { retired_ = true; }
  // Its counters when this call began (0 for a new leaf).
  const CpuCounters& base() const { return base_; }

  const CgroupDir& leaf() const { return leaf_; }
  // A sealed call: its shim (the namespaces' init, in the leaf) is no member.
  void set_init(pid_t pid) { init_ = pid; }
  // Once empty, the leaf goes to `pool` instead of rmdir, if nothing
  // retired it; `base`: its counters when this call began.
  void reuse_into(LeafPool* pool, const CpuCounters& base) {
    pool_ = pool;
    base_ = base;
  }

 private:
  // A batch this large, and a quarter of the list or more, is confirmed by
  // one read of the list rather than one question per pidfd (confirm()).
  static constexpr size_t kListCheaperFrom = 128;

  enum class Offer { kTaken, kPopulated, kRefused };
  Offer offer_to_pool();
  Kill kill(bool now);
  // The leaf's cgroup id (0: unknown), read once.
  unsigned long long leaf_id() const;

  CgroupDir leaf_;
  // Atomic: a pass on the host's thread (share_reads) may look it up too.
  mutable std::atomic<unsigned long long> leaf_id_{0};
  // How many members() listed last (any thread): how large the tree is.
  mutable std::atomic<size_t> last_listed_{0};
  Tier tier_;
  LeafPool* pool_ = nullptr;
  CpuCounters base_;
  mutable CpuCounters counters_;  // at the last read_usage()
  mutable bool counted_ = false;  // counters_ were read
  bool retired_ = false;
  pid_t init_ = -1;

  SlowWrites* writes_;
  mutable int has_freeze_ = -1;  // unknown until asked
  int has_kill_ = -1;
};

}  // namespace proctree
