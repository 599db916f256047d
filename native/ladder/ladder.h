// The kill ladder, written once for every tier: the graceful signal once to
// each member read (+ SIGCONT) → unless the tree dies of it first, freeze
// (where the tier can) → one more read, complete once frozen, and the signal
// to those not signalled yet → thaw → wait up to `grace` → kill everything →
// verify empty → report. Without a freeze, the members are re-read in rounds
// until a read shows no one new. It drives a Confinement (confinement.h) and
// asks its host for the clock and one timer, so it runs the same on the
// event loop and in unit tests with a fake clock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"
#include "ladder/confinement.h"

namespace proctree {

// The ladder's time limits, in one place.
struct LadderLimits {
  // How long a freeze may take (bounded by grace too) before the ladder
  // signals unfrozen: a member in uninterruptible sleep can hold it up.
  static constexpr int kMaxFreezeWaitMs = 1000;
  // How long the kill phase may take before what is left is reported.
  static constexpr int kKillWaitMs = 5000;
  // Between SIGKILL rounds where the kernel has no one-shot kill.
  static constexpr int kKillRoundMs = 20;
  // Re-reads of the members in one unfrozen pass, until none is new.
  static constexpr int kMaxPassRounds = 16;
  // Member pidfds handed to the host to watch for an early end of grace:
  // the first few signalled show when the tree is dying (then emptiness is
  // polled, kTailPollMs); watching every member cost an epoll_ctl, an event
  // and a close each (a shutdown of 100 × 10 spent about a tenth of its
  // harness CPU on them).
  static constexpr size_t kMaxWatchedMembers = 8;
  // Members asked for at once (LadderHost::pass_budget): a pass over a tree
  // of thousands goes on in later turns of the owner's loop, so that no
  // single turn blocks it for long.
  static constexpr size_t kPassSlice = 128;
  // Members held at once by a pass that runs on the host's thread
  // (LadderHost::run_elsewhere): a tree of a thousand is held and confirmed
  // before its first signal.
  static constexpr size_t kPassHeld = 1024;
  // Once the tree is dying (the watched members have all exited, or the
  // kill was sent), emptiness is re-read this often, this many times:
  // cgroup.events notifies at most once per ~10 ms, so waiting for its event
  // alone would add up to that much to every stop of a tree larger than
  // the watched members.
  static constexpr int kTailPollMs = 1;
  static constexpr int kMaxTailPolls = 64;
  // After the signal-first round, how long a tree that shows no sign of
  // dying (none of the watched members exited) runs on before it is frozen
  // for the complete read.
  static constexpr int kSettleMs = 5;
};

struct CleanupReport {
  std::string reason;  // timeout | abort | terminate | leftovers | shutdown | idle
  int signaled = 0;    // members that got the graceful signal (exactly once each)
  int killed = 0;      // members still alive when grace ran out
  int escaped = 0;     // members outside the main process's group or session
  std::string verified;  // how emptiness was proved (Confinement::verified)
  // Alive after the whole ladder (a failure): their pids only. What /proc
  // says of them is read by whoever reports it, off the JavaScript thread:
  // a member that outlived SIGKILL may sit in the kernel (D state) holding
  // its mm, and a read of its cmdline would wait with it.
  std::vector<pid_t> leftovers;
  double duration_ms = 0;
};

class LadderHost {
 public:
  virtual ~LadderHost() = default;
  virtual uint64_t now_ns() = 0;
  // One timer: arming replaces the previous deadline.
  virtual void arm_timer(int ms) = 0;
  virtual void cancel_timer() = 0;
  // A member that got the graceful signal: its exit may be the tree's last,
  // so the host may watch the pidfd and call on_change() when it turns
  // readable. The host may also just drop it.
  virtual void watch_member(Fd pidfd) = 0;
  // The report is ready (done() is true).
  virtual void ladder_finished() = 0;
  // How many of `wanted` members the ladder may signal now: the owner may
  // share one budget per turn of its event loop among many ladders (a
  // supervisor's shutdown starts a hundred at once). When it grants none,
  // it calls the ladder's on_timer() in a later turn, with budget again.
  virtual size_t pass_budget(size_t wanted) { return wanted; }
  // Runs work (a pass over a large tree, its signals or the kill phase's
  // count: system calls on the tree only, nothing of the host's) on a
  // thread of the host's, off its event loop, and once it has run calls the
  // ladder's on_pass_returned() on the ladder's own thread. False: the host
  // cannot; the ladder runs the pass itself, in budgeted slices. work may
  // move descriptors into *late: the host closes them after
  // on_pass_returned() is on its way (the pidfds of the last members
  // signalled: nothing left to do after the last signal delays the ladder).
  using AwayWork = std::function<void(std::vector<Fd>* late)>;
  virtual bool run_elsewhere(AwayWork /*work*/) { return false; }
  // Even a pass over a small tree goes to run_elsewhere(): the host stops
  // many trees at once (a supervisor's shutdown), and their passes in
  // budgeted slices of its loop, one turn after another, would hold back
  // the last trees' signals behind the exits the first ones caused.
  virtual bool pass_elsewhere() { return false; }
  // A pidfd of the main process where it was made the leader of a session
  // of its own before it ran anything (so every process of its group is
  // its descendant, one of the tree's), else -1. A large tree's first pass
  // signals that group in one system call (Ladder::signal_group).
  virtual int group_leader_pidfd() const { return -1; }
};

class Ladder {
 public:
  Ladder(Confinement* confinement, LadderHost* host) : c_(confinement), host_(host) {}
  // The tree to work on, when it is known only after the ladder's owner was
  // made (the systemd tier learns its leaf from the broker). Before start().
  void bind(Confinement* confinement) { c_ = confinement; }

