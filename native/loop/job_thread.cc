#include "loop/job_thread.h"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "loop/thread.h"

namespace proctree {

JobThread::Shared::Shared() {
  pthread_mutex_init(&mu, nullptr);
  init_monotonic_cond(&cv);
}

JobThread::Shared::~Shared() {
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&mu);
}

JobThread::~JobThread() { close(); }

SysError JobThread::open() {
  if (shared_) return SysError::none();
  if (closed_) return SysError::of(ECANCELED, name_);
  Fd done(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done) return SysError::from_errno("eventfd");
  shared_ = new Shared();
  shared_->name = name_;
  shared_->done = std::move(done);
  return SysError::none();
}

SysError JobThread::run(uint64_t id, Work work) {
  if (closed_ || !shared_) return SysError::of(ECANCELED, name_);
  if (!started_) {
    if (SysError e = start_thread(main, shared_, &thread_, stack_size_)) return e;
    started_ = true;
  }
  pthread_mutex_lock(&shared_->mu);
  shared_->queue.emplace_back(id, std::move(work));
  pthread_cond_broadcast(&shared_->cv);
  pthread_mutex_unlock(&shared_->mu);
  ++outstanding_;
  return SysError::none();
}

std::vector<uint64_t> JobThread::take_done() {
  std::vector<uint64_t> out;
  uint64_t n = 0;
  if (!shared_ || read(shared_->done.get(), &n, sizeof n) != sizeof n) return out;
  pthread_mutex_lock(&shared_->mu);
  out.swap(shared_->finished);
  pthread_mutex_unlock(&shared_->mu);
  outstanding_ = out.size() >= outstanding_ ? 0 : outstanding_ - out.size();
  return out;
}

void* JobThread::main(void* arg) {
  Shared* self = static_cast<Shared*>(arg);
  name_this_thread(self->name);
  pthread_mutex_lock(&self->mu);
  for (;;) {
    while (!self->stopping && self->queue.empty()) pthread_cond_wait(&self->cv, &self->mu);
    if (self->stopping) break;
    std::pair<uint64_t, Work> job = std::move(self->queue.front());
    self->queue.pop_front();
    pthread_mutex_unlock(&self->mu);
    std::vector<Fd> late;
    job.second(&late);
    pthread_mutex_lock(&self->mu);
    self->finished.push_back(job.first);
    pthread_mutex_unlock(&self->mu);
    uint64_t one = 1;
    while (write(self->done.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    late.clear();
    job.second = nullptr;
    pthread_mutex_lock(&self->mu);
  }
  // The queue's jobs are dropped here, on this thread, as a running one is.
  self->queue.clear();
  self->exited = true;
  const bool abandoned = self->abandoned;
  pthread_cond_broadcast(&self->cv);
  pthread_mutex_unlock(&self->mu);
  if (abandoned) delete self;
  return nullptr;
}

bool JobThread::close() {
  if (closed_) return false;
  closed_ = true;
  outstanding_ = 0;
  Shared* s = shared_;
  shared_ = nullptr;
  if (!s) return false;
  if (!started_) {
    delete s;
    return false;
  }
  started_ = false;
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_broadcast(&s->cv);
  if (abandon_after_ms_ >= 0) {
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += abandon_after_ms_ / 1000;
    deadline.tv_nsec += static_cast<long>(abandon_after_ms_ % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000L;
    }
    while (!s->exited && pthread_cond_timedwait(&s->cv, &s->mu, &deadline) != ETIMEDOUT) {
    }
    if (!s->exited) {
      // A job still running: the thread finishes it alone and frees s.
      s->abandoned = true;
      pthread_mutex_unlock(&s->mu);
      detach_thread(thread_);
      return true;
    }
  }
  pthread_mutex_unlock(&s->mu);
  join_thread(thread_);
  delete s;
  return false;
}

}  // namespace proctree
