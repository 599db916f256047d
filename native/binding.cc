// The only file that knows about N-API: turns the Environment (loop/) of each
// Node environment (main thread or worker) into a JavaScript object, runs its
// turns through a thread-safe function (the Environment's Waiter thread calls
// it; nothing of libuv: Node, Bun and Deno all have Node-API), and delivers
// call events through napi_make_callback with the addon's async context.
#include <napi.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "kernel/guardian_launch.h"
#include "kernel/limits.h"
#include "kernel/probe.h"
#include "kernel/procfs.h"
#include "kernel/pty.h"
#include "kernel/stdio_fds.h"
#include "loop/environment.h"
#include "loop/errno_name.h"

namespace proctree {
namespace {

Napi::Object make_error(Napi::Env env, const SysError& e) {
  const char* code = errno_name(e.err);
  std::string message = std::string(e.syscall) + " " + code;
  if (!e.path.empty()) message += " '" + e.path + "'";
  Napi::Error err = Napi::Error::New(env, message);
  Napi::Object obj = err.Value();
  obj.Set("code", code);
  obj.Set("errno", -e.err);
  obj.Set("syscall", e.syscall);
  if (!e.path.empty()) obj.Set("path", e.path);
  return obj;
}

Napi::Object process_info_object(Napi::Env env, const ProcessInfo& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", p.pid);
  o.Set("ppid", p.ppid);
  o.Set("pgid", p.pgid);
  o.Set("sid", p.sid);
  o.Set("comm", p.comm);
  o.Set("cmdline", p.cmdline);
  o.Set("startTime", static_cast<double>(p.start_time));
  return o;
}

bool read_strings(Napi::Value v, std::vector<std::string>* out) {
  if (!v.IsArray()) return false;
  Napi::Array a = v.As<Napi::Array>();
  out->clear();
  out->reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value item = a.Get(i);
    if (!item.IsString()) return false;
    out->push_back(item.As<Napi::String>().Utf8Value());
  }
  return true;
}

// stdio: N >= 3 entries, each 'pipe' | 'ignore' | 'inherit' | 'close' |
// 'pty' | a descriptor number.
bool read_stdio(Napi::Value v, std::vector<StdioSpec>* spec) {
  if (!v.IsArray() || v.As<Napi::Array>().Length() < 3) return false;
  Napi::Array a = v.As<Napi::Array>();
  spec->assign(a.Length(), StdioSpec{});
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value item = a.Get(i);
    StdioSpec& one = (*spec)[i];
    if (item.IsNumber()) {
      one.kind = StdioSpec::kFd;
      one.fd = item.As<Napi::Number>().Int32Value();
      if (one.fd < 0) return false;
      continue;
    }
    if (!item.IsString()) return false;
    std::string s = item.As<Napi::String>().Utf8Value();
    if (s == "pipe") {
      one.kind = StdioSpec::kPipe;
    } else if (s == "ignore") {
      one.kind = StdioSpec::kIgnore;
    } else if (s == "inherit") {
      one.kind = StdioSpec::kInherit;
    } else if (s == "close") {
      one.kind = StdioSpec::kClose;
    } else if (s == "pty") {
      if (i > 2) return false;
      one.kind = StdioSpec::kPty;
    } else {
      return false;
    }
  }
  return true;
}

Napi::Object report_object(Napi::Env env, const CleanupReport& report) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("reason", report.reason);
  r.Set("signaled", report.signaled);
  r.Set("killed", report.killed);
  r.Set("escaped", report.escaped);
  r.Set("verified", report.verified);
  Napi::Array left = Napi::Array::New(env, report.leftovers.size());
  for (size_t i = 0; i < report.leftovers.size(); ++i) {
    left.Set(static_cast<uint32_t>(i), process_info_object(env, report.leftovers[i]));
  }
  r.Set("leftovers", left);
  r.Set("durationMs", report.duration_ms);
  return r;
}

// { memoryBytes?, pids?, cpu? } (validated by the facade): absent or 0 is no limit.
bool read_limits(Napi::Value v, Limits* out) {
  *out = Limits{};
  if (v.IsUndefined() || v.IsNull()) return true;
  if (!v.IsObject()) return false;
  Napi::Object o = v.As<Napi::Object>();
  Napi::Value mem = o.Get("memoryBytes");
  Napi::Value pids = o.Get("pids");
  Napi::Value cpu = o.Get("cpu");
  if (mem.IsNumber()) out->memory_bytes = static_cast<uint64_t>(std::max(0.0, mem.As<Napi::Number>().DoubleValue()));
  if (pids.IsNumber()) out->pids = static_cast<uint64_t>(std::max(0.0, pids.As<Napi::Number>().DoubleValue()));
  if (cpu.IsNumber()) out->cpu = cpu.As<Napi::Number>().DoubleValue();
  return true;
}

Napi::Object controllers_object(Napi::Env env, unsigned bits) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("memory", (bits & kLimitMemory) != 0);
  o.Set("pids", (bits & kLimitPids) != 0);
  o.Set("cpu", (bits & kLimitCpu) != 0);
  return o;
}

// What a call of the thread-safe function asks for.
void* const kTurn = reinterpret_cast<void*>(1);
void* const kDeliver = reinterpret_cast<void*>(2);

