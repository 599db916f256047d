// ladder.cc: the kill ladder's policy, driven through a fake Confinement over
// real processes (a tree this test forks: no cgroup, no root) and a fake
// LadderHost whose clock and timer the test moves by hand. Every count in a
// report is checked against what the processes saw: each member records every
// delivery of the graceful signal (a real-time signal, which the kernel
// queues rather than merges, so "exactly once" can be counted), and death is
// read from pidfds.
#include "ladder/ladder.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "kernel/pidfd.h"
#include "kernel/procfs.h"

using proctree::CleanupReport;
using proctree::Confinement;
using proctree::Fd;
using proctree::Held;
using proctree::Ladder;
using proctree::LadderLimits;
using proctree::SysError;

namespace {

// The graceful signal in the counting tests: real-time signals queue, so
// two deliveries are two handler runs.
int graceful() { return SIGRTMIN + 4; }

// Where a member lives relative to the tree's main process (which leads its
// own session and group) and what it does with a signal.
enum Place : char { kInside = 'i', kOwnSession = 's', kOwnGroup = 'g' };
enum Act : char {
  kExitOnSignal = 'x',    // records the graceful signal, exits
  kStayOnSignal = 'k',    // records it, keeps running
  kIgnoreSigterm = 't',   // as kStayOnSignal, and SIGTERM is SIG_IGN
};

namespace member {
int log_fd = -1;
bool exit_on_signal = false;

void on_signal(int) {
  pid_t me = getpid();
  ssize_t r = write(log_fd, &me, sizeof me);
  (void)r;
  if (exit_on_signal) _exit(0);
}

void become(char place, char act, int log) {
  if (place == kOwnSession) setsid();
  if (place == kOwnGroup) setpgid(0, 0);
  log_fd = log;
  exit_on_signal = act == kExitOnSignal;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(graceful(), &sa, nullptr);
  signal(SIGTERM, act == kIgnoreSigterm ? SIG_IGN : SIG_DFL);
}
}  // namespace member

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) > 0;
}

bool dead(int pidfd) { return readable(pidfd, 0); }

// A process tree: a main process leading its own session, and members it
// forks on request (so those "inside" share its session and group). Members
// are reaped by main as they die (SIGCHLD ignored), so a dead member's
// number names nothing. Everything is killed through pidfds when the Tree goes.
class Tree {
 public:
  Tree() = default;
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;
  ~Tree() { destroy(); }

  bool start(char act) {
    int cmd[2], reply[2], log[2];
    if (pipe2(cmd, O_CLOEXEC) || pipe2(reply, O_CLOEXEC) || pipe2(log, O_CLOEXEC)) return false;
    pid_t m = fork();
    if (m == 0) {
      close(cmd[1]);
      close(reply[0]);
      close(log[0]);
      setsid();
      signal(SIGCHLD, SIG_IGN);
      member::become(kInside, act, log[1]);
      report(reply[1]);
      for (;;) {
        char c[2];
        ssize_t n = read(cmd[0], c, 2);
        if (n < 0 && errno == EINTR) continue;
        if (n != 2) break;
        if (fork() == 0) {
          member::become(c[0], c[1], log[1]);
          report(reply[1]);
          for (;;) pause();
        }
      }
      for (;;) pause();
    }
    close(cmd[0]);
    close(reply[1]);
    close(log[1]);
    cmd_.reset(cmd[1]);
    reply_.reset(reply[0]);
    log_.reset(log[0]);
    fcntl(log_.get(), F_SETFL, O_NONBLOCK);
    if (m < 0) return false;
    main_ = first_ = m;
    pid_t reported = read_reply();
    return reported == m && keep(m);
  }

  // A new member forked by main; -1 on failure.
  pid_t add(char place, char act) {
    char c[2] = {place, act};
    if (write(cmd_.get(), c, 2) != 2) return -1;
    pid_t pid = read_reply();
    if (pid <= 0 || !keep(pid)) return -1;
    return pid;
  }

  pid_t main_pid() const { return first_; }

  // How many graceful signals each process recorded: waits until `expect`
  // deliveries in total (at most 3 s), then a moment more for any extra.
  std::map<pid_t, int> received(int expect) {
    for (int waited = 0; waited < 3000 && total_ < expect; waited += 5) {
      drain();
      if (total_ < expect) usleep(5000);
    }
    usleep(50 * 1000);
    drain();
    return counts_;
  }

  bool alive(pid_t pid) const {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] == pid) return !dead(pidfds_[i].get());
    }
    return false;
  }

  // Waits (at most 3 s) until pid has exited.
  bool wait_dead(pid_t pid) const {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] == pid) return readable(pidfds_[i].get(), 3000);
    }
    return false;
  }

  // SIGKILLs pid and waits until its number names no process (main reaps a
  // member at once, we reap main; pidfd_send_signal through our own pidfd
  // says ESRCH then).
  bool kill_and_reap(pid_t pid) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] != pid) continue;
      proctree::pidfd_signal(pidfds_[i].get(), SIGKILL);
      if (pid == main_) {
        waitpid(main_, nullptr, 0);
        main_ = -1;
      }
      for (int waited = 0; waited < 3000; ++waited) {
        if (proctree::pidfd_signal(pidfds_[i].get(), 0) == ESRCH) return true;
        usleep(1000);
      }
    }
    return false;
  }

  void destroy() {
    for (Fd& fd : pidfds_) proctree::pidfd_signal(fd.get(), SIGKILL);
    for (Fd& fd : pidfds_) readable(fd.get(), 3000);
    if (main_ > 0) waitpid(main_, nullptr, 0);
    // Members orphaned by main's death came to us (a subreaper): reap them.
    for (int i = 0; i < 1000 && waitpid(-1, nullptr, WNOHANG) > 0; ++i) {
    }
    pidfds_.clear();
    pids_.clear();
    main_ = -1;
  }

 private:
  static void report(int fd) {
    pid_t me = getpid();
    if (write(fd, &me, sizeof me) != sizeof me) _exit(1);
  }

  pid_t read_reply() {
    if (!readable(reply_.get(), 5000)) return -1;
    pid_t pid = -1;
    if (read(reply_.get(), &pid, sizeof pid) != sizeof pid) return -1;
    return pid;
  }

  bool keep(pid_t pid) {
    Fd fd = proctree::pidfd_open(pid);
    if (!fd) return false;
    pids_.push_back(pid);
    pidfds_.push_back(std::move(fd));
    return true;
  }

  void drain() {
    pid_t buf[64];
    ssize_t n;
    while ((n = read(log_.get(), buf, sizeof buf)) > 0) {
      for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(pid_t); ++i) {
        ++counts_[buf[i]];
        ++total_;
      }
    }
  }

  Fd cmd_, reply_, log_;
  pid_t main_ = -1;   // our child until we reap it
  pid_t first_ = -1;  // the main process's pid, for the ladder
  std::vector<pid_t> pids_;
  std::vector<Fd> pidfds_;
  std::map<pid_t, int> counts_;
  int total_ = 0;
};

