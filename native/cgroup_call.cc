#include "cgroup_call.h"

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
// Without cgroup.kill: how often the SIGKILL round repeats until populated 0.
constexpr int kKillRoundMs = 20;

}  // namespace

CgroupCall::CgroupCall(CallHost* host, uint64_t id, CgroupDir cgroup, std::string cgroup_rel, SpawnResult proc)
    : Call(host, id, std::move(proc)), cgroup_(std::move(cgroup)), cgroup_rel_(std::move(cgroup_rel)) {
  // Measured on the call's own leaf, not guessed from a kernel version.
  has_kill_ = cgroup_.has_file("cgroup.kill");
  has_freeze_ = cgroup_.has_file("cgroup.freeze");
}

SysError CgroupCall::start() {
  ensure_timer();
  if (SysError e = host_->reactor().watch_cgroup(cgroup_.path() + "/cgroup.events", id_, &wd_)) return e;
  if (SysError e = host_->reactor().watch_process(proc_.pidfd.get(), id_)) return e;
  // The watch exists now, so any later change raises an event; read the state
  // once in case the command already finished.
  refresh_events();
  return SysError::none();
}

void CgroupCall::refresh_events() {
  CgroupEvents ev;
  if (cgroup_.valid() && !cgroup_.read_events(&ev)) {
    populated_ = ev.populated;
    frozen_ = ev.frozen;
  } else {
    populated_ = false;
  }
}

bool CgroupCall::populated_now() const {
  CgroupEvents ev;
  if (!cgroup_.valid() || cgroup_.read_events(&ev)) return false;
  return ev.populated;
}

void CgroupCall::handle_process_exit() {
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
  // The exit may be the tree's last: re-read cgroup.events now and let the
  // ladder move on, rather than wait for the kernel's next notification of
  // that file, which it rate-limits to one per 10 ms or so.
  handle_cgroup_events();
}

