#include "loop/spawner.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <utility>

#include "kernel/pidfd.h"
#include "kernel/syscalls.h"
#include "loop/thread.h"


namespace proctree {
namespace {

// How long the caller sleeps between looks at the kernel's pid: the child
// wakes it (EarlyIds::pid is a futex word) as soon as it runs, so this
// matters only for a child born frozen, or a spawn that made none.
constexpr int64_t kEarlyPollNs = 1000000;
// How long the Spawner's end waits for its threads to return.
constexpr long kStopWaitNs = 200000000;

class Locked {
 public:
  explicit Locked(pthread_mutex_t* mu) : mu_(mu) { pthread_mutex_lock(mu_); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;
  ~Locked() { pthread_mutex_unlock(mu_); }

 private:
  pthread_mutex_t* mu_;
};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t value, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, value, timeout_ns < 0 ? nullptr : &ts,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

void SpawnJob::wait_state(uint32_t from, int64_t timeout_ns) {
  const int64_t deadline = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
  while (state_.load(std::memory_order_acquire) == from) {
    int64_t left = -1;
    if (deadline >= 0) {
      left = deadline - now_ns();
      if (left <= 0) return;
    }
    // Counted before the state is looked at again (both sequentially
    // consistent): set_state() either sees this waiter and wakes it, or
    // stored before this load, and the futex sees the new value.
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    futex_wait(&state_, from, left);
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void SpawnJob::set_state(uint32_t s) {
  state_.store(s, std::memory_order_seq_cst);
  // Nobody waits for most jobs: no futex syscall for them.
  if (waiters_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&state_);
}

void SpawnJob::reap_abandoned() {
  // A step that failed was reaped by spawn_process; a child killed before
  // its first step, or one that exec'd, is ours to reap.
  if (error_ || !result_.pidfd.valid()) return;
  siginfo_t info;
  while (waitid(static_cast<idtype_t>(kPidfdIdType), static_cast<id_t>(result_.pidfd.get()), &info, WEXITED) < 0 &&
         errno == EINTR) {
  }
}

void SpawnJob::abandon() {
  if (abandon_.exchange(1) == 2) reap_abandoned();
}

void SpawnJob::spawner_done() {
  if (abandon_.exchange(2) == 1) reap_abandoned();
}

bool SpawnJob::take_early(pid_t* pid, int* pidfd) {
  for (;;) {
    if (take_early_ids(&early_, pid, pidfd)) return true;
    // Retired: a child the kernel killed at birth, made again at once
    // (Spawner::run). Its successor's ids are taken instead.
    if (__atomic_load_n(&early_.claim, __ATOMIC_ACQUIRE) != EarlyIds::kRetired) return false;
    futex_wait(reinterpret_cast<std::atomic<uint32_t>*>(&early_.claim), EarlyIds::kRetired, kEarlyPollNs);
  }
}

bool SpawnJob::collect(int timeout_ms, SysError* failed) {
  if (!done()) {
    if (timeout_ms == 0) return false;
    const int64_t ns = timeout_ms < 0 ? -1 : static_cast<int64_t>(timeout_ms) * 1000000;
    const int64_t deadline = ns < 0 ? -1 : now_ns() + ns;
    for (uint32_t s; (s = state_.load(std::memory_order_acquire)) != kDone;) {
      int64_t left = deadline < 0 ? -1 : deadline - now_ns();
      if (deadline >= 0 && left <= 0) return false;
      wait_state(s, left);
    }
  }
  *failed = error_;
  return true;
}

Spawner::~Spawner() {
  if (!shared_) return;
  bool all_returned;
  {
    Locked lock(&shared_->mu);
    shared_->stopping = true;
    pthread_cond_broadcast(&shared_->cv);
    timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += kStopWaitNs;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000;
    }
    while (shared_->running > 0) {
      if (pthread_cond_timedwait(&shared_->cv, &shared_->mu, &deadline) == ETIMEDOUT) break;
    }
    all_returned = shared_->running == 0;
  }
  // A thread held in a vfork cannot be joined now; it holds the shared state
  // and leaves when its child moves on.
  for (pthread_t t : threads_) {
    if (all_returned) {
      join_thread(t);
    } else {
      detach_thread(t);
    }
  }
}

SysError Spawner::open() {
  if (shared_) return SysError::none();
  Ref<Shared> shared(new Shared);
  shared->event.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!shared->event) return SysError::from_errno("eventfd");
  shared_ = std::move(shared);
  return SysError::none();
}

void Spawner::ensure_thread(size_t cap) {
  // Called with the lock held: a job is queued. A thread is made if none is
  // idle and there are fewer than cap.
  // Signals go to the JavaScript thread, never to ours (start_thread): a
  // handler must not run on a thread that clones children sharing its memory.
  if (shared_->idle > 0 || threads_.size() >= cap) return;
  auto* arg = new Ref<Shared>(shared_);
  pthread_t t;
  if (start_thread(run, arg, &t, kThreadStack)) {
    // No thread could be made: the queued job waits for a busy one.
    delete arg;
    return;
  }
  threads_.push_back(t);
  ++shared_->idle;
  ++shared_->running;
}

void* Spawner::run(void* arg) {
  name_this_thread("proctree-spawn");
  Ref<Shared> shared = std::move(*static_cast<Ref<Shared>*>(arg));
  delete static_cast<Ref<Shared>*>(arg);
  ChildStack stack;
  for (;;) {
    Ref<SpawnJob> job;
    {
      Locked lock(&shared->mu);
      while (!shared->stopping && shared->queue.empty()) pthread_cond_wait(&shared->cv, &shared->mu);
      // Stopping: what is still queued is never cloned (its calls are gone,
      // and their leaves with them).
      if (shared->stopping) shared->queue.clear();
      if (shared->queue.empty()) {  // stopping
        --shared->running;
        pthread_cond_broadcast(&shared->cv);
        return nullptr;
      }
      job = std::move(shared->queue.front());
      shared->queue.pop_front();
      --shared->idle;
    }
    job->set_state(SpawnJob::kCloning);
    job->req_.birth_kill_is_error = true;
    job->error_ = spawn_process(job->req_, stack, &job->result_, &job->early_);
    if (job->error_.err == kKilledAtBirth) {
      // Born into a cgroup the kernel counts as killed (a kept leaf someone
      // killed while it sat empty), and nobody took its ids: nothing of it
      // ran, and its call already names that cgroup. Made again there with
      // clone() and a write of cgroup.procs, which the kernel's check does
      // not cover.
      job->req_.no_clone3 = true;
      reopen_early_ids(&job->early_);
      job->error_ = spawn_process(job->req_, stack, &job->result_, &job->early_);
    }
    job->held_.clear();  // the child has its own (or none is coming)
    // result_.pidfd stays open with the job: the caller dups the number it
    // read from the kernel, which must not be reused before it has.
    // The request stays with the job: given back if no child was made.
    job->set_state(SpawnJob::kDone);
    job->spawner_done();
    uint64_t one = 1;
    {
      Locked lock(&shared->mu);
      shared->done.push_back(job->tag());
      ++shared->idle;
    }
    (void)!write(shared->event.get(), &one, sizeof one);
  }
}

CloneMethod Spawner::expected_method() {
  return clone3_available() ? CloneMethod::kClone3 : CloneMethod::kClone;
}

size_t Spawner::burst_threads() {
  // Half the CPUs this process may run on, at least one: a burst's children
  // exec on the others, and the harness keeps a CPU for its own loop (with
  // more, on two CPUs, the loop waits for a CPU behind them).
  static const size_t n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    return static_cast<size_t>(std::max(1L, cpus / 2));
  }();
  return n;
}

SysError Spawner::enqueue(const Ref<SpawnJob>& job, size_t thread_cap) {
  if (SysError e = open()) return e;
  {
    Locked lock(&shared_->mu);
    shared_->queue.push_back(job);
    ensure_thread(thread_cap);
  }
  pthread_cond_signal(&shared_->cv);
  return SysError::none();
}

SysError SpawnJob::hold_descriptors() {
  // The caller closes its own when queue() returns, long before the clone:
  // the job clones from copies, above every target (as spawn_process wants
  // its sources), and closes them once the child has its own.
  const int floor = std::max(3, static_cast<int>(req_.fds.size()));
  std::vector<Fd> held;
  std::vector<int> fds = req_.fds;
  for (int& fd : fds) {
    if (fd < 0) continue;
    held.emplace_back(fcntl(fd, F_DUPFD_CLOEXEC, floor));
    if (!held.back()) return SysError::from_errno("fcntl");
    fd = held.back().get();
  }
  int cgroup_dir = req_.cgroup_dir;
  if (cgroup_dir >= 0) {
    held.emplace_back(fcntl(cgroup_dir, F_DUPFD_CLOEXEC, floor));
    if (!held.back()) return SysError::from_errno("fcntl");
    cgroup_dir = held.back().get();
  }
  held_ = std::move(held);
  req_.fds = std::move(fds);
  req_.cgroup_dir = cgroup_dir;
  return SysError::none();
}

SysError Spawner::queue(uint64_t tag, SpawnRequest* req, Ref<SpawnJob>* job_out) {
  const std::vector<int> fds = req->fds;
  const int cgroup_dir = req->cgroup_dir;
  Ref<SpawnJob> job(new SpawnJob(tag, std::move(*req)));
  SysError e = job->hold_descriptors();
  if (!e) e = enqueue(job, burst_threads());
  if (e) {
    // Given back as it came, with the caller's own descriptors.
    job->held_.clear();
    *req = std::move(job->req_);
    req->fds = fds;
    req->cgroup_dir = cgroup_dir;
    return e;
  }
  *job_out = std::move(job);
  return SysError::none();
}

SysError Spawner::start(uint64_t tag, SpawnRequest* req, SpawnResult* out, Ref<SpawnJob>* job_out,
                        ChildStack* here) {
  if (SysError e = open()) return e;
  Ref<SpawnJob> job(new SpawnJob(tag, std::move(*req)));
  if (here) {
    // Nobody waits on its state: no futex is touched. Nor can anyone else
    // signal the child before it returns.
    job->req_.birth_kill_is_error = true;
    job->state_.store(SpawnJob::kCloning, std::memory_order_relaxed);
    job->error_ = spawn_process(job->req_, *here, &job->result_, &job->early_);
    job->state_.store(SpawnJob::kDone, std::memory_order_release);
    job->spawner_done();
    if (job->error_.err == kKilledAtBirth) {
      // Nothing of it ran, and it is reaped: given back, for the caller to
      // start again where the kernel lets it live.
      SysError e = job->error_;
      *req = std::move(job->req_);
      return e;
    }
  } else if (SysError e = enqueue(job, kMaxThreads)) {
    *req = std::move(job->req_);
    return e;
  }
  bool untried = false;
  if (SysError e = take_ids(job, kCloneWaitNs, out, &untried)) {
    // Given back if no child was made (untried, or the clone itself failed).
    if (untried || (job->done() && job->error_)) *req = std::move(job->req_);
    return e;
  }
  *job_out = std::move(job);
  return SysError::none();
}

SysError Spawner::take_ids(const Ref<SpawnJob>& job, int64_t wait_ns, SpawnResult* out, bool* untried,
                           int64_t settle_ns) {
  // Wait for the kernel's ids (the child wakes us), or the end.
  int64_t deadline = now_ns() + wait_ns;
  bool asked_thread = false;
  bool cloning_wait = false;
  // When the ids of a clone still in progress may be taken (-1: none seen).
  int64_t take_from = -1;
  for (;;) {
    uint32_t s = job->state_.load(std::memory_order_acquire);
    if (s == SpawnJob::kDone) break;
    pid_t pid;
    int fd;
    if (s == SpawnJob::kCloning && read_early_ids(job->early_, &pid, &fd) && fd >= 0) {
      // The clone returns as soon as its child exec'd or died. One the
      // kernel killed at birth (a kept leaf someone killed) is made again
      // by its thread, unless a reader took its ids first: with settle_ns,
      // those of a clone that has not returned after it are taken (a child
      // held before its exec, in a frozen cgroup), not sooner.
      const int64_t now = now_ns();
      if (take_from < 0) take_from = now + settle_ns;
      if (now >= take_from) {
        if (job->take_early(&pid, &fd) && fd >= 0) break;
      } else {
        job->wait_state(s, take_from - now);
        continue;
      }
    }
    if (s == SpawnJob::kQueued && !asked_thread && wait_ns > 0) {
      // Queued behind a burst's few threads, or behind threads held by
      // children frozen before their exec: someone waits for it now, so it
      // goes first, with a thread for it.
      asked_thread = true;
      Locked lock(&shared_->mu);
      for (auto it = shared_->queue.begin(); it != shared_->queue.end(); ++it) {
        if (*it == job) {
          shared_->queue.erase(it);
          shared_->queue.push_front(job);
          break;
        }
      }
      ensure_thread(kMaxThreads);
    }
    int64_t left = deadline - now_ns();
    if (left <= 0 && s == SpawnJob::kCloning && !cloning_wait) {
      // Inside the clone: its ids come within moments (a frozen cgroup does
      // not hold them), and a child must not be left unwatched because
      // this caller would rather not wait.
      cloning_wait = true;
      deadline = now_ns() + kCloneWaitNs;
      continue;
    }
    if (left <= 0) {
      if (s == SpawnJob::kQueued) {
        // Still queued: take it back, untried.
        Locked lock(&shared_->mu);
        for (auto it = shared_->queue.begin(); it != shared_->queue.end(); ++it) {
          if (*it == job) {
            shared_->queue.erase(it);
            job->held_.clear();
            *untried = true;
            return SysError::of(EAGAIN, "spawn");
          }
        }
        continue;  // taken meanwhile
      }
      break;  // cloning for that long: the ids are read as they are
    }
    // spawn_process zeroes the word before the clone; 0 until the kernel
    // writes the pid.
    futex_wait(reinterpret_cast<std::atomic<uint32_t>*>(&job->early_.pid), 0, std::min(left, kEarlyPollNs));
  }
  pid_t pid = -1;
  int pidfd = -1;
  if (!job->take_early(&pid, &pidfd) || pidfd < 0) {
    // No child was made (the clone itself failed), or none could be seen.
    if (job->done() && job->error_) return job->error_;
    return SysError::of(EAGAIN, "spawn");
  }
  // Ours: the spawning thread's copy stays its own until it returns (a
  // child that failed is reaped there, and the number must not be reused
  // under a reader meanwhile).
  out->pid = pid;
  if (job->done() && !job->error_ && job->result_.pidfd.get() == pidfd) {
    // Its thread is done with it (and it exec'd: nothing of the job reads
    // it again): taken, not copied. Two system calls less on the inline
    // clone, which is most spawns.
    out->pidfd = std::move(job->result_.pidfd);
    out->method = job->result_.method;
    return SysError::none();
  }
  out->pidfd.reset(fcntl(pidfd, F_DUPFD_CLOEXEC, 3));
  if (!out->pidfd) {
    // Out of descriptors with a child made: it must not run unwatched.
    SysError e = SysError::from_errno("fcntl");
    pidfd_signal(pidfd, SIGKILL);
    job->abandon();
    out->pid = -1;
    return e;
  }
  out->method = job->done() ? job->result_.method : expected_method();
  return SysError::none();
}

SysError Spawner::start_and_wait(uint64_t tag, SpawnRequest* req, SpawnResult* out,
                                 Ref<SpawnJob>* job, int wait_ms) {
  if (SysError e = start(tag, req, out, job)) return e;
  SysError failed;
  if ((*job)->collect(wait_ms, &failed) && failed) {
    // Failed before its exec: the spawning thread has reaped the child.
    *out = SpawnResult();
    job->reset();
    return failed;
  }
  return SysError::none();
}

std::vector<uint64_t> Spawner::take_done() {
  std::vector<uint64_t> out;
  if (!shared_) return out;
  // One read takes the whole count (not a semaphore eventfd).
  uint64_t n;
  while (read(shared_->event.get(), &n, sizeof n) < 0 && errno == EINTR) {
  }
  Locked lock(&shared_->mu);
  out.swap(shared_->done);
  return out;
}

}  // namespace proctree