// The host: a clock that moves only when the test says, one timer that
// fires only when the test fires it.
class FakeHost : public proctree::LadderHost {
 public:
  uint64_t now = 1000000000ULL;  // ns
  int armed = -1;                // ms, -1: no timer
  std::vector<int> arms;
  int cancels = 0;
  int finished = 0;
  std::vector<Fd> watched;

  uint64_t now_ns() override { return now; }
  void arm_timer(int ms) override {
    armed = ms;
    arms.push_back(ms);
  }
  void cancel_timer() override {
    armed = -1;
    ++cancels;
  }
  void watch_member(Fd pidfd) override { watched.push_back(std::move(pidfd)); }
  void ladder_finished() override { ++finished; }
  // Members a turn may signal (the test gives the next turn: on_timer()).
  size_t budget_per_turn = SIZE_MAX;
  bool budget_spent = false;
  size_t pass_budget(size_t wanted) override {
    if (budget_per_turn == SIZE_MAX) return wanted;
    if (budget_spent) {
      budget_spent = false;
      return 0;
    }
    budget_spent = true;
    return std::min(wanted, budget_per_turn);
  }

  // Passes offered elsewhere (run_elsewhere) are kept for the test to run.
  bool elsewhere = false;
  std::vector<AwayWork> away;
  // Runs the n-th on a thread of its own, then closes what it left late.
  void run_away(size_t n) {
    std::vector<Fd> late;
    std::thread(away[n], &late).join();
  }
  bool run_elsewhere(AwayWork work) override {
    if (!elsewhere) return false;
    away.push_back(std::move(work));
    return true;
  }

  void advance(int ms) { now += static_cast<uint64_t>(ms) * 1000000ULL; }
  int elapsed_ms(uint64_t since) const { return static_cast<int>((now - since) / 1000000ULL); }

  // Moves the clock to the armed deadline and fires the timer.
  bool fire(Ladder* ladder) {
    if (armed < 0) return false;
    advance(armed);
    armed = -1;
    ladder->on_timer();
    return true;
  }
  // Fires until the ladder is done (at most max times); how many fired.
  int fire_until_done(Ladder* ladder, int max) {
    int n = 0;
    while (!ladder->done() && n < max && fire(ladder)) ++n;
    return n;
  }
};

// The tree as this fake sees it: a list of processes, each held by a pidfd,
// a member while it runs. Knobs let a test add a member between two reads,
// move one out during the confirmation, freeze slowly or never, and kill
// nothing.
class FakeConfinement : public Confinement {
 public:
  explicit FakeConfinement(FakeHost* host) : host_(host) {}

  proctree::Tier tier() const override { return proctree::Tier::kPgroup; }
  const char* verified() const override { return "fake"; }

  SysError members(std::vector<pid_t>* out) const override {
    ++reads;
    out->clear();
    if (fail_read == reads) return SysError::of(EIO, "read", "fake");
    for (const Entry& e : list) {
      if (!dead(e.pidfd.get())) out->push_back(e.pid);
    }
    if (after_read) after_read(reads);
    return SysError::none();
  }

  SysError confirm(std::vector<Held>* held) const override {
    ++confirms;
    if (before_confirm) before_confirm(held);
    // A held pid is a member if it is listed and running now.
    held->erase(std::remove_if(held->begin(), held->end(), [this](const Held& h) { return !listed(h.pid); }),
                held->end());
    if (after_confirm) after_confirm(held);
    return SysError::none();
  }

  bool empty() const override {
    for (const Entry& e : list) {
      if (!dead(e.pidfd.get())) return false;
    }
    return true;
  }
  int poll_ms() const override { return poll; }
  bool share_reads() const override { return shares; }

  bool can_freeze() const override { return freezable; }
  SysError set_frozen(bool f, bool /*now*/ = false) override {
    freeze_calls.push_back(f);
    freeze_requested = f;
    if (f) freeze_requested_at = host_->now;
    return SysError::none();
  }
  bool frozen() const override {
    if (!freeze_requested) return false;
    if (frozen_now) return true;
    return freeze_delay_ms >= 0 && host_->elapsed_ms(freeze_requested_at) >= freeze_delay_ms;
  }

  Kill kill_all() override {
    ++kill_calls;
    if (!kill_works) return kill_mode;
    // The default: SIGKILL every confirmed member by pidfd. Then wait for
    // the deaths, so that empty() right after is the kernel's answer.
    Kill how = Confinement::kill_all();
    for (const Entry& e : list) {
      if (listed(e.pid)) readable(e.pidfd.get(), 3000);
    }
    return how;
  }

  void add(pid_t pid) { list.push_back(Entry{pid, proctree::pidfd_open(pid)}); }
  void remove(pid_t pid) {
    list.erase(std::remove_if(list.begin(), list.end(), [pid](const Entry& e) { return e.pid == pid; }), list.end());
  }
  bool listed(pid_t pid) const {
    for (const Entry& e : list) {
      if (e.pid == pid) return !dead(e.pidfd.get());
    }
    return false;
  }

  struct Entry {
    pid_t pid;
    Fd pidfd;
  };
  std::vector<Entry> list;
  std::function<void(int)> after_read;  // after the n-th members() (1-based)
  std::function<void(std::vector<Held>*)> before_confirm;  // may change who is listed
  std::function<void(std::vector<Held>*)> after_confirm;   // what was confirmed may exit now
  int fail_read = 0;                    // the n-th members() fails (EIO)
  int poll = 0;
  bool shares = false;                  // share_reads()
  bool freezable = false;
  int freeze_delay_ms = 0;              // -1: never completes
  bool frozen_now = false;
  bool kill_works = true;
  Kill kill_mode = Kill::kRound;
  mutable int reads = 0;
  mutable int confirms = 0;
  std::vector<bool> freeze_calls;
  bool freeze_requested = false;
  uint64_t freeze_requested_at = 0;
  int kill_calls = 0;

