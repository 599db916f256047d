// The pidns and subreaper tiers: the call's main process is a shim (the
// helper executable as PID 1 of a new PID namespace, or as a subreaper) that
// started the command and reaps everything below it, so the call's tree is
// "the shim's descendants". The ladder signals each of them once by pidfd
// (re-walking until a walk finds no one new), waits grace, then kills: for
// pidns by SIGKILL to the init (the kernel kills the namespace, race-free);
// for subreaper by SIGKILL rounds until the shim has no child left. The
// shim's own exit (wait: ECHILD) is the proof the tree is empty.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "loop/call.h"
#include "kernel/fd.h"

namespace proctree {

class ShimCall : public Call {
 public:
  ShimCall(CallHost* host, uint64_t id, Tier tier, SpawnResult shim, Fd control, pid_t command);

  SysError start() override;
  Tier tier() const override { return tier_; }
  pid_t command_pid() const { return command_; }

  void handle_process_exit() override;
  void handle_control() override;
  bool terminate(int grace_ms, int sig, const std::string& reason) override;
  int signal_all(int sig) override;
  std::vector<pid_t> members() const override;
  void kill_now() override;
  void finish_sync() override;
  bool populated_now() const override;

 private:
  enum class Phase { kIdle, kGrace, kKilling, kDone };

  void unwatch() override;
  void on_timeout() override;
  void drain_control();
  void post_exit(ExitStatus st);
  // Signals every descendant not in `done` once, re-walking until a walk
  // finds no one new. Returns how many got it.
  int signal_rounds(int sig, std::unordered_set<pid_t>* done, bool count_escape);
  bool signal_member(pid_t pid, int sig, const std::unordered_set<pid_t>& tree, bool count_escape);
  void start_kill();
  void ladder_done();
  void ladder_gave_up();
  void maybe_finish();

  Tier tier_;
  Fd control_;
  pid_t command_;
  bool control_watched_ = false;
  bool shim_exited_ = false;

  Phase phase_ = Phase::kIdle;
  uint64_t kill_start_ns_ = 0;
};

}  // namespace proctree
