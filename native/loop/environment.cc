#include "loop/environment.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "kernel/stdio_fds.h"
#include "kernel/systemd_probe.h"
#include "ladder/cgroup_confinement.h"
#include "ladder/pidns_confinement.h"
#include "ladder/session_confinement.h"
#include "ladder/subreaper_confinement.h"

extern char** environ;

namespace proctree {
namespace {

// Call ids are unique in the process, so several environments (workers) can
// share a subtree name without their leaves colliding.
std::atomic<uint64_t> g_next_call_id{1};

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

Environment::Environment(uv_loop_t* loop, EventSink* sink)
    : loop_(loop), sink_(sink), reactor_(loop, this), subtrees_(loop), writes_(loop) {}

Environment::~Environment() {
  for (auto& kv : calls_) delete kv.second;
}

SysError Environment::location(CgroupLocation* out) { return subtrees_.location(out); }

SysError Environment::ensure_open() {
  if (opened_) return open_error_;
  opened_ = true;
  open_error_ = reactor_.open();
  if (open_error_) return open_error_;
  flush_timer_ = new uv_timer_t;
  uv_timer_init(loop_, flush_timer_);
  flush_timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(flush_timer_));
  return SysError::none();
}

SysError Environment::spawn(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  if (closing_) return SysError::of(ECANCELED, "spawn");
  if (SysError e = ensure_open()) return e;
  switch (opts.tier) {
    case Tier::kCgroup:
      return spawn_cgroup(opts, std::move(req), out);
    case Tier::kPgroup: {
      req.new_session = true;
      SpawnResult proc;
      if (SysError e = spawn_process(req, stack_, &proc)) return e;
      uint64_t id = g_next_call_id.fetch_add(1);
      out->id = id;
      out->pid = proc.pid;
      out->method = proc.method;
      pid_t leader = proc.pid;
      return adopt(new Call(this, id, std::move(proc), std::make_unique<SessionConfinement>(leader), Fd()));
    }
    case Tier::kSystemd:
      return spawn_brokered(opts, req, out);
    default:
      return spawn_shim(opts, std::move(req), out);
  }
}

SysError Environment::ensure_broker(const std::string& helper) {
  if (broker_error_) return broker_error_;
  if (broker_) return SysError::none();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  std::string systemd_run = find_in_path("systemd-run", env);
  if (systemd_run.empty()) return SysError::of(ENOENT, "broker", "systemd-run is not on PATH");
  // One broker per environment: a worker's calls die with the worker.
  static std::atomic<unsigned> environments{0};
  unsigned n = environments.fetch_add(1);
  BrokerLaunch launch;
  launch.helper = helper;
  launch.wrapper = systemd_run_wrapper(systemd_run, broker_unit_name(n == 0 ? "" : "e" + std::to_string(n + 1)));
  auto client = std::make_unique<BrokerClient>();
  if (SysError e = BrokerClient::start(launch, stack_, client.get())) return e;
  if (SysError e = reactor_.watch_broker(client->socket_fd(), client->process_pidfd())) {
    client->close();
    return e;
  }
  broker_ = std::move(client);
  return SysError::none();
}

SysError Environment::spawn_brokered(const SpawnOptions& opts, const SpawnRequest& req, SpawnedCall* out) {
  // The broker starts commands with their 0..2 only, as the user it runs as.
  if (req.fds.size() > 3) return SysError::of(ENOTSUP, "spawn", "the systemd tier passes fds 0-2 only");
  if (req.set_uid || req.set_gid) return SysError::of(ENOTSUP, "setuid", "the systemd tier runs commands as the harness's user");
  if (SysError e = ensure_broker(opts.helper)) return e;
  uint64_t id = g_next_call_id.fetch_add(1);
  BrokerSpawn spawn;
  spawn.leaf = "c" + std::to_string(id);
  spawn.candidates = req.candidates;
  spawn.argv = req.argv;
  if (req.inherit_env) {
    for (char** e = environ; *e; ++e) spawn.envp.push_back(*e);
  } else {
    spawn.envp = req.envp;
  }
  spawn.cwd = req.cwd;
  for (int i = 0; i < 3; ++i) {
    // The broker gives /dev/null where it gets nothing; our own fd i where
    // the call inherits it.
    if (req.fds[i] == kInherit) {
      spawn.stdio[i] = i;
    } else if (req.fds[i] == kClosed) {
      spawn.stdio[i] = -1;
    } else {
      spawn.stdio[i] = req.fds[i];
    }
  }
  spawn.controlling_tty = req.controlling_tty;
  uint64_t request = 0;
  if (SysError e = broker_->send_spawn(spawn, &request)) return e;
  if (broker_->wants_write()) reactor_.set_broker_writable(broker_->socket_fd(), true);
  brokered_[request] = id;
  out->id = id;
  out->pid = -1;  // the broker reports it: a kStarted event follows
  return adopt(new Call(this, id, Tier::kSystemd));
}

void Environment::on_broker_socket(bool writable) {
  if (!broker_) return;
  if (writable && broker_->flush()) {
    broker_gone(SysError::of(EPIPE, "broker", "the broker stopped reading"));
    return;
  }
  reactor_.set_broker_writable(broker_->socket_fd(), broker_->wants_write());
  for (;;) {
    BrokerEvent ev;
    if (SysError e = broker_->receive(&ev)) {
      broker_gone(e);
      return;
    }
    if (ev.kind == BrokerEvent::kNone) return;
    if (ev.kind == BrokerEvent::kClosed) {
      broker_gone(ev.error ? ev.error : SysError::of(ECONNRESET, "broker", "the broker exited"));
      return;
    }
    if (ev.kind == BrokerEvent::kReady) continue;
    auto it = brokered_.find(ev.id);
    if (it == brokered_.end()) continue;
    Call* call = find(it->second);
    switch (ev.kind) {
      case BrokerEvent::kSpawned: {
        CgroupDir leaf;
        SysError e = CgroupDir::open_existing(ev.path, &leaf);
        if (call && !e) {
          call->on_broker_spawned(ev.pid, std::move(ev.pidfd), std::move(leaf));
        } else if (call) {
          call->on_broker_lost(e);
        }
        break;
      }
      case BrokerEvent::kSpawnFailed:
        if (call) call->on_broker_failed(ev.error);
        brokered_.erase(it);
        break;
      case BrokerEvent::kExited:
        if (call) call->on_broker_exited(ev.status);
        brokered_.erase(it);
        break;
      default:
        break;
    }
  }
}

void Environment::on_broker_process() {
  if (!broker_) return;
  ExitStatus st;
  broker_->reap_process(&st);
  // What it said last is still in the socket: read it, then see it closed.
  on_broker_socket(false);
}

// The broker is gone (it could not start, or it died): its calls can no
// longer be started or hear their exit; the leaves are still ours to empty.
void Environment::broker_gone(const SysError& e) {
  broker_error_ = e;
  if (broker_) {
    reactor_.unwatch(broker_->socket_fd());
    reactor_.unwatch(broker_->process_pidfd());
    ExitStatus st;
    broker_->reap_process(&st);
    broker_->close();
  }
  std::unordered_map<uint64_t, uint64_t> calls;
  calls.swap(brokered_);
  for (const auto& kv : calls) {
    if (Call* c = find(kv.second)) c->on_broker_lost(e);
  }
}

SysError Environment::spawn_cgroup(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  uint64_t id = g_next_call_id.fetch_add(1);
  CgroupDir leaf;
  if (SysError e = subtrees_.make_leaf(opts.group, id, opts.helper, stack_, &leaf, &out->guardian_error)) {
    if (calls_.empty()) subtrees_.idle();
    return e;
  }
  // The clone() fallback: the child writes itself into cgroup.procs.
  if (!clone3_available()) {
    if (SysError e = leaf.open_procs_for_write()) {
      leaf.remove();
      return e;
    }
  }
  req.cgroup_dir = leaf.dir_fd();
  req.cgroup_procs = leaf.procs_fd();
  SpawnResult proc;
  if (SysError e = spawn_process(req, stack_, &proc)) {
    leaf.remove();
    if (calls_.empty()) subtrees_.idle();
    return e;
  }
  out->id = id;
  out->pid = proc.pid;
  out->cgroup = leaf.path();
  out->method = proc.method;
  // The clone has used the leaf's descriptors: a live call keeps none (they
  // are reopened if a ladder or members() needs them).
  leaf.close();
  return adopt(new Call(this, id, std::move(proc),
                        std::make_unique<CgroupConfinement>(std::move(leaf), Tier::kCgroup, &writes_), Fd()));
}

SysError Environment::spawn_shim(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  const bool pidns = opts.tier == Tier::kPidns;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return SysError::from_errno("socketpair");
  Fd ours(sv[0]), theirs(sv[1]);
  // The shim's end goes after the command's own fds, which the shim hands on
  // untouched; like every source it must sit above them.
  const int control = static_cast<int>(req.fds.size());
  if (theirs.get() <= control) {
    theirs.reset(fcntl(theirs.get(), F_DUPFD_CLOEXEC, control + 1));
    if (!theirs) return SysError::from_errno("fcntl");
  }
  req.fds.push_back(theirs.get());
  // The command, with the same execvpe search, goes after the shim's own
  // arguments. A terminal is the command's controlling terminal, not the
  // shim's: the shim's child takes it after its own setsid().
  std::vector<std::string> argv = {opts.helper, pidns ? "init" : "subreaper", std::to_string(control),
                                   req.controlling_tty ? "1" : "0", std::to_string(req.candidates.size())};
  argv.insert(argv.end(), req.candidates.begin(), req.candidates.end());
  argv.push_back("--");
  argv.insert(argv.end(), req.argv.begin(), req.argv.end());
  req.argv = std::move(argv);
  req.candidates = {opts.helper};
  req.controlling_tty = false;
  req.new_session = true;
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
  uint64_t id = g_next_call_id.fetch_add(1);
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
  return adopt(new Call(this, id, std::move(proc), std::move(c), std::move(ours)));
}

SysError Environment::adopt(Call* call) {
  calls_[call->id()] = call;
  ++referenced_;
  reactor_.set_ref(true);
  // From here the call exists: whatever fails now is the call's to report,
  // never a reason to pretend it did not start.
  call->start();
  return SysError::none();
}

void Environment::set_referenced(uint64_t id, bool ref) {
  if (Call* c = find(id)) c->set_referenced(ref);
}

void Environment::on_call_ref_changed(bool was, bool now) {
  if (was == now) return;
  if (now) {
    ++referenced_;
  } else {
    --referenced_;
  }
  reactor_.set_ref(referenced_ > 0);
}

Call* Environment::find(uint64_t id) {
  auto it = calls_.find(id);
  return it == calls_.end() ? nullptr : it->second;
}

void Environment::post(CallEvent event) {
  pending_.push_back(std::move(event));
  // Events caused by a JavaScript call (terminate, kill) are delivered on a
  // later turn of the loop, never from inside that call.
  if (!flushing_ && flush_timer_ && !closing_) {
    uv_timer_start(flush_timer_, on_flush_timer, 0, 0);
    uv_ref(reinterpret_cast<uv_handle_t*>(flush_timer_));
  }
}

void Environment::on_flush_timer(uv_timer_t* t) {
  uv_unref(reinterpret_cast<uv_handle_t*>(t));
  static_cast<Environment*>(t->data)->flush();
}

void Environment::flush() {
  if (flushing_) return;
  flushing_ = true;
  // A listener may call back into us (terminate from an 'exit' handler):
  // what it posts is appended and delivered by this same loop, in order.
  while (!pending_.empty()) {
    CallEvent ev = std::move(pending_.front());
    pending_.pop_front();
    if (!closing_) sink_->deliver(ev);
  }
  flushing_ = false;
  reap_finished();
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

std::vector<bool> Environment::terminate_group(const std::vector<uint64_t>& ids, const std::vector<int>& sigs,
                                               int grace_ms, const std::string& reason) {
  std::vector<bool> out(ids.size(), false);
  // Which calls share which subtree: one freeze each, where it can be had.
  std::unordered_map<std::string, std::vector<size_t>> by_subtree;
  for (size_t i = 0; i < ids.size(); ++i) {
    Call* c = find(ids[i]);
    if (!c) continue;
    std::string subtree = grace_ms > 0 ? c->subtree_path() : std::string();
    if (!subtree.empty()) by_subtree[subtree].push_back(i);
  }
  for (auto& kv : by_subtree) {
    if (group_freezes_.count(kv.first) || kv.second.size() < 2) continue;
    for (size_t i : kv.second) find(ids[i])->prepare_stop();
    GroupFreeze g;
    if (CgroupDir::open_existing(kv.first, &g.subtree) || !g.subtree.has_file("cgroup.freeze")) continue;
    g.subtree.close();
    writes_.write_later(kv.first + "/cgroup.freeze", "1");
    g.holders = kv.second.size();
    for (size_t i : kv.second) freeze_holder_[ids[i]] = kv.first;
    group_freezes_.emplace(kv.first, std::move(g));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    Call* c = find(ids[i]);
    if (!c) continue;
    bool group = freeze_holder_.count(ids[i]) != 0;
    if (!turn_has_time()) {
      // Later in this turn's place: a ladder that starts on an empty tree
      // still reports, so the answer is already known.
      deferred_stops_.push_back(DeferredStop{ids[i], sigs[i], grace_ms, reason, group});
      out[i] = !c->finished();
      continue;
    }
    out[i] = group ? c->terminate_frozen_by_group(grace_ms, sigs[i], reason) : c->terminate(grace_ms, sigs[i], reason);
  }
  return out;
}

bool Environment::turn_has_time() {
  uint64_t now = uv_hrtime();
  if (turn_start_ns_ == 0) {
    turn_start_ns_ = now;
    start_turns();
  }
  return now - turn_start_ns_ < kTurnBudgetNs;
}

// An idle handle runs once per turn (and keeps the loop from blocking while
// work waits): it gives the next turn its time and resumes what waits.
void Environment::start_turns() {
  if (closing_) return;
  if (!budget_refill_) {
    budget_refill_ = new uv_idle_t;
    uv_idle_init(loop_, budget_refill_);
    budget_refill_->data = this;
    uv_unref(reinterpret_cast<uv_handle_t*>(budget_refill_));
  }
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(budget_refill_))) uv_idle_start(budget_refill_, on_budget_turn);
}