class Addon : public Napi::Addon<Addon>, public EventSink, public LoopHost {
 public:
  Addon(Napi::Env env, Napi::Object exports) : env_(env) {
    DefineAddon(exports, {
                             InstanceMethod("spawn", &Addon::Spawn),
                             InstanceMethod("terminate", &Addon::Terminate),
                             InstanceMethod("terminateGroup", &Addon::TerminateGroup),
                             InstanceMethod("kill", &Addon::Kill),
                             InstanceMethod("members", &Addon::Members),
                             InstanceMethod("ports", &Addon::Ports),
                             InstanceMethod("processInfo", &Addon::ProcessInfoOf),
                             InstanceMethod("shutdown", &Addon::Shutdown),
                             InstanceMethod("pipe", &Addon::Pipe),
                             InstanceMethod("streamOpen", &Addon::StreamOpen),
                             InstanceMethod("streamAdopt", &Addon::StreamAdopt),
                             InstanceMethod("streamRead", &Addon::StreamRead),
                             InstanceMethod("streamWrite", &Addon::StreamWrite),
                             InstanceMethod("streamShutdown", &Addon::StreamShutdown),
                             InstanceMethod("streamEnd", &Addon::StreamEnd),
                             InstanceMethod("streamClose", &Addon::StreamClose),
                             InstanceMethod("streamRef", &Addon::StreamRef),
                             InstanceMethod("setRef", &Addon::SetRef),
                             InstanceMethod("retire", &Addon::Retire),
                             InstanceMethod("settle", &Addon::Settle),
                             InstanceMethod("closeFd", &Addon::CloseFd),
                             InstanceMethod("ptyResize", &Addon::PtyResize),
                             InstanceMethod("cgroup2Hierarchies", &Addon::Cgroup2Hierarchies),
                             InstanceMethod("cgroupMembers", &Addon::CgroupMembers),
                             InstanceMethod("ptyForeground", &Addon::PtyForeground),
                             InstanceMethod("subtreePrefix", &Addon::SubtreePrefix),
                             InstanceMethod("probe", &Addon::ProbeHost),
                             // Pause and resume; limits (kernel/limits.h).
                             InstanceMethod("pause", &Addon::Pause),
                             InstanceMethod("limitsProbe", &Addon::LimitsProbe),
                         });
    napi_value resource_name = Napi::String::New(env, "proctree:call");
    napi_async_init(env, nullptr, resource_name, &async_context_);
    // The Environment's turns: called from its Waiter thread (kTurn) and
    // from this thread (kDeliver); unreferenced until a call or an event
    // needs the loop (keep_alive).
    napi_value loop_name = Napi::String::New(env, "proctree:loop");
    if (napi_create_threadsafe_function(env, nullptr, nullptr, loop_name, 0, 1, nullptr, nullptr, this, CallJs,
                                        &tsfn_) == napi_ok) {
      napi_unref_threadsafe_function(env, tsfn_);
      env_state_ = new Environment(this, this);
    }
    // Synchronous: everything is killed, the threads are joined, before the
    // environment (a worker's, or the process's at exit) goes.
    napi_add_env_cleanup_hook(env, SyncCleanup, this);
  }

  ~Addon() override {
    // The cleanup hook has run already, unless the process is exiting.
    Teardown(0);
  }

  // LoopHost: kTurn from the Waiter's thread, the rest on this thread.
  void wake() override { napi_call_threadsafe_function(tsfn_, kTurn, napi_tsfn_nonblocking); }
  void deliver_later() override {
    if (tsfn_) napi_call_threadsafe_function(tsfn_, kDeliver, napi_tsfn_nonblocking);
  }
  void keep_alive(bool alive) override {
    if (!tsfn_) return;
    if (alive) {
      napi_ref_threadsafe_function(env_, tsfn_);
    } else {
      napi_unref_threadsafe_function(env_, tsfn_);
    }
  }

  void deliver(const CallEvent& ev) override {
    if (ev.kind == CallEvent::kOutput || ev.kind == CallEvent::kOutputEnd || ev.kind == CallEvent::kWritten) {
      deliver_stream(ev);
      return;
    }
    if (ev.kind == CallEvent::kPorts) {
      deliver_ports(ev);
      return;
    }
    auto it = callbacks_.find(ev.call_id);
    if (it == callbacks_.end()) return;
    Napi::HandleScope scope(env_);
    Napi::Function fn = it->second.Value();
    std::vector<napi_value> args;
    args.push_back(Napi::Number::New(env_, ev.kind));
    switch (ev.kind) {
      case CallEvent::kExit:
        args.push_back(ev.exit.code >= 0 ? Napi::Number::New(env_, ev.exit.code) : env_.Null());
        args.push_back(Napi::Number::New(env_, ev.exit.signal));
        break;
      case CallEvent::kCleanup:
        args.push_back(report_object(env_, ev.report));
        break;
      case CallEvent::kError:
      case CallEvent::kStartFailed:
        args.push_back(make_error(env_, ev.error));
        break;
      case CallEvent::kStarted:
        args.push_back(Napi::Number::New(env_, ev.pid));
        if (!ev.cgroup.empty()) args.push_back(Napi::String::New(env_, ev.cgroup));
        break;
      case CallEvent::kEmpty: {
        Napi::Object u = Napi::Object::New(env_);
        u.Set("peakProcesses", ev.peak_processes);
        if (ev.usage.known) {
          u.Set("userMs", ev.usage.user_ms);
          u.Set("systemMs", ev.usage.system_ms);
          u.Set("source", ev.usage.source);
          if (ev.usage.memory_peak >= 0) u.Set("memoryPeakBytes", static_cast<double>(ev.usage.memory_peak));
          if (ev.usage.pids_peak >= 0) u.Set("pidsPeak", static_cast<double>(ev.usage.pids_peak));
          if (ev.usage.oom_killed) u.Set("oomKilled", true);
          if (ev.usage.pids_limited) u.Set("pidsLimited", true);
        }
        args.push_back(u);
        break;
      }
      case CallEvent::kFrozen:
        args.push_back(Napi::Boolean::New(env_, ev.frozen));
        break;
      case CallEvent::kOutput:
      case CallEvent::kOutputEnd:
      case CallEvent::kWritten:
      case CallEvent::kPorts:
        return;  // deliver_stream(), deliver_ports()
    }
    Napi::Object recv = Napi::Object::New(env_);
    napi_value result;
    napi_status st = napi_make_callback(env_, async_context_, recv, fn, args.size(), args.data(), &result);
    if (ev.kind == CallEvent::kEmpty) callbacks_.erase(ev.call_id);
    if (st == napi_pending_exception) rethrow_uncaught();
  }

