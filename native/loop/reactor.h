// One epoll descriptor for every live call of an environment, waited on by
// the environment's Waiter thread and read on the JavaScript thread (turn):
// each call's main-process pidfd (readable when it exits), each shim's control socket,
// the pidfds of members a ladder signalled (their exit may end the grace
// early), and one inotify descriptor carrying the watches on the
// cgroup.events files of calls whose tree outlived their main process. The
// loop's own descriptors sit in it too: the timerfd of its timers, the
// eventfd that asks for another turn, the file writer's completion eventfd.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class Environment;

class Reactor {
 public:
  explicit Reactor(Environment* env) : env_(env) {}
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  SysError open();
  // The epoll descriptor (for the Waiter), -1 until open.
  int fd() const { return epoll_.get(); }
  // Whether anything in the set is ready now (never blocks).
  bool ready_now() const;
  // The loop's own descriptors (see Environment::turn).
  enum class LoopFd { kTimers, kWake, kWrites, kSpawns, kPorts, kPasses };
  SysError watch_loop(int fd, LoopFd which);
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

  // Stops watching: the descriptors close (the Waiter is stopped first).
  void close();
  // One turn's readiness, handled in order: timers, the wake-up (the
  // environment's per-turn work), then the calls' descriptors.
  void dispatch();

 private:
  // Returns false when the kernel's event queue overflowed: every watch may
  // have changed.
  bool drain_inotify(std::unordered_map<uint64_t, bool>* changed);

  Environment* env_;
  Fd epoll_;
  Fd inotify_;
  std::unordered_map<int, uint64_t> watches_;  // inotify wd -> call id
};

}  // namespace proctree