size_t Environment::take_pass_budget(uint64_t call_id, size_t wanted) {
  if (turn_has_time()) return std::min(wanted, kMembersPerGrant);
  budget_waiters_.push_back(call_id);
  return 0;
}

void Environment::on_budget_turn(uv_idle_t* h) {
  Environment* self = static_cast<Environment*>(h->data);
  self->turn_start_ns_ = 0;
  // What waits goes on, in order, while this turn has time; the rest waits
  // for the next one.
  while (!self->deferred_stops_.empty() && self->turn_has_time()) {
    DeferredStop d = std::move(self->deferred_stops_.front());
    self->deferred_stops_.pop_front();
    if (Call* c = self->find(d.id)) {
      if (d.group_frozen) {
        c->terminate_frozen_by_group(d.grace_ms, d.sig, d.reason);
      } else {
        c->terminate(d.grace_ms, d.sig, d.reason);
      }
    } else if (d.group_frozen) {
      self->group_freeze_released(d.id);
    }
  }
  std::deque<uint64_t> waiting;
  waiting.swap(self->budget_waiters_);
  while (!waiting.empty() && self->turn_has_time()) {
    uint64_t id = waiting.front();
    waiting.pop_front();
    if (Call* c = self->find(id)) c->resume_pass();
  }
  // Whoever did not get a turn keeps its place, ahead of newcomers.
  while (!waiting.empty()) {
    self->budget_waiters_.push_front(waiting.back());
    waiting.pop_back();
  }
  if (self->budget_waiters_.empty() && self->deferred_stops_.empty()) {
    uv_idle_stop(h);
    self->turn_start_ns_ = 0;
  }
  self->flush();
}

