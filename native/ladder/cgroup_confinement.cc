#include "ladder/cgroup_confinement.h"

#include <algorithm>

#include "kernel/pidfd.h"
#include "kernel/procfs.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace proctree {

SysError CgroupConfinement::members(std::vector<pid_t>* out) const {
  if (!leaf_.valid()) {
    out->clear();
    return SysError::none();
  }
  SysError e = leaf_.read_procs(out);
  // A sealed call's shim is the leaf's, not the tree's: never signalled
  // (cgroup.kill takes it with the rest), never a leftover.
  if (!e && init_ > 0) out->erase(std::remove(out->begin(), out->end(), init_), out->end());
  if (!e) last_listed_.store(out->size(), std::memory_order_relaxed);
  return e;
}

SysError CgroupConfinement::confirm(std::vector<Held>* held) const {
  // Where the kernel tells a pidfd's cgroup (6.13), a member held in the
  // leaf itself is confirmed by its pidfd: that names one process, and it is
  // in the leaf now, whatever became of the number it was opened by. That
  // saves a read of the whole list per batch when the batch is a small part
  // of the tree. For a batch of at least a quarter of the list last read,
  // one read is cheaper: about 0.2 µs a listed member (and as much with a
  // thousand of them exiting) against 1.2-1.6 µs a pidfd; before a large
  // tree's first signal, that is a millisecond less before it.
  enum Seen : char { kInLeaf, kGone, kListed };
  std::vector<Seen> seen(held->size(), kListed);
  const unsigned long long leaf =
      held->size() >= kListCheaperFrom && held->size() * 4 >= last_listed_.load(std::memory_order_relaxed) ? 0
                                                                                                             : leaf_id();
  bool read = false;
  for (size_t i = 0; i < held->size(); ++i) {
    uint64_t id = 0;
    int r = leaf != 0 ? pidfd_cgroup_id((*held)[i].pidfd.get(), &id) : ENOTTY;
    if (r == 0 && id == leaf) {
      seen[i] = kInLeaf;
    } else if (r == ESRCH) {
      seen[i] = kGone;
    } else {
      read = true;  // below the leaf, elsewhere, or not told: the list says
    }
  }
  // One read proves membership for every other held pidfd at once; the held
  // pidfds stay as they are if it fails.
  std::vector<pid_t> listed;
  if (read) {
    if (SysError e = members(&listed)) return e;
    std::sort(listed.begin(), listed.end());
  }
  size_t kept = 0;
  for (size_t i = 0; i < held->size(); ++i) {
    const bool member = seen[i] == kInLeaf ||
                        (seen[i] == kListed && std::binary_search(listed.begin(), listed.end(), (*held)[i].pid));
    if (!member) continue;
    if (kept != i) (*held)[kept] = std::move((*held)[i]);
    ++kept;
  }
  held->resize(kept);
  return SysError::none();
}

bool CgroupConfinement::share_reads() const {
  // The leaf's descriptor (opened on first use) and its id, now: the reads
  // elsewhere only use them. Both stay until the call ends, after its ladder.
  if (!leaf_.valid() || leaf_.dir_fd() < 0) return false;
  leaf_id();
  return true;
}

unsigned long long CgroupConfinement::leaf_id() const {
  unsigned long long id = leaf_id_.load(std::memory_order_relaxed);
  unsigned long long read = 0;
  if (id == 0 && leaf_.valid() && !cgroup_id_of(leaf_.path(), &read)) {
    id = read;
    leaf_id_.store(id, std::memory_order_relaxed);
  }
  return id;
}

bool CgroupConfinement::empty() const {
  if (!leaf_.valid()) return true;
  CgroupEvents ev;
  // Unreadable is not empty: the kill phase's bound ends the wait.
  return !leaf_.read_events(&ev) && !ev.populated;
}

bool CgroupConfinement::can_freeze() const {
  if (has_freeze_ < 0) has_freeze_ = leaf_.valid() && leaf_.has_file("cgroup.freeze") ? 1 : 0;
  // Asked again each time: a tracer can attach to us at any moment.
  return has_freeze_ == 1 && !self_is_traced();
}

SysError CgroupConfinement::set_frozen(bool frozen, bool now) {
  // A freeze or kill written later may land after the tree is gone: a leaf
  // written to never serves another call.
  retired_ = true;
  const char* value = frozen ? "1" : "0";
  if (writes_ && !now) {
    writes_->write_later(leaf_.path() + "/cgroup.freeze", value);
    return SysError::none();
  }
  return leaf_.write_file("cgroup.freeze", value);
}

bool CgroupConfinement::frozen() const {
  CgroupEvents ev;
  return leaf_.valid() && !leaf_.read_events(&ev) && ev.frozen;
}

Confinement::Kill CgroupConfinement::kill_all() { return kill(false); }

