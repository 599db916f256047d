// Timers on the JavaScript thread without libuv: one timerfd (CLOCK_MONOTONIC)
// in the reactor's epoll set, armed for the earliest deadline of a queue of
// Timer objects ordered by deadline. When the timerfd is readable the reactor
// calls run_due(), which runs every timer due by then, earliest first.
#pragma once

#include <time.h>

#include <cstdint>
#include <functional>
#include <map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

// The monotonic clock (CLOCK_MONOTONIC), in nanoseconds.
inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

class Timer;

class Timers {
 public:
  Timers() = default;
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

  SysError open();
  int fd() const { return fd_.get(); }
  // The timerfd turned readable: runs what is due now. A timer started from
  // a callback is due 1 ms later at the soonest, so this always ends.
  void run_due();
  void close();

 private:
  friend class Timer;
  using Queue = std::multimap<uint64_t, Timer*>;
  Queue::iterator add(uint64_t deadline, Timer* t);
  void remove(Queue::iterator it);
  // The timerfd to the earliest deadline (or disarmed).
  void arm();

  Fd fd_;
  Queue queue_;
  uint64_t armed_ = 0;  // the deadline the timerfd is set for, 0: none
};

// One timer: started for a delay, it calls its callback once, on the
// JavaScript thread, from the reactor's turn. Destroying it stops it.
class Timer {
 public:
  Timer(Timers* timers, std::function<void()> callback) : timers_(timers), callback_(std::move(callback)) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer() { stop(); }

  // Due in ms milliseconds (at least 1) from now; restarts an active timer.
  void start(uint64_t ms);
  void stop();
  bool active() const { return active_; }

 private:
  friend class Timers;
  Timers* timers_;
  std::function<void()> callback_;
  bool active_ = false;
  std::multimap<uint64_t, Timer*>::iterator it_;
};

}  // namespace proctree
