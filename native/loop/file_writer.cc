#include "loop/file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace proctree {

SysError FileWriter::open(void (*busy_changed)(void*), void* arg) {
  busy_changed_ = busy_changed;
  busy_arg_ = arg;
  return jobs_.open();
}

void FileWriter::write_later(const std::string& path, const char* value) {
  if (closed_) return;
  const bool was = jobs_.busy();
  if (jobs_.run(0, [path, v = std::string(value)](std::vector<Fd>*) { write_now(path, v); })) {
    // No thread (or no eventfd): written here, as without a writer.
    write_now(path, value);
    return;
  }
  if (!was && busy_changed_) busy_changed_(busy_arg_);
}

void FileWriter::on_done() {
  if (jobs_.take_done().empty()) return;
  if (!jobs_.busy() && busy_changed_) busy_changed_(busy_arg_);
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

void FileWriter::close() {
  closed_ = true;
  jobs_.close();
}

}  // namespace proctree