Confinement::Kill CgroupConfinement::kill_all_now() { return kill(true); }

Confinement::Kill CgroupConfinement::kill(bool now) {
  retired_ = true;
  if (!leaf_.valid()) return Kill::kOneShot;
  if (has_kill_ < 0) has_kill_ = leaf_.has_kill() ? 1 : 0;
  if (has_kill_ == 1) {
    if (writes_ && !now) {
      writes_->write_later(leaf_.path() + "/cgroup.kill", "1");
      return Kill::kOneShot;
    }
    if (!leaf_.write_file("cgroup.kill", "1")) return Kill::kOneShot;
  }
  // Before 5.14, or cgroup.kill refused: freeze, SIGKILL each member, thaw
  // — repeated until empty.
  leaf_.sigkill_round();
  return Kill::kRound;
}

void CgroupConfinement::read_usage(Usage* out) const {
  if (!leaf_.valid()) return;
  // A leaf that may go to the pool is read through its directory, which the
  // pool keeps open for the next clone.
  if (pool_ && !retired_) leaf_.dir_fd();
  // cpu.stat is there on cgroup v2 without any controller (5.x); its times
  // are in microseconds.
  std::string stat;
  if (leaf_.read_cpu_stat(&stat)) return;
  auto field = [&stat](const char* name) -> double {
    size_t at = stat.find(name);
    return at == std::string::npos ? 0 : std::strtod(stat.c_str() + at + strlen(name), nullptr);
  };
  counters_.user_usec = field("user_usec ");
  counters_.system_usec = field("system_usec ");
  counted_ = true;
  out->known = true;
  out->source = "cgroup";
  out->user_ms = (counters_.user_usec - base_.user_usec) / 1000.0;
  out->system_ms = (counters_.system_usec - base_.system_usec) / 1000.0;
  // The limit controllers' counters, where the leaf has them (memory.peak
  // needs 5.19, pids.peak 6.1). A peak is since the leaf was made: in a
  // reused leaf it is this call's only where it grew past the earlier calls'.
  counters_.controllers = base_.controllers;
  if (!base_.controllers) return;
  LimitCounters now;
  if (read_limit_counters(leaf_.dir_fd(), leaf_.path(), &now)) return;
  counters_.limits = now;
  const LimitCounters& was = base_.limits;
  LimitVerdict v = limit_verdict(was, now);
  out->oom_killed = v.oom_killed;
  out->pids_limited = v.pids_limited;
  out->memory_peak = -1;
  if (now.has_memory_peak && (!was.has_memory_peak || now.memory_peak > was.memory_peak)) {
    out->memory_peak = static_cast<long long>(now.memory_peak);
  }
  out->pids_peak = -1;
  if (now.has_pids_peak && (!was.has_pids_peak || now.pids_peak > was.pids_peak)) {
    out->pids_peak = static_cast<long long>(now.pids_peak);
  }
}

SysError CgroupConfinement::release() { return leaf_.remove(); }

CgroupConfinement::Offer CgroupConfinement::offer_to_pool() {
  if (!pool_ || retired_ || !counted_ || !leaf_.valid()) {
    return Offer::kRefused;
  }
  // As good as a fresh leaf, or not reused: nothing in it (populated 0),
  // not frozen (a member may have written its own cgroup.freeze), no
  // cgroups below (a kernfs directory's link count is 2 + its
  // subdirectories).
  // (statx, not fstat: glibc before 2.33 has no fstat symbol to link to.)
  CgroupEvents ev;
  struct statx st;
  if (leaf_.read_events(&ev)) return Offer::kRefused;
  if (ev.populated) return Offer::kPopulated;
  if (ev.frozen || statx(leaf_.dir_fd(), "", AT_EMPTY_PATH, STATX_NLINK, &st) != 0 || st.stx_nlink != 2) {
    return Offer::kRefused;
  }
  // Nor did the call lower its leaf's cgroup.max.descendants or .depth: the
  // next call in it could make no cgroup of its own (a nested harness, a
  // sealed call's tools), failing with EAGAIN. Two preads of descriptors
  // the leaf keeps (opening, reading and closing both files per call was
  // 3.4 % of the harness thread's CPU in a profile; the preads are 1.2 %).
  if (!leaf_.nesting_unlimited()) return Offer::kRefused;
  return pool_->give_back(&leaf_, counters_) ? Offer::kTaken : Offer::kRefused;
}

bool CgroupConfinement::release_if_empty(SysError* error) {
  switch (offer_to_pool()) {
    case Offer::kTaken: return true;
    case Offer::kPopulated: return false;
    case Offer::kRefused: break;
  }
  if (leaf_.remove_if_empty()) return true;
  // EBUSY: populated, or the call made cgroups of its own in it.
  return Confinement::release_if_empty(error);
}

}  // namespace proctree
