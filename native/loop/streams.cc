#include "loop/streams.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loop/environment.h"

namespace proctree {

SysError Streams::open(Kind kind, uint64_t* id, Fd* child_end, int* our_fd) {
  if (kind == kTerminal) return SysError::of(EINVAL, "pipe2");
  if (SysError e = env_->ensure_open()) return e;
  int fds[2];
  Fd ours, theirs;
  if (kind == kDuplex) {
    // As Node's stdio pipes: the child may read and write its end.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return SysError::from_errno("socketpair");
    ours.reset(fds[0]);
    theirs.reset(fds[1]);
  } else {
    if (pipe2(fds, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
    // The child reads stdin and writes every other pipe.
    bool child_reads = kind == kWriter;
    ours.reset(child_reads ? fds[1] : fds[0]);
    theirs.reset(child_reads ? fds[0] : fds[1]);
  }
  // Only our end: the child's must block as a pipe from Node does.
  if (fcntl(ours.get(), F_SETFL, O_NONBLOCK) != 0) return SysError::from_errno("fcntl");
  int fd = ours.get();
  if (SysError e = add(kind, std::move(ours), id)) return e;
  *child_end = std::move(theirs);
  *our_fd = fd;
  return SysError::none();
}

SysError Streams::adopt(Fd fd, uint64_t* id) {
  if (SysError e = env_->ensure_open()) return e;
  int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return SysError::from_errno("fcntl");
  return add(kTerminal, std::move(fd), id);
}

SysError Streams::add(Kind kind, Fd fd, uint64_t* id) {
  uint64_t n = next_id_++;
  // run()'s output is read from the start; the others when JavaScript asks.
  // Nothing asked for: only a hang-up, once (edge-triggered).
  uint32_t events = kind == kOutput ? uint32_t{EPOLLIN} : uint32_t{EPOLLET};
  if (SysError e = env_->reactor().watch_stream(fd.get(), n, events)) return e;
  Stream& s = streams_[n];
  s.fd = std::move(fd);
  s.kind = kind;
  s.reading = kind == kOutput;
  s.events = events;
  update(n, &s);
  *id = n;
  return SysError::none();
}

Streams::Read Streams::read_once(uint64_t id, Stream* s, SysError* error) {
  if (scratch_.size() < kChunk) scratch_.resize(kChunk);
  ssize_t n;
  do {
    n = ::read(s->fd.get(), &scratch_[0], kChunk);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Read::kEnd;
  if (n < 0) {
    // EAGAIN: spurious readiness. EIO on a terminal: no process holds its
    // slave, and everything written before was read (its normal end, as
    // libuv treats it). Any other error can only repeat: the stream ends
    // with it (a pipe's read end has none documented: it just ends).
    if (errno == EAGAIN) return Read::kDrained;
    if (errno != EIO || s->kind != kTerminal) {
      if (s->kind == kDuplex || s->kind == kTerminal) *error = SysError::from_errno("read");
    }
    return Read::kEnd;
  }
  CallEvent ev = CallEvent::of(CallEvent::kOutput, id);
  ev.data.assign(scratch_.data(), static_cast<size_t>(n));
  s->in_flight = static_cast<size_t>(n);
  env_->post(std::move(ev));
  return static_cast<size_t>(n) < kChunk ? Read::kDrained : Read::kMore;
}

void Streams::on_ready(uint64_t id, uint32_t events) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream* s = &it->second;
  if (!s->queue.empty() && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) write_ready(id, s);
  if (readable(s->kind) && !s->read_ended && s->reading && s->in_flight == 0) {
    bool pipe = s->kind == kOutput || s->kind == kReader;
    bool hup = (events & EPOLLHUP) != 0;
    if (pipe && hup && !(events & EPOLLIN)) {
      // Every writer is gone and nothing is left: the end, without a read.
      read_end(id, s, SysError::none());
      return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      SysError error;
      Read r = read_once(id, s, &error);
      // A pipe's HUP seen before the read: a short read took the last bytes
      // there will ever be, so EOF is known without another read. (Not so
      // on a terminal, whose reads are short while more is queued.)
      if (r == Read::kEnd || (r == Read::kDrained && pipe && hup)) {
        read_end(id, s, error);
        return;
      }
    }
  }
  // Not reading (a chunk in flight, or JavaScript's buffer is full): out of
  // the set's interest meanwhile (level-triggered, it would wake every turn).
  update(id, s);
}

void Streams::delivered(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  it->second.in_flight = 0;
  update(id, &it->second);
}

void Streams::backlog(uint64_t id, size_t* bytes, bool* end_follows) const {
  *bytes = 0;
  *end_follows = true;
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  const Stream& s = it->second;
  *bytes = s.in_flight;
  if (!readable(s.kind) || s.read_ended) return;
  int queued = 0;
  if (ioctl(s.fd.get(), FIONREAD, &queued) == 0 && queued > 0) *bytes += static_cast<size_t>(queued);
  struct pollfd p = {s.fd.get(), POLLIN | POLLRDHUP, 0};
  *end_follows = poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP)) != 0;
}

void Streams::read_start(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.reading) return;
  it->second.reading = true;
  update(id, &it->second);
}

void Streams::read_stop(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || !it->second.reading) return;
  it->second.reading = false;
  update(id, &it->second);
}

