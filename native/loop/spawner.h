// Spawning off the JavaScript thread. A command's child is cloned with
// CLONE_VM | CLONE_VFORK on a thread of the addon's own, which the kernel
// suspends until the child execs or exits. That is what keeps the vfork's
// guarantees: the OOM killer skips a child still in a vfork (in_vfork() in
// oom_badness), which would otherwise be scored by the harness's RSS and take
// the harness with it; and the thread whose TLS the child's stack protector
// or a signal could read stays alive until the exec.
//
// The JavaScript thread clones itself where nothing can hold the child
// (start(), here), or hands a SpawnRequest over and waits only for the
// child to exist (start()), or, past a burst's budget, does not wait at all
// (queue(), then take_ids() when the child is needed): the kernel writes its pid and pidfd (CLONE_PARENT_SETTID,
// CLONE_PIDFD) before the spawning thread enters the vfork wait, so a child
// held before its exec (born into a frozen cgroup) is just a call whose exec
// has not reported yet. The report comes later: SpawnJob::collect() asks
// for it, and the Spawner's eventfd says when one came in.
//
// A thread held by such a child serves no other spawn until the child moves
// on, so a spawn that finds every thread busy starts another (up to
// kMaxThreads). Threads live as long as the Spawner: a child's
// PR_SET_PDEATHSIG fires when the thread that cloned it exits.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <utility>

#include <pthread.h>
#include <vector>

#include "kernel/fd.h"
#include "kernel/spawn.h"
#include "kernel/sys_error.h"
#include "loop/ref.h"

namespace proctree {

class SpawnJob {
 public:
  SpawnJob(uint64_t tag, SpawnRequest req) : tag_(tag), req_(std::move(req)) {}
  SpawnJob(const SpawnJob&) = delete;
  SpawnJob& operator=(const SpawnJob&) = delete;

  uint64_t tag() const { return tag_; }
  // Whether the spawning thread has returned (the child exec'd or exited,
  // or no child was made).
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // Waits up to timeout_ms (0: not at all, -1: for ever) for the report.
  // false: not in yet. true: *failed is the step that failed, or none.
  bool collect(int timeout_ms, SysError* failed);

 private:
  friend class Spawner;
  enum State : uint32_t { kQueued = 0, kCloning = 1, kDone = 2 };
  // Waits until the state leaves `from` or timeout_ns passes (futex).
  void wait_state(uint32_t from, int64_t timeout_ns);
  void set_state(uint32_t s);
  // The caller gave the child up after it existed (killed it): whichever
  // of the caller and the spawning thread comes second reaps it.
  void abandon();
  void spawner_done();
  void reap_abandoned();
  // The child's ids, for the caller to act on (take_early_ids): false while
  // there are none yet.
  bool take_early(pid_t* pid, int* pidfd);
  // queue(): copies of the request's descriptors, which the caller closes.
  SysError hold_descriptors();

  const uint64_t tag_;
  SpawnRequest req_;
  // What hold_descriptors() copied; closed by the spawning thread after the
  // clone (a pipe's end held here would keep its reader from EOF).
  std::vector<Fd> held_;
  // Written by the kernel while the spawning thread is in the clone.
  EarlyIds early_;
  SpawnResult result_;
  SysError error_;
  std::atomic<uint32_t> state_{kQueued};
  std::atomic<uint32_t> waiters_{0};  // threads in wait_state()'s futex wait
  // 1: abandoned by the caller; 2: the spawning thread is done with it.
  std::atomic<int> abandon_{0};
  std::atomic<int> refs_{1};
  template <typename>
  friend class Ref;
};

class Spawner {
 public:
  Spawner() = default;
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;
  // Stops the threads, waiting a moment for them (so that what they hold,
  // the eventfd included, is gone when this returns): a thread still held
  // in a vfork after that is left to finish on its own (its child was
  // killed by the caller's teardown, or will exec).
  ~Spawner();

  SysError open();
  // Readable when a job is done (take_done() lists them).
  int event_fd() const { return shared_ ? shared_->event.get() : -1; }

