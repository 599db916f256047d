// One epoll descriptor for every live call of an environment: each call's
// pidfd (readable when its main process exits), each shim's control socket, and one inotify descriptor
// carrying a watch on each call's cgroup.events. The epoll fd itself is
// watched by a single uv_poll_t on the environment's own loop: no thread.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class ReactorClient {
 public:
  virtual ~ReactorClient() = default;
  virtual void on_process_exit(uint64_t call_id) = 0;
  virtual void on_cgroup_events(uint64_t call_id) = 0;
  // A shim's control socket is readable (a message, or EOF).
  virtual void on_control(uint64_t call_id) = 0;
  // Called once after each batch of readiness has been dispatched.
  virtual void on_batch_done() = 0;
};

class Reactor {
 public:
  Reactor(uv_loop_t* loop, ReactorClient* client) : loop_(loop), client_(client) {}
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;
  ~Reactor();

  SysError open();
  SysError watch_process(int pidfd, uint64_t call_id);
  // Removes any fd added by watch_process or watch_control.
  void unwatch_process(int pidfd);
  SysError watch_control(int fd, uint64_t call_id);
  // A member's pidfd: when it exits, the call re-reads its cgroup.events
  // (whose own notifications the kernel rate-limits).
  SysError watch_member(int pidfd, uint64_t call_id);
  SysError watch_cgroup(const std::string& events_path, uint64_t call_id, int* wd);
  void unwatch_cgroup(int wd);

  // Keeps the loop alive while any call is live, like a ChildProcess handle.
  void set_ref(bool ref);
  // Blocks up to timeout_ms for a cgroup.events change (synchronous teardown).
  bool wait_cgroup_change(int timeout_ms);
  // Stops watching; the poll handle is closed asynchronously and freed then,
  // and closed(arg) runs once it has.
  void close(void (*closed)(void*) = nullptr, void* arg = nullptr);

 private:
  static void on_poll(uv_poll_t* handle, int status, int events);
  void dispatch();
  void drain_inotify(std::unordered_map<uint64_t, bool>* changed);

  uv_loop_t* loop_;
  ReactorClient* client_;
  Fd epoll_;
  Fd inotify_;
  uv_poll_t* poll_ = nullptr;
  std::unordered_map<int, uint64_t> watches_;  // inotify wd -> call id
  void (*closed_)(void*) = nullptr;
  void* closed_arg_ = nullptr;
};

}  // namespace proctree
