#include "loop/call.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "helper/shim_protocol.h"
#include "kernel/cgroup.h"
#include "ladder/cgroup_confinement.h"
#include "loop/environment.h"
#include "loop/fd_room.h"

namespace proctree {
namespace {

// How long a shim may take to report that the command started: it forks and
// execs, which takes a millisecond or two.
constexpr int kShimStartTimeoutMs = 10000;
// How often a main process the reactor could not take is looked at.
constexpr int kMainPollMs = 20;
// kill(): how long to spin for the freeze to take before signalling unfrozen.
constexpr uint64_t kKillFreezeSpinNs = 2000000;

}  // namespace

Call::Call(Environment* env, uint64_t id, SpawnResult main, std::unique_ptr<Confinement> confinement, Fd control)
    : env_(env),
      id_(id),
      tier_(confinement->tier()),
      main_(std::move(main)),
      confinement_(std::move(confinement)),
      ladder_(confinement_.get(), this),
      control_(std::move(control)),
      timer_(env->timers(), [this] { on_timer(); }) {
  starting_ = control_.valid();
  shim_ = control_.valid();
  if (!starting_) command_ = main_.pid;
}

Call::Call(Environment* env, uint64_t id, Tier tier)
    : env_(env), id_(id), tier_(tier), ladder_(nullptr, this), brokered_(true),
      timer_(env->timers(), [this] { on_timer(); }) {
  starting_ = true;
}

Call::~Call() = default;

void Call::start() {
  if (brokered_) return;  // the broker tells what happens to the command
  if (cloning_) return;   // adopt_clone() watches it
  watch_main();
}

void Call::watch_main() {
  keep_fd_room(main_.pidfd.get());
  main_watched_ = !env_->reactor().watch_main(main_.pidfd.get(), id_);
  if (control_) {
    control_watched_ = !env_->reactor().watch_control(control_.get(), id_);
    start_deadline_ns_ = now_ns() + static_cast<uint64_t>(kShimStartTimeoutMs) * 1000000ULL;
  }
  if (!main_watched_ || (control_ && !control_watched_)) {
    main_polled_ = true;
    arm_timer(kMainPollMs);
  } else if (control_) {
    arm_timer(kShimStartTimeoutMs);
  }
}

void Call::set_referenced(bool ref) {
  if (ref == ref_) return;
  env_->on_call_ref_changed(ref_, ref);
  ref_ = ref;
}

void Call::post_exit(ExitStatus st) {
  if (exit_posted_) return;
  exit_posted_ = true;
  CallEvent ev = CallEvent::of(CallEvent::kExit, id_);
  ev.exit = st;
  env_->post(std::move(ev));
  post_report();
}

void Call::post_error(const SysError& e) { env_->post(CallEvent::of(CallEvent::kError, id_, e)); }

void Call::on_main_readable() {
  if (main_exited_) return;
  // It exec'd or failed before this exit: the report is in (and, for a
  // command that never ran, there is no exit to report).
  collect_exec();
  if (shim()) drain_control();
  ExitStatus st;
  // The pgroup tier keeps its command a zombie until the session is empty:
  // see ladder/session_confinement.h.
  bool keep = tier() == Tier::kPgroup;
  if (reaped_by_spawner_) {
    // It failed before its exec, and its spawner thread reaped it: 127, as
    // a shell says of a command it could not run.
    st = ExitStatus{true, 127, 0};
  } else if (SysError e = pidfd_reap(main_.pidfd.get(), &st, keep)) {
    // ECHILD: someone reaped our child behind our back (waitpid(-1) in the
    // same process). Its status is lost, but the call must still end.
    st = ExitStatus{true, -1, 0};
    post_error(e);
  }
  if (!st.done) return;  // spurious readiness
  main_exited_ = true;
  // Killed outright: maybe through its leaf's cgroup.kill, written by the
  // command itself. The kernel would then kill whatever a later clone3
  // places into that leaf (kKilledAtBirth in kernel/spawn.h), so the leaf
  // serves no other call. (The ladder's own kills retire it anyway.)
  if (st.signal == SIGKILL && confinement_) confinement_->retire();
  // A shim's pidfd stays: it is how its tier tells the tree is empty. Closing
  // the others takes them out of the epoll set (nothing else holds them).
  if (main_watched_ && (keep || shim())) env_->reactor().unwatch(main_.pidfd.get());
  main_watched_ = false;
  if (!keep && !shim()) main_.pidfd.reset();
  if (shim()) {
    // The shim is gone, so is its tree (it exits only with no child left,
    // and the kernel kills a PID namespace whose init dies)...
    if (starting_) {
      starting_ = false;
      if (!exit_posted_) {
        env_->post(CallEvent::of(CallEvent::kStartFailed, id_, SysError::of(EPROTO, "proctree-helper")));
        exit_posted_ = true;
      }
    } else if (!exit_posted_) {
      // ...but it never reported the command's exit: something killed it.
      // A namespace dies with its init; a subreaper's orphans go to init,
      // alive and unseen: that is a failure, never a clean empty.
      if (tier() == Tier::kSubreaper) {
        shim_lost_ = true;
        post_error(SysError::of(ECHILD, "proctree-helper", "the subreaper shim died before its tree was empty"));
      }
      post_exit(ExitStatus{true, -1, SIGKILL});
    }
  } else {
    if (tier() == Tier::kPgroup) {
      // All this tier can see: the command and the children it waited for.
      usage_.known = true;
      usage_.source = "rusage";
      usage_.user_ms = st.user_ms;
      usage_.system_ms = st.system_ms;
    }
    post_exit(st);
  }
  on_change();
}

void Call::drain_control() {
  if (!control_) return;
  for (;;) {
    shim::Message m{};
    ssize_t n = recv(control_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof m)) {
      switch (m.kind) {
        case shim::kExecOk:
          if (starting_) {
            starting_ = false;
            command_ = m.a;
            if (!ladder_.running() && !main_polled_) cancel_timer();
            CallEvent ev = CallEvent::of(CallEvent::kStarted, id_);
            ev.pid = command_;
            env_->post(std::move(ev));
          }
          break;
        case shim::kExecFailed:
          if (starting_) {
            starting_ = false;
            exit_posted_ = true;  // no exit event for a command that never ran
            env_->post(CallEvent::of(CallEvent::kStartFailed, id_, SysError::of(m.a, shim::stage_syscall(m.b))));
          }
          break;
        case shim::kExit:
          post_exit(ExitStatus{true, m.a, m.b});
          break;
        case shim::kUsage:
          usage_.known = true;
          usage_.source = "rusage";
          usage_.user_ms = m.a;
          usage_.system_ms = m.b;
          break;
        default:
          break;
      }
      continue;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // The shim closed its end (it is exiting): its pidfd says the rest.
      unwatch_control();
    }
    return;
  }
}