 private:
  FakeHost* host_;
};

// A tree of main + members at the given places, all listed by the fake.
struct Setup {
  Tree tree;
  FakeHost host;
  FakeConfinement fake{&host};
  Ladder ladder{&fake, &host};
  std::vector<pid_t> pids;  // main first

  bool make(char main_act, const std::vector<std::pair<char, char>>& members) {
    if (!tree.start(main_act)) return false;
    pids.push_back(tree.main_pid());
    for (const auto& m : members) {
      pid_t p = tree.add(m.first, m.second);
      if (p <= 0) return false;
      pids.push_back(p);
    }
    for (pid_t p : pids) fake.add(p);
    return true;
  }

  // More members than one pass slice, all staying on the graceful signal,
  // with a host that runs passes elsewhere and a tier that shares its reads.
  bool make_large() {
    const size_t n = LadderLimits::kPassSlice + 40;
    if (!make(kStayOnSignal, std::vector<std::pair<char, char>>(n, {kInside, kStayOnSignal}))) return false;
    host.elsewhere = true;
    fake.shares = true;
    return true;
  }

  bool all_dead() const {
    for (pid_t p : pids) {
      if (tree.alive(p)) return false;
    }
    return true;
  }
  bool all_alive() const {
    for (pid_t p : pids) {
      if (!tree.alive(p)) return false;
    }
    return true;
  }
};

// Whether the process is stopped (state T in /proc/<pid>/stat).
bool wait_stopped(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    proctree::ProcessInfo info;
    if (proctree::read_process_stat(pid, &info) && info.state == 'T') return true;
    usleep(10 * 1000);
  }
  return false;
}

}  // namespace

TEST(empty_tree_finishes_at_once) {
  FakeHost host;
  FakeConfinement fake(&host);
  Ladder ladder(&fake, &host);
  ladder.start("terminate", 5000, SIGTERM, -1);
  CHECK(ladder.done());
  CHECK_EQ(host.finished, 1);
  CHECK_EQ(host.armed, -1);
  CHECK_EQ(ladder.report().reason, std::string("terminate"));
  CHECK_EQ(ladder.report().verified, std::string("fake"));
  CHECK_EQ(ladder.report().signaled, 0);
  CHECK_EQ(ladder.report().killed, 0);
  // Started once: a second start and a late timer change nothing.
  ladder.start("abort", 0, SIGKILL, -1);
  ladder.on_timer();
  ladder.on_change();
  CHECK_EQ(host.finished, 1);
  CHECK_EQ(ladder.report().reason, std::string("terminate"));
}

// grace > 0, members that exit on the signal: each gets it exactly once
// (a stopped one too: SIGCONT follows), the exits end the grace early, and
// no one is killed.
TEST(graceful_signal_once_each_then_empty) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kExitOnSignal},
                               {kInside, kExitOnSignal},
                               {kOwnSession, kExitOnSignal},
                               {kOwnGroup, kExitOnSignal},
                               {kInside, kExitOnSignal}}));
  pid_t stopped = s.pids.back();
  kill(stopped, SIGSTOP);
  CHECK(wait_stopped(stopped));
  s.ladder.start("terminate", 5000, graceful(), s.tree.main_pid());
  const bool done_at_once = s.ladder.done();
  const CleanupReport& r = s.ladder.report();
  CHECK_EQ(r.signaled, 6);
  CHECK_EQ(r.escaped, 2);
  // Not frozen: the pass re-read the members until a read showed no one new.
  CHECK_EQ(s.fake.reads, 2);
  CHECK_EQ(s.host.watched.size(), size_t{6});
  // The host is told when a watched member ends; the last one ends the grace.
  for (int i = 0; i < 300 && !s.ladder.done(); ++i) {
    for (Fd& fd : s.host.watched) readable(fd.get(), 10);
    s.ladder.on_change();
  }
  CHECK(s.ladder.done());
  CHECK_EQ(s.host.finished, 1);
  CHECK(done_at_once || s.host.cancels >= 1);
  CHECK_EQ(r.killed, 0);
  CHECK(r.leftovers.empty());
  CHECK_EQ(s.fake.kill_calls, 0);
  CHECK(s.all_dead());
  std::map<pid_t, int> got = s.tree.received(6);
  for (pid_t p : s.pids) CHECK_EQ(got[p], 1);
}

// grace 0: no graceful signal at all, everything killed at once.
TEST(grace_zero_kills_without_a_graceful_signal) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal},
                               {kOwnSession, kStayOnSignal},
                               {kOwnGroup, kStayOnSignal},
                               {kInside, kStayOnSignal}}));
  s.ladder.start("abort", 0, graceful(), s.tree.main_pid());
  const CleanupReport& r = s.ladder.report();
  CHECK(s.ladder.done());
  CHECK_EQ(s.host.finished, 1);
  CHECK_EQ(r.signaled, 0);
  CHECK_EQ(r.killed, 5);
  CHECK_EQ(r.escaped, 2);
  CHECK(r.leftovers.empty());
  CHECK(s.all_dead());
  CHECK(s.host.watched.empty());
  CHECK(s.tree.received(0).empty());
}

