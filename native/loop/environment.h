// Everything proctree keeps for one Node environment (the main thread or a
// worker): the table of live calls, the queue of their events waiting to be
// delivered to JavaScript in order, the reactor that watches them, and the
// cgroup subtrees their leaves live in. Spawning a call in any tier starts
// here.
//
// Its event loop is its own (no libuv: only Node-API, which Node, Bun and
// Deno all have): a Waiter thread blocks in epoll_wait on the reactor and
// asks the host (the binding) for a turn on the JavaScript thread, unless the
// host's own loop watches the reactor (LoopHost::watch_reactor); timers are
// a timerfd in the reactor's set; slow cgroup writes go to a FileWriter
// thread. Everything else runs on the JavaScript thread, in turn() and
// deliver_next().
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernel/broker_client.h"
#include "kernel/cgroup.h"
#include "kernel/spawn.h"
#include "ladder/confinement.h"
#include "loop/call.h"
#include "loop/file_writer.h"
#include "loop/ports_worker.h"
#include "loop/reactor.h"
#include "loop/spawner.h"
#include "loop/streams.h"
#include "loop/subtrees.h"
#include "loop/timers.h"
#include "loop/waiter.h"

namespace proctree {

// Where events go: the binding (to JavaScript), or a unit test.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void deliver(const CallEvent& event) = 0;
};

// What runs the environment's turns: the binding (a thread-safe function of
// Node-API), or a unit test.
class LoopHost {
 public:
  virtual ~LoopHost() = default;
  // From the Waiter's thread: run Environment::turn() on the JavaScript
  // thread, as a task of its own.
  virtual void wake() = 0;
  // On the JavaScript thread: run Environment::deliver_next() there soon,
  // once the current callback into JavaScript has returned (and its
  // microtasks have run), within the same turn (Node: the same task).
  virtual void deliver_later() = 0;
  // On the JavaScript thread: whether the runtime's loop must stay alive for
  // us (a referenced call, events to deliver, writes in flight).
  virtual void keep_alive(bool alive) = 0;
  // On the JavaScript thread, once, when the reactor opens: whether the
  // runtime's own event loop watches fd (Node's, see binding/host_loop.cc).
  // If it does, no Waiter thread runs: the runtime calls ready(arg) on the
  // JavaScript thread, in a task of its own, whenever fd is readable.
  // unwatch_reactor(): no ready() after it returns.
  virtual bool watch_reactor(int /*fd*/, void (*/*ready*/)(void*), void* /*arg*/) { return false; }
  virtual void unwatch_reactor() {}
  // With the reactor watched: call ready(arg) once more in the loop's next
  // iteration, after its timers, without waiting for a descriptor (libuv's
  // idle phase, as setImmediate). false: not possible (the wake eventfd
  // does it).
  virtual bool turn_soon() { return false; }
};

struct SpawnedCall {
  uint64_t id = 0;
  pid_t pid = -1;    // the command's pid; -1 while a shim has not reported it, or the clone is deferred
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
  LeafLimits limits;   // the cgroup tier only (kernel/limits.h)
  // A sealed call (the cgroup tier only; loop/environment_seal.cc): the shim
  // in the leaf, as init of new user, PID, mount and cgroup namespaces.
  bool seal = false;
  // The cgroup tier: queue the clone for a spawner thread and return before
  // the child exists (the JavaScript side asks for this past its budget of
  // clones in one turn); pid and exec report come later (Call::settle_exec).
  bool defer = false;
};

class Environment {
 public:
  Environment(EventSink* sink, LoopHost* host);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  // Where call cgroups go; fails when there is no cgroup2 showing ours.
  SysError location(CgroupLocation* out);

