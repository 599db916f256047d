#include "loop/pgroup_call.h"

#include <signal.h>

#include <algorithm>

#include "kernel/proc_scan.h"
#include "loop/reactor.h"

namespace proctree {
namespace {

// No event says "the session is empty": /proc is re-scanned this often.
constexpr int kPollMs = 50;

}  // namespace

SysError PgroupCall::start() {
  ensure_timer();
  return host_->reactor().watch_process(proc_.pidfd.get(), id_);
}

std::vector<pid_t> PgroupCall::members() const {
  if (finished_) return {};
  return session_members(proc_.pid);
}

bool PgroupCall::populated_now() const { return !finished_ && (!exited_ || !members().empty()); }

void PgroupCall::handle_process_exit() {
  if (exited_) return;
  ExitStatus st;
  if (SysError e = pidfd_reap(proc_.pidfd.get(), &st)) {
    st.done = true;
    st.code = -1;
    host_->post(CallEvent{CallEvent::kError, id_, {}, {}, e});
  }
  if (!st.done) return;
  // Still the session's id while any member lives, so the number stays ours
  // (the kernel does not hand out a pid that is a live session or group id).
  exited_ = true;
  host_->reactor().unwatch_process(proc_.pidfd.get());
  exit_posted_ = true;
  host_->post(CallEvent{CallEvent::kExit, id_, st, {}, {}});
  maybe_finish();
}

int PgroupCall::signal_rounds(int sig, std::vector<pid_t>* done, bool count_escape) {
  int n = 0;
  for (int round = 0; round < 16; ++round) {
    bool fresh = false;
    for (pid_t pid : session_members(proc_.pid)) {
      if (std::find(done->begin(), done->end(), pid) != done->end()) continue;
      fresh = true;
      done->push_back(pid);
      Fd fd = pidfd_open(pid);
      ProcessInfo info;
      // Re-check after the pidfd pins the process: still one of ours?
      if (!fd || !read_process_stat(pid, &info)) continue;
      if (info.sid != proc_.pid && info.pgid != proc_.pid) continue;
      if (pidfd_signal(fd.get(), sig) != 0) continue;
      ++n;
      // In the session but another group: what killpg would have missed.
      if (count_escape && info.pgid != proc_.pid) ++ladder_.report.escaped;
      if (sig != SIGCONT && sig != SIGKILL) pidfd_signal(fd.get(), SIGCONT);
    }
    if (!fresh) break;
  }
  return n;
}

bool PgroupCall::terminate(int grace_ms, int sig, const std::string& reason) {
  if (ladder_.started || finished_) return ladder_.started;
  ladder_.begin(reason, grace_ms, sig, now_ns());
  // Nothing here can prove the tree is empty: escapees are invisible.
  ladder_.report.verified = "none";
  if (ladder_.grace_ms == 0) {
    start_kill();
  } else {
    std::vector<pid_t> done;
    ladder_.report.signaled = signal_rounds(ladder_.term_signal, &done, true);
    phase_ = Phase::kGrace;
    phase_end_ns_ = now_ns() + static_cast<uint64_t>(ladder_.grace_ms) * 1000000ULL;
    start_timer(std::min(ladder_.grace_ms, kPollMs));
  }
  maybe_finish();
  return true;
}

void PgroupCall::start_kill() {
  phase_ = Phase::kKilling;
  std::vector<pid_t> done;
  ladder_.report.killed = signal_rounds(SIGKILL, &done, false);
  phase_end_ns_ = now_ns() + static_cast<uint64_t>(kKillWaitMs) * 1000000ULL;
  start_timer(1);
}

void PgroupCall::on_timeout() {
  bool empty = exited_ && members().empty();
  uint64_t now = now_ns();
  switch (phase_) {
    case Phase::kGrace:
      if (empty) {
        ladder_done();
      } else if (now >= phase_end_ns_) {
        start_kill();
      } else {
        start_timer(static_cast<int>(std::min<uint64_t>(kPollMs, (phase_end_ns_ - now) / 1000000 + 1)));
      }
      break;
    case Phase::kKilling:
      if (empty) {
        ladder_done();
      } else if (now >= phase_end_ns_) {
        phase_ = Phase::kDone;
        ladder_.give_up(members(), now_ns());
      } else {
        std::vector<pid_t> done;
        signal_rounds(SIGKILL, &done, false);
        start_timer(kPollMs / 5);
      }
      break;
    default:
      break;
  }
  maybe_finish();
}

void PgroupCall::ladder_done() {
  phase_ = Phase::kDone;
  ladder_.finish(now_ns());
}

void PgroupCall::maybe_finish() {
  if (!exit_posted_ || finished_) return;
  post_report_once();
  if (phase_ == Phase::kGrace || phase_ == Phase::kKilling) return;
  if (!members().empty() && ladder_.report.leftovers.empty()) {
    // Members remain (leftovers: 'wait', or the ladder has not started yet):
    // look again later.
    if (timer_ && !uv_is_active(reinterpret_cast<uv_handle_t*>(timer_))) start_timer(kPollMs);
    return;
  }
  stop_timer();
  finished_ = true;
  host_->post(CallEvent{CallEvent::kEmpty, id_, {}, {}, {}});
}

int PgroupCall::signal_all(int sig) {
  if (finished_) return 0;
  std::vector<pid_t> done;
  return signal_rounds(sig, &done, false);
}

void PgroupCall::kill_now() {
  if (finished_) return;
  std::vector<pid_t> done;
  signal_rounds(SIGKILL, &done, false);
}

void PgroupCall::finish_sync() {
  if (finished_) return;
  if (!exited_ && proc_.pidfd) {
    ExitStatus st;
    pidfd_reap(proc_.pidfd.get(), &st);
  }
  stop_timer();
  unwatch();
  finished_ = true;
}

void PgroupCall::unwatch() {
  if (!exited_ && proc_.pidfd) host_->reactor().unwatch_process(proc_.pidfd.get());
}

}  // namespace proctree
