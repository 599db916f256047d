// Everything proctree keeps for one Node environment (the main thread or a
// worker): the table of live calls, the queue of their events waiting to be
// delivered to JavaScript in order, the reactor that watches them, and the
// cgroup subtrees their leaves live in. Spawning a call in any tier starts
// here.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernel/broker_client.h"
#include "kernel/cgroup.h"
#include "kernel/spawn.h"
#include "ladder/confinement.h"
#include "loop/call.h"
#include "loop/file_writer.h"
#include "loop/reactor.h"
#include "loop/streams.h"
#include "loop/subtrees.h"

namespace proctree {

// Where events go: the binding (to JavaScript), or a unit test.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void deliver(const CallEvent& event) = 0;
};

struct SpawnedCall {
  uint64_t id = 0;
  pid_t pid = -1;    // the command's pid; -1 while a shim has not reported it
  // The command was cloned and may not have exec'd yet: Call::settle_exec()
  // says whether it did (no event does).
  bool exec_pending = false;
  pid_t shim = -1;   // pidns/subreaper: the shim's pid
  std::string cgroup;
  CloneMethod method = CloneMethod::kClone3;
  // How this call's tier proves its tree empty (Confinement::verified()).
  const char* verified = "";
  // The cgroup tier made a subtree now and could not start the guardian:
  // the call runs, but is not stopped if the harness is SIGKILLed.
  SysError guardian_error;
};

struct SpawnOptions {
  Tier tier = Tier::kCgroup;
  std::string group;   // the subtree's directory name (cgroup tier)
  std::string helper;  // the proctree-helper executable (shims, guardian)
};

class Environment {
 public:
  Environment(uv_loop_t* loop, EventSink* sink);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  // Where call cgroups go; fails when there is no cgroup2 showing ours.
  SysError location(CgroupLocation* out);

  // Starts req in a new call of the given tier. On error nothing is left:
  // no process, no directory, no descriptor.
  SysError spawn(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);

  // Opens the reactor (once): before anything is watched.
  SysError ensure_open();
  // Calls' pipes and terminals, read and written here (see streams.h).
  Streams& streams() { return streams_; }

  Call* find(uint64_t id);
  ChildStack& child_stack() { return stack_; }
  void set_referenced(uint64_t id, bool ref);
  // The call's leaf is named by a job: never reused. *base: its counters
  // when the call began (a reused leaf carries its earlier calls').
  void retire(uint64_t id, CpuCounters* base);

  // Runs the ladder on many calls at once (a supervisor's shutdown): every
  // cgroup subtree they share is frozen with one write, each call's ladder
  // signals its members while it is frozen, and the subtree is thawed once
  // the last of them is done with it. Returns, per call, whether a cleanup
  // event has been or will be posted.
  std::vector<bool> terminate_group(const std::vector<uint64_t>& ids, const std::vector<int>& sigs, int grace_ms,
                                    const std::string& reason);
  void group_freeze_released(uint64_t call_id);
  // Members a ladder may signal now (LadderHost::pass_budget): all ladders
  // together get a few milliseconds of each turn of the loop. A call granted
  // none is resumed (Call::resume_pass) in a later turn.
  size_t take_pass_budget(uint64_t call_id, size_t wanted);

  // Environment teardown or process exit: SIGKILL every call, wait a bounded
  // time for the trees to empty, remove every directory we made.
  void shutdown_sync(int wait_ms);
  // One synchronous SIGKILL round over every call (see shutdown_sync).
  void kill_all_sync();
  // Closes libuv handles; done() runs when all have closed.
  void close_handles(void (*done)(void*), void* arg);

  // For calls.
  uv_loop_t* loop() { return loop_; }
  Reactor& reactor() { return reactor_; }
  SlowWrites* slow_writes() { return &writes_; }
  void post(CallEvent event);
  // Deliver what was posted, now: called at the end of a libuv callback.
  void flush();
  void on_call_ref_changed(bool was, bool now);
  void on_call_disposed();

  // For the reactor.
  void on_main_readable(uint64_t id);
  void on_control_readable(uint64_t id);
  void on_change(uint64_t id);
  void on_members_exited(uint64_t id, size_t n);
  void on_broker_socket(bool writable);
  void on_broker_process();

 private:
  // Unique in the process: a call's id names its leaf (c<id>).
  static uint64_t next_call_id();
  SysError start_command(SpawnRequest* req, SpawnResult* proc, PendingExec* exec);
  SysError spawn_cgroup(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  SysError spawn_shim(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  SysError spawn_brokered(const SpawnOptions& opts, const SpawnRequest& req, SpawnedCall* out);
  SysError ensure_broker(const std::string& helper);
  void broker_gone(const SysError& e);
  SysError adopt(Call* call, SpawnedCall* out);
  void reap_finished();
  void handle_closed();
  // uv_close, then delete; counted until its close callback has run.
  template <typename Handle>
  void close_handle(Handle** handle);

  uv_loop_t* loop_;
  EventSink* sink_;
  Reactor reactor_;
  Subtrees subtrees_;
  FileWriter writes_;
  Streams streams_{this};
  bool opened_ = false;
  bool closing_ = false;
  SysError open_error_;
  ChildStack stack_;
  std::unordered_map<uint64_t, Call*> calls_;
  // The systemd tier: one broker per environment, started on first use,
  // living in the transient scope it asked the user manager for; the calls
  // waiting for or running under it, by the broker's request id.
  std::unique_ptr<BrokerClient> broker_;
  SysError broker_error_;  // set once it is gone: later spawns fail with it
  std::unordered_map<uint64_t, uint64_t> brokered_;  // request id -> call id
  // Subtrees frozen by terminate_group, and the calls still using each freeze.
  struct GroupFreeze {
    CgroupDir subtree;
    size_t holders = 0;
  };
  std::unordered_map<std::string, GroupFreeze> group_freezes_;  // by subtree path
  std::unordered_map<uint64_t, std::string> freeze_holder_;     // call id -> subtree path
  size_t referenced_ = 0;  // live calls that keep the loop alive
  std::deque<CallEvent> pending_;
  bool flushing_ = false;
  bool reaping_ = false;
  uv_idle_t* budget_refill_ = nullptr;
  std::deque<uint64_t> budget_waiters_;
  // Ladders of terminate_group not started yet, for want of time this turn.
  struct DeferredStop {
    uint64_t id;
    int sig;
    int grace_ms;
    std::string reason;
    bool group_frozen;
  };
  std::deque<DeferredStop> deferred_stops_;
  uint64_t turn_start_ns_ = 0;  // 0: this turn has not spent any time yet
  bool turn_has_time();
  void start_turns();
  // The next turn delivers what is pending (and the loop stays alive for it).
  void deliver_next_turn();
  static void on_budget_turn(uv_idle_t* h);
  // What ladders may spend of one turn of the loop, and how many members
  // they may ask for at once within it.
  static constexpr uint64_t kTurnBudgetNs = 2000000;
  static constexpr size_t kMembersPerGrant = 32;
  int handles_open_ = 0;
  void (*closed_cb_)(void*) = nullptr;
  void* closed_arg_ = nullptr;
};

}  // namespace proctree
