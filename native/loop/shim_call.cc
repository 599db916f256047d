#include "loop/shim_call.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>

#include "kernel/proc_scan.h"
#include "loop/reactor.h"
#include "helper/shim_protocol.h"

namespace proctree {
namespace {

// Bound on walks per signal_rounds call: a tree that forks faster than we
// walk still ends (the kill phase catches what this misses).
constexpr int kMaxRounds = 16;

}  // namespace

ShimCall::ShimCall(CallHost* host, uint64_t id, Tier tier, SpawnResult shim, Fd control, pid_t command)
    : Call(host, id, std::move(shim)), tier_(tier), control_(std::move(control)), command_(command) {}

SysError ShimCall::start() {
  ensure_timer();
  if (SysError e = host_->reactor().watch_control(control_.get(), id_)) return e;
  control_watched_ = true;
  if (SysError e = host_->reactor().watch_process(proc_.pidfd.get(), id_)) return e;
  return SysError::none();
}

void ShimCall::post_exit(ExitStatus st) {
  if (exit_posted_) return;
  exit_posted_ = true;
  host_->post(CallEvent{CallEvent::kExit, id_, st, {}, {}});
}

void ShimCall::drain_control() {
  if (!control_) return;
  for (;;) {
    shim::Message m{};
    ssize_t n = recv(control_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof m)) {
      if (m.kind == shim::kExit) {
        ExitStatus st;
        st.done = true;
        st.code = m.a;
        st.signal = m.b;
        post_exit(st);
      }
      continue;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // The shim closed its end (it is exiting): its pidfd says the rest.
      if (control_watched_) host_->reactor().unwatch_process(control_.get());
      control_watched_ = false;
    }
    return;
  }
}

void ShimCall::handle_control() {
  drain_control();
  maybe_finish();
}

void ShimCall::handle_process_exit() {
  if (shim_exited_) return;
  drain_control();
  ExitStatus st;
  if (SysError e = pidfd_reap(proc_.pidfd.get(), &st)) {
    st.done = true;
    host_->post(CallEvent{CallEvent::kError, id_, {}, {}, e});
  }
  if (!st.done) return;  // spurious readiness
  shim_exited_ = true;
  host_->reactor().unwatch_process(proc_.pidfd.get());
  // The command's exit was not reported: the init was killed (the kernel
  // killed the namespace with SIGKILL) or the shim died.
  ExitStatus killed;
  killed.done = true;
  killed.code = -1;
  killed.signal = SIGKILL;
  post_exit(killed);
  if (phase_ == Phase::kGrace || phase_ == Phase::kKilling) {
    stop_timer();
    ladder_done();
  }
  maybe_finish();
}

bool ShimCall::signal_member(pid_t pid, int sig, const std::unordered_set<pid_t>& tree, bool count_escape) {
  Fd fd = pidfd_open(pid);
  if (!fd) return false;
  // The number came from a walk of the tree; make sure the process the pidfd
  // holds is still in it (the number could have been reused meanwhile).
  ProcessInfo info;
  if (!read_process_stat(pid, &info)) return false;
  if (info.ppid != proc_.pid && tree.count(info.ppid) == 0) return false;
  if (pidfd_signal(fd.get(), sig) != 0) return false;
  if (count_escape && (info.sid != command_ || info.pgid != command_)) ++ladder_.report.escaped;
  if (sig != SIGCONT && sig != SIGKILL) pidfd_signal(fd.get(), SIGCONT);
  return true;
}

int ShimCall::signal_rounds(int sig, std::unordered_set<pid_t>* done, bool count_escape) {
  int n = 0;
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<pid_t> pids = live_descendants(proc_.pid);
    std::unordered_set<pid_t> tree(pids.begin(), pids.end());
    bool fresh = false;
    for (pid_t pid : pids) {
      if (!done->insert(pid).second) continue;
      fresh = true;
      if (signal_member(pid, sig, tree, count_escape)) ++n;
    }
    if (!fresh) break;
  }
  return n;
}

