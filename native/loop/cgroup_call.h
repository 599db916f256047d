// The cgroup tier: the call's tree is its cgroup leaf. The ladder freezes it,
// signals every member once by pidfd, thaws, waits grace, then cgroup.kill;
// cgroup.events' populated 0 proves it empty. Kernels without cgroup.kill
// (< 5.14) get freeze + SIGKILL each member + thaw, repeated until populated
// 0; kernels without cgroup.freeze (< 5.2) get signal-and-rescan rounds.
#pragma once

#include <string>
#include <vector>

#include "loop/call.h"
#include "kernel/cgroup.h"

namespace proctree {

class CgroupCall : public Call {
 public:
  CgroupCall(CallHost* host, uint64_t id, CgroupDir cgroup, std::string cgroup_rel, SpawnResult proc);

  SysError start() override;
  Tier tier() const override { return Tier::kCgroup; }
  const std::string& cgroup_path() const { return cgroup_.path(); }

  void handle_process_exit() override;
  void handle_cgroup_events() override;
  bool terminate(int grace_ms, int sig, const std::string& reason) override;
  int signal_all(int sig) override;
  std::vector<pid_t> members() const override;
  void kill_now() override;
  void finish_sync() override;
  bool populated_now() const override;

 private:
  enum class Phase { kIdle, kFreezing, kGrace, kKilling, kDone };

  void unwatch() override;
  void on_timeout() override;
  void refresh_events();
  void signal_members_and_thaw();
  void start_kill();
  // cgroup.kill, or where it is missing, SIGKILL every member (frozen first
  // when cgroup.freeze exists, so none can fork between read and kill).
  void kill_round();
  void ladder_done();
  void ladder_gave_up();
  void maybe_finish();
  // Signals each listed process that is (still) in the call's cgroup, by
  // pidfd; graceful: also SIGCONT, escape counting and member watching.
  // Returns how many got it.
  int signal_listed(const std::vector<pid_t>& pids, int sig, bool graceful);
  // signal_listed over cgroup.procs, re-read up to max_rounds times until no
  // new member shows up; each process gets the signal once.
  int signal_rounds(int sig, bool graceful, int max_rounds);

  CgroupDir cgroup_;
  std::string cgroup_rel_;  // hierarchy-relative path, as in /proc/<pid>/cgroup
  int wd_ = -1;
  bool has_kill_ = true;
  bool has_freeze_ = true;

  bool exited_ = false;
  bool populated_ = true;
  bool frozen_ = false;

  Phase phase_ = Phase::kIdle;
  int kill_rounds_ = 0;
  uint64_t freeze_deadline_ns_ = 0;
  int freeze_recheck_ms_ = 1;
  static constexpr size_t kMaxWatchedMembers = 256;
  std::vector<Fd> member_fds_;  // pidfds of signalled members, in the reactor
};

}  // namespace proctree