 private:
  // A listener threw: that is an uncaught exception of the harness, as it
  // would be for a ChildProcess listener, never swallowed here.
  void rethrow_uncaught() {
    napi_value exc;
    napi_get_and_clear_last_exception(env_, &exc);
    napi_fatal_exception(env_, exc);
  }

  // A stream's event (loop/streams.h) as onEvent(kind, value): 0, a chunk
  // read (Buffer); 1, the end of reading (null, or the read's error); 2, a
  // write is in the pipe (null, or the write's error). Raw napi calls,
  // checked: while a worker is being terminated they fail, and the wrappers
  // would turn that into a fatal error.
  void deliver_stream(const CallEvent& ev) {
    auto it = pipe_callbacks_.find(ev.call_id);
    if (it == pipe_callbacks_.end()) return;
    Napi::HandleScope scope(env_);
    napi_value fn = it->second.Value();
    napi_value args[2] = {nullptr, nullptr};
    napi_value recv = nullptr;
    int kind = ev.kind == CallEvent::kOutput ? 0 : ev.kind == CallEvent::kOutputEnd ? 1 : 2;
    napi_status st = napi_create_int32(env_, kind, &args[0]);
    if (st == napi_ok) {
      if (ev.kind == CallEvent::kOutput) {
        st = napi_create_buffer_copy(env_, ev.data.size(), ev.data.data(), nullptr, &args[1]);
      } else if (ev.error) {
        args[1] = make_error(env_, ev.error);
      } else {
        st = napi_get_null(env_, &args[1]);
      }
    }
    if (st == napi_ok) st = napi_create_object(env_, &recv);
    // A stream closed at its end (only read) has no more events.
    if (ev.kind == CallEvent::kOutputEnd && (!env_state_ || !env_state_->streams().exists(ev.call_id))) {
      pipe_callbacks_.erase(it);
    }
    if (st != napi_ok) return;
    napi_value result;
    st = napi_make_callback(env_, async_context_, recv, fn, 2, args, &result);
    // The next chunk may be read once this one is JavaScript's.
    if (ev.kind == CallEvent::kOutput && env_state_) env_state_->streams().delivered(ev.call_id);
    if (st == napi_pending_exception) rethrow_uncaught();
  }

  // The answer to ports(): onDone(error, null) or onDone(null, [{ protocol,
  // address, port, pid }]). Raw napi calls, checked, as in deliver_stream.
  void deliver_ports(const CallEvent& ev) {
    auto it = ports_callbacks_.find(ev.call_id);
    if (it == ports_callbacks_.end()) return;
    Napi::FunctionReference fn_ref = std::move(it->second);
    ports_callbacks_.erase(it);
    Napi::HandleScope scope(env_);
    napi_value args[2] = {nullptr, nullptr};
    napi_value recv = nullptr;
    napi_status st = napi_ok;
    if (ev.error) {
      args[0] = make_error(env_, ev.error);
      st = napi_get_null(env_, &args[1]);
    } else {
      st = napi_get_null(env_, &args[0]);
      if (st == napi_ok) st = napi_create_array_with_length(env_, ev.listeners.size(), &args[1]);
      for (size_t i = 0; st == napi_ok && i < ev.listeners.size(); ++i) {
        const Listener& l = ev.listeners[i];
        napi_value o, v;
        st = napi_create_object(env_, &o);
        if (st == napi_ok) st = napi_create_string_utf8(env_, listener_protocol_name(l.protocol), NAPI_AUTO_LENGTH, &v);
        if (st == napi_ok) st = napi_set_named_property(env_, o, "protocol", v);
        if (st == napi_ok) st = napi_create_string_utf8(env_, l.address.data(), l.address.size(), &v);
        if (st == napi_ok) st = napi_set_named_property(env_, o, "address", v);
        if (st == napi_ok) st = napi_create_int32(env_, l.port, &v);
        if (st == napi_ok) st = napi_set_named_property(env_, o, "port", v);
        if (st == napi_ok) st = napi_create_int32(env_, l.pid, &v);
        if (st == napi_ok) st = napi_set_named_property(env_, o, "pid", v);
        if (st == napi_ok) st = napi_set_element(env_, args[1], static_cast<uint32_t>(i), o);
      }
    }
    if (st == napi_ok) st = napi_create_object(env_, &recv);
    if (st != napi_ok) return;
    napi_value result;
    st = napi_make_callback(env_, async_context_, recv, fn_ref.Value(), 2, args, &result);
    if (st == napi_pending_exception) rethrow_uncaught();
  }