bool ShimCall::terminate(int grace_ms, int sig, const std::string& reason) {
  if (ladder_.started || finished_) return ladder_.started;
  ladder_.begin(reason, grace_ms, sig, now_ns());
  ladder_.report.verified = tier_ == Tier::kPidns ? "pidns" : "subreaper";
  if (shim_exited_) {
    ladder_done();
    maybe_finish();
    return true;
  }
  if (ladder_.grace_ms == 0) {
    start_kill();
  } else {
    std::unordered_set<pid_t> done;
    ladder_.report.signaled = signal_rounds(ladder_.term_signal, &done, true);
    phase_ = Phase::kGrace;
    start_timer(ladder_.grace_ms);
  }
  maybe_finish();
  return true;
}

void ShimCall::start_kill() {
  phase_ = Phase::kKilling;
  kill_start_ns_ = now_ns();
  ladder_.report.killed = static_cast<int>(live_descendants(proc_.pid).size());
  if (tier_ == Tier::kPidns) {
    // PID 1 gone: the kernel SIGKILLs every process of the namespace and
    // refuses new forks in it; the init's exit follows once all are gone.
    pidfd_signal(proc_.pidfd.get(), SIGKILL);
    start_timer(kKillWaitMs);
  } else {
    std::unordered_set<pid_t> done;
    signal_rounds(SIGKILL, &done, false);
    start_timer(kKillRoundMs);
  }
}

void ShimCall::on_timeout() {
  switch (phase_) {
    case Phase::kGrace:
      start_kill();
      break;
    case Phase::kKilling:
      if (tier_ == Tier::kSubreaper && (now_ns() - kill_start_ns_) / 1000000 < kKillWaitMs) {
        // A member forked between our walk and its SIGKILL: its child was
        // reparented to the shim and shows up in this walk.
        std::unordered_set<pid_t> done;
        signal_rounds(SIGKILL, &done, false);
        start_timer(kKillRoundMs);
      } else {
        ladder_gave_up();
      }
      break;
    default:
      break;
  }
  maybe_finish();
}

void ShimCall::ladder_done() {
  phase_ = Phase::kDone;
  ladder_.finish(now_ns());
}

void ShimCall::ladder_gave_up() {
  phase_ = Phase::kDone;
  ladder_.give_up(live_descendants(proc_.pid), now_ns());
}

void ShimCall::maybe_finish() {
  if (!exit_posted_ || finished_) return;
  post_report_once();
  if (!shim_exited_) return;
  if (phase_ != Phase::kIdle && phase_ != Phase::kDone) return;
  stop_timer();
  unwatch();
  finished_ = true;
  host_->post(CallEvent{CallEvent::kEmpty, id_, {}, {}, {}});
}

int ShimCall::signal_all(int sig) {
  if (finished_ || shim_exited_) return 0;
  if (sig == SIGKILL && tier_ == Tier::kPidns) {
    int n = static_cast<int>(live_descendants(proc_.pid).size());
    pidfd_signal(proc_.pidfd.get(), SIGKILL);
    return n;
  }
  std::unordered_set<pid_t> done;
  return signal_rounds(sig, &done, false);
}

std::vector<pid_t> ShimCall::members() const {
  if (finished_ || shim_exited_) return {};
  return live_descendants(proc_.pid);
}

void ShimCall::kill_now() {
  if (finished_ || shim_exited_) return;
  if (tier_ == Tier::kPidns) {
    pidfd_signal(proc_.pidfd.get(), SIGKILL);
    return;
  }
  std::unordered_set<pid_t> done;
  signal_rounds(SIGKILL, &done, false);
  // EOF on its control socket: the shim keeps killing until it is alone.
  unwatch();
  control_.reset();
}

void ShimCall::finish_sync() {
  if (finished_) return;
  if (!shim_exited_ && proc_.pidfd) {
    ExitStatus st;
    pidfd_reap(proc_.pidfd.get(), &st);
  }
  stop_timer();
  unwatch();
  control_.reset();
  finished_ = true;
}

bool ShimCall::populated_now() const {
  if (finished_ || shim_exited_ || !proc_.pidfd) return false;
  pollfd p{proc_.pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

void ShimCall::unwatch() {
  if (proc_.pidfd) host_->reactor().unwatch_process(proc_.pidfd.get());
  if (control_ && control_watched_) host_->reactor().unwatch_process(control_.get());
  control_watched_ = false;
}

}  // namespace proctree