void Streams::read_end(uint64_t id, Stream* s, const SysError& error) {
  s->read_ended = true;
  CallEvent ev = CallEvent::of(CallEvent::kOutputEnd, id, error);
  // A stream only read is done with: closed before its end is posted, so
  // the binding sees it gone when it delivers the end.
  if (!writable(s->kind)) {
    remove(id);
  } else {
    update(id, s);
  }
  env_->post(std::move(ev));
}

SysError Streams::write(uint64_t id, const char* data, size_t len, bool* queued) {
  *queued = false;
  auto it = streams_.find(id);
  if (it == streams_.end() || !writable(it->second.kind) || it->second.write_ended) {
    return SysError::of(EBADF, "write");
  }
  Stream* s = &it->second;
  if (!s->queue.empty()) {
    s->queue.emplace_back(data, len);
    *queued = true;
    return SysError::none();
  }
  size_t done = 0;
  while (done < len) {
    ssize_t n;
    if (s->kind == kDuplex) {
      // No SIGPIPE for a socket whose reader is gone: EPIPE, as a pipe
      // gives where the process ignores SIGPIPE (Node does).
      n = ::send(s->fd.get(), data + done, len - done, MSG_NOSIGNAL);
    } else {
      n = ::write(s->fd.get(), data + done, len - done);
    }
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    // Typing into a terminal nobody holds goes nowhere, as into a closed window.
    if (errno == EIO && s->kind == kTerminal) return SysError::none();
    return SysError::from_errno("write");
  }
  if (done == len) return SysError::none();
  s->queue.emplace_back(data + done, len - done);
  s->offset = 0;
  *queued = true;
  update(id, s);
  return SysError::none();
}

SysError Streams::flush_queue(Stream* s) {
  while (!s->queue.empty()) {
    const std::string& front = s->queue.front();
    ssize_t n;
    if (s->kind == kDuplex) {
      n = ::send(s->fd.get(), front.data() + s->offset, front.size() - s->offset, MSG_NOSIGNAL);
    } else {
      n = ::write(s->fd.get(), front.data() + s->offset, front.size() - s->offset);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return SysError::none();
      if (errno == EIO && s->kind == kTerminal) {
        s->offset = front.size();
      } else {
        return SysError::from_errno("write");
      }
    } else {
      s->offset += static_cast<size_t>(n);
    }
    if (s->offset < front.size()) continue;
    s->queue.pop_front();
    s->offset = 0;
    // This write is wholly in the pipe: the caller posts its completion.
    return SysError::none();
  }
  return SysError::none();
}

void Streams::write_ready(uint64_t id, Stream* s) {
  for (;;) {
    size_t before = s->queue.size();
    SysError e = flush_queue(s);
    if (e) {
      // Nothing more will be written: each write still queued fails with it.
      size_t n = s->queue.size();
      s->queue.clear();
      s->offset = 0;
      for (size_t i = 0; i < n; ++i) env_->post(CallEvent::of(CallEvent::kWritten, id, e));
      break;
    }
    if (s->queue.size() == before) break;  // the pipe is full again
    env_->post(CallEvent::of(CallEvent::kWritten, id));
  }
  update(id, s);
}

SysError Streams::shutdown(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.write_ended) return SysError::none();
  Stream* s = &it->second;
  s->write_ended = true;
  s->queue.clear();
  if (s->kind == kWriter) {
    // The write end closing is the child's EOF.
    remove(id);
    return SysError::none();
  }
  SysError e;
  if (s->kind == kDuplex && ::shutdown(s->fd.get(), SHUT_WR) != 0 && errno != ENOTCONN) {
    e = SysError::from_errno("shutdown");
  }
  update(id, s);
  return e;
}

void Streams::finish(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || !readable(it->second.kind) || it->second.read_ended) return;
  Stream* s = &it->second;
  SysError error;
  // Bounded: a writer outside the tree could keep it full for ever.
  for (size_t taken = 0; taken < kFinishMax; taken += kChunk) {
    if (read_once(id, s, &error) != Read::kMore) break;
  }
  read_end(id, s, error);
}

void Streams::close(uint64_t id) { remove(id); }

void Streams::set_ref(uint64_t id, bool ref) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  it->second.ref = ref;
  update(id, &it->second);
}

void Streams::update(uint64_t id, Stream* s) {
  bool want_in = readable(s->kind) && !s->read_ended && s->reading && s->in_flight == 0;
  bool want_out = !s->queue.empty();
  uint32_t events = 0;
  if (want_in) events |= EPOLLIN;
  if (want_out) events |= EPOLLOUT;
  // Nothing wanted: only a hang-up or an error, once (level-triggered, they
  // would wake every turn). Never fails, as a re-add could for want of memory.
  if (events == 0) events = EPOLLET;
  if (events != s->events) {
    s->events = events;
    env_->reactor().set_stream_events(s->fd.get(), id, events);
  }
  // A stream reading or writing keeps the loop alive, as a libuv stream.
  bool active = (readable(s->kind) && !s->read_ended && s->reading) || want_out;
  bool counted = active && s->ref;
  if (counted != s->counted) {
    env_->on_call_ref_changed(s->counted, counted);
    s->counted = counted;
  }
}

void Streams::remove(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  // Out of the set before the close: a copy of the fd in a child forked
  // meanwhile (and not yet exec'd) would keep the registration alive.
  env_->reactor().unwatch(it->second.fd.get());
  if (it->second.counted) env_->on_call_ref_changed(true, false);
  streams_.erase(it);
}

}  // namespace proctree
