// One tool call on the event loop: its main process (by pidfd), the
// Confinement that holds its tree, the Ladder that empties it, and one timer.
// Everything that happens to it is posted to its Environment as a CallEvent,
// delivered to JavaScript in order: [started], exit, [cleanup], empty.
//
// The main process is the command itself (cgroup, pgroup tiers), the shim
// that started it (pidns, subreaper: the command's pid and exit status then
// come over the shim's control socket, helper/shim_protocol.h), or the
// command started by the systemd tier's broker (its pid, leaf and exit status
// come from the broker through the Environment: the broker is its parent).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel/cgroup.h"
#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/procfs.h"
#include "kernel/sockets.h"
#include "kernel/spawn.h"
#include "ladder/cgroup_confinement.h"
#include "ladder/confinement.h"
#include "ladder/ladder.h"
#include "loop/spawner.h"
#include "loop/timers.h"

namespace proctree {

struct CallEvent {
  // kOutput, kOutputEnd (error: why reading failed, if it did), kWritten (a
  // write is in the pipe, or error says why not): of a stream (streams.h),
  // call_id is the stream's id.
  // kPorts: the answer to Environment::ports(), call_id is its request id.
  // kFrozen: cgroup.events shows the state pause()/resume() asked for (frozen).
  enum Kind { kExit, kCleanup, kEmpty, kError, kStarted, kStartFailed, kOutput, kOutputEnd, kWritten, kPorts, kFrozen };
  // An event of `kind` for `call_id` with `error`, every other field empty.
  static CallEvent of(Kind kind, uint64_t call_id, SysError error = SysError::none()) {
    CallEvent ev;
    ev.kind = kind;
    ev.call_id = call_id;
    ev.error = error;
    return ev;
  }
  Kind kind = kExit;
  uint64_t call_id = 0;
  ExitStatus exit;
  CleanupReport report;
  SysError error;
  pid_t pid = -1;  // kStarted: the command's pid
  std::string cgroup;  // kStarted, systemd tier: the call's leaf
  // kEmpty: what the whole tree used, and the most processes seen in it at
  // once (by members() and the ladder's reads; at least the main process).
  Usage usage;
  int peak_processes = 0;
  std::string data;  // kOutput: the bytes read
  std::vector<Listener> listeners;  // kPorts
  bool described = false;            // kPorts answering Environment::describe(): infos
  std::vector<ProcessInfo> infos;
  bool frozen = false;  // kFrozen
};

class Environment;

class Call : public LadderHost {
 public:
  // How long an exec report is waited for where one is needed (the tick
  // after spawn, a signal, a ladder; spawn() itself for a uid or gid, or
  // past 256 reports uncollected). A child held before its exec longer than
  // this counts as started.
  static constexpr int kExecReportWaitMs = 500;

  // control: the shim's control socket (shim tiers), else empty; then the
  // call starts in the "starting" state until the shim reports the exec.
  Call(Environment* env, uint64_t id, SpawnResult main, std::unique_ptr<Confinement> confinement, Fd control);
  // A systemd-tier call whose spawn request went to the broker: it starts
  // in the "starting" state, without a tree, until on_broker_spawned().
  Call(Environment* env, uint64_t id, Tier tier);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  ~Call() override;

