// What calls listen on (call.ports()), asked off the JavaScript thread: the
// /proc reads and the sock_diag query of kernel/sockets.h take a few
// milliseconds for a tree of a hundred processes, too long for the harness's
// event loop. One worker thread of our own (started on first use) answers
// queries in order; each answer is counted on an eventfd in the reactor's
// set and taken on the JavaScript thread (take_done), as the FileWriter's
// writes are.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sockets.h"
#include "kernel/sys_error.h"

namespace proctree {

// One question: by cgroup (the leaf, when sock_diag's cgroup filter works
// here, probed on the worker's thread), else by the members' pids.
struct PortsQuery {
  uint64_t request = 0;
  std::string leaf;         // the cgroup tiers' leaf, else empty
  std::vector<pid_t> pids;  // the members: listeners_of_pids without the filter
  // A cgroup named from outside (proctree ps): its members are read from
  // the leaf on the worker's thread when the filter is not there.
  bool members_from_leaf = false;
  // Sockets made in these cgroups, whoever holds them (a tree that is gone): instead of leaf/pids.
  std::vector<unsigned long long> cgroup_ids;
};

struct PortsAnswer {
  uint64_t request = 0;
  SysError error;
  std::vector<Listener> listeners;
};

class PortsWorker {
 public:
  PortsWorker() = default;
  PortsWorker(const PortsWorker&) = delete;
  PortsWorker& operator=(const PortsWorker&) = delete;
  ~PortsWorker();

  // The completion eventfd (for the reactor).
  SysError open();
  int done_fd() const { return done_.get(); }

  // Queues q; its answer comes through take_done(). Fails only when no
  // thread could be started (nothing is queued then).
  SysError query(PortsQuery q);
  // The eventfd turned readable: the answers finished since the last call.
  std::vector<PortsAnswer> take_done();
  // Queries queued or in flight (the loop stays alive for them).
  bool busy() const { return outstanding_ > 0; }
  // Teardown: what is queued is dropped; a query in flight finishes, then
  // the thread is joined.
  void close();

  // The answer itself, on whatever thread (the worker's, or a test's).
  static PortsAnswer answer(const PortsQuery& q);

 private:
  static void* run(void* self);

  Fd done_;
  uint64_t outstanding_ = 0;  // JavaScript thread only
  bool started_ = false;
  bool closed_ = false;
  pthread_t thread_{};
  // Shared with the worker (pthread's own primitives: see file_writer.h).
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv_ = PTHREAD_COND_INITIALIZER;
  std::deque<PortsQuery> queue_;
  std::vector<PortsAnswer> done_list_;
  bool stopping_ = false;
};

}  // namespace proctree