void Call::on_control_readable() {
  drain_control();
  check_finished();
}

void Call::on_members_exited(size_t n) {
  if (confinement_ && ladder_.running()) ladder_.on_members_exited(n);
}

void Call::on_change() {
  if (!confinement_) return;
  check_paused();
  if (ladder_.running()) ladder_.on_change();
  check_finished();
}

SysError Call::set_paused(bool paused) {
  settle_exec();
  if (finished_ || !confinement_ || ladder_.started()) return SysError::of(ESRCH, "cgroup.freeze");
  if (tier() != Tier::kCgroup && tier() != Tier::kSystemd) return SysError::of(ENOTSUP, "cgroup.freeze");
  // can_freeze() is false while a tracer is attached to the harness: the
  // tracer may be a member, and freezing it would stop us at our next syscall.
  if (!confinement_->can_freeze()) return SysError::of(ENOTSUP, "cgroup.freeze", leaf_path());
  // The state shows in cgroup.events, which tells its changes through the
  // reactor's inotify watch (or the poll where inotify had no room).
  watch_emptiness();
  // Written now, not through the slow writes: a leaf's freeze costs a
  // signal per member, and the next ladder's writes must come after it.
  if (SysError e = confinement_->set_frozen(paused, true)) return e;
  paused_ = paused;
  pause_wanted_ = paused ? 1 : 0;
  check_paused();
  return SysError::none();
}

