#include "loop/call.h"

#include <algorithm>

#include "loop/reactor.h"

namespace proctree {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kCgroup: return "cgroup";
    case Tier::kPidns: return "pidns";
    case Tier::kSubreaper: return "subreaper";
    default: return "pgroup";
  }
}

void Call::ensure_timer() {
  if (timer_) return;
  timer_ = new uv_timer_t;
  uv_timer_init(host_->loop(), timer_);
  timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
}

void Call::set_referenced(bool ref) {
  ref_ = ref;
  if (timer_ && uv_is_active(reinterpret_cast<uv_handle_t*>(timer_))) {
    if (ref) {
      uv_ref(reinterpret_cast<uv_handle_t*>(timer_));
    } else {
      uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
    }
  }
}

void Call::start_timer(int ms) {
  // The loop's cached time can be tens of ms old; grace is measured from now.
  uv_update_time(host_->loop());
  uv_timer_start(timer_, on_timer, static_cast<uint64_t>(std::max(ms, 0)), 0);
  if (ref_) uv_ref(reinterpret_cast<uv_handle_t*>(timer_));
}

void Call::stop_timer() {
  if (!timer_) return;
  uv_timer_stop(timer_);
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
}

void Call::on_timer(uv_timer_t* t) {
  Call* self = static_cast<Call*>(t->data);
  uv_unref(reinterpret_cast<uv_handle_t*>(t));
  self->on_timeout();
  self->host_->wake();
}

void Call::dispose() {
  unwatch();
  if (!timer_) {
    host_->on_call_disposed();
    delete this;
    return;
  }
  uv_timer_stop(timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(timer_), [](uv_handle_t* h) {
    Call* self = static_cast<Call*>(h->data);
    delete reinterpret_cast<uv_timer_t*>(h);
    self->host_->on_call_disposed();
    delete self;
  });
}

void Ladder::begin(const std::string& reason, int grace, int sig, uint64_t now) {
  started = true;
  start_ns = now;
  report = CleanupReport{};
  report.reason = reason;
  grace_ms = grace > 0 ? grace : 0;
  term_signal = sig;
}

void Ladder::finish(uint64_t now) {
  report.duration_ms = static_cast<double>(now - start_ns) / 1e6;
  report_ready = true;
}

void Ladder::give_up(const std::vector<pid_t>& alive, uint64_t now) {
  for (pid_t pid : alive) {
    ProcessInfo info;
    if (read_process_info(pid, &info)) report.leftovers.push_back(info);
  }
  finish(now);
}

void Call::post_report_once() {
  if (!ladder_.report_ready || ladder_.report_posted) return;
  ladder_.report_posted = true;
  host_->post(CallEvent{CallEvent::kCleanup, id_, {}, ladder_.report, {}});
}

}  // namespace proctree