void Environment::group_freeze_released(uint64_t call_id) {
  auto h = freeze_holder_.find(call_id);
  if (h == freeze_holder_.end()) return;
  auto g = group_freezes_.find(h->second);
  freeze_holder_.erase(h);
  if (g == group_freezes_.end()) return;
  if (--g->second.holders > 0) return;
  // The last call is done signalling: everyone runs again, signals pending.
  writes_.write_later(g->first + "/cgroup.freeze", "0");
  group_freezes_.erase(g);
}

void Environment::shutdown_sync(int wait_ms) {
  // The broker kills every leaf of its scope once its socket closes; we do
  // it ourselves too (the leaves are ours), without waiting for it.
  // One write per subtree ends every call in it; each call's own kill for
  // the other tiers. Where the kernel has no one-shot kill, repeat.
  subtrees_.kill_round();
  for (auto& kv : calls_) kv.second->kill_now();
  for (int waited = 0; waited < wait_ms; waited += 2) {
    bool any = subtrees_.populated();
    for (auto& kv : calls_) any = any || kv.second->populated_now();
    if (!any) break;
    sleep_ms(2);
    if (waited % 20 == 18) {
      subtrees_.kill_round();
      for (auto& kv : calls_) kv.second->kill_now();
    }
  }
  for (auto& kv : calls_) kv.second->finish_sync();
  subtrees_.remove_all();
  if (broker_) broker_->close();
  pending_.clear();
}