  // Starts req in a new call of the given tier. On error nothing is left:
  // no process, no directory, no descriptor.
  SysError spawn(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  // Where deferred clones are waited for (Call::adopt_clone).
  Spawner& spawner() { return spawner_; }
  // A call's exec report is due within Call::kExecReportWaitMs from now:
  // past that, Call::on_exec_overdue().
  void watch_exec(uint64_t id);

  // Opens the reactor, its timers and the Waiter (once): before anything is
  // watched.
  SysError ensure_open();
  // The Waiter's wake-up, on the JavaScript thread: one turn of the loop.
  void turn();
  // LoopHost::deliver_later's call: the next event, or the turn going on
  // while the reactor is ready, within the same task.
  void deliver_next();
  // Calls' pipes and terminals, read and written here (see streams.h).
  Streams& streams() { return streams_; }

  Call* find(uint64_t id);
  // What the call's tree listens on, asked off this thread: the answer is a
  // CallEvent::kPorts whose call_id is *request (an unknown call: none).
  SysError ports(uint64_t call_id, uint64_t* request);
  // The same for any cgroup2 directory (its leaf and the cgroups below it).
  SysError ports_of_cgroup(const std::string& path, uint64_t* request);
  // The sockets made in the cgroups with these ids, whoever holds them now
  // (a tree that is gone, its leaf maybe removed): kernel/sockets.h.
  SysError ports_of_cgroup_ids(std::vector<unsigned long long> ids, uint64_t* request);
  // What /proc says of these processes, read on the same thread: a kPorts
  // event whose call_id is *request, `described`, with the infos of those
  // still there.
  SysError describe(std::vector<pid_t> pids, uint64_t* request);
  ChildStack& child_stack() { return stack_; }
  void set_referenced(uint64_t id, bool ref);
  // The call's leaf is named by a job: never reused. *base: its counters
  // when the call began (a reused leaf carries its earlier calls').
  void retire(uint64_t id, CpuCounters* base);

  // Runs the ladder on many calls at once (a supervisor's shutdown): the
  // ladders start in this turn while it has time, the rest in the next
  // turns, and all of them share each turn's few milliseconds for their
  // signal passes. Returns, per call, whether a cleanup event has been or
  // will be posted.
  std::vector<bool> terminate_group(const std::vector<uint64_t>& ids, const std::vector<int>& sigs, int grace_ms,
                                    const std::string& reason);
  // Members a ladder may signal now (LadderHost::pass_budget): all ladders
  // together get a few milliseconds of each turn of the loop. A call granted
  // none is resumed (Call::resume_pass) in a later turn.
  size_t take_pass_budget(uint64_t call_id, size_t wanted);
  // Tells the ladders whose passes came back, while the turn has time; false
  // if some are left for the next turn.
  bool resume_returned_passes();
  // A ladder's pass over a large tree, run on the passes' thread
  // (LadderHost::run_elsewhere); the call's on_pass_returned() follows.
  bool run_pass_elsewhere(uint64_t call_id, JobThread::Work work);

  // Environment teardown or process exit: SIGKILL every call, wait a bounded
  // time for the trees to empty, remove every directory we made.
  void shutdown_sync(int wait_ms);
  // One synchronous SIGKILL round over every call (see shutdown_sync).
  void kill_all_sync();
  // Stops the Waiter and the writer (joined), frees every call, closes every
  // descriptor: after shutdown_sync, at the environment's teardown.
  void close();

  // For calls.
  Timers* timers() { return &timers_; }
  Reactor& reactor() { return reactor_; }
  SlowWrites* slow_writes() { return &writes_; }
  void post(CallEvent event);
  // Deliver what was posted: one event per callback into JavaScript (its
  // microtasks run before the next, as after any I/O callback), the rest
  // later in the turn, or in the next turn once the turn's time is spent.
  void flush();
  void on_call_ref_changed(bool was, bool now);

  // For the reactor.
  void on_main_readable(uint64_t id);
  void on_control_readable(uint64_t id);
  void on_change(uint64_t id);
  void on_members_exited(uint64_t id, size_t n);
  void on_broker_socket(bool writable);
  void on_broker_process();
  void on_timers();
  void on_wake();
  void on_writes_done();
  void on_ports_done();
  void on_passes_done();
  // Spawner threads finished spawns: their exec reports are in.
  void on_spawns_done();

 private:
  SysError ask_ports(PortsQuery q, uint64_t* request);
  // Unique in the process: a call's id names its leaf (c<id>).
  static uint64_t next_call_id();
  // here: nothing can hold the child before its exec (Spawner::start).
  SysError start_command(uint64_t id, SpawnRequest* req, SpawnResult* proc, Ref<SpawnJob>* exec, bool here);
  SysError spawn_cgroup(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  // Whether a new call keeps its leaf's descriptors open (see spawn_cgroup).
  bool keep_leaf_descriptors(int dir_fd);
  static constexpr size_t kLeafDescriptorsKeptBelow = 16;
  rlim_t fd_limit_ = 0;  // RLIMIT_NOFILE as last read
  // Some live call may hold its leaf's descriptors (until one is refused them).
  bool leaf_descriptors_kept_ = false;
  // The call's leaf (a kept one or a new one) as req->cgroup_dir, then
  // start(leaf). A kept leaf that someone removed, so that the clone could
  // not reach it, is dropped and the call gets a new one, once. On an error
  // the leaf is removed (its path completing the error's).
  SysError start_in_leaf(const SpawnOptions& opts, uint64_t id, SpawnRequest* req, CgroupDir* leaf, CpuCounters* base,
                         SpawnedCall* out, const std::function<SysError(CgroupDir&)>& start);
  SysError spawn_shim(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  // Turns *req into the start of `proctree-helper <mode>` (pidns init,
  // subreaper, seal) that runs the command: the command's argv after the
  // shim's, *theirs (the shim's end of *ours, a control socketpair) after the
  // command's fds. The caller adds what its mode needs (namespaces, pdeathsig).
  static SysError shim_request(const SpawnOptions& opts, const char* mode, SpawnRequest* req, Fd* ours, Fd* theirs);
  SysError spawn_sealed(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out);
  SysError spawn_brokered(const SpawnOptions& opts, const SpawnRequest& req, SpawnedCall* out);
  SysError ensure_broker(const std::string& helper);
  void broker_gone(const SysError& e);
  SysError adopt(Call* call, SpawnedCall* out);
  void reap_finished();
  // Whether the runtime's loop must stay alive for us, told to the host.
  void update_keep_alive();
  // Ask for another turn (the wake eventfd).
  void signal_wake();
  void schedule_delivery();

  EventSink* sink_;
  LoopHost* host_;
  Timers timers_;
  Reactor reactor_;
  Subtrees subtrees_;
  FileWriter writes_;
  PortsWorker ports_;
  JobThread passes_{"proctree-pass", 256 * 1024};
  uint64_t next_ports_request_ = 0;
  Waiter waiter_;
  bool host_watches_ = false;  // the runtime's loop watches the reactor, not waiter_
  bool host_turn_ = false;     // inside a turn the runtime's loop called
  bool resume_pending_ = false;  // signal_wake() through the host: on_wake's work is due
  // What the wake eventfd resumes (on_wake after its read): deferred stops,
  // ladders waiting for time.
  void resume_waiting();
  void host_turn();
  Fd wake_;
  bool wake_signalled_ = false;
  bool kept_alive_ = false;
  bool dispatching_ = false;      // inside turn()'s reactor dispatch
  bool delivery_scheduled_ = false;  // a deliver_next() is coming
  bool continuing_ = false;       // ...within the same turn
  bool yielded_ = false;          // the turn ran out of time with work left
  Streams streams_{this};
  bool opened_ = false;
  bool closing_ = false;
  SysError open_error_;
  ChildStack stack_;
  Spawner spawner_;
  std::unordered_map<uint64_t, Call*> calls_;
  // The systemd tier: one broker per environment, started on first use,
  // living in the transient scope it asked the user manager for; the calls
  // waiting for or running under it, by the broker's request id.
  std::unique_ptr<BrokerClient> broker_;
  SysError broker_error_;  // set once it is gone: later spawns fail with it
  std::unordered_map<uint64_t, uint64_t> brokered_;  // request id -> call id
  size_t referenced_ = 0;  // live calls that keep the loop alive
  std::deque<CallEvent> pending_;
  bool flushing_ = false;
  bool reaping_ = false;
  std::deque<uint64_t> budget_waiters_;
  // Ladders of terminate_group not started yet, for want of time this turn.
  struct DeferredStop {
    uint64_t id;
    int sig;
    int grace_ms;
    std::string reason;
  };
  std::deque<DeferredStop> deferred_stops_;
  // Calls whose pass came back from the passes' thread, not yet told
  // (resume_returned_passes).
  std::deque<uint64_t> returned_passes_;
  uint64_t turn_start_ns_ = 0;  // 0: this turn has not spent any time yet
  // When our last callback into the runtime ended, and the slice it was in.
  uint64_t last_end_ns_ = 0;
  uint64_t last_slice_start_ns_ = 0;
  // fresh: a task of the runtime's own loop (the host's watch), never the
  // same task as the last callback.
  void begin_slice(bool fresh = false);
  void end_slice();
  // again: the same turn goes on (turn_again_), its slice too.
  void run_turn(bool again);
  bool turn_again_ = false;
  bool turn_has_time();
  // Ladders waiting for time (deferred stops, passes) go on next turn.
  void start_turns();
  // What ladders may spend of one turn of the loop, and how many members
  // they may ask for at once within it.
  static constexpr uint64_t kTurnBudgetNs = 2000000;
  // A group stop of this many calls or more sends their passes to the
  // passes' thread (terminate_group).
  static constexpr size_t kGroupPassesElsewhere = 4;
  static constexpr size_t kMembersPerGrant = 32;
  // A callback that starts sooner than this after the last one ended goes on
  // with its slice (see turn()); a yielded turn waits longer than this, so
  // the slice after it is new.
  static constexpr uint64_t kTurnGapNs = 100000;
  static_assert(kTurnGapNs < static_cast<uint64_t>(Waiter::kYieldNs), "a yield must start a new slice");

  // Calls whose exec had not reported at spawn, by when they are overdue
  // (Call::kExecReportWaitMs later; the same delay for all, so in order).
  struct ExecDue {
    uint64_t deadline_ns;
    uint64_t id;
  };
  std::deque<ExecDue> exec_due_;
  void on_exec_timer();
  Timer exec_timer_{&timers_, [this] { on_exec_timer(); }};
};

}  // namespace proctree