// Members that ignore SIGTERM are still running when the grace ends, and are
// killed then; a timer that fires early only waits the rest.
TEST(grace_expiry_kills_what_ignored_the_signal) {
  Setup s;
  CHECK(s.make(kIgnoreSigterm, {{kInside, kIgnoreSigterm},
                                {kOwnSession, kIgnoreSigterm},
                                {kInside, kExitOnSignal}}));
  // The last one exits on the real-time signal only: give it SIGTERM's
  // default (exit) by not ignoring it. It dies of SIGTERM in the pass.
  pid_t quitter = s.pids.back();
  s.ladder.start("timeout", 3000, SIGTERM, s.tree.main_pid());
  CHECK(!s.ladder.done());
  CHECK_EQ(s.ladder.report().signaled, 4);
  CHECK_EQ(s.ladder.report().escaped, 1);
  CHECK_EQ(s.host.armed, 3000);
  CHECK(s.tree.wait_dead(quitter));
  // An early timer: a third of the grace has passed; the ladder waits the rest.
  s.host.advance(1000);
  s.host.armed = -1;
  s.ladder.on_timer();
  CHECK(!s.ladder.done());
  CHECK_EQ(s.host.armed, 2000);
  CHECK_EQ(s.fake.kill_calls, 0);
  for (size_t i = 0; i + 1 < s.pids.size(); ++i) CHECK(s.tree.alive(s.pids[i]));
  // The grace runs out: what is still running is killed and counted.
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.fake.kill_calls, 1);
  CHECK_EQ(s.ladder.report().killed, 3);
  CHECK_EQ(s.ladder.report().signaled, 4);
  CHECK(s.ladder.report().leftovers.empty());
  CHECK(s.all_dead());
  CHECK_EQ(s.host.finished, 1);
}

// A member that appears between two reads of the unfrozen pass gets the
// signal, exactly once; one that appears after the pass is not signalled
// gracefully but is killed when the grace ends.
TEST(members_appearing_during_the_ladder) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kInside, kStayOnSignal}}));
  pid_t during = -1, after = -1;
  s.fake.after_read = [&](int n) {
    if (n == 1) {
      during = s.tree.add(kInside, kStayOnSignal);
      s.fake.add(during);
    }
    if (n == 3) {
      after = s.tree.add(kInside, kStayOnSignal);
      s.fake.add(after);
    }
  };
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK(during > 0);
  CHECK(after > 0);
  // Read 1: three; read 2: the newcomer; read 3: no one new, the pass ends.
  CHECK_EQ(s.fake.reads, 3);
  CHECK_EQ(s.ladder.report().signaled, 4);
  std::map<pid_t, int> got = s.tree.received(4);
  CHECK_EQ(got[s.pids[0]], 1);
  CHECK_EQ(got[s.pids[1]], 1);
  CHECK_EQ(got[s.pids[2]], 1);
  CHECK_EQ(got[during], 1);
  CHECK_EQ(got[after], 0);
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.ladder.report().killed, 5);
  CHECK(s.all_dead());
  CHECK(!s.tree.alive(during));
  CHECK(!s.tree.alive(after));
  std::map<pid_t, int> after_kill = s.tree.received(4);
  CHECK_EQ(after_kill[during], 1);
}

// Members that cannot be signalled are not counted: one that exits (and is
// reaped) between the read and its pidfd_open, one that exits while its
// pidfd is held (the signal finds ESRCH), and one the confirmation drops
// (it left the tree). None of these is an error.
TEST(unsignallable_members_are_not_counted) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal},
                               {kInside, kStayOnSignal},
                               {kInside, kStayOnSignal},
                               {kInside, kStayOnSignal}}));
  pid_t gone_before_open = s.pids[2], gone_while_held = s.pids[3], moved_out = s.pids[4];
  bool reaped_first = false, reaped_second = false;
  s.fake.after_read = [&](int n) {
    if (n == 1) reaped_first = s.tree.kill_and_reap(gone_before_open);
  };
  s.fake.before_confirm = [&](std::vector<Held>*) {
    if (s.fake.confirms == 1) s.fake.remove(moved_out);
  };
  s.fake.after_confirm = [&](std::vector<Held>* held) {
    if (s.fake.confirms != 1) return;
    bool holds = false;
    for (const Held& h : *held) holds = holds || h.pid == gone_while_held;
    // Confirmed, then it exits (and is reaped) before the signal.
    if (holds) reaped_second = s.tree.kill_and_reap(gone_while_held);
  };
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK(reaped_first);
  CHECK(reaped_second);
  CHECK_EQ(s.ladder.report().signaled, 2);
  CHECK_EQ(s.ladder.take_error().err, 0);
  std::map<pid_t, int> got = s.tree.received(2);
  CHECK_EQ(got[s.pids[0]], 1);
  CHECK_EQ(got[s.pids[1]], 1);
  CHECK_EQ(got[gone_before_open], 0);
  CHECK_EQ(got[gone_while_held], 0);
  CHECK_EQ(got[moved_out], 0);
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.ladder.report().killed, 2);
  // Not the tree's any more: not killed either.
  CHECK(s.tree.alive(moved_out));
  CHECK(!s.tree.alive(s.pids[0]));
  CHECK(!s.tree.alive(s.pids[1]));
}

// A read of the members that fails is kept for take_error(), once; the
// ladder goes on (the kill phase reads again).
TEST(read_error_is_reported_once_and_the_ladder_goes_on) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}}));
  s.fake.fail_read = 1;
  s.ladder.start("terminate", 500, graceful(), s.tree.main_pid());
  SysError e = s.ladder.take_error();
  CHECK_EQ(e.err, EIO);
  CHECK_EQ(s.ladder.take_error().err, 0);
  CHECK_EQ(s.ladder.report().signaled, 0);
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.ladder.report().killed, 2);
  CHECK(s.all_dead());
}

// With a freezer: one unfrozen round signals everyone it reads; a tree that
// does not die of it is frozen kSettleMs later for one frozen read, which is
// complete: a member forked after the
// round's read (as by a fork in flight at that read) gets the signal there,
// and no one gets it twice. A member that could only appear after the frozen
// read (none can, frozen) is the kill's.
TEST(signal_first_then_one_frozen_read_then_thaw) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kOwnSession, kStayOnSignal}}));
  s.fake.freezable = true;
  s.fake.freeze_delay_ms = 0;
  pid_t forked = -1, late = -1;
  std::vector<bool> frozen_at_read;
  s.fake.after_read = [&](int n) {
    frozen_at_read.push_back(s.fake.frozen());
    if (n == 1) {
      forked = s.tree.add(kInside, kStayOnSignal);
      s.fake.add(forked);
    }
    if (n == 2) {
      late = s.tree.add(kInside, kStayOnSignal);
      s.fake.add(late);
    }
  };
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  // No sign of dying (no watched member exits): frozen after kSettleMs.
  CHECK_EQ(s.fake.reads, 1);
  CHECK(s.fake.freeze_calls.empty());
  CHECK_EQ(s.host.armed, LadderLimits::kSettleMs);
  CHECK(s.host.fire(&s.ladder));
  CHECK_EQ(s.fake.reads, 2);
  CHECK(frozen_at_read == std::vector<bool>({false, true}));
  CHECK_EQ(s.ladder.report().signaled, 4);
  CHECK_EQ(s.ladder.report().escaped, 1);
  CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
  CHECK(!s.ladder.holds_freeze());
  CHECK(!s.fake.freeze_requested);
  CHECK_EQ(s.host.armed, 1000);
  // Each signalled member's handler has run (and the late one's has not)
  // before the grace runs out: the kill must not race the deliveries.
  std::map<pid_t, int> got = s.tree.received(4);
  for (pid_t p : s.pids) CHECK_EQ(got[p], 1);
  CHECK_EQ(got[forked], 1);
  CHECK_EQ(got[late], 0);
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.ladder.report().killed, 5);
  CHECK(s.all_dead());
  CHECK(!s.tree.alive(forked));
  CHECK(!s.tree.alive(late));
}

