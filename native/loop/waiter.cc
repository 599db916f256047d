#include "loop/waiter.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "loop/thread.h"

namespace proctree {
namespace {

constexpr uint64_t kReactorTag = 1;
constexpr uint64_t kStopTag = 2;

}  // namespace

SysError Waiter::start(int reactor_fd, void (*wake)(void*), void* arg) {
  if (running_) return SysError::none();
  outer_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!outer_) return SysError::from_errno("epoll_create1");
  stop_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_) return SysError::from_errno("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kStopTag;
  if (epoll_ctl(outer_.get(), EPOLL_CTL_ADD, stop_.get(), &ev) != 0) return SysError::from_errno("epoll_ctl");
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kReactorTag;
  if (epoll_ctl(outer_.get(), EPOLL_CTL_ADD, reactor_fd, &ev) != 0) return SysError::from_errno("epoll_ctl");
  reactor_fd_ = reactor_fd;
  wake_ = wake;
  arg_ = arg;
  if (SysError e = start_thread(run, this, &thread_)) return e;
  running_ = true;
  return SysError::none();
}

void Waiter::rearm(bool yielded) {
  if (!running_) return;
  yielded_.store(yielded, std::memory_order_relaxed);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = kReactorTag;
  epoll_ctl(outer_.get(), EPOLL_CTL_MOD, reactor_fd_, &ev);
}

void Waiter::stop() {
  if (!running_) return;
  uint64_t one = 1;
  while (write(stop_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  join_thread(thread_);
  running_ = false;
  outer_.reset();
  stop_.reset();
}

void* Waiter::run(void* arg) {
  name_this_thread("proctree-wait");
  Waiter* self = static_cast<Waiter*>(arg);
  for (;;) {
    epoll_event evs[2];
    int n = epoll_wait(self->outer_.get(), evs, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return nullptr;  // cannot happen with a valid set; never spin
    }
    bool reactor = false;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u64 == kStopTag) return nullptr;
      if (evs[i].data.u64 == kReactorTag) reactor = true;
    }
    if (!reactor) continue;
    if (self->yielded_.exchange(false, std::memory_order_relaxed)) {
      // Back in its loop by now, most likely: a runtime may run a callback
      // queued while the previous one ran in the same task (Node's
      // thread-safe functions do), which would starve the harness's timers.
      timespec ts{0, kYieldNs};
      nanosleep(&ts, nullptr);
    }
    self->wake_(self->arg_);
  }
}

}  // namespace proctree
