// A thread of our own that runs jobs off the JavaScript thread, in order, and
// tells of each finished one on an eventfd in the reactor's set, taken on the
// JavaScript thread (take_done): what the slow cgroup writes (FileWriter),
// ports() queries and the ladders' passes over large trees run on. Started
// on first use.
#pragma once

#include <pthread.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class JobThread {
 public:
  // name: the thread's (15 characters at most); stack_size 0: the default.
  JobThread(const char* name, size_t stack_size) : name_(name), stack_size_(stack_size) {}
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;
  ~JobThread();

  // The completion eventfd (for the reactor).
  SysError open();
  int done_fd() const { return done_.get(); }

  // Queues work; id comes back from take_done() once it ran. The
  // descriptors work moves into *late are closed after that, on the thread:
  // nothing left to close delays the news of its end. Fails only when no
  // thread could be started (nothing is queued then).
  using Work = std::function<void(std::vector<Fd>* late)>;
  SysError run(uint64_t id, Work work);
  // The eventfd turned readable: the ids of the jobs finished since the
  // last call, in the order they ran.
  std::vector<uint64_t> take_done();
  // Jobs queued or running (the loop stays alive for them).
  bool busy() const { return outstanding_ > 0; }
  // Teardown: what is queued is dropped (it never comes back); a job
  // running finishes, then the thread is joined.
  void close();

 private:
  static void* main(void* self);

  const char* name_;
  size_t stack_size_;
  Fd done_;
  uint64_t outstanding_ = 0;  // JavaScript thread only
  bool started_ = false;
  bool closed_ = false;
  pthread_t thread_{};
  // Shared with the thread. pthread's own, not std::condition_variable:
  // libstdc++ 12 gave its wait() a symbol version (GLIBCXX_3.4.30) newer
  // than what Node's own builds need (scripts/symbol-ceiling.js).
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv_ = PTHREAD_COND_INITIALIZER;
  std::deque<std::pair<uint64_t, Work>> queue_;
  std::vector<uint64_t> finished_;
  bool stopping_ = false;
};

}  // namespace proctree
