// One tool call: its main process (by pidfd), its cgroup leaf, and the kill
// ladder that empties it. Everything that happens to a call is posted as a
// CallEvent to its host, which delivers them in order: exit, cleanup, empty.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cgroup.h"
#include "pidfd.h"
#include "procfs.h"
#include "spawn.h"

namespace proctree {

struct CleanupReport {
  std::string reason;     // timeout | abort | terminate | leftovers | shutdown
  int signaled = 0;       // members that got the graceful signal (exactly once each)
  int killed = 0;         // members still alive when grace ran out
  int escaped = 0;        // members outside the main process's group or session
  bool froze = false;     // the cgroup froze before members were read
  std::vector<ProcessInfo> leftovers;  // alive after the whole ladder: a failure
  double duration_ms = 0;
};

struct CallEvent {
  enum Kind { kExit, kCleanup, kEmpty, kError };
  Kind kind;
  uint64_t call_id;
  ExitStatus exit;
  CleanupReport report;
  SysError error;
};

class Reactor;

class CallHost {
 public:
  virtual ~CallHost() = default;
  virtual uv_loop_t* loop() = 0;
  virtual Reactor& reactor() = 0;
  virtual void post(CallEvent event) = 0;
  // Deliver what was posted, now: called at the end of a libuv callback.
  virtual void wake() = 0;
  // A disposed call's handles have closed and it is about to be freed.
  virtual void on_call_disposed() = 0;
};

class Call {
 public:
  Call(CallHost* host, uint64_t id, CgroupDir cgroup, std::string cgroup_rel, SpawnResult proc);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Registers the pidfd and the cgroup.events watch. On error the call is
  // unusable and must be disposed after killing its cgroup.
  SysError start();

  uint64_t id() const { return id_; }
  pid_t pid() const { return proc_.pid; }
  const std::string& cgroup_path() const { return cgroup_.path(); }
  bool finished() const { return finished_; }
  // Whether this call keeps the event loop alive (ChildProcess#ref/unref).
  bool referenced() const { return ref_; }
  void set_referenced(bool ref);

  void handle_process_exit();
  void handle_cgroup_events();

  // The ladder: freeze, signal every member once by pidfd, thaw, wait grace
  // for populated 0, cgroup.kill, wait, rmdir. Idempotent. Returns whether a
  // cleanup event has been or will be posted (false: the tree was already
  // gone before any ladder ran).
  bool terminate(int grace_ms, int sig, const std::string& reason);
  // One signal to every member now, no escalation. Returns how many got it.
  int signal_all(int sig);
  std::vector<pid_t> members() const;
  // For environment teardown: cgroup.kill without waiting.
  void kill_now();
  // After kill_now and the cgroup emptied: remove what is left, synchronously.
  void finish_sync();
  bool populated_now() const;

  // Frees the call once its timer handle has closed. Call once, when finished.
  void dispose();

 private:
  enum class Phase { kIdle, kFreezing, kGrace, kKilling, kDone };

  void refresh_events();
  void after_freeze_requested();
  void signal_members_and_thaw();
  void start_kill();
  void ladder_done();
  void ladder_gave_up();
  void maybe_finish();
  void start_timer(int ms);
  void stop_timer();
  static void on_timer(uv_timer_t* t);
  // pidfd_open + membership check + signal; false if not ours or gone.
  bool signal_member(pid_t pid, int sig, bool count_escape);

  CallHost* host_;
  uint64_t id_;
  CgroupDir cgroup_;
  std::string cgroup_rel_;  // hierarchy-relative path, as in /proc/<pid>/cgroup
  SpawnResult proc_;
  uv_timer_t* timer_ = nullptr;
  int wd_ = -1;

  bool exited_ = false;
  bool populated_ = true;
  bool frozen_ = false;
  bool finished_ = false;
  bool exit_posted_ = false;
  bool ref_ = true;

  Phase phase_ = Phase::kIdle;
  bool ladder_started_ = false;
  bool report_ready_ = false;
  bool report_posted_ = false;
  int grace_ms_ = 0;
  int term_signal_ = 15;
  uint64_t ladder_start_ns_ = 0;
  CleanupReport report_;
};

}  // namespace proctree
