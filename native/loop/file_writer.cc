#include "loop/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace proctree {

void FileWriter::write_later(const std::string& path, const char* value) {
  if (closing_) return;
  queue_.emplace_back(path, value);
  next();
}

void FileWriter::next() {
  if (running_ || queue_.empty() || closing_) return;
  running_ = new Job{};
  running_->owner = this;
  running_->path = std::move(queue_.front().first);
  running_->value = std::move(queue_.front().second);
  queue_.pop_front();
  running_->req.data = running_;
  if (uv_queue_work(loop_, &running_->req, work, after) != 0) {
    // No thread pool: write here, as without a writer.
    work(&running_->req);
    delete running_;
    running_ = nullptr;
    next();
  }
}

void FileWriter::work(uv_work_t* req) {
  Job* job = static_cast<Job*>(req->data);
  // Errors are the reader's to see: a freeze that did not take shows in
  // cgroup.events, a kill that did not in populated.
  int fd = open(job->path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n;
  do {
    n = write(fd, job->value.data(), job->value.size());
  } while (n < 0 && errno == EINTR);
  ::close(fd);
}

void FileWriter::after(uv_work_t* req, int /*status*/) {
  Job* job = static_cast<Job*>(req->data);
  FileWriter* self = job->owner;
  delete job;
  self->running_ = nullptr;
  if (self->closing_) {
    if (self->closed_) self->closed_(self->closed_arg_);
    return;
  }
  self->next();
}

void FileWriter::close(void (*done)(void*), void* arg) {
  closing_ = true;
  queue_.clear();
  if (!running_) {
    done(arg);
    return;
  }
  closed_ = done;
  closed_arg_ = arg;
}

}  // namespace proctree
