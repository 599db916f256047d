#include "loop/timers.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>

namespace proctree {

SysError Timers::open() {
  if (fd_) return SysError::none();
  fd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!fd_) return SysError::from_errno("timerfd_create");
  armed_ = 0;
  arm();
  return SysError::none();
}

void Timers::close() {
  while (!queue_.empty()) queue_.begin()->second->stop();
  fd_.reset();
}

Timers::Queue::iterator Timers::add(uint64_t deadline, Timer* t) {
  auto it = queue_.emplace(deadline, t);
  if (it == queue_.begin()) arm();
  return it;
}

void Timers::remove(Queue::iterator it) {
  const bool first = it == queue_.begin();
  queue_.erase(it);
  // A later deadline is left armed when the first goes: the early wake-up
  // finds nothing due and re-arms (one settime fewer per stop).
  if (first && queue_.empty()) arm();
}

void Timers::arm() {
  if (!fd_) return;
  const uint64_t next = queue_.empty() ? 0 : queue_.begin()->first;
  if (next == armed_) return;
  itimerspec its{};
  its.it_value.tv_sec = static_cast<time_t>(next / 1000000000ULL);
  its.it_value.tv_nsec = static_cast<long>(next % 1000000000ULL);
  // All zero disarms; a deadline already past fires at once.
  if (timerfd_settime(fd_.get(), TFD_TIMER_ABSTIME, &its, nullptr) == 0) armed_ = next;
}

void Timers::run_due() {
  uint64_t expirations;
  while (read(fd_.get(), &expirations, sizeof expirations) < 0 && errno == EINTR) {
  }
  armed_ = 0;  // it fired (or was never set): set again below
  const uint64_t now = monotonic_ns();
  while (!queue_.empty() && queue_.begin()->first <= now) {
    Timer* t = queue_.begin()->second;
    queue_.erase(queue_.begin());
    t->active_ = false;
    // May start, stop or destroy any timer, itself included.
    t->callback_();
  }
  arm();
}

void Timer::start(uint64_t ms) {
  stop();
  it_ = timers_->add(monotonic_ns() + std::max<uint64_t>(ms, 1) * 1000000ULL, this);
  active_ = true;
}

void Timer::stop() {
  if (!active_) return;
  active_ = false;
  timers_->remove(it_);
}

}  // namespace proctree