void CgroupCall::handle_cgroup_events() {
  refresh_events();
  switch (phase_) {
    case Phase::kFreezing:
      if (!populated_) {
        stop_timer();
        ladder_done();
      } else if (frozen_) {
        stop_timer();
        ladder_.report.froze = true;
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

bool CgroupCall::terminate(int grace_ms, int sig, const std::string& reason) {
  if (ladder_.started || finished_) return ladder_.started;
  ladder_.begin(reason, grace_ms, sig, now_ns());
  refresh_events();
  if (!populated_) {
    ladder_done();
    maybe_finish();
    return true;
  }
  if (ladder_.grace_ms == 0) {
    start_kill();
    maybe_finish();
    return true;
  }
  // Freeze first: a member that forks while we read cgroup.procs would be
  // missed, and a frozen member cannot fork or exit under us.
  if (!has_freeze_ || cgroup_.write_file("cgroup.freeze", "1")) {
    // No freezer: signal by snapshot and let signal_members_and_thaw's
    // re-reads catch members forked meanwhile.
    signal_members_and_thaw();
    maybe_finish();
    return true;
  }
  phase_ = Phase::kFreezing;
  refresh_events();
  if (frozen_) {
    ladder_.report.froze = true;
    signal_members_and_thaw();
  } else {
    start_timer(std::min(ladder_.grace_ms, kMaxFreezeWaitMs));
  }
  maybe_finish();
  return true;
}

bool CgroupCall::signal_member(pid_t pid, int sig, bool count_escape, Fd* keep) {
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
  if (have_stat && (info.sid != proc_.pid || info.pgid != proc_.pid)) ++ladder_.report.escaped;
  if (sig != SIGCONT && sig != SIGKILL) pidfd_signal(fd.get(), SIGCONT);
  if (keep) *keep = std::move(fd);
  return true;
}

void CgroupCall::signal_members_and_thaw() {
  // Frozen, one read is complete. Unfrozen (no freezer, or it timed out), a
  // member may fork while we read: re-read until no new member shows up.
  std::vector<pid_t> done;
  for (int round = 0; round < (frozen_ ? 1 : 16); ++round) {
    std::vector<pid_t> pids;
    cgroup_.read_procs(&pids);
    bool fresh = false;
    for (pid_t pid : pids) {
      if (std::find(done.begin(), done.end(), pid) != done.end()) continue;
      fresh = true;
      done.push_back(pid);
      Fd fd;
      if (!signal_member(pid, ladder_.term_signal, true, &fd)) continue;
      ++ladder_.report.signaled;
      // Watch (a bounded number of) the members we signalled: the last one's
      // exit ends the grace wait at once.
      if (member_fds_.size() < kMaxWatchedMembers && !host_->reactor().watch_member(fd.get(), id_)) {
        member_fds_.push_back(std::move(fd));
      }
    }
    if (!fresh) break;
  }
  if (has_freeze_) cgroup_.write_file("cgroup.freeze", "0");
  phase_ = Phase::kGrace;
  refresh_events();
  if (!populated_) {
    ladder_done();
  } else {
    start_timer(ladder_.grace_ms);
  }
}

void CgroupCall::start_kill() {
  // Unfreeze in case a freeze timed out; SIGKILL reaches frozen tasks anyway.
  if (has_freeze_) cgroup_.write_file("cgroup.freeze", "0");
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  ladder_.report.killed = static_cast<int>(pids.size());
  phase_ = Phase::kKilling;
  kill_rounds_ = 0;
  kill_round();
  refresh_events();
  if (!populated_) {
    ladder_done();
  } else {
    start_timer(has_kill_ ? kKillWaitMs : kKillRoundMs);
  }
}

void CgroupCall::kill_round() {
  ++kill_rounds_;
  // cgroup.kill: SIGKILL to the whole subtree, safe against concurrent forks
  // and migrations (Linux 5.14).
  if (has_kill_ && !cgroup_.write_file("cgroup.kill", "1")) return;
  // Before 5.14: freeze so that no member forks between our read of
  // cgroup.procs and its SIGKILL, kill each, thaw (SIGKILL lands on frozen
  // tasks, they die once thawed); repeated from the timer until populated 0.
  // Without cgroup.freeze a round is only a snapshot, hence the repetition.
  bool froze = has_freeze_ && !cgroup_.write_file("cgroup.freeze", "1");
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  for (pid_t pid : pids) signal_member(pid, SIGKILL, false);
  if (froze) cgroup_.write_file("cgroup.freeze", "0");
}

void CgroupCall::ladder_done() {
  member_fds_.clear();
  phase_ = Phase::kDone;
  ladder_.finish(now_ns());
}

void CgroupCall::ladder_gave_up() {
  // cgroup.kill did not empty the tree in time: report what is still there.
  std::vector<pid_t> pids;
  cgroup_.read_procs(&pids);
  for (pid_t pid : pids) {
    ProcessInfo info;
    if (read_process_info(pid, &info)) ladder_.report.leftovers.push_back(info);
  }
  member_fds_.clear();
  phase_ = Phase::kDone;
  ladder_.finish(now_ns());
}

void CgroupCall::maybe_finish() {
  if (!exited_ || finished_) return;
  post_report_once();
  if (populated_) return;
  if (phase_ != Phase::kIdle && phase_ != Phase::kDone) return;
  stop_timer();
  host_->reactor().unwatch_cgroup(wd_);
  wd_ = -1;
  if (SysError e = cgroup_.remove()) host_->post(CallEvent{CallEvent::kError, id_, {}, {}, e});
  finished_ = true;
  host_->post(CallEvent{CallEvent::kEmpty, id_, {}, {}, {}});
}

int CgroupCall::signal_all(int sig) {
  if (finished_) return 0;
  if (sig == SIGKILL && has_kill_) {
    std::vector<pid_t> pids;
    cgroup_.read_procs(&pids);
    if (!cgroup_.write_file("cgroup.kill", "1")) return static_cast<int>(pids.size());
  }
  // Freeze so that no member forks between our read and our signal; re-read
  // until no new member appears (forks already in flight when we froze).
  bool froze = has_freeze_ && phase_ == Phase::kIdle && !cgroup_.write_file("cgroup.freeze", "1");
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

std::vector<pid_t> CgroupCall::members() const {
  std::vector<pid_t> pids;
  if (!finished_) cgroup_.read_procs(&pids);
  return pids;
}

void CgroupCall::kill_now() {
  if (finished_) return;
  kill_round();
}

void CgroupCall::finish_sync() {
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

void CgroupCall::on_timeout() {
  switch (phase_) {
    case Phase::kFreezing:
    case Phase::kGrace:
      start_kill();
      break;
    case Phase::kKilling:
      if (!has_kill_ && kill_rounds_ * kKillRoundMs < kKillWaitMs) {
        kill_round();
        refresh_events();
        if (!populated_) {
          ladder_done();
        } else {
          start_timer(kKillRoundMs);
        }
      } else {
        ladder_gave_up();
      }
      break;
    default:
      break;
  }
  maybe_finish();
}

void CgroupCall::unwatch() {
  if (!exited_ && proc_.pidfd) host_->reactor().unwatch_process(proc_.pidfd.get());
  host_->reactor().unwatch_cgroup(wd_);
  wd_ = -1;
}

}  // namespace proctree
