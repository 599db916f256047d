#include "loop/registry.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loop/cgroup_call.h"
#include "loop/pgroup_call.h"
#include "loop/shim_call.h"
#include "helper/shim_protocol.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace proctree {
namespace {

// Call ids are unique in the process, so several environments (workers) can
// share a subtree name without their leaves colliding.
std::atomic<uint64_t> g_next_call_id{1};

}  // namespace

Registry::Registry(uv_loop_t* loop, EventSink* sink) : loop_(loop), sink_(sink), reactor_(loop, this) {}

Registry::~Registry() {
  for (auto& kv : calls_) delete kv.second;
}

SysError Registry::location(CgroupLocation* out) {
  if (!located_) {
    location_error_ = locate_cgroup2(&location_);
    located_ = true;
  }
  if (location_error_) return location_error_;
  *out = location_;
  return SysError::none();
}

SysError Registry::ensure_open() {
  if (opened_) return open_error_;
  opened_ = true;
  open_error_ = reactor_.open();
  if (open_error_) return open_error_;
  flush_timer_ = new uv_timer_t;
  uv_timer_init(loop_, flush_timer_);
  flush_timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(flush_timer_));
  idle_timer_ = new uv_timer_t;
  uv_timer_init(loop_, idle_timer_);
  idle_timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(idle_timer_));
  return SysError::none();
}

SysError Registry::spawn(const std::string& group, SpawnRequest req, SpawnedCall* out) {
  if (closing_) return SysError::of(ECANCELED, "spawn");
  if (SysError e = ensure_open()) return e;
  CgroupLocation loc;
  if (SysError e = location(&loc)) return e;

  auto g = groups_.find(group);
  if (g == groups_.end()) {
    CgroupDir dir;
    // The delegation rule: only ever below the harness's own cgroup. The
    // name carries this process's random prefix, so a directory that exists
    // already is another harness's (or nobody's business) unless we made it
    // earlier and could not remove it: never share one.
    bool ours = made_groups_.count(group) != 0;
    if (SysError e = CgroupDir::create(loc.own_path + "/" + group, ours, &dir)) return e;
    made_groups_.insert(group);
    g = groups_.emplace(group, std::move(dir)).first;
  }

  uint64_t id = g_next_call_id.fetch_add(1);
  std::string leaf = "c" + std::to_string(id);
  CgroupDir cg;
  if (SysError e = CgroupDir::create(g->second.path() + "/" + leaf, false, &cg)) {
    groups_.erase(g);
    return e;
  }
  if (!clone3_available()) {
    if (SysError e = cg.open_procs_for_write()) {
      cg.remove();
      return e;
    }
  }
  req.cgroup_dir = cg.dir_fd();
  req.cgroup_procs = cg.procs_fd();

  SpawnResult proc;
  if (SysError e = spawn_process(req, stack_, &proc)) {
    cg.remove();
    remove_idle_groups();
    return e;
  }
  std::string rel = (loc.own == "/" ? "" : loc.own) + "/" + group + "/" + leaf;
  out->id = id;
  out->pid = proc.pid;
  out->cgroup = cg.path();
  out->method = proc.method;
  Call* call = new CgroupCall(this, id, std::move(cg), rel, std::move(proc));
  return adopt(call, out);
}

SysError Registry::adopt(Call* call, SpawnedCall* out) {
  calls_[call->id()] = call;
  if (SysError e = call->start()) {
    call->kill_now();
    call->finish_sync();
    calls_.erase(call->id());
    call->dispose();
    return e;
  }
  update_ref();
  return SysError::none();
}

namespace {

// How long spawn waits for the shim to say whether the command started: the
// shim forks and execs, which takes a millisecond or two.
constexpr int kShimStartTimeoutMs = 10000;

SysError wait_shim_started(int control, const SpawnResult& shim, pid_t* command) {
  pollfd p{control, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, kShimStartTimeoutMs);
  } while (r < 0 && errno == EINTR);
  shim::Message m{};
  ssize_t n = r > 0 ? recv(control, &m, sizeof m, MSG_DONTWAIT) : -1;
  if (n == static_cast<ssize_t>(sizeof m) && m.kind == shim::kExecOk) {
    *command = m.a;
    return SysError::none();
  }
  SysError e = n == static_cast<ssize_t>(sizeof m) && m.kind == shim::kExecFailed
                   ? SysError::of(m.a, shim::stage_syscall(m.b))
                   : SysError::of(r == 0 ? ETIMEDOUT : EPROTO, "proctree-helper");
  // The shim exits by itself after a failed exec; make sure, then reap it.
  pidfd_signal(shim.pidfd.get(), SIGKILL);
  siginfo_t info;
  while (waitid(static_cast<idtype_t>(3 /* P_PIDFD */), static_cast<id_t>(shim.pidfd.get()), &info, WEXITED) < 0 &&
         errno == EINTR) {
  }
  return e;
}

}  // namespace

