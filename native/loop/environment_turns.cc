// The turns of the loop: what runs when the reactor is ready (the Waiter's
// wake-up through the host, or the host's own loop watching the reactor),
// how events posted in a turn are delivered, and the few milliseconds a turn
// (its "slice") may spend before the harness gets the thread back.
#include "loop/environment.h"

namespace proctree {

void Environment::turn() { run_turn(false); }

void Environment::host_turn() {
  host_turn_ = true;
  run_turn(false);
  host_turn_ = false;
}

void Environment::run_turn(bool again) {
  if (closing_) return;
  // A new turn: ladders and deliveries get their milliseconds again, unless
  // the last callback ended only a moment ago. Then the runtime may have run
  // this one in the same task as that one (Node runs a thread-safe call
  // queued while the previous ran, in a loop), and the milliseconds go on
  // counting: once spent, the turn yields (the Waiter wakes us a little
  // later, after the harness's timers and I/O have had the thread).
  if (!again) begin_slice(host_watches_);
  yielded_ = false;
  if (resume_pending_) {
    resume_pending_ = false;
    resume_waiting();
  }
  continuing_ = false;
  dispatching_ = true;
  reactor_.dispatch();
  dispatching_ = false;
  flush();
  if (closing_) return;
  // Spent: whatever is ready next waits for the harness's own turn first.
  if (turn_start_ns_ != 0 && monotonic_ns() - turn_start_ns_ >= kTurnBudgetNs) yielded_ = true;
  // (The host's loop calls us again by itself while the reactor is ready.)
  if (!yielded_ && !continuing_ && !host_watches_ && reactor_.ready_now()) {
    // More is ready already (a pipe still full) and the turn has time: on
    // in the same task, after this callback's microtasks, without a round
    // through the Waiter's thread. It stays disarmed meanwhile.
    turn_again_ = true;
    continuing_ = true;
    if (host_watches_) host_->arm_reactor(false);
    schedule_delivery();
    return;
  }
  end_slice();
  rearm_reactor();
}

void Environment::rearm_reactor() {
  if (host_watches_) {
    // A yielded turn needs no pause here: the runtime's loop runs the
    // harness's timers and I/O before it calls us again.
    host_->arm_reactor(true);
  } else {
    waiter_.rearm(yielded_);
  }
}

void Environment::deliver_next() {
  delivery_scheduled_ = false;
  if (closing_) return;
  if (turn_again_) {
    turn_again_ = false;
    run_turn(true);
    return;
  }
  // Not a continuation of a turn (events posted by a JavaScript call): a
  // turn of its own.
  if (!continuing_) begin_slice();
  continuing_ = false;
  flush();
  end_slice();
}

void Environment::begin_slice(bool fresh) {
  const uint64_t now = monotonic_ns();
  turn_start_ns_ = !fresh && now - last_end_ns_ < kTurnGapNs ? last_slice_start_ns_ : 0;
}

void Environment::end_slice() {
  last_end_ns_ = monotonic_ns();
  last_slice_start_ns_ = turn_start_ns_ != 0 ? turn_start_ns_ : last_end_ns_;
  // A JavaScript call after this (terminate from a timer) starts a slice of
  // its own; a delivery still due within this turn goes on with this one.
  if (!continuing_) turn_start_ns_ = 0;
}

}  // namespace proctree
