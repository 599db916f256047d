// Writes to cgroup control files off the loop thread, one at a time and in
// order (a freeze queued before a thaw must land first), on libuv's thread
// pool: cgroup.kill of a tree of a thousand processes takes tens of ms in the
// kernel, and the harness's event loop must not wait for it.
#pragma once

#include <uv.h>

#include <deque>
#include <string>
#include <utility>

#include "ladder/confinement.h"

namespace proctree {

class FileWriter : public SlowWrites {
 public:
  explicit FileWriter(uv_loop_t* loop) : loop_(loop) {}
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write_later(const std::string& path, const char* value) override;
  // Teardown: what is queued is dropped (the caller kills synchronously);
  // a write in flight finishes, then done(arg).
  void close(void (*done)(void*), void* arg);

 private:
  struct Job {
    uv_work_t req;
    FileWriter* owner;
    std::string path;
    std::string value;
  };
  void next();
  static void work(uv_work_t* req);
  static void after(uv_work_t* req, int status);

  uv_loop_t* loop_;
  std::deque<std::pair<std::string, std::string>> queue_;
  Job* running_ = nullptr;
  bool closing_ = false;
  void (*closed_)(void*) = nullptr;
  void* closed_arg_ = nullptr;
};

}  // namespace proctree