  // Starts req on a spawner thread and waits for its child to exist: fills
  // *out (pid, pidfd, method; the pidfd is the caller's) and returns the job,
  // whose report is read later. On error nothing is left, *job is empty and
  // *req was not consumed unless the clone was tried.
  //
  // here: clone on the calling thread instead, on that stack, and return
  // once the child has exec'd or failed (the same CLONE_VM|CLONE_VFORK: the
  // kernel holds this thread until then, and the job comes back done). No
  // hand-over to a thread and back, which is most of what a spawn costs the
  // harness; only for a child that nothing can hold before its exec (the
  // caller checks that its cgroup is not frozen).
  SysError start(uint64_t tag, SpawnRequest* req, SpawnResult* out, Ref<SpawnJob>* job, ChildStack* here = nullptr);
  // Queues req for a spawner thread and returns at once, before its child
  // exists: for a burst of spawns in one turn of the JavaScript thread, which
  // then never waits on a clone (one thread per spawn, each waiting in its
  // vfork, would not clone faster on a few CPUs, and would take the CPU the
  // event loop needs): it makes threads up to burst_threads(); a job someone
  // waits for gets one up to kMaxThreads (take_ids). The child's ids are
  // read later with take_ids().
  // *req is left as it was on error.
  SysError queue(uint64_t tag, SpawnRequest* req, Ref<SpawnJob>* job);
  // Waits up to wait_ns for a queued job's child to exist and fills *out as
  // start() does (the pidfd is the caller's). A job still queued at the end
  // is taken back untried (*untried, EAGAIN); one inside its clone is waited
  // for kCloneWaitNs more; a clone that failed returns its error, with no
  // child left.
  // settle_ns: how long a clone in progress is left to its thread once
  // its child's ids are out (kBirthSettleNs for a queued job's adoption).
  SysError take_ids(const Ref<SpawnJob>& job, int64_t wait_ns, SpawnResult* out, bool* untried,
                    int64_t settle_ns = 0);
  // The same, waiting for the report too (up to wait_ms): a step that failed
  // within that time is returned as spawn_process returns it (the child
  // reaped, nothing in *out). For what Node reports from spawn() itself (a
  // uid or gid that cannot be taken).
  SysError start_and_wait(uint64_t tag, SpawnRequest* req, SpawnResult* out, Ref<SpawnJob>* job,
                          int wait_ms);
  // How a job not yet done will clone (its result says once it is).
  static CloneMethod expected_method();
  // Tags of the jobs done since the last call.
  std::vector<uint64_t> take_done();

  // Threads held by children frozen before their exec are bounded only by
  // this: past it a spawn waits for one (kCloneWaitNs), then fails EAGAIN,
  // as fork() does at a process limit. Each costs little: a small stack.
  static constexpr size_t kMaxThreads = 1024;
  static constexpr size_t kThreadStack = 256 * 1024;
  // How long start() waits for the child to exist at all: the clone is not
  // held by a frozen cgroup (the kernel writes the ids before the child runs),
  // so this is only reached when every thread is stuck and none can be made.
  static constexpr int64_t kCloneWaitNs = 2000000000;
  // How long a call adopting its queued job's clone leaves it to its
  // thread once the child's ids are out: a clone whose child exec'd or died
  // (killed at birth, and made again) returns within it, on a loaded
  // machine too. Only a child held before its exec (its cgroup frozen)
  // makes the caller wait it out.
  static constexpr int64_t kBirthSettleNs = 50000000;

 private:
  // (pthread's mutex and condition, not std's: libstdc++ 12's
  // condition_variable::wait needs GLIBCXX_3.4.30, above the ceiling.)
  struct Shared {
    Shared() {
      pthread_mutex_init(&mu, nullptr);
      pthread_cond_init(&cv, nullptr);
    }
    ~Shared() {
      pthread_cond_destroy(&cv);
      pthread_mutex_destroy(&mu);
    }
    std::atomic<int> refs_{1};
    pthread_mutex_t mu;
    pthread_cond_t cv;
    std::deque<Ref<SpawnJob>> queue;
    std::vector<uint64_t> done;
    size_t idle = 0;
    size_t running = 0;  // threads not yet returned from run()
    bool stopping = false;
    Fd event;
  };
  static void* run(void* arg);  // arg: a new Ref<Shared>
  static size_t burst_threads();
  // Called with the lock held: a thread if none is idle, up to cap.
  void ensure_thread(size_t cap);
  SysError enqueue(const Ref<SpawnJob>& job, size_t thread_cap);

  Ref<Shared> shared_;
  std::vector<pthread_t> threads_;
};

}  // namespace proctree