SysError Registry::spawn_tier(Tier tier, const std::string& helper, SpawnRequest req, SpawnedCall* out) {
  if (closing_) return SysError::of(ECANCELED, "spawn");
  if (SysError e = ensure_open()) return e;
  uint64_t id = g_next_call_id.fetch_add(1);
  req.new_session = true;
  req.cgroup_dir = -1;
  req.cgroup_procs = -1;
  if (tier == Tier::kPgroup) {
    SpawnResult proc;
    if (SysError e = spawn_process(req, stack_, &proc)) return e;
    out->id = id;
    out->pid = proc.pid;
    out->method = proc.method;
    return adopt(new PgroupCall(this, id, std::move(proc)), out);
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return SysError::from_errno("socketpair");
  Fd ours(sv[0]), theirs(sv[1]);
  // The command goes after the shim's own arguments; the shim does the
  // execvpe search over the same candidates the cgroup tier would use.
  std::vector<std::string> argv = {helper, tier == Tier::kPidns ? "init" : "subreaper",
                                   std::to_string(req.candidates.size())};
  argv.insert(argv.end(), req.candidates.begin(), req.candidates.end());
  argv.push_back("--");
  argv.insert(argv.end(), req.argv.begin(), req.argv.end());
  req.argv = std::move(argv);
  req.candidates = {helper};
  req.pass_fd = theirs.get();
  if (tier == Tier::kPidns) {
    // The init dies with the thread that spawned it; its exit kills the
    // namespace. The control socket's EOF covers the harness dying anyway.
    req.pdeathsig = SIGKILL;
    req.ns_flags = CLONE_NEWPID | (geteuid() == 0 ? 0 : CLONE_NEWUSER);
  }
  SpawnResult proc;
  SysError e = spawn_process(req, stack_, &proc);
  if (e && tier == Tier::kPidns && e.err == EPERM && !(req.ns_flags & CLONE_NEWUSER)) {
    // Root without CAP_SYS_ADMIN (a container): a user namespace may still do.
    req.ns_flags |= CLONE_NEWUSER;
    e = spawn_process(req, stack_, &proc);
  }
  if (e) {
    // The helper itself could not start: say so, not "spawn <file> ENOENT".
    if (std::string(e.syscall) == "execve") e = SysError::of(e.err, "proctree-helper", helper);
    return e;
  }
  theirs.reset();
  pid_t command = -1;
  if (SysError se = wait_shim_started(ours.get(), proc, &command)) return se;
  out->id = id;
  out->pid = command;
  out->shim = proc.pid;
  out->method = proc.method;
  return adopt(new ShimCall(this, id, tier, std::move(proc), std::move(ours), command), out);
}

void Registry::set_referenced(uint64_t id, bool ref) {
  if (Call* c = find(id)) c->set_referenced(ref);
  update_ref();
}

// The reactor keeps the loop alive while any live call is referenced.
void Registry::update_ref() {
  bool any = false;
  for (auto& kv : calls_) any = any || kv.second->referenced();
  reactor_.set_ref(any);
}

Call* Registry::find(uint64_t id) {
  auto it = calls_.find(id);
  return it == calls_.end() ? nullptr : it->second;
}

void Registry::post(CallEvent event) {
  pending_.push_back(std::move(event));
  // Events caused by a JavaScript call (terminate, kill) are delivered on a
  // later turn of the loop, never from inside that call.
  if (!flushing_ && flush_timer_ && !closing_) {
    uv_timer_start(flush_timer_, on_flush_timer, 0, 0);
    uv_ref(reinterpret_cast<uv_handle_t*>(flush_timer_));
  }
}

void Registry::wake() { flush(); }

void Registry::on_flush_timer(uv_timer_t* t) {
  uv_unref(reinterpret_cast<uv_handle_t*>(t));
  static_cast<Registry*>(t->data)->flush();
}

void Registry::flush() {
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

void Registry::reap_finished() {
  std::vector<uint64_t> done;
  for (auto& kv : calls_) {
    if (kv.second->finished()) done.push_back(kv.first);
  }
  for (uint64_t id : done) {
    Call* c = calls_[id];
    calls_.erase(id);
    c->dispose();
  }
  update_ref();
  remove_idle_groups();
}

// Remove every directory we made once it has been empty for a moment: a
// harness that dies later without running any hook then leaves nothing in the
// tree, and a harness running calls one after another does not pay a mkdir
// and an rmdir of its subtree for each. The timer is unreferenced: at exit the
// 'exit' hook (or the guardian) removes the subtree instead.
void Registry::remove_idle_groups() {
  if (!calls_.empty() || groups_.empty()) return;
  if (!idle_timer_ || closing_) {
    for (auto& kv : groups_) kv.second.remove();
    groups_.clear();
    return;
  }
  uv_timer_start(idle_timer_, on_idle_timer, kGroupLingerMs, 0);
}

void Registry::on_idle_timer(uv_timer_t* t) {
  Registry* self = static_cast<Registry*>(t->data);
  if (!self->calls_.empty()) return;
  for (auto& kv : self->groups_) kv.second.remove();
  self->groups_.clear();
}

void Registry::on_process_exit(uint64_t call_id) {
  if (Call* c = find(call_id)) c->handle_process_exit();
}

void Registry::on_cgroup_events(uint64_t call_id) {
  if (Call* c = find(call_id)) c->handle_cgroup_events();
}

void Registry::on_control(uint64_t call_id) {
  if (Call* c = find(call_id)) c->handle_control();
}

void Registry::shutdown_sync(int wait_ms) {
  // One write per subtree ends every call in it; per call for any not in one.
  for (auto& kv : groups_) kv.second.write_file("cgroup.kill", "1");
  for (auto& kv : calls_) kv.second->kill_now();
  uint64_t deadline = uv_hrtime() + static_cast<uint64_t>(wait_ms) * 1000000ULL;
  for (;;) {
    bool any = false;
    for (auto& kv : calls_) {
      if (!kv.second->finished() && kv.second->populated_now()) any = true;
    }
    uint64_t now = uv_hrtime();
    if (!any || now >= deadline) break;
    bool cgroup_only = true;
    for (auto& kv : calls_) cgroup_only = cgroup_only && kv.second->tier() == Tier::kCgroup;
    if (opened_ && !open_error_) {
      // Only cgroups raise an inotify event when they empty; other tiers are
      // polled.
      int left = static_cast<int>((deadline - now) / 1000000ULL) + 1;
      reactor_.wait_cgroup_change(cgroup_only ? left : std::min(left, 5));
    } else {
      break;
    }
  }
  for (auto& kv : calls_) kv.second->finish_sync();
  for (auto& kv : groups_) kv.second.remove();
  groups_.clear();
  pending_.clear();
}

void Registry::close_handles(void (*done)(void*), void* arg) {
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
  reactor_.close([](void* self) { static_cast<Registry*>(self)->handle_closed(); }, this);
  // An idle subtree waiting for its timer goes now (rmdir fails harmlessly
  // on one that still holds calls).
  for (auto& kv : groups_) kv.second.remove();
  groups_.clear();
  for (uv_timer_t** timer : {&flush_timer_, &idle_timer_}) {
    if (!*timer) continue;
    ++handles_open_;
    uv_timer_stop(*timer);
    uv_close(reinterpret_cast<uv_handle_t*>(*timer), [](uv_handle_t* h) {
      Registry* self = static_cast<Registry*>(h->data);
      delete reinterpret_cast<uv_timer_t*>(h);
      self->handle_closed();
    });
    *timer = nullptr;
  }
  handle_closed();
}

void Registry::on_call_disposed() {
  if (closing_) handle_closed();
}

void Registry::handle_closed() {
  if (--handles_open_ > 0) return;
  if (closed_cb_) closed_cb_(closed_arg_);
}

}  // namespace proctree
