// Writes to cgroup control files off the JavaScript thread, one at a time and
// in order (a freeze queued before a thaw must land first), on a worker
// thread of our own: cgroup.kill of a tree of a thousand processes takes tens
// of ms in the kernel, and the harness's event loop must not wait for it.
// Each finished write is counted on an eventfd in the reactor's set, read on
// the JavaScript thread (on_done), which keeps the loop alive while writes
// are outstanding, as a request on libuv's thread pool did.
#pragma once

#include <pthread.h>

#include <deque>
#include <string>
#include <utility>

#include "kernel/fd.h"
#include "kernel/sys_error.h"
#include "ladder/confinement.h"

namespace proctree {

class FileWriter : public SlowWrites {
 public:
  FileWriter() = default;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() override;

  // The completion eventfd; busy_changed(arg) on the JavaScript thread when
  // busy() may have changed.
  SysError open(void (*busy_changed)(void*), void* arg);
  int done_fd() const { return done_.get(); }

  void write_later(const std::string& path, const char* value) override;
  // The eventfd turned readable.
  void on_done();
  // Writes queued or in flight.
  bool busy() const { return outstanding_ > 0; }
  // Teardown: what is queued is dropped (the caller kills synchronously);
  // a write in flight finishes, then the thread is joined.
  void close();

 private:
  static void* run(void* self);
  static void write_now(const std::string& path, const std::string& value);

  Fd done_;
  void (*busy_changed_)(void*) = nullptr;
  void* busy_arg_ = nullptr;
  uint64_t outstanding_ = 0;  // JavaScript thread only
  bool started_ = false;
  bool closed_ = false;
  pthread_t thread_{};
  // Shared with the worker. pthread's own, not std::condition_variable:
  // libstdc++ 12 gave its wait() a symbol version (GLIBCXX_3.4.30) newer
  // than what Node's own builds need (scripts/symbol-ceiling.js).
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv_ = PTHREAD_COND_INITIALIZER;
  std::deque<std::pair<std::string, std::string>> queue_;
  bool stopping_ = false;
};

}  // namespace proctree
