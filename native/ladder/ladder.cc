#include "ladder/ladder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "kernel/pidfd.h"

namespace proctree {

void Ladder::start(const std::string& reason, int grace_ms, int sig, pid_t main_pid) {
  if (phase_ != Phase::kIdle) return;
  start_ns_ = host_->now_ns();
  report_ = CleanupReport{};
  report_.reason = reason;
  report_.verified = c_->verified();
  grace_ms_ = std::max(grace_ms, 0);
  sig_ = sig;
  main_ = main_pid;
  if (c_->empty()) {
    finish();
    return;
  }
  // A tree a ladder ran on never serves another call, even one that died
  // of the graceful signal before anything was written to it: its leaf
  // goes with it, as the caller of terminate() expects.
  c_->retire();
  first_pass_ = true;
  if (grace_ms_ == 0) {
    start_kill();
    return;
  }
  if (c_->can_freeze()) {
    // Signal first, then freeze: one unfrozen round signals everyone it
    // reads; unless the tree dies of it (settle()), the freeze that follows
    // makes one more read complete (a member forked while that round went
    // on, even a fork in flight at its read, is there once the tree shows
    // frozen), so the members not yet signalled get it then. The freeze
    // comes after the signals, not before: most of a tree usually dies of
    // the graceful signal, and a freeze first stops every member (each one
    // woken to do so, then again for the thaw) only for it to die.
    verify_freeze_ = true;
    begin_pass(1, true);
    return;
  }
  graceful_pass();
}

void Ladder::wait_for_freeze() {
  phase_ = Phase::kFreezing;
  phase_start_ns_ = host_->now_ns();
  phase_limit_ms_ = std::min(grace_ms_, LadderLimits::kMaxFreezeWaitMs);
  // cgroup.events notifies at most once per ~10 ms, and a young call has
  // just used that up with 'populated 1': re-read at 1, 2, 4 … ms too (and
  // at the tail pace while the tree is dying: it shows frozen only once
  // the dying have gone, or empty).
  freeze_recheck_ms_ = 1;
  host_->arm_timer(freeze_recheck_ms_);
}

bool Ladder::escaped(pid_t pid) const {
  if (main_ <= 0) return false;
  // Left the main process's group or session: what kill(-pgid) would miss.
  return getsid(pid) != main_ || getpgid(pid) != main_;
}

int Ladder::ms_since(uint64_t t) const { return static_cast<int>((host_->now_ns() - t) / 1000000ULL); }

void Ladder::settle() {
  // After the signal-first round: while the members it signalled first are
  // exiting (the watched ones; then emptiness is polled at the tail pace,
  // as in the grace), the tree is left to die unfrozen; a tree that does not
  // start dying within kSettleMs, or is not empty after the tail polls, is
  // frozen for the complete read. Freezing a dying tree would cost a write
  // (and a thaw) that wakes every member, only to wait for the same exits.
  // Never longer than the grace: what the first read missed must still get
  // the signal and its grace before the kill.
  if (c_->empty()) {
    finish();
    return;
  }
  if (dying_ && tail_polls_ < LadderLimits::kMaxTailPolls && ms_since(phase_start_ns_) < grace_ms_) {
    wait(LadderLimits::kTailPollMs);
    return;
  }
  const int left = std::min(LadderLimits::kSettleMs, grace_ms_) - ms_since(phase_start_ns_);
  if (!dying_ && left > 0) {
    host_->arm_timer(left);
    return;
  }
  verify_freeze();
}

void Ladder::verify_freeze() {
  if (c_->can_freeze() && !c_->set_frozen(true)) {
    froze_ = true;
    if (!c_->frozen()) {
      wait_for_freeze();
      return;
    }
  }
  graceful_pass();
}

void Ladder::graceful_pass() {
  // Frozen, one read is complete; unfrozen (no freezer, or the freeze timed
  // out), re-read until a read shows no one new. Each member exactly once:
  // those the signal-first round reached are not signalled again.
  const bool frozen = froze_ && c_->frozen();
  begin_pass(frozen ? 1 : LadderLimits::kMaxPassRounds, false);
}

void Ladder::begin_pass(int rounds, bool fresh) {
  phase_ = Phase::kSignalling;
  pass_max_rounds_ = rounds;
  pass_rounds_ = 0;
  if (fresh) pass_done_.clear();
  pass_todo_.clear();
  pass_next_ = 0;
  continue_pass();
}

void Ladder::continue_pass() {
  if (pass_away_) return;  // on_pass_returned() goes on
  if (pass_rounds_ == 0 && !next_round()) {
    end_pass();
    return;
  }
  // A pass over more members than one slice runs on the host's thread,
  // where the tier's reads may (Confinement::share_reads): the system calls
  // for a tree of thousands take milliseconds, which in slices between the
  // harness's turns would stall its loop in each one, every slice stretched
  // by the exits it causes competing for the CPU. So do the passes of many
  // trees stopped together (LadderHost::pass_elsewhere).
  const bool first = std::exchange(first_pass_, false);
  const bool large = pass_todo_.size() - pass_next_ > LadderLimits::kPassSlice;
  if ((large || host_->pass_elsewhere()) && c_->share_reads()) {
    pass_away_ = true;
    // Not for the small trees of a shutdown: a few pidfds each, and the
    // group's signal only makes their exits come to the loop closer together.
    const int leader = first && large ? host_->group_leader_pidfd() : -1;
    if (leader >= 0) group_leader_ = Fd(fcntl(leader, F_DUPFD_CLOEXEC, 3));
    if (host_->run_elsewhere([this](std::vector<Fd>* late) { run_pass(nullptr, late); })) return;
    pass_away_ = false;
    group_leader_.reset();
  }
  if (run_pass(host_, nullptr)) end_pass();
}

bool Ladder::next_round() {
  if (pass_rounds_ >= pass_max_rounds_) return false;
  ++pass_rounds_;
  std::vector<pid_t> pids;
  if (SysError e = c_->members(&pids)) {
    if (!error_) error_ = e;
    return false;
  }
  most_members_ = std::max(most_members_, pids.size());
  pass_todo_.clear();
  pass_next_ = 0;
  for (pid_t pid : pids) {
    if (pass_done_.insert(pid).second) pass_todo_.push_back(pid);
  }
  return !pass_todo_.empty();
}

bool Ladder::run_pass(LadderHost* budget, std::vector<Fd>* late) {
  for (;;) {
    if (late) late->clear();
    // A first pass with the main's group to signal at once: the members
    // outside it go first, each through its pidfd, then the group (its
    // exits take the CPU from this thread for as long as they last).
    if (group_leader_ && !group_sorted_) sort_out_group();
    if (pass_next_ >= pass_todo_.size()) {
      if (group_leader_) {
        signal_group(budget);
        continue;
      }
      if (!next_round()) return true;
    }
    // In slices the budget grants; elsewhere, up to kPassHeld at once: held
    // and confirmed before the first of their signals, whose wake-ups then
    // compete with this thread for the CPU.
    const size_t left = pass_todo_.size() - pass_next_;
    const size_t n = budget ? budget->pass_budget(std::min(LadderLimits::kPassSlice, left))
                            : std::min(LadderLimits::kPassHeld, left);
    // No budget left in this turn: the host calls on_timer() in a later one.
    if (n == 0) return false;
    std::vector<pid_t> batch(pass_todo_.begin() + static_cast<long>(pass_next_),
                             pass_todo_.begin() + static_cast<long>(pass_next_ + n));
    pass_next_ += n;
    SysError e = for_each_confirmed(
        batch, [this](std::vector<Held>* held) { return c_->confirm(held); },
        [this, budget](Held& h) {
          bool out = escaped(h.pid);
          if (pidfd_signal(h.pidfd.get(), sig_) != 0) return;  // gone meanwhile, or not ours to signal
          ++report_.signaled;
          if (out) ++report_.escaped;
          // SIGCONT too: a stopped member must run to act on the signal.
          if (sig_ != SIGCONT && sig_ != SIGKILL) pidfd_signal(h.pidfd.get(), SIGCONT);
          if (watched_ < LadderLimits::kMaxWatchedMembers) {
            ++watched_;
            if (budget) {
              ++watched_live_;
              host_->watch_member(std::move(h.pidfd));
            } else {
              away_watch_.push_back(std::move(h.pidfd));
            }
          }
        },
        budget ? kHeldBatch : n, late);
    if (e && !error_) error_ = e;
  }
}

void Ladder::sort_out_group() {
  // Who is in the main's group now: held back for the group's signal, the
  // first few held by pidfd to watch for the tree's dying (a number read a
  // moment ago is still theirs). The rest stay for the per-member pass.
  group_sorted_ = true;
  size_t kept = pass_next_;
  for (size_t i = pass_next_; i < pass_todo_.size(); ++i) {
    const pid_t pid = pass_todo_[i];
    if (getpgid(pid) != main_) {
      pass_todo_[kept++] = pid;
      continue;
    }
    group_.push_back(pid);
    if (group_watch_.size() < LadderLimits::kMaxWatchedMembers) {
      if (Fd fd = pidfd_open(pid)) group_watch_.emplace_back(pid, std::move(fd));
    }
  }
  pass_todo_.resize(kept);
}

void Ladder::signal_group(LadderHost* budget) {
  // One system call signals every member of the main process's group, as
  // cgroup.kill kills them all: the stop of a 1000-process tree cost this
  // process 18-20 ms of CPU with a signal through each member's pidfd (an
  // open, two signals, a close each, and the exits they cause preempting
  // this thread), 7-8 ms this way. The group is the main's (the pidfd holds
  // its pid), and the main led a session of its own from before it ran
  // anything: everyone in it is the main's descendant. A member read in the
  // group before the signal, and in it (or gone: it died, and may be reaped
  // already) after, got it. The others go back to the per-member pass: so
  // a member that left the group in that moment may get the signal twice,
  // and one that joined it only with the kill.
  Fd leader = std::move(group_leader_);
  std::vector<pid_t> members = std::move(group_);
  std::vector<std::pair<pid_t, Fd>> watch = std::move(group_watch_);
  group_.clear();
  group_watch_.clear();
  if (pidfd_signal_group(leader.get(), sig_) != 0) {
    // Before 6.9 (EINVAL): each member on its own.
    pass_todo_.insert(pass_todo_.end(), members.begin(), members.end());
    return;
  }
  if (sig_ != SIGCONT && sig_ != SIGKILL) pidfd_signal_group(leader.get(), SIGCONT);
  // A harness that is not root: a member that runs as another user (what
  // sudo starts) refuses the group's signal without a word, where its own
  // pidfd's would say EPERM; kill(pid, 0) asks the same permission. It goes
  // to the per-member pass, which does not count it either.
  const bool may_refuse = geteuid() != 0;
  std::unordered_set<pid_t> left;
  for (pid_t pid : members) {
    const pid_t now = getpgid(pid);
    const bool gone = now < 0 && errno == ESRCH;
    const bool refused = may_refuse && !gone && kill(pid, 0) != 0 && errno == EPERM;
    if ((now == main_ || gone) && !refused) {
      ++report_.signaled;
    } else {
      left.insert(pid);
      pass_todo_.push_back(pid);
    }
  }
  for (auto& [pid, fd] : watch) {
    if (left.count(pid) != 0 || watched_ >= LadderLimits::kMaxWatchedMembers) continue;
    ++watched_;
    if (budget) {
      ++watched_live_;
      host_->watch_member(std::move(fd));
    } else {
      away_watch_.push_back(std::move(fd));
    }
  }
}

void Ladder::on_pass_returned() {
  if (!pass_away_) return;
  pass_away_ = false;
  if (phase_ == Phase::kCounting) {
    begin_kill();
    return;
  }
  // Handed over only now: watched_live_ is this thread's.
  watched_live_ += away_watch_.size();
  for (Fd& fd : away_watch_) host_->watch_member(std::move(fd));
  away_watch_.clear();
  end_pass();
}

void Ladder::end_pass() {
  pass_todo_.clear();
  if (verify_freeze_) {
    // The signal-first round is over. A tree that dies of the signal needs
    // no freeze: it is given a moment to (see settle()).
    verify_freeze_ = false;
    phase_ = Phase::kSettling;
    phase_start_ns_ = host_->now_ns();
    settle();
    return;
  }
  pass_done_.clear();
  if (froze_) {
    c_->set_frozen(false);
    froze_ = false;
  }
  if (c_->empty()) {
    finish();
    return;
  }
  phase_ = Phase::kGrace;
  phase_start_ns_ = host_->now_ns();
  phase_limit_ms_ = grace_ms_;
  wait(grace_ms_);
}

void Ladder::start_kill() {
  if (froze_) {
    c_->set_frozen(false);
    froze_ = false;
  }
  // Who is alive now is what the kill phase kills; counted like the
  // graceful pass counts, over confirmed members (a number read a moment
  // ago may be a process that has just exited, or someone else's by now).
  // Without a graceful pass (grace 0) the escapes are counted here. A tree
  // of more than a slice is counted on the host's thread, as its pass is.
  std::vector<pid_t> pids;
  if (SysError e = c_->members(&pids)) {
    if (!error_) error_ = e;
  }
  most_members_ = std::max(most_members_, pids.size());
  phase_ = Phase::kCounting;
  if (pids.size() > LadderLimits::kPassSlice && c_->share_reads()) {
    pass_away_ = true;
    if (host_->run_elsewhere([this, pids](std::vector<Fd>*) { count_alive(pids); })) return;
    pass_away_ = false;
  }
  count_alive(pids);
  begin_kill();
}

void Ladder::count_alive(const std::vector<pid_t>& pids) {
  SysError e = for_each_confirmed(
      pids, [this](std::vector<Held>* held) { return c_->confirm(held); },
      [this](Held& h) {
        bool out = grace_ms_ == 0 && escaped(h.pid);
        // Gone: neither killed nor escaped. EPERM is a member of another
        // user (a harness that is not root): alive, and the kill reaches it.
        const int err = pidfd_signal(h.pidfd.get(), 0);
        if (err != 0 && err != EPERM) return;
        ++report_.killed;
        if (out) ++report_.escaped;
      },
      LadderLimits::kPassHeld);
  if (e && !error_) error_ = e;
}

void Ladder::begin_kill() {
  phase_ = Phase::kKilling;
  phase_start_ns_ = host_->now_ns();
  phase_limit_ms_ = LadderLimits::kKillWaitMs;
  // Everyone is dying now: emptiness is near.
  dying_ = true;
  tail_polls_ = 0;
  kill_round();
}

void Ladder::kill_round() {
  one_shot_ = c_->kill_all() == Confinement::Kill::kOneShot;
  last_kill_ns_ = host_->now_ns();
  if (c_->empty()) {
    finish();
    return;
  }
  wait_kill();
}

// Until the next kill round (where the kernel has no one-shot kill) or the
// end of the kill phase.
void Ladder::wait_kill() {
  int left = std::max(phase_limit_ms_ - ms_since(phase_start_ns_), 1);
  wait(one_shot_ ? left : std::min(std::max(LadderLimits::kKillRoundMs - ms_since(last_kill_ns_), 1), left));
}

// Waits up to ms, in steps of the tier's poll interval when emptiness raises
// no event there, and of kTailPollMs while the tree is dying.
void Ladder::wait(int ms) {
  int step = ms;
  int poll = c_->poll_ms();
  if (poll > 0) step = std::min(step, poll);
  if (dying_ && tail_polls_ < LadderLimits::kMaxTailPolls) {
    ++tail_polls_;
    step = std::min(step, LadderLimits::kTailPollMs);
  }
  host_->arm_timer(std::max(step, 0));
}

void Ladder::on_members_exited(size_t n) {
  watched_live_ -= std::min(n, watched_live_);
  // The members signalled first are all gone: the others, signalled at the
  // same moment, are going too; look for the end more often than
  // cgroup.events would tell it (the kernel holds its notification back up
  // to 10 ms). Also when they went during the pass, as a tree that dies of
  // the graceful signal does while a pass over thousands goes on: the
  // grace's wait, when the pass ends, starts at the tail pace.
  if (watched_live_ > 0 || dying_) return;
  dying_ = true;
  tail_polls_ = 0;
  if (phase_ == Phase::kFreezing) {
    freeze_recheck_ms_ = LadderLimits::kTailPollMs;
    host_->arm_timer(freeze_recheck_ms_);
    return;
  }
  if (phase_ == Phase::kSettling) {
    settle();
    return;
  }
  if (phase_ != Phase::kGrace || c_->empty()) return;
  wait(phase_limit_ms_ - ms_since(phase_start_ns_));
}

void Ladder::on_change() {
  switch (phase_) {
    case Phase::kFreezing:
      if (c_->empty()) {
        host_->cancel_timer();
        if (froze_) c_->set_frozen(false);
        froze_ = false;
        finish();
      } else if (c_->frozen()) {
        host_->cancel_timer();
        graceful_pass();
      }
      break;
    case Phase::kSettling:
    case Phase::kGrace:
    case Phase::kKilling:
      if (c_->empty()) {
        host_->cancel_timer();
        finish();
      }
      break;
    default:
      break;
  }
}

void Ladder::on_timer() {
  switch (phase_) {
    case Phase::kFreezing: {
      if (c_->empty()) {
        if (froze_) c_->set_frozen(false);
        froze_ = false;
        finish();
      } else if (c_->frozen() || ms_since(phase_start_ns_) >= phase_limit_ms_) {
        graceful_pass();
      } else {
        freeze_recheck_ms_ = dying_ ? LadderLimits::kTailPollMs : freeze_recheck_ms_ * 2;
        host_->arm_timer(std::min(freeze_recheck_ms_, phase_limit_ms_ - ms_since(phase_start_ns_) + 1));
      }
      break;
    }
    case Phase::kSignalling:
      continue_pass();
      break;
    case Phase::kSettling:
      settle();
      break;
    case Phase::kGrace:
      if (c_->empty()) {
        finish();
      } else if (ms_since(phase_start_ns_) >= phase_limit_ms_) {
        start_kill();
      } else {
        wait(phase_limit_ms_ - ms_since(phase_start_ns_));
      }
      break;
    case Phase::kKilling:
      if (c_->empty()) {
        finish();
      } else if (ms_since(phase_start_ns_) >= phase_limit_ms_) {
        give_up();
      } else if (!one_shot_ && ms_since(last_kill_ns_) >= LadderLimits::kKillRoundMs) {
        kill_round();
      } else {
        wait_kill();
      }
      break;
    default:
      break;
  }
}

void Ladder::finish() {
  pass_done_.clear();
  pass_todo_.clear();
  phase_ = Phase::kDone;
  report_.duration_ms = static_cast<double>(host_->now_ns() - start_ns_) / 1e6;
  host_->ladder_finished();
}

void Ladder::give_up() {
  // The kill did not empty the tree in time: what is still there is the
  // report's leftovers, a failure (described by the report's reader).
  c_->members(&report_.leftovers);
  finish();
}

SysError Ladder::take_error() {
  SysError e = error_;
  error_ = SysError::none();
  return e;
}

}  // namespace proctree
