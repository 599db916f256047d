// One tool call: its main process (by pidfd), the confinement that holds its
// tree (a cgroup leaf, a PID namespace, a subreaper shim or a session), and
// the kill ladder that empties it. Everything that happens to a call is
// posted as a CallEvent to its host, which delivers them in order: exit,
// cleanup, empty. One subclass per tier: CgroupCall, ShimCall, PgroupCall.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/pidfd.h"
#include "kernel/procfs.h"
#include "kernel/spawn.h"

namespace proctree {

enum class Tier { kCgroup, kPidns, kSubreaper, kPgroup };
const char* tier_name(Tier t);

struct CleanupReport {
  std::string reason;     // timeout | abort | terminate | leftovers | shutdown
  int signaled = 0;       // members that got the graceful signal (exactly once each)
  int killed = 0;         // members still alive when grace ran out
  int escaped = 0;        // members outside the main process's group or session
  bool froze = false;     // the cgroup froze before members were read
  // How emptiness was proved: cgroup.events | pidns | subreaper | none.
  std::string verified = "cgroup.events";
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

// How long the kill phase of any tier may take before what is left is
// reported as leftovers, and how often a SIGKILL round repeats where the
// kernel offers no one-shot kill (no cgroup.kill; the subreaper's walk).
constexpr int kKillWaitMs = 5000;
constexpr int kKillRoundMs = 20;

// What every tier's kill ladder keeps: started once, one report, posted once.
struct Ladder {
  bool started = false;
  bool report_ready = false;
  bool report_posted = false;
  int grace_ms = 0;
  int term_signal = 15;
  uint64_t start_ns = 0;
  CleanupReport report;

  void begin(const std::string& reason, int grace, int sig, uint64_t now);
  // The ladder is over: the report is ready, its duration measured.
  void finish(uint64_t now);
  // The ladder ran out of time with `alive` still there: they become the
  // report's leftovers (a failure), then finish.
  void give_up(const std::vector<pid_t>& alive, uint64_t now);
};

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
  Call(CallHost* host, uint64_t id, SpawnResult proc) : host_(host), id_(id), proc_(std::move(proc)) {}
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  virtual ~Call() = default;

  // Registers what the reactor watches. On error the call is unusable and
  // must be disposed after kill_now + finish_sync.
  virtual SysError start() = 0;

  uint64_t id() const { return id_; }
  pid_t pid() const { return proc_.pid; }
  virtual Tier tier() const = 0;
  bool finished() const { return finished_; }
  // Whether this call keeps the event loop alive (ChildProcess#ref/unref).
  bool referenced() const { return ref_; }
  void set_referenced(bool ref);

  // Reactor callbacks: the pidfd of the process we spawned turned readable,
  // the cgroup.events of the call changed, the shim's control socket spoke.
  virtual void handle_process_exit() = 0;
  virtual void handle_cgroup_events() {}
  virtual void handle_control() {}

  // The ladder: the graceful signal once to every member, grace, SIGKILL to
  // what is left, verified empty. Idempotent. Returns whether a cleanup event
  // has been or will be posted (false: the tree was already gone).
  virtual bool terminate(int grace_ms, int sig, const std::string& reason) = 0;
  // One signal to every member now, no escalation. Returns how many got it.
  virtual int signal_all(int sig) = 0;
  virtual std::vector<pid_t> members() const = 0;
  // For environment teardown: SIGKILL everything without waiting.
  virtual void kill_now() = 0;
  // After kill_now: reap and remove what is left, synchronously.
  virtual void finish_sync() = 0;
  // Whether anything of the tree is still alive (teardown polling).
  virtual bool populated_now() const = 0;

  // Frees the call once its timer handle has closed. Call once, when finished.
  void dispose();

 protected:
  // Stops watching everything this call registered with the reactor.
  virtual void unwatch() = 0;
  virtual void on_timeout() = 0;
  void start_timer(int ms);
  void stop_timer();
  void ensure_timer();
  static void on_timer(uv_timer_t* t);
  static uint64_t now_ns() { return uv_hrtime(); }

  // Posts the ladder's report as the 'cleanup' event, once it is ready.
  void post_report_once();

  CallHost* host_;
  uint64_t id_;
  SpawnResult proc_;
  uv_timer_t* timer_ = nullptr;
  bool finished_ = false;
  bool ref_ = true;
  bool exit_posted_ = false;
  Ladder ladder_;
};

}  // namespace proctree
