// One epoll descriptor for every live call of an environment, watched by a
// single uv_poll_t on the environment's own loop (no thread): each call's
// main-process pidfd (readable when it exits), each shim's control socket,
// the pidfds of members a ladder signalled (their exit may end the grace
// early), and one inotify descriptor carrying the watches on the
// cgroup.events files of calls whose tree outlived their main process.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class Environment;

class Reactor {
 public:
  Reactor(uv_loop_t* loop, Environment* env) : loop_(loop), env_(env) {}
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  SysError open();
  SysError watch_main(int pidfd, uint64_t call_id);
  SysError watch_control(int fd, uint64_t call_id);
  // One-shot: a dead member's pidfd stays readable, and one wake-up is all
  // it is for. Closing the pidfd takes it out of the set.
  SysError watch_member(int pidfd, uint64_t call_id);
  // Our end of a call's pipe or terminal (loop/streams.h), with the epoll
  // events it waits for (EPOLLET alone: only a hang-up, once).
  // set_stream_events never fails, as a re-add could for want of memory.
  SysError watch_stream(int fd, uint64_t stream_id, uint32_t events);
  void set_stream_events(int fd, uint64_t stream_id, uint32_t events);
  // Removes an fd added by watch_main, watch_control, watch_member or watch_stream.
  void unwatch(int fd);
  SysError watch_cgroup(const std::string& events_path, uint64_t call_id, int* wd);
  // The systemd tier's broker: its socket (and, while requests wait to be
  // sent, its writability) and its process's pidfd.
  SysError watch_broker(int socket, int process_pidfd);
  void set_broker_writable(int socket, bool writable);
  void unwatch_cgroup(int wd);

  // Keeps the loop alive while any call is referenced, like a ChildProcess.
  void set_ref(bool ref);
  // Stops watching; the poll handle closes asynchronously, then closed(arg).
  void close(void (*closed)(void*) = nullptr, void* arg = nullptr);

 private:
  static void on_poll(uv_poll_t* handle, int status, int events);
  void dispatch();
  // Returns false when the kernel's event queue overflowed: every watch may
  // have changed.
  bool drain_inotify(std::unordered_map<uint64_t, bool>* changed);

  uv_loop_t* loop_;
  Environment* env_;
  Fd epoll_;
  Fd inotify_;
  uv_poll_t* poll_ = nullptr;
  std::unordered_map<int, uint64_t> watches_;  // inotify wd -> call id
  void (*closed_)(void*) = nullptr;
  void* closed_arg_ = nullptr;
};

}  // namespace proctree
