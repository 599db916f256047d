// The one thread per environment that waits, so that the JavaScript thread
// never blocks and no runtime's event loop has to know our descriptors: it
// sits in epoll_wait on an epoll set of its own holding the reactor's epoll
// descriptor (one-shot) and a stop eventfd. When the reactor has something,
// it calls wake() once (the binding: a thread-safe function call, which runs
// Environment::turn() on the JavaScript thread) and waits again only once the
// JavaScript thread has re-armed it after that turn, so a level-triggered
// descriptor that stays ready does not make it spin. All call state stays on
// the JavaScript thread; this thread only waits.
#pragma once

#include <pthread.h>

#include <atomic>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class Waiter {
 public:
  Waiter() = default;
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  ~Waiter() { stop(); }

  // Starts the thread over reactor_fd (which must outlive it, until stop()).
  SysError start(int reactor_fd, void (*wake)(void*), void* arg);
  // After a turn: wait for the reactor again. yielded: the turn ran out of
  // time with work left, so the reactor is ready at once; the next wake()
  // comes a moment later, once the JavaScript thread is back in its loop
  // (timers and I/O of the harness run before our next turn).
  void rearm(bool yielded);
  // Stops and joins the thread: no wake() after this returns.
  void stop();
  bool running() const { return running_; }

  // How long a yielded turn waits before it wakes the JavaScript thread.
  static constexpr long kYieldNs = 200000;

 private:
  static void* run(void* self);

  Fd outer_;
  Fd stop_;
  int reactor_fd_ = -1;
  void (*wake_)(void*) = nullptr;
  void* arg_ = nullptr;
  pthread_t thread_{};
  bool running_ = false;
  std::atomic<bool> yielded_{false};
};

}  // namespace proctree