// The signal-first round leaves the tree empty (everyone died of the
// signal): no freeze is written at all.
TEST(tree_emptied_by_the_first_round_is_not_frozen) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kExitOnSignal}, {kInside, kExitOnSignal}}));
  s.fake.freezable = true;
  // The members are gone before the round ends (the fake's empty() reads
  // their pidfds): each waited for once it is signalled.
  s.fake.after_confirm = [&](std::vector<Held>* held) {
    for (Held& h : *held) {
      proctree::pidfd_signal(h.pidfd.get(), graceful());
      readable(h.pidfd.get(), 3000);
    }
  };
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK(s.ladder.done());
  CHECK(s.fake.freeze_calls.empty());
  CHECK_EQ(s.fake.reads, 1);
  CHECK(s.all_dead());
}

// A freeze that takes a few ms (after the signal-first round): the ladder
// re-checks at 1, 2, 4 … ms, and reads once the tree is frozen; or as soon
// as the host reports the change.
TEST(slow_freeze_is_rechecked_then_signalled_frozen) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}}));
  s.fake.freezable = true;
  s.fake.freeze_delay_ms = 5;
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK(s.host.fire(&s.ladder));  // settled: the freeze is written
  uint64_t t0 = s.host.now;
  CHECK(s.ladder.holds_freeze());
  CHECK_EQ(s.fake.reads, 1);  // the signal-first round
  CHECK_EQ(s.ladder.report().signaled, 2);
  CHECK_EQ(s.host.armed, 1);
  int fired = 0;
  while (s.fake.reads == 1 && fired < 20 && s.host.fire(&s.ladder)) ++fired;
  CHECK_EQ(s.fake.reads, 2);  // frozen: one read
  CHECK(s.host.arms.size() >= 5);
  CHECK_EQ(s.host.arms[0], LadderLimits::kSettleMs);
  CHECK_EQ(s.host.arms[1], 1);
  CHECK_EQ(s.host.arms[2], 2);
  CHECK_EQ(s.host.arms[3], 4);
  CHECK_EQ(s.host.elapsed_ms(t0), 7);
  CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
  CHECK_EQ(s.ladder.report().signaled, 2);

  // The same through on_change: the host saw cgroup.events say frozen.
  Setup t;
  CHECK(t.make(kStayOnSignal, {{kInside, kStayOnSignal}}));
  t.fake.freezable = true;
  t.fake.freeze_delay_ms = -1;
  t.ladder.start("terminate", 1000, graceful(), t.tree.main_pid());
  CHECK(t.host.fire(&t.ladder));  // settled: the freeze is written
  CHECK_EQ(t.fake.reads, 1);
  t.ladder.on_change();  // not frozen yet: nothing happens
  CHECK_EQ(t.fake.reads, 1);
  t.fake.frozen_now = true;
  int cancels = t.host.cancels;
  t.ladder.on_change();
  CHECK_EQ(t.fake.reads, 2);
  CHECK_EQ(t.host.cancels, cancels + 1);
  CHECK_EQ(t.ladder.report().signaled, 2);
  CHECK_EQ(t.host.armed, 1000);
  CHECK(t.fake.freeze_calls == std::vector<bool>({true, false}));
}

// A freeze that never completes (a member in uninterruptible sleep): after
// kMaxFreezeWaitMs (or the grace, if shorter) the ladder signals unfrozen,
// re-reading until no one is new, and asks for the thaw all the same.
TEST(freeze_that_never_completes_is_given_up) {
  for (int grace : {5000, 300}) {
    Setup s;
    CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kInside, kStayOnSignal}}));
    s.fake.freezable = true;
    s.fake.freeze_delay_ms = -1;
    s.ladder.start("terminate", grace, graceful(), s.tree.main_pid());
    CHECK(s.host.fire(&s.ladder));  // settled: the freeze is written
    uint64_t t0 = s.host.now;
    CHECK_EQ(s.fake.reads, 1);  // the signal-first round
    int fired = 0;
    while (s.fake.reads == 1 && fired < 40 && s.host.fire(&s.ladder)) ++fired;
    const int bound = std::min(grace, LadderLimits::kMaxFreezeWaitMs);
    int waited = s.host.elapsed_ms(t0);
    std::printf("     grace %d: signalled unfrozen after %d ms of fake time, %d timer(s)\n", grace, waited, fired);
    CHECK(waited >= bound);
    CHECK(waited <= bound + 1);
    CHECK(fired <= 12);
    CHECK_EQ(s.fake.reads, 2);  // unfrozen: re-read until nothing new
    CHECK_EQ(s.ladder.report().signaled, 3);
    std::map<pid_t, int> got = s.tree.received(3);
    for (pid_t p : s.pids) CHECK_EQ(got[p], 1);
    CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
    CHECK(!s.ladder.holds_freeze());
    CHECK_EQ(s.host.armed, grace);
    CHECK(s.host.fire(&s.ladder));
    CHECK(s.ladder.done());
    CHECK_EQ(s.ladder.report().killed, 3);
    CHECK(s.all_dead());
  }
}

