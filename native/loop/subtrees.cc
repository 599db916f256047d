#include "loop/subtrees.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "kernel/guardian_launch.h"
#include "loop/errno_name.h"

namespace proctree {

SysError Subtrees::location(CgroupLocation* out) {
  if (!located_) {
    location_error_ = locate_cgroup2(&location_);
    if (!location_error_) parent_ = subtree_parent(location_);
    located_ = true;
  }
  if (location_error_) return location_error_;
  *out = location_;
  return SysError::none();
}

SysError Subtrees::reach_controllers(unsigned needed) {
  if (!(needed & ~parent_controllers_)) return SysError::none();
  LimitsReach reach;
  if (SysError e = limits_reach(location_.mount, parent_, &reach)) return e;
  if (needed & ~reach.available) {
    ControllerReport report;
    if (SysError e = controller_report(location_.mount, parent_, needed & ~reach.available, &report)) return e;
    return SysError::of(ENOTSUP, "limits", report.reason);
  }
  if (const unsigned enable = needed & reach.enableable) {
    Fd dir(open(parent_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    SysError e = dir ? enable_controllers(dir.get(), parent_, enable) : SysError::from_errno("open", parent_);
    if (e.err == EBUSY || e.err == EOPNOTSUPP) {
      // A cgroup namespace's root looks exempt from the "no internal
      // processes" rule (the real root is), but the kernel holds it to it.
      std::string names;
      for (LimitController c : {kLimitMemory, kLimitPids, kLimitCpu}) {
        if (enable & c) names += std::string(names.empty() ? "" : ",") + limit_controller_name(c);
      }
      return SysError::of(ENOTSUP, "limits",
                          names + ": the kernel refused to enable them in " + parent_ + "/cgroup.subtree_control (" +
                              errno_name(e.err) +
                              ": it holds processes of its own); move them into a leaf of their own first");
    }
    if (e) return e;
  }
  parent_controllers_ = reach.available & ~(reach.enableable & ~needed);
  return SysError::none();
}

SysError Subtrees::enable_for_leaves(Group* g, unsigned needed) {
  unsigned offered = 0;
  if (SysError e = read_controller_file(g->dir.dir_fd(), g->dir.path(), "cgroup.controllers", &offered)) {
    return needed ? e : SysError::none();
  }
  const unsigned want = offered & (kLimitMemory | kLimitPids | needed) & ~g->controllers;
  if (!want) return SysError::none();
  if (SysError e = enable_controllers(g->dir.dir_fd(), g->dir.path(), want)) {
    // The counters are a bonus where no limit needs them: calls run without.
    return (want & needed) ? e : SysError::none();
  }
  g->controllers |= want;
  return SysError::none();
}

SysError Subtrees::make_leaf(const std::string& group, uint64_t id, const LeafLimits& limits,
                             const std::string& helper, ChildStack& stack, CgroupDir* out, CpuCounters* base,
                             bool* kept, SysError* guardian_error) {
  CgroupLocation loc;
  if (SysError e = location(&loc)) return e;
  const unsigned needed = limits.controllers();
  if (needed) {
    if (SysError e = reach_controllers(needed)) return e;
  }
  linger_.stop();
  auto g = groups_.find(group);
  if (g == groups_.end()) {
    // The delegation rule: only ever below the harness's own cgroup (or
    // beside the harness's leaf, in the cgroup it sits in: parent()). The
    // name carries this process's random prefix, so a directory that exists
    // already is another harness's unless we made it earlier and it is still
    // there: never share one.
    bool ours = made_.count(group) != 0;
    Group made;
    if (SysError e = CgroupDir::create(parent_ + "/" + group, ours, &made.dir)) return e;
    // Its controllers and its limits before any call runs in it.
    SysError e = enable_for_leaves(&made, needed);
    if (!e && limits.group.controllers()) e = apply_limits(made.dir.dir_fd(), made.dir.path(), limits.group);
    if (e) {
      made.dir.remove();
      return e;
    }
    made_.insert(group);
    g = groups_.emplace(group, std::move(made)).first;
    guardian_checked_ms_ = 0;
  } else if (needed & ~g->second.controllers) {
    if (SysError e = enable_for_leaves(&g->second, needed)) return e;
  }
  // Checked when a subtree is made, and at most once a second otherwise (a
  // poll of its pidfd): a guardian killed (by a same-uid call, the OOM
  // killer) while calls keep coming is started again, and it watches every
  // subtree of this harness by its prefix.
  const uint64_t now = monotonic_ns() / 1000000ULL;
  if (guardian_checked_ms_ == 0 || now - guardian_checked_ms_ >= kGuardianCheckMs) {
    guardian_checked_ms_ = now == 0 ? 1 : now;
    GuardianInfo info;
    *guardian_error = ensure_guardian(helper, parent_, subtree_prefix(), stack, &info);
  }
  const unsigned controllers = g->second.controllers;
  std::vector<Pooled>& pool = g->second.pool;
  if (!pool.empty()) {
    *out = std::move(pool.back().leaf);
    *base = pool.back().counters;
    base->controllers = controllers;
    pool.pop_back();
    // Its ctime is when the call began, as for a new leaf (`proctree ps`
    // shows a call's age from it).
    futimens(out->dir_fd(), nullptr);
    *kept = true;
  } else {
    *base = CpuCounters();
    base->controllers = controllers;
    *kept = false;
    if (SysError e = CgroupDir::create(g->second.dir.path() + "/c" + std::to_string(id), false, out)) {
      // The subtree vanished under us (removed by hand): forget it, so that
      // the next call makes it anew.
      if (e.err == ENOENT) groups_.erase(g);
      return e;
    }
  }
  // The call's limits, before its command runs; a kept leaf's earlier ones
  // back to "max" (apply_limits writes every limit file the leaf has).
  if (controllers && (*kept || limits.call.controllers())) {
    if (SysError e = apply_limits(out->dir_fd(), out->path(), limits.call)) {
      out->remove();
      return e;
    }
  }
  return SysError::none();
}

bool Subtrees::give_back(CgroupDir* leaf, const CpuCounters& counters) {
  const std::string& path = leaf->path();
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return false;
  for (auto& kv : groups_) {
    Group& g = kv.second;
    if (g.dir.path().size() != slash || path.compare(0, slash, g.dir.path()) != 0) continue;
    if (g.pool.size() >= kPoolMax) return false;
    // Its cgroup.events stays open: the next call's spawn reads it (is the
    // leaf frozen from above?), one pread instead of an open, a read and a
    // close.
    g.pool.push_back(Pooled{std::move(*leaf), counters});
    *leaf = CgroupDir();
    return true;
  }
  return false;
}

void Subtrees::drop_kept(const std::string& group) {
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  for (Pooled& p : g->second.pool) p.leaf.remove();
  g->second.pool.clear();
}

void Subtrees::idle() {
  if (groups_.empty()) return;
  linger_.start(kLingerMs);
}

bool Subtrees::kill_round() {
  bool whole = true;
  for (auto& kv : groups_) {
    bool one_shot = false;
    kv.second.dir.kill_round(&one_shot);
    whole = whole && one_shot;
  }
  return whole;
}

bool Subtrees::populated() const {
  for (const auto& kv : groups_) {
    CgroupEvents ev;
    if (!kv.second.dir.read_events(&ev) && ev.populated) return true;
  }
  return false;
}

void Subtrees::remove_all() {
  // rmdir fails harmlessly (EBUSY) on one that still holds a call.
  for (auto it = groups_.begin(); it != groups_.end();) {
    drop_kept(it->first);
    if (!it->second.dir.remove()) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace proctree
