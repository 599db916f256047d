// What calls listen on (call.ports()), asked off the JavaScript thread: the
// /proc reads and the sock_diag query of kernel/sockets.h take a few
// milliseconds for a tree of a hundred processes, too long for the harness's
// event loop. A JobThread of its own answers queries in order; each answer
// is taken on the JavaScript thread (take_done).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel/fd.h"
#include "kernel/procfs.h"
#include "kernel/sockets.h"
#include "kernel/sys_error.h"
#include "loop/job_thread.h"
#include "loop/ref.h"

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
  // Not a ports question: what /proc says of each of pids (describe()).
  // Its reads can wait on a process that is between fork and exec, as long
  // as the exec takes, and a thousand of them take tens of milliseconds.
  bool describe = false;
};

struct PortsAnswer {
  uint64_t request = 0;
  SysError error;
  std::vector<Listener> listeners;
  bool described = false;         // a describe query: infos, not listeners
  std::vector<ProcessInfo> infos;  // the pids still there, in their order
};

class PortsWorker {
 public:
  PortsWorker() = default;
  PortsWorker(const PortsWorker&) = delete;
  PortsWorker& operator=(const PortsWorker&) = delete;
  ~PortsWorker();

  // The completion eventfd (for the reactor).
  SysError open() { return jobs_.open(); }
  int done_fd() const { return jobs_.done_fd(); }

  // Queues q; its answer comes through take_done(). Fails only when no
  // thread could be started (nothing is queued then).
  SysError query(PortsQuery q);
  // The eventfd turned readable: the answers finished since the last call.
  std::vector<PortsAnswer> take_done();
  // Queries queued or in flight (the loop stays alive for them).
  bool busy() const { return jobs_.busy(); }
  // Teardown: what is queued is dropped; a query in flight gets
  // kAbandonAfterMs to finish (it is /proc reads, which may wait on a
  // process stuck in the kernel), then the thread is left to finish it
  // alone, with what it writes to.
  void close();
  static constexpr int kAbandonAfterMs = 200;

  // The answer itself, on whatever thread (the worker's, or a test's).
  static PortsAnswer answer(const PortsQuery& q);

 private:
  // The answers, from the worker's thread (pthread's own mutex: see
  // job_thread.h). Each query holds them too: one left running at close()
  // still has somewhere to put its answer.
  struct Answers {
    Answers() = default;
    Answers(const Answers&) = delete;
    Answers& operator=(const Answers&) = delete;
    ~Answers() { pthread_mutex_destroy(&mu); }
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    std::vector<PortsAnswer> list;
    std::atomic<int> refs_{1};
  };
  Ref<Answers> answers_{new Answers()};
  // A small stack: the work is /proc reads and one netlink socket.
  JobThread jobs_{"proctree-ports", 256 * 1024, kAbandonAfterMs};
};

}  // namespace proctree