void Call::check_paused() {
  if (pause_wanted_ < 0 || !confinement_) return;
  if (confinement_->frozen() != (pause_wanted_ == 1)) return;
  CallEvent ev = CallEvent::of(CallEvent::kFrozen, id_);
  ev.frozen = pause_wanted_ == 1;
  pause_wanted_ = -1;
  env_->post(std::move(ev));
}

std::string Call::leaf_path() const {
  if ((tier_ != Tier::kCgroup && tier_ != Tier::kSystemd) || !confinement_) return {};
  return static_cast<CgroupConfinement*>(confinement_.get())->leaf().path();
}

size_t Call::pass_budget(size_t wanted) { return env_->take_pass_budget(id_, wanted); }

int Call::group_leader_pidfd() const {
  // The cgroup tier's command is a session leader from its child side's
  // setsid(), before its exec. (Not before that: its number leads no group
  // yet, and a group signal by its pid reaches no one.) A shim's tree, or
  // the broker's, is not the main process's group.
  if (tier_ != Tier::kCgroup || shim() || brokered_ || !main_.pidfd || main_.pid != command_) return -1;
  return main_.pidfd.get();
}

bool Call::run_elsewhere(AwayWork work) { return env_->run_pass_elsewhere(id_, std::move(work)); }

void Call::on_pass_returned() {
  if (finished_ || !ladder_.running()) return;
  ladder_.on_pass_returned();
  check_finished();
}

void Call::resume_pass() {
  if (finished_ || !ladder_.running()) return;
  ladder_.on_timer();
  check_finished();
}

bool Call::terminate(int grace_ms, int sig, const std::string& reason) {
  // No wait: JavaScript asked for the report as long as it would, and the
  // ladder acts on the tree whether or not the command exec'd.
  settle_exec(0);
  if (finished_ || ladder_.started()) return ladder_.started();
  // The shim may have said which process is the command already, in a
  // message not read yet: "escaped" is counted against it.
  if (starting_ && control_) drain_control();
  if (!confinement_) {
    // The broker has not said where the tree is yet: run the ladder then.
    pending_terminate_ = true;
    pending_grace_ = grace_ms;
    pending_sig_ = sig;
    pending_reason_ = reason;
    return true;
  }
  watch_emptiness();
  // A paused tree: the ladder freezes it (it is) and thaws it after its
  // signals. Where it will not freeze (a tracer attached to us since), the
  // thaw comes first, so that the graceful signal is seen within grace.
  if (paused_ && !confinement_->can_freeze()) confinement_->set_frozen(false, true);
  paused_ = false;
  pause_wanted_ = -1;
  ladder_.start(reason, grace_ms, sig, command_);
  check_finished();
  return true;
}

void Call::ladder_finished() {
  watched_members_.clear();
  if (SysError e = ladder_.take_error()) post_error(e);
  post_report();
}

// 'cleanup' comes after 'exit': the main process leaves its cgroup before
// its pidfd turns readable, so a ladder can see the tree empty first.
void Call::post_report() {
  if (ladder_.done() && exit_posted_ && !report_posted_) {
    report_posted_ = true;
    CleanupReport report = ladder_.report();
    if (shim_lost_) report.verified = "none";
    CallEvent ev = CallEvent::of(CallEvent::kCleanup, id_);
    ev.report = std::move(report);
    env_->post(std::move(ev));
  }
}

