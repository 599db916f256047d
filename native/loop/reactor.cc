#include "loop/reactor.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "loop/environment.h"

namespace proctree {
namespace {

constexpr uint64_t kInotifyTag = ~uint64_t{0};
constexpr uint64_t kBrokerSocketTag = ~uint64_t{0} - 1;
constexpr uint64_t kBrokerProcessTag = ~uint64_t{0} - 2;
constexpr uint64_t kTimersTag = ~uint64_t{0} - 3;
constexpr uint64_t kWakeTag = ~uint64_t{0} - 4;
constexpr uint64_t kWritesTag = ~uint64_t{0} - 5;
constexpr uint64_t kSpawnsTag = ~uint64_t{0} - 6;
constexpr uint64_t kPortsTag = ~uint64_t{0} - 7;
constexpr uint64_t kPassesTag = ~uint64_t{0} - 8;
// Call ids count up from 1 and never reach bit 61: the top bits say what
// kind of descriptor became ready.
constexpr uint64_t kControlBit = uint64_t{1} << 62;
constexpr uint64_t kMemberBit = uint64_t{1} << 61;
// Streams ids, which count up from 1 on their own.
constexpr uint64_t kOutputBit = uint64_t{1} << 60;
constexpr uint64_t kIdMask = kOutputBit - 1;
// Readiness handled per loop turn: the rest stays ready (level-triggered) for
// the next turn, so one turn never runs long.
constexpr int kMaxEventsPerTurn = 64;

SysError add(int epoll, int fd, uint32_t events, uint64_t data) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = data;
  if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) return SysError::from_errno("epoll_ctl");
  return SysError::none();
}

}  // namespace

SysError Reactor::open() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return SysError::from_errno("epoll_create1");
  inotify_.reset(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify_) return SysError::from_errno("inotify_init1");
  if (SysError e = add(epoll_.get(), inotify_.get(), EPOLLIN, kInotifyTag)) return e;
  return SysError::none();
}

SysError Reactor::watch_loop(int fd, LoopFd which) {
  uint64_t tag = which == LoopFd::kTimers ? kTimersTag
                 : which == LoopFd::kWake ? kWakeTag
                 : which == LoopFd::kWrites ? kWritesTag
                 : which == LoopFd::kPorts  ? kPortsTag
                 : which == LoopFd::kPasses ? kPassesTag
                                            : kSpawnsTag;
  return add(epoll_.get(), fd, EPOLLIN, tag);
}

SysError Reactor::watch_main(int pidfd, uint64_t call_id) { return add(epoll_.get(), pidfd, EPOLLIN, call_id); }

SysError Reactor::watch_control(int fd, uint64_t call_id) {
  return add(epoll_.get(), fd, EPOLLIN, call_id | kControlBit);
}

SysError Reactor::watch_member(int pidfd, uint64_t call_id) {
  return add(epoll_.get(), pidfd, EPOLLIN | EPOLLONESHOT, call_id | kMemberBit);
}

SysError Reactor::watch_stream(int fd, uint64_t stream_id, uint32_t events) {
  return add(epoll_.get(), fd, events, stream_id | kOutputBit);
}

void Reactor::set_stream_events(int fd, uint64_t stream_id, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = stream_id | kOutputBit;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
}

SysError Reactor::watch_broker(int socket, int process_pidfd) {
  if (SysError e = add(epoll_.get(), socket, EPOLLIN, kBrokerSocketTag)) return e;
  if (SysError e = add(epoll_.get(), process_pidfd, EPOLLIN, kBrokerProcessTag)) {
    unwatch(socket);
    return e;
  }
  return SysError::none();
}

void Reactor::set_broker_writable(int socket, bool writable) {
  epoll_event ev{};
  ev.events = writable ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = kBrokerSocketTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, socket, &ev);
}

