// The pgroup tier, the baseline when nothing stronger works here: the command
// leads a new session, and the call's tree is whatever /proc shows in that
// session or process group. The ladder signals each of those by pidfd,
// waits grace, SIGKILLs what is left. A descendant that calls setsid() (or
// setpgid() into another session's group) is invisible to it: it is neither
// signalled nor reported, and CleanupReport.verified is 'none' to say so.
#pragma once

#include <string>
#include <vector>

#include "loop/call.h"

namespace proctree {

class PgroupCall : public Call {
 public:
  PgroupCall(CallHost* host, uint64_t id, SpawnResult proc) : Call(host, id, std::move(proc)) {}

  SysError start() override;
  Tier tier() const override { return Tier::kPgroup; }

  void handle_process_exit() override;
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
  // Signals every visible member not yet in `done`, re-scanning until a scan
  // finds no one new. Returns how many got it.
  int signal_rounds(int sig, std::vector<pid_t>* done, bool count_escape);
  void start_kill();
  void ladder_done();
  void maybe_finish();

  bool exited_ = false;
  Phase phase_ = Phase::kIdle;
  uint64_t phase_end_ns_ = 0;
};

}  // namespace proctree