  // On the JavaScript thread; env is null when the function is being torn
  // down with calls still queued (nothing to run then).
  static void CallJs(napi_env env, napi_value /*js_callback*/, void* context, void* data) {
    if (env == nullptr) return;
    Addon* self = static_cast<Addon*>(context);
    if (!self->env_state_) return;
    if (data == kTurn) {
      self->env_state_->turn();
    } else {
      self->env_state_->deliver_next();
    }
  }

  static void SyncCleanup(void* arg) { static_cast<Addon*>(arg)->Teardown(2000); }

  void Teardown(int wait_ms) {
    Environment* reg = env_state_;
    if (!reg) return;
    callbacks_.clear();
    pipe_callbacks_.clear();
    ports_callbacks_.clear();
    reg->shutdown_sync(wait_ms);
    // Joins the Waiter: no call of the thread-safe function after this.
    reg->close();
    env_state_ = nullptr;
    delete reg;
    napi_release_threadsafe_function(tsfn_, napi_tsfn_abort);
    tsfn_ = nullptr;
  }

  Napi::Value ThrowSys(Napi::Env env, const SysError& e) {
    napi_throw(env, make_error(env, e));
    return env.Undefined();
  }

  Napi::Value ThrowType(Napi::Env env, const char* message) {
    Napi::TypeError::New(env, message).ThrowAsJavaScriptException();
    return env.Undefined();
  }

  // spawn({ group, candidates, argv, env, cwd?, stdio, pty?, uid?, gid?,
  //         tier, helper }, onEvent) -> { id, pid?, ... } | { error }
  // env null: the command gets this process's own environment. A failure
  // after the arguments were read is returned, never thrown.
  Napi::Value Spawn(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction()) {
      return ThrowType(env, "spawn(spec, onEvent)");
    }
    Napi::Object spec = info[0].As<Napi::Object>();
    SpawnRequest req;
    SpawnOptions opts;
    if (!spec.Get("group").IsString()) return ThrowType(env, "spec.group");
    opts.group = spec.Get("group").As<Napi::String>().Utf8Value();
    if (!read_strings(spec.Get("candidates"), &req.candidates)) return ThrowType(env, "spec.candidates");
    if (!read_strings(spec.Get("argv"), &req.argv)) return ThrowType(env, "spec.argv");
    Napi::Value envv = spec.Get("env");
    if (envv.IsNull() || envv.IsUndefined()) {
      req.inherit_env = true;
    } else if (!read_strings(envv, &req.envp)) {
      return ThrowType(env, "spec.env");
    }
    Napi::Value cwd = spec.Get("cwd");
    if (cwd.IsString()) req.cwd = cwd.As<Napi::String>().Utf8Value();
    Napi::Value uid = spec.Get("uid");
    if (uid.IsNumber()) {
      req.set_uid = true;
      req.uid = uid.As<Napi::Number>().Uint32Value();
    }
    Napi::Value gid = spec.Get("gid");
    if (gid.IsNumber()) {
      req.set_gid = true;
      req.gid = gid.As<Napi::Number>().Uint32Value();
    }
    std::vector<StdioSpec> stdio_spec;
    if (!read_stdio(spec.Get("stdio"), &stdio_spec)) return ThrowType(env, "spec.stdio");
    PtySize pty;
    Napi::Value ptyv = spec.Get("pty");
    if (ptyv.IsObject()) {
      Napi::Object p = ptyv.As<Napi::Object>();
      pty.cols = static_cast<unsigned short>(p.Get("cols").As<Napi::Number>().Uint32Value());
      pty.rows = static_cast<unsigned short>(p.Get("rows").As<Napi::Number>().Uint32Value());
    }
    Napi::Value tier_v = spec.Get("tier");
    std::string t = tier_v.IsString() ? tier_v.As<Napi::String>().Utf8Value() : "cgroup";
    if (t == "cgroup") {
      opts.tier = Tier::kCgroup;
    } else if (t == "systemd") {
      opts.tier = Tier::kSystemd;
    } else if (t == "pidns") {
      opts.tier = Tier::kPidns;
    } else if (t == "subreaper") {
      opts.tier = Tier::kSubreaper;
    } else if (t == "pgroup") {
      opts.tier = Tier::kPgroup;
    } else {
      return ThrowType(env, "spec.tier");
    }
    if (spec.Get("helper").IsString()) opts.helper = spec.Get("helper").As<Napi::String>().Utf8Value();
    if (!read_limits(spec.Get("limits"), &opts.limits.call)) return ThrowType(env, "spec.limits");
    if (!read_limits(spec.Get("groupLimits"), &opts.limits.group)) return ThrowType(env, "spec.groupLimits");

