#include "loop/environment.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <vector>

#include "kernel/stdio_fds.h"
#include "ladder/cgroup_confinement.h"
#include "ladder/pidns_confinement.h"
#include "ladder/session_confinement.h"
#include "ladder/subreaper_confinement.h"
#include "loop/fd_room.h"

namespace proctree {
namespace {

// Call ids are unique in the process (every environment, every worker).
std::atomic<uint64_t> g_next_call_id{1};

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

Environment::Environment(EventSink* sink, LoopHost* host)
    : sink_(sink), host_(host), reactor_(this), subtrees_(&timers_) {}

Environment::~Environment() { close(); }

uint64_t Environment::next_call_id() { return g_next_call_id.fetch_add(1); }

SysError Environment::location(CgroupLocation* out) { return subtrees_.location(out); }

SysError Environment::ensure_open() {
  if (opened_) return open_error_;
  opened_ = true;
  open_error_ = [this]() -> SysError {
    if (SysError e = reactor_.open()) return e;
    keep_fd_room(reactor_.fd());
    if (SysError e = timers_.open()) return e;
    if (SysError e = reactor_.watch_loop(timers_.fd(), Reactor::LoopFd::kTimers)) return e;
    wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) return SysError::from_errno("eventfd");
    if (SysError e = reactor_.watch_loop(wake_.get(), Reactor::LoopFd::kWake)) return e;
    if (SysError e = writes_.open([](void* self) { static_cast<Environment*>(self)->update_keep_alive(); }, this)) {
      return e;
    }
    if (SysError e = reactor_.watch_loop(writes_.done_fd(), Reactor::LoopFd::kWrites)) return e;
    if (SysError e = ports_.open()) return e;
    if (SysError e = reactor_.watch_loop(ports_.done_fd(), Reactor::LoopFd::kPorts)) return e;
    if (SysError e = passes_.open()) return e;
    if (SysError e = reactor_.watch_loop(passes_.done_fd(), Reactor::LoopFd::kPasses)) return e;
    if (SysError e = spawner_.open()) return e;
    if (SysError e = reactor_.watch_loop(spawner_.event_fd(), Reactor::LoopFd::kSpawns)) return e;
    if (host_->watch_reactor(reactor_.fd(), [](void* self) { static_cast<Environment*>(self)->host_turn(); }, this)) {
      host_watches_ = true;
      return SysError::none();
    }
    return waiter_.start(reactor_.fd(), [](void* host) { static_cast<LoopHost*>(host)->wake(); }, host_);
  }();
  // What was asked for before the loop ran (a turn for a post) needs it.
  if (!open_error_ && wake_signalled_) {
    wake_signalled_ = false;
    signal_wake();
  }
  return open_error_;
}

void Environment::on_timers() { timers_.run_due(); }

void Environment::on_writes_done() { writes_.on_done(); }

void Environment::watch_exec(uint64_t id) {
  exec_due_.push_back({monotonic_ns() + static_cast<uint64_t>(Call::kExecReportWaitMs) * 1000000ULL, id});
  if (!exec_timer_.active()) exec_timer_.start(Call::kExecReportWaitMs);
}

void Environment::on_exec_timer() {
  const uint64_t now = monotonic_ns();
  // Calls whose report came in are dropped on the way, due or not: a timer
  // that fired per spawn would cost a wake-up per call.
  while (!exec_due_.empty()) {
    Call* call = find(exec_due_.front().id);
    if (call && call->exec_pending()) {
      if (exec_due_.front().deadline_ns > now) break;
      call->on_exec_overdue();
    }
    exec_due_.pop_front();
  }
  if (!exec_due_.empty()) exec_timer_.start((exec_due_.front().deadline_ns - now) / 1000000ULL + 1);
}

void Environment::on_spawns_done() {
  for (uint64_t id : spawner_.take_done()) {
    if (Call* call = find(id)) call->on_exec_reported();
  }
}

void Environment::signal_wake() {
  if (closing_ || wake_signalled_) return;
  wake_signalled_ = true;
  if (!wake_) return;  // not open yet: ensure_open() signals it
  // Through the host's loop when it can: no eventfd write and read.
  if (host_watches_ && host_->turn_soon()) {
    resume_pending_ = true;
    return;
  }
  uint64_t one = 1;
  while (write(wake_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void Environment::schedule_delivery() {
  if (delivery_scheduled_ || closing_) return;
  delivery_scheduled_ = true;
  host_->deliver_later();
}

void Environment::update_keep_alive() {
  bool alive = !closing_ && (referenced_ > 0 || !pending_.empty() || writes_.busy() || ports_.busy() || passes_.busy() ||
                               !returned_passes_.empty());
  if (alive == kept_alive_) return;
  kept_alive_ = alive;
  host_->keep_alive(alive);
}

SysError Environment::spawn(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  if (closing_) return SysError::of(ECANCELED, "spawn");
  if (SysError e = ensure_open()) return e;
  // Never unsealed: only the cgroup tier can seal (the facade says so first).
  if (opts.seal && opts.tier != Tier::kCgroup) return SysError::of(ENOTSUP, "seal");
  switch (opts.tier) {
    case Tier::kCgroup:
      if (opts.seal) return spawn_sealed(opts, std::move(req), out);
      return spawn_cgroup(opts, std::move(req), out);
    case Tier::kPgroup: {
      req.new_session = true;
      SpawnResult proc;
      Ref<SpawnJob> exec;
      uint64_t id = next_call_id();
      // In the harness's own cgroup, which is not frozen while we run.
      if (SysError e = start_command(id, &req, &proc, &exec, true)) return e;
      out->id = id;
      out->pid = proc.pid;
      out->method = proc.method;
      out->exec_pending = exec != nullptr;
      pid_t leader = proc.pid;
      Call* call = new Call(this, id, std::move(proc), std::make_unique<SessionConfinement>(leader), Fd());
      call->set_pending_exec(std::move(exec));
      if (SysError e = adopt(call, out)) return e;
      if (out->exec_pending) watch_exec(id);
      return SysError::none();
    }
    case Tier::kSystemd:
      return spawn_brokered(opts, req, out);
    default:
      return spawn_shim(opts, std::move(req), out);
  }
}

// The command itself (cgroup and pgroup tiers). Where nothing can hold it
// before its exec (its cgroup is not frozen), it is cloned right here with
// CLONE_VM|CLONE_VFORK: this thread waits the moment until the exec (as
// Node's own spawn does, for less: until the exec starts, not until it
// ends), and the report is in when this returns. Else it is cloned on a
// spawner thread (loop/spawner.h): this thread waits for the child to
// exist, never for its exec, which reports later (on_spawns_done); a child
// frozen before its exec by whoever may write its cgroup holds only its
// spawner thread. A uid or gid that cannot be taken is an error Node throws
// from spawn(), so that report is waited for, but never for ever (those
// children fork on a spawner thread: a copy of our memory takes time). *req
// is left as it was if no child was made.
SysError Environment::start_command(uint64_t id, SpawnRequest* req, SpawnResult* proc,
                                    Ref<SpawnJob>* exec, bool here) {
  // The environment is read here, on the thread that may setenv() it.
  if (req->inherit_env) snapshot_environ(req);
  if (req->set_uid || req->set_gid) return spawner_.start_and_wait(id, req, proc, exec, Call::kExecReportWaitMs);
  return spawner_.start(id, req, proc, exec, here ? &stack_ : nullptr);
}

SysError Environment::start_in_leaf(const SpawnOptions& opts, uint64_t id, SpawnRequest* req, CgroupDir* leaf,
                                    CpuCounters* base, SpawnedCall* out,
                                    const std::function<SysError(CgroupDir&)>& start) {
  SysError e;
  bool gave_up_clone3 = false;
  for (int round = 0; round < 3; ++round) {
    bool kept = false;
    e = subtrees_.make_leaf(opts.group, id, opts.limits, opts.helper, stack_, leaf, base, &kept, &out->guardian_error);
    if (e) break;
    req->cgroup_dir = leaf->dir_fd();
    e = start(*leaf);
    if (!e) break;
    const bool clone_failed = e.syscall == std::string("clone3") || e.syscall == std::string("clone");
    const bool killed_at_birth = e.err == kKilledAtBirth && e.syscall == std::string("clone3");
    if (kept && (clone_failed || e.path == "cgroup.procs")) {
      // A kept leaf that someone removed (an empty cgroup is anyone's to
      // rmdir who may write the subtree), so the clone could not reach it,
      // or that someone killed through its cgroup.kill (its command, say),
      // so the kernel kills whatever is born into it: every kept leaf of
      // this subtree is suspect, and the call gets a new one.
      leaf->remove();
      subtrees_.drop_kept(opts.group);
      continue;
    }
    if (!killed_at_birth || gave_up_clone3) break;
    // Killed at birth in a new leaf: the kernel holds this process's own
    // cgroup for killed (see kKilledAtBirth). Children join their leaf by
    // cgroup.procs from now on.
    gave_up_clone3 = true;
    give_up_clone3();
    leaf->remove();
  }
  if (e) {
    // The clone() fallback opens the leaf's cgroup.procs by its descriptor:
    // name the whole path.
    if (e.path == "cgroup.procs" && leaf->valid()) e.path = leaf->path() + "/cgroup.procs";
    leaf->remove();
    if (calls_.empty()) subtrees_.idle();
  }
  return e;
}

bool Environment::keep_leaf_descriptors(int dir_fd) {
  if (calls_.size() >= kLeafDescriptorsKeptBelow) return false;
  // Descriptors are handed out lowest first: one numbered past a quarter of
  // the limit says the harness has many open already. The limit is asked
  // again only for a descriptor past a quarter of the one last read (one
  // system call saved per call; a harness that lowers its limit later may
  // keep up to the bound's two descriptors a call a while longer).
  const rlim_t needed = static_cast<rlim_t>(dir_fd) + 4;
  if (fd_limit_ == 0 || needed >= fd_limit_ / 4) {
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return false;
    fd_limit_ = lim.rlim_cur == RLIM_INFINITY ? static_cast<rlim_t>(-1) : lim.rlim_cur;
  }
  return needed < fd_limit_ / 4;
}

SysError Environment::spawn_cgroup(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  uint64_t id = next_call_id();
  CgroupDir leaf;
  CpuCounters base;
  SpawnResult proc;
  Ref<SpawnJob> exec;
  bool queued = false;
  SysError e = start_in_leaf(opts, id, &req, &leaf, &base, out, [&](CgroupDir& made) {
    // A leaf frozen from above (a subtree frozen by a ladder, or by whoever
    // may write it) would hold the child before its exec, and this thread
    // with it: such a child is cloned on a spawner thread.
    CgroupEvents events;
    const bool here = !made.read_events(&events) && !events.frozen;
    // Past the JavaScript side's budget of clones in one turn: not waited
    // for at all (a uid or gid is, for the error Node throws).
    if (here && opts.defer && !req.set_uid && !req.set_gid) {
      if (req.inherit_env) snapshot_environ(&req);
      queued = true;
      return spawner_.queue(id, &req, &exec);
    }
    return start_command(id, &req, &proc, &exec, here);
  });
  if (e) return e;
  out->id = id;
  out->pid = proc.pid;
  out->cgroup = leaf.path();
  out->method = queued ? Spawner::expected_method() : proc.method;
  out->exec_pending = exec != nullptr;
  // The clone has used the leaf's descriptors. While few calls live, the
  // call keeps them: its end reads cgroup.events and cpu.stat through them
  // instead of reopening the leaf by its path (four system calls and a
  // path walk per call). Many live calls keep none (they are reopened if a
  // ladder or members() needs them): the first call refused them closes
  // those the live calls kept, so a live call costs no descriptor of its
  // leaf. Nor does a harness near its limit of descriptors keep any.
  if (keep_leaf_descriptors(leaf.dir_fd())) {
    leaf_descriptors_kept_ = true;
  } else {
    leaf.close();
    if (leaf_descriptors_kept_) {
      for (auto& kv : calls_) kv.second->close_descriptors();
      leaf_descriptors_kept_ = false;
    }
  }
  auto confinement = std::make_unique<CgroupConfinement>(std::move(leaf), Tier::kCgroup, &writes_);
  confinement->reuse_into(&subtrees_, base);
  Call* call = new Call(this, id, std::move(proc), std::move(confinement), Fd());
  call->set_pending_exec(std::move(exec), queued);
  if (SysError e = adopt(call, out)) return e;
  if (out->exec_pending) watch_exec(id);
  return SysError::none();
}

SysError Environment::shim_request(const SpawnOptions& opts, const char* mode, SpawnRequest* req, Fd* ours,
                                   Fd* theirs) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return SysError::from_errno("socketpair");
  ours->reset(sv[0]);
  theirs->reset(sv[1]);
  // The shim's end goes after the command's own fds, which the shim hands on
  // untouched; like every source it must sit above them.
  const int control = static_cast<int>(req->fds.size());
  if (theirs->get() <= control) {
    theirs->reset(fcntl(theirs->get(), F_DUPFD_CLOEXEC, control + 1));
    if (!*theirs) return SysError::from_errno("fcntl");
  }
  req->fds.push_back(theirs->get());
  // The command, with the same execvpe search, goes after the shim's own
  // arguments. A terminal is the command's controlling terminal, not the
  // shim's: the shim's child takes it after its own setsid().
  std::vector<std::string> argv = {opts.helper, mode, std::to_string(control), req->controlling_tty ? "1" : "0",
                                   std::to_string(req->candidates.size())};
  argv.insert(argv.end(), req->candidates.begin(), req->candidates.end());
  argv.push_back("--");
  argv.insert(argv.end(), req->argv.begin(), req->argv.end());
  req->argv = std::move(argv);
  req->candidates = {opts.helper};
  req->shell_fallback = false;
  req->controlling_tty = false;
  req->new_session = true;
  return SysError::none();
}

SysError Environment::spawn_shim(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  const bool pidns = opts.tier == Tier::kPidns;
  Fd ours, theirs;
  if (SysError e = shim_request(opts, pidns ? "init" : "subreaper", &req, &ours, &theirs)) return e;
  if (pidns) {
    // The init dies with the thread that spawned it, and its death kills the
    // namespace; the control socket's EOF covers the harness dying anyway.
    req.pdeathsig = SIGKILL;
    req.ns_flags = CLONE_NEWPID | (geteuid() == 0 ? 0 : CLONE_NEWUSER);
  }
  SpawnResult proc;
  SysError e = spawn_process(req, stack_, &proc);
  if (e && pidns && e.err == EPERM && !(req.ns_flags & CLONE_NEWUSER)) {
    // Root without CAP_SYS_ADMIN (a container): a user namespace may still do.
    req.ns_flags |= CLONE_NEWUSER;
    e = spawn_process(req, stack_, &proc);
  }
  if (e) {
    // The helper itself could not start: say so, not "spawn <file> ENOENT".
    if (std::string(e.syscall) == "execve") e = SysError::of(e.err, "proctree-helper", opts.helper);
    return e;
  }
  theirs.reset();
  uint64_t id = next_call_id();
  out->id = id;
  out->pid = -1;  // reported by the shim: a kStarted event follows
  out->shim = proc.pid;
  out->method = proc.method;
  std::unique_ptr<Confinement> c;
  if (pidns) {
    c = std::make_unique<PidnsConfinement>(proc.pid, proc.pidfd.get());
  } else {
    c = std::make_unique<SubreaperConfinement>(proc.pid, proc.pidfd.get());
  }
  return adopt(new Call(this, id, std::move(proc), std::move(c), std::move(ours)), out);
}

SysError Environment::adopt(Call* call, SpawnedCall* out) {
  out->verified = call->verified();
  calls_[call->id()] = call;
  ++referenced_;
  update_keep_alive();
  // From here the call exists: whatever fails now is the call's to report,
  // never a reason to pretend it did not start.
  call->start();
  return SysError::none();
}

void Environment::set_referenced(uint64_t id, bool ref) {
  if (Call* c = find(id)) c->set_referenced(ref);
}

void Environment::retire(uint64_t id, CpuCounters* base) {
  if (Call* c = find(id)) c->retire(base);
}

void Environment::on_call_ref_changed(bool was, bool now) {
  if (was == now) return;
  if (now) {
    ++referenced_;
  } else {
    --referenced_;
  }
  update_keep_alive();
}

Call* Environment::find(uint64_t id) {
  auto it = calls_.find(id);
  return it == calls_.end() ? nullptr : it->second;
}

void Environment::post(CallEvent event) {
  pending_.push_back(std::move(event));
  // Events caused by a JavaScript call (terminate, kill) are delivered
  // later, never from inside that call; those posted in a turn, at its end.
  if (!flushing_ && !dispatching_) schedule_delivery();
  update_keep_alive();
}

void Environment::flush() {
  if (flushing_ || dispatching_) return;
  flushing_ = true;
  // A listener may call back into us (terminate from an 'exit' handler):
  // what it posts is appended and delivered after it, in order. Each
  // listener may do real work (a 'close' that starts the next call), so a
  // turn delivers for a few milliseconds at most, then lets the loop serve
  // everything else and goes on in the next turn. The milliseconds are the
  // turn's: what ladders took of them this turn (starts, signal passes) is
  // not delivered on top. One event per callback into JavaScript: its
  // microtasks (a promise a listener resolved) run before the next event.
  if (turn_start_ns_ == 0) turn_start_ns_ = monotonic_ns();
  // In a turn the host's own loop called (host_turn_), each delivery is a
  // callback of its own already (napi_make_callback from the loop: its
  // microtasks run when it returns), so the turn goes on delivering while it
  // has time, without a round through the host per event.
  do {
    if (pending_.empty() || closing_) break;
    CallEvent ev = std::move(pending_.front());
    pending_.pop_front();
    sink_->deliver(ev);
  } while (host_turn_ && monotonic_ns() - turn_start_ns_ < kTurnBudgetNs);
  if (closing_) pending_.clear();
  flushing_ = false;
  if (!pending_.empty()) {
    if (monotonic_ns() - turn_start_ns_ < kTurnBudgetNs) {
      continuing_ = true;
      schedule_delivery();
    } else {
      // The rest goes out in the next turn, a task of its own.
      yielded_ = true;
      signal_wake();
    }
    update_keep_alive();
    return;
  }
  // Only once every event is out: a listener may still ask about its call.
  reap_finished();
  update_keep_alive();
}

void Environment::reap_finished() {
  if (reaping_ || closing_) return;
  reaping_ = true;
  std::vector<Call*> done;
  for (auto& kv : calls_) {
    if (kv.second->finished()) done.push_back(kv.second);
  }
  for (Call* c : done) {
    calls_.erase(c->id());
    if (c->referenced()) on_call_ref_changed(true, false);
    c->dispose();
  }
  if (!done.empty() && calls_.empty()) subtrees_.idle();
  reaping_ = false;
}

void Environment::on_main_readable(uint64_t id) {
  if (Call* c = find(id)) c->on_main_readable();
}

void Environment::on_control_readable(uint64_t id) {
  if (Call* c = find(id)) c->on_control_readable();
}

void Environment::on_change(uint64_t id) {
  if (Call* c = find(id)) c->on_change();
}

void Environment::on_members_exited(uint64_t id, size_t n) {
  if (Call* c = find(id)) c->on_members_exited(n);
}

void Environment::shutdown_sync(int wait_ms) {
  // The broker kills every leaf of its scope once its socket closes: closed
  // first, it does so while we do the same (the leaves are ours too).
  if (broker_) broker_->close();
  // A pass running elsewhere ends first: the calls finish below.
  passes_.close();
  kill_all_sync();
  for (int waited = 0; waited < wait_ms; waited += 2) {
    bool any = subtrees_.populated();
    for (auto& kv : calls_) any = any || kv.second->populated_now();
    if (!any) break;
    sleep_ms(2);
    // Where the kernel has no one-shot kill, rounds until empty.
    if (waited % 20 == 18) kill_all_sync();
  }
  for (auto& kv : calls_) kv.second->finish_sync();
  subtrees_.remove_all();
  pending_.clear();
}

void Environment::kill_all_sync() {
  // One cgroup.kill per subtree ends every cgroup-tier call in it; the
  // other tiers (and every leaf, where that kill was not taken) are killed
  // call by call, at once: nothing deferred lands before the process exits.
  const bool subtrees_whole = subtrees_.kill_round();
  for (auto& kv : calls_) {
    if (subtrees_whole && kv.second->tier() == Tier::kCgroup) continue;
    kv.second->kill_now(true);
  }
}

void Environment::close() {
  if (closing_ && !waiter_.running() && !host_watches_ && calls_.empty()) return;
  closing_ = true;
  // No turn after this: the Waiter is joined (or the host's watch ended)
  // before anything it reads closes.
  if (host_watches_) {
    host_watches_ = false;
    host_->unwatch_reactor();
  }
  waiter_.stop();
  // Before the calls go: a pass running elsewhere is a ladder's.
  passes_.close();
  std::vector<Call*> calls;
  for (auto& kv : calls_) calls.push_back(kv.second);
  calls_.clear();
  for (Call* c : calls) c->dispose();
  if (broker_) broker_->close();
  subtrees_.remove_all();
  subtrees_.close();
  writes_.close();
  ports_.close();
  deferred_stops_.clear();
  budget_waiters_.clear();
  returned_passes_.clear();
  pending_.clear();
  timers_.close();
  reactor_.close();
  wake_.reset();
  if (kept_alive_) {
    kept_alive_ = false;
    host_->keep_alive(false);
  }
}

}  // namespace proctree
