// Stopping many calls at once without stalling the loop: the few
// milliseconds of each turn of the loop that all ladders share for their
// starts and signal passes (what does not fit goes on in the next turn), and
// the passes' thread, where a pass over a large tree runs instead.
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "loop/environment.h"

namespace proctree {

std::vector<bool> Environment::terminate_group(const std::vector<uint64_t>& ids, const std::vector<int>& sigs,
                                               int grace_ms, const std::string& reason) {
  std::vector<bool> out(ids.size(), false);
  // No freeze of the calls' common subtree first: each ladder signals its
  // tree before it freezes it, and most trees die of that signal and are
  // never frozen at all (see Ladder::start).
  for (size_t i = 0; i < ids.size(); ++i) {
    Call* c = find(ids[i]);
    if (!c) continue;
    // The passes of many trees: on the passes' thread, one after another
    // and at once, not in the loop's slices (LadderHost::pass_elsewhere).
    if (ids.size() >= kGroupPassesElsewhere) c->stop_with_others();
    if (!turn_has_time()) {
      // Later in this turn's place: a ladder that starts on an empty tree
      // still reports, so the answer is already known.
      deferred_stops_.push_back(DeferredStop{ids[i], sigs[i], grace_ms, reason});
      start_turns();
      out[i] = !c->finished();
      continue;
    }
    out[i] = c->terminate(grace_ms, sigs[i], reason);
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

bool Environment::run_pass_elsewhere(uint64_t call_id, JobThread::Work work) {
  if (passes_.run(call_id, std::move(work))) return false;
  update_keep_alive();
  return true;
}

void Environment::on_passes_done() {
  for (uint64_t id : passes_.take_done()) returned_passes_.push_back(id);
  if (!resume_returned_passes()) {
    yielded_ = true;
    start_turns();
  }
  update_keep_alive();
}

bool Environment::resume_returned_passes() {
  // A stop of a hundred trees gets a hundred passes back at once, each
  // ladder's next steps (its watches, a read of cgroup.events) a moment of
  // the loop: they go on while this turn has time, the rest in the next.
  // Until then a ladder is as if its pass were still away.
  while (!returned_passes_.empty() && turn_has_time()) {
    const uint64_t id = returned_passes_.front();
    returned_passes_.pop_front();
    if (Call* c = find(id)) c->on_pass_returned();
  }
  return returned_passes_.empty();
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
  resume_returned_passes();
  while (!deferred_stops_.empty() && turn_has_time()) {
    DeferredStop d = std::move(deferred_stops_.front());
    deferred_stops_.pop_front();
    if (Call* c = find(d.id)) c->terminate(d.grace_ms, d.sig, d.reason);
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
  if (!budget_waiters_.empty() || !deferred_stops_.empty() || !returned_passes_.empty()) {
    yielded_ = true;
    start_turns();
  }
}

}  // namespace proctree