    Napi::Object out = Napi::Object::New(env);
    if (!env_state_) {
      out.Set("error", make_error(env, SysError::of(ECANCELED, "spawn")));
      return out;
    }
    // Limits live in a cgroup leaf of ours: never silently unlimited elsewhere.
    if (const unsigned needed = opts.limits.controllers(); needed && opts.tier != Tier::kCgroup) {
      std::string names;
      for (LimitController c : {kLimitMemory, kLimitPids, kLimitCpu}) {
        if (needed & c) names += std::string(names.empty() ? "" : ",") + limit_controller_name(c);
      }
      out.Set("error", make_error(env, SysError::of(ENOTSUP, "limits",
                                                    names + ": the " + tier_name(opts.tier) +
                                                        " tier has no cgroup leaf of ours to hold them; they need "
                                                        "the cgroup tier (see capabilities().limits)")));
      return out;
    }
    PreparedStdio stdio;
    SpawnedCall call;
    SysError e = prepare_stdio(stdio_spec, pty, &stdio);
    if (!e) {
      req.fds = stdio.fds;
      req.controlling_tty = stdio.controlling_tty;
      e = env_state_->spawn(opts, std::move(req), &call);
    }
    if (e) {
      out.Set("error", make_error(env, e));
      return out;
    }
    // The child has its copies now; ours would hold pipes open forever.
    stdio.child.clear();
    callbacks_[call.id] = Napi::Persistent(info[1].As<Napi::Function>());
    out.Set("id", Napi::Number::New(env, static_cast<double>(call.id)));
    if (call.pid > 0) {
      out.Set("pid", call.pid);
      if (call.exec_pending) out.Set("execPending", true);
    } else {
      out.Set("pending", true);
    }
    out.Set("cgroup", call.cgroup);
    out.Set("tier", tier_name(opts.tier));
    out.Set("verified", call.verified);
    out.Set("method", clone_method_name(call.method));
    Napi::Array fds = Napi::Array::New(env, stdio.parent.size());
    for (uint32_t i = 0; i < stdio.parent.size(); ++i) {
      fds.Set(i, stdio.parent[i] ? stdio.parent[i].release() : -1);
    }
    out.Set("stdio", fds);
    if (stdio.pty_master) out.Set("ptyMaster", stdio.pty_master.release());
    if (call.guardian_error) out.Set("guardianError", make_error(env, call.guardian_error));
    return out;
  }

  Call* CallArg(const Napi::CallbackInfo& info) {
    if (!env_state_ || info.Length() < 1 || !info[0].IsNumber()) return nullptr;
    return env_state_->find(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()));
  }

  // terminate(id, graceMs, signal, reason) -> whether a cleanup event will come
  Napi::Value Terminate(const Napi::CallbackInfo& info) {
    Call* c = CallArg(info);
    if (!c || info.Length() < 4) return Napi::Boolean::New(info.Env(), false);
    bool reporting = c->terminate(info[1].As<Napi::Number>().Int32Value(),
                                  info[2].As<Napi::Number>().Int32Value(),
                                  info[3].As<Napi::String>().Utf8Value());
    return Napi::Boolean::New(info.Env(), reporting);
  }

  // terminateGroup(ids, signals, graceMs, reason) -> [whether a cleanup event
  // will come, per call]: one freeze per shared subtree (see Environment).
  Napi::Value TerminateGroup(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsNumber() || !info[3].IsString()) {
      return ThrowType(env, "terminateGroup(ids, signals, graceMs, reason)");
    }
    Napi::Array ids_v = info[0].As<Napi::Array>();
    Napi::Array sigs_v = info[1].As<Napi::Array>();
    std::vector<uint64_t> ids;
    std::vector<int> sigs;
    for (uint32_t i = 0; i < ids_v.Length() && i < sigs_v.Length(); ++i) {
      ids.push_back(static_cast<uint64_t>(ids_v.Get(i).As<Napi::Number>().Int64Value()));
      sigs.push_back(sigs_v.Get(i).As<Napi::Number>().Int32Value());
    }
    std::vector<bool> reporting;
    if (env_state_) {
      reporting = env_state_->terminate_group(ids, sigs, info[2].As<Napi::Number>().Int32Value(),
                                              info[3].As<Napi::String>().Utf8Value());
    }
    Napi::Array out = Napi::Array::New(env, ids.size());
    for (uint32_t i = 0; i < ids.size(); ++i) out.Set(i, i < reporting.size() && reporting[i]);
    return out;
  }

  // kill(id, signal) -> how many processes got it
  Napi::Value Kill(const Napi::CallbackInfo& info) {
    Call* c = CallArg(info);
    if (!c || info.Length() < 2) return Napi::Number::New(info.Env(), 0);
    return Napi::Number::New(info.Env(), c->signal_all(info[1].As<Napi::Number>().Int32Value()));
  }

  Napi::Value Members(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Call* c = CallArg(info);
    std::vector<pid_t> pids;
    if (c) pids = c->members();
    Napi::Array a = Napi::Array::New(env, pids.size());
    for (size_t i = 0; i < pids.size(); ++i) a.Set(static_cast<uint32_t>(i), pids[i]);
    return a;
  }

  // ports(id | cgroupPath | cgroupIds, onDone): what the call's tree (or
  // everything in a cgroup2 directory and below it) listens on, or the
  // sockets made in the cgroups with these ids (bigints) whoever holds them
  // now; asked on the addon's ports thread, onDone(error, listeners) in a
  // later turn (an unknown call or a cgroup that is gone: []). Throws only
  // for bad arguments.
  Napi::Value Ports(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !(info[0].IsNumber() || info[0].IsString() || info[0].IsArray()) || !info[1].IsFunction()) {
      return ThrowType(env, "ports(id | cgroupPath | cgroupIds, onDone)");
    }
    if (!env_state_) return ThrowSys(env, SysError::of(ECANCELED, "ports"));
    uint64_t request = 0;
    SysError e;
    if (info[0].IsArray()) {
      Napi::Array a = info[0].As<Napi::Array>();
      std::vector<unsigned long long> ids;
      for (uint32_t i = 0; i < a.Length(); ++i) {
        Napi::Value v = a.Get(i);
        bool lossless = false;
        if (!v.IsBigInt()) return ThrowType(env, "ports(cgroupIds): bigints");
        ids.push_back(v.As<Napi::BigInt>().Uint64Value(&lossless));
      }
      e = env_state_->ports_of_cgroup_ids(std::move(ids), &request);
    } else if (info[0].IsString()) {
      e = env_state_->ports_of_cgroup(info[0].As<Napi::String>().Utf8Value(), &request);
    } else {
      e = env_state_->ports(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()), &request);
    }
    if (e) return ThrowSys(env, e);
    ports_callbacks_[request] = Napi::Persistent(info[1].As<Napi::Function>());
    return env.Undefined();
  }

  Napi::Value ProcessInfoOf(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Array out = Napi::Array::New(env);
    if (info.Length() < 1 || !info[0].IsArray()) return out;
    Napi::Array pids = info[0].As<Napi::Array>();
    uint32_t n = 0;
    for (uint32_t i = 0; i < pids.Length(); ++i) {
      ProcessInfo p;
      if (read_process_info(pids.Get(i).As<Napi::Number>().Int32Value(), &p)) {
        out.Set(n++, process_info_object(env, p));
      }
    }
    return out;
  }

  // pipe() -> [readFd, writeFd], both CLOEXEC: stdio pipes made before the
  // call starts (a queued call already has its streams).
  Napi::Value Pipe(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return ThrowSys(env, SysError::from_errno("pipe2"));
    Napi::Array a = Napi::Array::New(env, 2);
    a.Set(0u, p[0]);
    a.Set(1u, p[1]);
    return a;
  }

  uint64_t StreamId(const Napi::CallbackInfo& info) {
    return info.Length() > 0 && info[0].IsNumber() ? static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()) : 0;
  }

  // streamOpen(kind, onEvent) -> [id, childFd, ourFd]: a pipe (a socketpair
  // for kind 3) whose end the addon reads or writes (loop/streams.h): kind
  // 0 run()'s output, 1 the child writes, 2 the child reads, 3 both. The
  // child's end (close-on-exec) is the child's stdio entry; ourFd is for
  // ioctls and for handing it to another call, never to read or close.
  Napi::Value StreamOpen(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsFunction()) return ThrowType(env, "streamOpen(kind, onEvent)");
    int kind = info[0].As<Napi::Number>().Int32Value();
    if (kind < Streams::kOutput || kind > Streams::kDuplex) return ThrowType(env, "streamOpen(kind, onEvent)");
    if (!env_state_) return ThrowSys(env, SysError::of(ECANCELED, "pipe2"));
    uint64_t id = 0;
    Fd child_end;
    int our_fd = -1;
    if (SysError e = env_state_->streams().open(static_cast<Streams::Kind>(kind), &id, &child_end, &our_fd)) {
      return ThrowSys(env, e);
    }
    pipe_callbacks_[id] = Napi::Persistent(info[1].As<Napi::Function>());
    Napi::Array a = Napi::Array::New(env, 3);
    a.Set(0u, Napi::Number::New(env, static_cast<double>(id)));
    a.Set(1u, child_end.release());
    a.Set(2u, our_fd);
    return a;
  }

  // streamAdopt(fd, onEvent) -> id: a pty master, the addon's from now on
  // (closed by it, also when this throws).
  Napi::Value StreamAdopt(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsFunction()) return ThrowType(env, "streamAdopt(fd, onEvent)");
    Fd fd(info[0].As<Napi::Number>().Int32Value());
    if (!env_state_) return ThrowSys(env, SysError::of(ECANCELED, "fcntl"));
    uint64_t id = 0;
    if (SysError e = env_state_->streams().adopt(std::move(fd), &id)) return ThrowSys(env, e);
    pipe_callbacks_[id] = Napi::Persistent(info[1].As<Napi::Function>());
    return Napi::Number::New(env, static_cast<double>(id));
  }

  // streamRead(id, reading): JavaScript wants chunks, or has enough for now.
  Napi::Value StreamRead(const Napi::CallbackInfo& info) {
    if (env_state_ && info.Length() > 1) {
      if (info[1].ToBoolean().Value()) {
        env_state_->streams().read_start(StreamId(info));
      } else {
        env_state_->streams().read_stop(StreamId(info));
      }
    }
    return info.Env().Undefined();
  }

  // streamWrite(id, buffer) -> false (all in the pipe), true (an event 2
  // will say), or the error (EPIPE…): nothing was or will be written.
  Napi::Value StreamWrite(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[1].IsBuffer()) return ThrowType(env, "streamWrite(id, buffer)");
    if (!env_state_) return make_error(env, SysError::of(EBADF, "write"));
    Napi::Buffer<char> buf = info[1].As<Napi::Buffer<char>>();
    bool queued = false;
    if (SysError e = env_state_->streams().write(StreamId(info), buf.Data(), buf.Length(), &queued)) {
      return make_error(env, e);
    }
    return Napi::Boolean::New(env, queued);
  }

  // streamShutdown(id) -> undefined, or the error: no more writes.
  Napi::Value StreamShutdown(const Napi::CallbackInfo& info) {
    if (env_state_) {
      if (SysError e = env_state_->streams().shutdown(StreamId(info))) return make_error(info.Env(), e);
    }
    return info.Env().Undefined();
  }

  // streamEnd(id): stop waiting for EOF; what the pipe holds now still
  // comes, then the end, on a later turn.
  Napi::Value StreamEnd(const Napi::CallbackInfo& info) {
    if (env_state_) env_state_->streams().finish(StreamId(info));
    return info.Env().Undefined();
  }

  // streamClose(id): closed now, no more events.
  Napi::Value StreamClose(const Napi::CallbackInfo& info) {
    uint64_t id = StreamId(info);
    if (env_state_) env_state_->streams().close(id);
    pipe_callbacks_.erase(id);
    return info.Env().Undefined();
  }

  // streamRef(id, ref): whether the stream keeps the loop alive while it
  // reads or writes.
  Napi::Value StreamRef(const Napi::CallbackInfo& info) {
    if (env_state_ && info.Length() > 1) env_state_->streams().set_ref(StreamId(info), info[1].ToBoolean().Value());
    return info.Env().Undefined();
  }

  // setRef(id, ref): whether the call keeps the event loop alive.
  Napi::Value SetRef(const Napi::CallbackInfo& info) {
    if (env_state_ && info.Length() >= 2 && info[0].IsNumber()) {
      env_state_->set_referenced(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()),
                                info[1].ToBoolean().Value());
    }
    return info.Env().Undefined();
  }

  // retire(id) -> [user µs, system µs]: the call's cgroup leaf names a job,
  // no later call may get it; what its cpu.stat said when the call began.
  Napi::Value Retire(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    CpuCounters base;
    if (env_state_ && info.Length() > 0 && info[0].IsNumber()) {
      env_state_->retire(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()), &base);
    }
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, Napi::Number::New(env, base.user_usec));
    out.Set(1u, Napi::Number::New(env, base.system_usec));
    // memory.peak when the call began (-1: a new leaf, or none): a reused
    // leaf's peak is this call's only once it grew past it.
    out.Set(2u, Napi::Number::New(env, base.limits.has_memory_peak ? static_cast<double>(base.limits.memory_peak) : -1));
    return out;
  }

  // settle(id) -> true once the command exec'd, or the error of the step
  // that failed: waits for a pending exec's report (no event says it).
  Napi::Value Settle(const Napi::CallbackInfo& info) {
    Call* c = CallArg(info);
    if (!c) return Napi::Boolean::New(info.Env(), true);
    // settle(id, waitMs?): false when a shorter wait than the call's bound
    // ended before the exec reported.
    int wait_ms = Call::kExecReportWaitMs;
    if (info.Length() > 1 && info[1].IsNumber()) wait_ms = std::max(0, info[1].As<Napi::Number>().Int32Value());
    bool pending = false;
    SysError e = c->settle_exec(wait_ms, &pending);
    if (e) return make_error(info.Env(), e);
    return Napi::Boolean::New(info.Env(), !pending);
  }

  Napi::Value CloseFd(const Napi::CallbackInfo& info) {
    if (info.Length() > 0 && info[0].IsNumber()) ::close(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  // subtreePrefix() -> "proctree-<pid>-<random>", the same in every worker.
  Napi::Value SubtreePrefix(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), subtree_prefix());
  }

  // cgroup2Hierarchies(mountinfo?) -> [{ mount, root }]: one mount per cgroup2
  // hierarchy, of /proc/self/mountinfo or of the text given.
  Napi::Value Cgroup2Hierarchies(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::string text;
    if (info.Length() > 0 && info[0].IsString()) {
      text = info[0].As<Napi::String>().Utf8Value();
    } else if (!read_mountinfo(&text)) {
      return ThrowSys(env, SysError::from_errno("open", "/proc/self/mountinfo"));
    }
    std::vector<Cgroup2Mount> mounts = cgroup2_hierarchies(text);
    Napi::Array out = Napi::Array::New(env, mounts.size());
    for (size_t i = 0; i < mounts.size(); ++i) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("mount", mounts[i].mount);
      o.Set("root", mounts[i].root);
      out.Set(static_cast<uint32_t>(i), o);
    }
    return out;
  }

  // cgroupMembers(path) -> every pid in that cgroup and the cgroups below it
  // ([] when it is gone).
  Napi::Value CgroupMembers(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) return ThrowType(env, "cgroupMembers(path)");
    CgroupDir dir;
    std::vector<pid_t> pids;
    if (!CgroupDir::open_existing(info[0].As<Napi::String>().Utf8Value(), &dir)) dir.read_procs(&pids);
    dir.close();
    Napi::Array a = Napi::Array::New(env, pids.size());
    for (size_t i = 0; i < pids.size(); ++i) a.Set(static_cast<uint32_t>(i), pids[i]);
    return a;
  }

  // ptyResize(masterFd, cols, rows): TIOCSWINSZ (the foreground process
  // group gets SIGWINCH).
  Napi::Value PtyResize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) {
      return ThrowType(env, "ptyResize(fd, cols, rows)");
    }
    if (SysError e = resize_pty(info[0].As<Napi::Number>().Int32Value(),
                                static_cast<unsigned short>(info[1].As<Napi::Number>().Uint32Value()),
                                static_cast<unsigned short>(info[2].As<Napi::Number>().Uint32Value()))) {
      return ThrowSys(env, e);
    }
    return env.Undefined();
  }

  // ptyForeground(masterFd) -> the terminal's foreground process group, or -1.
  Napi::Value PtyForeground(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsNumber()) return Napi::Number::New(info.Env(), -1);
    return Napi::Number::New(info.Env(), pty_foreground(info[0].As<Napi::Number>().Int32Value()));
  }

  static Napi::Object probe_object(Napi::Env env, const Probe& p) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("ok", p.ok);
    if (!p.ok) {
      o.Set("errno", errno_name(p.err));
      if (p.syscall[0]) o.Set("syscall", p.syscall);
    }
    if (!p.detail.empty()) o.Set("detail", p.detail);
    return o;
  }

  // probe(helperPath) -> { location, probes: { name: { ok, errno?, syscall?, detail? } } }
  // Blocks for a few milliseconds (see probe.h); the facade caches it.
  Napi::Value ProbeHost(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!env_state_) return ThrowSys(env, SysError::of(ECANCELED, "probe"));
    if (info.Length() < 1 || !info[0].IsString()) return ThrowType(env, "probe(helperPath)");
    HostProbes h = probe_host(info[0].As<Napi::String>().Utf8Value(), env_state_->child_stack());
    Napi::Object out = Napi::Object::New(env);
    if (h.cgroup2.ok) {
      Napi::Object loc = Napi::Object::New(env);
      loc.Set("mount", h.location.mount);
      loc.Set("own", h.location.own);
      loc.Set("ownPath", h.location.own_path);
      out.Set("location", loc);
    } else {
      out.Set("location", env.Null());
    }
    Napi::Object probes = Napi::Object::New(env);
    probes.Set("cgroup2", probe_object(env, h.cgroup2));
    probes.Set("delegation", probe_object(env, h.delegation));
    probes.Set("clone3", probe_object(env, h.clone3));
    probes.Set("cloneIntoCgroup", probe_object(env, h.clone_into_cgroup));
    probes.Set("pidfd", probe_object(env, h.pidfd));
    probes.Set("pidfdSendSignal", probe_object(env, h.pidfd_send_signal));
    probes.Set("waitidPidfd", probe_object(env, h.waitid_pidfd));
    probes.Set("freeze", probe_object(env, h.freeze));
    probes.Set("cgroupKill", probe_object(env, h.cgroup_kill));
    probes.Set("pidns", probe_object(env, h.pidns));
    probes.Set("userns", probe_object(env, h.userns));
    probes.Set("subreaper", probe_object(env, h.subreaper));
    probes.Set("helper", probe_object(env, h.helper));
    probes.Set("userManager", probe_object(env, h.user_manager));
    out.Set("probes", probes);
    return out;
  }

  // --- pause and resume; limits --------------------------------------------

  // pause(id, paused) -> undefined, or the error (ENOTSUP: the tier or the
  // host cannot freeze; ESRCH: the tree is gone or being stopped). A Frozen
  // event follows once cgroup.events shows the state asked for.
  Napi::Value Pause(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsBoolean()) return ThrowType(env, "pause(id, paused)");
    Call* c = CallArg(info);
    if (!c) return make_error(env, SysError::of(ESRCH, "cgroup.freeze"));
    if (SysError e = c->set_paused(info[1].As<Napi::Boolean>().Value())) return make_error(env, e);
    return env.Undefined();
  }

  // limitsProbe() -> { parent, available: { memory, pids, cpu }, reason }
  // | { error }: where this harness's subtrees go (its cgroup, or the one
  // its leaf sits in) and which limits their leaves can have there (enabled,
  // or ours to enable); reason: why the others cannot, and the fix. File
  // reads only (a few, cached by the facade).
  Napi::Value LimitsProbe(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object out = Napi::Object::New(env);
    CgroupLocation loc;
    LimitsReach reach;
    SysError e = locate_cgroup2(&loc);
    std::string parent = e ? std::string() : subtree_parent(loc);
    if (!e) e = limits_reach(loc.mount, parent, &reach);
    if (e) {
      out.Set("error", make_error(env, e));
      return out;
    }
    out.Set("parent", parent);
    out.Set("available", controllers_object(env, reach.available));
    out.Set("reason", reach.reason);
    return out;
  }

  // shutdown(waitMs): synchronous, for process 'exit'.
  Napi::Value Shutdown(const Napi::CallbackInfo& info) {
    int wait_ms = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 2000;
    if (env_state_) env_state_->shutdown_sync(wait_ms);
    return info.Env().Undefined();
  }

  Napi::Env env_;
  Environment* env_state_ = nullptr;
  napi_async_context async_context_ = nullptr;
  napi_threadsafe_function tsfn_ = nullptr;
  std::unordered_map<uint64_t, Napi::FunctionReference> callbacks_;
  // Streams ids (their own numbering) -> onEvent, until the stream is closed.
  std::unordered_map<uint64_t, Napi::FunctionReference> pipe_callbacks_;
  // ports() requests -> onDone, until answered.
  std::unordered_map<uint64_t, Napi::FunctionReference> ports_callbacks_;
};

}  // namespace
}  // namespace proctree

using ProctreeAddon = proctree::Addon;
NODE_API_ADDON(ProctreeAddon)