void Reactor::unwatch(int fd) {
  if (fd >= 0 && epoll_) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

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

bool Reactor::ready_now() const {
  if (!epoll_) return false;
  pollfd p{epoll_.get(), POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

void Reactor::close() {
  watches_.clear();
  inotify_.reset();
  epoll_.reset();
}

bool Reactor::drain_inotify(std::unordered_map<uint64_t, bool>* changed) {
  alignas(inotify_event) char buf[4096];
  bool complete = true;
  for (;;) {
    ssize_t n = read(inotify_.get(), buf, sizeof buf);
    if (n <= 0) return complete;  // EAGAIN: drained
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      if (ev->mask & IN_Q_OVERFLOW) complete = false;
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
  epoll_event evs[kMaxEventsPerTurn];
  std::vector<uint64_t> exited, control;
  std::vector<std::pair<uint64_t, uint32_t>> output;
  std::unordered_map<uint64_t, bool> changed;
  std::unordered_map<uint64_t, size_t> member_exits;
  bool inotify_ready = false;
  int broker = -1;  // -1: not ready; 0: readable; 1: writable too
  bool broker_process = false;
  bool timers = false, wake = false, writes = false, spawns = false, ports = false, passes = false;
  int n = epoll_wait(epoll_.get(), evs, kMaxEventsPerTurn, 0);
  for (int i = 0; i < n; ++i) {
    uint64_t tag = evs[i].data.u64;
    if (tag == kInotifyTag) {
      inotify_ready = true;
    } else if (tag == kTimersTag) {
      timers = true;
    } else if (tag == kWakeTag) {
      wake = true;
    } else if (tag == kWritesTag) {
      writes = true;
    } else if (tag == kSpawnsTag) {
      spawns = true;
    } else if (tag == kPortsTag) {
      ports = true;
    } else if (tag == kPassesTag) {
      passes = true;
    } else if (tag == kBrokerSocketTag) {
      broker = (evs[i].events & EPOLLOUT) ? 1 : 0;
    } else if (tag == kBrokerProcessTag) {
      broker_process = true;
    } else if (tag & kOutputBit) {
      output.emplace_back(tag & kIdMask, static_cast<uint32_t>(evs[i].events));
    } else if (tag & kControlBit) {
      control.push_back(tag & kIdMask);
    } else if (tag & kMemberBit) {
      changed[tag & kIdMask] = true;
      ++member_exits[tag & kIdMask];
    } else {
      exited.push_back(tag);
    }
  }
  // As a libuv loop runs them: timers, then the turn's own work (ladders
  // waiting for time, deliveries that did not fit), then I/O.
  if (timers) env_->on_timers();
  if (wake) env_->on_wake();
  if (writes) env_->on_writes_done();
  if (ports) env_->on_ports_done();
  // A ladder's pass that ran elsewhere goes on before the exits and changes
  // it may have caused are seen.
  if (passes) env_->on_passes_done();
  if (inotify_ready && !drain_inotify(&changed)) {
    // The kernel dropped events (IN_Q_OVERFLOW): a lost 'populated 0' would
    // leave a call open forever, so every watched call looks again.
    for (const auto& kv : watches_) changed[kv.second] = true;
  }
  // Exec reports before anything the command did: 'spawn' comes first.
  if (spawns) env_->on_spawns_done();
  // Output first: what a command wrote before it exited reaches JavaScript
  // before its 'exit' when both are seen in the same turn.
  for (const auto& o : output) env_->streams().on_ready(o.first, o.second);
  // A shim (or the broker) reports the command's exit before it exits itself.
  if (broker >= 0) env_->on_broker_socket(broker == 1);
  if (broker_process) env_->on_broker_process();
  for (uint64_t id : control) env_->on_control_readable(id);
  // Exits before changes: 'exit' must reach JavaScript before 'empty'.
  for (uint64_t id : exited) env_->on_main_readable(id);
  for (const auto& kv : member_exits) env_->on_members_exited(kv.first, kv.second);
  for (const auto& kv : changed) env_->on_change(kv.first);
  env_->flush();
}

}  // namespace proctree
