#include "loop/output_pipes.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "loop/environment.h"

namespace proctree {

SysError OutputPipes::open(uint64_t* id, Fd* write_end) {
  if (SysError e = env_->ensure_open()) return e;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
  Fd read_end(fds[0]), writer(fds[1]);
  // Only our end: the child's write end must block as a pipe from Node does.
  if (fcntl(read_end.get(), F_SETFL, O_NONBLOCK) != 0) return SysError::from_errno("fcntl");
  uint64_t n = next_id_++;
  if (SysError e = env_->reactor().watch_output(read_end.get(), n)) return e;
  Pipe& p = pipes_[n];
  p.fd = std::move(read_end);
  *id = n;
  *write_end = std::move(writer);
  return SysError::none();
}

OutputPipes::Read OutputPipes::read_once(uint64_t id, Pipe* p) {
  if (scratch_.size() < kChunk) scratch_.resize(kChunk);
  ssize_t n;
  do {
    n = ::read(p->fd.get(), &scratch_[0], kChunk);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Read::kEnd;
  if (n < 0) {
    // EAGAIN: spurious readiness. Any other error on a pipe's read end (none
    // is documented) can only repeat: the stream ends, as a Socket's would.
    return errno == EAGAIN ? Read::kDrained : Read::kEnd;
  }
  CallEvent ev{CallEvent::kOutput, id, {}, {}, {}};
  ev.data.assign(scratch_.data(), static_cast<size_t>(n));
  p->in_flight = true;
  env_->post(std::move(ev));
  return static_cast<size_t>(n) < kChunk ? Read::kDrained : Read::kMore;
}

void OutputPipes::on_ready(uint64_t id, uint32_t events) {
  auto it = pipes_.find(id);
  if (it == pipes_.end()) return;
  Pipe* p = &it->second;
  if (p->in_flight || !p->armed) {
    // Not read until JavaScript has the chunk before: out of the set's
    // interest meanwhile (level-triggered, it would wake every turn). A
    // hang-up still wakes us once: the data before it is read when re-armed.
    set_armed(p, id, false);
    return;
  }
  // Every writer is gone and nothing is left: the end, without a read.
  if ((events & EPOLLHUP) && !(events & EPOLLIN)) {
    end(id);
    return;
  }
  Read r = read_once(id, p);
  // HUP was seen before the read: a short read took the last bytes there
  // will ever be, so EOF is known without another read.
  if (r == Read::kEnd || (r == Read::kDrained && (events & EPOLLHUP))) end(id);
}

void OutputPipes::delivered(uint64_t id) {
  auto it = pipes_.find(id);
  if (it == pipes_.end()) return;
  it->second.in_flight = false;
  if (!it->second.armed) set_armed(&it->second, id, true);
}

void OutputPipes::finish(uint64_t id) {
  auto it = pipes_.find(id);
  if (it == pipes_.end()) return;
  // Bounded: a writer outside the tree could keep it full for ever.
  for (size_t taken = 0; taken < kFinishMax; taken += kChunk) {
    if (read_once(id, &it->second) != Read::kMore) break;
  }
  end(id);
}

void OutputPipes::end(uint64_t id) {
  auto it = pipes_.find(id);
  if (it == pipes_.end()) return;
  // Out of the set before the close: a copy of the fd in a child forked
  // meanwhile (and not yet exec'd) would keep the registration alive.
  env_->reactor().unwatch(it->second.fd.get());
  pipes_.erase(it);
  env_->post(CallEvent{CallEvent::kOutputEnd, id, {}, {}, {}});
}

void OutputPipes::set_armed(Pipe* p, uint64_t id, bool armed) {
  if (p->armed == armed) return;
  p->armed = armed;
  env_->reactor().set_output_reading(p->fd.get(), id, armed);
}

}  // namespace proctree