// The tree empties while the ladder waits for the freeze that follows the
// signal-first round: done, thawed.
TEST(tree_emptied_while_freezing_finishes_thawed) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {}));
  s.fake.freezable = true;
  s.fake.freeze_delay_ms = -1;
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK(s.host.fire(&s.ladder));  // settled: the freeze is written
  CHECK(s.ladder.holds_freeze());
  CHECK_EQ(s.ladder.report().signaled, 1);
  CHECK(s.tree.kill_and_reap(s.pids[0]));
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK(!s.ladder.holds_freeze());
  CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
  CHECK_EQ(s.fake.reads, 1);
  CHECK_EQ(s.ladder.report().killed, 0);
}

// The members the first round signalled are dying (the watched ones have
// exited): the tree is left to die unfrozen, looked at every kTailPollMs,
// and frozen for the complete read only if it is not empty once those
// polls are spent.
TEST(dying_tree_is_left_to_die_unfrozen_then_frozen_if_not_empty) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kStayOnSignal}}));
  s.fake.freezable = true;
  s.fake.freeze_delay_ms = 0;
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK_EQ(s.host.armed, LadderLimits::kSettleMs);
  s.ladder.on_members_exited(s.host.watched.size());
  CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  for (int i = 1; i < LadderLimits::kMaxTailPolls; ++i) {
    CHECK(s.host.fire(&s.ladder));
    CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  }
  CHECK(s.fake.freeze_calls.empty());
  CHECK_EQ(s.fake.reads, 1);
  // Polls spent, one member still there: frozen, read once (nothing new),
  // thawed, and the grace begins.
  CHECK(s.host.fire(&s.ladder));
  CHECK_EQ(s.fake.reads, 2);
  CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
  CHECK_EQ(s.ladder.report().signaled, 2);
  CHECK_EQ(s.host.armed, 1000);
}

// A short grace bounds that wait: the complete read, and the signal to what
// the first read missed, come once the grace's time has gone by.
TEST(wait_for_a_dying_tree_is_bounded_by_the_grace) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kStayOnSignal}}));
  s.fake.freezable = true;
  s.fake.freeze_delay_ms = 0;
  const int grace = 3;
  s.ladder.start("terminate", grace, graceful(), s.tree.main_pid());
  CHECK_EQ(s.host.armed, grace);
  s.ladder.on_members_exited(s.host.watched.size());
  int fired = 0;
  while (s.fake.reads < 2 && fired < 10 && s.host.fire(&s.ladder)) ++fired;
  CHECK_EQ(fired, grace);
  CHECK_EQ(s.fake.reads, 2);
  CHECK(s.fake.freeze_calls == std::vector<bool>({true, false}));
  // The grace begins, looked at the tail pace (the tree is dying).
  CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
}

// The same tree emptying while it is left to die: done, never frozen.
TEST(tree_that_dies_of_the_first_round_is_never_frozen) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kExitOnSignal}}));
  s.fake.freezable = true;
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  for (pid_t p : s.pids) CHECK(s.tree.wait_dead(p));
  s.ladder.on_members_exited(s.host.watched.size());
  s.ladder.on_change();
  CHECK(s.ladder.done());
  CHECK(s.fake.freeze_calls.empty());
  CHECK_EQ(s.ladder.report().signaled, 2);
  CHECK_EQ(s.ladder.report().killed, 0);
}

// A kill that never empties the tree: after kKillWaitMs of fake time the
// ladder stops and reports what is left (a failure), named from /proc.
TEST(kill_that_never_empties_reports_leftovers) {
  for (Confinement::Kill mode : {Confinement::Kill::kRound, Confinement::Kill::kOneShot}) {
    Setup s;
    CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kOwnSession, kStayOnSignal}}));
    s.fake.kill_works = false;
    s.fake.kill_mode = mode;
    uint64_t t0 = s.host.now;
    s.ladder.start("abort", 0, graceful(), s.tree.main_pid());
    CHECK(!s.ladder.done());
    int fired = s.host.fire_until_done(&s.ladder, 1000);
    CHECK(s.ladder.done());
    CHECK_EQ(s.host.finished, 1);
    int waited = s.host.elapsed_ms(t0);
    std::printf("     %s: gave up after %d ms of fake time, %d kill call(s)\n",
                mode == Confinement::Kill::kRound ? "rounds" : "one-shot", waited, s.fake.kill_calls);
    CHECK(waited >= LadderLimits::kKillWaitMs);
    CHECK(waited <= LadderLimits::kKillWaitMs + LadderLimits::kKillRoundMs);
    // Besides the kill rounds, the timer fires for the tail polls (at most
    // kMaxTailPolls, while the tree is expected to empty).
    if (mode == Confinement::Kill::kRound) {
      // A round every kKillRoundMs.
      CHECK(s.fake.kill_calls >= LadderLimits::kKillWaitMs / LadderLimits::kKillRoundMs);
      CHECK(fired >= s.fake.kill_calls);
      CHECK(fired <= s.fake.kill_calls + LadderLimits::kMaxTailPolls);
    } else {
      CHECK_EQ(s.fake.kill_calls, 1);
      CHECK(fired <= 1 + LadderLimits::kMaxTailPolls);
    }
    const CleanupReport& r = s.ladder.report();
    CHECK_EQ(r.killed, 3);
    CHECK_EQ(r.leftovers.size(), size_t{3});
    // Their pids only: the report's reader describes them (off the JavaScript thread).
    std::vector<pid_t> left = r.leftovers;
    std::sort(left.begin(), left.end());
    std::vector<pid_t> want = s.pids;
    std::sort(want.begin(), want.end());
    CHECK(left == want);
    CHECK(s.all_alive());
  }
}