  // A command whose exec is still to report (cgroup and pgroup tiers: its
  // spawner thread waits in the vfork). The report posts kStarted or
  // kStartFailed, once: when the spawner says it is in (on_exec_reported),
  // or when someone needs it sooner: settle_exec(), which everything acting
  // on the command (a signal, a ladder, members()) also does first, so that
  // it acts on what the command exec'd.
  //
  // queued: the job was only queued (Spawner::queue), so there is no child
  // yet: the call waits for it (adopt_clone) when the job is done, when its
  // report is asked for, or before anything acts on the command.
  void set_pending_exec(Ref<SpawnJob> exec, bool queued = false) {
    exec_ = std::move(exec);
    cloning_ = queued && exec_;
  }
  void on_exec_reported() { collect_exec(0); }
  // kExecReportWaitMs have passed since the spawn: a report still not in
  // (a child held before its exec) makes the call count as started.
  void on_exec_overdue();
  // Its exec report is still to come, and the call has not been taken as
  // started without it.
  bool exec_pending() const { return exec_ && !exec_unknown_; }
  // Waits for that report if it is not in yet, for wait_ms at most; past
  // kExecReportWaitMs the command counts as started. Returns the step that
  // failed, or none: it exec'd, counts as started, there was no pending
  // exec, or (*pending, with a shorter wait) the report is not in yet.
  // quiet: the asker (spawn()'s tick, which emits 'spawn' itself) learns a
  // start with a pid from the answer, and no kStarted event follows.
  SysError settle_exec(int wait_ms = kExecReportWaitMs, bool* pending = nullptr, bool quiet = false);

  // Registers the main process (and control socket) with the reactor. The
  // call exists whatever happens here: if the reactor cannot take them (out
  // of memory for epoll), they are polled instead.
  void start();

  uint64_t id() const { return id_; }
  // The command's pid, once known (-1 before: a shim's or a queued clone's).
  pid_t command_pid() const { return command_; }
  Tier tier() const { return tier_; }
  // How this call's tree is proved empty: its confinement's word; a
  // systemd-tier call still waiting for the broker will have a cgroup leaf.
  const char* verified() const { return confinement_ ? confinement_->verified() : "cgroup.events"; }
  bool finished() const { return finished_; }
  void close_descriptors() {
    // Not under a running ladder: its pass may be reading through them on
    // another thread (and it would reopen them anyway).
    if (confinement_ && !ladder_.running()) confinement_->close_descriptors();
  }
  bool referenced() const { return ref_; }
  void set_referenced(bool ref);

  // The broker's answers (systemd tier).
  void on_broker_spawned(pid_t pid, Fd pidfd, CgroupDir leaf);
  void on_broker_failed(const SysError& e);
  void on_broker_exited(ExitStatus st);
  // The broker is gone while this call's command may still run.
  void on_broker_lost(const SysError& e);

  // Reactor callbacks.
  void on_main_readable();
  void on_control_readable();
  void on_change();
  // n member pidfds the ladder handed us turned readable (they exited).
  void on_members_exited(size_t n);

  // The ladder (idempotent). Returns whether a 'cleanup' event has been or
  // will be posted (false: the tree was already gone).
  bool terminate(int grace_ms, int sig, const std::string& reason);
  // The call's own leaf (cgroup and systemd tiers), else "".
  std::string leaf_path() const;
  // One signal to every member now, no escalation; how many got it.
  int signal_all(int sig);
  // pause()/resume(): the leaf's cgroup.freeze, written now (cgroup and
  // systemd tiers only: ENOTSUP elsewhere, and where the freezer cannot be
  // used: no cgroup.freeze, or a tracer attached to the harness, which a
  // frozen member could be). A kFrozen event follows once cgroup.events
  // shows the state. ESRCH: the tree is gone or being stopped.
  SysError set_paused(bool paused);
  std::vector<pid_t> members();

  // The call's cgroup leaf must not serve a later call (a job is named
  // after it). *base: the leaf's cpu.stat counters when the call began.
  void retire(CpuCounters* base);

  // Environment teardown: SIGKILL the tree without waiting; whether anything
  // is still alive; then reap and remove what is left, synchronously.
  void kill_now(bool sync = false);
  bool populated_now() const;
  void finish_sync();

  // Frees the call. Once, when finished (or at teardown).
  void dispose();

