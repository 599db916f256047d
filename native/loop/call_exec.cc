// A call of the cgroup and pgroup tiers until its command has exec'd: the
// child a spawner thread cloned, or will clone (a burst's queued clone,
// adopted here once it exists), and its exec report, which posts kStarted
// or kStartFailed once, when it comes in or when something needs it sooner.
#include <utility>

#include "loop/call.h"
#include "loop/environment.h"

namespace proctree {

void Call::post_started() {
  CallEvent ev = CallEvent::of(CallEvent::kStarted, id_);
  ev.pid = command_;
  env_->post(std::move(ev));
}

void Call::on_exec_overdue() {
  if (cloning_) {
    // Queued all this time (a long burst): its bound counts from its clone.
    if (adopt_clone()) env_->watch_exec(id_);
    return;
  }
  collect_exec(0, true);
}

bool Call::adopt_clone(int64_t wait_ns) {
  cloning_ = false;
  SpawnResult got;
  bool untried = false;
  SysError e = env_->spawner().take_ids(exec_, wait_ns, &got, &untried, Spawner::kBirthSettleNs);
  if (e) {
    // No child: the clone failed, or the job never got a thread.
    exec_.reset();
    main_exited_ = true;
    post_start_failed(e);
    check_finished();
    return false;
  }
  main_.pid = got.pid;
  main_.pidfd = std::move(got.pidfd);
  main_.method = got.method;
  command_ = got.pid;
  watch_main();
  return true;
}

void Call::collect_exec(int wait_ms, bool overdue, bool quiet) {
  if (!exec_) return;
  if (cloning_) {
    // Its report comes with its child (the job is done once the child
    // exec'd or failed). Not asked to wait: nothing to act on until then.
    // Asked to: the job goes first, and its child is waited for.
    if (wait_ms == 0 && !overdue && !exec_->done()) return;
    if (!adopt_clone()) return;
  }
  SysError failed;
  // Bounded: a child held before its exec (its cgroup frozen from above by
  // whoever may write there) must not hang the loop. It is then taken as
  // started, and is not waited for again.
  if (!exec_->collect(exec_unknown_ ? 0 : wait_ms, &failed)) {
    if (exec_unknown_ || !(overdue || wait_ms >= kExecReportWaitMs)) return;
    post_started();
    exec_unknown_ = true;
    return;
  }
  exec_.reset();
  if (!failed) {
    // An event per call less (a callback into JavaScript) when the asker
    // has the pid from the answer.
    if (!exec_unknown_ && !(quiet && command_ > 0)) post_started();
    return;
  }
  reaped_by_spawner_ = true;
  if (exec_unknown_) {
    // Reported as started already: the failed step is an error of a call
    // that ran, whose exit (127) follows.
    post_error(failed);
    return;
  }
  post_start_failed(failed);
}

void Call::post_start_failed(const SysError& e) {
  exec_error_ = e;
  exit_posted_ = true;  // no exit event for a command that never ran
  env_->post(CallEvent::of(CallEvent::kStartFailed, id_, e));
}

SysError Call::settle_exec(int wait_ms, bool* pending, bool quiet) {
  collect_exec(wait_ms, false, quiet);
  // Whatever acts on the command (a signal, a ladder, a kill at teardown)
  // needs it to exist: a queued clone is waited for (JavaScript's asks say
  // "not yet" instead).
  if (cloning_ && !pending) adopt_clone();
  if (pending) *pending = exec_ && !exec_unknown_;
  return exec_error_;
}

}  // namespace proctree