void Environment::close_handles(void (*done)(void*), void* arg) {
  closing_ = true;
  closed_cb_ = done;
  closed_arg_ = arg;
  // One count for this function itself, released at its end, so that
  // handles closing synchronously cannot finish the count early.
  handles_open_ = 1;
  std::vector<Call*> calls;
  for (auto& kv : calls_) calls.push_back(kv.second);
  calls_.clear();
  for (Call* c : calls) {
    ++handles_open_;
    c->dispose();
  }
  ++handles_open_;
  reactor_.close([](void* self) { static_cast<Environment*>(self)->handle_closed(); }, this);
  if (broker_) broker_->close();
  subtrees_.remove_all();
  ++handles_open_;
  subtrees_.close([](void* self) { static_cast<Environment*>(self)->handle_closed(); }, this);
  ++handles_open_;
  writes_.close([](void* self) { static_cast<Environment*>(self)->handle_closed(); }, this);
  deferred_stops_.clear();
  budget_waiters_.clear();
  if (budget_refill_) uv_idle_stop(budget_refill_);
  close_handle(&budget_refill_);
  if (flush_timer_) uv_timer_stop(flush_timer_);
  close_handle(&flush_timer_);
  handle_closed();
}

template <typename Handle>
void Environment::close_handle(Handle** handle) {
  if (!*handle) return;
  ++handles_open_;
  uv_close(reinterpret_cast<uv_handle_t*>(*handle), [](uv_handle_t* h) {
    Environment* self = static_cast<Environment*>(h->data);
    delete reinterpret_cast<Handle*>(h);
    self->handle_closed();
  });
  *handle = nullptr;
}

void Environment::on_call_disposed() {
  if (closing_) handle_closed();
}

void Environment::handle_closed() {
  if (--handles_open_ > 0) return;
  if (closed_cb_) closed_cb_(closed_arg_);
}

}  // namespace proctree
