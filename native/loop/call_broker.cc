// A call of the systemd tier, as the broker reports it (environment_broker.cc
// reads the broker's messages): the command started in its scope's leaf,
// could not start, exited, or the broker was lost with the tree still there.
#include <signal.h>

#include <memory>
#include <utility>

#include "ladder/cgroup_confinement.h"
#include "loop/call.h"
#include "loop/environment.h"

namespace proctree {

void Call::on_broker_spawned(pid_t pid, Fd pidfd, CgroupDir leaf) {
  if (!starting_ || finished_) return;
  starting_ = false;
  command_ = pid;
  main_.pid = pid;
  main_.pidfd = std::move(pidfd);
  confinement_ = std::make_unique<CgroupConfinement>(std::move(leaf), tier_, env_->slow_writes());
  ladder_.bind(confinement_.get());
  CallEvent ev = CallEvent::of(CallEvent::kStarted, id_);
  ev.pid = pid;
  ev.cgroup = static_cast<CgroupConfinement*>(confinement_.get())->leaf().path();
  env_->post(std::move(ev));
  if (pending_terminate_) {
    pending_terminate_ = false;
    terminate(pending_grace_, pending_sig_, pending_reason_);
  }
}

void Call::on_broker_failed(const SysError& e) {
  if (!starting_ || finished_) return;
  starting_ = false;
  exit_posted_ = true;  // no exit event for a command that never ran
  pending_terminate_ = false;
  env_->post(CallEvent::of(CallEvent::kStartFailed, id_, e));
  finished_ = true;
  env_->post(CallEvent::of(CallEvent::kEmpty, id_));
}

void Call::on_broker_exited(ExitStatus st) {
  if (main_exited_ || finished_) return;
  main_exited_ = true;
  post_exit(st);
  on_change();
}

void Call::on_broker_lost(const SysError& e) {
  if (finished_) return;
  if (starting_) {
    on_broker_failed(e);
    return;
  }
  // Its exit status will never come: stop what is left in the leaf (which we
  // own), and end the call once the leaf is empty.
  post_error(e);
  kill_now();
  if (!main_exited_) on_broker_exited(ExitStatus{true, -1, SIGKILL});
}

}  // namespace proctree
