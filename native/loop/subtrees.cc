#include "loop/subtrees.h"

#include <sys/stat.h>

#include "kernel/guardian_launch.h"

namespace proctree {

SysError Subtrees::location(CgroupLocation* out) {
  if (!located_) {
    location_error_ = locate_cgroup2(&location_);
    located_ = true;
  }
  if (location_error_) return location_error_;
  *out = location_;
  return SysError::none();
}

SysError Subtrees::make_leaf(const std::string& group, uint64_t id, const std::string& helper, ChildStack& stack,
                             CgroupDir* out, CpuCounters* base, bool* kept, SysError* guardian_error) {
  CgroupLocation loc;
  if (SysError e = location(&loc)) return e;
  linger_.stop();
  auto g = groups_.find(group);
  if (g == groups_.end()) {
    // The delegation rule: only ever below the harness's own cgroup. The
    // name carries this process's random prefix, so a directory that exists
    // already is another harness's unless we made it earlier and it is still
    // there: never share one.
    bool ours = made_.count(group) != 0;
    Group made;
    if (SysError e = CgroupDir::create(loc.own_path + "/" + group, ours, &made.dir)) return e;
    made_.insert(group);
    g = groups_.emplace(group, std::move(made)).first;
    guardian_checked_ms_ = 0;
  }
  // Checked when a subtree is made, and at most once a second otherwise (a
  // poll of its pidfd): a guardian killed (by a same-uid call, the OOM
  // killer) while calls keep coming is started again, and it watches every
  // subtree of this harness by its prefix.
  const uint64_t now = monotonic_ns() / 1000000ULL;
  if (guardian_checked_ms_ == 0 || now - guardian_checked_ms_ >= kGuardianCheckMs) {
    guardian_checked_ms_ = now == 0 ? 1 : now;
    GuardianInfo info;
    *guardian_error = ensure_guardian(helper, loc.own_path, subtree_prefix(), stack, &info);
  }
  std::vector<Pooled>& pool = g->second.pool;
  if (!pool.empty()) {
    *out = std::move(pool.back().leaf);
    *base = pool.back().counters;
    pool.pop_back();
    // Its ctime is when the call began, as for a new leaf (`proctree ps`
    // shows a call's age from it).
    futimens(out->dir_fd(), nullptr);
    *kept = true;
    return SysError::none();
  }
  *base = CpuCounters();
  *kept = false;
  if (SysError e = CgroupDir::create(g->second.dir.path() + "/c" + std::to_string(id), false, out)) {
    // The subtree vanished under us (removed by hand): forget it, so that
    // the next call makes it anew.
    if (e.err == ENOENT) groups_.erase(g);
    return e;
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
    leaf->close_events();
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
