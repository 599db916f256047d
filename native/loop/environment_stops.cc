// Stopping many calls at once without stalling the loop: one freeze per
// shared cgroup subtree for a supervisor's shutdown, and the few
// milliseconds of each turn of the loop that all ladders share for their
// starts and signal passes (what does not fit goes on in the next turn).
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "kernel/procfs.h"
#include "loop/environment.h"

namespace proctree {

std::vector<bool> Environment::terminate_group(const std::vector<uint64_t>& ids, const std::vector<int>& sigs,
                                               int grace_ms, const std::string& reason) {
  std::vector<bool> out(ids.size(), false);
  // The turn's milliseconds start now: opening what the ladders will read
  // (prepare_stop, below) is part of them, not had before them.
  turn_has_time();
  // Which calls share which subtree: one freeze each, where it can be had.
  std::unordered_map<std::string, std::vector<size_t>> by_subtree;
  bool may_freeze = grace_ms > 0 && !self_is_traced();
  for (size_t i = 0; i < ids.size(); ++i) {
    Call* c = find(ids[i]);
    if (!c) continue;
    std::string subtree = may_freeze ? c->subtree_path() : std::string();
    if (!subtree.empty()) by_subtree[subtree].push_back(i);
  }
  for (auto& kv : by_subtree) {
    if (group_freezes_.count(kv.first) || kv.second.size() < 2) continue;
    for (size_t i : kv.second) find(ids[i])->prepare_stop();
    GroupFreeze g;
    if (CgroupDir::open_existing(kv.first, &g.subtree) || !g.subtree.has_file("cgroup.freeze")) continue;
    g.subtree.close();
    writes_.write_later(kv.first + "/cgroup.freeze", "1");
    g.holders = kv.second.size();
    for (size_t i : kv.second) freeze_holder_[ids[i]] = kv.first;
    group_freezes_.emplace(kv.first, std::move(g));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    Call* c = find(ids[i]);
    if (!c) continue;
    bool group = freeze_holder_.count(ids[i]) != 0;
    if (!turn_has_time()) {
      // Later in this turn's place: a ladder that starts on an empty tree
      // still reports, so the answer is already known.
      deferred_stops_.push_back(DeferredStop{ids[i], sigs[i], grace_ms, reason, group});
      start_turns();
      out[i] = !c->finished();
      continue;
    }
    out[i] = group ? c->terminate_frozen_by_group(grace_ms, sigs[i], reason) : c->terminate(grace_ms, sigs[i], reason);
  }
  return out;
}

bool Environment::turn_has_time() {
  uint64_t now = monotonic_ns();
  if (turn_start_ns_ == 0) turn_start_ns_ = now;
  return now - turn_start_ns_ < kTurnBudgetNs;
}

// The wake eventfd: the next turn (a task of its own) resumes what waits.
void Environment::start_turns() { signal_wake(); }

size_t Environment::take_pass_budget(uint64_t call_id, size_t wanted) {
  if (turn_has_time()) return std::min(wanted, kMembersPerGrant);
  budget_waiters_.push_back(call_id);
  start_turns();
  return 0;
}

void Environment::on_wake() {
  uint64_t n;
  while (read(wake_.get(), &n, sizeof n) < 0 && errno == EINTR) {
  }
  resume_waiting();
}

void Environment::resume_waiting() {
  wake_signalled_ = false;
  // What waits goes on, in order, while this turn has time; the rest waits
  // for the next one.
  while (!deferred_stops_.empty() && turn_has_time()) {
    DeferredStop d = std::move(deferred_stops_.front());
    deferred_stops_.pop_front();
    if (Call* c = find(d.id)) {
      if (d.group_frozen) {
        c->terminate_frozen_by_group(d.grace_ms, d.sig, d.reason);
      } else {
        c->terminate(d.grace_ms, d.sig, d.reason);
      }
    } else if (d.group_frozen) {
      group_freeze_released(d.id);
    }
  }
  std::deque<uint64_t> waiting;
  waiting.swap(budget_waiters_);
  while (!waiting.empty() && turn_has_time()) {
    uint64_t id = waiting.front();
    waiting.pop_front();
    if (Call* c = find(id)) c->resume_pass();
  }
  // Whoever did not get a turn keeps its place, ahead of newcomers.
  while (!waiting.empty()) {
    budget_waiters_.push_front(waiting.back());
    waiting.pop_back();
  }
  if (!budget_waiters_.empty() || !deferred_stops_.empty()) {
    yielded_ = true;
    start_turns();
  }
}

void Environment::group_freeze_released(uint64_t call_id) {
  auto h = freeze_holder_.find(call_id);
  if (h == freeze_holder_.end()) return;
  auto g = group_freezes_.find(h->second);
  freeze_holder_.erase(h);
  if (g == group_freezes_.end()) return;
  if (--g->second.holders > 0) return;
  // The last call is done signalling: everyone runs again, signals pending.
  writes_.write_later(g->first + "/cgroup.freeze", "0");
  group_freezes_.erase(g);
}

}  // namespace proctree
