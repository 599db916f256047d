#include "loop/job_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "loop/thread.h"

namespace proctree {

JobThread::~JobThread() {
  close();
  pthread_cond_destroy(&cv_);
  pthread_mutex_destroy(&mu_);
}

SysError JobThread::open() {
  if (done_) return SysError::none();
  done_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done_) return SysError::from_errno("eventfd");
  return SysError::none();
}

SysError JobThread::run(uint64_t id, Work work) {
  if (closed_ || !done_) return SysError::of(ECANCELED, name_);
  if (!started_) {
    if (SysError e = start_thread(main, this, &thread_, stack_size_)) return e;
    started_ = true;
  }
  pthread_mutex_lock(&mu_);
  queue_.emplace_back(id, std::move(work));
  pthread_cond_signal(&cv_);
  pthread_mutex_unlock(&mu_);
  ++outstanding_;
  return SysError::none();
}

std::vector<uint64_t> JobThread::take_done() {
  std::vector<uint64_t> out;
  uint64_t n = 0;
  if (!done_ || read(done_.get(), &n, sizeof n) != sizeof n) return out;
  pthread_mutex_lock(&mu_);
  out.swap(finished_);
  pthread_mutex_unlock(&mu_);
  outstanding_ = out.size() >= outstanding_ ? 0 : outstanding_ - out.size();
  return out;
}

void* JobThread::main(void* arg) {
  JobThread* self = static_cast<JobThread*>(arg);
  name_this_thread(self->name_);
  pthread_mutex_lock(&self->mu_);
  for (;;) {
    while (!self->stopping_ && self->queue_.empty()) pthread_cond_wait(&self->cv_, &self->mu_);
    if (self->stopping_) break;
    std::pair<uint64_t, Work> job = std::move(self->queue_.front());
    self->queue_.pop_front();
    pthread_mutex_unlock(&self->mu_);
    std::vector<Fd> late;
    job.second(&late);
    pthread_mutex_lock(&self->mu_);
    self->finished_.push_back(job.first);
    pthread_mutex_unlock(&self->mu_);
    uint64_t one = 1;
    while (write(self->done_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    late.clear();
    job.second = nullptr;
    pthread_mutex_lock(&self->mu_);
  }
  pthread_mutex_unlock(&self->mu_);
  return nullptr;
}

void JobThread::close() {
  if (closed_) return;
  closed_ = true;
  if (started_) {
    pthread_mutex_lock(&mu_);
    stopping_ = true;
    queue_.clear();
    pthread_cond_signal(&cv_);
    pthread_mutex_unlock(&mu_);
    join_thread(thread_);
    started_ = false;
  }
  finished_.clear();
  outstanding_ = 0;
  done_.reset();
}

}  // namespace proctree
