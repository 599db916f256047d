// Every live call of one Node environment (the main thread or a worker): the
// cgroup subtrees they live in, the reactor that watches them, and the queue
// of events waiting to be delivered to JavaScript, in order.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "loop/call.h"
#include "kernel/cgroup.h"
#include "loop/reactor.h"
#include "kernel/spawn.h"

namespace proctree {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void deliver(const CallEvent& event) = 0;
};

struct SpawnedCall {
  uint64_t id = 0;
  pid_t pid = -1;  // the command's pid as we see it (not the shim's)
  pid_t shim = -1;  // pidns/subreaper: the shim's pid, else -1
  std::string cgroup;
  CloneMethod method = CloneMethod::kClone3;
};

class Registry : public CallHost, public ReactorClient {
 public:
  Registry(uv_loop_t* loop, EventSink* sink);
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry() override;

  // Where call cgroups go; fails when there is no writable cgroup2.
  SysError location(CgroupLocation* out);

  // group: the subtree directory name below the harness's cgroup
  // (subtree_prefix() and a suffix), created on first use.
  SysError spawn(const std::string& group, SpawnRequest req, SpawnedCall* out);
  // The other tiers: no cgroup. helper: the proctree-helper executable (the
  // shim of pidns and subreaper).
  SysError spawn_tier(Tier tier, const std::string& helper, SpawnRequest req, SpawnedCall* out);

  // How long an empty subtree is kept before it is removed.
  static constexpr uint64_t kGroupLingerMs = 1000;

  Call* find(uint64_t id);
  ChildStack& child_stack() { return stack_; }
  void set_referenced(uint64_t id, bool ref);
  size_t live() const { return calls_.size(); }

  // Environment teardown or process exit: cgroup.kill every call, wait a
  // bounded time for the trees to empty, remove every directory we made.
  void shutdown_sync(int wait_ms);
  // Closes libuv handles; done() runs when all have closed.
  void close_handles(void (*done)(void*), void* arg);

  // CallHost
  uv_loop_t* loop() override { return loop_; }
  Reactor& reactor() override { return reactor_; }
  void post(CallEvent event) override;
  void wake() override;

  // ReactorClient
  void on_process_exit(uint64_t call_id) override;
  void on_cgroup_events(uint64_t call_id) override;
  void on_control(uint64_t call_id) override;
  void on_batch_done() override { wake(); }
  void on_call_disposed() override;

 private:
  SysError ensure_open();
  SysError adopt(Call* call, SpawnedCall* out);
  void update_ref();
  void remove_idle_groups();
  static void on_idle_timer(uv_timer_t* t);
  void flush();
  void reap_finished();
  static void on_flush_timer(uv_timer_t* t);
  void handle_closed();

  uv_loop_t* loop_;
  EventSink* sink_;
  Reactor reactor_;
  bool opened_ = false;
  bool closing_ = false;
  SysError open_error_;
  CgroupLocation location_;
  SysError location_error_;
  bool located_ = false;
  ChildStack stack_;
  std::map<std::string, CgroupDir> groups_;
  // Every subtree name this registry created: only those may be reopened.
  std::set<std::string> made_groups_;
  std::unordered_map<uint64_t, Call*> calls_;
  std::deque<CallEvent> pending_;
  bool flushing_ = false;
  uv_timer_t* flush_timer_ = nullptr;
  uv_timer_t* idle_timer_ = nullptr;
  int handles_open_ = 0;
  void (*closed_cb_)(void*) = nullptr;
  void* closed_arg_ = nullptr;
};

}  // namespace proctree