// Makes sure a change of the tree reaches on_change(): the cgroup tier's
// cgroup.events watch is added only now (most calls end with their main
// process and never need it); tiers without events are polled.
void Call::watch_emptiness() {
  if (finished_ || !confinement_) return;
  if (tier() == Tier::kCgroup || tier() == Tier::kSystemd) {
    if (events_wd_ >= 0) return;
    // PROCTREE_TEST_WATCH_DELAY_MS (tests only): a pause before the watch,
    // so that a test can empty the tree after a read found it populated and
    // before the watch is there (the race check_finished() reads again for).
    static const int test_delay_ms = [] {
      const char* v = getenv("PROCTREE_TEST_WATCH_DELAY_MS");
      return v ? std::max(0, std::min(atoi(v), 1000)) : 0;
    }();
    if (test_delay_ms > 0) usleep(static_cast<useconds_t>(test_delay_ms) * 1000);
    const CgroupDir& leaf = static_cast<CgroupConfinement*>(confinement_.get())->leaf();
    if (SysError e = env_->reactor().watch_cgroup(leaf.path() + "/cgroup.events", id_, &events_wd_)) {
      // Out of inotify watches (ENOSPC): the call goes on, polled instead.
      events_wd_ = -1;
      polling_ = true;
      if (!ladder_.running()) arm_timer(20);
    }
    return;
  }
  if (confinement_->poll_ms() > 0 && !ladder_.running()) {
    polling_ = true;
    arm_timer(confinement_->poll_ms());
  }
}

void Call::check_finished() {
  if (finished_ || ladder_.running() || !confinement_) return;
  if (!main_exited_) {
    // A main process the reactor could not watch is polled on the one
    // timer, which a ladder that just ended may have taken.
    if (main_polled_ && !timer_.active()) arm_timer(kMainPollMs);
    return;
  }
  // Read before the cgroup goes (its files go with it); harmless when the
  // tree turns out not to be empty yet.
  confinement_->read_usage(&usage_);
  SysError release_error;
  if (!confinement_->release_if_empty(&release_error)) {
    const bool watched = events_wd_ >= 0;
    watch_emptiness();
    // A watch added only now misses what changed before it: the tree may
    // have emptied since the read above (as a nested proctree's guardian
    // does a moment after the main process), and its event never comes.
    // Read once more with the watch in place.
    if (!watched && events_wd_ >= 0) check_finished();
    return;
  }
  if (release_error) post_error(release_error);
  cancel_timer();
  unwatch();
  if (tier() == Tier::kPgroup && main_.pidfd) {
    // The pgroup tier's zombie: the session is empty, its number may go.
    ExitStatus st;
    pidfd_reap(main_.pidfd.get(), &st);
    main_.pidfd.reset();
  }
  finished_ = true;
  CallEvent ev = CallEvent::of(CallEvent::kEmpty, id_);
  ev.usage = usage_;
  ev.peak_processes = static_cast<int>(std::max(peak_processes_, ladder_.most_members()));
  env_->post(std::move(ev));
}

int Call::signal_all(int sig) {
  settle_exec();
  if (finished_ || !confinement_) return 0;
  std::vector<pid_t> pids;
  if (sig == 0) {
    // Existence and permission only, as kill(pid, 0).
    confinement_->members(&pids);
    return static_cast<int>(pids.size());
  }
  if (sig == SIGKILL) {
    confinement_->members(&pids);
    // The whole tree is dying now: the ladder's kill, without its wait.
    if (confinement_->kill_all() == Confinement::Kill::kRound) confinement_->kill_all();
    watch_emptiness();
    return static_cast<int>(pids.size());
  }
  // Freeze, so that no member forks between our read and its signal; the
  // freeze takes effect asynchronously, so spin briefly for it, and signal
  // in re-read rounds whatever happens. Never touch a freeze the ladder holds.
  // A paused tree is frozen already, and stays so: the signals land when it
  // is resumed (SIGKILL, above, lands at once).
  bool froze = false;
  const bool held = paused_ && confinement_->frozen();
  if (!held && confinement_->can_freeze() && !ladder_.holds_freeze() && !confinement_->set_frozen(true, true)) {
    froze = true;
    uint64_t until = now_ns() + kKillFreezeSpinNs;
    while (!confinement_->frozen() && now_ns() < until) sched_yield();
  }
  std::unordered_set<pid_t> done;
  int n = 0;
  for (int round = 0; round < LadderLimits::kMaxPassRounds; ++round) {
    confinement_->members(&pids);
    std::vector<pid_t> fresh;
    for (pid_t pid : pids) {
      if (done.insert(pid).second) fresh.push_back(pid);
    }
    if (fresh.empty()) break;
    SysError e = for_each_confirmed(
        fresh, [this](std::vector<Held>* held) { return confinement_->confirm(held); },
        [&](Held& h) {
          if (pidfd_signal(h.pidfd.get(), sig) == 0) ++n;
        });
    if (e) post_error(e);
    if ((froze || held) && confinement_->frozen()) break;
  }
  if (froze) confinement_->set_frozen(false, true);
  return n;
}

