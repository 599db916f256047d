#include "loop/ports_worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "kernel/cgroup.h"
#include "loop/thread.h"

namespace proctree {

PortsWorker::~PortsWorker() {
  close();
  pthread_cond_destroy(&cv_);
  pthread_mutex_destroy(&mu_);
}

SysError PortsWorker::open() {
  if (done_) return SysError::none();
  done_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done_) return SysError::from_errno("eventfd");
  return SysError::none();
}

SysError PortsWorker::query(PortsQuery q) {
  if (closed_ || !done_) return SysError::of(ECANCELED, "ports");
  if (!started_) {
    // A small stack: the work is /proc reads and one netlink socket.
    if (SysError e = start_thread(run, this, &thread_, 256 * 1024)) return e;
    started_ = true;
  }
  pthread_mutex_lock(&mu_);
  queue_.push_back(std::move(q));
  pthread_cond_signal(&cv_);
  pthread_mutex_unlock(&mu_);
  ++outstanding_;
  return SysError::none();
}

std::vector<PortsAnswer> PortsWorker::take_done() {
  std::vector<PortsAnswer> out;
  uint64_t n = 0;
  if (!done_ || read(done_.get(), &n, sizeof n) != sizeof n) return out;
  pthread_mutex_lock(&mu_);
  out.swap(done_list_);
  pthread_mutex_unlock(&mu_);
  outstanding_ = out.size() >= outstanding_ ? 0 : outstanding_ - out.size();
  return out;
}

PortsAnswer PortsWorker::answer(const PortsQuery& q) {
  PortsAnswer a;
  a.request = q.request;
  if (!q.cgroup_ids.empty()) {
    if (cgroup_socket_filter_available()) a.error = listeners_of_cgroup_ids(q.cgroup_ids, &a.listeners);
  } else if (!q.leaf.empty() && cgroup_socket_filter_available()) {
    a.error = listeners_in_cgroup(q.leaf, &a.listeners);
    // The leaf is gone (the tree ended and it was removed): nothing listens.
    if (a.error && a.error.err == ENOENT) {
      a.error = SysError::none();
      a.listeners.clear();
    }
  } else if (q.members_from_leaf) {
    CgroupDir dir;
    std::vector<pid_t> pids;
    if (!CgroupDir::open_existing(q.leaf, &dir)) dir.read_procs(&pids);
    dir.close();
    a.error = listeners_of_pids(pids, &a.listeners);
  } else {
    a.error = listeners_of_pids(q.pids, &a.listeners);
  }
  return a;
}

void* PortsWorker::run(void* arg) {
  name_this_thread("proctree-ports");
  PortsWorker* self = static_cast<PortsWorker*>(arg);
  pthread_mutex_lock(&self->mu_);
  for (;;) {
    while (!self->stopping_ && self->queue_.empty()) pthread_cond_wait(&self->cv_, &self->mu_);
    if (self->stopping_) break;
    PortsQuery q = std::move(self->queue_.front());
    self->queue_.pop_front();
    pthread_mutex_unlock(&self->mu_);
    PortsAnswer a = answer(q);
    pthread_mutex_lock(&self->mu_);
    self->done_list_.push_back(std::move(a));
    pthread_mutex_unlock(&self->mu_);
    uint64_t one = 1;
    while (write(self->done_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&self->mu_);
  }
  pthread_mutex_unlock(&self->mu_);
  return nullptr;
}

void PortsWorker::close() {
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
  done_list_.clear();
  outstanding_ = 0;
  done_.reset();
}

}  // namespace proctree