// A tier without emptiness events (poll_ms > 0) is looked at every poll_ms
// during the grace, and the grace still ends on time.
// Once every watched member has exited (the host says so), the rest of a
// tree larger than the watched members is dying too: its end is looked for
// every kTailPollMs, not at cgroup.events' pace (one event per ~10 ms), and
// only kMaxTailPolls times; a tree that keeps running after that waits for
// events and the grace again.
TEST(dying_tree_is_rechecked_at_the_tail_poll_pace) {
  Setup s;
  CHECK(s.make(kExitOnSignal, {{kInside, kIgnoreSigterm}}));
  pid_t stayer = s.pids[1];
  s.ladder.start("terminate", 3000, SIGTERM, s.tree.main_pid());
  CHECK_EQ(s.host.armed, 3000);
  CHECK(s.tree.wait_dead(s.pids[0]));
  // One watched exit of two: still waiting for the grace.
  s.ladder.on_members_exited(1);
  s.ladder.on_change();
  CHECK_EQ(s.host.armed, 3000);
  // The host says the other watched one went too (the fake did not watch:
  // the count is the host's word), but it is still running: tail polls.
  s.ladder.on_members_exited(1);
  CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  for (int i = 1; i < LadderLimits::kMaxTailPolls; ++i) {
    CHECK(s.host.fire(&s.ladder));
    CHECK(!s.ladder.done());
    CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  }
  // Polls spent: the rest of the grace, on events.
  CHECK(s.host.fire(&s.ladder));
  CHECK_EQ(s.host.armed, 3000 - LadderLimits::kMaxTailPolls * LadderLimits::kTailPollMs);
  CHECK(s.tree.alive(stayer));
  CHECK_EQ(s.fake.kill_calls, 0);
  // The grace ends: kill; the kill phase polls at the tail pace at once.
  s.fake.kill_works = false;
  CHECK(s.host.fire(&s.ladder));
  CHECK_EQ(s.fake.kill_calls, 1);
  CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  // Orphaned by main, it is our zombie once dead (so its number stays ours).
  CHECK_EQ(kill(stayer, SIGKILL), 0);
  CHECK(s.tree.wait_dead(stayer));
  uint64_t t0 = s.host.now;
  CHECK(s.host.fire(&s.ladder));
  CHECK(s.ladder.done());
  CHECK_EQ(s.host.elapsed_ms(t0), LadderLimits::kTailPollMs);
  CHECK_EQ(s.ladder.report().killed, 1);
}

TEST(tree_whose_watched_members_exit_during_the_pass_is_polled_at_the_tail_pace) {
  Setup s;
  // The first signalled (the watched ones) die of the signal while the pass
  // still has members to go, as in a tree of thousands; the last stays.
  std::vector<std::pair<char, char>> members(LadderLimits::kMaxWatchedMembers - 1, {kInside, kExitOnSignal});
  members.push_back({kInside, kStayOnSignal});
  CHECK(s.make(kExitOnSignal, members));
  s.host.budget_per_turn = LadderLimits::kMaxWatchedMembers;
  s.ladder.start("terminate", 3000, graceful(), s.tree.main_pid());
  CHECK_EQ(s.host.watched.size(), LadderLimits::kMaxWatchedMembers);
  for (size_t i = 0; i < LadderLimits::kMaxWatchedMembers; ++i) CHECK(s.tree.wait_dead(s.pids[i]));
  // Their exits reach the ladder before its next turn.
  s.ladder.on_members_exited(LadderLimits::kMaxWatchedMembers);
  s.ladder.on_change();
  CHECK(!s.ladder.done());
  // The pass ends in the next turn: the tree is dying, so emptiness is
  // looked at every kTailPollMs, not only when cgroup.events tells it.
  s.ladder.on_timer();
  CHECK_EQ(s.ladder.report().signaled, static_cast<int>(s.pids.size()));
  CHECK_EQ(s.host.armed, LadderLimits::kTailPollMs);
  CHECK(s.tree.alive(s.pids.back()));
}

// A pass over more members than one slice goes to the host's thread (where
// the tier shares its reads): the ladder waits for it, touching nothing of
// it meanwhile, and takes the watched pidfds when it is back. Each member
// still gets the signal once.
TEST(pass_over_a_large_tree_runs_elsewhere_each_member_once) {
  Setup s;
  CHECK(s.make_large());
  std::vector<std::thread::id> read_on;
  s.fake.after_read = [&](int) { read_on.push_back(std::this_thread::get_id()); };
  s.ladder.start("terminate", 3000, graceful(), s.tree.main_pid());
  CHECK_EQ(s.host.away.size(), 1u);
  CHECK(s.ladder.running());
  CHECK(s.host.watched.empty());
  // Away: a timer or a change meanwhile reads nothing and signals no one.
  const int reads = s.fake.reads;
  s.ladder.on_timer();
  s.ladder.on_change();
  CHECK_EQ(s.fake.reads, reads);
  s.host.run_away(0);
  CHECK(s.host.watched.empty());  // handed over on return only
  s.ladder.on_pass_returned();
  CHECK_EQ(s.host.watched.size(), LadderLimits::kMaxWatchedMembers);
  CHECK_EQ(s.ladder.report().signaled, static_cast<int>(s.pids.size()));
  // Unfrozen (this fake has no freezer), the rounds after the first read
  // ran elsewhere, until one showed no one new.
  CHECK(read_on.size() >= 2u);
  CHECK(read_on[0] == std::this_thread::get_id());
  CHECK(read_on[1] != std::this_thread::get_id());
  // On to the grace, unchanged.
  CHECK_EQ(s.host.armed, 3000);
  std::map<pid_t, int> got = s.tree.received(static_cast<int>(s.pids.size()));
  CHECK_EQ(got.size(), s.pids.size());
  for (pid_t p : s.pids) CHECK_EQ(got[p], 1);
  // A second return changes nothing.
  s.ladder.on_pass_returned();
  CHECK_EQ(s.host.watched.size(), LadderLimits::kMaxWatchedMembers);
}

// The kill phase's count of a large tree goes elsewhere too; the kill waits
// for it, then goes out.
TEST(kill_phase_count_of_a_large_tree_runs_elsewhere_then_kills) {
  Setup s;
  CHECK(s.make_large());
  s.ladder.start("terminate", 100, graceful(), s.tree.main_pid());
  CHECK_EQ(s.host.away.size(), 1u);
  s.host.run_away(0);
  s.ladder.on_pass_returned();
  CHECK_EQ(s.host.armed, 100);
  CHECK_EQ(s.tree.received(static_cast<int>(s.pids.size())).size(), s.pids.size());
  // Grace over: the count goes elsewhere, and nothing is killed before it is back.
  CHECK(s.host.fire(&s.ladder));
  CHECK_EQ(s.host.away.size(), 2u);
  s.ladder.on_timer();
  s.ladder.on_change();
  CHECK_EQ(s.fake.kill_calls, 0);
  CHECK(s.all_alive());
  s.host.run_away(1);
  s.ladder.on_pass_returned();
  CHECK(s.fake.kill_calls >= 1);
  CHECK_EQ(s.ladder.report().killed, static_cast<int>(s.pids.size()));
  CHECK(s.host.fire_until_done(&s.ladder, 400) >= 0);
  CHECK(s.ladder.done());
  CHECK(s.all_dead());
}

