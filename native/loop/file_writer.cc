#include "loop/file_writer.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "loop/thread.h"

namespace proctree {

FileWriter::~FileWriter() {
  close();
  pthread_cond_destroy(&cv_);
  pthread_mutex_destroy(&mu_);
}

SysError FileWriter::open(void (*busy_changed)(void*), void* arg) {
  busy_changed_ = busy_changed;
  busy_arg_ = arg;
  if (done_) return SysError::none();
  done_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done_) return SysError::from_errno("eventfd");
  return SysError::none();
}

void FileWriter::write_later(const std::string& path, const char* value) {
  if (closed_) return;
  if (!started_ && done_) started_ = !start_thread(run, this, &thread_);
  if (!started_) {
    // No thread (or no eventfd): write here, as without a writer.
    write_now(path, value);
    return;
  }
  pthread_mutex_lock(&mu_);
  queue_.emplace_back(path, value);
  pthread_cond_signal(&cv_);
  pthread_mutex_unlock(&mu_);
  if (outstanding_++ == 0 && busy_changed_) busy_changed_(busy_arg_);
}

void FileWriter::on_done() {
  uint64_t n = 0;
  if (read(done_.get(), &n, sizeof n) != sizeof n) return;
  outstanding_ = n >= outstanding_ ? 0 : outstanding_ - n;
  if (outstanding_ == 0 && busy_changed_) busy_changed_(busy_arg_);
}

void FileWriter::write_now(const std::string& path, const std::string& value) {
  // Errors are the reader's to see: a freeze that did not take shows in
  // cgroup.events, a kill that did not in populated.
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n;
  do {
    n = write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  ::close(fd);
}

void* FileWriter::run(void* arg) {
  name_this_thread("proctree-write");
  FileWriter* self = static_cast<FileWriter*>(arg);
  pthread_mutex_lock(&self->mu_);
  for (;;) {
    while (!self->stopping_ && self->queue_.empty()) pthread_cond_wait(&self->cv_, &self->mu_);
    if (self->stopping_) break;
    std::pair<std::string, std::string> job = std::move(self->queue_.front());
    self->queue_.pop_front();
    pthread_mutex_unlock(&self->mu_);
    write_now(job.first, job.second);
    uint64_t one = 1;
    while (write(self->done_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&self->mu_);
  }
  pthread_mutex_unlock(&self->mu_);
  return nullptr;
}

void FileWriter::close() {
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
  outstanding_ = 0;
  done_.reset();
}

}  // namespace proctree
