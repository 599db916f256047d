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
  // abandon_after_ms >= 0: close() waits that long for a job running, then
  // leaves the thread to finish it alone (detached; it frees what it shares
  // with us when it is done). Only for jobs that own everything they touch:
  // a /proc read may wait as long as the process it reads is stuck in the
  // kernel, and a teardown (the harness's exit) must not wait with it.
  // -1: close() always waits for the job.
  JobThread(const char* name, size_t stack_size, int abandon_after_ms = -1)
      : name_(name), stack_size_(stack_size), abandon_after_ms_(abandon_after_ms) {}
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;
  ~JobThread();

  // The completion eventfd (for the reactor).
  SysError open();
  int done_fd() const { return shared_ ? shared_->done.get() : -1; }

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
  // running finishes, then the thread is joined (or, past abandon_after_ms,
  // left to finish it alone). Whether the thread was left running.
  bool close();

 private:
  // What the thread shares with us: on the heap, so that a thread left
  // running (abandoned) still has it; whoever of the two is last frees it.
  // pthread's own mutex and condition, not std::condition_variable:
  // libstdc++ 12 gave its wait() a symbol version (GLIBCXX_3.4.30) newer
  // than what Node's own builds need (scripts/symbol-ceiling.js).
  struct Shared {
    Shared();
    ~Shared();
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;
    const char* name = nullptr;
    Fd done;  // the completion eventfd
    pthread_mutex_t mu;
    pthread_cond_t cv;  // CLOCK_MONOTONIC: close()'s bounded wait
    std::deque<std::pair<uint64_t, Work>> queue;
    std::vector<uint64_t> finished;
    bool stopping = false;
    bool exited = false;     // the thread's last act (under mu)
    bool abandoned = false;  // close() left; the thread frees this
  };
  static void* main(void* shared);

  const char* name_;
  size_t stack_size_;
  int abandon_after_ms_;
  Shared* shared_ = nullptr;  // from open() until close()
  uint64_t outstanding_ = 0;  // JavaScript thread only
  bool started_ = false;
  bool closed_ = false;
  pthread_t thread_{};
};

}  // namespace proctree