  // LadderHost
  uint64_t now_ns() override { return monotonic_ns(); }
  void arm_timer(int ms) override;
  void cancel_timer() override;
  void watch_member(Fd pidfd) override;
  void ladder_finished() override;
  size_t pass_budget(size_t wanted) override;
  bool run_elsewhere(AwayWork work) override;
  bool pass_elsewhere() override { return stopped_with_others_; }
  int group_leader_pidfd() const override;
  // Stopped with others at once (Environment::terminate_group): its passes
  // go to the passes' thread, whatever the tree's size.
  void stop_with_others() { stopped_with_others_ = true; }
  // The pass run_elsewhere() handed over has run.
  void on_pass_returned();
  // The Environment has budget for this call's graceful pass again.
  void resume_pass();

 private:
  // A shim runs the tree: the pidns and subreaper tiers, and sealed calls
  // (the cgroup tier's, whose shim is the namespaces' init in the leaf).
  bool shim() const { return shim_; }
  void drain_control();
  void post_exit(ExitStatus st);
  void post_report();
  void post_error(const SysError& e);
  void check_finished();
  void watch_emptiness();
  void unwatch();
  void unwatch_control();
  void on_timer();
  void on_timeout();
  // Reads the exec report, if one is pending, waiting wait_ms at most; a
  // wait of kExecReportWaitMs or more (or `overdue`) that ends without it
  // makes the command count as started.
  void collect_exec(int wait_ms = kExecReportWaitMs, bool overdue = false, bool quiet = false);
  // A queued clone's child, taken from its job (waiting for it to exist, a
  // bounded time) and watched; false if none was made (the call then
  // failed to start: kStartFailed, and it ends).
  // wait_ns 0: a job still queued is taken back (teardown).
  bool adopt_clone(int64_t wait_ns = Spawner::kCloneWaitNs);
  // Registers the main process (and control socket) with the reactor.
  void watch_main();
  // Posts kFrozen once cgroup.events shows what set_paused() asked for.
  void check_paused();

  Environment* env_;
  uint64_t id_;
  Tier tier_;
  SpawnResult main_;
  std::unique_ptr<Confinement> confinement_;
  Ladder ladder_;
  Fd control_;
  Ref<SpawnJob> exec_;
  pid_t command_ = -1;

  bool starting_ = false;      // a shim has not reported the exec yet
  bool main_exited_ = false;   // the main process (the command, or the shim) exited
  bool exit_posted_ = false;
  bool report_posted_ = false;
  bool shim_lost_ = false;     // the subreaper shim died with its tree unproved
  bool finished_ = false;
  bool ref_ = true;
  bool main_watched_ = false;
  bool control_watched_ = false;
  SysError exec_error_;        // the step of a pending exec that failed
  // The exec report did not come within kExecReportWaitMs: taken as started.
  bool exec_unknown_ = false;
  // The command failed before its exec: its spawner thread reaped it.
  bool reaped_by_spawner_ = false;
  // exec_ was only queued: no child, pid or pidfd yet (adopt_clone).
  bool cloning_ = false;
  void post_started();
  // The command never ran: kStartFailed, and no exit event.
  void post_start_failed(const SysError& e);
  int events_wd_ = -1;         // inotify watch of cgroup.events, added lazily
  bool polling_ = false;       // a tier without emptiness events is being watched
  bool main_polled_ = false;   // the reactor could not take the main pidfd
  bool brokered_ = false;      // the systemd tier: the broker is the main's parent
  bool shim_ = false;          // main_ is a shim that reports on control_ (shim())
  // A ladder asked for before the broker said where the tree is.
  bool pending_terminate_ = false;
  int pending_grace_ = 0;
  int pending_sig_ = 0;
  std::string pending_reason_;
  uint64_t start_deadline_ns_ = 0;
  std::vector<Fd> watched_members_;
  Usage usage_;
  size_t peak_processes_ = 1;
  bool stopped_with_others_ = false;
  bool paused_ = false;  // set_paused(true) was the last asked, and no ladder ran since
  int pause_wanted_ = -1;  // the frozen state a kFrozen event is due for (0, 1), or -1
  Timer timer_;
};

}  // namespace proctree
