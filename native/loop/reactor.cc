#include "loop/reactor.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <vector>

namespace proctree {
namespace {

constexpr uint64_t kInotifyTag = ~uint64_t{0};
// Call ids count up from 1 and never reach bit 62: it marks control sockets.
constexpr uint64_t kControlBit = uint64_t{1} << 62;
constexpr uint64_t kMemberBit = uint64_t{1} << 61;

}  // namespace

Reactor::~Reactor() {
  // The owner closes the handle first (close() with a callback); this only
  // drops the descriptors.
  watches_.clear();
}

SysError Reactor::open() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return SysError::from_errno("epoll_create1");
  inotify_.reset(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_) return SysError::from_errno("inotify_init1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kInotifyTag;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, inotify_.get(), &ev) != 0) {
    return SysError::from_errno("epoll_ctl");
  }
  poll_ = new uv_poll_t;
  int r = uv_poll_init(loop_, poll_, epoll_.get());
  if (r != 0) {
    delete poll_;
    poll_ = nullptr;
    return SysError::of(-r, "uv_poll_init");
  }
  poll_->data = this;
  uv_poll_start(poll_, UV_READABLE, on_poll);
  uv_unref(reinterpret_cast<uv_handle_t*>(poll_));
  return SysError::none();
}

SysError Reactor::watch_process(int pidfd, uint64_t call_id) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = call_id;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd, &ev) != 0) return SysError::from_errno("epoll_ctl");
  return SysError::none();
}

SysError Reactor::watch_member(int pidfd, uint64_t call_id) {
  epoll_event ev{};
  // One-shot: a dead member's pidfd stays readable, and one wake-up is all
  // it is for. Closing the pidfd takes it out of the set.
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = call_id | kMemberBit;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd, &ev) != 0) return SysError::from_errno("epoll_ctl");
  return SysError::none();
}

SysError Reactor::watch_control(int fd, uint64_t call_id) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = call_id | kControlBit;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return SysError::from_errno("epoll_ctl");
  return SysError::none();
}

void Reactor::unwatch_process(int pidfd) { epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pidfd, nullptr); }

SysError Reactor::watch_cgroup(const std::string& events_path, uint64_t call_id, int* wd) {
  // cgroup.events raises a modify event whenever populated or frozen changes.
  int w = inotify_add_watch(inotify_.get(), events_path.c_str(), IN_MODIFY);
  if (w < 0) return SysError::from_errno("inotify_add_watch", events_path);
  watches_[w] = call_id;
  *wd = w;
  return SysError::none();
}

void Reactor::unwatch_cgroup(int wd) {
  if (wd < 0) return;
  if (watches_.erase(wd) > 0) inotify_rm_watch(inotify_.get(), wd);
}

void Reactor::set_ref(bool ref) {
  if (!poll_) return;
  if (ref) {
    uv_ref(reinterpret_cast<uv_handle_t*>(poll_));
  } else {
    uv_unref(reinterpret_cast<uv_handle_t*>(poll_));
  }
}

bool Reactor::wait_cgroup_change(int timeout_ms) {
  pollfd p{inotify_.get(), POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (r <= 0) return false;
  std::unordered_map<uint64_t, bool> ignored;
  drain_inotify(&ignored);
  return true;
}

void Reactor::close(void (*closed)(void*), void* arg) {
  if (poll_) {
    closed_ = closed;
    closed_arg_ = arg;
    uv_poll_stop(poll_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) {
      Reactor* self = static_cast<Reactor*>(h->data);
      delete reinterpret_cast<uv_poll_t*>(h);
      if (self->closed_) self->closed_(self->closed_arg_);
    });
    poll_ = nullptr;
  } else if (closed) {
    closed(arg);
  }
  // uv_poll_stop has removed the fd from libuv's own epoll set, so closing it
  // now cannot confuse the loop.
  watches_.clear();
  inotify_.reset();
  epoll_.reset();
}

void Reactor::on_poll(uv_poll_t* handle, int status, int /*events*/) {
  if (status < 0) return;
  static_cast<Reactor*>(handle->data)->dispatch();
}

void Reactor::drain_inotify(std::unordered_map<uint64_t, bool>* changed) {
  alignas(inotify_event) char buf[4096];
  for (;;) {
    ssize_t n = read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) return;  // EAGAIN: drained
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      auto it = watches_.find(ev->wd);
      if (it != watches_.end()) {
        (*changed)[it->second] = true;
        // The file went away with its cgroup: the kernel dropped the watch.
        if (ev->mask & IN_IGNORED) watches_.erase(it);
      }
      p += sizeof(inotify_event) + ev->len;
    }
  }
}

void Reactor::dispatch() {
  // Readiness may be spurious; epoll_wait with a zero timeout never blocks.
  // One batch per callback: the fds are level-triggered, so whatever did not
  // fit stays ready and libuv calls us again (looping here would spin on the
  // same ready set until it was handled).
  epoll_event evs[256];
  std::vector<uint64_t> exited;
  std::vector<uint64_t> control;
  bool inotify_ready = false;
  int n = epoll_wait(epoll_.get(), evs, 256, 0);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 == kInotifyTag) {
      inotify_ready = true;
    } else if (evs[i].data.u64 & kControlBit) {
      control.push_back(evs[i].data.u64 & ~kControlBit);
    } else if (evs[i].data.u64 & kMemberBit) {
      // handled below, with the cgroup.events changes
    } else {
      exited.push_back(evs[i].data.u64);
    }
  }
  std::unordered_map<uint64_t, bool> changed;
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 != kInotifyTag && (evs[i].data.u64 & kMemberBit)) {
      changed[evs[i].data.u64 & ~kMemberBit] = true;
    }
  }
  if (inotify_ready) drain_inotify(&changed);
  // A shim reports the command's exit before it exits itself.
  for (uint64_t id : control) client_->on_control(id);
  // Exits first: a call's main process leaves its cgroup before its pidfd
  // turns readable, and 'exit' must reach JS before 'empty'.
  for (uint64_t id : exited) client_->on_process_exit(id);
  for (const auto& kv : changed) client_->on_cgroup_events(kv.first);
  client_->on_batch_done();
}

}  // namespace proctree
