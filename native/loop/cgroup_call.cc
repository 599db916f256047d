#include "loop/cgroup_call.h"

#include <signal.h>

#include <algorithm>
#include <unordered_set>

#include "loop/reactor.h"

namespace proctree {
namespace {

// How long a freeze may take before the ladder goes straight to cgroup.kill
// (a member in uninterruptible sleep can hold it up).
constexpr int kMaxFreezeWaitMs = 1000;

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
    freeze_deadline_ns_ = now_ns() + static_cast<uint64_t>(std::min(ladder_.grace_ms, kMaxFreezeWaitMs)) * 1000000ULL;
    freeze_recheck_ms_ = 1;
    start_timer(freeze_recheck_ms_);
  }
  maybe_finish();
  return true;
}

int CgroupCall::signal_listed(const std::vector<pid_t>& pids, int sig, bool graceful) {
  // Hold every listed process by pidfd first, then read cgroup.procs once
  // more: a number listed again while we hold its pidfd is that process
  // (a number is reused only after its holder is reaped, and a pidfd to a
  // reaped process signals nothing). One read proves membership for all,
  // instead of one /proc/<pid>/cgroup read each.
  std::vector<std::pair<pid_t, Fd>> held;
  held.reserve(pids.size());
  for (pid_t pid : pids) {
    Fd fd = pidfd_open(pid);
    if (fd) held.emplace_back(pid, std::move(fd));
  }
  std::vector<pid_t> listed;
  cgroup_.read_procs(&listed);
  std::sort(listed.begin(), listed.end());
  int n = 0;
  for (auto& [pid, fd] : held) {
    if (!std::binary_search(listed.begin(), listed.end(), pid)) continue;
    ProcessInfo info;
    bool have_stat = graceful && read_process_stat(pid, &info);
    if (pidfd_signal(fd.get(), sig) != 0) continue;  // gone meanwhile
    ++n;
    if (!graceful) continue;
    if (have_stat && (info.sid != proc_.pid || info.pgid != proc_.pid)) ++ladder_.report.escaped;
    // SIGCONT too: a stopped member must run to act on the graceful signal.
    if (sig != SIGCONT && sig != SIGKILL) pidfd_signal(fd.get(), SIGCONT);
    // Watch (a bounded number of) the members we signalled: the last one's
    // exit ends the grace wait at once.
    if (member_fds_.size() < kMaxWatchedMembers && !host_->reactor().watch_member(fd.get(), id_)) {
      member_fds_.push_back(std::move(fd));
    }
  }
  return n;
}

int CgroupCall::signal_rounds(int sig, bool graceful, int max_rounds) {
  // Each process once: re-read cgroup.procs until a read shows no one new
  // (members forked while we signalled, when the cgroup is not frozen).
  std::unordered_set<pid_t> done;
  int n = 0;
  for (int round = 0; round < max_rounds; ++round) {
    std::vector<pid_t> pids, fresh;
    cgroup_.read_procs(&pids);
    for (pid_t pid : pids) {
      if (done.insert(pid).second) fresh.push_back(pid);
    }
    if (fresh.empty()) break;
    n += signal_listed(fresh, sig, graceful);
  }
  return n;
}

void CgroupCall::signal_members_and_thaw() {
  // Frozen, one read is complete; unfrozen (no freezer, or it timed out), a
  // member may fork while we read.
  ladder_.report.signaled += signal_rounds(ladder_.term_signal, true, frozen_ ? 1 : 16);
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
  signal_listed(pids, SIGKILL, false);
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
  member_fds_.clear();
  phase_ = Phase::kDone;
  ladder_.give_up(pids, now_ns());
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
  int n = signal_rounds(sig, false, 8);
  if (froze) cgroup_.write_file("cgroup.freeze", "0");
  return n;
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
    case Phase::kFreezing: {
      // The kernel lets cgroup.events notify at most once per ~10 ms, and a
      // young call has just used that up with 'populated 1': re-read the
      // file at 1, 2, 4, 8 … ms (a handful of reads) besides waiting for the
      // notification, until the freeze bound runs out.
      refresh_events();
      uint64_t now = now_ns();
      if (!populated_) {
        ladder_done();
      } else if (frozen_) {
        ladder_.report.froze = true;
        signal_members_and_thaw();
      } else if (now < freeze_deadline_ns_) {
        freeze_recheck_ms_ *= 2;
        uint64_t left_ms = (freeze_deadline_ns_ - now) / 1000000ULL + 1;
        start_timer(static_cast<int>(std::min<uint64_t>(freeze_recheck_ms_, left_ms)));
      } else {
        start_kill();
      }
      break;
    }
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
