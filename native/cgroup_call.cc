#include "call.h"

#include <signal.h>

#include <algorithm>

#include "reactor.h"

namespace proctree {
namespace {

// How long a freeze may take before the ladder goes straight to cgroup.kill
// (a member in uninterruptible sleep can hold it up).
constexpr int kMaxFreezeWaitMs = 1000;
// How long cgroup.kill may take before what is left is reported as leftovers.
constexpr int kKillWaitMs = 5000;

uint64_t now_ns() { return uv_hrtime(); }

}  // namespace

Call::Call(CallHost* host, uint64_t id, CgroupDir cgroup, std::string cgroup_rel, SpawnResult proc)
    : host_(host),
      id_(id),
      cgroup_(std::move(cgroup)),
      cgroup_rel_(std::move(cgroup_rel)),
      proc_(std::move(proc)) {}

SysError Call::start() {
  timer_ = new uv_timer_t;
  uv_timer_init(host_->loop(), timer_);
  timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
  if (SysError e = host_->reactor().watch_cgroup(cgroup_.path() + "/cgroup.events", id_, &wd_)) return e;
  if (SysError e = host_->reactor().watch_process(proc_.pidfd.get(), id_)) return e;
  // The watch exists now, so any later change raises an event; read the state
  // once in case the command already finished.
  refresh_events();
  return SysError::none();
}

void Call::refresh_events() {
  CgroupEvents ev;
  if (cgroup_.valid() && !cgroup_.read_events(&ev)) {
    populated_ = ev.populated;
    frozen_ = ev.frozen;
  } else {
    populated_ = false;
  }
}

bool Call::populated_now() const {
  CgroupEvents ev;
  if (!cgroup_.valid() || cgroup_.read_events(&ev)) return false;
  return ev.populated;
}

void Call::handle_process_exit() {
  if (exited_) return;
  ExitStatus st;
  if (SysError e = pidfd_reap(proc_.pidfd.get(), &st)) {
    // ECHILD: someone reaped our child behind our back (waitpid(-1) in the
    // same process). Its status is lost, but the call still must end.
    st.done = true;
    st.code = -1;
    st.signal = 0;
    host_->post(CallEvent{CallEvent::kError, id_, {}, {}, e});
  }
  if (!st.done) return;  // spurious readiness
  exited_ = true;
  host_->reactor().unwatch_process(proc_.pidfd.get());
  proc_.pidfd.reset();
  host_->post(CallEvent{CallEvent::kExit, id_, st, {}, {}});
  exit_posted_ = true;
  refresh_events();
  maybe_finish();
}

void Call::handle_cgroup_events() {
  refresh_events();
  switch (phase_) {
    case Phase::kFreezing:
      if (!populated_) {
        stop_timer();
        ladder_done();
      } else if (frozen_) {
        stop_timer();
        report_.froze = true;
        signal_members_and_thaw();
      }
      break;
    case Phase::kGrace:
    case Phase::kKilling:
      if (!populated_) {
        stop_timer();
        ladder_done();
      }
      break;
    default:
      break;
  }
  maybe_finish();
}

bool Call::terminate(int grace_ms, int sig, const std::string& reason) {
  if (ladder_started_ || finished_) return ladder_started_;
  ladder_started_ = true;
  ladder_start_ns_ = now_ns();
  report_ = CleanupReport{};
  report_.reason = reason;
  grace_ms_ = std::max(grace_ms, 0);
  term_signal_ = sig;
  refresh_events();
  if (!populated_) {
    ladder_done();
    maybe_finish();
    return true;
  }
  if (grace_ms_ == 0) {
    start_kill();
    maybe_finish();
    return true;
  }
  // Freeze first: a member that forks while we read cgroup.procs would be
  // missed, and a frozen member cannot fork or exit under us.
  if (cgroup_.write_file("cgroup.freeze", "1")) {
    signal_members_and_thaw();
    maybe_finish();
    return true;
  }
  phase_ = Phase::kFreezing;
  refresh_events();
  if (frozen_) {
    report_.froze = true;
    signal_members_and_thaw();
  } else {
    start_timer(std::min(grace_ms_, kMaxFreezeWaitMs));
  }
  maybe_finish();
  return true;
}

bool Call::signal_member(pid_t pid, int sig, bool count_escape) {
  Fd fd = pidfd_open(pid);
  if (!fd) return false;
  // The number came from cgroup.procs; make sure the process the pidfd holds
  // is still in our tree (it could have died and the number been reused).
  std::string where;
  if (!read_pid_cgroup(pid, &where)) return false;
  if (where != cgroup_rel_ && where.compare(0, cgroup_rel_.size() + 1, cgroup_rel_ + "/") != 0) {
    return false;
  }
  ProcessInfo info;
  bool have_stat = count_escape && read_process_stat(pid, &info);
  // Success here proves the process was alive all along, so the cgroup and
  // stat we read were its own.
  if (pidfd_signal(fd.get(), sig) != 0) return false;
  if (have_stat && (info.sid != proc_.pid || info.pgid != proc_.pid)) ++report_.escaped;
  if (sig != SIGCONT && sig != SIGKILL) pidfd_signal(fd.get(), SIGCONT);
  return true;
}

void Call::signal_members_and_thaw() {
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  for (pid_t pid : pids) {
    if (signal_member(pid, term_signal_, true)) ++report_.signaled;
  }
  cgroup_.write_file("cgroup.freeze", "0");
  phase_ = Phase::kGrace;
  refresh_events();
  if (!populated_) {
    ladder_done();
  } else {
    start_timer(grace_ms_);
  }
}

void Call::start_kill() {
  // Unfreeze in case a freeze timed out; SIGKILL reaches frozen tasks anyway.
  cgroup_.write_file("cgroup.freeze", "0");
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  report_.killed = static_cast<int>(pids.size());
  phase_ = Phase::kKilling;
  // cgroup.kill: SIGKILL to the whole subtree, safe against concurrent forks
  // and migrations (Linux 5.14).
  if (cgroup_.write_file("cgroup.kill", "1")) {
    for (pid_t pid : pids) signal_member(pid, SIGKILL, false);
  }
  refresh_events();
  if (!populated_) {
    ladder_done();
  } else {
    start_timer(kKillWaitMs);
  }
}

void Call::ladder_done() {
  phase_ = Phase::kDone;
  report_.duration_ms = static_cast<double>(now_ns() - ladder_start_ns_) / 1e6;
  report_ready_ = true;
}

void Call::ladder_gave_up() {
  // cgroup.kill did not empty the tree in time: report what is still there.
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  for (pid_t pid : pids) {
    ProcessInfo info;
    if (read_process_info(pid, &info)) report_.leftovers.push_back(info);
  }
  phase_ = Phase::kDone;
  report_.duration_ms = static_cast<double>(now_ns() - ladder_start_ns_) / 1e6;
  report_ready_ = true;
}

void Call::maybe_finish() {
  if (!exited_ || finished_) return;
  if (report_ready_ && !report_posted_) {
    report_posted_ = true;
    host_->post(CallEvent{CallEvent::kCleanup, id_, {}, report_, {}});
  }
  if (populated_) return;
  if (phase_ != Phase::kIdle && phase_ != Phase::kDone) return;
  stop_timer();
  host_->reactor().unwatch_cgroup(wd_);
  wd_ = -1;
  if (SysError e = cgroup_.remove()) host_->post(CallEvent{CallEvent::kError, id_, {}, {}, e});
  finished_ = true;
  host_->post(CallEvent{CallEvent::kEmpty, id_, {}, {}, {}});
}

int Call::signal_all(int sig) {
  if (finished_) return 0;
  if (sig == SIGKILL) {
    std::vector<pid_t> pids;
    cgroup_.read_procs(&pids);
    if (!cgroup_.write_file("cgroup.kill", "1")) return static_cast<int>(pids.size());
  }
  // Freeze so that no member forks between our read and our signal; re-read
  // until no new member appears (forks already in flight when we froze).
  bool froze = phase_ == Phase::kIdle && !cgroup_.write_file("cgroup.freeze", "1");
  std::vector<pid_t> done;
  for (int round = 0; round < 8; ++round) {
    std::vector<pid_t> pids;
    cgroup_.read_procs(&pids);
    bool fresh = false;
    for (pid_t pid : pids) {
      if (std::find(done.begin(), done.end(), pid) != done.end()) continue;
      fresh = true;
      done.push_back(pid);
      Fd fd = pidfd_open(pid);
      if (fd && pidfd_signal(fd.get(), sig) != 0) done.pop_back();
    }
    if (!fresh) break;
  }
  if (froze) cgroup_.write_file("cgroup.freeze", "0");
  return static_cast<int>(done.size());
}

std::vector<pid_t> Call::members() const {
  std::vector<pid_t> pids;
  if (!finished_) cgroup_.read_procs(&pids);
  return pids;
}

void Call::kill_now() {
  if (finished_) return;
  cgroup_.write_file("cgroup.kill", "1");
}

void Call::finish_sync() {
  if (finished_) return;
  if (!exited_ && proc_.pidfd) {
    ExitStatus st;
    pidfd_reap(proc_.pidfd.get(), &st);
    host_->reactor().unwatch_process(proc_.pidfd.get());
  }
  stop_timer();
  host_->reactor().unwatch_cgroup(wd_);
  wd_ = -1;
  cgroup_.remove();
  finished_ = true;
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
  switch (self->phase_) {
    case Phase::kFreezing:
    case Phase::kGrace:
      self->start_kill();
      break;
    case Phase::kKilling:
      self->ladder_gave_up();
      break;
    default:
      break;
  }
  self->maybe_finish();
  self->host_->wake();
}

void Call::dispose() {
  if (!exited_ && proc_.pidfd) host_->reactor().unwatch_process(proc_.pidfd.get());
  host_->reactor().unwatch_cgroup(wd_);
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

}  // namespace proctree