// A small tree's pass, or one whose tier cannot share its reads, runs here.
TEST(pass_over_a_small_tree_or_unshared_reads_runs_here) {
  {
    Setup s;
    CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kInside, kStayOnSignal}}));
    s.host.elsewhere = true;
    s.fake.shares = true;
    s.ladder.start("terminate", 3000, graceful(), s.tree.main_pid());
    CHECK(s.host.away.empty());
    CHECK_EQ(s.ladder.report().signaled, 3);
  }
  {
    Setup s;
    CHECK(s.make(kStayOnSignal, std::vector<std::pair<char, char>>(LadderLimits::kPassSlice + 1, {kInside, kStayOnSignal})));
    s.host.elsewhere = true;
    s.ladder.start("terminate", 3000, graceful(), s.tree.main_pid());
    CHECK(s.host.away.empty());
    CHECK_EQ(s.ladder.report().signaled, static_cast<int>(s.pids.size()));
  }
}

TEST(tier_without_events_is_polled_during_the_grace) {
  Setup s;
  CHECK(s.make(kIgnoreSigterm, {{kInside, kIgnoreSigterm}}));
  s.fake.poll = 50;
  uint64_t t0 = s.host.now;
  s.ladder.start("terminate", 200, SIGTERM, s.tree.main_pid());
  CHECK_EQ(s.host.armed, 50);
  int fired = s.host.fire_until_done(&s.ladder, 100);
  CHECK(s.ladder.done());
  CHECK_EQ(s.host.elapsed_ms(t0), 200);
  CHECK_EQ(fired, 4);
  CHECK(s.host.arms == std::vector<int>({50, 50, 50, 50}));
  CHECK_EQ(s.ladder.report().killed, 2);
  CHECK(s.all_dead());
}

// `escaped` (members outside the main process's group or session) is the
// same count whether the ladder starts with a graceful pass or kills at
// once: here two escaped members, two inside, and one inside that exits
// (and is reaped) right after the first read of the members. Its number
// names no process then (or, after a reuse, someone else's): it is neither
// escaped nor killed.
TEST(escaped_is_counted_the_same_with_grace_zero_and_above) {
  int escaped[2] = {-1, -1};
  int killed[2] = {-1, -1};
  for (int grace : {0, 1000}) {
    Setup s;
    CHECK(s.make(kStayOnSignal, {{kOwnSession, kStayOnSignal},
                                 {kOwnGroup, kStayOnSignal},
                                 {kInside, kStayOnSignal},
                                 {kInside, kStayOnSignal}}));
    pid_t exits = s.pids.back();
    bool reaped = false;
    s.fake.after_read = [&](int n) {
      if (n == 1) reaped = s.tree.kill_and_reap(exits);
    };
    s.ladder.start("terminate", grace, graceful(), s.tree.main_pid());
    s.host.fire_until_done(&s.ladder, 10);
    CHECK(reaped);
    CHECK(s.ladder.done());
    CHECK(s.all_dead());
    escaped[grace == 0 ? 0 : 1] = s.ladder.report().escaped;
    killed[grace == 0 ? 0 : 1] = s.ladder.report().killed;
  }
  std::printf("     escaped: %d with grace 0, %d with grace 1000 (killed %d, %d)\n", escaped[0], escaped[1],
              killed[0], killed[1]);
  CHECK_EQ(escaped[1], 2);
  CHECK_EQ(escaped[0], escaped[1]);
  CHECK_EQ(killed[1], 4);
  CHECK_EQ(killed[0], killed[1]);
}

// `killed` counts the members alive when the grace ran out: one that exits
// (and is reaped) right after the kill phase's read of the members is not.
TEST(killed_skips_a_member_that_exits_right_after_the_kill_read) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kInside, kStayOnSignal}, {kInside, kStayOnSignal}}));
  pid_t exits = s.pids.back();
  bool reaped = false;
  // Reads 1 and 2: the graceful pass; read 3: the kill phase's.
  s.fake.after_read = [&](int n) {
    if (n == 3) reaped = s.tree.kill_and_reap(exits);
  };
  s.ladder.start("terminate", 1000, graceful(), s.tree.main_pid());
  CHECK_EQ(s.ladder.report().signaled, 3);
  CHECK(s.host.fire(&s.ladder));
  CHECK(reaped);
  CHECK(s.ladder.done());
  CHECK(s.all_dead());
  CHECK_EQ(s.ladder.report().killed, 2);
}

// And with nothing exiting on its own: two escaped of five, either way.
TEST(escaped_with_grace_zero_and_above_on_a_steady_tree) {
  int escaped[2] = {-1, -1};
  for (int grace : {0, 1000}) {
    Setup s;
    CHECK(s.make(kStayOnSignal, {{kOwnSession, kStayOnSignal},
                                 {kOwnGroup, kStayOnSignal},
                                 {kInside, kStayOnSignal},
                                 {kInside, kStayOnSignal}}));
    s.ladder.start("terminate", grace, graceful(), s.tree.main_pid());
    s.host.fire_until_done(&s.ladder, 10);
    CHECK(s.ladder.done());
    CHECK_EQ(s.ladder.report().killed, 5);
    escaped[grace == 0 ? 0 : 1] = s.ladder.report().escaped;
  }
  CHECK_EQ(escaped[0], 2);
  CHECK_EQ(escaped[1], 2);
}

// Without a main process (-1) nothing is counted as escaped.
TEST(no_main_pid_counts_no_escape) {
  Setup s;
  CHECK(s.make(kStayOnSignal, {{kOwnSession, kStayOnSignal}}));
  s.ladder.start("terminate", 0, graceful(), -1);
  CHECK(s.ladder.done());
  CHECK_EQ(s.ladder.report().escaped, 0);
  CHECK_EQ(s.ladder.report().killed, 2);
}

int main(int argc, char** argv) {
  // Members orphaned when a tree's main process dies come to us, so that
  // every process the tests make is reaped by them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  return check::main(argc, argv);
}