  // Starts the ladder; later calls do nothing. main_pid: the command's pid,
  // whose group and session define "escaped" (-1: unknown, none counted).
  void start(const std::string& reason, int grace_ms, int sig, pid_t main_pid);
  bool started() const { return phase_ != Phase::kIdle; }
  bool running() const { return started() && !done(); }
  bool done() const { return phase_ == Phase::kDone; }
  // Whether the ladder has the tree frozen right now.
  bool holds_freeze() const { return froze_; }
  const CleanupReport& report() const { return report_; }
  // The most members one of the ladder's reads saw.
  size_t most_members() const { return most_members_; }
  // A resource error seen during a pass (EMFILE: some members could not be
  // held, so they were not signalled); cleared by reading it.
  SysError take_error();

  // The confinement may have changed: its tree emptied, or froze.
  void on_change();
  // n of the members handed to watch_member() have exited (the host calls
  // on_change() too).
  void on_members_exited(size_t n);
  void on_timer();
  // The pass (or the kill phase's count) handed to
  // LadderHost::run_elsewhere() has run.
  void on_pass_returned();

 private:
  enum class Phase { kIdle, kFreezing, kSignalling, kSettling, kGrace, kCounting, kKilling, kDone };

  void wait_for_freeze();
  void settle();
  void verify_freeze();
  void graceful_pass();
  void begin_pass(int rounds, bool fresh);
  void continue_pass();
  // The pass's rounds (read, confirm, signal) until done: in slices of
  // budget's pass_budget(), false when it granted none; or, with no budget
  // (on the host's thread), in batches of kPassHeld, the pidfds to watch
  // kept in away_watch_ for on_pass_returned(), the last batch's others in
  // *late.
  bool run_pass(LadderHost* budget, std::vector<Fd>* late);
  // The next round's read into pass_todo_; false: no round left, or no one
  // new.
  bool next_round();
  void end_pass();
  void start_kill();
  // How many of pids are confirmed members alive now (report_.killed,
  // escapes too with grace 0): here, or on the host's thread.
  void count_alive(const std::vector<pid_t>& pids);
  void begin_kill();
  void kill_round();
  void wait_kill();
  void wait(int ms);
  void finish();
  void give_up();
  bool escaped(pid_t pid) const;
  // The first pass over a large tree: those the read finds outside the main
  // process's group are signalled each on its own (sort_out_group), then
  // the group at once (signal_group).
  void sort_out_group();
  void signal_group(LadderHost* budget);
  int ms_since(uint64_t t) const;

  Confinement* c_;
  LadderHost* host_;
  Phase phase_ = Phase::kIdle;
  CleanupReport report_;
  SysError error_;
  int grace_ms_ = 0;
  int sig_ = 15;
  pid_t main_ = -1;
  uint64_t start_ns_ = 0;
  uint64_t phase_start_ns_ = 0;
  int phase_limit_ms_ = 0;  // how long the current phase may last
  int freeze_recheck_ms_ = 1;
  bool froze_ = false;
  bool verify_freeze_ = false;  // the signal-first round runs; the freeze follows
  size_t watched_ = 0;
  size_t watched_live_ = 0;  // watched members not yet seen exit
  bool dying_ = false;       // the tree is expected empty soon: tail polls
  int tail_polls_ = 0;
  bool one_shot_ = true;     // the last kill was the kernel's, whole tree
  uint64_t last_kill_ns_ = 0;
  size_t most_members_ = 0;
  // The graceful pass in progress: every member exactly once, re-read in
  // rounds until a read shows no one new (one round when frozen; the
  // signal-first round's members stay done through the frozen one).
  std::unordered_set<pid_t> pass_done_;
  std::vector<pid_t> pass_todo_;
  size_t pass_next_ = 0;
  int pass_rounds_ = 0;
  int pass_max_rounds_ = 1;
  // A pass (or the kill phase's count) runs on the host's thread
  // (run_elsewhere): until it returns, the pass's state above, report_'s
  // counts, error_, most_members_ and watched_ are that thread's; this
  // thread touches none of them.
  bool pass_away_ = false;
  std::vector<Fd> away_watch_;
  // The ladder's first pass has not begun; group_leader_ is the host's
  // group_leader_pidfd() (a duplicate) for a first pass that runs elsewhere.
  bool first_pass_ = false;
  Fd group_leader_;
  bool group_sorted_ = false;
  std::vector<pid_t> group_;                        // read in the group, for its signal
  std::vector<std::pair<pid_t, Fd>> group_watch_;  // the first few of them, held
};

}  // namespace proctree
