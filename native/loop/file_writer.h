// Writes to cgroup control files off the JavaScript thread, one at a time and
// in order (a freeze queued before a thaw must land first), on a worker
// thread of our own: cgroup.kill of a tree of a thousand processes takes tens
// of ms in the kernel, and the harness's event loop must not wait for it.
// Each finished write is counted on an eventfd in the reactor's set, read on
// the JavaScript thread (on_done), which keeps the loop alive while writes
// are outstanding, as a request on libuv's thread pool did.
#pragma once

#include <string>

#include "kernel/sys_error.h"
#include "ladder/confinement.h"
#include "loop/job_thread.h"

namespace proctree {

class FileWriter : public SlowWrites {
 public:
  FileWriter() = default;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // The completion eventfd; busy_changed(arg) on the JavaScript thread when
  // busy() may have changed.
  SysError open(void (*busy_changed)(void*), void* arg);
  int done_fd() const { return jobs_.done_fd(); }

  void write_later(const std::string& path, const char* value) override;
  // The eventfd turned readable.
  void on_done();
  // Writes queued or in flight.
  bool busy() const { return jobs_.busy(); }
  // Teardown: what is queued is dropped (the caller kills synchronously);
  // a write in flight finishes, then the thread is joined.
  void close();

 private:
  static void write_now(const std::string& path, const std::string& value);

  JobThread jobs_{"proctree-write", 0};
  void (*busy_changed_)(void*) = nullptr;
  void* busy_arg_ = nullptr;
  bool closed_ = false;
};

}  // namespace proctree