std::vector<pid_t> Call::members() {
  settle_exec();
  std::vector<pid_t> pids;
  if (!finished_ && confinement_) confinement_->members(&pids);
  peak_processes_ = std::max(peak_processes_, pids.size());
  return pids;
}

void Call::kill_now(bool sync) {
  // A clone still queued is not started only to be killed.
  if (cloning_) adopt_clone(0);
  settle_exec(0);
  if (finished_ || !confinement_) return;
  if (sync) {
    confinement_->kill_all_now();
  } else {
    confinement_->kill_all();
  }
  // A subreaper shim keeps killing on its own once its control socket
  // closes; its own exit (the main pidfd, still watched) ends the call.
  if (tier() == Tier::kSubreaper) {
    unwatch_control();
    control_.reset();
  }
}

void Call::retire(CpuCounters* base) {
  settle_exec(0);
  if (!confinement_) return;
  confinement_->retire();
  if (tier_ == Tier::kCgroup) *base = static_cast<CgroupConfinement*>(confinement_.get())->base();
}

bool Call::populated_now() const { return !finished_ && confinement_ && !confinement_->empty(); }

void Call::finish_sync() {
  if (cloning_) adopt_clone(0);
  settle_exec(0);
  if (finished_) return;
  if (main_.pidfd && !brokered_) {
    ExitStatus st;
    pidfd_reap(main_.pidfd.get(), &st);
  }
  cancel_timer();
  unwatch();
  control_.reset();
  if (confinement_) confinement_->release();
  finished_ = true;
}

void Call::unwatch() {
  Reactor& r = env_->reactor();
  if (main_watched_) r.unwatch(main_.pidfd.get());
  main_watched_ = false;
  unwatch_control();
  r.unwatch_cgroup(events_wd_);
  events_wd_ = -1;
  watched_members_.clear();  // closing a pidfd takes it out of the epoll set
}

void Call::unwatch_control() {
  if (control_watched_) env_->reactor().unwatch(control_.get());
  control_watched_ = false;
}

void Call::watch_member(Fd pidfd) {
  if (!env_->reactor().watch_member(pidfd.get(), id_)) watched_members_.push_back(std::move(pidfd));
}

// The call's one timer (the ladder's steps, a poll, the shim's start
// deadline): a referenced call keeps the loop alive anyway, so the timer
// itself never does.
void Call::arm_timer(int ms) { timer_.start(static_cast<uint64_t>(std::max(ms, 1))); }

void Call::cancel_timer() { timer_.stop(); }

void Call::on_timer() {
  on_timeout();
  env_->flush();
}

void Call::on_timeout() {
  if (finished_) return;
  if (main_polled_ && !main_exited_) {
    if (control_) drain_control();
    on_main_readable();
    if (!main_exited_ && !ladder_.running()) arm_timer(kMainPollMs);
  }
  if (starting_ && !brokered_ && now_ns() >= start_deadline_ns_) {
    // The shim never said whether the command started: stop everything it
    // may have started, and report the start as failed.
    starting_ = false;
    exit_posted_ = true;
    env_->post(CallEvent::of(CallEvent::kStartFailed, id_, SysError::of(ETIMEDOUT, "proctree-helper")));
    kill_now();
    if (!ladder_.running()) return;
  }
  if (ladder_.running()) {
    ladder_.on_timer();
    check_finished();
    return;
  }
  if (polling_) {
    polling_ = false;
    check_paused();
    check_finished();
    if (!finished_ && (main_exited_ || pause_wanted_ >= 0)) watch_emptiness();
  }
}

void Call::dispose() {
  unwatch();
  delete this;
}

}  // namespace proctree
